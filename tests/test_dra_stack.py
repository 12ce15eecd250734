"""DRA pools in a whole stack: which DaemonSets reach their nodes, how their drivers are judged ready, what the
stack exports, and the configurations refused before anything is registered."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from components.config import ConfigError, load_config
from gpustack import schema
from stacktest import bag, container, objects, render, render_stack, stack_config
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
            "nvidia-dcgm-exporter",
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
    assert sorted(objects(recording, "DeviceClass")) == ["gpu.nvidia.com", "mig.nvidia.com"]


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
