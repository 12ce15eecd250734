"""An operand override reaches every DaemonSet of its operand, whatever the DaemonSet is named: per pool, per node
image, per kernel, per RHCOS build (issue 33: with the Driver Toolkit every `operands.vgpuManager` override was
dropped, because the vGPU manager's DaemonSets were looked up by the one name they have off OpenShift).

Each stack is rendered with an override on every operand it deploys: a pod annotation and an env var naming the
operand, and a memory limit of its own. Which DaemonSets and containers are whose is written down here from
NVIDIA's names, independently of the catalog the program reads, and every DaemonSet rendered must be in it."""

from __future__ import annotations

import re
from typing import Any, Optional

import pytest

from components.catalogs import operand_overrides as targets
from components.config import load_config
from components.config.rules.overrides import deployed_operands
from stacktest import bag, container, objects, per_stack, render, stack_config

MARK_ANNOTATION = "test.gpu-stack.io/operand"
MARK_ENV = "GPU_STACK_TEST_OPERAND"
DTK = "openshift-driver-toolkit-ctr"

# Operand -> (its DaemonSets' names, its own containers), from NVIDIA's assets and gpu-stack's naming.
OPERAND_DAEMONSETS: dict[str, tuple[str, frozenset[str]]] = {
    "driver": (r"nvidia-driver-daemonset(-.+)?", frozenset({"nvidia-driver-ctr"})),
    "vgpuManager": (r"nvidia-vgpu-manager-daemonset(-.+)?", frozenset({"nvidia-driver-ctr"})),
    "toolkit": ("nvidia-container-toolkit-daemonset", frozenset({"nvidia-container-toolkit-ctr"})),
    "validator": ("nvidia-operator-validator|nvidia-dra-validator", frozenset({"nvidia-operator-validator", "nvidia-dra-validator"})),
    "devicePlugin": ("nvidia-device-plugin-daemonset", frozenset({"nvidia-device-plugin"})),
    "mpsControlDaemon": ("nvidia-device-plugin-mps-control-daemon", frozenset({"mps-control-daemon-ctr"})),
    "gfd": ("gpu-feature-discovery", frozenset({"gpu-feature-discovery"})),
    "dcgm": ("nvidia-dcgm(-dra)?", frozenset({"nvidia-dcgm-ctr"})),
    "dcgmExporter": ("nvidia-dcgm-exporter(-dra)?", frozenset({"nvidia-dcgm-exporter", "nvidia-dcgm-exporter-dra"})),
    "migManager": ("nvidia-mig-manager", frozenset({"nvidia-mig-manager"})),
    "nodeStatusExporter": ("nvidia-node-status-exporter", frozenset({"nvidia-node-status-exporter"})),
    "vgpuDeviceManager": ("nvidia-vgpu-device-manager", frozenset({"nvidia-vgpu-device-manager"})),
    "vfioManager": ("nvidia-vfio-manager", frozenset({"nvidia-vfio-manager"})),
    "sandboxValidator": ("nvidia-sandbox-validator", frozenset({"nvidia-sandbox-validator"})),
    "sandboxDevicePlugin": ("nvidia-sandbox-device-plugin-daemonset", frozenset({"nvidia-sandbox-device-plugin-ctr"})),
    "kataSandboxDevicePlugin": ("nvidia-kata-sandbox-device-plugin-daemonset", frozenset({"nvidia-kata-sandbox-device-plugin-ctr"})),
    "ccManager": ("nvidia-cc-manager", frozenset({"nvidia-cc-manager"})),
    "draDriver": ("nvidia-dra-driver-kubelet-plugin", frozenset({"gpus", "compute-domains"})),
}
# gpu-stack's own DaemonSets and NFD's: no operand key addresses them.
NO_OPERAND = {"gpu-stack-node-labeler", "gpu-stack-node-inventory", "node-feature-discovery-worker"}
# Containers of other operands in a pod, by the pod's operand: their keys of their own.
GUESTS: dict[str, dict[str, str]] = {
    "driver": {"k8s-driver-manager": "driverManager", "nvidia-fs-ctr": "gds", "nvidia-gdrcopy-ctr": "gdrcopy", "nvidia-peermem-ctr": "peermem"},
    "vgpuManager": {"k8s-driver-manager": "vgpuManagerDriverManager"},
    "vfioManager": {"k8s-driver-manager": "vfioManagerDriverManager"},
}
# The Driver Toolkit sidecar builds its pod's driver, and is sized as that driver (NVIDIA's NVIDIADriver template).
RESOURCES_ONLY = {"driver": DTK, "vgpuManager": DTK}

OPENSHIFT_VM = "openshift-with-vm-pools"


def openshift_with_vm_pools() -> dict[str, Any]:
    """The shipped OpenShift stack with vGPU and passthrough pools and every GPUDirect sidecar: the Driver Toolkit
    builds the vGPU manager per RHCOS build, and GDS next to the driver."""
    config = stack_config("openshift")
    config["gpu-stack:sandboxWorkloads"] = {"mode": "kubevirt", "defaultWorkload": "container"}
    config["gpu-stack:vgpu"] = {"managerImage": "image-registry.openshift-image-registry.svc:5000/nvidia-gpu-operator/vgpu-manager:580.82.07-rhcos4.16"}
    config["gpu-stack:gpudirect"] = {"gdrcopy": True, "gds": True, "rdma": {"enabled": True}}
    config["gpu-stack:nodePools"] += [
        {"name": "vgpu-a10", "nodeSelector": {"node.kubernetes.io/instance-type": "g5.12xlarge"}, "gpuModel": "A10",
         "os": "rhcos4.16", "workloadType": "vm-vgpu", "vgpuConfig": "A10-12Q"},
        {"name": "vm-a100", "nodeSelector": {"node.kubernetes.io/instance-type": "p4de.24xlarge"}, "gpuModel": "A100-80GB",
         "os": "rhcos4.16", "workloadType": "vm-passthrough"},
    ]  # fmt: skip
    return config


def memory(key: str) -> str:
    return f"{64 + targets.OPERAND_KEYS.index(key)}Mi"


def with_an_override_on_every_operand(config: dict[str, Any]) -> dict[str, Any]:
    deployed = deployed_operands(load_config(bag(config)))
    overrides: dict[str, Any] = {}
    for key in sorted(deployed):
        override: dict[str, Any] = {"env": [{"name": MARK_ENV, "value": key}], "resources": {"limits": {"memory": memory(key)}}}
        if not targets.OPERANDS[key].runs_in:
            override["annotations"] = {MARK_ANNOTATION: key}
        overrides[key] = override
    return {**config, "gpu-stack:operands": overrides}


def operand_of(daemonset: str) -> Optional[str]:
    found = [key for key, (names, _) in OPERAND_DAEMONSETS.items() if re.fullmatch(names, daemonset)]
    assert len(found) == 1 or daemonset in NO_OPERAND, f"{daemonset}: which operand is it? (add it to OPERAND_DAEMONSETS or NO_OPERAND)"
    return found[0] if found else None


def container_key(operand: Optional[str], name: str) -> Optional[str]:
    if operand is None:
        return None
    return operand if name in OPERAND_DAEMONSETS[operand][1] else GUESTS.get(operand, {}).get(name)


def marks(container: dict[str, Any]) -> tuple[Optional[str], Optional[str]]:
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    return env.get(MARK_ENV), container.get("resources", {}).get("limits", {}).get("memory")


def reached(daemonset: dict[str, Any]) -> tuple[Optional[str], set[str]]:
    """The DaemonSet's operand, after checking that its pods carry that operand's annotation and each container
    the marks of its own key (none for the validation gates gpu-stack puts in front); the keys that reached it."""
    name = daemonset["metadata"]["name"]
    operand = operand_of(name)
    template = daemonset["spec"]["template"]
    assert (template["metadata"].get("annotations") or {}).get(MARK_ANNOTATION) == operand, name
    keys = set()
    spec = template["spec"]
    for c in [*spec.get("initContainers", []), *spec["containers"]]:
        where = f"{name}/{c['name']}"
        env_mark, memory_limit = marks(c)
        if c["name"] == RESOURCES_ONLY.get(operand):
            assert (env_mark, memory_limit) == (None, memory(operand)), where
            continue
        key = container_key(operand, c["name"])
        assert env_mark == key, f"{where}: the override of {env_mark} reached it, expected {key}'s"
        if key is not None:
            assert memory_limit == memory(key), where
            keys.add(key)
    return operand, keys


def rendered_with_overrides(case: str) -> dict[str, dict[str, Any]]:
    config = openshift_with_vm_pools() if case == OPENSHIFT_VM else stack_config(case)
    return objects(render(with_an_override_on_every_operand(config), stack=case), "DaemonSet")


# `make test` renders the OpenShift variant (DaemonSets per pool and RHCOS build, the vGPU manager's per build, the
# VM operands, every GPUDirect sidecar), the stacks naming theirs per kernel, per node image and per DRA flavour, and
# the one whose MPS daemon runs where the device plugin does; `make test-all` every shipped stack.
CASES = [*per_stack(keep=("prod-precompiled", "hybrid", "dra", "onprem-host-driver")), OPENSHIFT_VM]


@pytest.mark.parametrize("case", CASES)
def test_an_override_on_every_operand_reaches_every_container_of_its_daemonsets(case):
    daemonsets = rendered_with_overrides(case)
    reached_keys: set[str] = set()
    pod_operands: set[str] = set()
    for daemonset in daemonsets.values():
        operand, keys = reached(daemonset)
        reached_keys |= keys
        pod_operands |= {operand} - {None}
    config = openshift_with_vm_pools() if case == OPENSHIFT_VM else stack_config(case)
    deployed = deployed_operands(load_config(bag(config)))  # each of them overridden
    # each override reached its own containers, and those with pods of their own reached some
    assert reached_keys == deployed
    assert pod_operands == {key for key in deployed if not targets.OPERANDS[key].runs_in}


def test_the_driver_toolkit_sidecar_is_sized_as_the_driver_it_builds_and_stays_the_toolkits_otherwise():
    daemonsets = rendered_with_overrides(OPENSHIFT_VM)  # the render the test above made
    builds = {"nvidia-driver-daemonset-training-": "driver", "nvidia-vgpu-manager-daemonset-": "vgpuManager"}
    for prefix, operand in builds.items():
        pods = [ds for name, ds in daemonsets.items() if name.startswith(prefix)]
        assert len(pods) == 2  # one per RHCOS build
        for ds in pods:
            dtk = container(ds, DTK)
            assert dtk["resources"] == {"limits": {"memory": memory(operand)}}
            assert dtk["image"].startswith("quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:")
            assert dtk["command"] == ["bash", "-xc"] and MARK_ENV not in {e["name"] for e in dtk["env"]}
