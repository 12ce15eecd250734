"""Several agents at once against one fake API server (fleet.Fleet): the fleet's one budget holds under faults.

Each run is seeded and bounded in simulated time. The faults: writes refused with 409 or 500, writes applied with
the answer lost, agents restarted, wall clocks skewed by up to ten minutes either way, the budget lowered mid-rollout,
two driver DaemonSets and a MIG relayout in the same run. The assertions are about the cluster, not the agents'
beliefs: no more nodes out of service than the budget, none out of service without a slot, every node finishes,
no job evicted twice, no slot left behind."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from fleet import WRITES, Fleet

A100, H100 = "nvidia-driver-daemonset-a100", "nvidia-driver-daemonset-h100"
STEP_SECONDS = 10.0


def version3(paced_config: dict[str, Any], max_unavailable: Any = 2, **removal: Any) -> dict[str, Any]:
    config = copy.deepcopy(paced_config)
    config["version"] = 3
    config["removal"].update({"maxUnavailable": max_unavailable, "maxParallelUpgrades": 0, "paused": False,
                              "driverUpgrade": "rolling", "gpuPodEviction": True, "drainPodSelector": "",
                              "drainTimeoutSeconds": 300, "nodeReadyTimeoutSeconds": 600, **removal})
    config["drivers"] = {A100: "aaaa0001", H100: "bbbb0001"}
    return config


def fleet_of(load_fixture: Any, config: dict[str, Any], *, seed: int, **kwargs: Any) -> Fleet:
    fleet = Fleet(load_fixture("node-a100-labelled"), config, {"a100": 5, "h100": 5}, seed=seed, **kwargs)
    fleet.cluster.put_daemonset(A100, "aaaa0001", "rev1")
    fleet.cluster.put_daemonset(H100, "bbbb0001", "rev1")
    return fleet


def run(fleet: Fleet, *, until: Any, steps: int = 400, faults: bool = True, each_step: Any = None) -> int:
    """Passes of every agent in a random order, every STEP_SECONDS, with faults; returns the steps taken."""
    for step in range(steps):
        if each_step is not None:
            each_step(step)
        names = sorted(fleet.agents)
        fleet.rng.shuffle(names)
        for name in names:
            if faults:
                roll = fleet.rng.random()
                if roll < 0.02:
                    fleet.start_agent(name)
                elif roll < 0.06:
                    fleet.cluster.fail(fleet.rng.choice(WRITES), ApiException(status=fleet.rng.choice((409, 500))))
                elif roll < 0.09:
                    fleet.cluster.lose_response(fleet.rng.choice(WRITES))
            fleet.pass_of(name)
        fleet.tick(STEP_SECONDS)
        if until():
            return step
    raise AssertionError(f"not finished after {steps} steps: holders {sorted(fleet.cluster.holders())}, "
                         f"down {sorted(fleet.out_of_service())}")


def idle(fleet: Fleet, steps: int) -> None:
    """Passes of every agent without faults, whatever happens."""
    for _ in range(steps):
        for name in sorted(fleet.agents):
            fleet.pass_of(name)
        fleet.tick(STEP_SECONDS)


def settled(fleet: Fleet) -> bool:
    return not fleet.cluster.holders() and not fleet.out_of_service()


def assert_held(fleet: Fleet) -> None:
    assert fleet.over_budget == [], f"more nodes out of service than the budget: {fleet.over_budget[:5]}"
    assert fleet.outside_slot == [], f"out of service without a slot: {fleet.outside_slot[:5]}"
    assert fleet.evicted_twice() == []
    assert not any((n.get("spec") or {}).get("unschedulable") for n in fleet.cluster.nodes.values())
    assert not any(n["metadata"]["labels"].get("gpu-stack/upgrade-state") == "upgrade-required"
                   for n in fleet.cluster.nodes.values())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_two_driver_daemonsets_roll_within_one_budget_under_faults_and_skewed_clocks(load_fixture, paced_config, seed):
    fleet = fleet_of(load_fixture, version3(paced_config, 2), seed=seed)
    idle(fleet, 2)
    fleet.roll_driver(A100, "aaaa0002", "rev2")
    fleet.roll_driver(H100, "bbbb0002", "rev2")
    run(fleet, until=lambda: fleet.upgraded(A100) and fleet.upgraded(H100) and settled(fleet))
    assert_held(fleet)
    assert fleet.peak == 2, "the budget is used, not only respected"


def test_a_budget_lowered_mid_rollout_admits_nobody_until_the_holders_are_below_it(load_fixture, paced_config):
    fleet = fleet_of(load_fixture, version3(paced_config, 3), seed=11)
    fleet.roll_driver(A100, "aaaa0002", "rev2")
    fleet.roll_driver(H100, "bbbb0002", "rev2")

    def lower(step: int) -> None:
        if fleet.config["removal"]["maxUnavailable"] == 3 and len(fleet.cluster.holders()) == 3:
            fleet.lower_budget(1)

    run(fleet, until=lambda: fleet.upgraded(A100) and fleet.upgraded(H100) and settled(fleet), each_step=lower)
    assert fleet.config["removal"]["maxUnavailable"] == 1, "the rollout reached three nodes in flight"
    assert_held(fleet)


def test_a_mig_relayout_and_a_driver_upgrade_share_the_budget(load_fixture, paced_config):
    config = version3(paced_config, 1)
    fleet = fleet_of(load_fixture, config, seed=5, jobs=0.0)
    fleet.roll_driver(A100, "aaaa0002", "rev2")
    h100 = next(p for p in fleet.config["pools"] if p["name"] == "h100")
    h100["labels"]["nvidia.com/mig.config"] = "all-1g.10gb"
    run(fleet, until=lambda: fleet.upgraded(A100) and settled(fleet) and all(
        n["metadata"]["labels"].get("nvidia.com/mig.config") == "all-1g.10gb"
        for name, n in fleet.cluster.nodes.items() if name.startswith("h100")))
    assert_held(fleet)
    assert fleet.peak == 1


def test_a_driver_that_never_gets_ready_stays_cordoned_and_halts_the_rollout(load_fixture, paced_config):
    fleet = fleet_of(load_fixture, version3(paced_config, 1, nodeReadyTimeoutSeconds=120), seed=7, jobs=0.0,
                     never_ready=frozenset({"a100-000", "a100-001", "a100-002", "a100-003", "a100-004"}))
    fleet.roll_driver(A100, "aaaa0002", "rev2")
    steps = run(fleet, until=lambda: any("failed" in str(v) for v in
                                         ((fleet.cluster.budget() or {}).get("data") or {}).values()), faults=False)
    failed = next(n for n, v in fleet.cluster.budget()["data"].items() if "failed" in v)
    idle(fleet, 30)
    assert fleet.cluster.holders() == {failed}, "nobody else started"
    node = fleet.cluster.nodes[failed]
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["labels"]["gpu-stack/upgrade-state"] == "upgrade-failed"
    assert any(r["event"] == "upgrade-failed" for r in fleet.logs[failed].records)
    waiting = [r for name in fleet.logs for r in fleet.logs[name].records if r.get("why") == "halted"]
    assert waiting and failed in waiting[-1]["failed"]
    assert steps < 400


def test_a_paused_upgrade_starts_no_node(load_fixture, paced_config):
    fleet = fleet_of(load_fixture, version3(paced_config, 2, paused=True), seed=3)
    fleet.roll_driver(A100, "aaaa0002", "rev2")
    idle(fleet, 20)
    assert fleet.cluster.holders() == set() and fleet.out_of_service() == set()
    assert fleet.cluster.evicted == []
    fleet.config["removal"]["paused"] = False
    run(fleet, until=lambda: fleet.upgraded(A100) and settled(fleet), faults=False)
    assert_held(fleet)


def test_a_deleted_node_holding_a_slot_frees_it_at_the_next_count(load_fixture, paced_config):
    fleet = fleet_of(load_fixture, version3(paced_config, "10%"), seed=9, jobs=0.0)
    fleet.roll_driver(A100, "aaaa0002", "rev2")
    run(fleet, until=lambda: len(fleet.cluster.holders()) == 1, faults=False)
    (gone,) = fleet.cluster.holders()
    del fleet.cluster.nodes[gone]
    del fleet.agents[gone]
    fleet.cluster.pods = [p for p in fleet.cluster.pods if p["spec"]["nodeName"] != gone]
    fleet.time += 601  # the stored count is older than COUNT_TTL_SECONDS on every agent's own clock
    run(fleet, until=lambda: fleet.upgraded(A100) and settled(fleet), faults=False)
    assert gone not in fleet.cluster.holders()
