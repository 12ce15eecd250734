"""Drains carried out by the coordinator (drains.py, coordinate.py): a node asks on its own Node, the coordinator
evicts only pods bound to that node, and only under the slot the budget holds for it; a process on a GPU node can
neither evict nor write another Node (simcluster.NodeBoundAccess models the stack's RBAC and admission policy)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from agenttest import gpu_job_pod, renamed
from gpustack_agent.model import budget, drains, upgrade
from simcluster import PODS, Api
from stepcluster import Cluster

NODE, OTHER = "gpu-a", "gpu-b"
GRANT = "00000001-1"


def config_of(paced_config: dict[str, Any], **removal: Any) -> dict[str, Any]:
    config = copy.deepcopy(paced_config)
    config["version"] = 3
    config["removal"].update({"drain": True, "driverUpgrade": "manual", **removal})
    return config


def holding(load_fixture: Any, grant: str = GRANT, *, failed: bool = False) -> Cluster:
    """NODE holds a slot under ``grant`` with a GPU job on it; OTHER runs a GPU job and holds nothing."""
    nodes = [renamed(load_fixture("node-a100-labelled"), name) for name in (NODE, OTHER)]
    for found in nodes:  # both cordoned and draining, as their agents show it: what the coordinator watches
        found["metadata"]["labels"][upgrade.UPGRADE_STATE_LABEL] = upgrade.DRAINING
    cluster = Cluster(nodes, [gpu_job_pod("train-a", NODE), gpu_job_pod("train-b", OTHER)])
    record = {"reason": budget.LABEL_REMOVAL, "since": "2025-06-02T10:00:00Z", "grant": grant}
    cluster.put_budget({NODE: {**record, **({"failed": "drain timed out"} if failed else {})}})
    return cluster


def ask(cluster: Cluster, refs: list[str], *, grant: str = GRANT, node: str = NODE, caller: str = NODE) -> None:
    """The agent on ``caller`` writes a drain request onto ``node``."""
    Api(cluster.server, f"agent/{caller}").patch_node(node, {"metadata": {"annotations": {
        drains.DRAIN_ANNOTATION: drains.request_value(grant, refs)}}})


def running(cluster: Cluster, name: str) -> bool:
    pod = cluster.pod(name, "ml-team")
    return pod is not None and not pod["metadata"].get("deletionTimestamp")


def test_evict_a_pod_on_another_node_refused(load_fixture, paced_config):
    cluster = holding(load_fixture)
    ask(cluster, ["ml-team/train-a", "ml-team/train-b"])

    cluster.coordinate(config_of(paced_config))

    assert cluster.server.evictions == ["ml-team/train-a"]
    assert running(cluster, "train-b")
    refused = cluster.coordinator_log.last("eviction-refused")
    assert (refused["node"], refused["pod"], refused["reason"]) == (NODE, "ml-team/train-b", drains.NOT_ON_NODE)


def test_a_process_on_a_gpu_node_can_neither_evict_nor_ask_for_another_nodes_drain(load_fixture, paced_config):
    cluster = holding(load_fixture)
    agent = Api(cluster.server, f"agent/{NODE}")
    with pytest.raises(ApiException) as evicting:
        agent.create_namespaced_pod_eviction("train-b", "ml-team", {"metadata": {"name": "train-b"}})
    with pytest.raises(ApiException) as writing:
        ask(cluster, ["ml-team/train-b"], node=OTHER)
    with pytest.raises(ApiException) as deleting:
        agent.delete_namespaced_pod("train-b", "ml-team")

    assert (evicting.value.status, writing.value.status, deleting.value.status) == (403, 403, 403)
    cluster.coordinate(config_of(paced_config))
    assert cluster.server.evictions == [] and running(cluster, "train-b")


@pytest.mark.parametrize("grant, failed", [("00000001-9", False), (GRANT, True)], ids=["another grant", "failed slot"])
def test_a_drain_is_carried_out_only_under_the_slot_the_budget_holds(load_fixture, paced_config, grant, failed):
    cluster = holding(load_fixture, GRANT, failed=failed)
    ask(cluster, ["ml-team/train-a"], grant=grant)

    cluster.coordinate(config_of(paced_config))

    assert cluster.server.evictions == [] and running(cluster, "train-a")


def test_a_node_without_a_slot_has_nothing_drained(load_fixture, paced_config):
    cluster = holding(load_fixture)
    ask(cluster, ["ml-team/train-b"], node=OTHER, caller=OTHER)

    cluster.coordinate(config_of(paced_config))

    assert cluster.server.evictions == [] and running(cluster, "train-b")


def test_only_gpu_work_the_drain_selects_is_evicted_whatever_the_request_names(load_fixture, paced_config):
    cluster = holding(load_fixture)
    spared = gpu_job_pod("spared", NODE)
    spared["metadata"]["labels"] = {"gpu-stack.io/drain": "never"}
    cluster.add(spared)
    ask(cluster, ["ml-team/train-a", "ml-team/spared"])

    cluster.coordinate(config_of(paced_config, drainPodSelector="gpu-stack.io/drain!=never"))

    assert cluster.server.evictions == ["ml-team/train-a"] and running(cluster, "spared")
    assert cluster.coordinator_log.last("eviction-refused")["reason"] == drains.NOT_SELECTED


def test_a_pod_that_came_back_under_its_name_on_another_node_is_not_evicted(load_fixture, paced_config):
    cluster = holding(load_fixture)
    cluster.server.blocked.add("ml-team/train-a")  # a PodDisruptionBudget refuses it at first
    ask(cluster, ["ml-team/train-a"])
    config = config_of(paced_config)
    cluster.coordinate(config)
    # Meanwhile it went and its controller made it again, under the same name, on the other node.
    cluster.server.delete(PODS, "ml-team", "train-a")
    cluster.add(gpu_job_pod("train-a", OTHER))
    cluster.server.blocked.clear()

    cluster.wait(31)
    cluster.coordinate(config)

    assert cluster.server.evictions == [] and running(cluster, "train-a")
    assert cluster.pod("train-a", "ml-team")["spec"]["nodeName"] == OTHER
