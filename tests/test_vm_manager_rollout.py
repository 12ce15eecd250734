"""The VM pools' driver-like DaemonSets (the vGPU manager, the VFIO manager) are rolled by the node agents as drivers
are: OnDelete, their template digest named in the node-pools document, each VM pool listing its manager, and the
final gate awaiting every one of them."""

from __future__ import annotations

import json

import pytest

from stacktest import container, env_of, objects, render_stack

DIGEST = "gpu-stack/template-digest"
MANAGERS = {"vm-vgpu": "nvidia-vgpu-manager-daemonset", "vm-passthrough": "nvidia-vfio-manager"}


@pytest.fixture(scope="module")
def kubevirt():
    recording = render_stack("kubevirt")
    document = json.loads(objects(recording, "ConfigMap")["gpu-stack-node-pools"]["data"]["node-pools.json"])
    return objects(recording, "DaemonSet"), objects(recording, "Job"), document


def test_every_agent_rolled_daemonset_is_on_delete_and_named_with_its_digest(kubevirt):
    daemonsets, _, document = kubevirt
    rolled = {name: ds for name, ds in daemonsets.items() if DIGEST in ds["metadata"].get("annotations", {})}

    assert set(MANAGERS.values()) <= set(rolled)
    assert {name: ds["metadata"]["annotations"][DIGEST] for name, ds in rolled.items()} == document["drivers"]
    assert {ds["spec"]["updateStrategy"]["type"] for ds in rolled.values()} == {"OnDelete"}


def test_each_vm_pool_names_its_manager_as_its_driver_like_daemonset(kubevirt):
    _, _, document = kubevirt
    vm_pools = [p for p in document["pools"] if p["labels"]["nvidia.com/gpu.workload.config"] in MANAGERS]

    assert vm_pools, "the kubevirt stack has VM pools"
    for pool in vm_pools:
        manager = MANAGERS[pool["labels"]["nvidia.com/gpu.workload.config"]]
        assert pool["driverImages"] == [{"daemonSet": manager, "nodeLabels": {}}], pool["name"]
        assert "nvidia.com/gpu.deploy.driver" not in pool["deployLabels"], "a VM pool never runs a container driver"


def test_the_final_gate_awaits_every_driver_like_daemonset(kubevirt):
    _, jobs, document = kubevirt
    gate = env_of(container(jobs["gpu-stack-validation"], "wait-validated"))

    assert set(gate["DRIVER_DAEMONSETS"].split(",")) == set(document["drivers"])
    assert gate["SANDBOX_VALIDATOR"] == "true"
