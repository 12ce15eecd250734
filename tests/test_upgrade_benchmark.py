"""The upgrade benchmark's model, on a small fleet: it must read the waves and the budget back from the render and
keep both rollouts within the one budget (the figures themselves are printed by benchmarks/upgrade.py)."""

from __future__ import annotations

import importlib.util
import sys

from gpustack.mockrun import run_program
from stacktest import ROOT

spec = importlib.util.spec_from_file_location("upgrade_benchmark", ROOT / "benchmarks" / "upgrade.py")
bench = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = bench  # dataclasses look their module up while the module runs
spec.loader.exec_module(bench)

FLEET = bench.fleet(200, 5)  # pools 00-04, 40 nodes each


def rollout(max_unavailable: int):
    return bench.rendered_rollout(run_program("bench-test", bench.stack_config(5, max_unavailable)))


def test_waves_pools_and_budget_come_from_the_render():
    rendered = rollout(7)
    # every pool on its own driver DaemonSet; canary, then the next 20 % of the pools, then the rest
    assert rendered.daemonsets == 5
    assert rendered.wave_of_pool == {"pool-00": 0, "pool-01": 1, "pool-02": 2, "pool-03": 2, "pool-04": 2}
    assert rendered.budget == 7


def test_gpu_stack_rollout_never_exceeds_the_budget_across_daemonsets_and_evicts_each_job_once():
    outcome, counts = bench.simulate_gpu_stack(FLEET, rollout(7))
    assert outcome.max_disrupted == 7
    assert outcome.jobs_evicted == sum(n.has_job for n in FLEET)
    assert outcome.waves == 3
    assert counts["holds"] == len(FLEET)
    # within a few percent of ceil(200 / 7) nodes' times: slots are refilled by wakes, not by slow polls
    assert outcome.makespan_s <= 1.15 * -(-200 // 7) * outcome.node_s


def test_operator_rollout_stays_within_its_budget_and_finishes():
    outcome = bench.simulate_operator(FLEET, 7)
    assert outcome.max_disrupted == 7
    assert outcome.jobs_evicted == sum(n.has_job for n in FLEET)
    assert outcome.makespan_s >= (200 / 7) * (bench.STEPS.install_s + bench.STEPS.validation_s)


def test_the_standing_request_rate_scales_with_the_agents_periods():
    rates = bench.request_rates(10_000, 1_000, 9_000, bench.node_time(True), 900, 30)
    assert rates["standing"] == rates["idle_watches"] + rates["inventory"] + rates["waiting_polls"] + rates["holder_watches"]
    assert rates["waiting_polls"] == 9_000 / 1800
