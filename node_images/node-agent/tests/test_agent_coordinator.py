"""The upgrade coordinator (coordinator.py, informer.py): who is in line and in what order, when slots are granted,
what is freed, and how it reads the cluster, step by step against a counting API server (stepcluster.Cluster)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

import gpustack_agent.__main__ as cli
from agenttest import clients_of, driver_pod, renamed
from gpustack_agent.api import informer
from gpustack_agent.model import budget, grants, upgrade
from simcluster import NODES, Api, Hub, Server
from stepcluster import Cluster

A100 = "nvidia-driver-daemonset-a100"
STATE = upgrade.UPGRADE_STATE_LABEL


def config_of(paced_config: dict[str, Any], max_unavailable: Any = 1, **removal: Any) -> dict[str, Any]:
    config = copy.deepcopy(paced_config)
    config["version"] = 3
    config["removal"].update({"maxUnavailable": max_unavailable, "driverUpgrade": "rolling", **removal})
    config["drivers"] = {A100: "aaaa0002"}
    return config


def node(load_fixture: Any, name: str, **labels: str) -> dict[str, Any]:
    found = renamed(load_fixture("node-a100-labelled"), name)
    found["metadata"]["labels"].update({"gpu-stack/driver": A100, "nvidia.com/gpu.deploy.driver": "true", **labels})
    return found


def asking(load_fixture: Any, name: str, since: str, reason: str = "label-removal") -> dict[str, Any]:
    found = node(load_fixture, name, **{STATE: upgrade.WAITING})
    found["metadata"]["annotations"][grants.REQUEST_ANNOTATION] = grants.request_value(reason, since)
    return found


def granted_nodes(records: list[dict[str, Any]]) -> list[str]:
    return [r["node"] for r in records if r["event"] == "slot-granted"]


def outdated_fleet(load_fixture: Any, names: list[str]) -> Cluster:
    cluster = Cluster([node(load_fixture, n, **{grants.DRIVER_REVISION_LABEL: "rev1"}) for n in names])
    cluster.put_daemonset(A100, "aaaa0001", "rev1")
    cluster.put_daemonset(A100, "aaaa0002", "rev2")
    return cluster


# --- the line ------------------------------------------------------------------------------------------------


def test_requests_found_waiting_at_the_start_go_by_when_they_were_made(load_fixture, paced_config):
    cluster = Cluster([asking(load_fixture, "n-a", "2025-06-02T10:05:00Z"),
                       asking(load_fixture, "n-b", "2025-06-02T10:01:00Z"),
                       asking(load_fixture, "n-c", "2025-06-02T10:03:00Z")])
    config = config_of(paced_config, 3)

    assert granted_nodes(cluster.coordinate(config)) == ["n-b", "n-c", "n-a"]


def test_a_request_joins_the_line_behind_those_already_in_it(load_fixture, paced_config):
    cluster = Cluster([asking(load_fixture, "n-z", "2025-06-02T10:05:00Z"),
                       asking(load_fixture, "n-y", "2025-06-02T10:06:00Z")])
    config = config_of(paced_config, 1)
    assert granted_nodes(cluster.coordinate(config)) == ["n-z"]
    cluster.server.put(NODES, asking(load_fixture, "n-a", "2025-06-02T09:00:00Z"))  # a skewed clock, earlier
    cluster.put_budget({})  # n-z is through

    assert granted_nodes(cluster.coordinate(config)) == ["n-y"], "first come, first served: not the earlier clock"


def test_nodes_whose_driver_went_out_of_date_together_go_in_no_order_of_their_names(load_fixture, paced_config):
    names = [f"gpu-{i:03d}" for i in range(40)]
    cluster = outdated_fleet(load_fixture, names)
    config = config_of(paced_config, 40)

    order = granted_nodes(cluster.coordinate(config))

    assert sorted(order) == names and order != names
    first_half = set(order[:20])
    assert 5 <= len(first_half & set(names[:20])) <= 15, "neither the first names nor the last ones go first"


def test_a_driver_upgrade_is_granted_once_the_daemonset_runs_the_configs_template(load_fixture, paced_config):
    cluster = Cluster([node(load_fixture, "n-a", **{grants.DRIVER_REVISION_LABEL: "rev1"})])
    cluster.put_daemonset(A100, "aaaa0001", "rev1")
    config = config_of(paced_config, 1)
    assert cluster.coordinate(config) == [], "the DaemonSet's template is not the one the config names yet"

    cluster.put_daemonset(A100, "aaaa0002", "rev2")
    [grant] = cluster.coordinate(config)
    record = budget.holders(cluster.budget())["n-a"]
    assert (record["reason"], record["daemonSet"], record["digest"], record["revision"], record["grant"]) == (
        "driver-upgrade", A100, "aaaa0002", "rev2", grant["grant"])
    assert grants.grant_of(cluster.node("n-a")) == grant["grant"]


def test_a_revision_its_daemonset_never_had_is_not_judged(load_fixture, paced_config):
    # The node is being handed over: its label still names the old DaemonSet's pod revision.
    cluster = Cluster([node(load_fixture, "n-a", **{grants.DRIVER_REVISION_LABEL: "other-ds-rev"})])
    cluster.put_daemonset(A100, "aaaa0002", "rev2")
    assert cluster.coordinate(config_of(paced_config)) == []


def test_a_node_whose_driver_is_not_deployed_is_never_granted_an_upgrade(load_fixture, paced_config):
    cluster = outdated_fleet(load_fixture, ["n-a"])
    cluster.patch_node("n-a", {"metadata": {"labels": {"nvidia.com/gpu.deploy.driver": "pre-installed"}}})
    assert cluster.coordinate(config_of(paced_config)) == []


# --- the budget ----------------------------------------------------------------------------------------------


def test_no_slot_is_granted_while_paused_or_while_a_holder_failed(load_fixture, paced_config):
    cluster = outdated_fleet(load_fixture, ["n-a", "n-b"])
    assert cluster.coordinate(config_of(paced_config, 2, paused=True)) == []

    cluster.put_budget({"n-c": {"reason": "driver-upgrade", "failed": "not Ready within 1800s"}})
    cluster.server.put(NODES, node(load_fixture, "n-c"))
    assert cluster.coordinate(config_of(paced_config, 2)) == []


def test_a_percentage_resolves_against_the_nodes_with_a_managed_driver(load_fixture, paced_config):
    cluster = outdated_fleet(load_fixture, [f"n-{i}" for i in range(6)])
    no_driver = renamed(load_fixture("node-a100-labelled"), "cpu-or-host-driver")
    cluster.server.put(NODES, no_driver)

    assert len(granted_nodes(cluster.coordinate(config_of(paced_config, "34%")))) == 3  # ceil(6 * 34 %)
    assert cluster.budget()["metadata"]["annotations"][budget.GPU_NODES_ANNOTATION] == "6"


def test_a_grant_that_loses_a_race_for_the_budget_is_decided_again_next_step(load_fixture, paced_config):
    cluster = outdated_fleet(load_fixture, ["n-a"])
    cluster.put_budget({})
    cluster.server.fail("patch_namespaced_config_map", ApiException(status=409, reason="Conflict"))
    config = config_of(paced_config)

    assert granted_nodes(cluster.coordinate(config)) == []
    assert granted_nodes(cluster.coordinate(config)) == ["n-a"]


def test_a_deleted_node_that_holds_a_slot_is_freed_a_node_that_only_lost_a_label_is_not(load_fixture,
                                                                                        paced_config):
    cluster = Cluster([node(load_fixture, "n-kept")])
    cluster.put_budget({"n-gone": {"reason": "driver-upgrade", "since": "2025-06-02T09:59:30Z"},
                        "n-kept": {"reason": "label-removal", "since": "2025-06-02T09:59:30Z"}})
    cluster.patch_node("n-kept", {"metadata": {"labels": {"gpu-stack/driver": None}}})

    records = cluster.coordinate(config_of(paced_config, 5))

    assert cluster.holders() == {"n-kept"}
    assert [r["nodes"] for r in records if r["event"] == "slots-freed"] == [["n-gone"]]


def test_a_grant_a_node_never_took_up_and_no_longer_needs_is_freed(load_fixture, paced_config):
    cluster = Cluster([asking(load_fixture, "n-a", "2025-06-02T10:00:00Z")])
    config = config_of(paced_config)
    cluster.server.fail("patch_node", ApiException(status=500, reason="timeout"), caller="coordinator")
    with pytest.raises(ApiException):
        cluster.coordinate(config)
    assert cluster.holders() == {"n-a"} and grants.grant_of(cluster.node("n-a")) is None
    # The node's request is withdrawn before the grant reaches it.
    cluster.patch_node("n-a", {"metadata": {"labels": {STATE: None},
                                            "annotations": {grants.REQUEST_ANNOTATION: None}}})

    cluster.coordinate(config)
    assert cluster.holders() == set()


def test_slots_agents_before_0_8_0_took_are_counted_and_left_alone(load_fixture, paced_config):
    cluster = outdated_fleet(load_fixture, ["n-a", "n-old"])
    cluster.patch_node("n-old", {"metadata": {"labels": {STATE: upgrade.DRAINING}}})
    cluster.put_budget({"n-old": {"reason": "driver-upgrade", "since": "2025-06-02T09:59:30Z"}})

    assert cluster.coordinate(config_of(paced_config, 1)) == []
    assert cluster.holders() == {"n-old"}


# --- reading the cluster -------------------------------------------------------------------------------------


def test_the_coordinator_reads_nodes_as_metadata_only(load_fixture, paced_config):
    cluster = outdated_fleet(load_fixture, ["n-a"])
    calls: list[dict[str, Any]] = []
    real = cluster.coordinator_api.list_node

    def spy(**kwargs: Any) -> Any:
        calls.append(kwargs)
        return real(**kwargs)
    cluster.coordinator_api.list_node = spy  # type: ignore[method-assign]

    cluster.coordinate(config_of(paced_config))

    assert {c["label_selector"] for c in calls} == {STATE, "gpu-stack/driver"}
    assert all("PartialObjectMetadataList" in c["_headers"]["Accept"] for c in calls)


def informer_run(server: Server, source: informer.Source, *, until: float) -> list[tuple[str, str, Any]]:
    seen: list[tuple[str, str, Any]] = []
    task = server.hub.spawn(lambda: informer.run(source, None, seen.append, stop=lambda: server.hub.now >= until,
                                                 sleep=server.hub.sleep, clock=lambda: server.hub.now,
                                                 rng=lambda: 0.5, timeout=60), "informer")
    server.hub.run(until)
    server.hub.kill(task)
    return seen


def test_an_informer_resumes_from_its_last_version_and_lists_again_after_410(load_fixture):
    server = Server(Hub())
    server.put(NODES, node(load_fixture, "n-a", **{STATE: "upgrade-done"}))
    api = Api(server, "coordinator")
    source = informer.Source("nodes", api.list_node, label_selector=STATE, metadata=True)
    server.hub.at(90, lambda: server.put(NODES, node(load_fixture, "n-b", **{STATE: "upgrade-required"})))

    def outage() -> None:
        # The watch is cut, and while it is down the watch cache moves past the informer's resourceVersion.
        server.end_watch(lambda watches: watches[0])
        server.put(NODES, node(load_fixture, "n-c", **{STATE: "upgrade-required"}))
        server.compacted = {kind: server.version for kind in server.compacted}
    server.hub.at(200, outage)

    seen = informer_run(server, source, until=300)

    kinds = [(kind, obj["metadata"]["name"] if isinstance(obj, dict) else len(obj)) for _, kind, obj in seen]
    assert kinds[:2] == [(informer.SYNC, 1), ("ADDED", "n-b")]
    assert (informer.SYNC, 3) in kinds[2:], "listed again after the 410"
    assert server.by_method(["coordinator"]).get("list_node") == 2


def test_an_informer_refused_for_good_reports_what_was_refused(load_fixture):
    server = Server(Hub())
    api = Api(server, "coordinator")
    server.fail("list_node", ApiException(status=403, reason="Forbidden"))
    source = informer.Source("nodes-in-line", api.list_node, label_selector=STATE, metadata=True)

    seen = informer_run(server, source, until=10)

    assert seen == [("nodes-in-line", informer.FATAL, "nodes-in-line: 403 Forbidden")]


def test_coordinate_refuses_a_version_1_document(tmp_path, pool_config, capsys):
    config_file = tmp_path / "node-pools.json"
    config_file.write_text(json.dumps(pool_config))

    assert cli.main(["coordinate"], {"CONFIG_FILE": str(config_file)}, clients=clients_of()) == cli.EXIT_USAGE
    assert "removal" in capsys.readouterr().err


def test_coordinate_stops_on_a_permission_it_lacks(tmp_path, paced_config, capsys):
    config_file = tmp_path / "node-pools.json"
    config_file.write_text(json.dumps(paced_config))
    server = Server(Hub())
    server.fail("list_namespaced_config_map", ApiException(status=403, reason="Forbidden"))
    api = Api(server, "coordinator")

    with pytest.MonkeyPatch.context() as patch:
        # Real threads: the informers of the one that lacks nothing keep watching until the process ends.
        patch.setattr(server, "open_watch", lambda *a, **k: (_ for _ in ()).throw(
            ApiException(status=403, reason="Forbidden")))
        code = cli.main(["coordinate"], {"CONFIG_FILE": str(config_file)}, clients=clients_of(api, None, api, None))

    assert code == cli.EXIT_FAILED
    assert "403 Forbidden" in capsys.readouterr().err


def test_a_driver_pod_of_another_daemonset_is_not_a_revision(load_fixture):
    from gpustack_agent.model import pods
    assert pods.owner(driver_pod("x", "n", A100, revision="rev1"), "DaemonSet") == A100
