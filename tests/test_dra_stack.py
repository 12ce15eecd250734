"""DRA pools in a whole stack: which DaemonSets reach their nodes, how their drivers are judged ready, what the
stack exports, and the configurations refused before anything is registered."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from components.config import ConfigError, load_config
from gpustack import schema
from stacktest import bag, container, env_of, objects, render, render_stack, stack_config
from test_workloads import daemonsets_by_pool

DRA = stack_config("dra")


def problems(config: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as caught:
        load_config(bag(config))
    return caught.value.problems


def pool_edit(**keys: Any) -> dict[str, Any]:
    config = copy.deepcopy(DRA)
    config["gpu-stack:nodePools"][0].update(keys)
    return config


def test_a_dra_pool_runs_the_dra_driver_and_validator_and_never_the_device_plugin():
    assert daemonsets_by_pool(render_stack("dra")) == {
        "gb200-nvl72": {
            "gpu-stack-node-labeler",
            "node-feature-discovery-worker",  # NFD labels every node, whatever its type
            "gpu-stack-node-inventory",
            "nvidia-driver-daemonset-racks-dra",
            "nvidia-container-toolkit-daemonset",
            "nvidia-dra-driver-kubelet-plugin",
            "nvidia-dra-validator",
            # DCGM and its exporter in their DRA flavour, with an adminAccess claim on the node's GPUs
            "nvidia-dcgm-dra",
            "nvidia-dcgm-exporter-dra",
            "gpu-feature-discovery",
            "nvidia-mig-manager",
        },
        "l40s-inference": {
            "gpu-stack-node-labeler",
            "node-feature-discovery-worker",  # NFD labels every node, whatever its type
            "gpu-stack-node-inventory",
            "nvidia-driver-daemonset-canary",
            "nvidia-container-toolkit-daemonset",
            "nvidia-operator-validator",
            "nvidia-device-plugin-daemonset",
            "nvidia-dcgm",
            "nvidia-dcgm-exporter",
            "gpu-feature-discovery",
        },
    }


def test_a_dra_pools_driver_is_ready_once_the_dra_validator_vouched_for_the_node():
    daemonsets = objects(render_stack("dra"), "DaemonSet")
    probe = container(daemonsets["nvidia-driver-daemonset-racks-dra"], "nvidia-driver-ctr")["readinessProbe"]["exec"]["command"][2]
    assert probe == " && ".join(f"test -f /run/nvidia/validations/{f}" for f in ("driver-ready", "toolkit-ready", "dra-ready"))
    plugin_probe = container(daemonsets["nvidia-driver-daemonset-canary"], "nvidia-driver-ctr")["readinessProbe"]["exec"]["command"][2]
    assert plugin_probe.endswith("test -f /run/nvidia/validations/plugin-ready")


def test_the_dra_validator_runs_the_node_checks_before_claiming_a_gpu():
    validator = objects(render_stack("dra"), "DaemonSet")["nvidia-dra-validator"]
    spec = validator["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["initContainers"]] == ["driver-validation", "toolkit-validation", "gpu-validation"]
    assert spec["resourceClaims"] == [{"name": "validation-gpu", "resourceClaimTemplateName": "nvidia-dra-validator-gpu"}]
    assert {v["name"] for v in spec["volumes"]} == {"run-nvidia-validations", "driver-install-dir", "host-root", "host-dev-char"}


def test_the_gates_judge_dra_nodes_only_where_there_are_any():
    jobs = objects(render_stack("dra"), "Job")
    env = lambda job: {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}  # noqa: E731
    assert env(jobs["gpu-stack-validation"])["DRA_VALIDATOR"] == "true"
    # the canary wave is the device-plugin pool
    assert "DRA_VALIDATOR" not in env(jobs["gpu-stack-gate-l40s-inference"])
    assert "DRA_VALIDATOR" not in env(objects(render_stack("prod-managed"), "Job")["gpu-stack-validation"])


def test_the_namespace_admits_the_validators_admin_access_claim():
    recording = render_stack("dra")
    (namespace,) = objects(recording, "Namespace").values()
    assert namespace["metadata"]["labels"]["resource.kubernetes.io/admin-access"] == "true"
    (plain,) = objects(render_stack("prod-managed"), "Namespace").values()
    assert "resource.kubernetes.io/admin-access" not in plain["metadata"]["labels"]


def test_device_classes_use_the_api_version_the_cluster_serves():
    classes = objects(render_stack("dra"), "DeviceClass")
    assert sorted(classes) == [
        "compute-domain-daemon.nvidia.com",
        "compute-domain-default-channel.nvidia.com",
        "gpu.nvidia.com",
        "mig.nvidia.com",
        "vfio.gpu.nvidia.com",
    ]
    assert {c["apiVersion"] for c in classes.values()} == {"resource.k8s.io/v1"}


def test_example_claims_are_a_stack_output_that_validates():
    examples = render_stack("dra").outputs["draExampleClaims"]
    assert [e["kind"] for e in examples] == ["ResourceClaimTemplate", "ResourceClaimTemplate", "ComputeDomain"]
    for example in examples:
        for version in ("1.34", "1.35"):
            assert schema.validate(example, version) == []
    assert "draExampleClaims" not in render_stack("prod-managed").outputs


def test_without_compute_domains_no_controller_or_crds():
    config = copy.deepcopy(DRA)
    config["gpu-stack:dra"] = {"computeDomains": False}
    recording = render(config, stack="dra")
    assert [crd for crd in objects(recording, "CustomResourceDefinition") if not crd.endswith(".nfd.k8s-sigs.io")] == []
    assert "nvidia-dra-driver-controller" not in objects(recording, "Deployment")
    assert sorted(objects(recording, "DeviceClass")) == ["gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com"]


# --- refusals --------------------------------------------------------------------------------------------------


def test_dra_needs_kubernetes_1_34_on_every_declared_version():
    config = copy.deepcopy(DRA)
    config["gpu-stack:cluster"]["kubernetesVersions"] = ["1.33", "1.34"]
    ((key, message),) = problems(config)
    assert key == "gpu-stack:cluster.kubernetesVersions"
    assert message.startswith("DRA pools need Kubernetes 1.34 or later (got 1.33)")


def test_time_slicing_is_a_claims_business_on_dra_pools():
    config = pool_edit(sharing={"strategy": "time-slicing", "replicas": 2})
    assert problems(config) == [
        (
            "gpu-stack:nodePools[0].sharing.strategy",
            "'time-slicing' configures the device plugin, which DRA pools do not run; with DRA a claim asks for "
            "sharing in its GpuConfig; allowed values here: none, mig-single, mig-mixed",
        )
    ]


def test_vm_pools_do_not_allocate_by_dra():
    config = stack_config("kubevirt")
    config["gpu-stack:cluster"]["kubernetesVersions"] = ["1.34"]
    config["gpu-stack:nodePools"][1]["allocation"] = "dra"
    assert (
        "gpu-stack:nodePools[1].allocation",
        "only container pools allocate GPUs to pods, not 'vm-passthrough'; remove it",
    ) in problems(config)


def test_a_dra_block_without_dra_pools_is_refused():
    config = stack_config("prod-managed")
    config["gpu-stack:dra"] = {"computeDomains": True}
    assert problems(config) == [("gpu-stack:dra", "no pool has allocation: dra; remove this block")]


def test_dra_pools_need_the_node_labeller():
    config = copy.deepcopy(DRA)
    config["gpu-stack:components"] = {"nodeLabeler": False}
    config["gpu-stack:upgrade"] = {}
    assert ("gpu-stack:components.nodeLabeler", "DRA pools take the dra-driver deploy label from the node labeller: set it to true") in problems(config)


@pytest.mark.parametrize(
    ("edit", "key", "expected"),
    [
        ({"allocation": "claims"}, "gpu-stack:nodePools[0].allocation", "got 'claims'; allowed values: 'device-plugin', 'dra'"),
    ],
)
def test_bad_allocation_values_name_the_allowed_ones(edit, key, expected):
    assert expected in dict(problems(pool_edit(**edit)))[key]


@pytest.mark.parametrize(
    ("dra", "key", "expected"),
    [
        ({"computeDomains": "yes"}, "gpu-stack:dra.computeDomains", "got 'yes'; allowed values: true, false"),
        ({"imex": True}, "gpu-stack:dra.imex", "unknown key 'imex'; allowed keys: computeDomains"),
    ],
)
def test_bad_dra_settings_name_the_key(dra, key, expected):
    config = copy.deepcopy(DRA)
    config["gpu-stack:dra"] = dra
    assert expected in dict(problems(config))[key]


@pytest.mark.parametrize(("value", "expected"), [("latest", "'latest' is not a reviewable version"), ("v0.5 .0", "neither an image tag")])
def test_bad_dra_driver_versions_are_refused(value, expected):
    config = copy.deepcopy(DRA)
    config["gpu-stack:versions"] = {"draDriver": value}
    assert expected in dict(problems(config))["gpu-stack:versions.draDriver"]


# --- feature gates -------------------------------------------------------------------------------------------------


def test_feature_gates_reach_every_driver_container_and_mps_gets_its_rights():
    recording = render_stack("dra")
    gates = "MPSSupport=true,NVMLDeviceHealthCheck=true,TimeSlicingSettings=true"
    plugin = objects(recording, "DaemonSet")["nvidia-dra-driver-kubelet-plugin"]
    for name in ("gpus", "compute-domains"):
        assert env_of(container(plugin, name))["FEATURE_GATES"] == gates
    controller = objects(recording, "Deployment")["nvidia-dra-driver-controller"]
    assert env_of(controller["spec"]["template"]["spec"]["containers"][0])["FEATURE_GATES"] == gates
    deployments = {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}
    assert deployments in objects(recording, "Role")["nvidia-dra-driver-kubeletplugin"]["rules"]
    # PassthroughSupport is off: no host /sys (the vfio class is rendered anyway, as the operator renders it)
    assert "vfio.gpu.nvidia.com" in objects(recording, "DeviceClass")
    assert "sysfs" not in {v["name"] for v in plugin["spec"]["template"]["spec"]["volumes"]}


def test_without_feature_gates_the_driver_keeps_its_defaults():
    config = copy.deepcopy(DRA)
    config["gpu-stack:dra"] = {"computeDomains": True}
    plugin = objects(render(config, stack="dra"), "DaemonSet")["nvidia-dra-driver-kubelet-plugin"]
    assert "FEATURE_GATES" not in env_of(container(plugin, "gpus"))


@pytest.mark.parametrize(
    ("gates", "key", "expected"),
    [
        ({"MpsSupport": True}, "gpu-stack:dra.featureGates", "'MpsSupport' is not a gate of the DRA driver; known gates: TimeSlicingSettings, MPSSupport"),
        ({"mps-support": True}, "gpu-stack:dra.featureGates", "not a feature gate name (CamelCase"),
        ({"MPSSupport": "yes"}, "gpu-stack:dra.featureGates.MPSSupport", "allowed values: true, false"),
        ({"IMEXDaemonsWithDNSNames": False}, "gpu-stack:dra.featureGates.IMEXDaemonsWithDNSNames", "ComputeDomainCliques needs IMEXDaemonsWithDNSNames: true"),
        ({"DeviceMetadata": True}, "gpu-stack:dra.featureGates.DeviceMetadata", "DeviceMetadata needs PassthroughSupport: true"),
        ({"DynamicMIG": True, "PassthroughSupport": True}, "gpu-stack:dra.featureGates.DynamicMIG", "cannot both be on"),
        ({"PassthroughSupport": True, "NVMLDeviceHealthCheck": True}, "gpu-stack:dra.featureGates.PassthroughSupport", "cannot both be on"),
    ],
)
def test_bad_feature_gates_name_the_gate(gates, key, expected):
    config = copy.deepcopy(DRA)
    config["gpu-stack:dra"] = {"featureGates": gates}
    found = problems(config)
    assert any(k == key and expected in m for k, m in found), found


def test_dynamic_mig_is_refused_where_the_mig_manager_sets_a_layout():
    config = pool_edit(sharing={"strategy": "mig-mixed", "migLayout": "all-1g.23gb"})
    config["gpu-stack:dra"] = {"featureGates": {"DynamicMIG": True}}
    found = dict(problems(config))
    assert "with DynamicMIG the DRA driver creates MIG devices per claim" in found["gpu-stack:nodePools[0].sharing.strategy"]


def test_feature_gates_without_dra_pools_are_refused():
    config = stack_config("prod-managed")
    config["gpu-stack:dra"] = {"featureGates": {"MPSSupport": True}}
    assert problems(config) == [("gpu-stack:dra", "no pool has allocation: dra; remove this block")]


# --- DCGM and its exporter on DRA nodes ---------------------------------------------------------------------------

ADMIN_CLAIM = {"requests": [{"name": "admin-gpus", "exactly": {"adminAccess": True, "allocationMode": "All", "deviceClassName": "gpu.nvidia.com"}}]}


def test_dcgm_and_its_exporter_claim_the_dra_nodes_gpus_with_admin_access():
    recording = render_stack("dra")
    templates = objects(recording, "ResourceClaimTemplate")
    for name in ("nvidia-dcgm-admin", "nvidia-dcgm-exporter-admin"):
        assert templates[name]["spec"]["spec"]["devices"] == ADMIN_CLAIM
    daemonsets = objects(recording, "DaemonSet")
    for name, template, deploy in (
        ("nvidia-dcgm-dra", "nvidia-dcgm-admin", "dcgm-dra"),
        ("nvidia-dcgm-exporter-dra", "nvidia-dcgm-exporter-admin", "dcgm-exporter-dra"),
    ):
        spec = daemonsets[name]["spec"]["template"]["spec"]
        assert spec["resourceClaims"] == [{"name": "admin-gpus", "resourceClaimTemplateName": template}]
        assert spec["nodeSelector"] == {f"nvidia.com/gpu.deploy.{deploy}": "true"}
        assert "runtimeClassName" not in spec  # the claim brings the GPUs, not the NVIDIA runtime
        assert spec["containers"][0]["resources"] == {"claims": [{"name": "admin-gpus"}]}
        pools = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert pools[0]["matchExpressions"][0]["values"] == ["gb200-nvl72"]
    exporter = daemonsets["nvidia-dcgm-exporter-dra"]
    env = env_of(container(exporter, "nvidia-dcgm-exporter-dra"))
    assert env["KUBERNETES_ENABLE_DRA"] == "true"
    assert env["DCGM_REMOTE_HOSTENGINE_INFO"] == "nvidia-dcgm-dra:5555"
    assert env["DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS"] == "true"
    assert exporter["spec"]["template"]["spec"]["automountServiceAccountToken"] is True
    assert objects(recording, "Service")["nvidia-dcgm-dra"]["spec"]["internalTrafficPolicy"] == "Local"
    assert "nvidia-dcgm-exporter-dra" in objects(recording, "Service")
    # the device-plugin pool keeps the plain flavour, on its own engine
    assert env_of(container(daemonsets["nvidia-dcgm-exporter"], "nvidia-dcgm-exporter"))["DCGM_REMOTE_HOSTENGINE_INFO"] == "nvidia-dcgm:5555"


def test_the_dra_exporter_resolves_claims_through_the_api():
    recording = render_stack("dra")
    read = ["get", "list", "watch"]
    assert objects(recording, "ClusterRole")["nvidia-dcgm-exporter-dra"]["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": read},
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": read},
    ]
    assert {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": read} in objects(recording, "Role")["nvidia-dcgm-exporter-dra"]["rules"]
    assert {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": read} in objects(recording, "Role")["nvidia-dcgm-dra"]["rules"]


def test_a_dra_only_stack_runs_no_plain_dcgm_exporter():
    config = copy.deepcopy(DRA)
    config["gpu-stack:nodePools"] = config["gpu-stack:nodePools"][:1]
    config["gpu-stack:upgrade"] = {}
    daemonsets = objects(render(config, stack="dra"), "DaemonSet")
    assert "nvidia-dcgm-exporter-dra" in daemonsets and "nvidia-dcgm-dra" in daemonsets
    assert "nvidia-dcgm-exporter" not in daemonsets and "nvidia-dcgm" not in daemonsets


# --- per-container settings of the kubelet plugin ---------------------------------------------------------------

PLUGIN_KEY = "gpu-stack:dra.kubeletPlugin"


def with_plugin(plugin: dict[str, Any], **dra: Any) -> dict[str, Any]:
    config = copy.deepcopy(DRA)
    config["gpu-stack:dra"] = {**config["gpu-stack:dra"], "kubeletPlugin": plugin, **dra}
    return config


def test_each_plugin_container_takes_its_own_resources_and_health_port():
    plugin = objects(render(with_plugin({
        "gpus": {"resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}, "healthcheckPort": 52516},
        "computeDomains": {"resources": {"requests": {"cpu": "50m"}}},
    }), stack="dra"), "DaemonSet")["nvidia-dra-driver-kubelet-plugin"]
    gpus, domains = container(plugin, "gpus"), container(plugin, "compute-domains")
    assert gpus["resources"] == {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
    assert domains["resources"] == {"requests": {"cpu": "50m"}}
    assert env_of(gpus)["HEALTHCHECK_PORT"] == "52516" and gpus["livenessProbe"]["grpc"]["port"] == 52516
    assert gpus["startupProbe"]["grpc"]["port"] == 52516
    # unset: NVIDIA's default port
    assert env_of(domains)["HEALTHCHECK_PORT"] == "51515" and domains["livenessProbe"]["grpc"]["port"] == 51515


def test_by_default_the_plugin_containers_are_as_nvidias_asset():
    plugin = objects(render_stack("dra"), "DaemonSet")["nvidia-dra-driver-kubelet-plugin"]
    assert "resources" not in container(plugin, "gpus")
    assert env_of(container(plugin, "gpus"))["HEALTHCHECK_PORT"] == "51516"


@pytest.mark.parametrize(
    ("plugin", "dra", "key", "fragment"),
    [
        ({"gpus": {"healthcheckPort": 80}}, {}, f"{PLUGIN_KEY}.gpus.healthcheckPort", "greater than or equal to 1024"),
        ({"gpus": {"healthcheckPort": 70000}}, {}, f"{PLUGIN_KEY}.gpus.healthcheckPort", "less than or equal to 65535"),
        ({"gpus": {"healthcheckPort": 8080}}, {}, f"{PLUGIN_KEY}.gpus.healthcheckPort", "is a metrics port"),
        ({"gpus": {"healthcheckPort": 51515}}, {}, f"{PLUGIN_KEY}.computeDomains.healthcheckPort", "the gpus container's health port too"),
        ({"computeDomains": {"healthcheckPort": 52000}}, {"computeDomains": False}, f"{PLUGIN_KEY}.computeDomains", "only with dra.computeDomains: true"),
        ({"gpus": {"resources": {"requests": {"cpu": "lots"}}}}, {}, f"{PLUGIN_KEY}.gpus.resources.requests", "quantity"),
        ({"gpus": {"port": 1}}, {}, f"{PLUGIN_KEY}.gpus.port", "unknown key"),
    ],
    ids=["privileged port", "beyond 65535", "metrics port", "same port", "no compute domains", "bad quantity", "typo"],
)
def test_bad_plugin_container_settings_name_the_key(plugin, dra, key, fragment):
    found = problems(with_plugin(plugin, **dra))
    assert any(k.startswith(key) and fragment in m for k, m in found), found


def test_plugin_resources_are_set_in_one_place():
    config = with_plugin({"gpus": {"resources": {"requests": {"cpu": "100m"}}}})
    config.setdefault("gpu-stack:operands", {})["draDriver"] = {"resources": {"requests": {"cpu": "200m"}}}
    found = problems(config)
    assert any(k == f"{PLUGIN_KEY}.gpus.resources" and "not both" in m for k, m in found), found
