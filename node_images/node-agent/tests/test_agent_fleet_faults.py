"""Several agents and the coordinator at once, in virtual time, against one API server (simfleet.Fleet): the fleet's
one budget holds under faults.

Each run is seeded. The faults: requests refused with 409 or 500, writes applied with the answer lost, watches the
server ends at once, agents and the coordinator restarted, wall clocks skewed by up to ten minutes either way, the
budget lowered mid-rollout, nodes deleted while they hold a slot. The assertions are about the cluster, not the
agents' beliefs: no more nodes out of service than the budget, none out of service without a slot, no driver pod
deleted and no MIG layout applied under a running GPU job, every node finishes, no job evicted twice, no slot
left behind, and no eviction but the coordinator's (an agent that tried to evict, or to write another Node, would be
refused: simcluster.NodeBoundAccess)."""

from __future__ import annotations

import copy
import random
from typing import Any, Callable

import pytest
from kubernetes.client.exceptions import ApiException

from simfleet import Fleet, labelled_nodes

A100, H100 = "nvidia-driver-daemonset-a100", "nvidia-driver-daemonset-h100"
WRITES = ("patch_node", "patch_namespaced_config_map", "create_namespaced_config_map",
          "create_namespaced_pod_eviction", "delete_namespaced_pod")
DAY = 24 * 3600.0


def version3(paced_config: dict[str, Any], max_unavailable: Any = 2, **removal: Any) -> dict[str, Any]:
    config = copy.deepcopy(paced_config)
    config["version"] = 3
    config["removal"].update({"maxUnavailable": max_unavailable, "maxParallelUpgrades": 0, "paused": False,
                              "driverUpgrade": "rolling", "gpuPodEviction": True, "drainPodSelector": "",
                              "drainTimeoutSeconds": 300, "nodeReadyTimeoutSeconds": 600, **removal})
    config["drivers"] = {A100: "aaaa0001", H100: "bbbb0001"}
    return config


def fleet_of(load_fixture: Any, config: dict[str, Any], *, seed: int, jobs: float = 0.7, per_pool: int = 5,
             **kwargs: Any) -> Fleet:
    """`per_pool` a100 and h100 nodes on their driver DaemonSets, a GPU job on some, every agent running."""
    base = load_fixture("node-a100-labelled")["metadata"]["labels"]
    nodes = labelled_nodes(config, base, {"a100": per_pool, "h100": per_pool})
    for metadata in nodes.values():
        metadata["labels"]["nvidia.com/gpu.deploy.driver"] = "true"
    rng = random.Random(seed)
    fleet = Fleet(config, nodes, drivers={A100: ("aaaa0001", "rev1"), H100: ("bbbb0001", "rev1")},
                  jobs=[n for n in sorted(nodes) if rng.random() < jobs], seed=seed, **kwargs)
    fleet.put_daemonset(A100, "aaaa0001", "rev1", observed_after=0)
    fleet.put_daemonset(H100, "bbbb0001", "rev1", observed_after=0)
    fleet.settle_driver_pods()
    fleet.start()
    fleet.hub.run(fleet.hub.now + 120)  # the agents publish their drivers' revisions
    return fleet


def chaos(fleet: Fleet, *, every: float = 10.0, coordinator_restarts: bool = True) -> dict[str, int]:
    """Faults on the fleet's own schedule: a refused or lost write, a watch ended at once, an agent restarted,
    now and then the coordinator restarted. Returns how many of each were injected."""
    rng = random.Random(fleet.rng.random())
    struck = {"refused": 0, "lost": 0, "watch-ended": 0, "agent-restarted": 0, "coordinator-restarted": 0}

    def strike() -> None:
        roll = rng.random()
        kind = ("refused" if roll < 0.25 else "lost" if roll < 0.45 else "watch-ended" if roll < 0.6 else
                "agent-restarted" if roll < 0.7 else "coordinator-restarted" if roll < 0.72 and coordinator_restarts
                else None)
        if kind:
            struck[kind] += 1
        callers = [f"agent/{n}" for n in fleet.agents] + ["coordinator"]
        if roll < 0.25:
            fleet.server.fail(rng.choice(WRITES), ApiException(status=rng.choice((409, 500))), rng.choice(callers))
        elif roll < 0.45:
            fleet.server.lose_response(rng.choice(WRITES), rng.choice(callers))
        elif roll < 0.6:
            fleet.server.end_watch(rng.choice)
        elif roll < 0.7 and fleet.agents:
            fleet.restart_agent(rng.choice(sorted(fleet.agents)))
        elif roll < 0.72 and coordinator_restarts:
            fleet.restart_coordinator()
        fleet.hub.at(fleet.hub.now + every, strike)
    fleet.hub.at(fleet.hub.now + every, strike)
    return struck


def run(fleet: Fleet, until: Callable[[], bool], hours: float = 12) -> None:
    finished = fleet.hub.run(fleet.hub.now + hours * 3600, done=until)
    assert finished, (f"not finished after {hours} h: holders {sorted(fleet.holders())}, "
                      f"down {sorted(fleet.out_of_service())}, crashes {fleet.hub.crashes[:3]}")


def assert_held(fleet: Fleet) -> None:
    assert fleet.over_budget == [], f"more nodes out of service than the budget: {fleet.over_budget[:5]}"
    assert fleet.outside_slot == [], f"out of service without a slot: {fleet.outside_slot[:5]}"
    assert fleet.under_gpu_work == [], f"GPU work taken from under: {fleet.under_gpu_work[:5]}"
    assert fleet.evicted_twice() == []
    assert fleet.server.access.refused == [], "a process on a GPU node tried to evict, or to write another node"
    assert not any(caller.startswith("agent/") for caller, method in fleet.server.requests
                   if method == "create_namespaced_pod_eviction"), "only the coordinator evicts"
    assert fleet.hub.crashes == []
    nodes = [n for (_, _), n in fleet.server.objects["nodes"].items()]
    assert not any((n.get("spec") or {}).get("unschedulable") for n in nodes)
    assert not any(n["metadata"]["labels"].get("gpu-stack/upgrade-state") == "upgrade-required" for n in nodes)


def rolled(fleet: Fleet, *daemonsets: str) -> Callable[[], bool]:
    return lambda: all(fleet.upgraded(d, "rev2") for d in daemonsets) and fleet.settled()


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
def test_two_driver_daemonsets_roll_within_one_budget_under_faults_and_skewed_clocks(load_fixture, paced_config, seed):
    fleet = fleet_of(load_fixture, version3(paced_config, 2), seed=seed)
    struck = chaos(fleet)
    fleet.roll_drivers({A100: ("aaaa0002", "rev2"), H100: ("bbbb0002", "rev2")})
    run(fleet, rolled(fleet, A100, H100))
    assert_held(fleet)
    assert fleet.peak == 2, "the budget is used, not only respected"
    assert min(v for k, v in struck.items() if k != "coordinator-restarted") > 0, struck


def test_forty_nodes_roll_within_a_percentage_under_faults(load_fixture, paced_config):
    fleet = fleet_of(load_fixture, version3(paced_config, "10%"), seed=4, per_pool=20)
    struck = chaos(fleet, every=5.0)
    fleet.roll_drivers({A100: ("aaaa0002", "rev2"), H100: ("bbbb0002", "rev2")})
    run(fleet, rolled(fleet, A100, H100))
    assert_held(fleet)
    assert fleet.peak == 4 and struck["coordinator-restarted"] > 0
    # The count a percentage resolves against is the coordinator's, from its watch: no agent lists nodes (before
    # 0.8.0 every waiting node re-listed the driver nodes on every poll once the stored count was ten minutes old).
    agents = [f"agent/{n}" for n in fleet.agents]
    assert "list_node" not in fleet.server.by_method(agents)


def test_a_budget_lowered_mid_rollout_admits_nobody_until_the_holders_are_below_it(load_fixture, paced_config):
    fleet = fleet_of(load_fixture, version3(paced_config, 3), seed=11)
    fleet.roll_drivers({A100: ("aaaa0002", "rev2"), H100: ("bbbb0002", "rev2")})
    fleet.hub.run(DAY, done=lambda: len(fleet.holders()) == 3)
    fleet.lower_budget(1)
    run(fleet, rolled(fleet, A100, H100))
    assert_held(fleet)


def test_a_mig_relayout_and_a_driver_upgrade_share_the_budget(load_fixture, paced_config):
    config = version3(paced_config, 1)
    fleet = fleet_of(load_fixture, config, seed=5, jobs=0.0)
    document = fleet.feed.document
    next(p for p in document["pools"] if p["name"] == "h100")["labels"]["nvidia.com/mig.config"] = "all-1g.10gb"
    fleet.publish(document)
    fleet.roll_drivers({A100: ("aaaa0002", "rev2")})
    run(fleet, lambda: fleet.upgraded(A100, "rev2") and fleet.settled() and all(
        fleet.node(n)["metadata"]["labels"].get("nvidia.com/mig.config") == "all-1g.10gb"
        for n in fleet.agents if n.startswith("h100")))
    assert_held(fleet)
    assert fleet.peak == 1


def test_a_driver_that_never_gets_ready_stays_cordoned_and_halts_the_rollout(load_fixture, paced_config):
    fleet = fleet_of(load_fixture, version3(paced_config, 1, nodeReadyTimeoutSeconds=120), seed=7, jobs=0.0,
                     never_ready={f"a100-{i:04d}" for i in range(5)})
    fleet.roll_drivers({A100: ("aaaa0002", "rev2")})
    budget = lambda: fleet.server.get("configmaps", "gpu-operator", "gpu-stack-upgrade-budget") or {}  # noqa: E731
    run(fleet, lambda: any("failed" in v for v in (budget().get("data") or {}).values()), hours=2)
    failed = next(n for n, v in budget()["data"].items() if "failed" in v)
    fleet.hub.run(fleet.hub.now + 3600)
    assert fleet.holders() == {failed}, "nobody else started"
    node = fleet.node(failed)
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["labels"]["gpu-stack/upgrade-state"] == "upgrade-failed"
    assert any(r["event"] == "upgrade-failed" for r in fleet.logs[f"agent/{failed}"])


def test_a_paused_upgrade_starts_no_node(load_fixture, paced_config):
    fleet = fleet_of(load_fixture, version3(paced_config, 2, paused=True), seed=3)
    fleet.roll_drivers({A100: ("aaaa0002", "rev2")})
    fleet.hub.run(fleet.hub.now + 3600)
    assert fleet.holders() == set() and fleet.out_of_service() == set() and fleet.server.evictions == []
    document = fleet.feed.document
    document["removal"]["paused"] = False
    fleet.publish(document)
    run(fleet, rolled(fleet, A100))
    assert_held(fleet)


@pytest.mark.parametrize("budget", [1, "10%"])
def test_a_node_deleted_while_it_holds_a_slot_frees_it_at_once_whatever_the_budget(load_fixture, paced_config,
                                                                                  budget):
    fleet = fleet_of(load_fixture, version3(paced_config, budget), seed=9, jobs=1.0)
    fleet.roll_drivers({A100: ("aaaa0002", "rev2")})
    fleet.hub.run(DAY, done=lambda: len(fleet.holders()) == 1 and fleet.out_of_service())
    (gone,) = fleet.holders()
    fleet.delete_node(gone)
    # Before 0.8.0 an integer budget never freed it: the whole rollout stopped until someone edited the budget.
    fleet.hub.run(fleet.hub.now + 30, done=lambda: gone not in fleet.holders())
    assert gone not in fleet.holders()
    run(fleet, rolled(fleet, A100))
    assert_held(fleet)


def test_a_grant_whose_answer_was_lost_and_whose_change_was_reverted_leaves_no_slot(load_fixture, paced_config):
    config = version3(paced_config, 1)
    fleet = fleet_of(load_fixture, config, seed=13, jobs=0.0)
    fleet.server.lose_response("patch_namespaced_config_map", "coordinator")
    fleet.server.lose_response("create_namespaced_config_map", "coordinator")
    document = fleet.feed.document
    document["pools"][0]["deployLabels"].remove("nvidia.com/gpu.deploy.dcgm-exporter")
    fleet.publish(document)
    fleet.hub.run(DAY, done=lambda: bool(fleet.holders()))
    fleet.publish(config)  # reverted
    run(fleet, lambda: fleet.settled() and all(
        fleet.node(n)["metadata"]["labels"].get("nvidia.com/gpu.deploy.dcgm-exporter") == "true"
        for n in fleet.agents if n.startswith("a100")), hours=2)
    assert_held(fleet)


def test_failed_writes_never_delay_a_pending_change_for_long(load_fixture, paced_config):
    config = version3(paced_config, 2)
    fleet = fleet_of(load_fixture, config, seed=17, jobs=0.0)
    for name in fleet.agents:
        fleet.server.fail("patch_node", ApiException(status=500, reason="etcd timeout"), f"agent/{name}")
    document = fleet.feed.document
    document["pools"][0]["deployLabels"].remove("nvidia.com/gpu.deploy.dcgm-exporter")
    fleet.publish(document)
    # A minute for the file to reach every node, the backoff's first pause, and the change itself.
    run(fleet, lambda: all(
        "nvidia.com/gpu.deploy.dcgm-exporter" not in fleet.node(n)["metadata"]["labels"]
        for n in fleet.agents if n.startswith("a100")) and fleet.settled(), hours=0.5)
    assert_held(fleet)


def test_a_handover_and_a_relayout_under_gpu_jobs_wait_for_them_without_eviction(load_fixture, paced_config):
    config = version3(paced_config, 2, gpuPodEviction=False)
    fleet = fleet_of(load_fixture, config, seed=19, jobs=1.0)
    chaos(fleet, coordinator_restarts=False)
    renamed = "nvidia-driver-daemonset-a100-v2"
    fleet.put_daemonset(renamed, "cccc0001", "v2rev1", observed_after=0)
    document = fleet.feed.document
    document["pools"][0]["name"] = "a100-v2"
    document["pools"][0]["labels"]["gpu-stack/driver"] = renamed
    document["drivers"][renamed] = "cccc0001"
    next(p for p in document["pools"] if p["name"] == "h100")["labels"]["nvidia.com/mig.config"] = "all-1g.10gb"
    fleet.publish(document)
    # The jobs end one by one over the next hours.
    for i, name in enumerate(sorted(fleet.agents)):
        fleet.hub.at(fleet.hub.now + 600 * (i + 1), lambda name=name: fleet.finish_job(name))
    run(fleet, lambda: fleet.settled() and all(
        fleet.node(n)["metadata"]["labels"].get("gpu-stack/driver") == renamed
        for n in fleet.agents if n.startswith("a100")) and all(
        fleet.node(n)["metadata"]["labels"].get("nvidia.com/mig.config.state") == "success"
        and fleet.node(n)["metadata"]["labels"].get("nvidia.com/mig.config") == "all-1g.10gb"
        for n in fleet.agents if n.startswith("h100")))
    assert fleet.server.evictions == []
    assert_held(fleet)


def test_slots_go_first_come_first_served_not_by_name(load_fixture, paced_config):
    fleet = fleet_of(load_fixture, version3(paced_config, 1), seed=23, jobs=0.0)
    fleet.roll_drivers({A100: ("aaaa0002", "rev2"), H100: ("bbbb0002", "rev2")})
    run(fleet, rolled(fleet, A100, H100))
    order = [r["node"] for r in fleet.logs["coordinator"] if r.get("event") == "slot-granted"]
    assert sorted(order) == sorted(fleet.agents)
    assert order != sorted(order), "the nodes that came to need a slot together go in no order of their names"
    assert_held(fleet)


VGPU = "nvidia-vgpu-manager-daemonset"
VGPU_DEPLOY = "nvidia.com/gpu.deploy.vgpu-manager"


def vgpu_fleet(load_fixture: Any, paced_config: dict[str, Any], *, seed: int, **removal: Any) -> Fleet:
    """Four vGPU nodes on the vGPU manager (the pool's driver-like DaemonSet, node-pools config version 4), each
    running a VM that live-migrates and one that does not; two a100 nodes beside them."""
    config = version3(paced_config, 1, **removal)
    config["version"] = 4
    a100 = next(p for p in config["pools"] if p["name"] == "a100")
    del a100["labels"]["gpu-stack/driver"]
    a100["driverImages"] = [{"daemonSet": A100, "nodeLabels": {}}]
    vgpu = {"name": "vgpu-a10", "gpuModel": "A10", "nodeSelector": {"gpu-stack.io/workload": "vm-vgpu"},
            "labels": {"nvidia.com/gpu.workload.config": "vm-vgpu", "nvidia.com/vgpu.config": "A10-12Q"},
            "deployLabels": ["nvidia.com/gpu.deploy.sandbox-device-plugin", "nvidia.com/gpu.deploy.sandbox-validator",
                             VGPU_DEPLOY, "nvidia.com/gpu.deploy.vgpu-device-manager"],
            "driverImages": [{"daemonSet": VGPU, "nodeLabels": {}}]}
    # First: the vGPU nodes carry the a100 nodes' instance type too, and the first pool that matches wins.
    config["pools"] = [vgpu, a100]
    config["drivers"] = {A100: "aaaa0001", VGPU: "dddd0001"}
    base = load_fixture("node-a100-labelled")["metadata"]["labels"]
    nodes = labelled_nodes(config, base, {"vgpu-a10": 4, "a100": 2})
    fleet = Fleet(config, nodes, drivers={}, seed=seed)
    fleet.put_daemonset(A100, "aaaa0001", "rev1", observed_after=0)
    fleet.put_daemonset(VGPU, "dddd0001", "rev1", observed_after=0, component="nvidia-vgpu-host-manager",
                        deploy_label=VGPU_DEPLOY)
    fleet.settle_driver_pods()
    for i, node in enumerate(sorted(n for n in nodes if n.startswith("vgpu"))):
        fleet.add_vm(node, f"web-{i}", migratable=True)
        fleet.add_vm(node, f"db-{i}", migratable=False)
    fleet.start()
    fleet.hub.run(fleet.hub.now + 120)
    return fleet


def test_a_vgpu_manager_rolls_within_the_budget_live_migrating_the_vms_that_can(load_fixture, paced_config):
    fleet = vgpu_fleet(load_fixture, paced_config, seed=29)
    chaos(fleet, coordinator_restarts=False)
    fleet.roll_drivers({VGPU: ("dddd0002", "rev2")})
    run(fleet, rolled(fleet, VGPU))
    assert_held(fleet)
    assert fleet.peak == 1
    running = fleet.vms()
    # Every migratable VM still runs (moved, perhaps more than once, never shut down); those that cannot migrate
    # were evicted as GPU jobs are (gpuPodEviction), each once.
    assert sorted(v for v in running if v.startswith("web")) == [f"web-{i}" for i in range(4)]
    assert not any(v.startswith("db") for v in running)
    assert len([e for e in fleet.server.evictions if "db-" in e]) == 4
    assert {vm for vm, _, _ in fleet.migrations} == {f"web-{i}" for i in range(4)}


def test_without_eviction_a_vgpu_manager_waits_for_the_vms_that_cannot_migrate(load_fixture, paced_config):
    fleet = vgpu_fleet(load_fixture, paced_config, seed=31, gpuPodEviction=False)
    fleet.roll_drivers({VGPU: ("dddd0002", "rev2")})
    fleet.hub.run(fleet.hub.now + 3600)
    assert fleet.upgraded(VGPU, "rev2") is False and fleet.server.evictions == []
    assert len(fleet.holders()) == 1, "one node holds its slot, cordoned, waiting for its VM"
    for vm, node in fleet.vms().items():  # the VMs' owners shut them down, one by one
        fleet.hub.at(fleet.hub.now + 60, lambda vm=vm: fleet.server.terminate_pod(
            "vms", next(p["metadata"]["name"] for p in fleet.pods_on(fleet.vms().get(vm, node))
                        if p["metadata"]["labels"].get("vm.kubevirt.io/name") == vm)))
    run(fleet, rolled(fleet, VGPU))
    assert_held(fleet)
