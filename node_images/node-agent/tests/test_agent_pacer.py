"""Paced changes (pacer.py) pass by pass, against a counting API server (stepcluster.Cluster): the node's agent asks,
the coordinator grants (one step of its own code), the agent acts.

Each ``agent.reconcile(config)`` is what the label loop does on an event of the Node or at a resync, the node read
fresh from the server; ``cluster.coordinate(config)`` is one step of the coordinator; ``cluster.wait(seconds)``
lets time pass (terminating pods go)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from agenttest import A100_DRIVER, driver_pod, gpu_job_pod, operand_pod, renamed
from gpustack_agent.label import labelloop
from gpustack_agent.model import drains, grants, labels, upgrade
from simcluster import NODES
from stepcluster import Agent, Cluster

NODE = "ip-10-0-12-35.ec2.internal"
SECOND = "ip-10-0-12-36.ec2.internal"
THIRD = "ip-10-0-12-37.ec2.internal"
EXPORTER = "nvidia.com/gpu.deploy.dcgm-exporter"
STATE = upgrade.UPGRADE_STATE_LABEL
A100_V2_DRIVER = "nvidia-driver-daemonset-a100-v2"


def a100_node(load_fixture: Any, config: dict[str, Any], name: str = NODE) -> dict[str, Any]:
    """An a100 node that the agent has fully labelled under `config`."""
    node = renamed(load_fixture("node-a100-labelled"), name)
    patch = labels.desired_patch(node, config)
    for section in ("labels", "annotations"):
        for key, value in ((patch or {}).get("metadata", {}).get(section) or {}).items():
            node["metadata"][section][key] = value
    return node


def driver_deployed(node: dict[str, Any]) -> dict[str, Any]:
    node["metadata"]["labels"]["nvidia.com/gpu.deploy.driver"] = "true"
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


def version3(config: dict[str, Any], **removal: Any) -> dict[str, Any]:
    config = copy.deepcopy(config)
    config["version"] = 3
    config["removal"].update({"driverUpgrade": "rolling", "gpuPodEviction": True, **removal})
    config["drivers"] = {A100_DRIVER: "aaaa0002", A100_V2_DRIVER: "cccc0001"}
    return config


def holding(agent: Agent) -> bool:
    return agent.pacer.hold is not None


def asked(cluster: Cluster, name: str = NODE) -> str | None:
    request = grants.request_of(cluster.node(name))
    return request["reason"] if request else None


def granted(cluster: Cluster, agent: Agent, config: dict[str, Any]) -> None:
    """The agent asks, the coordinator grants, the agent takes the grant up."""
    agent.reconcile(config)
    cluster.coordinate(config)
    agent.reconcile(config)


def granted_and_drained(cluster: Cluster, agent: Agent, config: dict[str, Any]) -> None:
    """As `granted`, then the coordinator acts on the drain the agent asked for on its Node."""
    granted(cluster, agent, config)
    cluster.coordinate(config)


# --- asking and being granted --------------------------------------------------------------------------------


def test_a_removal_is_asked_for_granted_by_the_coordinator_and_applied_by_the_node(load_fixture, paced_config):
    cluster = Cluster([a100_node(load_fixture, paced_config)],
                      [operand_pod("nvidia-dcgm-exporter-x", NODE, "dcgm-exporter")])
    agent = Agent(cluster, NODE)
    config = without_exporter(paced_config)

    agent.reconcile(config)
    assert asked(cluster) == "label-removal" and cluster.node_labels(NODE)[STATE] == "upgrade-required"
    assert cluster.node_labels(NODE)[EXPORTER] == "true" and cluster.budget() is None

    [grant] = [r for r in cluster.coordinate(config) if r["event"] == "slot-granted"]
    assert grant["node"] == NODE and cluster.holders() == {NODE}
    assert grants.grant_of(cluster.node(NODE)) == grant["grant"]

    wait = agent.reconcile(config)
    assert EXPORTER not in cluster.node_labels(NODE)
    assert wait.pods and holding(agent)
    assert agent.last("slot-acquired")["grant"] == grant["grant"]
    assert agent.last("labels-changed")["paced"] is True


def test_a_grant_the_budget_does_not_hold_is_wiped_not_acted_on(load_fixture, paced_config):
    cluster = Cluster([a100_node(load_fixture, paced_config)],
                      [operand_pod("nvidia-dcgm-exporter-x", NODE, "dcgm-exporter")])
    agent = Agent(cluster, NODE)
    config = without_exporter(paced_config)
    agent.reconcile(config)
    cluster.patch_node(NODE, {"metadata": {"annotations": {grants.GRANT_ANNOTATION: "forged-1"}}})

    agent.reconcile(config)

    assert not holding(agent) and cluster.node_labels(NODE)[EXPORTER] == "true"
    assert grants.GRANT_ANNOTATION not in cluster.annotations(NODE)


def test_a_waiting_node_reads_nothing_on_its_nodes_events(load_fixture, paced_config):
    cluster = Cluster([a100_node(load_fixture, paced_config)],
                      [operand_pod("nvidia-dcgm-exporter-x", NODE, "dcgm-exporter")])
    agent = Agent(cluster, NODE)
    config = without_exporter(paced_config)
    agent.reconcile(config)
    asked_at = agent.requests()

    for _ in range(5):  # the kubelet's status reports, say, over hours
        cluster.wait(3600)
        agent.pacer(cluster.node(NODE), config)
    # Before 0.8.0 a waiting node read the budget on a timer and listed its pods on every event.
    assert agent.requests() == asked_at


def test_a_request_no_longer_needed_is_withdrawn(load_fixture, paced_config):
    cluster = Cluster([a100_node(load_fixture, paced_config)],
                      [operand_pod("nvidia-dcgm-exporter-x", NODE, "dcgm-exporter")])
    agent = Agent(cluster, NODE)
    agent.reconcile(without_exporter(paced_config))

    agent.reconcile(paced_config)  # the change was reverted

    assert asked(cluster) is None and STATE not in cluster.node_labels(NODE)
    assert cluster.coordinate(paced_config) == []


def test_a_write_that_fails_after_the_config_was_noted_is_retried_on_the_next_pass(load_fixture, paced_config):
    cluster = Cluster([a100_node(load_fixture, paced_config)],
                      [operand_pod("nvidia-dcgm-exporter-x", NODE, "dcgm-exporter")])
    agent = Agent(cluster, NODE)
    config = without_exporter(paced_config)
    cluster.server.fail("patch_node", ApiException(status=500, reason="etcd timeout"), caller=f"agent/{NODE}")

    with pytest.raises(ApiException):
        agent.reconcile(config)
    assert asked(cluster) is None
    # Before 0.8.0 the agent had noted the config before the write and forgot the change for up to 45 minutes.
    agent.reconcile(config)
    assert asked(cluster) == "label-removal"


def test_a_slot_granted_to_a_node_that_no_longer_wants_it_is_given_back_on_its_next_pass(load_fixture,
                                                                                        paced_config):
    cluster = Cluster([a100_node(load_fixture, paced_config)],
                      [operand_pod("nvidia-dcgm-exporter-x", NODE, "dcgm-exporter")])
    agent = Agent(cluster, NODE)
    config = without_exporter(paced_config)
    agent.reconcile(config)
    # The grant's write reached the budget but the coordinator lost the answer; it finds the slot on its next read
    # and delivers the grant then, after the node's change was reverted.
    cluster.server.lose_response("patch_namespaced_config_map", caller="coordinator")
    cluster.server.lose_response("create_namespaced_config_map", caller="coordinator")
    with pytest.raises(ApiException):
        cluster.coordinate(config)
    assert cluster.holders() == {NODE}
    cluster.coordinate(config)
    assert grants.grant_of(cluster.node(NODE)) is not None

    agent.reconcile(paced_config)

    assert cluster.holders() == set()
    assert cluster.node_labels(NODE)[EXPORTER] == "true"
    assert grants.GRANT_ANNOTATION not in cluster.annotations(NODE)


def test_a_restarted_agent_carries_on_with_the_slot_it_held(load_fixture, paced_config):
    cluster = Cluster([a100_node(load_fixture, paced_config)],
                      [operand_pod("nvidia-dcgm-exporter-x", NODE, "dcgm-exporter")])
    config = without_exporter(paced_config)
    granted(cluster, Agent(cluster, NODE), config)
    assert cluster.node_labels(NODE)[STATE] == "change-in-progress"

    restarted = Agent(cluster, NODE)
    assert restarted.reconcile(config).pods and holding(restarted)
    assert restarted.events()[0] == "slot-resumed"
    cluster.server.delete("pods", "gpu-operator", "nvidia-dcgm-exporter-x")
    restarted.reconcile(config)
    assert cluster.holders() == set() and cluster.node_labels(NODE)[STATE] == "upgrade-done"


def test_a_slot_an_agent_before_0_8_0_took_is_resumed_and_given_back(load_fixture, paced_config):
    node = a100_node(load_fixture, paced_config)
    node["metadata"]["labels"][STATE] = "change-in-progress"
    del node["metadata"]["labels"][EXPORTER]  # removed before the restart; its pod has left
    cluster = Cluster([node])
    cluster.put_budget({NODE: {"reason": "label-removal", "since": "2025-06-02T09:59:30Z"}})
    agent = Agent(cluster, NODE)

    agent.reconcile(without_exporter(paced_config))

    assert agent.events()[0] == "slot-resumed" and cluster.holders() == set()


# --- GPU work -------------------------------------------------------------------------------------------------


def test_a_removal_waits_while_gpu_work_runs_without_asking_for_a_slot(load_fixture, paced_config):
    cluster = Cluster([a100_node(load_fixture, paced_config)],
                      [gpu_job_pod("train-0", NODE), operand_pod("nvidia-dcgm-exporter-x", NODE, "dcgm-exporter")])
    agent = Agent(cluster, NODE)
    config = without_exporter(paced_config)

    wait = agent.reconcile(config)
    assert wait.pods, "it watches its pods for the work to end, instead of polling"
    assert asked(cluster) is None and cluster.node_labels(NODE)[EXPORTER] == "true"
    assert agent.last("removal-waiting")["pods"] == ["ml-team/train-0"]

    cluster.finish_pod("train-0", "ml-team")
    agent.reconcile(config)
    assert asked(cluster) == "label-removal"


def test_a_job_bound_before_the_cordon_is_seen_and_the_slot_given_back(load_fixture, paced_config):
    cluster = Cluster([a100_node(load_fixture, paced_config)])
    agent = Agent(cluster, NODE)
    config = without_exporter(paced_config)
    agent.reconcile(config)
    cluster.coordinate(config)
    cluster.add(gpu_job_pod("train-0", NODE))  # the scheduler bound it after the agent asked

    wait = agent.reconcile(config)

    # The job keeps its exporter, and the slot is not held for as long as it runs.
    assert cluster.node_labels(NODE)[EXPORTER] == "true" and cluster.holders() == set()
    assert "unschedulable" not in cluster.node(NODE)["spec"] and wait.pods
    cluster.finish_pod("train-0", "ml-team")
    granted(cluster, agent, config)
    assert EXPORTER not in cluster.node_labels(NODE)


def test_a_paced_change_is_made_on_a_cordoned_node_so_no_pod_bound_meanwhile_loses_its_operands(
        load_fixture, paced_config):
    cluster = Cluster([a100_node(load_fixture, paced_config)],
                      [operand_pod("nvidia-dcgm-exporter-x", NODE, "dcgm-exporter")])
    agent = Agent(cluster, NODE)
    config = without_exporter(paced_config)
    granted(cluster, agent, config)

    node = cluster.node(NODE)
    assert EXPORTER not in node["metadata"]["labels"]
    assert node["spec"]["unschedulable"] is True and node["metadata"]["annotations"]["gpu-stack/cordoned-by"]

    cluster.server.delete("pods", "gpu-operator", "nvidia-dcgm-exporter-x")
    agent.reconcile(config)
    assert "unschedulable" not in cluster.node(NODE)["spec"] and cluster.holders() == set()


def test_a_daemonset_pod_holding_gpus_also_makes_a_removal_wait(load_fixture, paced_config):
    holder = gpu_job_pod("render-farm-x", NODE)
    holder["metadata"]["ownerReferences"][0]["kind"] = "DaemonSet"
    cluster = Cluster([a100_node(load_fixture, paced_config)], [holder])
    agent = Agent(cluster, NODE)

    agent.reconcile(without_exporter(paced_config))
    assert asked(cluster) is None and cluster.node_labels(NODE)[EXPORTER] == "true"


def test_the_slot_is_held_until_the_operand_pods_are_gone_then_released(load_fixture, paced_config):
    cluster = Cluster([a100_node(load_fixture, paced_config)],
                      [operand_pod("nvidia-dcgm-exporter-x", NODE, "dcgm-exporter")])
    agent = Agent(cluster, NODE)
    config = without_exporter(paced_config)
    granted(cluster, agent, config)

    assert cluster.holders() == {NODE}
    assert agent.last("slot-holding")["waitingFor"] == [
        "nvidia-dcgm-exporter-x is leaving (node selector needs nvidia.com/gpu.deploy.dcgm-exporter)"]
    assert cluster.node_labels(NODE)[STATE] == "change-in-progress"

    cluster.server.delete("pods", "gpu-operator", "nvidia-dcgm-exporter-x")
    agent.reconcile(config)
    assert cluster.holders() == set() and not holding(agent)
    assert cluster.node_labels(NODE)[STATE] == "upgrade-done"
    assert agent.events()[-1] == "slot-released"
    assert not {grants.GRANT_ANNOTATION, grants.REQUEST_ANNOTATION} & set(cluster.annotations(NODE))


# --- drain ---------------------------------------------------------------------------------------------------


def test_a_drain_cordons_first_evicts_each_pod_once_and_uncordons(load_fixture, paced_config):
    cluster = Cluster([a100_node(load_fixture, paced_config)], [gpu_job_pod("train-0", NODE)])
    agent = Agent(cluster, NODE)
    config = without_exporter(paced_config, drain=True)

    granted(cluster, agent, config)
    node = cluster.node(NODE)
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"]["gpu-stack/cordoned-by"] == "node-agent"
    assert cluster.server.evictions == [], "the agent asks; only the coordinator evicts"
    assert drains.request_of(node) == drains.Request(cluster.holders_grant(NODE), frozenset({"ml-team/train-0"}))
    cluster.coordinate(config)
    assert cluster.server.evictions == ["ml-team/train-0"]
    assert cluster.node_labels(NODE)[EXPORTER] == "true"

    # Evicted but still terminating: not evicted again, and the labels still wait.
    agent.reconcile(config)
    cluster.coordinate(config)
    assert cluster.server.evictions == ["ml-team/train-0"]

    cluster.wait(60)
    agent.reconcile(config)
    assert EXPORTER not in cluster.node_labels(NODE)
    assert "unschedulable" not in cluster.node(NODE)["spec"]
    assert "gpu-stack/cordoned-by" not in cluster.annotations(NODE)


def test_a_drain_leaves_pods_its_selector_does_not_select(load_fixture, paced_config):
    keep = gpu_job_pod("never-drain", NODE)
    keep["metadata"]["labels"] = {"gpu-stack.io/drain": "never"}
    cluster = Cluster([a100_node(load_fixture, paced_config)], [gpu_job_pod("train-0", NODE), keep])
    agent = Agent(cluster, NODE)
    config = without_exporter(paced_config, drain=True)
    config["version"] = 3
    config["removal"].update(driverUpgrade="manual", drainPodSelector="gpu-stack.io/drain!=never")

    granted_and_drained(cluster, agent, config)
    assert cluster.server.evictions == ["ml-team/train-0"]
    cluster.wait(60)
    agent.reconcile(config)
    cluster.coordinate(config)
    assert cluster.server.evictions == ["ml-team/train-0"]
    assert cluster.node_labels(NODE)[EXPORTER] == "true", "the spared pod still holds GPUs: waited for, not pulled"


def test_a_cordon_set_after_the_agents_read_of_the_node_is_not_taken_for_its_own(load_fixture, paced_config):
    cluster = Cluster([a100_node(load_fixture, paced_config)], [gpu_job_pod("train-0", NODE)])
    agent = Agent(cluster, NODE)
    config = without_exporter(paced_config, drain=True)
    agent.reconcile(config)
    cluster.coordinate(config)
    stale = cluster.node(NODE)
    cluster.patch_node(NODE, {"spec": {"unschedulable": True}})  # kubectl cordon, just after the agent's read

    agent.pacer(stale, config)

    assert cluster.node(NODE)["spec"]["unschedulable"] is True
    assert "gpu-stack/cordoned-by" not in cluster.annotations(NODE)


def test_cordon_and_uncordon_are_compare_and_swaps():
    node = {"metadata": {"name": NODE, "resourceVersion": "41", "annotations": {}}, "spec": {}}
    assert upgrade.cordon_patch(node, upgrade.DRAINING)["metadata"]["resourceVersion"] == "41"
    ours = {"metadata": {"name": NODE, "resourceVersion": "42",
                         "annotations": {upgrade.CORDON_ANNOTATION: upgrade.CORDON_OWNER}},
            "spec": {"unschedulable": True}}
    assert upgrade.finish_patch(ours)["metadata"]["resourceVersion"] == "42"


def test_a_cordon_someone_else_set_is_never_lifted(load_fixture, paced_config):
    node = a100_node(load_fixture, paced_config)
    node["spec"]["unschedulable"] = True  # an operator repairing the node
    cluster = Cluster([node], [gpu_job_pod("train-0", NODE)])
    agent = Agent(cluster, NODE)
    config = without_exporter(paced_config, drain=True)

    granted_and_drained(cluster, agent, config)
    cluster.wait(60)
    agent.reconcile(config)
    assert not holding(agent) and cluster.node(NODE)["spec"]["unschedulable"] is True


def test_a_node_someone_asked_to_keep_cordoned_stays_cordoned_after_its_change(load_fixture, paced_config):
    cluster = Cluster([a100_node(load_fixture, paced_config)], [gpu_job_pod("train-0", NODE)])
    agent = Agent(cluster, NODE)
    config = without_exporter(paced_config, drain=True)
    granted_and_drained(cluster, agent, config)
    cluster.patch_node(NODE, {"metadata": {"annotations": {"gpu-stack/keep-cordoned": "disk repair"}}})
    cluster.wait(60)

    agent.reconcile(config)
    assert not holding(agent) and cluster.node(NODE)["spec"]["unschedulable"] is True
    assert "gpu-stack/cordoned-by" not in cluster.annotations(NODE)


def test_an_eviction_a_disruption_budget_blocks_is_asked_again_then_fails_at_the_drain_timeout(
        load_fixture, paced_config):
    cluster = Cluster([a100_node(load_fixture, paced_config)], [gpu_job_pod("train-0", NODE)])
    cluster.server.blocked.add("ml-team/train-0")
    agent = Agent(cluster, NODE)
    config = without_exporter(paced_config, drain=True)
    config["version"] = 3
    config["removal"].update(driverUpgrade="manual", drainTimeoutSeconds=300)

    granted_and_drained(cluster, agent, config)
    assert cluster.server.evictions == []
    assert cluster.coordinator_log.last("eviction-blocked")["pod"] == "ml-team/train-0"
    asked_at = cluster.server.requests[("coordinator", "create_namespaced_pod_eviction")]
    cluster.wait(29)
    cluster.coordinate(config)
    assert cluster.server.requests[("coordinator", "create_namespaced_pod_eviction")] == asked_at
    cluster.wait(2)
    cluster.coordinate(config)
    assert cluster.server.requests[("coordinator", "create_namespaced_pod_eviction")] == asked_at + 1, "again in 30 s"
    cluster.wait(301)
    agent.reconcile(config)
    assert "failed" in cluster.budget()["data"][NODE]
    assert cluster.node_labels(NODE)[STATE] == "upgrade-failed"
    assert drains.DRAIN_ANNOTATION not in cluster.annotations(NODE)
    cluster.wait(31)
    cluster.coordinate(config)
    assert cluster.server.requests[("coordinator", "create_namespaced_pod_eviction")] == asked_at + 1, (
        "a failed slot is not drained further")


# --- driver upgrades -----------------------------------------------------------------------------------------


def upgrade_cluster(load_fixture: Any, config: dict[str, Any], *, job: bool = True) -> Cluster:
    cluster = Cluster([driver_deployed(a100_node(load_fixture, config))],
                      [driver_pod("driver-old", NODE, A100_DRIVER, revision="rev1"),
                       *([gpu_job_pod("train-0", NODE)] if job else [])])
    cluster.put_daemonset(A100_DRIVER, "aaaa0001", "rev1")
    return cluster


def test_the_agent_keeps_its_driver_revision_on_the_node_for_the_coordinator(load_fixture, paced_config):
    config = version3(paced_config)
    cluster = upgrade_cluster(load_fixture, config)
    agent = Agent(cluster, NODE)

    agent.reconcile(config)

    assert cluster.node_labels(NODE)[grants.DRIVER_REVISION_LABEL] == "rev1"
    assert cluster.coordinate(config) == [], "the DaemonSet does not carry the config's digest yet"


def test_an_outdated_driver_is_granted_without_asking_replaced_on_a_cordoned_node_and_uncordoned_once_ready(
        load_fixture, paced_config):
    config = version3(paced_config)
    cluster = upgrade_cluster(load_fixture, config)
    agent = Agent(cluster, NODE)
    agent.reconcile(config)
    cluster.put_daemonset(A100_DRIVER, "aaaa0002", "rev2")

    [grant] = cluster.coordinate(config)
    assert (grant["reason"], grant["daemonSet"], grant["revision"]) == ("driver-upgrade", A100_DRIVER, "rev2")
    agent.reconcile(config)
    node = cluster.node(NODE)
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"]["nvidia.com/gpu-driver-upgrade-enabled"] == "true"
    cluster.coordinate(config)
    assert cluster.server.evictions == ["ml-team/train-0"] and cluster.pod("driver-old")["metadata"].get(
        "deletionTimestamp") is None

    cluster.wait(60)
    agent.reconcile(config)
    assert cluster.pod("driver-old")["metadata"]["deletionTimestamp"]
    assert cluster.node_labels(NODE)[STATE] == "pod-restart-required"

    cluster.wait(60)
    cluster.add(driver_pod("driver-new", NODE, A100_DRIVER, revision="rev2", ready=False))
    assert agent.reconcile(config).pods and holding(agent)
    cluster.ready("driver-new")
    agent.reconcile(config)
    node = cluster.node(NODE)
    assert "unschedulable" not in node["spec"]
    assert node["metadata"]["labels"][STATE] == "upgrade-done"
    assert node["metadata"]["labels"][grants.DRIVER_REVISION_LABEL] == "rev2"
    assert "nvidia.com/gpu-driver-upgrade-enabled" not in node["metadata"]["annotations"]
    assert cluster.holders() == set() and cluster.coordinate(config) == []


def test_a_new_template_with_the_same_driver_install_restarts_the_pod_without_cordon_or_eviction(
        load_fixture, paced_config):
    config = version3(paced_config)
    old = driver_pod("driver-old", NODE, A100_DRIVER, revision="rev1")
    old["spec"]["containers"][0]["env"] = [{"name": "DRIVER_CONFIG_DIGEST", "value": "same"}]
    cluster = Cluster([driver_deployed(a100_node(load_fixture, config))], [old, gpu_job_pod("train-0", NODE)])
    cluster.put_daemonset(A100_DRIVER, "aaaa0001", "rev1")
    agent = Agent(cluster, NODE)
    agent.reconcile(config)
    cluster.put_daemonset(A100_DRIVER, "aaaa0002", "rev2", config_digest="same")  # a new agent image, say

    cluster.coordinate(config)
    agent.reconcile(config)

    assert cluster.pod("driver-old")["metadata"]["deletionTimestamp"] and cluster.server.evictions == []
    assert "unschedulable" not in cluster.node(NODE)["spec"]
    assert cluster.holders() == {NODE}, "still within the budget: the operands pause while the pod restarts"


def test_finishing_on_a_stale_event_still_lifts_the_agents_own_cordon(load_fixture, paced_config):
    config = version3(paced_config)
    cluster = upgrade_cluster(load_fixture, config, job=False)
    agent = Agent(cluster, NODE)
    agent.reconcile(config)
    cluster.put_daemonset(A100_DRIVER, "aaaa0002", "rev2")
    cluster.coordinate(config)
    stale = cluster.node(NODE)  # the watch's copy from before the cordon
    agent.reconcile(config)
    assert cluster.node(NODE)["spec"]["unschedulable"] is True
    cluster.wait(60)
    cluster.add(driver_pod("driver-new", NODE, A100_DRIVER, revision="rev2", ready=True))

    agent.pacer(stale, config)
    assert not holding(agent) and "unschedulable" not in cluster.node(NODE)["spec"]


def test_a_manual_upgrade_never_deletes_a_driver_pod(load_fixture, paced_config):
    config = version3(paced_config, driverUpgrade="manual")
    cluster = upgrade_cluster(load_fixture, config)
    agent = Agent(cluster, NODE)
    agent.reconcile(config)
    cluster.put_daemonset(A100_DRIVER, "aaaa0002", "rev2")

    assert cluster.coordinate(config) == []
    agent.reconcile(config)
    assert cluster.server.evictions == [] and cluster.budget() is None
    assert not cluster.pod("driver-old")["metadata"].get("deletionTimestamp")


def test_without_eviction_the_upgrade_waits_for_the_gpu_work_to_end(load_fixture, paced_config):
    config = version3(paced_config, gpuPodEviction=False)
    cluster = upgrade_cluster(load_fixture, config)
    agent = Agent(cluster, NODE)
    agent.reconcile(config)
    cluster.put_daemonset(A100_DRIVER, "aaaa0002", "rev2")
    cluster.coordinate(config)

    agent.reconcile(config)
    assert holding(agent) and cluster.server.evictions == []
    assert not cluster.pod("driver-old")["metadata"].get("deletionTimestamp")
    cluster.finish_pod("train-0", "ml-team")
    agent.reconcile(config)
    assert cluster.pod("driver-old")["metadata"]["deletionTimestamp"]


def test_a_grant_for_a_driver_pod_that_is_already_up_to_date_is_given_back_at_once(load_fixture, paced_config):
    config = version3(paced_config)
    cluster = upgrade_cluster(load_fixture, config)
    agent = Agent(cluster, NODE)
    agent.reconcile(config)
    cluster.put_daemonset(A100_DRIVER, "aaaa0002", "rev2")
    # Someone deleted the pod by hand; the DaemonSet made a new one at the newest revision before the grant came.
    cluster.server.delete("pods", "gpu-operator", "driver-old")
    cluster.add(driver_pod("driver-new", NODE, A100_DRIVER, revision="rev2", ready=True))
    cluster.coordinate(config)

    agent.reconcile(config)

    assert cluster.holders() == set() and cluster.server.evictions == []
    assert cluster.node_labels(NODE)[grants.DRIVER_REVISION_LABEL] == "rev2"


# --- what is not paced ---------------------------------------------------------------------------------------


def test_the_users_operands_switch_removes_every_deploy_label_at_once(load_fixture, paced_config):
    node = a100_node(load_fixture, paced_config)
    node["metadata"]["labels"]["nvidia.com/gpu.deploy.operands"] = "false"
    cluster = Cluster([node], [gpu_job_pod("train-0", NODE)])
    agent = Agent(cluster, NODE)

    agent.reconcile(paced_config)

    assert not [key for key in cluster.node_labels(NODE) if key.startswith("nvidia.com/gpu.deploy.")
                and key != "nvidia.com/gpu.deploy.operands"]
    assert asked(cluster) is None and cluster.server.evictions == []


def test_a_version_1_config_changes_everything_at_once(load_fixture, pool_config):
    cluster = Cluster([a100_node(load_fixture, pool_config)], [gpu_job_pod("train-0", NODE)])
    agent = Agent(cluster, NODE)
    config = copy.deepcopy(pool_config)
    config["pools"][0]["deployLabels"].remove(EXPORTER)

    agent.reconcile(config)

    assert EXPORTER not in cluster.node_labels(NODE)
    assert agent.events() == ["labels-changed"]
    assert cluster.server.by_method([f"agent/{NODE}"]) == {"read_node": 1, "patch_node": 1}


def test_the_first_driver_label_is_added_at_once(load_fixture, pool_config, paced_config):
    # Labelled by an agent before 0.4.0: its driver pod already belongs to the DaemonSet the label will name.
    cluster = Cluster([a100_node(load_fixture, pool_config)],
                      [driver_pod("nvidia-driver-daemonset-a100-abcde", NODE, A100_DRIVER)])
    agent = Agent(cluster, NODE)

    agent.reconcile(paced_config)

    assert cluster.node_labels(NODE)["gpu-stack/driver"] == A100_DRIVER
    assert asked(cluster) is None


def test_a_first_driver_label_naming_another_daemonset_than_the_nodes_driver_pod_waits_for_a_slot(
        load_fixture, pool_config, paced_config):
    # Labelled by an agent before 0.4.0, and its pool renamed in the same `pulumi up`: its driver pod belongs to the
    # old pool's DaemonSet, so the first label is a handover.
    cluster = Cluster([driver_deployed(a100_node(load_fixture, pool_config))],
                      [driver_pod("nvidia-driver-daemonset-a100-abcde", NODE, A100_DRIVER)])
    agent = Agent(cluster, NODE)

    agent.reconcile(with_a100_renamed(paced_config))
    assert "gpu-stack/driver" not in cluster.node_labels(NODE)
    assert asked(cluster) == "driver-handover" and cluster.node_labels(NODE)[STATE] == "upgrade-required"


# --- driver handover -----------------------------------------------------------------------------------------


def test_an_orphaned_driver_pod_is_handed_over_to_the_nodes_daemonset_at_the_pace(load_fixture, paced_config):
    # The node's labels are right, but its driver pod's DaemonSet was deleted (orphan propagation) and
    # recreated: nothing would ever replace that pod.
    cluster = Cluster([driver_deployed(a100_node(load_fixture, paced_config))],
                      [driver_pod("nvidia-driver-old-x7k2p", NODE, None)])
    agent = Agent(cluster, NODE)

    granted(cluster, agent, paced_config)
    assert holding(agent) and cluster.pod("nvidia-driver-old-x7k2p")["metadata"]["deletionTimestamp"]

    cluster.wait(60)
    cluster.add(driver_pod("nvidia-driver-daemonset-a100-abcde", NODE, A100_DRIVER, ready=False))
    agent.reconcile(paced_config)
    assert agent.last("slot-holding")["waitingFor"] == [
        "no Ready driver pod of DaemonSet nvidia-driver-daemonset-a100 yet"]

    cluster.ready("nvidia-driver-daemonset-a100-abcde")
    agent.reconcile(paced_config)
    assert cluster.holders() == set() and not holding(agent)


def test_a_changed_driver_label_hands_the_node_over_once_the_new_driver_is_ready(load_fixture, paced_config):
    config = version3(with_a100_renamed(paced_config))
    cluster = Cluster([driver_deployed(a100_node(load_fixture, paced_config))],
                      [driver_pod("nvidia-driver-daemonset-a100-abcde", NODE, None)])  # A, deleted by the rename
    cluster.put_budget({SECOND: {"reason": "driver-upgrade", "since": "2025-06-02T09:59:30Z"}})
    cluster.server.put(NODES, renamed(cluster.node(NODE), SECOND))
    cluster.put_daemonset(A100_V2_DRIVER, "cccc0001", "v2rev1")
    agent = Agent(cluster, NODE)
    config["removal"]["maxUnavailable"] = 1

    # Waiting for the slot: the pool label changes at once, the driver DaemonSet does not.
    agent.reconcile(config)
    assert cluster.node_labels(NODE)["gpu-stack/pool"] == "a100-v2"
    assert cluster.node_labels(NODE)["gpu-stack/driver"] == A100_DRIVER
    assert cluster.coordinate(config) == [], "the budget of one is held"

    cluster.put_budget({})
    granted(cluster, agent, config)
    assert cluster.node_labels(NODE)["gpu-stack/driver"] == A100_V2_DRIVER
    assert cluster.pod("nvidia-driver-daemonset-a100-abcde")["metadata"]["deletionTimestamp"]
    assert agent.last("driver-handover")["driver"] == {"old": A100_DRIVER, "new": A100_V2_DRIVER}

    cluster.wait(60)
    cluster.add(driver_pod("nvidia-driver-daemonset-a100-v2-fghij", NODE, A100_V2_DRIVER, ready=True))
    agent.reconcile(config)
    assert cluster.holders() == set()


def test_a_handover_under_a_gpu_job_drains_it_as_a_driver_upgrade_does(load_fixture, paced_config):
    config = version3(with_a100_renamed(paced_config))
    cluster = Cluster([driver_deployed(a100_node(load_fixture, paced_config))],
                      [driver_pod("nvidia-driver-daemonset-a100-abcde", NODE, None),
                       gpu_job_pod("train-0", NODE)])
    cluster.put_daemonset(A100_V2_DRIVER, "cccc0001", "v2rev1")
    agent = Agent(cluster, NODE)

    granted_and_drained(cluster, agent, config)

    # Before 0.8.0 the label moved at once and the old driver went from under the job.
    assert cluster.node(NODE)["spec"]["unschedulable"] is True
    assert cluster.server.evictions == ["ml-team/train-0"]
    assert cluster.node_labels(NODE)["gpu-stack/driver"] == A100_DRIVER
    cluster.wait(60)
    agent.reconcile(config)
    assert cluster.node_labels(NODE)["gpu-stack/driver"] == A100_V2_DRIVER


def test_a_handover_that_keeps_the_loaded_driver_leaves_the_gpu_job_running(load_fixture, paced_config):
    config = version3(with_a100_renamed(paced_config))
    old = driver_pod("nvidia-driver-daemonset-a100-abcde", NODE, None)
    old["spec"]["containers"][0]["env"] = [{"name": "DRIVER_CONFIG_DIGEST", "value": "same-install"}]
    cluster = Cluster([driver_deployed(a100_node(load_fixture, paced_config))], [old, gpu_job_pod("train-0", NODE)])
    cluster.put_daemonset(A100_V2_DRIVER, "cccc0001", "v2rev1", config_digest="same-install")
    agent = Agent(cluster, NODE)

    granted(cluster, agent, config)

    assert cluster.server.evictions == [] and "unschedulable" not in cluster.node(NODE)["spec"]
    assert cluster.node_labels(NODE)["gpu-stack/driver"] == A100_V2_DRIVER


def test_a_mig_relayout_under_a_gpu_job_waits_for_it_without_eviction(load_fixture, paced_config):
    config = version3(paced_config, gpuPodEviction=False)
    node = driver_deployed(a100_node(load_fixture, config))
    node["metadata"]["labels"].update({"nvidia.com/mig.config": "all-disabled",
                                       "nvidia.com/mig.config.state": "success"})
    cluster = Cluster([node], [gpu_job_pod("train-0", NODE)])
    config["pools"][0]["labels"]["nvidia.com/mig.config"] = "all-1g.5gb"
    agent = Agent(cluster, NODE)

    granted(cluster, agent, config)
    assert holding(agent) and cluster.node(NODE)["spec"]["unschedulable"] is True
    assert cluster.node_labels(NODE)["nvidia.com/mig.config"] == "all-disabled", "not under the job"

    cluster.finish_pod("train-0", "ml-team")
    agent.reconcile(config)
    assert cluster.node_labels(NODE)["nvidia.com/mig.config"] == "all-1g.5gb"
    assert cluster.node_labels(NODE)["nvidia.com/mig.config.state"] == "pending"


def test_a_node_whose_pool_is_removed_retires_its_driver_at_the_pace(load_fixture, paced_config):
    cluster = Cluster([driver_deployed(a100_node(load_fixture, paced_config))],
                      [driver_pod("nvidia-driver-daemonset-a100-abcde", NODE, None)])
    agent = Agent(cluster, NODE)
    config = copy.deepcopy(paced_config)
    del config["pools"][0]

    granted(cluster, agent, config)
    node_labels = cluster.node_labels(NODE)
    assert "gpu-stack/driver" not in node_labels and "gpu-stack/pool" not in node_labels
    assert not [key for key in node_labels if key.startswith("nvidia.com/gpu.deploy.")]
    assert labels.APPLIED_LABELS_ANNOTATION not in cluster.annotations(NODE)
    assert cluster.pod("nvidia-driver-daemonset-a100-abcde")["metadata"]["deletionTimestamp"]

    cluster.wait(60)
    agent.reconcile(config)
    assert cluster.holders() == set()


# --- in the label loop ---------------------------------------------------------------------------------------


def test_the_label_loop_watches_pods_while_holding_judging_every_event_without_a_read(load_fixture, paced_config):
    cluster = Cluster([a100_node(load_fixture, paced_config)], [gpu_job_pod("train-0", NODE)])
    config = without_exporter(paced_config, drain=True)
    agent = Agent(cluster, NODE)
    agent.reconcile(config)
    cluster.coordinate(config)
    pod_watches: list[tuple[int, Any]] = []

    def watch_pods(api: Any, name: str, timeout: int, resource_version: str | None) -> Any:
        pod_watches.append((timeout, resource_version))
        job = cluster.pod("train-0", "ml-team")
        yield {"type": "DELETED", "object": job}

    before = agent.requests()
    lists_before = cluster.server.by_method([agent.api.caller]).get("list_pod_for_all_namespaces", 0)
    labelloop.run_label_loop(agent.api, node_name=NODE, load_config=lambda: config, resync_seconds=900, log=agent.log,
                        stop=iter([False] * 3 + [True] * 10).__next__, sleep=lambda s: None,
                        watch_events=lambda *a: iter(()), watch_pods=watch_pods, rng=lambda: 1.0,
                        reconcile=agent.pacer, clock=lambda: cluster.hub.now)

    # Holding, it watches its pods (from its own read of them), not its Node, and judges the job's deletion on
    # the event: the label change goes out without listing the pods again.
    assert pod_watches and pod_watches[0][1] is not None
    assert EXPORTER not in cluster.node_labels(NODE)
    lists = cluster.server.by_method([agent.api.caller]).get("list_pod_for_all_namespaces", 0) - lists_before
    assert lists == 1, f"one list of its pods for the whole hold, {agent.requests() - before} requests in all"


def test_the_label_loop_backs_off_failed_requests(load_fixture, paced_config):
    cluster = Cluster([a100_node(load_fixture, paced_config)],
                      [operand_pod("nvidia-dcgm-exporter-x", NODE, "dcgm-exporter")])
    cluster.server.fail("patch_node", ApiException(status=503, reason="Service Unavailable"))
    agent = Agent(cluster, NODE)
    sleeps: list[float] = []

    labelloop.run_label_loop(agent.api, node_name=NODE, load_config=lambda: without_exporter(paced_config),
                        resync_seconds=900, log=agent.log, stop=iter([False, False, True]).__next__,
                        sleep=sleeps.append, watch_events=lambda *a: iter(()), rng=lambda: 1.0,
                        reconcile=agent.pacer, clock=lambda: cluster.hub.now)

    assert [r["status"] for r in agent.log.records if r["event"] == "retry"] == [503]
    assert sleeps[0] == 1.0
    assert asked(cluster) == "label-removal"


def test_the_label_loop_starts_a_new_watch_when_a_change_starts_or_ends(pool_config):
    from agenttest import Recorder, fake_api, model
    from gpustack_agent.api import podwatch

    node = {"metadata": {"name": NODE, "resourceVersion": "1", "labels": {"a": "1"}}}
    core = fake_api()
    core.read_node.return_value = model(node, "V1Node")
    waits = iter([labelloop.Next(), labelloop.Next(seconds=10.0), labelloop.Next(), labelloop.Next()])
    calls: list[str] = []
    watches: list[tuple[int, str | None]] = []

    class Reconcile:
        node = None
        pods = podwatch.PodCache(core, NODE)

        def __call__(self, seen: Any, config: Any) -> labelloop.Next:
            calls.append(seen["metadata"]["resourceVersion"])
            return next(waits)

        def wants(self, event: Any) -> bool:
            return False

    def watch_events(api: Any, name: str, timeout: int, resource_version: str | None) -> Any:
        watches.append((timeout, resource_version))
        for version in ("2", "3"):
            if int(version) > int(resource_version or 0):
                yield {"type": "MODIFIED", "object": {"metadata": {"name": NODE, "resourceVersion": version,
                                                                   "labels": {"a": version}}}}

    config = labels.parse_config(pool_config)
    labelloop.run_label_loop(core, node_name=NODE, load_config=lambda: config, resync_seconds=60, log=Recorder(),
                        stop=iter([False] * 5 + [True] * 10).__next__, sleep=lambda s: None,
                        watch_events=watch_events, reconcile=Reconcile(), clock=lambda: 0.0)

    # Pass 1 watches 60 s from the Node's read, until event "2" asks to look again within 10 s; pass 2 watches 10 s,
    # resumed from event "2" (its answer still stands: no reconcile, no read of the Node), until event "3".
    assert watches[:2] == [(60, "1"), (10, "2")]
    assert calls == ["1", "2", "3"]
    core.read_node.assert_called_once()
