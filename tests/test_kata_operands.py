"""States 18 and 20 (Kata sandboxes), object by object, against NVIDIA's assets (GO:assets/state-kata-device-plugin,
GO:assets/state-cc-manager with `TransformKataDevicePlugin` / `TransformCCManager`; fact sheet §1.2, §2.11, §7,
Appendix B and C): names, images, init gates and env, host paths, security contexts, RBAC, deploy labels, and
when each state is rendered at all."""

from __future__ import annotations

import copy
import json

import pytest

from components.catalogs import consts
from components.states.cc_manager import CcManager
from components.config import load_config
from gpustack import schema
from gpustack.policyrun import pack_config
from policytest import violations
from operandtest import NAMESPACE_FIELD, NODE_NAME, VALIDATOR_IMAGE, host_paths, mounts, names, pod_spec, rbac, SCC, VALIDATIONS
from stacktest import bag, container, env_of, objects, render, render_stack, stack_config

# Helm values.yaml `kataSandboxDevicePlugin` and `ccManager` (v26.7.0 and HEAD)
KATA_PLUGIN_IMAGE = "nvcr.io/nvidia/cloud-native/nvidia-sandbox-device-plugin:v0.0.5"
CC_MANAGER_IMAGE = "nvcr.io/nvidia/cloud-native/k8s-cc-manager:v0.4.3"

KATA_PLUGIN = "nvidia-kata-sandbox-device-plugin-daemonset"
KATA_SA = "nvidia-kata-sandbox-device-plugin"
CC_MANAGER = "nvidia-cc-manager"
KUBEVIRT_PLUGIN = "nvidia-sandbox-device-plugin-daemonset"


def kata_config(*, cc_manager: bool = True, default_mode: str = "on") -> dict:
    config = copy.deepcopy(stack_config("kubevirt"))
    # Kata takes whole GPUs only: the stack's vGPU pool stays with KubeVirt
    config["gpu-stack:nodePools"] = [p for p in config["gpu-stack:nodePools"] if p.get("workloadType") != "vm-vgpu"]
    del config["gpu-stack:vgpu"]
    config["gpu-stack:sandboxWorkloads"] = {"mode": "kata", "ccManager": {"enabled": cc_manager, "defaultMode": default_mode}}
    return config


@pytest.fixture(scope="module")
def recording():
    return render(kata_config())


@pytest.fixture(scope="module")
def daemonsets(recording):
    return objects(recording, "DaemonSet")


def pools(recording) -> dict[str, dict]:
    document = json.loads(objects(recording, "ConfigMap")["gpu-stack-node-pools"]["data"]["node-pools.json"])
    return {p["name"]: p for p in document["pools"]}


def kubevirt_patches(recording) -> list:
    return [r for r in recording.registrations if r.type == "kubernetes:kubevirt.io/v1:KubeVirtPatch"]


# --- when the states are rendered ---------------------------------------------------------------------------


def test_both_states_follow_the_vfio_manager_in_the_operator_order(recording):
    states = recording.outputs["states"]
    kata = ["state-sandbox-validation", "state-vfio-manager", "state-kata-device-plugin", "state-cc-manager"]
    assert [s for s in states if s in kata] == kata
    assert states.index("state-cc-manager") < states.index("stack-monitoring")


def test_kata_mode_renders_neither_the_kubevirt_plugin_nor_the_kubevirt_patch(recording, daemonsets):
    states = recording.outputs["states"]
    assert "state-sandbox-device-plugin" not in states and "kubevirt-host-devices" not in states
    assert KUBEVIRT_PLUGIN not in daemonsets
    assert "nvidia-sandbox-device-plugin" not in objects(recording, "ServiceAccount")
    assert kubevirt_patches(recording) == []


def test_kubevirt_mode_renders_no_kata_operand():
    recording = render_stack("kubevirt")
    assert not {KATA_PLUGIN, CC_MANAGER} & set(objects(recording, "DaemonSet"))
    assert not {KATA_SA, CC_MANAGER} & set(objects(recording, "ServiceAccount"))
    assert not {"state-kata-device-plugin", "state-cc-manager"} & set(recording.outputs["states"])


def test_no_kata_operand_without_a_vm_pool():
    config = kata_config()
    config["gpu-stack:nodePools"] = [p for p in config["gpu-stack:nodePools"] if p.get("workloadType") != "vm-passthrough"]
    recording = render(config)
    assert not {KATA_PLUGIN, CC_MANAGER, "nvidia-sandbox-validator", "nvidia-vfio-manager"} & set(objects(recording, "DaemonSet"))


def test_the_cc_manager_is_absent_when_disabled():
    recording = render(kata_config(cc_manager=False))
    found = objects(recording, "DaemonSet")
    assert KATA_PLUGIN in found and CC_MANAGER not in found
    assert "state-cc-manager" not in recording.outputs["states"]
    for kind in ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"):
        assert CC_MANAGER not in objects(recording, kind), kind
    # the sandbox validator drops its cc-manager check with it, as TransformSandboxValidator does
    assert names(pod_spec(found["nvidia-sandbox-validator"])["initContainers"]) == ["vfio-pci-validation"]


def test_the_sandbox_validator_checks_the_cc_manager_first_when_it_runs(daemonsets):
    init = pod_spec(daemonsets["nvidia-sandbox-validator"])["initContainers"]
    assert names(init) == ["cc-manager-validation", "vfio-pci-validation"]


# --- deploy labels ------------------------------------------------------------------------------------------


def test_each_daemonset_lands_only_on_vm_passthrough_nodes(recording, daemonsets):
    by_pool = pools(recording)
    vm_labels = set(by_pool["vm-a100"]["deployLabels"])
    container_labels = set(by_pool["containers-l40s"]["deployLabels"])
    for ds_name, component in ((KATA_PLUGIN, "kata-sandbox-device-plugin"), (CC_MANAGER, "cc-manager")):
        spec = pod_spec(daemonsets[ds_name])
        label = consts.deploy_label(component)
        assert spec["nodeSelector"] == {label: "true"}, ds_name
        assert label in vm_labels and label not in container_labels, ds_name
        assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        assert spec["priorityClassName"] == "system-node-critical"
        assert spec["imagePullSecrets"] == [{"name": "ngc-pull"}]
        # VM nodes have no container toolkit, so nothing may ask for the nvidia runtime
        assert "runtimeClassName" not in spec, ds_name
        assert "hostPID" not in spec and "hostNetwork" not in spec and "hostIPC" not in spec, ds_name
        assert daemonsets[ds_name]["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
    # in kata mode the node agent writes the Kata plugin's label in place of the KubeVirt plugin's
    assert consts.deploy_label("sandbox-device-plugin") not in vm_labels


# --- state-kata-device-plugin -------------------------------------------------------------------------------


def test_kata_plugin_waits_for_vfio_pci_on_passthrough_nodes_only(daemonsets):
    ds = daemonsets[KATA_PLUGIN]
    spec = pod_spec(ds)
    assert ds["spec"]["selector"]["matchLabels"] == {"app": KATA_PLUGIN}
    assert ds["metadata"]["labels"]["app"] == KATA_PLUGIN
    assert spec["serviceAccountName"] == KATA_SA
    # passthrough only: no vgpu-devices gate, unlike the KubeVirt plugin
    assert names(spec["initContainers"]) == ["vfio-pci-validation"]
    gate = container(ds, "vfio-pci-validation")
    # transformValidationInitContainer: the validator image, pull policy and runAsUser 0
    assert gate["image"] == VALIDATOR_IMAGE and gate["imagePullPolicy"] == "IfNotPresent"
    assert gate["command"] == ["sh", "-c"]
    (script,) = gate["args"]
    workload_file = "/run/nvidia/validations/workload-type"
    assert script.index(f"until [ -f {workload_file} ]") < script.index(f'"$(cat {workload_file})" != "vm-passthrough"')
    assert script.index('!= "vm-passthrough" ]; then') < script.index("exit 0") < script.index(
        "until [ -f /run/nvidia/validations/vfio-pci-ready ]"
    )
    assert env_of(gate) == {"NVIDIA_VISIBLE_DEVICES": "void"}
    assert gate["securityContext"] == {"privileged": True, "runAsUser": 0}
    assert mounts(gate) == [(*VALIDATIONS, False, "HostToContainer")]


def test_kata_plugin_container(daemonsets):
    ds = daemonsets[KATA_PLUGIN]
    assert names(pod_spec(ds)["containers"]) == ["nvidia-kata-sandbox-device-plugin-ctr"]
    plugin = container(ds, "nvidia-kata-sandbox-device-plugin-ctr")
    assert plugin["image"] == KATA_PLUGIN_IMAGE and plugin["imagePullPolicy"] == "IfNotPresent"
    assert "command" not in plugin and "args" not in plugin and "resources" not in plugin
    assert [e["name"] for e in plugin["env"]] == ["NODE_NAME", "POD_NAMESPACE", "POD_SERVICE_ACCOUNT"]
    assert env_of(plugin) == {
        "NODE_NAME": NODE_NAME,
        "POD_NAMESPACE": NAMESPACE_FIELD,
        "POD_SERVICE_ACCOUNT": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}},
    }
    assert plugin["securityContext"] == {"privileged": True}
    # the plugin writes CDI specs naming the /dev/vfio nodes; Kata opens them, so no /dev/vfio mount
    assert mounts(plugin) == [
        ("device-plugin", "/var/lib/kubelet/device-plugins", False, None),
        ("cdi-root", "/var/run/cdi", False, None),
    ]
    assert host_paths(ds) == {
        "device-plugin": ("/var/lib/kubelet/device-plugins", None),
        "run-nvidia-validations": ("/run/nvidia/validations", "DirectoryOrCreate"),
        "cdi-root": ("/var/run/cdi", "DirectoryOrCreate"),
    }
    assert names(pod_spec(ds)["volumes"]) == ["device-plugin", "run-nvidia-validations", "cdi-root"]


def test_kata_plugin_rbac(recording):
    role, cluster_role = rbac(recording, KATA_SA)
    assert role == {
        SCC,
        (("",), ("pods",), ("create", "delete", "get", "list", "watch"), ()),
        (("nfd.k8s-sigs.io",), ("nodefeatures",), ("create", "get", "list", "update", "watch"), ()),
    }
    assert cluster_role == {
        (("config.openshift.io",), ("clusterversions",), ("get", "list"), ()),
        (("",), ("nodes", "pods"), ("get",), ()),
    }


# --- state-cc-manager ----------------------------------------------------------------------------------------


def test_cc_manager_container(daemonsets):
    ds = daemonsets[CC_MANAGER]
    spec = pod_spec(ds)
    # the asset selects by `name` and labels its DaemonSet `app`
    assert ds["spec"]["selector"]["matchLabels"] == {"name": CC_MANAGER}
    assert ds["metadata"]["labels"]["app"] == CC_MANAGER
    assert ds["spec"]["template"]["metadata"]["labels"]["name"] == CC_MANAGER
    assert spec["serviceAccountName"] == CC_MANAGER
    assert "initContainers" not in spec
    assert names(spec["containers"]) == [CC_MANAGER]
    main = container(ds, CC_MANAGER)
    assert main["image"] == CC_MANAGER_IMAGE and main["imagePullPolicy"] == "IfNotPresent"
    assert "command" not in main and "args" not in main
    # the asset's env, DEFAULT_CC_MODE appended by the transform, OPERATOR_NAMESPACE added by gpu-stack
    assert [e["name"] for e in main["env"]] == ["NODE_NAME", "NVIDIA_VISIBLE_DEVICES", "DEFAULT_CC_MODE", "OPERATOR_NAMESPACE"]
    assert env_of(main) == {
        "NODE_NAME": NODE_NAME,
        "NVIDIA_VISIBLE_DEVICES": "void",
        "DEFAULT_CC_MODE": "on",
        "OPERATOR_NAMESPACE": NAMESPACE_FIELD,
    }
    assert main["resources"] == {"limits": {"memory": "200Mi"}, "requests": {"cpu": "100m", "memory": "200Mi"}}
    assert main["securityContext"] == {"privileged": True, "seLinuxOptions": {"level": "s0"}}
    assert main["lifecycle"]["preStop"]["exec"]["command"] == ["/bin/rm", "-f", "/run/nvidia/validations/.cc-manager-ctr-ready"]
    assert mounts(main) == [("host-sys", "/sys", False, None), ("run-nvidia", "/run/nvidia", False, None)]
    assert host_paths(ds) == {"host-sys": ("/sys", "Directory"), "run-nvidia": ("/run/nvidia", "DirectoryOrCreate")}


@pytest.mark.parametrize("mode", ["off", "devtools"])
def test_the_default_cc_mode_reaches_the_manager(mode):
    ds = objects(render(kata_config(default_mode=mode)), "DaemonSet")[CC_MANAGER]
    assert env_of(container(ds, CC_MANAGER))["DEFAULT_CC_MODE"] == mode


def test_an_unknown_cc_mode_is_refused_before_anything_registers():
    with pytest.raises(ValueError, match="'auto' is not one of on, off, devtools"):
        CcManager("state-cc-manager", ops=None, default_mode="auto")  # type: ignore[arg-type]


def test_cc_manager_rbac_reads_pods_and_patches_nodes(recording):
    role, cluster_role = rbac(recording, CC_MANAGER)
    assert role == {SCC, (("",), ("pods",), ("get", "list", "watch"), ())}
    assert cluster_role == {(("",), ("nodes",), ("get", "list", "patch", "watch"), ())}


def test_no_scc_is_rendered(recording):
    # the assets' SCCs are OpenShift-only; the cc-manager one is even named nvidia-vfio-manager (fact sheet §2.11)
    assert not [r for r in recording.registrations if r.inputs.get("kind") == "SecurityContextConstraints"]
    for name in (KATA_PLUGIN, CC_MANAGER):
        ds = objects(recording, "DaemonSet")[name]
        assert "openshift.io/scc" not in ds["metadata"].get("annotations", {})


# --- ordering, policy and schema -----------------------------------------------------------------------------


def dependency_names(recording, kind: str, name: str) -> set[str]:
    by_urn = recording.by_urn()
    registration = recording.find(f"kubernetes:{kind}", name)
    return {by_urn[d].name for d in registration.dependencies}


def test_each_daemonset_waits_for_its_rbac_and_the_previous_state(recording):
    for ds_name, sa in ((KATA_PLUGIN, KATA_SA), (CC_MANAGER, CC_MANAGER)):
        assert sa in dependency_names(recording, "apps/v1:DaemonSet", ds_name), ds_name
    assert "nvidia-vfio-manager" in dependency_names(recording, "apps/v1:DaemonSet", KATA_PLUGIN)
    assert KATA_PLUGIN in dependency_names(recording, "apps/v1:DaemonSet", CC_MANAGER)


@pytest.mark.parametrize(
    "policy", ["privileged-only-where-needed", "one-workload-type-per-node", "state-order", "rbac-least-privilege", "images-pinned"]
)
def test_kata_mode_passes_the_policy_pack(recording, policy):
    found = [v for v in violations(recording, policy, pack_config("kubevirt")) if v.enforcement == "mandatory"]
    assert found == [], [v.message for v in found]


def test_every_kata_object_is_schema_valid(recording):
    versions = load_config(bag(kata_config())).cluster.kubernetes_versions
    names_ = {KATA_SA, KATA_PLUGIN, CC_MANAGER}
    checked = 0
    for kind in ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "DaemonSet"):
        for name, obj in objects(recording, kind).items():
            if name in names_:
                checked += 1
                for version in versions:
                    assert schema.validate(obj, version) == [], (kind, name, version)
    assert checked == 2 * 5 + 2
