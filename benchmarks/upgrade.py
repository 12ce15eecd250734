"""Upgrade benchmark: how long a driver change takes to cross a fleet, how much of it is out of service at once,
and what the node agents cost the API server while it does.

Two fleets get a new driver version: 1,000 GPU nodes in 20 pools and 10,000 in 50 pools, a GPU job on about 90 %
of the nodes (seeded), every pool on its own driver DaemonSet (no `daemonSetName` pin), three waves (one canary
pool, the next 20 % of the pools, the rest) and `upgrade.maxUnavailable` set to the budget. Two rollouts per fleet:

- gpu-stack, as built: the stack is rendered by the real program (`gpustack.mockrun`) and the rollout read back
  from the render: each driver DaemonSet's pools (its `gpu-stack/pool` node affinity) and update strategy (it must
  be OnDelete: the agents roll), its wave (the chain of gate Jobs it waits for), and the budget from the node-pools
  document the agents read. The agents are simulated with the constants of node_images/node-agent: a node of a
  wave whose DaemonSet changed finds out on its jittered schedule (`slots.waiting_poll_seconds`), then waits for a
  slot; it takes one when its poll finds room or when a node giving one back wakes it (one of the first
  `slots.wake_candidates` waiting nodes, at random). A holder is cordoned, its job evicted (terminationGracePeriod), its
  driver pod deleted; the new pod's k8s-driver-manager stops the operands and unloads, the driver starts (startup
  probe), the validator runs, the readiness probe passes, and the agent, watching its pods, uncordons and gives the
  slot back. A wave ends when its gate sees every node validated; then Pulumi updates the next wave's DaemonSets.
- the operator: its upgrade controller on the same nodes (fact sheet §5.2), maxParallelUpgrades and maxUnavailable
  both the budget, one state transition per node per reconcile pass, passes on the events it watches (a node's
  upgrade-state label) and otherwise every 2 minutes; the driver pod and the validator getting Ready are not
  watched, so the next pass notices them.

Step times are the fact sheet's (Appendix E, §2.3, §3, §5.3) except one assumption, the same for both: 240 s to
build and load a managed driver. "Out of service" is cordon to uncordon for both. The physical limit is
ceil(nodes / budget) times one node's time in gpu-stack's mechanism: no rollout within the budget can be faster.

API requests: the requests one node's upgrade costs are counted by running the real agent (its Pacer) through a
driver upgrade against the tests' fake API server (node_images/node-agent/tests/fleet.py); the standing load
(idle watches, the inventory loop, waiting nodes' polls, holders' pod watches) follows from the agents' periods.
Printed for each fleet, and for the load case of the issue: 10,000 nodes of which 9,000 wait and 1,000 hold slots.

Run: `.venv/bin/python benchmarks/upgrade.py`. It reports and does not assert.
"""

from __future__ import annotations

import heapq
import json
import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROJECT_DIR = Path(__file__).resolve().parent.parent
AGENT_DIR = PROJECT_DIR / "node_images" / "node-agent"
for path in (PROJECT_DIR, AGENT_DIR, AGENT_DIR / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from components.config import stack_file_config  # noqa: E402
from components.config.cluster import NodeAgent  # noqa: E402
from components.kit import naming  # noqa: E402
from gpustack.mockrun import Recording, run_program  # noqa: E402
from gpustack.render import kubernetes_object  # noqa: E402
from gpustack_agent import budget as agent_budget  # noqa: E402
from gpustack_agent import pacer, slots  # noqa: E402

JOB_SHARE = 0.9
SEED = 7
# nodes, pools, budget (2.5 % and 2 %: each a multiple of a pool's size, so the canary wave fills the budget; a
# wave whose nodes are not a multiple of the budget leaves slots idle at its end, the price of gating waves)
FLEETS = ((1_000, 20, 25), (10_000, 50, 200))
LOAD_CASE = (10_000, 1_000)  # nodes, of which hold a slot (the rest wait)
JOB = "kubernetes:batch/v1:Job"
POOL_LABEL = "gpu-stack/pool"


@dataclass(frozen=True)
class StepTimes:
    job_grace_s: float = 30.0  # terminationGracePeriodSeconds default of an evicted GPU job
    old_pod_stop_s: float = 10.0  # the old driver pod's preStop and exit
    operand_stop_s: float = 30.0  # k8s-driver-manager waits for operand pods to exit (§5.3 step 5)
    unload_s: float = 10.0  # module unload and rootfs unmount (§5.3 step 9)
    install_s: float = 240.0  # assumption: build and load a managed driver; not in the fact sheet
    probe_delay_s: float = 60.0  # startup probe initialDelaySeconds, managed driver (§2.3)
    probe_period_s: float = 10.0
    validation_s: float = 60.0  # toolkit restart and the validator's driver, toolkit, cuda and plugin checks
    event_s: float = 1.0  # a watch event reaches an agent and its pass runs
    gate_start_s: float = 15.0
    gate_poll_s: float = 10.0
    pulumi_step_s: float = 5.0
    operator_pass_s: float = 120.0  # upgrade controller requeue (§5.2)
    operator_event_s: float = 1.0


STEPS = StepTimes()


@dataclass(frozen=True)
class Node:
    name: str
    pool: str
    has_job: bool


def fleet(nodes: int, pools: int, seed: int = SEED) -> list[Node]:
    rng = random.Random(seed)
    per_pool = nodes // pools
    return [Node(f"gpu-{p:02d}-{i:04d}", f"pool-{p:02d}", rng.random() < JOB_SHARE)
            for p in range(pools) for i in range(per_pool)]


def waves_of(pools: int) -> list[tuple[str, range]]:
    early = max(1, pools // 5)
    return [("canary", range(0, 1)), ("early", range(1, 1 + early)), ("fleet", range(1 + early, pools))]


def stack_config(pools: int, max_unavailable: int) -> dict[str, Any]:
    """Every pool on its own driver DaemonSet (the default), three waves, the budget as maxUnavailable."""
    pool_list = [{"name": f"pool-{p:02d}", "nodeSelector": {"bench.gpu-stack/pool": f"p{p:02d}"},
                  "gpuModel": "H100-80GB", "os": "ubuntu22.04"} for p in range(pools)]
    waves = [{"name": name, "pools": [f"pool-{p:02d}" for p in members]} for name, members in waves_of(pools)]
    return stack_file_config({"config": {
        "gpu-stack:cluster": {"name": "bench", "context": "bench", "kubernetesVersions": ["1.33"]},
        "gpu-stack:nodeAgent": {"image": "harbor.platform.internal/gpu-stack/node-agent:0.7.0"},
        "gpu-stack:upgrade": {"maxUnavailable": max_unavailable, "waves": waves},
        "gpu-stack:nodePools": pool_list,
    }})


@dataclass(frozen=True)
class Rollout:
    wave_of_pool: dict[str, int]
    strategies: frozenset[str]
    daemonsets: int
    budget: Any
    resync_seconds: int


def rendered_rollout(recording: Recording) -> Rollout:
    """Each pool's wave (the chain of gate Jobs its DaemonSet waits for), the DaemonSets' update strategies and the
    budget of the node-pools document, from the render."""
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
        return by_urn[urn].name.startswith(naming.GATE_PREFIX) and by_urn[urn].type == JOB

    depths: dict[str, int] = {}

    def depth(gate: str) -> int:
        if gate not in depths:
            depths[gate] = 1 + max((depth(g) for g in waits_for(gate) if is_gate(g)), default=0)
        return depths[gate]

    wave_of_pool: dict[str, int] = {}
    strategies: set[str] = set()
    daemonsets = 0
    document: dict[str, Any] = {}
    resync = 0
    for registration in recording.registrations:
        if not registration.is_kubernetes_object:
            continue
        obj = kubernetes_object(registration)
        name = obj["metadata"]["name"]
        if obj["kind"] == "ConfigMap" and name == "gpu-stack-node-pools":
            document = json.loads(obj["data"]["node-pools.json"])
        if obj["kind"] == "DaemonSet" and name == "gpu-stack-node-labeler":
            env = obj["spec"]["template"]["spec"]["containers"][0]["env"]
            resync = int(next(e["value"] for e in env if e["name"] == "RESYNC_SECONDS"))
        if obj["kind"] != "DaemonSet" or not name.startswith("nvidia-driver-daemonset"):
            continue
        daemonsets += 1
        strategies.add(obj["spec"]["updateStrategy"]["type"])
        terms = obj["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        pools = next(e["values"] for e in terms[1]["matchExpressions"] if e["key"] == POOL_LABEL)
        wave = max((depth(g) for g in waits_for(registration.urn) if is_gate(g)), default=0)
        for pool in pools:
            wave_of_pool[pool] = wave
    return Rollout(wave_of_pool, frozenset(strategies), daemonsets, document["removal"]["maxUnavailable"], resync)


@dataclass
class Outcome:
    waves: int
    max_disrupted: int
    jobs_evicted: int
    makespan_s: float
    node_s: float = 0.0


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    current = peak = 0
    for _, delta in events:
        current += delta
        peak = max(peak, current)
    return peak


def driver_ready_after(start: float, init_s: float, steps: StepTimes) -> float:
    container_start = start + init_s
    probes = max(0, math.ceil((steps.install_s - steps.probe_delay_s) / steps.probe_period_s))
    return container_start + steps.probe_delay_s + probes * steps.probe_period_s


def node_time(has_job: bool, steps: StepTimes = STEPS) -> float:
    """One node in gpu-stack's mechanism, from taking its slot to giving it back."""
    drained = (steps.job_grace_s if has_job else 0.0) + steps.event_s
    init_s = steps.old_pod_stop_s + steps.operand_stop_s + steps.unload_s
    ready = driver_ready_after(drained, init_s, steps)
    validated = ready + math.ceil(steps.validation_s / steps.probe_period_s) * steps.probe_period_s
    return validated + steps.event_s


def simulate_gpu_stack(nodes: list[Node], rollout: Rollout, steps: StepTimes = STEPS,
                       seed: int = SEED) -> tuple[Outcome, dict[str, float]]:
    """Event simulation of the agents and the budget; returns the outcome and counts of budget reads, wakes and
    holds (for the request rate)."""
    rng = random.Random(seed)
    limit = agent_budget.Limits(rollout.budget).slots(len(nodes))
    waves = sorted(set(rollout.wave_of_pool.values()))
    counts = {"polls": 0.0, "wakes": 0.0, "holds": 0.0}
    disrupted: list[tuple[float, float]] = []
    evicted = 0
    clock = 0.0
    for wave in waves:
        members = [n for n in nodes if rollout.wave_of_pool.get(n.pool) == wave]
        events: list[tuple[float, int, str, str]] = []  # (time, seq, kind, node)
        seq = 0

        def push(when: float, kind: str, name: str) -> None:
            nonlocal seq
            seq += 1
            heapq.heappush(events, (when, seq, kind, name))

        by_name = {n.name: n for n in members}
        pools_of_wave: dict[str, list[Node]] = {}
        for node in members:
            pools_of_wave.setdefault(node.pool, []).append(node)
        for pool_nodes in pools_of_wave.values():
            # The first of a DaemonSet's nodes finds its new template on its own jittered schedule; each node that
            # finds it wakes one more (pacer._revision), so the rest know after log2(n) hops of one event each.
            first = clock + min(slots.waiting_poll_seconds(len(nodes), rng.random) * rng.random() for _ in pool_nodes)
            order = list(pool_nodes)
            rng.shuffle(order)
            for k, node in enumerate(order):
                push(first + steps.event_s * math.floor(math.log2(k + 1)), "poll", node.name)
        holders: set[str] = set()
        waiting: set[str] = set()
        done_at = clock
        remaining = len(members)
        while events:
            now, _, kind, name = heapq.heappop(events)
            if kind in ("poll", "wake"):
                if name in holders or by_name[name] is None:
                    continue
                counts["polls"] += 1
                if len(holders) < limit:
                    holders.add(name)
                    waiting.discard(name)
                    node = by_name[name]
                    evicted += node.has_job
                    took = node_time(node.has_job, steps)
                    disrupted.append((now, now + took))
                    counts["holds"] += 1
                    push(now + took, "release", name)
                    candidates = sorted(waiting)[:slots.wake_candidates(limit)]
                    if len(holders) < limit and candidates:
                        # room left after taking a slot: the taker passes it on (slots.Slots.acquire)
                        counts["wakes"] += 1
                        push(now + steps.event_s, "wake", candidates[int(rng.random() * len(candidates))])
                else:
                    waiting.add(name)
                    if kind == "poll":
                        push(now + slots.waiting_poll_seconds(len(nodes), rng.random), "poll", name)
            elif kind == "release":
                holders.discard(name)
                by_name[name] = None  # type: ignore[assignment]
                remaining -= 1
                done_at = max(done_at, now)
                candidates = sorted(waiting)[:slots.wake_candidates(limit)]
                if candidates:
                    counts["wakes"] += 1
                    target = candidates[int(rng.random() * len(candidates))]
                    push(now + steps.event_s, "wake", target)
            if remaining == 0:
                break
        if wave == waves[-1]:
            clock = done_at
        else:
            first_poll = clock + steps.gate_start_s
            polls = max(0, math.ceil((done_at - first_poll) / steps.gate_poll_s))
            clock = first_poll + polls * steps.gate_poll_s + steps.pulumi_step_s
    return Outcome(len(waves), max_overlap(disrupted), evicted, clock, node_time(True, steps)), counts


def simulate_operator(nodes: list[Node], budget: int, steps: StepTimes = STEPS) -> Outcome:
    """The upgrade controller's state machine (fact sheet §5.2), one transition per node per reconcile pass."""
    state = {n.name: "upgrade-required" for n in nodes}
    ready_at: dict[str, float] = {}
    cordoned_at: dict[str, float] = {}
    disrupted: list[tuple[float, float]] = []
    by_name = {n.name: n for n in nodes}
    evicted = 0
    passes = [0.0]
    now = 0.0
    in_progress = 0
    while any(s != "upgrade-done" for s in state.values()):
        now = heapq.heappop(passes)
        while passes and passes[0] <= now:
            heapq.heappop(passes)
        snapshot = [(name, current) for name, current in state.items() if current != "upgrade-done"]
        slots_left = max(0, budget - in_progress)
        changed = False
        for name, current in snapshot:
            node = by_name[name]
            before = state[name]
            if current == "upgrade-required":
                if slots_left > 0:
                    slots_left -= 1
                    in_progress += 1
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
                    heapq.heappush(passes, ready_at[name])
                if ready_at[name] <= now:
                    del ready_at[name]
                    state[name] = "pod-restart-required"
            elif current == "pod-restart-required":
                if name not in ready_at:
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
                in_progress -= 1
            changed |= state[name] != before
        if changed:
            heapq.heappush(passes, now + steps.operator_event_s)
        heapq.heappush(passes, now + steps.operator_pass_s)
    return Outcome(1, max_overlap(disrupted), evicted, now)


def requests_per_node_upgrade() -> dict[str, int]:
    """The requests of one node's driver upgrade, by method, counted on the real agent against the fake API."""
    from fleet import Fleet  # the tests' fleet in memory

    config = json.loads((AGENT_DIR / "tests" / "fixtures" / "config-node-pools.json").read_text())
    config["version"] = 3
    config["removal"] = {"maxUnavailable": 1, "drain": False, "namespace": "gpu-operator", "driverUpgrade": "rolling",
                         "gpuPodEviction": True, "nodeReadyTimeoutSeconds": 1800}
    a100 = config["pools"][0]
    a100["labels"]["gpu-stack/driver"] = "nvidia-driver-daemonset-a100"
    config["drivers"] = {"nvidia-driver-daemonset-a100": "aaaa0001"}
    base = json.loads((AGENT_DIR / "tests" / "fixtures" / "node-a100-labelled.json").read_text())
    sim = Fleet(base, config, {"a100": 1}, seed=1, jobs=1.0, skew_seconds=0.0)
    sim.cluster.put_daemonset("nvidia-driver-daemonset-a100", "aaaa0001", "rev1")
    for name in sim.agents:
        sim.pass_of(name)
    sim.cluster.calls.clear()
    sim.roll_driver("nvidia-driver-daemonset-a100", "aaaa0002", "rev2")
    sim.time += 3600  # its check is due
    seen = None
    for _ in range(200):
        # A pass when the label loop would run one: something on the node or its pods changed (its watches'
        # events), not on every simulated tick.
        state = json.dumps([sim.cluster.nodes, sim.cluster.pods], sort_keys=True, default=str)
        if state != seen:
            for name in sim.agents:
                sim.pass_of(name)
            seen = json.dumps([sim.cluster.nodes, sim.cluster.pods], sort_keys=True, default=str)
        sim.tick(10.0)
        if sim.upgraded("nvidia-driver-daemonset-a100") and not sim.cluster.holders():
            break
    counted: dict[str, int] = {}
    for method in sim.cluster.calls:
        counted[method] = counted.get(method, 0) + 1
    return counted


def request_rates(nodes: int, holding: int, waiting: int, node_s: float, resync: int,
                  per_node: int) -> dict[str, float]:
    """Requests/s of the whole fleet's agents while `holding` nodes hold slots and `waiting` wait."""
    poll_mean = min(slots.WAITING_POLL_MAX_SECONDS, max(slots.WAITING_POLL_MIN_SECONDS,
                                                        nodes / slots.WAITING_POLLS_PER_SECOND))
    rates = {
        # the label loop's node watch, re-established with a read of the node, every resync
        "idle_watches": nodes * 2 / resync,
        # the inventory loop reads its node every resync (it writes only when the verdict changes)
        "inventory": nodes / resync,
        "waiting_polls": waiting / poll_mean,
        # a holder's pass on its watch's safety-net timeout: its node, its pods, a new pod watch
        "holder_watches": holding * 3 / pacer.HOLD_WATCH_SECONDS,
    }
    standing = sum(rates.values())
    rates["standing"] = standing
    # the requests of each node's upgrade, at the rate nodes go through
    rates["rollout"] = per_node * holding / node_s
    rates["total"] = standing + rates["rollout"]
    return rates


def main() -> int:
    per_node_calls = requests_per_node_upgrade()
    per_node = sum(per_node_calls.values())
    print(f"requests per node upgrade (real agent, fake API): {per_node} "
          f"({', '.join(f'{k}={v}' for k, v in sorted(per_node_calls.items()))})")
    resync = NodeAgent.model_fields["resync_seconds"].default
    for nodes_count, pools, budget in FLEETS:
        nodes = fleet(nodes_count, pools)
        rollout = rendered_rollout(run_program("bench-upgrade", stack_config(pools, budget)))
        assert rollout.strategies == {"OnDelete"}, rollout.strategies
        ours, counts = simulate_gpu_stack(nodes, rollout)
        operator = simulate_operator(nodes, budget)
        physical = math.ceil(len(nodes) / budget) * ours.node_s
        per_wave = {}
        for node in nodes:
            wave = rollout.wave_of_pool[node.pool]
            per_wave[wave] = per_wave.get(wave, 0) + 1
        wave_batches = sum(math.ceil(count / budget) for count in per_wave.values())
        print(f"fleet nodes={len(nodes)} pools={pools} gpu_jobs={sum(n.has_job for n in nodes)} budget={budget} "
              f"driver_daemonsets={rollout.daemonsets}")
        print(f"gpu-stack: waves={ours.waves} max_unavailable={rollout.budget} max_disrupted={ours.max_disrupted} "
              f"jobs_evicted={ours.jobs_evicted} makespan_min={ours.makespan_s / 60:.1f}")
        print(f"operator: waves={operator.waves} max_disrupted={operator.max_disrupted} "
              f"jobs_evicted={operator.jobs_evicted} makespan_min={operator.makespan_s / 60:.1f}")
        print(f"makespan_ratio={ours.makespan_s / operator.makespan_s:.2f}")
        print(f"physical_limit_min={physical / 60:.1f} (ceil({len(nodes)}/{budget}) x {ours.node_s:.0f} s) "
              f"ratio_to_physical={ours.makespan_s / physical:.2f} "
              f"wave_batches={wave_batches} (waves {', '.join(str(per_wave[w]) for w in sorted(per_wave))} nodes)")
        rates = request_rates(len(nodes), budget, len(nodes) - budget, ours.node_s, rollout.resync_seconds or resync,
                              per_node)
        print("api_requests_per_s " + " ".join(f"{k}={v:.1f}" for k, v in rates.items())
              + f" budget_reads={counts['polls']:.0f} wakes={counts['wakes']:.0f}")
    nodes_count, holding = LOAD_CASE
    rates = request_rates(nodes_count, holding, nodes_count - holding, node_time(True), resync, per_node)
    print(f"load nodes={nodes_count} waiting={nodes_count - holding} holding={holding} resync_s={resync}: "
          + " ".join(f"{k}={v:.1f}" for k, v in rates.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
