"""DRA mode, object by object, against NVIDIA's GPUCluster assets (GO:manifests/state-dra-driver, state-dra-validation)
and the DRA driver's Helm chart: the resource.k8s.io version per Kubernetes version, the example claims, the
DraDriver and DraValidator components rendered on their own under mocks, strict schemas for every object on every
Kubernetes version it targets, the scripts the containers run, and the single-device-allocator policy."""

from __future__ import annotations

import copy
import os
import subprocess
from pathlib import Path
from typing import Optional

import pytest

from components.catalogs import consts
from components.kit import dra_plugin
from components.kit.dra_api import example_claim_templates, resource_api_version
from components.states import device_plugin as device_plugin_module
from components.states import dra_driver as dra
from components.states import dra_validator
from components.states import validator as operator_validator
from components.states.dra_driver import DraDriver
from components.states.dra_validator import DraValidator
from gpustack import schema
from gpustack.crd_schemas import crd_validator
from gpustack.mockrun import Recording, run_program
from gpustack.render import kubernetes_object
from gpustack.policyrun import run_policies
from operandtest import NAMESPACE_FIELD, NODE_NAME, SCC, VALIDATOR_IMAGE, host_paths, mounts, names, pod_spec, rules
from policytest import edit_pools, edited, messages, registration
from stacktest import bag, container, env_of, objects, stack_config

from gpu_stack_policies import single_device_allocator as allocator_policy

V1, V1BETA2, V1BETA1 = "resource.k8s.io/v1", "resource.k8s.io/v1beta2", "resource.k8s.io/v1beta1"
DRA_IMAGE = "nvcr.io/nvidia/dra-driver-nvidia-gpu:v0.5.0"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
ALL_MINORS = ("1.32", "1.33", "1.34", "1.35", "1.36", "1.37")


# --- resource.k8s.io version per Kubernetes version ---------------------------------------------------------


@pytest.mark.parametrize(
    "versions, expected",
    [
        (["1.32"], V1BETA1),
        (["1.33"], V1BETA2),
        (["1.34"], V1),
        (["1.35"], V1),
        (["1.37"], V1),
        (["v1.34.2"], V1),
        (["1.32", "1.35"], V1BETA1),
        (["1.35", "1.33"], V1BETA2),
        (["1.34", "1.35", "1.36"], V1),
    ],
)
def test_the_oldest_declared_version_picks_the_newest_api_all_serve(versions, expected):
    assert resource_api_version(versions) == expected


def test_the_chosen_version_is_served_by_every_declared_version_according_to_the_schemas():
    # kubernetes-validate carries a DeviceClass schema exactly for the versions a release serves
    for minor in ALL_MINORS:
        chosen = resource_api_version([minor])
        for later in ALL_MINORS[ALL_MINORS.index(minor) :]:
            assert schema.validator(later, chosen, "DeviceClass") is not None, (chosen, later)
    assert schema.validator("1.33", V1, "DeviceClass") is None
    assert schema.validator("1.32", V1BETA2, "DeviceClass") is None


@pytest.mark.parametrize("versions, named", [(["1.31"], "1.31"), (["1.33", "1.30", "1.31"], "1.30, 1.31")])
def test_versions_before_1_32_are_refused_by_name(versions, named):
    with pytest.raises(ValueError) as error:
        resource_api_version(versions)
    assert f"declared: {named}" in str(error.value)
    assert "Kubernetes 1.32 or later" in str(error.value) and "DRA driver supports >=1.32" in str(error.value)


@pytest.mark.parametrize("versions", [[], ["1.x"], ["2.1"]])
def test_unreadable_version_lists_are_refused(versions):
    with pytest.raises(ValueError):
        resource_api_version(versions)


# --- DeviceClasses and example claims -------------------------------------------------------------------------


def test_device_class_selectors_are_the_drivers():
    assert dra.device_classes(False) == {
        "gpu.nvidia.com": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
        "mig.nvidia.com": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'",
        # rendered always, as the operator does; it selects nothing without the PassthroughSupport gate
        "vfio.gpu.nvidia.com": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'vfio'",
    }
    assert dra.device_classes(True) == {
        **dra.device_classes(False),
        "compute-domain-daemon.nvidia.com": (
            "device.driver == 'compute-domain.nvidia.com' && device.attributes['compute-domain.nvidia.com'].type == 'daemon'"
        ),
        "compute-domain-default-channel.nvidia.com": (
            "device.driver == 'compute-domain.nvidia.com' && device.attributes['compute-domain.nvidia.com'].type == 'channel'"
            " && device.attributes['compute-domain.nvidia.com'].id == 0"
        ),
    }


MIG_SELECTOR = [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"}}]


def test_example_claims_on_v1_nest_each_request_under_exactly():
    gpu, mig, domain = example_claim_templates(V1, True)
    assert gpu == {
        "apiVersion": V1,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "single-gpu"},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1}}
        ]}}},
    }
    assert mig["metadata"] == {"name": "mig-1g-10gb"}
    assert mig["spec"]["spec"]["devices"]["requests"] == [
        {"name": "mig", "exactly": {"deviceClassName": "mig.nvidia.com", "allocationMode": "ExactCount", "count": 1, "selectors": MIG_SELECTOR}}
    ]
    assert domain == {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": "nvlink-domain"},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "nvlink-domain-channel"}}},
    }


def test_example_claims_on_v1beta1_put_the_request_fields_on_the_request():
    examples = example_claim_templates(V1BETA1, False, mig_profile="3g.40gb")
    assert [e["kind"] for e in examples] == ["ResourceClaimTemplate", "ResourceClaimTemplate"]
    assert examples[1]["metadata"]["name"] == "mig-3g-40gb"
    assert examples[1]["spec"]["spec"]["devices"]["requests"] == [
        {
            "name": "mig",
            "deviceClassName": "mig.nvidia.com",
            "allocationMode": "ExactCount",
            "count": 1,
            "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '3g.40gb'"}}],
        }
    ]


@pytest.mark.parametrize("versions", [["1.32"], ["1.33"], ["1.34"], ["1.35"], ["1.32", "1.37"], ["1.33", "1.34"]])
def test_example_claims_pass_the_strict_schemas_of_every_declared_version(versions):
    examples = example_claim_templates(resource_api_version(versions), True, mig_profile="1g.10gb+me")
    for version in versions:
        for example in examples:
            assert schema.validate(example, version) == [], (version, example)


def test_the_example_compute_domain_is_checked_against_the_crd_schema():
    domain = example_claim_templates(V1, True)[2]
    assert list(crd_validator("resource.nvidia.com/v1beta1", "ComputeDomain").iter_errors(domain)) == []
    misspelt = copy.deepcopy(domain)
    misspelt["spec"]["channel"]["resourceClaimTemplateName"] = misspelt["spec"]["channel"].pop("resourceClaimTemplate")
    assert schema.validate(misspelt, "1.34")
    without_channel = copy.deepcopy(domain)
    del without_channel["spec"]["channel"]
    assert [p.message for p in schema.validate(without_channel, "1.34")] == ["spec: 'channel' is a required property"]


def test_example_claims_refuse_unknown_api_versions_and_profiles():
    with pytest.raises(ValueError, match="resource.k8s.io/v1alpha3"):
        example_claim_templates("resource.k8s.io/v1alpha3", False)
    with pytest.raises(ValueError, match="MIG profile"):
        example_claim_templates(V1, False, mig_profile="1g")


# --- the components rendered under mocks ------------------------------------------------------------------------

PROGRAM = """
import json
import pulumi_kubernetes as k8s
from components.catalogs import catalog
from components.config.images import image_path
from components.kit.builders import meta
from components.config import load_config, program_config
from components.states.device_plugin import DevicePlugin
from components.states.dra_driver import DraDriver
from components.states.dra_validator import DraValidator
from components.kit.stack_inputs import operands

ops = operands(load_config(program_config()))
image = image_path(catalog.DEFAULT_REGISTRY, *catalog.IMAGES["draDriver"])
driver = DraDriver("dra-driver", ops=ops, image=image, resource_api_version={api!r}, pools={pools!r},
                   compute_domains={compute_domains!r})
if {validator!r}:
    DraValidator("dra-validation", ops=ops, resource_api_version={api!r}, pools={pools!r}, depends_on=[driver])
if {device_plugin!r}:
    DevicePlugin("state-device-plugin", ops=ops, mig_strategy="single", shared_pools=[], toolkit_enabled=True)
    document = {{"version": 1, "pools": {pools_document!r}}}
    k8s.core.v1.ConfigMap("gpu-stack-node-pools", metadata=meta("gpu-stack-node-pools", ops.namespace),
                          data={{"node-pools.json": json.dumps(document)}})
"""

POOLS = ["dgx-gb200", "h100-dra"]
PLUGIN_POOL = {"name": "l4", "nodeSelector": {"gpu": "l4"}, "deployLabels": ["nvidia.com/gpu.deploy.device-plugin"], "labels": {}}
DRA_POOL = {"name": "h100-dra", "nodeSelector": {"gpu": "h100"}, "deployLabels": ["nvidia.com/gpu.deploy.dra-driver"], "labels": {}}
_renders: dict[str, Recording] = {}


def config(versions: list[str]) -> dict:
    cfg = stack_config("dev")
    cfg["gpu-stack:cluster"]["kubernetesVersions"] = versions
    cfg["gpu-stack:registry"] = {"pullSecrets": ["ngc-pull"]}
    return cfg


def render(
    tmp_path_factory,
    *,
    api: str = V1,
    compute_domains: bool = True,
    validator: bool = True,
    device_plugin: bool = False,
    pools: Optional[list[str]] = None,
    pools_document: Optional[list[dict]] = None,
) -> Recording:
    source = PROGRAM.format(
        api=api,
        pools=pools or POOLS,
        compute_domains=compute_domains,
        validator=validator,
        device_plugin=device_plugin,
        pools_document=pools_document or [],
    )
    if source not in _renders:
        program = tmp_path_factory.mktemp("dra")
        (program / "__main__.py").write_text(source)
        versions = ["1.34"] if api == V1 else ["1.32"]
        _renders[source] = run_program("test", bag(config(versions)), program_dir=program)
    return _renders[source]


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    return render(tmp_path_factory)


@pytest.fixture(scope="module")
def gpus_only(tmp_path_factory):
    return render(tmp_path_factory, api=V1BETA1, compute_domains=False, validator=False, pools=["a100-dra"])


def kube_objects(recording: Recording) -> list[dict]:
    return [kubernetes_object(r) for r in recording.registrations if r.is_kubernetes_object]


def plugin(recording: Recording) -> dict:
    return objects(recording, "DaemonSet")["nvidia-dra-driver-kubelet-plugin"]


def dependencies(recording: Recording, kind: str, name: str) -> set[tuple[str, str]]:
    by_urn = recording.by_urn()
    return {(by_urn[u].inputs.get("kind"), by_urn[u].inputs["metadata"]["name"]) for u in registration(recording, kind, name).dependencies}


def test_what_each_mode_renders(full, gpus_only):
    def inventory(recording):
        return sorted((o["kind"], o["metadata"]["name"]) for o in kube_objects(recording))

    plugin_rbac = [(k, "nvidia-dra-driver-kubeletplugin") for k in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount")]
    common = [
        ("DaemonSet", "nvidia-dra-driver-kubelet-plugin"),
        ("DeviceClass", "gpu.nvidia.com"),
        ("DeviceClass", "mig.nvidia.com"),
        ("DeviceClass", "vfio.gpu.nvidia.com"),
        ("ValidatingAdmissionPolicy", "resourceslices-policy-nvidia-dra-driver"),
        ("ValidatingAdmissionPolicyBinding", "resourceslices-policy-nvidia-dra-driver"),
        *plugin_rbac,
    ]
    assert inventory(gpus_only) == sorted(common)
    compute_domains = [
        ("CustomResourceDefinition", "computedomaincliques.resource.nvidia.com"),
        ("CustomResourceDefinition", "computedomains.resource.nvidia.com"),
        ("DaemonSet", "nvidia-dra-validator"),
        ("Deployment", "nvidia-dra-driver-controller"),
        ("DeviceClass", "compute-domain-daemon.nvidia.com"),
        ("DeviceClass", "compute-domain-default-channel.nvidia.com"),
        ("ResourceClaimTemplate", "nvidia-dra-validator-gpu"),
        *[(k, "nvidia-dra-driver-controller") for k in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount")],
        *[(k, "compute-domain-daemon-service-account") for k in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount")],
        *[(k, "nvidia-dra-validator") for k in ("Role", "RoleBinding", "ServiceAccount")],
    ]
    assert inventory(full) == sorted(common + compute_domains)


@pytest.mark.parametrize("case, api, versions", [("full", V1, ("1.34", "1.35", "1.36", "1.37")), ("gpus_only", V1BETA1, ALL_MINORS)])
def test_every_object_passes_the_strict_schema_of_every_version_it_targets(case, api, versions, request):
    recording = request.getfixturevalue(case)
    found = kube_objects(recording)
    assert {o["apiVersion"] for o in found if o["kind"] == "DeviceClass"} == {api}
    for version in versions:
        for obj in found:
            assert schema.validate(obj, version) == [], (version, obj["kind"], obj["metadata"]["name"])


def test_device_classes_carry_the_selectors_at_the_chosen_version(full, gpus_only):
    for recording, compute_domains in ((full, True), (gpus_only, False)):
        classes = objects(recording, "DeviceClass")
        assert {n: c["spec"] for n, c in classes.items()} == {
            n: {"selectors": [{"cel": {"expression": cel}}]} for n, cel in dra.device_classes(compute_domains).items()
        }
        assert all("namespace" not in c["metadata"] for c in classes.values())


# --- the kubelet plugin DaemonSet --------------------------------------------------------------------------------

PLUGIN_MOUNTS = [
    ("plugins-registry", "/var/lib/kubelet/plugins_registry", False, None),
    ("plugins", "/var/lib/kubelet/plugins", False, "Bidirectional"),
    ("cdi-root", "/var/run/cdi", False, None),
    ("run-nvidia-validations", "/run/nvidia/validations", True, None),
    ("host-root", "/host", True, "HostToContainer"),
    ("driver-install-dir", "/driver-root", False, "HostToContainer"),
]


def test_plugin_lands_only_on_dra_pool_nodes_with_the_deploy_label(full):
    ds = plugin(full)
    spec = pod_spec(ds)
    assert spec["nodeSelector"] == {"nvidia.com/gpu.deploy.dra-driver": "true"}
    assert spec["affinity"] == {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu-stack/pool", "operator": "In", "values": POOLS}]}]
            }
        }
    }
    assert spec["tolerations"] == [GPU_TOLERATION]
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["serviceAccountName"] == "nvidia-dra-driver-kubeletplugin"
    assert spec["imagePullSecrets"] == [{"name": "ngc-pull"}]
    assert "runtimeClassName" not in spec and "hostPID" not in spec
    # k8s-driver-manager waits for pods with this app label when it drains the plugin
    assert ds["spec"]["selector"] == {"matchLabels": {"app": "nvidia-dra-driver-kubelet-plugin"}}
    assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}}
    assert ds["spec"]["template"]["metadata"]["labels"] == {
        "app": "nvidia-dra-driver-kubelet-plugin",
        "app.kubernetes.io/name": "nvidia-dra-driver",
        "app.kubernetes.io/component": "nvidia-dra-driver-kubelet-plugin",
    }
    assert ds["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"


def test_plugin_validates_the_driver_itself_before_its_containers_start(full):
    ds = plugin(full)
    assert names(pod_spec(ds)["initContainers"]) == ["driver-validation"]
    init = container(ds, "driver-validation")
    assert init["image"] == VALIDATOR_IMAGE
    # The binary itself, as the asset runs it (the validator DaemonSets go through `sh -c`).
    assert init["command"] == ["nvidia-validator"] and "args" not in init
    assert [e["name"] for e in init["env"]] == [
        "WITH_WAIT",
        "COMPONENT",
        "DRIVER_VALIDATION_SKIP_GPU_INIT",
        "DISABLE_DEV_CHAR_SYMLINK_CREATION",
        "OPERATOR_NAMESPACE",
        "HOST_ROOT",
        "DRIVER_INSTALL_DIR",
        "DRIVER_INSTALL_DIR_CTR_PATH",
    ]
    assert env_of(init) == {
        "WITH_WAIT": "true",
        "COMPONENT": "driver",
        "DRIVER_VALIDATION_SKIP_GPU_INIT": "true",
        "DISABLE_DEV_CHAR_SYMLINK_CREATION": "true",
        "OPERATOR_NAMESPACE": NAMESPACE_FIELD,
        "HOST_ROOT": "/",
        "DRIVER_INSTALL_DIR": "/run/nvidia/driver",
        "DRIVER_INSTALL_DIR_CTR_PATH": "/driver-root",
    }
    assert init["securityContext"] == {"privileged": True, "runAsUser": 0}
    assert mounts(init) == [
        ("host-root", "/host", True, "HostToContainer"),
        ("driver-install-dir", "/driver-root", False, "HostToContainer"),
        ("run-nvidia-validations", "/run/nvidia/validations", False, None),
    ]
    assert host_paths(ds) == {
        "plugins-registry": ("/var/lib/kubelet/plugins_registry", None),
        "plugins": ("/var/lib/kubelet/plugins", None),
        "cdi-root": ("/var/run/cdi", None),  # no type, as the asset
        "host-root": ("/", None),
        "driver-install-dir": ("/run/nvidia/driver", "DirectoryOrCreate"),
        "run-nvidia-validations": ("/run/nvidia/validations", "DirectoryOrCreate"),
    }


def test_gpus_container_env_mounts_and_probes(full):
    gpus = container(plugin(full), "gpus")
    assert gpus["image"] == DRA_IMAGE and gpus["imagePullPolicy"] == "IfNotPresent"
    assert gpus["command"] == ["bash", "-c"]
    assert gpus["securityContext"] == {"privileged": True}
    assert [e["name"] for e in gpus["env"]] == [
        "HTTP_ENDPOINT", "METRICS_PATH", "LOG_VERBOSITY", "NVIDIA_VISIBLE_DEVICES", "CDI_ROOT", "HOST_ROOT",
        "NVIDIA_MIG_CONFIG_DEVICES", "NODE_NAME", "NAMESPACE", "IMAGE_NAME", "KUBELET_REGISTRAR_DIRECTORY_PATH",
        "KUBELET_PLUGINS_DIRECTORY_PATH", "HEALTHCHECK_PORT",
    ]
    assert env_of(gpus) == {
        "HTTP_ENDPOINT": ":8080",
        "METRICS_PATH": "/metrics",
        "LOG_VERBOSITY": "4",
        "NVIDIA_VISIBLE_DEVICES": "void",
        "CDI_ROOT": "/var/run/cdi",
        "HOST_ROOT": "/host",
        "NVIDIA_MIG_CONFIG_DEVICES": "all",
        "NODE_NAME": NODE_NAME,
        "NAMESPACE": NAMESPACE_FIELD,
        "IMAGE_NAME": DRA_IMAGE,
        "KUBELET_REGISTRAR_DIRECTORY_PATH": "/var/lib/kubelet/plugins_registry",
        "KUBELET_PLUGINS_DIRECTORY_PATH": "/var/lib/kubelet/plugins",
        "HEALTHCHECK_PORT": "51516",
    }
    assert mounts(gpus) == PLUGIN_MOUNTS
    grpc = {"port": 51516, "service": "liveness"}
    assert gpus["startupProbe"] == {"grpc": grpc, "failureThreshold": 600, "periodSeconds": 1, "timeoutSeconds": 10}
    assert gpus["livenessProbe"] == {"grpc": grpc, "failureThreshold": 3, "periodSeconds": 30, "timeoutSeconds": 10}


def test_compute_domains_container_only_with_compute_domains(full, gpus_only):
    assert names(pod_spec(plugin(gpus_only))["containers"]) == ["gpus"]
    assert names(pod_spec(plugin(full))["containers"]) == ["gpus", "compute-domains"]
    domains = container(plugin(full), "compute-domains")
    assert domains["image"] == DRA_IMAGE and domains["securityContext"] == {"privileged": True}
    assert env_of(domains) == {
        "HTTP_ENDPOINT": ":8081",
        "METRICS_PATH": "/metrics",
        "LOG_VERBOSITY": "4",
        "NVIDIA_VISIBLE_DEVICES": "void",
        "CDI_ROOT": "/var/run/cdi",
        "NVIDIA_MIG_CONFIG_DEVICES": "all",
        "NODE_NAME": NODE_NAME,
        "NAMESPACE": NAMESPACE_FIELD,
        "KUBELET_REGISTRAR_DIRECTORY_PATH": "/var/lib/kubelet/plugins_registry",
        "KUBELET_PLUGINS_DIRECTORY_PATH": "/var/lib/kubelet/plugins",
        "HEALTHCHECK_PORT": "51515",
        "GPU_CLIQUE_LABEL_ENABLED": "true",
    }
    assert mounts(domains) == PLUGIN_MOUNTS
    assert domains["livenessProbe"]["grpc"] == {"port": 51515, "service": "liveness"}
    assert domains["livenessProbe"]["periodSeconds"] == 10


def run_script(script: str, tmp_path: Path, stubs: dict[str, str], shell: str = "bash") -> subprocess.CompletedProcess:
    """Runs a container's script against tmp_path in place of /run/nvidia/validations, with stub binaries."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    validations = tmp_path / "validations"
    validations.mkdir(exist_ok=True)
    text = script.replace(consts.VALIDATIONS_DIR, str(validations))
    environment = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG_VERBOSITY": "4"}
    return subprocess.run([shell, "-c", text], env=environment, capture_output=True, text=True, timeout=20)


@pytest.mark.parametrize("name, binary", [("gpus", "gpu-kubelet-plugin"), ("compute-domains", "compute-domain-kubelet-plugin")])
def test_plugin_containers_start_with_the_driver_root_driver_ready_names(full, tmp_path, name, binary):
    script = container(plugin(full), name)["args"][0]
    (tmp_path / "validations").mkdir()
    (tmp_path / "validations" / "driver-ready").write_text(
        "IS_HOST_DRIVER=false\nNVIDIA_DRIVER_ROOT=/run/nvidia/driver\nDRIVER_ROOT_CTR_PATH=/driver-root\n"
    )
    result = run_script(script, tmp_path, {binary: f'echo "{binary} $* root=$NVIDIA_DRIVER_ROOT ctr=$DRIVER_ROOT_CTR_PATH"'})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == f"{binary} -v 4 root=/run/nvidia/driver ctr=/driver-root"


# --- RBAC ----------------------------------------------------------------------------------------------------------


def bindings_of(recording: Recording, name: str) -> None:
    for binding_kind, role_kind in (("RoleBinding", "Role"), ("ClusterRoleBinding", "ClusterRole")):
        binding = objects(recording, binding_kind)[name]
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": name}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": "gpu-operator"}]


def test_kubelet_plugin_rbac(full, gpus_only):
    bindings_of(full, "nvidia-dra-driver-kubeletplugin")
    cluster = {
        (("resource.nvidia.com",), ("computedomains",), ("get", "list", "watch"), ()),
        (("resource.k8s.io",), ("resourceclaims",), ("get", "list", "watch"), ()),
        (("resource.k8s.io",), ("resourceslices",), ("create", "delete", "get", "list", "update", "watch"), ()),
        (("",), ("nodes",), ("get", "list", "patch", "update", "watch"), ()),
        (("",), ("pods",), ("get", "list", "watch"), ()),
    }
    list_daemonsets = (("apps",), ("daemonsets",), ("list",), ())
    for recording in (full, gpus_only):
        assert rules(objects(recording, "ClusterRole")["nvidia-dra-driver-kubeletplugin"]) == cluster
    assert rules(objects(gpus_only, "Role")["nvidia-dra-driver-kubeletplugin"]) == {SCC, list_daemonsets}
    cliques = (("resource.nvidia.com",), ("computedomaincliques",), ("get",), ())
    assert rules(objects(full, "Role")["nvidia-dra-driver-kubeletplugin"]) == {SCC, list_daemonsets, cliques}


def test_controller_and_compute_domain_daemon_rbac(full):
    for name in ("nvidia-dra-driver-controller", "compute-domain-daemon-service-account"):
        bindings_of(full, name)
    all_daemonset_verbs = ("create", "delete", "get", "list", "patch", "update", "watch")
    assert rules(objects(full, "Role")["nvidia-dra-driver-controller"]) == {
        (("apps",), ("daemonsets",), all_daemonset_verbs, ()),
        (("resource.nvidia.com",), ("computedomaincliques",), ("get", "list", "update", "watch"), ()),
    }
    assert rules(objects(full, "ClusterRole")["nvidia-dra-driver-controller"]) == {
        (("resource.nvidia.com",), ("computedomains",), ("get", "list", "update", "watch"), ()),
        (("resource.nvidia.com",), ("computedomains/status",), ("update",), ()),
        (("resource.k8s.io",), ("resourceclaimtemplates",), ("create", "delete", "get", "list", "update", "watch"), ()),
        (("coordination.k8s.io",), ("leases",), ("create", "get", "update"), ()),
        (("",), ("nodes",), ("get", "list", "update", "watch"), ()),
        (("",), ("pods",), ("get", "list", "watch"), ()),
    }
    assert rules(objects(full, "Role")["compute-domain-daemon-service-account"]) == {SCC}
    assert rules(objects(full, "ClusterRole")["compute-domain-daemon-service-account"]) == {
        (("resource.nvidia.com",), ("computedomains", "computedomains/status"), ("get", "list", "patch", "update", "watch"), ()),
        (("resource.nvidia.com",), ("computedomaincliques",), ("create", "get", "list", "patch", "update", "watch"), ()),
        (("",), ("pods",), ("get", "list", "patch", "watch"), ()),
    }


# --- controller, CRDs, admission policy, ordering -------------------------------------------------------------------


def test_compute_domain_controller(full):
    deployment = objects(full, "Deployment")["nvidia-dra-driver-controller"]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["selector"] == {"matchLabels": {"app": "nvidia-dra-driver-controller"}}
    spec = pod_spec(deployment)
    assert spec["serviceAccountName"] == "nvidia-dra-driver-controller"
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["imagePullSecrets"] == [{"name": "ngc-pull"}]
    assert spec["tolerations"] == [
        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "CriticalAddonsOnly", "operator": "Exists"},
        GPU_TOLERATION,
    ]
    assert spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == [
        {"weight": 100, "preference": {"matchExpressions": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]}}
    ]
    assert "nodeSelector" not in spec
    controller = container(deployment, "compute-domain")
    assert controller["image"] == DRA_IMAGE
    assert controller["command"] == ["compute-domain-controller", "-v", "$(LOG_VERBOSITY)"]
    assert "securityContext" not in controller
    assert env_of(controller) == {
        "HTTP_ENDPOINT": ":8080",
        "METRICS_PATH": "/metrics",
        "LOG_VERBOSITY": "4",
        "LOG_VERBOSITY_CD_DAEMON": "4",
        "POD_NAME": {"fieldRef": {"fieldPath": "metadata.name"}},
        "NAMESPACE": NAMESPACE_FIELD,
        "IMAGE_NAME": DRA_IMAGE,
        "CD_DAEMON_IMAGE_PULL_SECRET_NAMES": "ngc-pull",
        "NVIDIA_VISIBLE_DEVICES": "void",
        "LEADER_ELECTION_ENABLED": "false",
        "LEADER_ELECTION_LEASE_LOCK_NAME": "nvidia-dra-driver-controller",
        "LEADER_ELECTION_LEASE_LOCK_NAMESPACE": "gpu-operator",
        "LEADER_ELECTION_LEASE_DURATION": "15s",
        "LEADER_ELECTION_RENEW_DEADLINE": "10s",
        "LEADER_ELECTION_RETRY_PERIOD": "2s",
    }


def test_compute_domain_crds(full):
    crds = objects(full, "CustomResourceDefinition")
    domain = crds["computedomains.resource.nvidia.com"]["spec"]
    assert domain["group"] == "resource.nvidia.com" and domain["scope"] == "Namespaced"
    assert domain["names"] == {"kind": "ComputeDomain", "listKind": "ComputeDomainList", "plural": "computedomains", "singular": "computedomain"}
    [version] = domain["versions"]
    assert (version["name"], version["served"], version["storage"], version["subresources"]) == ("v1beta1", True, True, {"status": {}})
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["required"] == ["channel"]
    assert spec["x-kubernetes-validations"][0]["rule"] == "self == oldSelf"
    assert spec["properties"]["channel"]["properties"]["allocationMode"]["enum"] == ["All", "Single"]
    assert spec["properties"]["numNodes"] == {"type": "integer", "minimum": 0, "default": 0}
    nodes = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["nodes"]
    assert nodes["x-kubernetes-list-map-keys"] == ["name"] and nodes["items"]["required"] == ["cliqueID", "ipAddress", "name"]
    clique = crds["computedomaincliques.resource.nvidia.com"]["spec"]
    assert clique["names"]["kind"] == "ComputeDomainClique"
    [clique_version] = clique["versions"]
    assert "subresources" not in clique_version
    daemons = clique_version["schema"]["openAPIV3Schema"]["properties"]["daemons"]
    assert daemons["x-kubernetes-list-map-keys"] == ["nodeName"]


def test_resource_slice_policy_binds_the_kubelet_plugin_to_its_node(full):
    policy = objects(full, "ValidatingAdmissionPolicy")["resourceslices-policy-nvidia-dra-driver"]["spec"]
    assert policy["failurePolicy"] == "Fail"
    assert policy["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": ["resource.k8s.io"],
            "apiVersions": ["v1", "v1beta2", "v1beta1"],
            "operations": ["CREATE", "UPDATE", "DELETE"],
            "resources": ["resourceslices"],
        }
    ]
    [condition] = policy["matchConditions"]
    assert condition["expression"] == "request.userInfo.username == 'system:serviceaccount:gpu-operator:nvidia-dra-driver-kubeletplugin'"
    assert "authentication.kubernetes.io/node-name" in policy["variables"][0]["expression"]
    assert len(policy["validations"]) == 2
    binding = objects(full, "ValidatingAdmissionPolicyBinding")["resourceslices-policy-nvidia-dra-driver"]["spec"]
    assert binding == {"policyName": "resourceslices-policy-nvidia-dra-driver", "validationActions": ["Deny"]}


def test_what_waits_for_what(full):
    plugin_deps = dependencies(full, "DaemonSet", "nvidia-dra-driver-kubelet-plugin")
    assert {
        ("CustomResourceDefinition", "computedomains.resource.nvidia.com"),
        ("CustomResourceDefinition", "computedomaincliques.resource.nvidia.com"),
        ("ValidatingAdmissionPolicy", "resourceslices-policy-nvidia-dra-driver"),
        ("ValidatingAdmissionPolicyBinding", "resourceslices-policy-nvidia-dra-driver"),
        ("ClusterRoleBinding", "nvidia-dra-driver-kubeletplugin"),
        ("RoleBinding", "nvidia-dra-driver-kubeletplugin"),
    } <= plugin_deps
    controller_deps = dependencies(full, "Deployment", "nvidia-dra-driver-controller")
    assert {
        ("CustomResourceDefinition", "computedomains.resource.nvidia.com"),
        ("ClusterRoleBinding", "nvidia-dra-driver-controller"),
        ("ClusterRoleBinding", "compute-domain-daemon-service-account"),
    } <= controller_deps
    assert ("ResourceClaimTemplate", "nvidia-dra-validator-gpu") in dependencies(full, "DaemonSet", "nvidia-dra-validator")
    # the validator's objects wait for the driver's (depends_on reaches the component's children)
    assert ("DaemonSet", "nvidia-dra-driver-kubelet-plugin") in dependencies(full, "DaemonSet", "nvidia-dra-validator")


def test_refused_arguments():
    with pytest.raises(ValueError, match="at least one pool"):
        DraDriver("x", ops=None, image=DRA_IMAGE, resource_api_version=V1, pools=[], compute_domains=False)
    with pytest.raises(ValueError, match="named twice: \\['a'\\]"):
        DraDriver("x", ops=None, image=DRA_IMAGE, resource_api_version=V1, pools=["a", "b", "a"], compute_domains=False)
    with pytest.raises(ValueError, match="not one of"):
        DraDriver("x", ops=None, image=DRA_IMAGE, resource_api_version="resource.k8s.io/v1alpha3", pools=["a"], compute_domains=False)
    with pytest.raises(ValueError, match="needs resource.k8s.io/v1 .* not resource.k8s.io/v1beta2"):
        DraValidator("x", ops=None, resource_api_version=V1BETA2, pools=["a"])


# --- the DRA validator ------------------------------------------------------------------------------------------------


def test_validator_claims_one_gpu_with_admin_access(full):
    template = objects(full, "ResourceClaimTemplate")["nvidia-dra-validator-gpu"]
    assert template["apiVersion"] == V1
    assert template["metadata"]["namespace"] == "gpu-operator"
    assert template["spec"] == {
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "validation-gpu",
                        "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1, "adminAccess": True},
                    }
                ]
            }
        }
    }
    assert dra_validator.NAMESPACE_LABELS == {"resource.kubernetes.io/admin-access": "true"}


def test_validator_daemonset(full):
    ds = objects(full, "DaemonSet")["nvidia-dra-validator"]
    spec = pod_spec(ds)
    assert spec["nodeSelector"] == {"nvidia.com/gpu.deploy.dra-validator": "true"}
    assert spec["affinity"] == pod_spec(plugin(full))["affinity"]
    assert spec["resourceClaims"] == [{"name": "validation-gpu", "resourceClaimTemplateName": "nvidia-dra-validator-gpu"}]
    assert spec["serviceAccountName"] == "nvidia-dra-validator"
    assert spec["tolerations"] == [GPU_TOLERATION]
    # k8s-driver-manager waits for pods labelled app=nvidia-operator-validator before it drains the kubelet plugin
    assert ds["spec"]["template"]["metadata"]["labels"] == {"app": "nvidia-operator-validator", "app.kubernetes.io/name": "nvidia-dra-validator"}
    assert ds["spec"]["selector"] == {"matchLabels": {"app.kubernetes.io/name": "nvidia-dra-validator"}}
    # ... without the operator validator's DaemonSet selecting them
    assert not operator_validator.APP_LABELS.items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    assert names(spec["initContainers"]) == ["gpu-validation"] and names(spec["containers"]) == ["nvidia-dra-validator"]
    check, main = container(ds, "gpu-validation"), container(ds, "nvidia-dra-validator")
    assert check["resources"] == {"claims": [{"name": "validation-gpu"}]}
    assert "resources" not in main
    for c in (check, main):
        assert c["image"] == VALIDATOR_IMAGE
        assert env_of(c) == {"NVIDIA_VISIBLE_DEVICES": "void"}
        assert c["securityContext"] == {"privileged": False, "runAsUser": 0}
        assert mounts(c) == [("run-nvidia-validations", "/run/nvidia/validations", False, None)]
    assert main["lifecycle"]["preStop"]["exec"]["command"] == ["sh", "-c", "rm -f /run/nvidia/validations/*-ready"]
    assert host_paths(ds) == {"run-nvidia-validations": ("/run/nvidia/validations", "DirectoryOrCreate")}
    role = objects(full, "Role")["nvidia-dra-validator"]
    # its driver check lists the driver DaemonSets (GO:cmd/nvidia-validator isDriverManagedByOperator)
    assert rules(role) == {SCC, (("apps",), ("daemonsets",), ("list",), ())}
    assert "nvidia-dra-validator" not in objects(full, "ClusterRole")


def test_validator_writes_dra_ready_only_when_the_claimed_gpu_answers(full, tmp_path):
    script = container(objects(full, "DaemonSet")["nvidia-dra-validator"], "gpu-validation")["args"][0]
    ready = tmp_path / "validations" / "dra-ready"
    failing = run_script(script, tmp_path, {"nvidia-smi": "echo 'No devices were found' >&2; exit 6"}, shell="sh")
    assert failing.returncode != 0 and not ready.exists()
    listed = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"
    passing = run_script(script, tmp_path, {"nvidia-smi": f"echo '{listed}'"}, shell="sh")
    assert passing.returncode == 0, passing.stderr
    assert ready.read_text() == listed + "\n" and passing.stdout == listed + "\n"
    assert sorted(p.name for p in ready.parent.iterdir()) == ["dra-ready"]


# --- policies of the pack on the component -------------------------------------------------------------------------


def test_the_components_pass_the_packs_rbac_and_image_policies(full):
    assert messages(full, "rbac-least-privilege") == []
    assert messages(full, "images-pinned") == []


# --- single-device-allocator ---------------------------------------------------------------------------------------


def allocator_messages(recording: Recording) -> list[str]:
    return [v.message for v in run_policies(recording, [allocator_policy.POLICY])]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """A device plugin on every device-plugin node and the DRA driver on pool h100-dra, with the pools document."""
    return render(
        tmp_path_factory, compute_domains=False, validator=False, device_plugin=True, pools=["h100-dra"],
        pools_document=[PLUGIN_POOL, DRA_POOL],
    )


def test_policy_names_match_the_components():
    assert allocator_policy.DRA_COMPONENT == dra.DEPLOY_COMPONENT
    assert allocator_policy.DEVICE_PLUGIN_CONTAINER == device_plugin_module.CONTAINER


def test_the_rendered_plugins_are_told_apart(mixed):
    sides = {n: allocator_policy.side_of(pod_spec(ds)) for n, ds in objects(mixed, "DaemonSet").items()}
    assert sides == {"nvidia-device-plugin-daemonset": ["device plugin"], "nvidia-dra-driver-kubelet-plugin": ["DRA kubelet plugin"]}


def test_one_allocator_per_pool_passes(mixed):
    assert allocator_messages(mixed) == []


def test_a_pool_labelled_for_both_allocators_is_refused(mixed):
    def both(pools: list[dict]) -> None:
        pools[1]["deployLabels"].append("nvidia.com/gpu.deploy.device-plugin")

    found = allocator_messages(edit_pools(mixed, both))
    assert len(found) == 2, found
    assert found[0].startswith("ConfigMap gpu-operator/gpu-stack-node-pools: pool 'h100-dra' gets both")
    assert (
        "DaemonSet gpu-operator/nvidia-device-plugin-daemonset (device plugin) and DaemonSet "
        "gpu-operator/nvidia-dra-driver-kubelet-plugin (DRA kubelet plugin) can both run on the nodes of pool(s) h100-dra"
    ) in found[1]
    assert all("fix: " in m for m in found)


def pod(recording: Recording, name: str) -> dict:
    return registration(recording, "DaemonSet", name).inputs["spec"]["template"]["spec"]


def test_a_kubelet_plugin_that_lost_its_deploy_label_and_pools_reaches_device_plugin_pools(mixed):
    def unplaced(broken: Recording) -> None:
        spec = pod(broken, "nvidia-dra-driver-kubelet-plugin")
        spec.pop("nodeSelector")
        spec.pop("affinity")

    [message] = allocator_messages(edited(mixed, unplaced))
    assert "can both run on the nodes of pool(s) l4" in message


def test_a_kubelet_plugin_whose_affinity_names_a_device_plugin_pool_is_refused(mixed):
    def widen(broken: Recording) -> None:
        terms = pod(broken, "nvidia-dra-driver-kubelet-plugin")["affinity"]["nodeAffinity"]
        terms["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] = ["h100-dra", "l4"]
        pod(broken, "nvidia-dra-driver-kubelet-plugin")["nodeSelector"] = {}

    [message] = allocator_messages(edited(mixed, widen))
    assert "pool(s) l4" in message


def test_node_selectors_that_disagree_keep_the_plugins_apart(mixed):
    def split(broken: Recording) -> None:
        pod(broken, "nvidia-dra-driver-kubelet-plugin").update(nodeSelector={"gpu": "h100"}, affinity={})
        pod(broken, "nvidia-device-plugin-daemonset")["nodeSelector"]["gpu"] = "l4"

    assert allocator_messages(edited(mixed, split)) == []


def test_without_a_pools_document_the_pool_affinities_decide(mixed):
    def no_document(broken: Recording) -> None:
        broken.registrations.remove(registration(broken, "ConfigMap", "gpu-stack-node-pools"))

    alone = edited(mixed, no_document)
    [message] = allocator_messages(alone)
    assert "can both run on the same nodes (no node pools document" in message

    def pin_device_plugin(broken: Recording) -> None:
        pod(broken, "nvidia-device-plugin-daemonset")["affinity"] = copy.deepcopy(pod(broken, "nvidia-dra-driver-kubelet-plugin")["affinity"])
        values = pod(broken, "nvidia-device-plugin-daemonset")["affinity"]["nodeAffinity"]
        values["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] = ["l4"]

    assert allocator_messages(edited(alone, pin_device_plugin)) == []


def test_a_daemonset_running_both_plugins_is_refused(mixed):
    def merge(broken: Recording) -> None:
        device_plugin = pod(broken, "nvidia-device-plugin-daemonset")
        device_plugin["containers"].append(copy.deepcopy(pod(broken, "nvidia-dra-driver-kubelet-plugin")["containers"][0]))
        broken.registrations.remove(registration(broken, "DaemonSet", "nvidia-dra-driver-kubelet-plugin"))

    found = allocator_messages(edited(mixed, merge))
    assert found == [
        "DaemonSet gpu-operator/nvidia-device-plugin-daemonset is both a device plugin and a DRA kubelet plugin; " + allocator_policy.FIX
    ]


def test_whatever_rides_on_the_device_plugin_label_counts_as_the_device_plugin(mixed):
    def mps_on_dra_pool(broken: Recording) -> None:
        copy_of = copy.deepcopy(registration(broken, "DaemonSet", "nvidia-device-plugin-daemonset"))
        copy_of.urn += "-mps"
        copy_of.inputs["metadata"]["name"] = "nvidia-device-plugin-mps-control-daemon"
        spec = copy_of.inputs["spec"]["template"]["spec"]
        spec["containers"] = [{"name": "mps-control-daemon-ctr", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"}]
        spec["nodeSelector"] = {"nvidia.com/gpu.deploy.device-plugin": "true", "nvidia.com/mps.capable": "true"}
        broken.registrations.append(copy_of)

    def both(pools: list[dict]) -> None:
        pools[1]["deployLabels"].append("nvidia.com/gpu.deploy.device-plugin")

    with_mps = edited(mixed, mps_on_dra_pool)
    assert allocator_messages(with_mps) == []
    found = allocator_messages(edit_pools(with_mps, both))
    assert any("nvidia-device-plugin-mps-control-daemon (device plugin)" in m for m in found), found


# --- feature gates that change what the plugin mounts and publishes --------------------------------------------


def test_passthrough_support_mounts_the_hosts_modules_sysfs_and_procfs_and_adds_the_vfio_class():
    gpus = dra_plugin.gpus_container(DRA_IMAGE, "PassthroughSupport=true", passthrough=True)
    assert {m.name: (m.mount_path, m.mount_propagation, m.read_only) for m in gpus.volume_mounts if m.name in ("lib-modules", "sysfs", "procfs")} == {
        "lib-modules": ("/lib/modules", "HostToContainer", True),
        "sysfs": ("/sys", "Bidirectional", None),
        "procfs": ("/proc", "Bidirectional", None),
    }
    assert [(e.name, e.value) for e in gpus.env if e.name == "FEATURE_GATES"] == [("FEATURE_GATES", "PassthroughSupport=true")]
    assert {v.name: (v.host_path.path, v.host_path.type) for v in dra_plugin.PASSTHROUGH_VOLUMES} == {
        "lib-modules": ("/lib/modules", "Directory"),
        "sysfs": ("/sys", "Directory"),
        "procfs": ("/proc", "Directory"),
    }
    plain = dra_plugin.gpus_container(DRA_IMAGE)
    assert not {m.name for m in plain.volume_mounts} & {"lib-modules", "sysfs", "procfs"}
    assert "FEATURE_GATES" not in {e.name for e in plain.env}
    assert "vfio.gpu.nvidia.com" in dra.device_classes(True)
