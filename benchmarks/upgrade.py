"""Upgrade benchmark: how long a driver change takes to cross a fleet, and how much of it is down at once.

A simulated fleet of 1,000 GPU nodes in 20 pools of 50, a GPU job on about 90 % of them (seeded), gets a new
driver version. Two rollouts are computed on that fleet with the same disruption budget:

- gpu-stack: the stack is rendered by the real program (`gpustack.mockrun`) with three waves (one canary pool,
  five early pools, the other fourteen). The rollout is read back from the render, not from the config: each
  driver DaemonSet's pools (its `gpu-stack/pool` node affinity), maxUnavailable and readiness probe, and its
  wave as the number of wave gate Jobs it waits for in the dependency graph. Within a wave, the DaemonSet
  controller keeps at most maxUnavailable (rounded up, as for DaemonSets) nodes without an available driver
  pod and starts the next node as soon as one becomes available; a driver pod whose readiness probe checks the
  validator's files becomes available only when its node validated. A wave ends when its gate sees every node
  validated (first poll after the last validator is Ready), then Pulumi updates the next wave's DaemonSets.
- the operator: its upgrade controller on the same nodes (fact sheet §5.2), maxParallelUpgrades and
  maxUnavailable both set to the budget. A reconcile pass moves each node one state along upgrade-required →
  cordon-required → wait-for-jobs-required → pod-deletion-required → pod-restart-required →
  validation-required → uncordon-required → upgrade-done, from a snapshot taken at the start of the pass.
  Passes run on the events the controller watches (a node's upgrade-state label changing, which every
  transition and the end of a GPU-pod deletion do; GO:controllers/upgrade_controller.go) and otherwise every
  2 minutes (its requeue); the driver pod and the validator becoming Ready are not watched, so the next pass
  notices them.

Per-node step times (`StepTimes`) come from the fact sheet's timelines (Appendix E, §2.3, §3, §5.3) where it
gives them: driver startup probe 60 s initial delay and 10 s period, validator polling every 5 s, toolkit
start-up sleep 5 s, k8s-driver-manager waiting for the operand pods to exit, an evicted job's termination
grace period (Kubernetes' default 30 s). The time to build and load a driver is not in the fact sheet; it is
the one assumed figure (240 s for a managed driver) and the same for both rollouts.

"Disrupted" means the node cannot run GPU work: for gpu-stack from the eviction in the new driver pod's
k8s-driver-manager until its validator is Ready; for the operator from cordon until uncordon. The gpu-stack
rollout uses the largest maxUnavailable whose measured max_disrupted does not exceed the operator's, so
`makespan_ratio` compares equal max_disrupted (without the readiness probe a validating node's tail would
come on top of maxUnavailable, and that search is what keeps the comparison fair). Output:

    fleet nodes=N pools=P gpu_jobs=J budget=B
    gpu-stack: waves=W max_unavailable=U max_disrupted=D jobs_evicted=E makespan_min=M
    operator: waves=1 max_disrupted=D jobs_evicted=E makespan_min=M
    makespan_ratio=<gpu-stack/operator>

Run: `.venv/bin/python benchmarks/upgrade.py`. It reports and does not assert.
"""

from __future__ import annotations

import heapq
import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROJECT_DIR = Path(__file__).resolve().parent.parent
if str(PROJECT_DIR) not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR))

from components.kit import naming  # noqa: E402
from components.config import stack_file_config  # noqa: E402
from gpustack.mockrun import Recording, run_program  # noqa: E402
from gpustack.render import kubernetes_object  # noqa: E402

NODES_PER_POOL = 50
POOLS = 20
JOB_SHARE = 0.9
BUDGET = 25
SEED = 7
WAVES = (("canary", range(0, 1)), ("early", range(1, 6)), ("fleet", range(6, POOLS)))
DRIVER_PREFIX = "nvidia-driver-daemonset"
GATE_PREFIX = naming.GATE_PREFIX
POOL_LABEL = "gpu-stack/pool"
JOB = "kubernetes:batch/v1:Job"


@dataclass(frozen=True)
class StepTimes:
    job_grace_s: float = 30.0  # terminationGracePeriodSeconds default of an evicted GPU job
    old_pod_stop_s: float = 10.0  # the old driver pod's preStop and exit
    operand_stop_s: float = 30.0  # k8s-driver-manager waits for operand pods to exit (§5.3 step 5)
    unload_s: float = 10.0  # module unload and rootfs unmount (§5.3 step 9)
    install_s: float = 240.0  # assumption: build and load a managed driver; not in the fact sheet
    probe_delay_s: float = 60.0  # startup probe initialDelaySeconds, managed driver (§2.3)
    probe_period_s: float = 10.0
    # toolkit restart (5 s sleep) and install, then the validator's driver, toolkit, cuda and plugin checks,
    # each polled every 5 s (§2.4, §3.2)
    validation_s: float = 60.0
    gate_start_s: float = 15.0  # the gate Job's pod is scheduled and starts
    gate_poll_s: float = 10.0  # POLL_SECONDS of the wave gate
    pulumi_step_s: float = 5.0  # Pulumi registers the next wave's DaemonSets once the gate Job completed
    operator_pass_s: float = 120.0  # upgrade controller requeue interval (§5.2)
    operator_event_s: float = 1.0  # a node label change reaches the controller and starts the next pass


STEPS = StepTimes()


@dataclass(frozen=True)
class Node:
    name: str
    pool: str
    has_job: bool


def fleet(seed: int = SEED) -> list[Node]:
    rng = random.Random(seed)
    return [
        Node(f"gpu-{p:02d}-{i:03d}", f"pool-{p:02d}", rng.random() < JOB_SHARE)
        for p in range(POOLS)
        for i in range(NODES_PER_POOL)
    ]


def stack_config(max_unavailable: int) -> dict[str, str]:
    """Each wave's pools pin one driver DaemonSet name, so a wave rolls within one maxUnavailable budget (a
    DaemonSet per pool would give every pool a budget of its own)."""
    wave_of = {p: name for name, members in WAVES for p in members}
    pools = [
        {
            "name": f"pool-{p:02d}",
            "nodeSelector": {"bench.gpu-stack/pool": f"p{p:02d}"},
            "gpuModel": "H100-80GB",
            "os": "ubuntu22.04",
            "driver": {"daemonSetName": f"nvidia-driver-daemonset-{wave_of[p]}"},
        }
        for p in range(POOLS)
    ]
    waves = [{"name": name, "pools": [f"pool-{p:02d}" for p in members]} for name, members in WAVES]
    return stack_file_config(
        {
            "config": {
                "gpu-stack:cluster": {"name": "bench", "context": "bench", "kubernetesVersions": ["1.33"]},
                "gpu-stack:nodeAgent": {"image": "harbor.platform.internal/gpu-stack/node-agent:0.4.0"},
                "gpu-stack:upgrade": {"maxUnavailable": max_unavailable, "waves": waves},
                "gpu-stack:nodePools": pools,
            }
        }
    )


@dataclass(frozen=True)
class RenderedDaemonSet:
    name: str
    pools: frozenset[str]
    max_unavailable: Any
    wave: int
    ready_when_validated: bool


def rendered_rollout(recording: Recording) -> list[RenderedDaemonSet]:
    """Driver DaemonSets with their pools, budget and wave rank (the chain of gate Jobs they wait for), from the
    render."""
    by_urn = recording.by_urn()

    def waits_for(urn: str) -> set[str]:
        seen: set[str] = set()
        todo = list(by_urn[urn].dependencies)
        while todo:
            current = todo.pop()
            if current not in seen:
                seen.add(current)
                todo += by_urn[current].dependencies
        return seen

    def is_gate(urn: str) -> bool:
        return by_urn[urn].name.startswith(GATE_PREFIX) and by_urn[urn].type == JOB

    depths: dict[str, int] = {}

    def depth(gate: str) -> int:
        """Gates come one per pool; a wave's rank is how many gates stand in a chain before it."""
        if gate not in depths:
            depths[gate] = 1 + max((depth(g) for g in waits_for(gate) if is_gate(g)), default=0)
        return depths[gate]

    rendered = []
    for registration in recording.registrations:
        if not registration.is_kubernetes_object or registration.inputs.get("kind") != "DaemonSet":
            continue
        obj = kubernetes_object(registration)
        if not obj["metadata"]["name"].startswith(DRIVER_PREFIX):
            continue
        term = obj["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        # the second term names the DaemonSet's pools (the first, the nodes the agent assigned to it)
        requirement = next(e for e in term["nodeSelectorTerms"][1]["matchExpressions"] if e["key"] == POOL_LABEL)
        driver = next(c for c in obj["spec"]["template"]["spec"]["containers"] if c["name"] == "nvidia-driver-ctr")
        probe = " ".join((driver.get("readinessProbe") or {}).get("exec", {}).get("command", []))
        gates = {u for u in waits_for(registration.urn) if is_gate(u)}
        rendered.append(
            RenderedDaemonSet(
                obj["metadata"]["name"],
                frozenset(requirement["values"]),
                obj["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"],
                max((depth(g) for g in gates), default=0),
                "/run/nvidia/validations/" in probe,
            )
        )
    return rendered


def scaled(value: Any, total: int) -> int:
    """maxUnavailable as the DaemonSet controller resolves it: percentages rounded up, at least 1."""
    if isinstance(value, str) and value.endswith("%"):
        return max(1, math.ceil(total * int(value[:-1]) / 100))
    return max(1, int(value))


@dataclass
class Outcome:
    waves: int
    max_disrupted: int
    jobs_evicted: int
    makespan_s: float


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    current = peak = 0
    for _, delta in events:
        current += delta
        peak = max(peak, current)
    return peak


def driver_ready_after(start: float, init_s: float, steps: StepTimes) -> float:
    """When the new driver pod, started at `start` with `init_s` of init container work, passes its startup probe."""
    container_start = start + init_s
    probes = max(0, math.ceil((steps.install_s - steps.probe_delay_s) / steps.probe_period_s))
    return container_start + steps.probe_delay_s + probes * steps.probe_period_s


def simulate_gpu_stack(nodes: list[Node], rollout: list[RenderedDaemonSet], steps: StepTimes = STEPS) -> Outcome:
    by_pool: dict[str, list[Node]] = {}
    for node in nodes:
        by_pool.setdefault(node.pool, []).append(node)
    clock = 0.0
    disrupted: list[tuple[float, float]] = []
    evicted = 0
    waves = sorted({d.wave for d in rollout})
    for wave in waves:
        wave_start = clock
        wave_validated = wave_start
        for daemonset in (d for d in rollout if d.wave == wave):
            members = [n for pool in sorted(daemonset.pools) for n in by_pool.get(pool, [])]
            slots = scaled(daemonset.max_unavailable, len(members))
            # (time a slot frees, slot id): the DaemonSet controller starts the next node then
            free_at = [(wave_start, i) for i in range(slots)]
            heapq.heapify(free_at)
            for node in members:
                start, slot = heapq.heappop(free_at)
                init_s = steps.old_pod_stop_s + steps.operand_stop_s + (steps.job_grace_s if node.has_job else 0) + steps.unload_s
                ready = driver_ready_after(start, init_s, steps)
                validated = ready + steps.validation_s
                evicted += node.has_job
                disrupted.append((start, validated))
                wave_validated = max(wave_validated, validated)
                if daemonset.ready_when_validated:
                    available = ready + math.ceil(steps.validation_s / steps.probe_period_s) * steps.probe_period_s
                else:
                    available = ready
                heapq.heappush(free_at, (available, slot))
        if wave == waves[-1]:
            clock = wave_validated
        else:
            first_poll = wave_start + steps.gate_start_s
            polls = max(0, math.ceil((wave_validated - first_poll) / steps.gate_poll_s))
            clock = first_poll + polls * steps.gate_poll_s + steps.pulumi_step_s
    return Outcome(len(waves), max_overlap(disrupted), evicted, clock)


def simulate_operator(nodes: list[Node], budget: int, steps: StepTimes = STEPS) -> Outcome:
    """The upgrade controller's state machine (fact sheet §5.2), one transition per node per reconcile pass.

    A pass starts from a snapshot of the node states. Passes run when something the controller watches changes
    (a node's upgrade-state label: every transition, and the end of an asynchronous GPU-pod deletion, which
    writes that label) and otherwise every 2 minutes (its requeue). The driver pod becoming Ready and the
    validator becoming Ready are not watched: the next pass, whatever triggered it, notices them."""
    state = {n.name: "upgrade-required" for n in nodes}
    ready_at: dict[str, float] = {}  # when a started step (pod deletion, driver restart, validation) is done
    cordoned_at: dict[str, float] = {}
    disrupted: list[tuple[float, float]] = []
    by_name = {n.name: n for n in nodes}
    evicted = 0
    passes = [0.0]
    now = 0.0
    while any(s != "upgrade-done" for s in state.values()):
        now = heapq.heappop(passes)
        while passes and passes[0] <= now:
            heapq.heappop(passes)
        snapshot = dict(state)
        # maxParallelUpgrades counts nodes in progress, maxUnavailable the cordoned ones (and cordon-required):
        # here both are the nodes between upgrade-required and upgrade-done, and both limits are the budget.
        in_progress = sum(1 for s in snapshot.values() if s not in ("upgrade-required", "upgrade-done"))
        slots = max(0, budget - in_progress)
        changed = False
        for name, current in snapshot.items():
            node = by_name[name]
            before = state[name]
            if current == "upgrade-required":
                if slots > 0:
                    slots -= 1
                    state[name] = "cordon-required"
            elif current == "cordon-required":
                cordoned_at[name] = now
                state[name] = "wait-for-jobs-required"
            elif current == "wait-for-jobs-required":
                state[name] = "pod-deletion-required"
            elif current == "pod-deletion-required":
                if name not in ready_at:
                    evicted += node.has_job
                    ready_at[name] = now + (steps.job_grace_s if node.has_job else 0.0)
                    # the eviction runs in the background and writes the next state label when it is done
                    heapq.heappush(passes, ready_at[name])
                if ready_at[name] <= now:
                    del ready_at[name]
                    state[name] = "pod-restart-required"
            elif current == "pod-restart-required":
                if name not in ready_at:
                    # the driver manager only pauses operands and unloads: eviction is superseded (§5.3)
                    init_s = steps.old_pod_stop_s + steps.operand_stop_s + steps.unload_s
                    ready_at[name] = driver_ready_after(now, init_s, steps)
                elif ready_at[name] <= now:
                    ready_at[name] = now + steps.validation_s
                    state[name] = "validation-required"
            elif current == "validation-required":
                if ready_at[name] <= now:
                    del ready_at[name]
                    state[name] = "uncordon-required"
            elif current == "uncordon-required":
                disrupted.append((cordoned_at[name], now))
                state[name] = "upgrade-done"
            changed |= state[name] != before
        if changed:
            heapq.heappush(passes, now + steps.operator_event_s)
        heapq.heappush(passes, now + steps.operator_pass_s)
    return Outcome(1, max_overlap(disrupted), evicted, now)


def main() -> int:
    nodes = fleet()
    operator = simulate_operator(nodes, BUDGET)
    chosen = None
    for max_unavailable in range(BUDGET, 0, -1):
        rollout = rendered_rollout(run_program("bench-upgrade", stack_config(max_unavailable)))
        ours = simulate_gpu_stack(nodes, rollout)
        if ours.max_disrupted <= operator.max_disrupted:
            chosen = (max_unavailable, ours)
            break
    assert chosen is not None
    max_unavailable, ours = chosen
    print(f"fleet nodes={len(nodes)} pools={POOLS} gpu_jobs={sum(n.has_job for n in nodes)} budget={BUDGET}")
    print(
        f"gpu-stack: waves={ours.waves} max_unavailable={max_unavailable} max_disrupted={ours.max_disrupted} "
        f"jobs_evicted={ours.jobs_evicted} makespan_min={ours.makespan_s / 60:.1f}"
    )
    print(
        f"operator: waves={operator.waves} max_disrupted={operator.max_disrupted} "
        f"jobs_evicted={operator.jobs_evicted} makespan_min={operator.makespan_s / 60:.1f}"
    )
    print(f"makespan_ratio={ours.makespan_s / operator.makespan_s:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
