"""The keys added so a running operator's settings have a home (issue 34): the runtime class name
(`toolkit.runtimeClass`), the MPS root (`devicePlugin.mpsRoot`), the VFIO and vGPU managers' own k8s-driver-manager
(`operands.vfioManagerDriverManager`, `operands.vgpuManagerDriverManager`), the vGPU manager's kernel module
parameters (`vgpu.kernelModuleConfig`) and named vGPU configs of one's own (`vgpu.configs`).

Each renders where NVIDIA's manifests put it, passes the API server's own rules, the schemas and the policy pack,
and a bad value is refused naming the key and what it takes. Two renders: a container stack with every container
key set, the KubeVirt stack with every VM key set."""

from __future__ import annotations

import functools
from typing import Any, Callable

import pytest
import yaml

from gpustack import apiserver, schema
from gpustack.policyrun import pack_config, pack_policies, run_policies
from gpustack.render import objects_in_order
from stacktest import config_problems, container, env_of, objects, render, render_stack, setter, stack_config

T, D, O, V = "gpu-stack:toolkit", "gpu-stack:devicePlugin", "gpu-stack:operands", "gpu-stack:vgpu"
MPS_ROOT = "/var/lib/nvidia-mps"
RUNTIME_CLASS = "nvidia-gpu"
# A10 split into 4 GB vGPUs on GPU 0 only, the other GPUs left whole: a layout no built-in config is.
CUSTOM_VGPU = {"a10-4q-gpu0": [{"devices": [0], "deviceFilter": "0x223610DE", "vgpuDevices": {"A10-4Q": 6}}]}


@functools.lru_cache(maxsize=None)
def container_render():
    """onprem-host-driver shares a pool by MPS; every container key set."""
    config = stack_config("onprem-host-driver")
    config[D] = {**config.get(D, {}), "mpsRoot": MPS_ROOT}
    config["gpu-stack:cluster"]["containerRuntime"] = "containerd"
    config.setdefault(T, {})["runtimeClass"] = RUNTIME_CLASS
    return render(config)


@functools.lru_cache(maxsize=None)
def vm_render():
    """kubevirt runs vm-passthrough and vm-vgpu pools; every VM key set."""
    config = stack_config("kubevirt")
    config.setdefault(O, {}).update(
        vfioManagerDriverManager={"version": "v0.13.0", "imagePullPolicy": "Always"},
        vgpuManagerDriverManager={"repository": "harbor.platform.internal/gpu-stack/nvidia", "imagePullPolicy": "Always"},
    )
    config[V].update(kernelModuleConfig={"name": "vgpu-module-params", "files": ["nvidia.conf"]}, configs=CUSTOM_VGPU)
    vgpu_pool = next(p for p in config["gpu-stack:nodePools"] if p.get("workloadType") == "vm-vgpu")
    vgpu_pool["vgpuConfig"] = "a10-4q-gpu0"
    return render(config)


def daemonsets(recording) -> dict[str, dict[str, Any]]:
    return objects(recording, "DaemonSet")


def init_container(ds: dict, name: str) -> dict:
    return next(c for c in ds["spec"]["template"]["spec"]["initContainers"] if c["name"] == name)


def host_paths(ds: dict) -> dict[str, str]:
    return {v["name"]: v["hostPath"]["path"] for v in ds["spec"]["template"]["spec"]["volumes"] if "hostPath" in v}


@pytest.mark.parametrize("scenario, stack", [(container_render, "onprem-host-driver"), (vm_render, "kubevirt")],
                         ids=["container_render", "vm_render"])
def test_the_renders_pass_the_api_servers_rules_the_schemas_and_the_policy_pack(scenario, stack):
    recording = scenario()
    rendered = [obj for _, obj in objects_in_order(recording)]
    assert [str(p) for p in apiserver.validate_all(rendered)] == []
    changed_kinds = ("DaemonSet", "RuntimeClass", "ConfigMap")
    assert [p for obj in rendered if obj.get("kind") in changed_kinds for p in schema.validate(obj, "1.33")] == []
    assert [v.message for v in run_policies(recording, pack_policies(), pack_config(stack))] == []


def test_the_runtime_class_is_named_as_the_key_says_everywhere_it_is_used():
    recording = container_render()
    assert sorted(objects(recording, "RuntimeClass")) == sorted([RUNTIME_CLASS, "nvidia-cdi", "nvidia-legacy"])
    assert objects(recording, "RuntimeClass")[RUNTIME_CLASS]["handler"] == RUNTIME_CLASS
    ds = daemonsets(recording)
    toolkit = env_of(container(ds["nvidia-container-toolkit-daemonset"], "nvidia-container-toolkit-ctr"))
    assert toolkit["CONTAINERD_RUNTIME_CLASS"] == RUNTIME_CLASS
    assert ds["nvidia-device-plugin-daemonset"]["spec"]["template"]["spec"]["runtimeClassName"] == RUNTIME_CLASS
    validator = ds["nvidia-operator-validator"]
    cuda = env_of(init_container(validator, "cuda-validation"))
    assert cuda["VALIDATOR_RUNTIME_CLASS"] == RUNTIME_CLASS


def test_the_mps_root_moves_both_mps_volumes_of_the_plugin_and_the_daemon_and_the_plugins_env():
    ds = daemonsets(container_render())
    for name in ("nvidia-device-plugin-daemonset", "nvidia-device-plugin-mps-control-daemon"):
        paths = host_paths(ds[name])
        assert (paths["mps-root"], paths["mps-shm"]) == (MPS_ROOT, f"{MPS_ROOT}/shm"), name
    assert env_of(container(ds["nvidia-device-plugin-daemonset"], "nvidia-device-plugin"))["MPS_ROOT"] == MPS_ROOT


def test_a_half_moved_mps_root_is_refused_by_the_policy_pack():
    from policytest import edited, messages

    def unmove(recording) -> None:
        for registration in recording.registrations:
            if (registration.inputs.get("metadata") or {}).get("name") == "nvidia-device-plugin-daemonset":
                for c in registration.inputs["spec"]["template"]["spec"]["containers"]:
                    for var in c.get("env") or []:
                        if var["name"] == "MPS_ROOT":
                            var["value"] = "/run/nvidia/mps"

    found = messages(edited(container_render(), unmove), "privileged-only-where-needed")
    assert any("mps-root" in m and "MPS_ROOT" in m for m in found), found


def test_each_vm_managers_driver_manager_takes_its_own_key_and_the_drivers_keeps_the_shared_one():
    ds = daemonsets(vm_render())
    vfio = init_container(ds["nvidia-vfio-manager"], "k8s-driver-manager")
    assert (vfio["image"], vfio["imagePullPolicy"]) == ("nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.13.0", "Always")
    # vfio-manage itself stays on the stack's k8s-driver-manager image
    assert container(ds["nvidia-vfio-manager"], "nvidia-vfio-manager")["image"].endswith("k8s-driver-manager:v0.12.0")
    vgpu = init_container(ds["nvidia-vgpu-manager-daemonset"], "k8s-driver-manager")
    assert (vgpu["image"], vgpu["imagePullPolicy"]) == ("harbor.platform.internal/gpu-stack/nvidia/k8s-driver-manager:v0.12.0", "Always")


def test_unset_the_vm_managers_driver_manager_follows_operands_driver_manager_as_before():
    from pulumi_kubernetes.core.v1 import ContainerArgs

    from components.config import OperandOverride
    from components.kit.operand_overrides import apply_to_containers, operands_in_pod

    manager = ContainerArgs(name="k8s-driver-manager", image="nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.12.0")
    shared = {"driverManager": OperandOverride.model_validate({"imagePullPolicy": "Always", "imagePullSecrets": ["mirror"]})}
    own = {**shared, "vfioManagerDriverManager": OperandOverride.model_validate({"imagePullPolicy": "Never"})}
    for pod in ("vfioManager", "vgpuManager", "driver"):
        (applied,) = apply_to_containers([manager], pod, shared, {})
        assert applied.image_pull_policy == "Always", pod
        assert "driverManager" in operands_in_pod([manager], pod, shared, {})  # its pull secrets reach the pod
    (applied,) = apply_to_containers([manager], "vfioManager", own, {})
    assert applied.image_pull_policy == "Never"
    (applied,) = apply_to_containers([manager], "vgpuManager", own, {})
    assert applied.image_pull_policy == "Always"


def test_the_vgpu_manager_loads_its_kernel_module_parameters_from_drivers():
    ds = daemonsets(vm_render())["nvidia-vgpu-manager-daemonset"]
    manager = container(ds, "nvidia-driver-ctr")
    assert {"name": "vgpu-module-params", "mountPath": "/drivers/nvidia.conf", "readOnly": True, "subPath": "nvidia.conf"} in manager["volumeMounts"]
    volume = next(v for v in ds["spec"]["template"]["spec"]["volumes"] if v["name"] == "vgpu-module-params")
    assert volume["configMap"] == {"name": "vgpu-module-params", "items": [{"key": "nvidia.conf", "path": "nvidia.conf"}]}
    # a change of parameters reloads the vGPU manager, as a driver's does
    plain = daemonsets(render_stack("kubevirt"))["nvidia-vgpu-manager-daemonset"]
    assert env_of(manager)["DRIVER_CONFIG_DIGEST"] != env_of(container(plain, "nvidia-driver-ctr"))["DRIVER_CONFIG_DIGEST"]


def test_own_vgpu_configs_are_rendered_beside_nvidias_and_permitted_in_kubevirt():
    recording = vm_render()
    document = yaml.safe_load(objects(recording, "ConfigMap")["default-vgpu-devices-config"]["data"]["config.yaml"])
    configs = document["vgpu-configs"]
    assert configs["a10-4q-gpu0"] == [{"device-filter": ["0x223610DE"], "devices": [0], "vgpu-devices": {"A10-4Q": 6}}]
    assert "default" in configs and "A10-12Q" in configs
    (patch,) = [r for r in recording.registrations if r.type == "kubernetes:kubevirt.io/v1:KubeVirtPatch"]
    mediated = patch.inputs["spec"]["configuration"]["permittedHostDevices"]["mediatedDevices"]
    assert [d["mdevNameSelector"] for d in mediated] == ["NVIDIA A10-4Q"]


BASE = {"kubevirt": lambda: stack_config("kubevirt"), "prod-managed": lambda: stack_config("prod-managed")}
BAD: list[tuple[str, str, Callable[[dict], None], str, str]] = [
    ("runtime class case", "prod-managed", setter(T, "runtimeClass", value="NVIDIA"), f"{T}.runtimeClass", "DNS-1123"),
    ("runtime class taken", "prod-managed", setter(T, "runtimeClass", value="nvidia-cdi"), f"{T}.runtimeClass", "nvidia-cdi, nvidia-legacy"),
    ("runtime class on cri-o", "prod-managed",
     lambda c: c["gpu-stack:cluster"].update(containerRuntime="cri-o") or c[T].update(runtimeClass=RUNTIME_CLASS),
     f"{T}.runtimeClass", "keep 'nvidia'"),
    ("mps root relative", "prod-managed", setter(D, "mpsRoot", value="run/mps"), f"{D}.mpsRoot", "absolute, normalised host path"),
    ("mps root in /proc", "prod-managed", setter(D, "mpsRoot", value="/proc/mps"), f"{D}.mpsRoot", "inside /proc"),
    ("vfio driver manager without passthrough pools", "prod-managed", setter(O, "vfioManagerDriverManager", value={"version": "v0.13.0"}),
     f"{O}.vfioManagerDriverManager", "does not deploy vfioManagerDriverManager"),
    ("vgpu driver manager pull policy", "kubevirt", setter(O, "vgpuManagerDriverManager", value={"imagePullPolicy": "Sometimes"}),
     f"{O}.vgpuManagerDriverManager.imagePullPolicy", "allowed values: 'Always', 'IfNotPresent', 'Never'"),
    ("vgpu driver manager pod setting", "kubevirt", setter(O, "vgpuManagerDriverManager", value={"tolerations": [{"operator": "Exists"}]}),
     f"{O}.vgpuManagerDriverManager", "set annotations, labels, priorityClassName and tolerations there"),
    ("vgpu kernel module config without vm-vgpu pools", "prod-managed", setter(V, "kernelModuleConfig", value={"name": "p", "files": ["nvidia.conf"]}),
     f"{V}.kernelModuleConfig", "no vm-vgpu pool"),
    ("vgpu kernel module config on a pod volume", "kubevirt", setter(V, "kernelModuleConfig", value={"name": "host-root", "files": ["nvidia.conf"]}),
     f"{V}.kernelModuleConfig.name", "one of its own volumes"),
    ("vgpu config type", "kubevirt", setter(V, "configs", value={"x": [{"devices": "all", "vgpuDevices": {"A10-4": 2}}]}),
     f"{V}.configs.x[0].vgpuDevices", "not a vGPU type name"),
    ("vgpu config mixes kinds", "kubevirt", setter(V, "configs", value={"x": [{"devices": "all", "vgpuDevices": {"A100-4C": 2, "A100-1-5C": 1}}]}),
     f"{V}.configs.x[0].vgpuDevices", "mixes time-sliced and MIG-backed"),
    ("vgpu config devices", "kubevirt", setter(V, "configs", value={"x": [{"devices": "some", "vgpuDevices": {"A10-4Q": 2}}]}),
     f"{V}.configs.x[0].devices", "'all' or a list of GPU indices"),
    ("vgpu config name", "kubevirt", setter(V, "configs", value={"a b": [{"devices": "all", "vgpuDevices": {"A10-4Q": 2}}]}),
     f"{V}.configs", "label value"),
    ("vgpu config empty", "kubevirt", setter(V, "configs", value={"x": []}), f"{V}.configs", "at least one entry"),
    ("vgpu config too many for the GPU", "kubevirt",
     lambda c: c[V].update(configs={"x": [{"devices": "all", "vgpuDevices": {"A10-4Q": 7}}]}) or next(
         p for p in c["gpu-stack:nodePools"] if p.get("workloadType") == "vm-vgpu").update(vgpuConfig="x"),
     "gpu-stack:nodePools[2].vgpuConfig", "holds 6 x A10-4Q, not 7"),
    ("default vgpu config unknown", "kubevirt", setter(V, "defaultConfig", value="mine"), f"{V}.defaultConfig", "no vGPU config named 'mine'"),
]


@pytest.mark.parametrize("base, change, path, fragment", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_values_are_refused_naming_the_key_and_what_it_takes(base, change, path, fragment):
    config = BASE[base]()
    config.setdefault(T, {})
    change(config)
    problems = config_problems(config)
    assert any(key == path and fragment in message for key, message in problems), problems
