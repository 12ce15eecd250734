"""Paced label removal (pacer.py) against an API server in memory (agenttest.FakeCluster).

Each test drives passes by hand: one pass is what the label loop does on a watch event or a resync, the node
read fresh from the fake API server."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from agenttest import (A100_DRIVER, FakeCluster, Recorder, driver_pod, fake_api, finished, gpu_job_pod, model,
                       operand_pod, renamed, stop_after)
from gpustack_agent import kube, labels
from gpustack_agent.pacer import Pacer

NODE = "ip-10-0-12-35.ec2.internal"
SECOND = "ip-10-0-12-36.ec2.internal"
THIRD = "ip-10-0-12-37.ec2.internal"
EXPORTER = "nvidia.com/gpu.deploy.dcgm-exporter"
A100_V2_DRIVER = "nvidia-driver-daemonset-a100-v2"


class Clock:
    def __init__(self) -> None:
        self.now = datetime.datetime(2025, 6, 2, 10, 0, tzinfo=datetime.timezone.utc)

    def __call__(self) -> datetime.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += datetime.timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def a100_node(load_fixture: Any, config: dict[str, Any], name: str = NODE) -> dict[str, Any]:
    """An a100 node that the agent has fully labelled under `config`."""
    node = renamed(load_fixture("node-a100-labelled"), name)
    patch = labels.desired_patch(node, config)
    for section in ("labels", "annotations"):
        for key, value in ((patch or {}).get("metadata", {}).get(section) or {}).items():
            node["metadata"][section][key] = value
    return node


def without_exporter(config: dict[str, Any], **removal: Any) -> dict[str, Any]:
    """`config` after the a100 pool dropped DCGM exporter, with `removal` settings changed."""
    config = copy.deepcopy(config)
    config["pools"][0]["deployLabels"].remove(EXPORTER)
    config["removal"].update(removal)
    return config


def with_a100_renamed(config: dict[str, Any]) -> dict[str, Any]:
    """`config` after the a100 pool was renamed: its driver DaemonSet, too."""
    config = copy.deepcopy(config)
    config["pools"][0]["name"] = "a100-v2"
    config["pools"][0]["labels"]["gpu-stack/driver"] = A100_V2_DRIVER
    return config


class Agent:
    """The label agent of one node: a Pacer whose passes read the node from the cluster."""

    def __init__(self, cluster: FakeCluster, node: str, clock: Clock) -> None:
        self.cluster = cluster
        self.node = node
        self.log = Recorder()
        self.pacer = Pacer(cluster.core, cluster.coordination, node_name=node, log=self.log, now=clock)

    def reconcile(self, config: dict[str, Any]) -> bool:
        return self.pacer(kube.get_node(self.cluster.core, self.node), config)

    def events(self) -> list[str]:
        return self.log.events()

    def last(self, event: str) -> dict[str, Any]:
        return [r for r in self.log.records if r["event"] == event][-1]


def lease_holder(cluster: FakeCluster, name: str = "gpu-stack-removal-0") -> str | None:
    lease = cluster.lease(name)
    return None if lease is None else lease["spec"]["holderIdentity"]


# --- GPU work ------------------------------------------------------------------------------------------------


def test_a_removal_waits_while_gpu_work_runs_on_the_node(load_fixture, paced_config, clock):
    cluster = FakeCluster([a100_node(load_fixture, paced_config)],
                          [gpu_job_pod("train-0", NODE), operand_pod("nvidia-dcgm-exporter-x", NODE, "dcgm-exporter")])
    agent = Agent(cluster, NODE, clock)
    config = without_exporter(paced_config)

    assert agent.reconcile(config) is False
    assert agent.reconcile(config) is False

    assert cluster.node_labels(NODE)[EXPORTER] == "true"
    assert cluster.leases == {}
    # Said once, not on every pass.
    assert agent.events() == ["removal-waiting"]
    assert agent.last("removal-waiting") == {
        "level": "warning", "event": "removal-waiting", "node": NODE, "reason": "gpu work on the node",
        "drain": False, "labels": [EXPORTER], "pods": ["ml-team/train-0"], "podCount": 1,
    }

    cluster.pods[0] = finished(cluster.pods[0])
    assert agent.reconcile(config) is True

    assert EXPORTER not in cluster.node_labels(NODE)
    assert agent.events()[1:] == ["removal-slot-acquired", "labels-changed", "removal-holding"]
    assert agent.last("labels-changed")["paced"] is True


def test_the_slot_is_held_until_the_operand_pods_are_gone_then_released(load_fixture, paced_config, clock):
    cluster = FakeCluster([a100_node(load_fixture, paced_config)],
                          [operand_pod("nvidia-dcgm-exporter-x", NODE, "dcgm-exporter")])
    agent = Agent(cluster, NODE, clock)
    config = without_exporter(paced_config)

    assert agent.reconcile(config) is True
    acquired = cluster.lease("gpu-stack-removal-0")
    assert acquired["spec"]["holderIdentity"] == NODE
    assert agent.last("removal-holding")["waitingFor"] == [
        "nvidia-dcgm-exporter-x is leaving (node selector needs nvidia.com/gpu.deploy.dcgm-exporter)"]

    clock.advance(10)
    assert agent.reconcile(config) is True
    renewed = cluster.lease("gpu-stack-removal-0")
    assert renewed["spec"]["renewTime"] == "2025-06-02T10:00:10.000000Z"
    assert renewed["spec"]["acquireTime"] == acquired["spec"]["acquireTime"]

    cluster.remove("nvidia-dcgm-exporter-x")
    assert agent.reconcile(config) is False
    assert cluster.leases == {}
    assert agent.events()[-1] == "removal-released"


# --- drain ---------------------------------------------------------------------------------------------------


def test_drain_evicts_the_gpu_work_holding_a_slot_and_removes_once_it_is_gone(load_fixture, paced_config, clock):
    cluster = FakeCluster([a100_node(load_fixture, paced_config)], [gpu_job_pod("train-0", NODE)])
    agent = Agent(cluster, NODE, clock)
    config = without_exporter(paced_config, drain=True)

    assert agent.reconcile(config) is True
    assert cluster.evicted == ["ml-team/train-0"]
    assert lease_holder(cluster) == NODE
    assert cluster.node_labels(NODE)[EXPORTER] == "true"

    # Evicted but still terminating: not evicted again, and the labels still wait.
    assert agent.reconcile(config) is True
    assert cluster.evicted == ["ml-team/train-0"]
    assert cluster.node_labels(NODE)[EXPORTER] == "true"

    cluster.settle()
    assert agent.reconcile(config) is False
    assert EXPORTER not in cluster.node_labels(NODE)
    assert agent.events() == ["removal-slot-acquired", "removal-draining", "labels-changed", "removal-released"]


def test_an_eviction_a_disruption_budget_blocks_is_asked_again_next_pass(load_fixture, paced_config, clock):
    cluster = FakeCluster([a100_node(load_fixture, paced_config)], [gpu_job_pod("train-0", NODE)])
    cluster.blocked.add("ml-team/train-0")
    agent = Agent(cluster, NODE, clock)
    config = without_exporter(paced_config, drain=True)

    assert agent.reconcile(config) is True
    assert cluster.evicted == []
    assert agent.last("removal-eviction-blocked") == {
        "level": "warning", "event": "removal-eviction-blocked", "node": NODE, "pod": "ml-team/train-0", "status": 429}

    cluster.blocked.clear()
    agent.reconcile(config)
    assert cluster.evicted == ["ml-team/train-0"]


# --- the shared budget ---------------------------------------------------------------------------------------


def test_with_a_budget_of_one_the_second_node_waits_for_the_first(load_fixture, paced_config, clock):
    cluster = FakeCluster(
        [a100_node(load_fixture, paced_config, NODE), a100_node(load_fixture, paced_config, SECOND)],
        [operand_pod("nvidia-dcgm-exporter-a", NODE, "dcgm-exporter"),
         operand_pod("nvidia-dcgm-exporter-b", SECOND, "dcgm-exporter")])
    first, second = Agent(cluster, NODE, clock), Agent(cluster, SECOND, clock)
    config = without_exporter(paced_config)

    assert first.reconcile(config) is True
    assert second.reconcile(config) is False

    assert EXPORTER not in cluster.node_labels(NODE)
    assert cluster.node_labels(SECOND)[EXPORTER] == "true"
    assert second.last("removal-waiting") == {
        "level": "warning", "event": "removal-waiting", "node": SECOND, "reason": "every removal slot is held",
        "budget": 1, "holders": [NODE]}

    cluster.remove("nvidia-dcgm-exporter-a")
    assert first.reconcile(config) is False
    assert second.reconcile(config) is True
    assert EXPORTER not in cluster.node_labels(SECOND)
    assert lease_holder(cluster) == SECOND


def test_a_percentage_budget_is_resolved_against_the_gpu_nodes(load_fixture, paced_config, clock):
    names = (NODE, SECOND, THIRD)
    cluster = FakeCluster([a100_node(load_fixture, paced_config, n) for n in names],
                          [operand_pod(f"nvidia-dcgm-exporter-{i}", n, "dcgm-exporter") for i, n in enumerate(names)])
    agents = [Agent(cluster, n, clock) for n in names]
    config = without_exporter(paced_config, maxUnavailable="50%")

    assert [agent.reconcile(config) for agent in agents] == [True, True, False]

    # 50% of 3 GPU nodes, rounded up.
    assert [lease_holder(cluster, f"gpu-stack-removal-{i}") for i in range(3)] == [NODE, SECOND, None]
    assert agents[2].last("removal-waiting")["budget"] == 2
    assert cluster.core.list_node.call_args.kwargs["label_selector"] == "nvidia.com/gpu.present=true"


def test_an_expired_slot_is_taken_over(load_fixture, paced_config, clock):
    cluster = FakeCluster([a100_node(load_fixture, paced_config)],
                          [operand_pod("nvidia-dcgm-exporter-x", NODE, "dcgm-exporter")])
    # Its holder stopped renewing ten minutes ago: the node is gone.
    cluster.put_lease("gpu-stack-removal-0", "ip-10-0-99-9.ec2.internal", "2025-06-02T09:50:00.000000Z")
    agent = Agent(cluster, NODE, clock)

    agent.reconcile(without_exporter(paced_config))

    lease = cluster.lease("gpu-stack-removal-0")
    assert lease["spec"]["holderIdentity"] == NODE
    assert lease["spec"]["leaseTransitions"] == 1
    assert agent.last("removal-slot-acquired")["action"] == "take-over"
    assert EXPORTER not in cluster.node_labels(NODE)


def test_a_slot_another_node_created_first_sends_this_one_to_the_next(load_fixture, paced_config, clock):
    cluster = FakeCluster([a100_node(load_fixture, paced_config)],
                          [operand_pod("nvidia-dcgm-exporter-x", NODE, "dcgm-exporter")])
    cluster.fail("create_namespaced_lease", ApiException(status=409, reason="AlreadyExists"))
    agent = Agent(cluster, NODE, clock)

    assert agent.reconcile(without_exporter(paced_config, maxUnavailable=2)) is True

    assert lease_holder(cluster, "gpu-stack-removal-1") == NODE
    assert cluster.lease("gpu-stack-removal-0") is None


def test_a_restarted_agent_carries_on_with_the_slot_it_held(load_fixture, paced_config, clock):
    node = a100_node(load_fixture, paced_config)
    del node["metadata"]["labels"][EXPORTER]  # removed before the restart; its pod is still leaving
    cluster = FakeCluster([node], [operand_pod("nvidia-dcgm-exporter-x", NODE, "dcgm-exporter")])
    cluster.put_lease("gpu-stack-removal-0", NODE, "2025-06-02T09:59:30.000000Z")
    agent = Agent(cluster, NODE, clock)
    config = without_exporter(paced_config)

    assert agent.reconcile(config) is True
    assert agent.events() == ["removal-slot-resumed", "removal-holding"]
    assert cluster.lease("gpu-stack-removal-0")["spec"]["renewTime"] == "2025-06-02T10:00:00.000000Z"

    cluster.remove("nvidia-dcgm-exporter-x")
    assert agent.reconcile(config) is False
    assert cluster.leases == {}


def test_a_slot_another_node_took_over_is_given_up(load_fixture, paced_config, clock):
    cluster = FakeCluster([a100_node(load_fixture, paced_config)],
                          [operand_pod("nvidia-dcgm-exporter-x", NODE, "dcgm-exporter")])
    agent = Agent(cluster, NODE, clock)
    config = without_exporter(paced_config)
    agent.reconcile(config)

    cluster.put_lease("gpu-stack-removal-0", SECOND, "2025-06-02T10:00:05.000000Z")

    assert agent.reconcile(config) is False
    assert agent.last("removal-slot-lost")["holder"] == SECOND
    assert lease_holder(cluster) == SECOND


# --- what is not paced ---------------------------------------------------------------------------------------


def test_the_users_operands_switch_removes_every_deploy_label_at_once(load_fixture, paced_config, clock):
    node = a100_node(load_fixture, paced_config)
    node["metadata"]["labels"]["nvidia.com/gpu.deploy.operands"] = "false"
    cluster = FakeCluster([node], [gpu_job_pod("train-0", NODE)])
    agent = Agent(cluster, NODE, clock)

    assert agent.reconcile(paced_config) is False

    assert not [key for key in cluster.node_labels(NODE) if key.startswith("nvidia.com/gpu.deploy.")
                and key != "nvidia.com/gpu.deploy.operands"]
    assert agent.events() == ["labels-changed"]
    cluster.coordination.read_namespaced_lease.assert_not_called()
    cluster.core.list_pod_for_all_namespaces.assert_not_called()


def test_a_version_1_config_changes_everything_at_once(load_fixture, pool_config, clock):
    cluster = FakeCluster([a100_node(load_fixture, pool_config)], [gpu_job_pod("train-0", NODE)])
    agent = Agent(cluster, NODE, clock)
    config = copy.deepcopy(pool_config)
    config["pools"][0]["deployLabels"].remove(EXPORTER)

    assert agent.reconcile(config) is False

    assert EXPORTER not in cluster.node_labels(NODE)
    assert agent.events() == ["labels-changed"]
    cluster.core.list_namespaced_pod.assert_not_called()
    cluster.coordination.read_namespaced_lease.assert_not_called()


def test_the_first_driver_label_is_added_at_once(load_fixture, pool_config, paced_config, clock):
    # Labelled by an agent before 0.4.0: its driver pod already belongs to the DaemonSet the label will name.
    cluster = FakeCluster([a100_node(load_fixture, pool_config)],
                          [driver_pod("nvidia-driver-daemonset-a100-abcde", NODE, A100_DRIVER)])
    agent = Agent(cluster, NODE, clock)

    assert agent.reconcile(paced_config) is False

    assert cluster.node_labels(NODE)["gpu-stack/driver"] == A100_DRIVER
    assert cluster.leases == {} and cluster.deleted == []


# --- driver handover -----------------------------------------------------------------------------------------


def driver_deployed(node: dict[str, Any]) -> dict[str, Any]:
    node["metadata"]["labels"]["nvidia.com/gpu.deploy.driver"] = "true"
    return node


def test_an_orphaned_driver_pod_is_handed_over_to_the_nodes_daemonset_at_the_pace(load_fixture, paced_config,
                                                                                   clock):
    # The node's labels are right, but its driver pod's DaemonSet was deleted (orphan propagation) and
    # recreated: nothing would ever replace that pod.
    cluster = FakeCluster([driver_deployed(a100_node(load_fixture, paced_config))],
                          [driver_pod("nvidia-driver-old-x7k2p", NODE, None)])
    agent = Agent(cluster, NODE, clock)

    assert agent.reconcile(paced_config) is True
    assert cluster.deleted == ["gpu-operator/nvidia-driver-old-x7k2p"]
    assert agent.last("removal-slot-acquired")["orphanedDriverPods"] == ["nvidia-driver-old-x7k2p"]

    cluster.settle()
    cluster.add(driver_pod("nvidia-driver-daemonset-a100-abcde", NODE, A100_DRIVER, ready=False))
    assert agent.reconcile(paced_config) is True
    assert agent.last("removal-holding")["waitingFor"] == [
        "no Ready driver pod of DaemonSet nvidia-driver-daemonset-a100 yet"]

    cluster.remove("nvidia-driver-daemonset-a100-abcde")
    cluster.add(driver_pod("nvidia-driver-daemonset-a100-abcde", NODE, A100_DRIVER, ready=True))
    assert agent.reconcile(paced_config) is False
    assert cluster.leases == {}
    assert cluster.deleted == ["gpu-operator/nvidia-driver-old-x7k2p"]


def test_a_changed_driver_label_hands_the_node_over_once_the_new_driver_is_ready(load_fixture, paced_config,
                                                                                 clock):
    cluster = FakeCluster([driver_deployed(a100_node(load_fixture, paced_config))],
                          [driver_pod("nvidia-driver-daemonset-a100-abcde", NODE, None)])  # A, deleted by the rename
    cluster.put_lease("gpu-stack-removal-0", SECOND, "2025-06-02T09:59:50.000000Z")
    agent = Agent(cluster, NODE, clock)
    config = with_a100_renamed(paced_config)

    # Waiting for the slot: the pool label changes at once, the driver DaemonSet does not.
    assert agent.reconcile(config) is False
    assert cluster.node_labels(NODE)["gpu-stack/pool"] == "a100-v2"
    assert cluster.node_labels(NODE)["gpu-stack/driver"] == A100_DRIVER
    assert cluster.deleted == []

    cluster.leases.clear()
    assert agent.reconcile(config) is True
    assert cluster.node_labels(NODE)["gpu-stack/driver"] == A100_V2_DRIVER
    assert cluster.deleted == ["gpu-operator/nvidia-driver-daemonset-a100-abcde"]
    assert agent.last("removal-slot-acquired")["driver"] == {"old": A100_DRIVER, "new": A100_V2_DRIVER}

    cluster.settle()
    cluster.add(driver_pod("nvidia-driver-daemonset-a100-v2-fghij", NODE, A100_V2_DRIVER, ready=False))
    assert agent.reconcile(config) is True

    cluster.remove("nvidia-driver-daemonset-a100-v2-fghij")
    cluster.add(driver_pod("nvidia-driver-daemonset-a100-v2-fghij", NODE, A100_V2_DRIVER, ready=True))
    assert agent.reconcile(config) is False
    assert cluster.leases == {}


def test_a_node_whose_pool_is_removed_retires_its_driver_at_the_pace(load_fixture, paced_config, clock):
    cluster = FakeCluster([driver_deployed(a100_node(load_fixture, paced_config))],
                          [driver_pod("nvidia-driver-daemonset-a100-abcde", NODE, None)])
    agent = Agent(cluster, NODE, clock)
    config = copy.deepcopy(paced_config)
    del config["pools"][0]

    assert agent.reconcile(config) is True
    node_labels = cluster.node_labels(NODE)
    assert "gpu-stack/driver" not in node_labels and "gpu-stack/pool" not in node_labels
    assert not [key for key in node_labels if key.startswith("nvidia.com/gpu.deploy.")]
    assert labels.APPLIED_LABELS_ANNOTATION not in cluster.nodes[NODE]["metadata"]["annotations"]
    assert cluster.deleted == ["gpu-operator/nvidia-driver-daemonset-a100-abcde"]

    cluster.settle()
    assert agent.reconcile(config) is False
    assert cluster.leases == {}


# --- in the label loop ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["list_namespaced_pod", "list_pod_for_all_namespaces", "read_namespaced_lease",
                                    "create_namespaced_lease", "create_namespaced_pod_eviction"])
def test_the_label_loop_backs_off_failed_requests_and_looks_again_soon_while_holding(load_fixture, paced_config,
                                                                                     clock, method):
    cluster = FakeCluster([a100_node(load_fixture, paced_config)], [gpu_job_pod("train-0", NODE)])
    cluster.fail(method, ApiException(status=503, reason="Service Unavailable"))
    agent = Agent(cluster, NODE, clock)
    sleeps: list[float] = []
    watch_timeouts: list[int] = []

    def watch_events(api: Any, name: str, timeout: int, resource_version: str | None) -> Any:
        watch_timeouts.append(timeout)
        return iter(())

    kube.run_label_loop(cluster.core, node_name=NODE, load_config=lambda: without_exporter(paced_config, drain=True),
                        resync_seconds=60, log=agent.log, stop=stop_after(2), sleep=sleeps.append,
                        watch_events=watch_events, rng=lambda: 1.0, reconcile=agent.pacer)

    assert [r["status"] for r in agent.log.records if r["event"] == "retry"] == [503]
    # Then the empty watch's pause, one step further up the same backoff.
    assert sleeps == [1.0, 2.0]
    assert lease_holder(cluster) == NODE and cluster.evicted == ["ml-team/train-0"]
    assert watch_timeouts == [kube.PACE_POLL_SECONDS]


def test_the_label_loop_starts_a_new_watch_when_a_change_starts_or_ends():
    node = {"metadata": {"name": NODE, "resourceVersion": "1"}}
    core = fake_api()
    core.read_node.return_value = model(node, "V1Node")
    busy_after = iter([False, True, True, False])
    calls: list[str] = []
    watch_timeouts: list[int] = []

    def reconcile(seen: Any, config: Any) -> bool:
        calls.append(seen["metadata"]["resourceVersion"])
        return next(busy_after)

    def watch_events(api: Any, name: str, timeout: int, resource_version: str | None) -> Any:
        watch_timeouts.append(timeout)
        for version in ("2", "3"):
            yield {"type": "MODIFIED", "object": {"metadata": {"name": NODE, "resourceVersion": version}}}

    kube.run_label_loop(core, node_name=NODE, load_config=dict, resync_seconds=60, log=Recorder(),
                        stop=stop_after(4), sleep=lambda s: None, watch_events=watch_events, reconcile=reconcile)

    # Pass 1: idle, watching 60 s, until event "2" starts a change; pass 2: holding, watching 10 s, until
    # event "2" ends it.
    assert watch_timeouts == [60, kube.PACE_POLL_SECONDS]
    assert calls == ["1", "2", "1", "2"]
