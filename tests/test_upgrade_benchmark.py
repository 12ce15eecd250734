"""The upgrade benchmark's model, on a small fleet: it must read the waves back from the render and keep both
rollouts within their disruption budget (the figures themselves are printed by benchmarks/upgrade.py)."""

from __future__ import annotations

import importlib.util
import sys

from gpustack.mockrun import run_program
from stacktest import ROOT

spec = importlib.util.spec_from_file_location("upgrade_benchmark", ROOT / "benchmarks" / "upgrade.py")
bench = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = bench  # dataclasses look their module up while the module runs
spec.loader.exec_module(bench)

FLEET = bench.fleet()[:200]  # pools 00-03, 50 nodes each


def rollout(max_unavailable: int):
    return bench.rendered_rollout(run_program("bench-test", bench.stack_config(max_unavailable)))


def test_waves_pools_and_budget_come_from_the_render():
    rendered = {d.name: d for d in rollout(7)}
    assert {name: (d.wave, len(d.pools), d.max_unavailable, d.ready_when_validated) for name, d in rendered.items()} == {
        "nvidia-driver-daemonset-canary": (0, 1, 7, True),
        "nvidia-driver-daemonset-early": (1, 5, 7, True),
        "nvidia-driver-daemonset-fleet": (2, 14, 7, True),
    }


def test_gpu_stack_rollout_never_exceeds_max_unavailable_and_evicts_each_job_once():
    outcome = bench.simulate_gpu_stack(FLEET, rollout(7))
    assert outcome.max_disrupted == 7
    assert outcome.jobs_evicted == sum(n.has_job for n in FLEET)
    assert outcome.waves == 3  # the fleet wave has no nodes here, and still goes last


def test_operator_rollout_stays_within_its_budget_and_finishes():
    outcome = bench.simulate_operator(FLEET, 7)
    assert outcome.max_disrupted == 7
    assert outcome.jobs_evicted == sum(n.has_job for n in FLEET)
    # 200 nodes, 7 at a time, each out of service for at least its driver install and validation
    assert outcome.makespan_s >= (200 / 7) * (bench.STEPS.install_s + bench.STEPS.validation_s)


def test_percentages_round_up_as_the_daemonset_controller_does():
    assert bench.scaled("10%", 55) == 6
    assert bench.scaled("1%", 10) == 1
    assert bench.scaled(3, 55) == 3
