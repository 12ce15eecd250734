"""Which label changes wait for a removal slot, and what a node holding one waits for (removal.py), against
recorded Nodes and the pods in agenttest."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agenttest import A100_DRIVER, H100_DRIVER, driver_pod, finished, gpu_job_pod, operand_pod, pod, terminating
from gpustack_agent.model import labels, removal
from gpustack_agent.model.labels import parse_config

NODE = "ip-10-0-12-35.ec2.internal"
APPLIED = labels.APPLIED_LABELS_ANNOTATION
DCGM_EXPORTER = "nvidia.com/gpu.deploy.dcgm-exporter"


def settled(node: dict[str, Any], config: labels.Config) -> dict[str, Any]:
    """`node` once the agent has applied everything `config` asks for."""
    node = copy.deepcopy(node)
    patch = labels.desired_patch(node, config)
    node["metadata"]["labels"] = removal.labels_after(node, patch)
    for key, value in ((patch or {}).get("metadata", {}).get("annotations") or {}).items():
        if value is None:
            node["metadata"]["annotations"].pop(key, None)
        else:
            node["metadata"]["annotations"][key] = value
    return node


@pytest.fixture
def config(paced_config) -> labels.Config:
    return parse_config(paced_config)


@pytest.fixture
def a100(load_fixture, config) -> dict[str, Any]:
    """An a100 node the agent has fully labelled, driver DaemonSet included."""
    return settled(load_fixture("node-a100-labelled"), config)


def pool_change(paced_config: dict[str, Any], **changes: Any) -> labels.Config:
    """The config with the a100 pool changed."""
    changed = copy.deepcopy(paced_config)
    changed["pools"][0].update(changes)
    return parse_config(changed)


def test_a_labelled_node_has_nothing_to_do(a100, config):
    plan = removal.plan(a100, config)

    assert plan.patch is None and plan.immediate is None and not plan.paced


def test_a_deploy_label_the_pool_no_longer_has_waits_for_a_slot(a100, paced_config):
    deploy = [key for key in paced_config["pools"][0]["deployLabels"] if key != DCGM_EXPORTER]

    plan = removal.plan(a100, pool_change(paced_config, deployLabels=deploy))

    assert plan.paced
    assert plan.removing == {DCGM_EXPORTER}
    assert plan.patch == {"metadata": {"labels": {DCGM_EXPORTER: None}}}
    assert plan.immediate is None


def test_a_node_that_left_its_pool_loses_the_pool_labels_now_and_its_operands_at_the_pace(a100, config):
    a100["metadata"]["labels"]["node.kubernetes.io/instance-type"] = "g5.xlarge"

    plan = removal.plan(a100, config)

    assert plan.removing == {key for key in a100["metadata"]["labels"] if key.startswith("nvidia.com/gpu.deploy.")}
    assert plan.driver_change == (A100_DRIVER, None)
    assert plan.immediate == {"metadata": {
        "labels": {"gpu-stack/pool": None, "nvidia.com/device-plugin.config": None,
                   "nvidia.com/gpu.workload.config": None},
        # Still naming the driver label, or its removal would never be applied.
        "annotations": {APPLIED: '["gpu-stack/driver"]'},
    }}

    # Applied, the immediate part leaves exactly the paced one, which settles the node.
    a100["metadata"]["labels"] = removal.labels_after(a100, plan.immediate)
    a100["metadata"]["annotations"][APPLIED] = '["gpu-stack/driver"]'
    rest = removal.plan(a100, config)
    assert rest.immediate is None
    assert (rest.removing, rest.driver_change) == (plan.removing, plan.driver_change)
    assert rest.patch["metadata"]["annotations"] == {APPLIED: None}


def test_a_renamed_pool_hands_the_node_to_the_new_driver_daemonset_at_the_pace(a100, paced_config):
    renamed = pool_change(paced_config, name="a100-v2",
                          labels={**paced_config["pools"][0]["labels"], "gpu-stack/driver": "nvidia-driver-a100-v2"})

    plan = removal.plan(a100, renamed)

    assert plan.paced and plan.removing == frozenset()
    assert plan.driver_change == (A100_DRIVER, "nvidia-driver-a100-v2")
    assert plan.immediate == {"metadata": {"labels": {"gpu-stack/pool": "a100-v2"}}}


def test_the_first_driver_label_is_added_at_once(load_fixture, config):
    # Written by an agent before 0.4.0: the node's driver pod already belongs to the DaemonSet the label names.
    plan = removal.plan(load_fixture("node-a100-labelled"), config)

    assert not plan.paced
    assert plan.immediate == plan.patch
    assert plan.patch["metadata"]["labels"] == {"gpu-stack/driver": A100_DRIVER}


def test_the_users_operands_switch_is_never_paced(a100, config):
    a100["metadata"]["labels"]["nvidia.com/gpu.deploy.operands"] = "false"
    a100["metadata"]["labels"]["node.kubernetes.io/instance-type"] = "p5.48xlarge"  # to the h100 pool, too

    plan = removal.plan(a100, config, [driver_pod("nvidia-driver-old", NODE, None)])

    assert not plan.paced
    assert plan.immediate == plan.patch
    assert plan.patch["metadata"]["labels"]["gpu-stack/driver"] == H100_DRIVER
    assert plan.patch["metadata"]["labels"][DCGM_EXPORTER] is None
    # Still deleted, at once: nothing else ever would.
    assert plan.orphans == ("nvidia-driver-old",)


def test_an_orphaned_driver_pod_is_handed_over_at_the_pace_even_when_the_labels_are_right(a100, config):
    orphan = driver_pod("nvidia-driver-daemonset-a100-old-x7k2p", NODE, None)
    leaving = terminating(driver_pod("nvidia-driver-daemonset-a100-old-q9z4w", NODE, None))

    plan = removal.plan(a100, config, [orphan, leaving, driver_pod("nvidia-driver-daemonset-a100-abcde", NODE,
                                                                   A100_DRIVER)])

    assert plan.patch is None and plan.paced
    assert plan.orphans == ("nvidia-driver-daemonset-a100-old-x7k2p",)


@pytest.mark.parametrize(
    ("candidate", "is_work"),
    [
        (gpu_job_pod("train-0", NODE), True),
        (pod("infer-0", NODE, namespace="ml", resources={"requests": {"nvidia.com/mig-1g.10gb": "1"}}), True),
        (pod("dra-0", NODE, namespace="ml", resourceClaims=[{"name": "gpu", "resourceClaimName": "gpu-0"}]), True),
        (pod("prep-0", NODE, namespace="ml", initContainers=[
            {"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]), True),
        (terminating(gpu_job_pod("stopping-0", NODE)), True),
        (pod("web-0", NODE, namespace="ml", resources={"limits": {"cpu": "2", "memory": "1Gi"}}), False),
        (finished(gpu_job_pod("train-0", NODE), "Succeeded"), False),
        (finished(gpu_job_pod("train-0", NODE), "Failed"), False),
        (gpu_job_pod("nvidia-cuda-validator-x", NODE, namespace="gpu-operator"), False),
        (pod("gpu-monitor-x", NODE, namespace="monitoring", owner=("DaemonSet", "gpu-monitor"),
             resources={"limits": {"nvidia.com/gpu": "1"}}), False),
        (pod("static-x", NODE, namespace="kube-system", owner=("Node", NODE),
             resources={"limits": {"nvidia.com/gpu": "1"}}), False),
    ],
)
def test_gpu_work_is_what_a_removal_would_pull_the_gpus_from(candidate, is_work):
    assert removal.gpu_work([candidate], "gpu-operator") == ([candidate] if is_work else [])


def test_log_lines_name_five_pods_and_count_them_all():
    work = [gpu_job_pod(f"train-{i}", NODE) for i in range(7)]

    assert removal.named_pods(work) == {"pods": [f"ml-team/train-{i}" for i in range(5)], "podCount": 7}


# --- what a node holding a slot waits for ---------------------------------------------------------------------


def test_an_operand_pod_whose_deploy_label_is_gone_holds_the_slot_until_it_is_gone(a100, config):
    node_labels = dict(a100["metadata"]["labels"])
    del node_labels[DCGM_EXPORTER]
    ready_driver = driver_pod("nvidia-driver-daemonset-a100-abcde", NODE, A100_DRIVER)
    pods = [operand_pod("nvidia-dcgm-exporter-x", NODE, "dcgm-exporter"),
            operand_pod("nvidia-device-plugin-x", NODE, "device-plugin"), ready_driver]

    assert removal.hold_reasons(node_labels, pods, config) == [
        "nvidia-dcgm-exporter-x is leaving (node selector needs nvidia.com/gpu.deploy.dcgm-exporter)"]
    assert removal.hold_reasons(node_labels, pods[1:], config) == []


def test_a_finished_pod_holds_nothing(a100, config):
    node_labels = {k: v for k, v in a100["metadata"]["labels"].items() if k != DCGM_EXPORTER}
    done = finished(operand_pod("nvidia-dcgm-exporter-x", NODE, "dcgm-exporter"))

    assert removal.hold_reasons(node_labels, [done], config) == []


def test_a_handed_over_node_holds_the_slot_until_only_its_new_driver_runs_ready(a100, config):
    node_labels = a100["metadata"]["labels"]
    node_labels["nvidia.com/gpu.deploy.driver"] = "true"
    orphan = driver_pod("nvidia-driver-old-x7k2p", NODE, None)
    other = driver_pod("nvidia-driver-daemonset-h100-q9z4w", NODE, H100_DRIVER)
    starting = driver_pod("nvidia-driver-daemonset-a100-abcde", NODE, A100_DRIVER, ready=False)
    ready = driver_pod("nvidia-driver-daemonset-a100-abcde", NODE, A100_DRIVER)

    assert removal.hold_reasons(node_labels, [orphan, other, starting], config) == [
        "nvidia-driver-daemonset-h100-q9z4w is a driver pod of DaemonSet nvidia-driver-daemonset-h100, "
        "not nvidia-driver-daemonset-a100",
        "nvidia-driver-old-x7k2p is an orphaned driver pod",
        "no Ready driver pod of DaemonSet nvidia-driver-daemonset-a100 yet",
    ]
    assert removal.hold_reasons(node_labels, [starting], config) == [
        "no Ready driver pod of DaemonSet nvidia-driver-daemonset-a100 yet"]
    assert removal.hold_reasons(node_labels, [ready], config) == []


def test_a_node_whose_driver_is_not_deployed_waits_for_no_driver_pod(a100, config):
    # The driver manager found a driver on the host: no driver pod is coming.
    assert a100["metadata"]["labels"]["nvidia.com/gpu.deploy.driver"] == "pre-installed"

    assert removal.hold_reasons(a100["metadata"]["labels"], [], config) == []


def test_a_node_whose_driver_label_is_removed_waits_until_no_driver_pod_is_left(a100, config):
    node_labels = {k: v for k, v in a100["metadata"]["labels"].items()
                   if k not in ("gpu-stack/driver", "nvidia.com/gpu.deploy.driver")}
    old = driver_pod("nvidia-driver-daemonset-a100-abcde", NODE, A100_DRIVER)

    assert removal.hold_reasons(node_labels, [old], config) == [
        "nvidia-driver-daemonset-a100-abcde is leaving (node selector needs nvidia.com/gpu.deploy.driver)"]
    assert removal.hold_reasons(node_labels, [], config) == []
