"""States 15-17 (KubeVirt GPU passthrough), object by object, against NVIDIA's assets (fact sheet §2.11, §3.2-3.3,
§7, Appendix B and C): names, images, init order and env, host paths, security contexts, RBAC, deploy labels,
and when each state is rendered at all."""

from __future__ import annotations

import copy

import pytest

from components.catalogs import consts
from components.config import load_config
from gpustack import schema
from gpustack.mockrun import run_program
from operandtest import (
    DRIVER_MANAGER_IMAGE,
    NAMESPACE_FIELD,
    NODE_NAME,
    SCC,
    VALIDATIONS,
    VALIDATOR_IMAGE,
    assert_vm_driver_manager,
    host_paths,
    mounts,
    names,
    pod_spec,
    rbac,
)
from stacktest import bag, container, env_of, objects, render, render_stack, stack_config

KUBEVIRT_PLUGIN_IMAGE = "nvcr.io/nvidia/kubevirt-gpu-device-plugin:v1.6.0"

VM_POOL = {
    "name": "vm-a100",
    "nodeSelector": {"gpu-stack.io/vm": "true"},
    "gpuModel": "A100-80GB",
    "os": "ubuntu22.04",
    "workloadType": "vm-passthrough",
}


def kubevirt_config(**sandbox) -> dict:
    config = copy.deepcopy(stack_config("prod-managed"))
    config["gpu-stack:sandboxWorkloads"] = {"mode": "kubevirt", **sandbox}
    config["gpu-stack:nodePools"].append(VM_POOL)
    return config


@pytest.fixture(scope="module")
def recording():
    return render(kubevirt_config())


@pytest.fixture(scope="module")
def daemonsets(recording):
    return objects(recording, "DaemonSet")


# --- when the states are rendered ---------------------------------------------------------------------------


def test_the_three_states_follow_the_container_operands_in_the_operator_order(recording):
    states = recording.outputs["states"]
    sandbox = ["state-sandbox-validation", "state-vfio-manager", "state-sandbox-device-plugin"]
    assert [s for s in states if s in sandbox] == sandbox
    assert states.index("state-mig-manager") < states.index("state-sandbox-validation")
    assert states.index("state-sandbox-device-plugin") < states.index("stack-monitoring")


def test_no_sandbox_operand_without_a_vm_pool():
    found = objects(render_stack("prod-managed"), "DaemonSet")
    assert not {"nvidia-sandbox-validator", "nvidia-vfio-manager", "nvidia-sandbox-device-plugin-daemonset"} & set(found)


def test_each_daemonset_lands_only_on_nodes_the_labeller_marks_for_vm_passthrough(daemonsets):
    expected = {
        "nvidia-sandbox-validator": "sandbox-validator",
        "nvidia-vfio-manager": "vfio-manager",
        "nvidia-sandbox-device-plugin-daemonset": "sandbox-device-plugin",
    }
    for ds_name, component in expected.items():
        spec = pod_spec(daemonsets[ds_name])
        assert spec["nodeSelector"] == {f"nvidia.com/gpu.deploy.{component}": "true"}, ds_name
        assert component in consts.DEPLOY_COMPONENTS_BY_WORKLOAD["vm-passthrough"]
        assert component not in consts.DEPLOY_COMPONENTS_BY_WORKLOAD["container"]
        assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        assert spec["priorityClassName"] == "system-node-critical"
        assert spec["imagePullSecrets"] == [{"name": "ngc-pull"}]
        # VM nodes have no container toolkit, so nothing may ask for the nvidia runtime
        assert "runtimeClassName" not in spec, ds_name
        assert daemonsets[ds_name]["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"


# --- state-sandbox-validation -------------------------------------------------------------------------------


def test_sandbox_validator_checks_vfio_pci_with_the_default_workload(daemonsets):
    ds = daemonsets["nvidia-sandbox-validator"]
    spec = pod_spec(ds)
    # k8s-driver-manager waits for pods with exactly this app label
    assert ds["spec"]["selector"]["matchLabels"] == {"app": "nvidia-sandbox-validator", "app.kubernetes.io/part-of": "gpu-operator"}
    assert spec["serviceAccountName"] == "nvidia-sandbox-validator"
    # no CC manager in KubeVirt mode and no vGPU pool here
    assert names(spec["initContainers"]) == ["vfio-pci-validation"]
    vfio = container(ds, "vfio-pci-validation")
    assert vfio["image"] == VALIDATOR_IMAGE
    assert vfio["command"] == ["sh", "-c"] and vfio["args"] == ["nvidia-validator"]
    assert [e["name"] for e in vfio["env"]] == ["WITH_WAIT", "COMPONENT", "NODE_NAME", "DEFAULT_GPU_WORKLOAD_CONFIG"]
    assert env_of(vfio) == {"WITH_WAIT": "true", "COMPONENT": "vfio-pci", "NODE_NAME": NODE_NAME, "DEFAULT_GPU_WORKLOAD_CONFIG": "container"}
    assert vfio["securityContext"] == {"privileged": True, "runAsUser": 0, "seLinuxOptions": {"level": "s0"}}
    assert mounts(vfio) == [("host-root", "/host", True, "HostToContainer"), (*VALIDATIONS, False, "Bidirectional")]


def test_sandbox_validator_main_container_withdraws_every_file_on_stop(daemonsets):
    ds = daemonsets["nvidia-sandbox-validator"]
    main = container(ds, "nvidia-sandbox-validator")
    assert names(pod_spec(ds)["containers"]) == ["nvidia-sandbox-validator"]
    assert main["image"] == VALIDATOR_IMAGE and main["imagePullPolicy"] == "IfNotPresent"
    assert main["command"] == ["sh", "-c"]
    assert main["args"] == ["echo all validations are successful; while true; do sleep 86400; done"]
    assert main["securityContext"] == {"privileged": True, "runAsUser": 0}
    assert main["lifecycle"]["preStop"]["exec"]["command"] == ["sh", "-c", "rm -f /run/nvidia/validations/*"]
    assert mounts(main) == [(*VALIDATIONS, False, "Bidirectional")]
    # /run/nvidia/driver is only for vgpu-manager-validation
    assert host_paths(ds) == {"run-nvidia-validations": ("/run/nvidia/validations", "DirectoryOrCreate"), "host-root": ("/", None)}


def test_default_workload_reaches_the_check():
    ds = objects(render(kubevirt_config(defaultWorkload="vm-passthrough")), "DaemonSet")["nvidia-sandbox-validator"]
    assert env_of(container(ds, "vfio-pci-validation"))["DEFAULT_GPU_WORKLOAD_CONFIG"] == "vm-passthrough"


SANDBOX_VALIDATOR_PROGRAM = """
from components.config import load_config, program_config
from components.kit.stack_inputs import operands
from components.states.sandbox_validator import SandboxValidator

SandboxValidator("state-sandbox-validation", ops=operands(load_config(program_config())), cc_manager=True, vgpu=True,
                 default_workload="vm-vgpu")
"""


@pytest.fixture(scope="module")
def full_validator(tmp_path_factory):
    """vm-vgpu pools and the CC manager are not configurable yet; the component is rendered on its own."""
    program = tmp_path_factory.mktemp("sandbox-validator")
    (program / "__main__.py").write_text(SANDBOX_VALIDATOR_PROGRAM)
    return objects(run_program("test", bag(kubevirt_config()), program_dir=program), "DaemonSet")["nvidia-sandbox-validator"]


def test_all_four_checks_in_the_asset_order_with_the_operator_env(full_validator):
    ds = full_validator
    init = pod_spec(ds)["initContainers"]
    assert names(init) == ["cc-manager-validation", "vfio-pci-validation", "vgpu-manager-validation", "vgpu-devices-validation"]
    for c in init:
        env = env_of(c)
        assert c["image"] == VALIDATOR_IMAGE and env["WITH_WAIT"] == "true" and env["NODE_NAME"] == NODE_NAME
        assert env["COMPONENT"] == c["name"].removesuffix("-validation")
        # cc-manager decides by nvidia.com/cc.capable; the operator sets the default only on the workload checks
        assert env.get("DEFAULT_GPU_WORKLOAD_CONFIG") == (None if c["name"] == "cc-manager-validation" else "vm-vgpu")
    s0 = {"privileged": True, "runAsUser": 0, "seLinuxOptions": {"level": "s0"}}
    assert [c["securityContext"] for c in init] == [s0, s0, s0, {"privileged": True, "runAsUser": 0}]
    validations = (*VALIDATIONS, False, "Bidirectional")
    host_root = ("host-root", "/host", True, "HostToContainer")
    assert [mounts(c) for c in init] == [
        [validations],
        [host_root, validations],
        [host_root, ("driver-install-path", "/run/nvidia/driver", False, "HostToContainer"), validations],
        [validations],
    ]
    assert host_paths(ds)["driver-install-path"] == ("/run/nvidia/driver", None)
    for version in ("1.32", "1.33"):
        assert schema.validate(ds, version) == []


def test_sandbox_validator_rbac_reads_only_nodes(recording):
    role, cluster_role = rbac(recording, "nvidia-sandbox-validator")
    assert role == {SCC}
    assert cluster_role == {(("",), ("nodes",), ("get",), ())}


# --- state-vfio-manager --------------------------------------------------------------------------------------


def test_vfio_manager_unloads_the_driver_then_binds_every_gpu(daemonsets):
    ds = daemonsets["nvidia-vfio-manager"]
    spec = pod_spec(ds)
    assert ds["spec"]["selector"]["matchLabels"] == {"name": "nvidia-vfio-manager"}
    assert ds["metadata"]["labels"]["app"] == "nvidia-vfio-manager"
    assert spec["serviceAccountName"] == "nvidia-vfio-manager"
    assert names(spec["initContainers"]) == ["k8s-driver-manager"]
    # the asset's values, not the stack's upgrade policy: VM pools roll no driver
    assert_vm_driver_manager(container(ds, "k8s-driver-manager"))


def test_vfio_manager_container(daemonsets):
    ds = daemonsets["nvidia-vfio-manager"]
    assert names(pod_spec(ds)["containers"]) == ["nvidia-vfio-manager"]
    main = container(ds, "nvidia-vfio-manager")
    # since v26.3 vfio-manage ships in the k8s-driver-manager image
    assert main["image"] == DRIVER_MANAGER_IMAGE and main["imagePullPolicy"] == "IfNotPresent"
    assert main["command"] == ["/bin/sh", "-c"]
    assert main["args"] == ["vfio-manage bind --all && while true; do sleep 86400; done"]
    assert main["lifecycle"]["preStop"]["exec"]["command"] == ["/bin/sh", "-c", "vfio-manage unbind --all"]
    assert env_of(main) == {"HOST_ROOT": "/host"}
    assert main["resources"] == {"limits": {"memory": "200Mi"}, "requests": {"cpu": "100m", "memory": "200Mi"}}
    assert main["securityContext"] == {"privileged": True, "seLinuxOptions": {"level": "s0"}}
    assert mounts(main) == [
        ("host-sys", "/sys", False, None),
        ("host-lib-modules", "/lib/modules", True, None),
        ("host-root", "/host", False, None),
    ]
    assert host_paths(ds) == {
        "host-sys": ("/sys", "Directory"),
        "host-lib-modules": ("/lib/modules", "Directory"),
        "run-nvidia": ("/run/nvidia", "DirectoryOrCreate"),
        "host-root": ("/", None),
    }


def test_vfio_manager_rbac_pauses_labels_and_neither_evicts_nor_drains(recording):
    role, cluster_role = rbac(recording, "nvidia-vfio-manager")
    assert role == {SCC}
    # The asset's, but no `pods/eviction`: its manager's eviction and auto-drain are off, and the token is on GPU nodes.
    assert cluster_role == {
        (("config.openshift.io",), ("clusterversions",), ("get", "list"), ()),
        (("",), ("nodes",), ("get", "list", "patch", "watch"), ()),
        (("",), ("pods",), ("get", "list", "watch"), ()),
    }


# --- state-sandbox-device-plugin ---------------------------------------------------------------------------


def test_sandbox_device_plugin_waits_for_the_validator_verdict_of_its_workload_type(daemonsets):
    ds = daemonsets["nvidia-sandbox-device-plugin-daemonset"]
    spec = pod_spec(ds)
    assert ds["spec"]["selector"]["matchLabels"] == {"app": "nvidia-sandbox-device-plugin-daemonset"}
    assert spec["serviceAccountName"] == "nvidia-sandbox-device-plugin"
    assert names(spec["initContainers"]) == ["vfio-pci-validation", "vgpu-devices-validation"]
    for name, workload, ready in (
        ("vfio-pci-validation", "vm-passthrough", "vfio-pci-ready"),
        ("vgpu-devices-validation", "vm-vgpu", "vgpu-devices-ready"),
    ):
        gate = container(ds, name)
        assert gate["image"] == VALIDATOR_IMAGE and gate["command"] == ["sh", "-c"]
        script = gate["args"][0]
        workload_file = "/run/nvidia/validations/workload-type"
        # the workload type first, then the check's own file only on nodes of that type
        assert script.index(f"until [ -f {workload_file} ]") < script.index(f'"$(cat {workload_file})" != "{workload}"')
        assert script.index(f'!= "{workload}" ]; then') < script.index(f"until [ -f /run/nvidia/validations/{ready} ]")
        assert "exit 0" in script
        assert env_of(gate) == {"NVIDIA_VISIBLE_DEVICES": "void"}
        assert gate["securityContext"] == {"privileged": True, "runAsUser": 0}
        assert mounts(gate) == [(*VALIDATIONS, False, "HostToContainer")]


def test_sandbox_device_plugin_container(daemonsets):
    ds = daemonsets["nvidia-sandbox-device-plugin-daemonset"]
    assert names(pod_spec(ds)["containers"]) == ["nvidia-sandbox-device-plugin-ctr"]
    plugin = container(ds, "nvidia-sandbox-device-plugin-ctr")
    assert plugin["image"] == KUBEVIRT_PLUGIN_IMAGE and plugin["imagePullPolicy"] == "IfNotPresent"
    assert "command" not in plugin and "args" not in plugin
    assert env_of(plugin) == {"NODE_NAME": NODE_NAME, "POD_NAMESPACE": NAMESPACE_FIELD}
    assert plugin["securityContext"] == {"privileged": True}
    assert mounts(plugin) == [
        ("device-plugin", "/var/lib/kubelet/device-plugins", False, None),
        ("vfio", "/dev/vfio", False, None),
        ("cdi-root", "/var/run/cdi", False, None),
    ]
    assert host_paths(ds) == {
        "device-plugin": ("/var/lib/kubelet/device-plugins", None),
        "run-nvidia-validations": ("/run/nvidia/validations", "DirectoryOrCreate"),
        "vfio": ("/dev/vfio", None),
        "cdi-root": ("/var/run/cdi", "DirectoryOrCreate"),
    }


def test_sandbox_device_plugin_rbac(recording):
    role, cluster_role = rbac(recording, "nvidia-sandbox-device-plugin")
    assert role == {
        SCC,
        (("",), ("pods",), ("create", "delete", "get", "list", "watch"), ()),
        (("nfd.k8s-sigs.io",), ("nodefeatures",), ("create", "get", "list", "update", "watch"), ()),
    }
    assert cluster_role == {
        (("config.openshift.io",), ("clusterversions",), ("get", "list"), ()),
        (("",), ("nodes", "pods"), ("get",), ()),
    }


# --- ordering and schema -------------------------------------------------------------------------------------


def dependency_names(recording, kind: str, name: str) -> set[str]:
    by_urn = recording.by_urn()
    registration = recording.find(f"kubernetes:{kind}", name)
    return {by_urn[d].name for d in registration.dependencies}


def test_each_daemonset_waits_for_its_rbac_and_the_previous_state(recording):
    chain = [
        ("nvidia-sandbox-validator", "nvidia-sandbox-validator"),
        ("nvidia-vfio-manager", "nvidia-vfio-manager"),
        ("nvidia-sandbox-device-plugin-daemonset", "nvidia-sandbox-device-plugin"),
    ]
    for ds_name, sa in chain:
        assert sa in dependency_names(recording, "apps/v1:DaemonSet", ds_name), ds_name
    assert "nvidia-sandbox-validator" in dependency_names(recording, "apps/v1:DaemonSet", "nvidia-vfio-manager")
    assert "nvidia-vfio-manager" in dependency_names(recording, "apps/v1:DaemonSet", "nvidia-sandbox-device-plugin-daemonset")


def test_every_sandbox_object_is_schema_valid(recording):
    versions = load_config(bag(kubevirt_config())).cluster.kubernetes_versions
    names_ = {"nvidia-sandbox-validator", "nvidia-vfio-manager", "nvidia-sandbox-device-plugin", "nvidia-sandbox-device-plugin-daemonset"}
    checked = 0
    for kind in ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "DaemonSet"):
        for name, obj in objects(recording, kind).items():
            if name in names_:
                checked += 1
                for version in versions:
                    assert schema.validate(obj, version) == [], (kind, name, version)
    assert checked == 3 * 5 + 3
