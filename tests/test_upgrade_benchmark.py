"""The upgrade benchmark's harness, on a small fleet: it reads the waves and the budget back from the render, runs
the real agents and coordinator through a whole rollout within the one budget, and the operator's model keeps its
budget too (the figures themselves are printed by benchmarks/upgrade.py)."""

from __future__ import annotations

import importlib.util
import math
import sys

from gpustack.mockrun import run_program
from stacktest import ROOT

spec = importlib.util.spec_from_file_location("upgrade_benchmark", ROOT / "benchmarks" / "upgrade.py")
bench = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = bench  # dataclasses look their module up while the module runs
spec.loader.exec_module(bench)


def test_waves_pools_and_budget_come_from_the_render():
    rendered = bench.rendered_rollout(run_program("bench-test", bench.stack_config(5, 7)))
    # every pool on its own driver DaemonSet; canary, then the next 20 % of the pools, then the rest
    assert rendered.daemonsets == 5 and rendered.strategies == {"OnDelete"}
    assert rendered.wave_of_pool == {"pool-00": 0, "pool-01": 1, "pool-02": 2, "pool-03": 2, "pool-04": 2}
    assert rendered.budget == 7 and rendered.document["drivers"]


def test_the_real_agents_roll_a_small_fleet_within_the_budget_near_the_physical_limit():
    result = bench.run_rollout(100, 5, 7)
    assert result.every_node and result.crashes == 0
    assert result.max_disrupted == 7 and result.over_budget == 0 and result.outside_slot == 0
    assert result.jobs_evicted == result.gpu_jobs
    physical = sum(math.ceil(n / 7) for n in result.wave_nodes) * bench.node_time()
    assert result.makespan_s <= 1.05 * physical
    assert result.requests_per_node_upgrade <= 30


def test_operator_model_stays_within_its_budget_and_finishes():
    outcome = bench.simulate_operator([True] * 40, 7)
    assert outcome.max_disrupted == 7 and outcome.jobs_evicted == 40
    assert outcome.makespan_s >= (40 / 7) * (bench.STEPS.install_s + bench.STEPS.validation_s)


def test_rank_correlation_of_names_and_turns():
    assert bench.spearman([0, 1, 2, 3], [0, 1, 2, 3]) == 1.0
    assert bench.spearman([0, 1, 2, 3], [3, 2, 1, 0]) == -1.0
