"""Paced label removal (pacer.py) against an API server in memory (agenttest.FakeCluster).

Each test drives passes by hand: one pass is what the label loop does on a watch event or a resync, the node
read fresh from the fake API server."""

from __future__ import annotations

import copy
import json
import datetime
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from agenttest import (A100_DRIVER, FakeCluster, Recorder, driver_pod, fake_api, finished, gpu_job_pod, model,
                       operand_pod, renamed, stop_after)
from gpustack_agent import kube, labels, upgrade
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
        self.seconds = 0.0
        self.pacer = Pacer(cluster.core, cluster.apps, node_name=node, log=self.log, now=clock,
                           clock=lambda: self.seconds, rng=lambda: 0.5)

    def reconcile(self, config: dict[str, Any]) -> bool:
        return self.pacer(kube.get_node(self.cluster.core, self.node), config)

    def events(self) -> list[str]:
        return self.log.events()

    def last(self, event: str) -> dict[str, Any]:
        return [r for r in self.log.records if r["event"] == event][-1]


def holders(cluster: FakeCluster) -> set[str]:
    return cluster.holders()


def budget_held_by(cluster: FakeCluster, node: str, reason: str = "label-removal") -> None:
    """The budget as a node that held a slot before this agent started left it."""
    cluster.config_maps[("gpu-operator", "gpu-stack-upgrade-budget")] = {
        "metadata": {"name": "gpu-stack-upgrade-budget", "namespace": "gpu-operator", "resourceVersion": "7"},
        "data": {node: json.dumps({"reason": reason, "since": "2025-06-02T09:59:30Z"})}}


def version3(config: dict[str, Any], **removal: Any) -> dict[str, Any]:
    config = copy.deepcopy(config)
    config["version"] = 3
    config["removal"].update({"driverUpgrade": "rolling", "gpuPodEviction": True, **removal})
    config["drivers"] = {A100_DRIVER: "aaaa0002"}
    return config


# --- GPU work ------------------------------------------------------------------------------------------------


def test_a_removal_waits_while_gpu_work_runs_on_the_node_without_taking_a_slot(load_fixture, paced_config, clock):
    cluster = FakeCluster([a100_node(load_fixture, paced_config)],
                          [gpu_job_pod("train-0", NODE), operand_pod("nvidia-dcgm-exporter-x", NODE, "dcgm-exporter")])
    agent = Agent(cluster, NODE, clock)
    config = without_exporter(paced_config)

    assert agent.reconcile(config) is False
    assert agent.reconcile(config) is False

    assert cluster.node_labels(NODE)[EXPORTER] == "true"
    assert cluster.budget() is None
    # Said once, not on every pass.
    assert agent.events() == ["removal-waiting"]
    assert agent.last("removal-waiting")["pods"] == ["ml-team/train-0"]

    cluster.pods[0] = finished(cluster.pods[0])
    assert agent.reconcile(config) is True

    assert EXPORTER not in cluster.node_labels(NODE)
    assert holders(cluster) == {NODE}
    assert agent.last("labels-changed")["paced"] is True


def test_a_job_bound_while_the_slot_is_taken_is_seen_and_the_slot_given_back(load_fixture, paced_config, clock):
    cluster = FakeCluster([a100_node(load_fixture, paced_config)], [])
    agent = Agent(cluster, NODE, clock)
    config = without_exporter(paced_config)

    def scheduler_binds_a_job_once_the_slot_is_taken() -> None:
        if NODE in cluster.holders() and not cluster.pods:
            cluster.add(gpu_job_pod("train-0", NODE))

    cluster.on_change = scheduler_binds_a_job_once_the_slot_is_taken

    agent.reconcile(config)

    # The job's GPUs keep their exporter, and the slot is not held for as long as the job runs.
    assert cluster.node_labels(NODE)[EXPORTER] == "true"
    assert cluster.holders() == set()
    assert agent.last("removal-waiting")["pods"] == ["ml-team/train-0"]

    cluster.pods[0] = finished(cluster.pods[0])
    clock.advance(3600)
    agent.reconcile(config)
    assert EXPORTER not in cluster.node_labels(NODE)


def test_a_daemonset_pod_holding_gpus_also_makes_a_removal_wait(load_fixture, paced_config, clock):
    holder = gpu_job_pod("render-farm-x", NODE)
    holder["metadata"]["ownerReferences"][0]["kind"] = "DaemonSet"
    cluster = FakeCluster([a100_node(load_fixture, paced_config)], [holder])
    agent = Agent(cluster, NODE, clock)

    assert agent.reconcile(without_exporter(paced_config)) is False
    assert cluster.node_labels(NODE)[EXPORTER] == "true" and cluster.budget() is None


def test_the_slot_is_held_until_the_operand_pods_are_gone_then_released(load_fixture, paced_config, clock):
    cluster = FakeCluster([a100_node(load_fixture, paced_config)],
                          [operand_pod("nvidia-dcgm-exporter-x", NODE, "dcgm-exporter")])
    agent = Agent(cluster, NODE, clock)
    config = without_exporter(paced_config)

    assert agent.reconcile(config) is True
    assert holders(cluster) == {NODE}
    assert agent.last("slot-holding")["waitingFor"] == [
        "nvidia-dcgm-exporter-x is leaving (node selector needs nvidia.com/gpu.deploy.dcgm-exporter)"]
    assert cluster.node_labels(NODE)["gpu-stack/upgrade-state"] == "change-in-progress"

    cluster.remove("nvidia-dcgm-exporter-x")
    assert agent.reconcile(config) is False
    assert holders(cluster) == set()
    assert cluster.node_labels(NODE)["gpu-stack/upgrade-state"] == "upgrade-done"
    assert agent.events()[-1] == "slot-released"


# --- drain ---------------------------------------------------------------------------------------------------


def test_a_drain_cordons_first_evicts_each_pod_once_and_uncordons(load_fixture, paced_config, clock):
    cluster = FakeCluster([a100_node(load_fixture, paced_config)], [gpu_job_pod("train-0", NODE)])
    agent = Agent(cluster, NODE, clock)
    config = without_exporter(paced_config, drain=True)

    assert agent.reconcile(config) is True
    assert cluster.nodes[NODE]["spec"]["unschedulable"] is True
    assert cluster.nodes[NODE]["metadata"]["annotations"]["gpu-stack/cordoned-by"] == "node-agent"
    assert cluster.evicted == ["ml-team/train-0"]
    assert cluster.node_labels(NODE)[EXPORTER] == "true"

    # Evicted but still terminating: not evicted again, and the labels still wait.
    assert agent.reconcile(config) is True
    assert cluster.evicted == ["ml-team/train-0"]

    cluster.settle()
    assert agent.reconcile(config) is False
    assert EXPORTER not in cluster.node_labels(NODE)
    assert "unschedulable" not in cluster.nodes[NODE]["spec"]
    assert "gpu-stack/cordoned-by" not in cluster.nodes[NODE]["metadata"]["annotations"]


def test_a_drain_leaves_pods_its_selector_does_not_select(load_fixture, paced_config, clock):
    keep = gpu_job_pod("never-drain", NODE)
    keep["metadata"]["labels"] = {"gpu-stack.io/drain": "never"}
    cluster = FakeCluster([a100_node(load_fixture, paced_config)], [gpu_job_pod("train-0", NODE), keep])
    agent = Agent(cluster, NODE, clock)
    config = without_exporter(paced_config, drain=True)
    config["version"] = 3
    config["removal"].update(driverUpgrade="manual", drainPodSelector="gpu-stack.io/drain!=never")

    agent.reconcile(config)
    assert cluster.evicted == ["ml-team/train-0"]
    cluster.settle()
    agent.reconcile(config)
    assert cluster.evicted == ["ml-team/train-0"]
    assert cluster.node_labels(NODE)[EXPORTER] == "true", "the spared pod still holds GPUs: waited for, not pulled"


def test_a_cordon_set_after_the_agents_read_of_the_node_is_not_taken_for_its_own(load_fixture, paced_config, clock):
    cluster = FakeCluster([a100_node(load_fixture, paced_config)], [gpu_job_pod("train-0", NODE)])
    agent = Agent(cluster, NODE, clock)
    stale = kube.get_node(cluster.core, NODE)
    cluster.nodes[NODE]["spec"]["unschedulable"] = True  # kubectl cordon, just after the agent's read
    cluster.nodes[NODE]["metadata"]["resourceVersion"] = "999"

    agent.pacer(stale, without_exporter(paced_config, drain=True))

    assert cluster.nodes[NODE]["spec"]["unschedulable"] is True
    assert "gpu-stack/cordoned-by" not in cluster.nodes[NODE]["metadata"].get("annotations", {})


def test_cordon_and_uncordon_are_compare_and_swaps():
    node = {"metadata": {"name": NODE, "resourceVersion": "41", "annotations": {}}, "spec": {}}
    assert upgrade.cordon_patch(node, upgrade.DRAINING)["metadata"]["resourceVersion"] == "41"
    ours = {"metadata": {"name": NODE, "resourceVersion": "42",
                         "annotations": {upgrade.CORDON_ANNOTATION: upgrade.CORDON_OWNER}},
            "spec": {"unschedulable": True}}
    assert upgrade.finish_patch(ours)["metadata"]["resourceVersion"] == "42"


def test_a_cordon_someone_else_set_is_never_lifted(load_fixture, paced_config, clock):
    node = a100_node(load_fixture, paced_config)
    node["spec"]["unschedulable"] = True  # an operator repairing the node
    cluster = FakeCluster([node], [gpu_job_pod("train-0", NODE)])
    agent = Agent(cluster, NODE, clock)
    config = without_exporter(paced_config, drain=True)

    agent.reconcile(config)
    cluster.settle()
    assert agent.reconcile(config) is False
    assert cluster.nodes[NODE]["spec"]["unschedulable"] is True


def test_a_node_someone_asked_to_keep_cordoned_stays_cordoned_after_its_change(load_fixture, paced_config, clock):
    cluster = FakeCluster([a100_node(load_fixture, paced_config)], [gpu_job_pod("train-0", NODE)])
    agent = Agent(cluster, NODE, clock)
    config = without_exporter(paced_config, drain=True)
    agent.reconcile(config)
    cluster.nodes[NODE]["metadata"]["annotations"]["gpu-stack/keep-cordoned"] = "disk repair"  # kubectl annotate
    cluster.settle()

    assert agent.reconcile(config) is False
    assert cluster.nodes[NODE]["spec"]["unschedulable"] is True
    assert "gpu-stack/cordoned-by" not in cluster.nodes[NODE]["metadata"]["annotations"]


def test_an_eviction_a_disruption_budget_blocks_is_asked_again_then_fails_at_the_drain_timeout(
        load_fixture, paced_config, clock):
    cluster = FakeCluster([a100_node(load_fixture, paced_config)], [gpu_job_pod("train-0", NODE)])
    cluster.blocked.add("ml-team/train-0")
    agent = Agent(cluster, NODE, clock)
    config = without_exporter(paced_config, drain=True)
    config["version"] = 3
    config["removal"].update(driverUpgrade="manual", drainTimeoutSeconds=300)

    assert agent.reconcile(config) is True
    assert cluster.evicted == []
    assert agent.last("eviction-blocked")["pod"] == "ml-team/train-0"
    agent.seconds = 301
    agent.reconcile(config)
    assert "failed" in cluster.budget()["data"][NODE]
    assert cluster.node_labels(NODE)["gpu-stack/upgrade-state"] == "upgrade-failed"


# --- the shared budget ---------------------------------------------------------------------------------------


def two_nodes_losing_their_exporter(load_fixture, paced_config, clock) -> tuple[FakeCluster, Agent, Agent]:
    """Two a100 nodes, each running the exporter a change of the config removes, and an agent on each."""
    cluster = FakeCluster(
        [a100_node(load_fixture, paced_config, NODE), a100_node(load_fixture, paced_config, SECOND)],
        [operand_pod("nvidia-dcgm-exporter-a", NODE, "dcgm-exporter"),
         operand_pod("nvidia-dcgm-exporter-b", SECOND, "dcgm-exporter")])
    return cluster, Agent(cluster, NODE, clock), Agent(cluster, SECOND, clock)


def test_with_a_budget_of_one_the_second_node_waits_for_the_first(load_fixture, paced_config, clock):
    cluster, first, second = two_nodes_losing_their_exporter(load_fixture, paced_config, clock)
    config = without_exporter(paced_config)

    assert first.reconcile(config) is True
    assert second.reconcile(config) is False

    assert EXPORTER not in cluster.node_labels(NODE)
    assert cluster.node_labels(SECOND)[EXPORTER] == "true"
    assert cluster.node_labels(SECOND)["gpu-stack/upgrade-state"] == "upgrade-required"
    assert second.last("slot-waiting")["why"] == "full"

    cluster.remove("nvidia-dcgm-exporter-a")
    assert first.reconcile(config) is False
    # The first node woke the second: its watch sees the annotation, so it reads the budget before its poll.
    assert "gpu-stack/upgrade-wake" in cluster.nodes[SECOND]["metadata"]["annotations"]
    assert second.reconcile(config) is True
    assert EXPORTER not in cluster.node_labels(SECOND)
    assert holders(cluster) == {SECOND}


def test_a_waiting_node_reads_nothing_on_its_nodes_events_until_its_poll(load_fixture, paced_config, clock):
    cluster, first, second = two_nodes_losing_their_exporter(load_fixture, paced_config, clock)
    config = without_exporter(paced_config)
    first.reconcile(config)
    second.reconcile(config)
    reads = cluster.calls.count("read_namespaced_config_map")

    for _ in range(5):  # the kubelet's status updates, say
        second.reconcile(config)
    assert cluster.calls.count("read_namespaced_config_map") == reads

    second.seconds += 3600
    second.reconcile(config)
    assert cluster.calls.count("read_namespaced_config_map") == reads + 1


def test_a_percentage_budget_is_resolved_against_the_managed_driver_nodes_by_metadata(load_fixture, paced_config,
                                                                                      clock):
    names = (NODE, SECOND, THIRD)
    cluster = FakeCluster([a100_node(load_fixture, paced_config, n) for n in names],
                          [operand_pod(f"nvidia-dcgm-exporter-{i}", n, "dcgm-exporter") for i, n in enumerate(names)])
    agents = [Agent(cluster, n, clock) for n in names]
    config = without_exporter(paced_config, maxUnavailable="50%")

    assert [agent.reconcile(config) for agent in agents] == [True, True, False]

    # 50% of 3 nodes with a managed driver, rounded up.
    assert holders(cluster) == {NODE, SECOND}
    assert cluster.budget()["metadata"]["annotations"]["gpu-stack/gpu-nodes"] == "3"
    counted = [c.kwargs for c in cluster.core.list_node.call_args_list if c.kwargs["label_selector"] == "gpu-stack/driver"]
    assert counted and all("PartialObjectMetadataList" in c["_headers"]["Accept"] for c in counted)


def test_a_lost_answer_to_taking_a_slot_is_found_by_the_next_read(load_fixture, paced_config, clock):
    cluster = FakeCluster([a100_node(load_fixture, paced_config)],
                          [operand_pod("nvidia-dcgm-exporter-x", NODE, "dcgm-exporter")])
    cluster.lose_response("create_namespaced_config_map")
    agent = Agent(cluster, NODE, clock)
    config = without_exporter(paced_config)

    with pytest.raises(ApiException):
        agent.reconcile(config)
    assert holders(cluster) == {NODE}
    assert agent.reconcile(config) is True
    assert EXPORTER not in cluster.node_labels(NODE)


def test_a_lost_answer_to_giving_a_slot_back_leaves_no_slot_behind(load_fixture, paced_config, clock):
    cluster = FakeCluster([a100_node(load_fixture, paced_config)],
                          [operand_pod("nvidia-dcgm-exporter-x", NODE, "dcgm-exporter")])
    agent = Agent(cluster, NODE, clock)
    config = without_exporter(paced_config)
    agent.reconcile(config)
    cluster.remove("nvidia-dcgm-exporter-x")
    cluster.lose_response("replace_namespaced_config_map")

    with pytest.raises(ApiException):
        agent.reconcile(config)
    assert holders(cluster) == set()
    assert agent.reconcile(config) is False


def test_a_race_lost_to_another_node_is_a_wait_not_an_error(load_fixture, paced_config, clock):
    cluster = FakeCluster([a100_node(load_fixture, paced_config)],
                          [operand_pod("nvidia-dcgm-exporter-x", NODE, "dcgm-exporter")])
    cluster.fail("create_namespaced_config_map", ApiException(status=409, reason="AlreadyExists"))
    agent = Agent(cluster, NODE, clock)

    assert agent.reconcile(without_exporter(paced_config)) is False
    assert cluster.node_labels(NODE)[EXPORTER] == "true"


def test_a_restarted_agent_carries_on_with_the_slot_it_held(load_fixture, paced_config, clock):
    node = a100_node(load_fixture, paced_config)
    del node["metadata"]["labels"][EXPORTER]  # removed before the restart; its pod is still leaving
    cluster = FakeCluster([node], [operand_pod("nvidia-dcgm-exporter-x", NODE, "dcgm-exporter")])
    budget_held_by(cluster, NODE)
    agent = Agent(cluster, NODE, clock)
    config = without_exporter(paced_config)

    assert agent.reconcile(config) is True
    assert agent.events()[0] == "slot-resumed"

    cluster.remove("nvidia-dcgm-exporter-x")
    assert agent.reconcile(config) is False
    assert holders(cluster) == set()


def test_a_restarted_agent_gives_back_a_slot_its_finished_change_left(load_fixture, paced_config, clock):
    cluster = FakeCluster([a100_node(load_fixture, paced_config)])
    budget_held_by(cluster, NODE)
    agent = Agent(cluster, NODE, clock)

    assert agent.reconcile(paced_config) is False
    assert holders(cluster) == set()


# --- driver upgrades -----------------------------------------------------------------------------------------


def upgrade_cluster(load_fixture: Any, config: dict[str, Any], *, job: bool = True) -> FakeCluster:
    cluster = FakeCluster([driver_deployed(a100_node(load_fixture, config))],
                          [driver_pod("driver-old", NODE, A100_DRIVER, revision="rev1"),
                           *([gpu_job_pod("train-0", NODE)] if job else [])])
    cluster.put_daemonset(A100_DRIVER, "aaaa0001", "rev1")
    return cluster


def test_an_outdated_driver_is_replaced_on_a_cordoned_node_and_the_node_uncordoned_once_ready(
        load_fixture, paced_config, clock):
    config = version3(paced_config)
    cluster = upgrade_cluster(load_fixture, config)
    agent = Agent(cluster, NODE, clock)
    assert agent.reconcile(config) is False, "the DaemonSet does not carry the config's digest yet"
    assert cluster.budget() is None

    cluster.put_daemonset(A100_DRIVER, "aaaa0002", "rev2")
    agent.seconds += 31
    assert agent.reconcile(config) is True
    node = cluster.nodes[NODE]
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"]["nvidia.com/gpu-driver-upgrade-enabled"] == "true"
    assert cluster.evicted == ["ml-team/train-0"] and cluster.deleted == []

    cluster.settle()
    agent.reconcile(config)
    assert cluster.deleted == ["gpu-operator/driver-old"]
    assert cluster.node_labels(NODE)["gpu-stack/upgrade-state"] == "pod-restart-required"

    cluster.settle()
    cluster.add(driver_pod("driver-new", NODE, A100_DRIVER, revision="rev2", ready=False))
    assert agent.reconcile(config) is True
    cluster.remove("driver-new")
    cluster.add(driver_pod("driver-new", NODE, A100_DRIVER, revision="rev2", ready=True))
    assert agent.reconcile(config) is False
    node = cluster.nodes[NODE]
    assert "unschedulable" not in node["spec"]
    assert cluster.node_labels(NODE)["gpu-stack/upgrade-state"] == "upgrade-done"
    assert "nvidia.com/gpu-driver-upgrade-enabled" not in node["metadata"]["annotations"]
    assert holders(cluster) == set()


def test_a_new_template_with_the_same_driver_install_restarts_the_pod_without_cordon_or_eviction(
        load_fixture, paced_config, clock):
    config = version3(paced_config)
    cluster = upgrade_cluster(load_fixture, config)
    cluster.pods[0]["spec"]["containers"][0]["env"] = [{"name": "DRIVER_CONFIG_DIGEST", "value": "same"}]
    cluster.put_daemonset(A100_DRIVER, "aaaa0002", "rev2", config_digest="same")  # a new agent image, say
    agent = Agent(cluster, NODE, clock)

    assert agent.reconcile(config) is True
    assert cluster.deleted == ["gpu-operator/driver-old"] and cluster.evicted == []
    assert "unschedulable" not in cluster.nodes[NODE]["spec"]
    assert holders(cluster) == {NODE}, "still within the budget: the operands pause while the pod restarts"


def test_finishing_on_a_stale_event_still_lifts_the_agents_own_cordon(load_fixture, paced_config, clock):
    config = version3(paced_config)
    cluster = upgrade_cluster(load_fixture, config, job=False)
    cluster.put_daemonset(A100_DRIVER, "aaaa0002", "rev2")
    agent = Agent(cluster, NODE, clock)
    stale = copy.deepcopy(cluster.nodes[NODE])  # the watch's copy from before the cordon
    agent.reconcile(config)
    assert cluster.nodes[NODE]["spec"]["unschedulable"] is True
    cluster.settle()
    cluster.add(driver_pod("driver-new", NODE, A100_DRIVER, revision="rev2", ready=True))

    assert agent.pacer(stale, config) is False
    assert "unschedulable" not in cluster.nodes[NODE]["spec"]


def test_a_manual_upgrade_never_deletes_a_driver_pod(load_fixture, paced_config, clock):
    config = version3(paced_config, driverUpgrade="manual")
    cluster = upgrade_cluster(load_fixture, config)
    cluster.put_daemonset(A100_DRIVER, "aaaa0002", "rev2")
    agent = Agent(cluster, NODE, clock)

    assert agent.reconcile(config) is False
    assert cluster.deleted == [] and cluster.evicted == [] and cluster.budget() is None


def test_without_eviction_the_upgrade_waits_for_the_gpu_work_to_end(load_fixture, paced_config, clock):
    config = version3(paced_config, gpuPodEviction=False)
    cluster = upgrade_cluster(load_fixture, config)
    cluster.put_daemonset(A100_DRIVER, "aaaa0002", "rev2")
    agent = Agent(cluster, NODE, clock)

    assert agent.reconcile(config) is True
    assert cluster.evicted == [] and cluster.deleted == []
    cluster.pods[1] = finished(cluster.pods[1])
    agent.reconcile(config)
    assert cluster.deleted == ["gpu-operator/driver-old"]


# --- what is not paced ---------------------------------------------------------------------------------------


def test_the_users_operands_switch_removes_every_deploy_label_at_once(load_fixture, paced_config, clock):
    node = a100_node(load_fixture, paced_config)
    node["metadata"]["labels"]["nvidia.com/gpu.deploy.operands"] = "false"
    cluster = FakeCluster([node], [gpu_job_pod("train-0", NODE)])
    agent = Agent(cluster, NODE, clock)

    assert agent.reconcile(paced_config) is False

    assert not [key for key in cluster.node_labels(NODE) if key.startswith("nvidia.com/gpu.deploy.")
                and key != "nvidia.com/gpu.deploy.operands"]
    assert cluster.budget() is None and cluster.evicted == []


def test_a_version_1_config_changes_everything_at_once(load_fixture, pool_config, clock):
    cluster = FakeCluster([a100_node(load_fixture, pool_config)], [gpu_job_pod("train-0", NODE)])
    agent = Agent(cluster, NODE, clock)
    config = copy.deepcopy(pool_config)
    config["pools"][0]["deployLabels"].remove(EXPORTER)

    assert agent.reconcile(config) is False

    assert EXPORTER not in cluster.node_labels(NODE)
    assert agent.events() == ["labels-changed"]
    cluster.core.list_namespaced_pod.assert_not_called()
    cluster.core.read_namespaced_config_map.assert_not_called()


def test_the_first_driver_label_is_added_at_once(load_fixture, pool_config, paced_config, clock):
    # Labelled by an agent before 0.4.0: its driver pod already belongs to the DaemonSet the label will name.
    cluster = FakeCluster([a100_node(load_fixture, pool_config)],
                          [driver_pod("nvidia-driver-daemonset-a100-abcde", NODE, A100_DRIVER)])
    agent = Agent(cluster, NODE, clock)

    assert agent.reconcile(paced_config) is False

    assert cluster.node_labels(NODE)["gpu-stack/driver"] == A100_DRIVER
    assert cluster.budget() is None and cluster.deleted == []


def test_a_first_driver_label_naming_another_daemonset_than_the_nodes_driver_pod_waits_for_a_slot(
        load_fixture, pool_config, paced_config, clock):
    # Labelled by an agent before 0.4.0, and its pool renamed in the same `pulumi up`: its driver pod belongs to the
    # old pool's DaemonSet, so the first label is a handover.
    cluster = FakeCluster([driver_deployed(a100_node(load_fixture, pool_config))],
                          [driver_pod("nvidia-driver-daemonset-a100-abcde", NODE, A100_DRIVER)])
    budget_held_by(cluster, SECOND, "driver-upgrade")
    agent = Agent(cluster, NODE, clock)

    assert agent.reconcile(with_a100_renamed(paced_config)) is False
    assert "gpu-stack/driver" not in cluster.node_labels(NODE)
    assert cluster.node_labels(NODE)["gpu-stack/upgrade-state"] == "upgrade-required"


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

    cluster.settle()
    cluster.add(driver_pod("nvidia-driver-daemonset-a100-abcde", NODE, A100_DRIVER, ready=False))
    assert agent.reconcile(paced_config) is True
    assert agent.last("slot-holding")["waitingFor"] == [
        "no Ready driver pod of DaemonSet nvidia-driver-daemonset-a100 yet"]

    cluster.remove("nvidia-driver-daemonset-a100-abcde")
    cluster.add(driver_pod("nvidia-driver-daemonset-a100-abcde", NODE, A100_DRIVER, ready=True))
    assert agent.reconcile(paced_config) is False
    assert holders(cluster) == set()
    assert cluster.deleted == ["gpu-operator/nvidia-driver-old-x7k2p"]


def test_a_changed_driver_label_hands_the_node_over_once_the_new_driver_is_ready(load_fixture, paced_config,
                                                                                 clock):
    cluster = FakeCluster([driver_deployed(a100_node(load_fixture, paced_config))],
                          [driver_pod("nvidia-driver-daemonset-a100-abcde", NODE, None)])  # A, deleted by the rename
    budget_held_by(cluster, SECOND, "driver-upgrade")
    cluster.nodes[SECOND] = renamed(cluster.nodes[NODE], SECOND)
    agent = Agent(cluster, NODE, clock)
    config = with_a100_renamed(paced_config)

    # Waiting for the slot: the pool label changes at once, the driver DaemonSet does not.
    assert agent.reconcile(config) is False
    assert cluster.node_labels(NODE)["gpu-stack/pool"] == "a100-v2"
    assert cluster.node_labels(NODE)["gpu-stack/driver"] == A100_DRIVER
    assert cluster.deleted == []

    cluster.config_maps[("gpu-operator", "gpu-stack-upgrade-budget")]["data"] = {}
    agent.seconds += 3600
    assert agent.reconcile(config) is True
    assert cluster.node_labels(NODE)["gpu-stack/driver"] == A100_V2_DRIVER
    assert cluster.deleted == ["gpu-operator/nvidia-driver-daemonset-a100-abcde"]
    assert agent.last("driver-handover")["driver"] == {"old": A100_DRIVER, "new": A100_V2_DRIVER}

    cluster.settle()
    cluster.add(driver_pod("nvidia-driver-daemonset-a100-v2-fghij", NODE, A100_V2_DRIVER, ready=True))
    assert agent.reconcile(config) is False
    assert holders(cluster) == set()


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
    assert holders(cluster) == set()


# --- in the label loop ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["list_pod_for_all_namespaces", "read_namespaced_config_map",
                                    "create_namespaced_config_map", "create_namespaced_pod_eviction"])
def test_the_label_loop_backs_off_failed_requests_and_watches_pods_while_holding(load_fixture, paced_config,
                                                                                 clock, method):
    cluster = FakeCluster([a100_node(load_fixture, paced_config)], [gpu_job_pod("train-0", NODE)])
    cluster.fail(method, ApiException(status=503, reason="Service Unavailable"))
    agent = Agent(cluster, NODE, clock)
    sleeps: list[float] = []
    pod_watches: list[tuple[int, Any]] = []

    def watch_pods(api: Any, name: str, timeout: int, resource_version: str | None) -> Any:
        pod_watches.append((timeout, resource_version))
        return iter(())

    kube.run_label_loop(cluster.core, node_name=NODE, load_config=lambda: without_exporter(paced_config, drain=True),
                        resync_seconds=900, log=agent.log, stop=stop_after(2), sleep=sleeps.append,
                        watch_events=lambda *a: iter(()), watch_pods=watch_pods, rng=lambda: 1.0,
                        reconcile=agent.pacer)

    assert [r["status"] for r in agent.log.records if r["event"] == "retry"] == [503]
    assert sleeps[0] == 1.0
    assert holders(cluster) == {NODE} and cluster.evicted == ["ml-team/train-0"]
    # Holding, it watches its pods (from its own read of them), not its Node.
    assert [timeout for timeout, _ in pod_watches] == [600] and pod_watches[0][1] is not None


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
