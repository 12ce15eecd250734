"""Upgrade benchmark: the node agents' own code rolling a new driver across a fleet, in virtual time, against a fake
API server that counts every request; and the standing load the agents put on the API server while nodes wait.

agents=real. Every GPU node runs ``python -m gpustack_agent label`` as the agent runs it (``run_label_agent``: the
label loop and its Pacer) and the ``inventory`` loop; one ``coordinate`` process grants slots. They run as green
threads in one process (node_images/node-agent/tests/simfleet.py), against node_images/node-agent/tests/
simcluster.py's API server (resourceVersions and conflicts, selectors, metadata-only reads, watches resumed from a
resourceVersion, bookmarks; every request counted). The inputs are the real program's renders
(``gpustack.mockrun``): the node-pools document the agents and the coordinator read, each pool's driver DaemonSet
and its template digest (OnDelete: asserted), the waves (the chain of gate Jobs each DaemonSet waits for), the
budget and the agents' resync period. A second render with a new driver version gives the new digests.

Simulated around the agents, with the step times of simfleet.StepTimes (the fact sheet's, and one assumption: 240 s
to build and load a managed driver): the DaemonSet controller, the kubelet (grace periods, the new driver pod's
init, startup probe, install and validation, a status report every five minutes), kubelet's ConfigMap volume sync
(up to a minute late), and `pulumi up` as a model: the new document, then each wave's DaemonSets, the next wave once
the gate Job would pass (every node of the wave on a Ready driver pod of the new revision, judged on the gate's
15 s start and 10 s polls, plus 5 s for Pulumi's next step). A GPU job runs on about 90 % of the nodes (seeded).

The operator's upgrade controller stays a model (``operator (model)``): its state machine on the same nodes (fact
sheet §5.2), maxParallelUpgrades and maxUnavailable both the budget, one state transition per node per reconcile
pass, passes on the events it watches and otherwise every 2 minutes.

Printed per fleet: the rollout as before, plus ``agents=real``, ``standing_req_per_s`` (the fleet's requests/s
while nothing moves: measured over the 20 minutes before the rollout), ``requests_per_node_upgrade`` (the rollout's
requests beyond that standing rate, per node), ``max_wait_s`` (a node's longest time in line, from the coordinator's
own log), ``name_turn_correlation`` (Spearman, name order against turn, within each wave, weighted by its nodes).
Then the load cases: 10,000 nodes of which 9,000 wait in line and 1,000 hold slots (each cordoned, waiting for its
GPU job to end), for 30 simulated minutes, under a count and a percentage budget.

Run: `.venv/bin/python benchmarks/upgrade.py` (two processes, one per core). It reports and does not assert.
"""

from __future__ import annotations

import heapq
import json
import math
import multiprocessing
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROJECT_DIR = Path(__file__).resolve().parent.parent
AGENT_DIR = PROJECT_DIR / "node_images" / "node-agent"
for path in (PROJECT_DIR, AGENT_DIR, AGENT_DIR / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from components.config import stack_file_config  # noqa: E402
from components.kit import naming  # noqa: E402
from gpustack.mockrun import Recording, run_program  # noqa: E402
from gpustack.render import kubernetes_object  # noqa: E402
from gpustack_agent.model import budget as agent_budget  # noqa: E402
from simcluster import NODES, PODS  # noqa: E402
from simfleet import Fleet, StepTimes, labelled_nodes  # noqa: E402

JOB_SHARE = 0.9
SEED = 7
# nodes, pools, budget (2.5 % and 2 % are multiples of a pool's size, so the canary wave fills the budget)
FLEETS = ((1_000, 20, 25), (1_000, 20, "10%"), (10_000, 50, 200), (10_000, 50, "10%"))
LOAD_CASES = ((10_000, 50, 1_000), (10_000, 50, "10%"))
LOAD_SECONDS = 1800.0
WARMUP_SECONDS = 1200.0
LOAD_WARMUP_SECONDS = 600.0
JOB = "kubernetes:batch/v1:Job"
POOL_LABEL = "gpu-stack/pool"
NEW_DRIVER = "580.105.08"
STEPS = StepTimes()
# What the gate Job and Pulumi add between two waves (the gate's first poll, its polls, Pulumi's next step).
GATE_START_S, GATE_POLL_S, PULUMI_STEP_S = 15.0, 10.0, 5.0
OPERATOR_PASS_S, OPERATOR_EVENT_S = 120.0, 1.0
# The labels NFD puts on the bench's nodes: a GPU, and the OS every pool's driver image is built for.
NODE_LABELS = {
    "feature.node.kubernetes.io/pci-10de.present": "true",
    "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
    "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04",
    "feature.node.kubernetes.io/kernel-version.full": "5.15.0-139-generic",
    "kubernetes.io/os": "linux",
}


# --- the program's renders -----------------------------------------------------------------------------------


def waves_of(pools: int) -> list[tuple[str, range]]:
    early = max(1, pools // 5)
    return [("canary", range(0, 1)), ("early", range(1, 1 + early)), ("fleet", range(1 + early, pools))]


def stack_config(pools: int, max_unavailable: Any, *, driver: str | None = None, waves: bool = True,
                 gpu_pod_eviction: bool = True) -> dict[str, Any]:
    """Every pool on its own driver DaemonSet (the default), three waves, the budget as maxUnavailable."""
    pool_list = [{"name": f"pool-{p:02d}", "nodeSelector": {"bench.gpu-stack/pool": f"p{p:02d}"},
                  "gpuModel": "H100-80GB", "os": "ubuntu22.04"} for p in range(pools)]
    upgrade: dict[str, Any] = {"maxUnavailable": max_unavailable, "gpuPodEviction": gpu_pod_eviction}
    if waves:
        upgrade["waves"] = [{"name": name, "pools": [f"pool-{p:02d}" for p in members]}
                            for name, members in waves_of(pools)]
    config: dict[str, Any] = {
        "gpu-stack:cluster": {"name": "bench", "context": "bench", "kubernetesVersions": ["1.33"]},
        "gpu-stack:nodeAgent": {"image": "harbor.platform.internal/gpu-stack/node-agent:0.10.0"},
        "gpu-stack:upgrade": upgrade,
        "gpu-stack:nodePools": pool_list,
    }
    if driver:
        config["gpu-stack:versions"] = {"driver": driver}
    return stack_file_config({"config": config})


@dataclass(frozen=True)
class Rollout:
    wave_of_pool: dict[str, int]
    daemonset_of_pool: dict[str, str]
    strategies: frozenset[str]
    document: dict[str, Any]
    resync_seconds: int

    @property
    def daemonsets(self) -> int:
        return len(set(self.daemonset_of_pool.values()))

    @property
    def budget(self) -> Any:
        return self.document["removal"]["maxUnavailable"]


def rendered_rollout(recording: Recording) -> Rollout:
    """Each pool's driver DaemonSet and wave (the chain of gate Jobs its DaemonSet waits for), the DaemonSets'
    update strategies, the node-pools document and the agents' resync period, from the render."""
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
    daemonset_of_pool: dict[str, str] = {}
    strategies: set[str] = set()
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
        strategies.add(obj["spec"]["updateStrategy"]["type"])
        terms = obj["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        pools = next(e["values"] for e in terms[1]["matchExpressions"] if e["key"] == POOL_LABEL)
        wave = max((depth(g) for g in waits_for(registration.urn) if is_gate(g)), default=0)
        for pool in pools:
            wave_of_pool[pool] = wave
            daemonset_of_pool[pool] = name
    return Rollout(wave_of_pool, daemonset_of_pool, frozenset(strategies), document, resync)


# --- the fleet -----------------------------------------------------------------------------------------------


def node_time(steps: StepTimes = STEPS) -> float:
    """One node from its grant to its slot given back, with a GPU job: evicted, the old driver pod gone, the new
    one created, through its init containers, install, probes and validation. No rollout within the budget takes
    less than ceil(nodes / budget) of these in a row."""
    return steps.job_grace_s + steps.old_pod_stop_s + steps.pod_create_s + steps.ready_after_start()


def fake_inventory() -> Any:
    """One node's GPUs as the inventory loop reads them (a recorded H100 node, replayed)."""
    from unittest import mock

    import fakenvml
    from gpustack_agent.inventory import inventory

    fake = fakenvml.FakeNvml([fakenvml.h100_80gb() for _ in range(8)])
    with mock.patch.multiple("pynvml", **{name: getattr(fake, name) for name in dir(fake)
                                          if name.startswith("nvml")}):
        found = inventory.read_inventory()
    return lambda: found


def build_fleet(nodes: int, pools: int, rollout: Rollout, *, seed: int = SEED, jobs: float = JOB_SHARE) -> Fleet:
    rng = random.Random(seed)
    per_pool = nodes // pools
    node_metadata = labelled_nodes(rollout.document, NODE_LABELS, {
        f"pool-{p:02d}": per_pool for p in range(pools)})
    with_jobs = [name for name in sorted(node_metadata) if rng.random() < jobs]
    digests = rollout.document["drivers"]
    fleet = Fleet(rollout.document, node_metadata, drivers={ds: (digest, "r1") for ds, digest in digests.items()},
                  jobs=with_jobs, seed=seed, skew_seconds=600.0, steps=STEPS, resync_seconds=rollout.resync_seconds,
                  inventory=fake_inventory())
    for ds, digest in digests.items():
        fleet.put_daemonset(ds, digest, "r1", observed_after=0)
    fleet.settle_driver_pods()
    fleet.start()
    return fleet


def requests(fleet: Fleet) -> int:
    return fleet.server.count()


def spearman(xs: list[float], ys: list[float]) -> float:
    def ranks(values: list[float]) -> list[float]:
        order = sorted(range(len(values)), key=values.__getitem__)
        result = [0.0] * len(values)
        for rank, index in enumerate(order):
            result[index] = float(rank)
        return result
    n = len(xs)
    if n < 2:
        return 0.0
    rx, ry = ranks(xs), ranks(ys)
    d2 = sum((a - b) ** 2 for a, b in zip(rx, ry))
    return 1 - 6 * d2 / (n * (n * n - 1))


def grants_of(fleet: Fleet) -> list[dict[str, Any]]:
    return [r for r in fleet.logs.get("coordinator", []) if r.get("event") == "slot-granted"]


# --- a rollout -----------------------------------------------------------------------------------------------


@dataclass
class RolloutResult:
    wave_nodes: list[int]
    nodes: int
    pools: int
    budget: Any
    slots: int
    daemonsets: int
    gpu_jobs: int
    waves: int
    max_disrupted: int
    jobs_evicted: int
    makespan_s: float
    every_node: bool
    standing_req_per_s: float
    requests_per_node_upgrade: float
    max_wait_s: float
    name_turn_correlation: float
    over_budget: int
    outside_slot: int
    crashes: int
    wall_s: float


def name_turn_correlation(members: dict[int, set[str]], grants: list[dict]) -> float:
    """How far a node's name decides its turn within its wave (Spearman, weighted by the wave's size): near 0 when
    the grants go first come first served."""
    turn_of = {g["node"]: i for i, g in enumerate(grants) if g["reason"] == "driver-upgrade"}
    correlations = []
    for names in members.values():
        ordered = sorted(n for n in names if n in turn_of)
        if len(ordered) > 1:
            correlations.append((len(ordered), spearman(list(range(len(ordered))), [turn_of[n] for n in ordered])))
    weight = sum(n for n, _ in correlations) or 1
    return sum(n * c for n, c in correlations) / weight


def run_rollout(nodes: int, pools: int, budget: Any) -> RolloutResult:
    started = time.perf_counter()
    rollout = rendered_rollout(run_program("bench-upgrade", stack_config(pools, budget)))
    assert rollout.strategies == {"OnDelete"}, rollout.strategies
    target = rendered_rollout(run_program("bench-upgrade", stack_config(pools, budget, driver=NEW_DRIVER)))
    fleet = build_fleet(nodes, pools, rollout)
    hub = fleet.hub
    hub.run(WARMUP_SECONDS - 900.0)
    idle_from, idle_count = hub.now, requests(fleet)
    hub.run(WARMUP_SECONDS)
    standing = (requests(fleet) - idle_count) / (hub.now - idle_from)
    before = requests(fleet)
    fleet._invariants.reset()
    rollout_start = hub.now

    waves = sorted(set(rollout.wave_of_pool.values()))
    members: dict[int, set[str]] = {w: set() for w in waves}
    wave_of_node: dict[str, int] = {}
    for (_, name), found in fleet.server.objects[NODES].items():
        pool = found["metadata"]["labels"].get(POOL_LABEL)
        members[rollout.wave_of_pool[pool]].add(name)
        wave_of_node[name] = rollout.wave_of_pool[pool]
    remaining = {w: set(m) for w, m in members.items()}
    new_revision = "r2"
    finished_at: dict[str, float] = {}

    def watch_pods(kind: str, old: Any, new: Any) -> None:
        if kind != PODS or new is None or new["metadata"]["labels"].get("controller-revision-hash") != new_revision:
            return
        node = new["spec"].get("nodeName")
        if node in wave_of_node and any(c.get("type") == "Ready" and c.get("status") == "True"
                                        for c in new["status"].get("conditions") or []):
            remaining[wave_of_node[node]].discard(node)
            finished_at.setdefault(node, hub.now)
    fleet.server.observers.append(watch_pods)

    fleet.publish(target.document)
    current = 0

    def update_wave(wave: int) -> None:
        for pool, w in rollout.wave_of_pool.items():
            if w == wave:
                ds = rollout.daemonset_of_pool[pool]
                fleet.put_daemonset(ds, target.document["drivers"][ds], new_revision)

    update_wave(waves[current])
    wave_started = hub.now
    limit = hub.now + 48 * 3600
    while True:
        hub.run(limit, done=lambda: not remaining[waves[current]])
        if remaining[waves[current]] or current == len(waves) - 1:
            break
        # The gate Job's first poll, then its polls, until it sees the wave done; then Pulumi's next step.
        done_at = hub.now
        polls = max(0, math.ceil((done_at - (wave_started + GATE_START_S)) / GATE_POLL_S))
        hub.run(wave_started + GATE_START_S + polls * GATE_POLL_S + PULUMI_STEP_S)
        current += 1
        update_wave(waves[current])
        wave_started = hub.now
    # Every node through: its slot given back too.
    hub.run(limit, done=lambda: not fleet.holders())
    makespan = hub.now - rollout_start
    total = requests(fleet) - before
    extra = total - standing * makespan
    grants = grants_of(fleet)
    slots = agent_budget.Limits(budget).slots(nodes)
    return RolloutResult(
        wave_nodes=[len(members[w]) for w in waves], nodes=nodes, pools=pools, budget=budget, slots=slots, daemonsets=rollout.daemonsets,
        gpu_jobs=len(fleet.jobs_on), waves=len(waves), max_disrupted=fleet.peak,
        jobs_evicted=len(fleet.server.evictions), makespan_s=makespan,
        every_node=all(not r for r in remaining.values()), standing_req_per_s=standing,
        requests_per_node_upgrade=extra / max(1, len(finished_at)),
        max_wait_s=max((g["waitedSeconds"] for g in grants), default=0.0),
        name_turn_correlation=name_turn_correlation(members, grants),
        over_budget=len(fleet.over_budget), outside_slot=len(fleet.outside_slot), crashes=len(hub.crashes),
        wall_s=time.perf_counter() - started)


# --- the load case -------------------------------------------------------------------------------------------


@dataclass
class LoadResult:
    nodes: int
    budget: Any
    waiting: int
    holding: int
    standing_req_per_s: float
    by_method: dict[str, float]
    open_watches: int
    wall_s: float


def run_load(nodes: int, pools: int, budget: Any) -> LoadResult:
    """Every node needs a new driver, every node runs a GPU job that is not evicted (gpuPodEviction false): the
    first `budget` nodes take slots and wait, cordoned, for their jobs; the rest wait in line. Measured over
    LOAD_SECONDS once the holders are all holding."""
    started = time.perf_counter()
    rollout = rendered_rollout(run_program("bench-load", stack_config(pools, budget, waves=False,
                                                                      gpu_pod_eviction=False)))
    target = rendered_rollout(run_program("bench-load", stack_config(pools, budget, driver=NEW_DRIVER, waves=False,
                                                                     gpu_pod_eviction=False)))
    fleet = build_fleet(nodes, pools, rollout, jobs=1.0)
    hub = fleet.hub
    hub.run(LOAD_WARMUP_SECONDS)
    fleet.roll_drivers({ds: (digest, "r2") for ds, digest in target.document["drivers"].items()})
    slots = agent_budget.Limits(budget).slots(nodes)

    def all_holding() -> bool:
        return len(fleet.holders()) >= slots and len(fleet.out_of_service()) >= slots
    hub.run(hub.now + 3600, done=all_holding)
    hub.run(hub.now + 60)
    before = dict(fleet.server.requests)
    start = hub.now
    hub.run(start + LOAD_SECONDS)
    per_method: dict[str, float] = {}
    for (caller, method), count in fleet.server.requests.items():
        delta = count - before.get((caller, method), 0)
        if delta:
            per_method[method] = per_method.get(method, 0.0) + delta / LOAD_SECONDS
    holding = len(fleet.holders())
    return LoadResult(nodes=nodes, budget=budget, waiting=nodes - holding, holding=holding,
                      standing_req_per_s=sum(per_method.values()), by_method=per_method,
                      open_watches=fleet.server.open_watches(), wall_s=time.perf_counter() - started)


# --- the operator, a model -----------------------------------------------------------------------------------


@dataclass
class OperatorOutcome:
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


def simulate_operator(has_job: list[bool], budget: int, steps: StepTimes = STEPS) -> OperatorOutcome:
    """The upgrade controller's state machine (fact sheet §5.2), one transition per node per reconcile pass: a
    model, not the operator's code."""
    state = {i: "upgrade-required" for i in range(len(has_job))}
    ready_at: dict[int, float] = {}
    cordoned_at: dict[int, float] = {}
    disrupted: list[tuple[float, float]] = []
    evicted = 0
    passes = [0.0]
    now = 0.0
    in_progress = 0
    while any(s != "upgrade-done" for s in state.values()):
        now = heapq.heappop(passes)
        while passes and passes[0] <= now:
            heapq.heappop(passes)
        slots_left = max(0, budget - in_progress)
        changed = False
        for name, current in [(n, s) for n, s in state.items() if s != "upgrade-done"]:
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
                    evicted += has_job[name]
                    ready_at[name] = now + (steps.job_grace_s if has_job[name] else 0.0)
                    heapq.heappush(passes, ready_at[name])
                if ready_at[name] <= now:
                    del ready_at[name]
                    state[name] = "pod-restart-required"
            elif current == "pod-restart-required":
                if name not in ready_at:
                    ready_at[name] = now + steps.old_pod_stop_s + steps.pod_create_s + steps.ready_after_start() \
                        - steps.validation_s
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
            heapq.heappush(passes, now + OPERATOR_EVENT_S)
        heapq.heappush(passes, now + OPERATOR_PASS_S)
    return OperatorOutcome(max_overlap(disrupted), evicted, now)


# --- the report ----------------------------------------------------------------------------------------------


def report_rollout(result: RolloutResult) -> list[str]:
    rng = random.Random(SEED)
    jobs = [rng.random() < JOB_SHARE for _ in range(result.nodes)]
    operator = simulate_operator(jobs, result.slots)
    # No rollout within the budget is faster than ceil(nodes / budget) nodes' times in a row; behind gates, none is
    # faster than that for each wave in turn (a wave whose nodes are not a multiple of the budget leaves slots idle
    # at its end: the price of gating waves).
    unwaved = math.ceil(result.nodes / result.slots)
    batches = sum(math.ceil(n / result.slots) for n in result.wave_nodes)
    physical = batches * node_time()
    return [
        f"fleet nodes={result.nodes} pools={result.pools} gpu_jobs={result.gpu_jobs} budget={result.budget} "
        f"slots={result.slots} driver_daemonsets={result.daemonsets}",
        f"gpu-stack: agents=real waves={result.waves} max_unavailable={result.budget} "
        f"max_disrupted={result.max_disrupted} jobs_evicted={result.jobs_evicted} "
        f"makespan_min={result.makespan_s / 60:.1f} every_node={result.every_node} "
        f"over_budget={result.over_budget} outside_slot={result.outside_slot} crashes={result.crashes}",
        f"operator (model): max_disrupted={operator.max_disrupted} jobs_evicted={operator.jobs_evicted} "
        f"makespan_min={operator.makespan_s / 60:.1f} makespan_ratio={result.makespan_s / operator.makespan_s:.2f}",
        f"physical_limit_min={physical / 60:.1f} (wave_batches={batches}: waves "
        f"{', '.join(map(str, result.wave_nodes))} nodes, ceil(n/{result.slots}) each, x {node_time():.0f} s; "
        f"{unwaved} without waves) ratio_to_physical={result.makespan_s / physical:.3f}",
        f"standing_req_per_s={result.standing_req_per_s:.1f} "
        f"requests_per_node_upgrade={result.requests_per_node_upgrade:.1f} max_wait_s={result.max_wait_s:.0f} "
        f"name_turn_correlation={result.name_turn_correlation:.3f} wall_s={result.wall_s:.0f}",
    ]


def report_load(result: LoadResult) -> list[str]:
    methods = " ".join(f"{k}={v:.2f}" for k, v in sorted(result.by_method.items(), key=lambda kv: -kv[1]))
    return [f"load nodes={result.nodes} budget={result.budget} waiting={result.waiting} holding={result.holding} "
            f"agents=real standing_req_per_s={result.standing_req_per_s:.1f} open_watches={result.open_watches} "
            f"wall_s={result.wall_s:.0f}",
            f"load per method: {methods}"]


def _case(case: tuple[str, tuple[Any, ...]]) -> list[str]:
    kind, args = case
    if kind == "rollout":
        return report_rollout(run_rollout(*args))
    return report_load(run_load(*args))


def main() -> int:
    started = time.perf_counter()
    cases = [("rollout", fleet) for fleet in FLEETS] + [("load", case) for case in LOAD_CASES]
    # The largest first, so that two processes finish together.
    cases.sort(key=lambda c: -c[1][0])
    with multiprocessing.get_context("fork").Pool(2) as pool:
        for lines in pool.imap(_case, cases):
            print("\n".join(lines), flush=True)
    print(f"benchmark_wall_s={time.perf_counter() - started:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
