"""A fleet in memory: several node agents (Pacers) against one fake API server (agenttest.FakeCluster), with the
controllers whose work they wait for simulated (the DaemonSet controller recreating a deleted driver pod at the
DaemonSet's current revision, the kubelet getting it Ready, evicted jobs terminating, the MIG manager applying a
layout), faults injected (409s, 500s, answers lost after the write, agent restarts, wall clocks skewed by minutes),
and the invariants checked after every write the agents make.

Out of service, as the budget counts it: a node cordoned, without a Ready driver pod, or with a MIG layout
being applied. `Fleet.check()` runs after each write and records the peak, the nodes out of service outside any
slot, and every job evicted, so that a test asserts on what happened, not on what the agents believed.
"""

from __future__ import annotations

import copy
import datetime
import random
from typing import Any

from kubernetes.client.exceptions import ApiException

from agenttest import NAMESPACE, FakeCluster, Recorder, driver_pod, gpu_job_pod, renamed
from gpustack_agent.api import kube
from gpustack_agent.label.pacer import Pacer
from gpustack_agent.model import labels

MIG_CONFIG, MIG_STATE = "nvidia.com/mig.config", "nvidia.com/mig.config.state"
WRITES = ("patch_node", "create_namespaced_pod_eviction", "delete_namespaced_pod", "create_namespaced_config_map",
          "replace_namespaced_config_map")
READS = ("read_node", "list_pod_for_all_namespaces", "read_namespaced_config_map", "list_node")


class Clock:
    """A node's own clocks: monotonic seconds shared by the fleet's simulation, and a wall clock skewed by
    `skew` seconds (which the budget never reads for a decision)."""

    def __init__(self, fleet: "Fleet", skew: float) -> None:
        self.fleet, self.skew = fleet, skew

    def monotonic(self) -> float:
        return self.fleet.time

    def wall(self) -> datetime.datetime:
        return datetime.datetime(2026, 11, 27, 12, 0, tzinfo=datetime.timezone.utc) + datetime.timedelta(
            seconds=self.fleet.time + self.skew)


class Fleet:
    def __init__(self, base_node: dict[str, Any], config: dict[str, Any], pools: dict[str, int], *, seed: int,
                 jobs: float = 0.7, skew_seconds: float = 600.0, ready_after: float = 60.0,
                 never_ready: frozenset[str] = frozenset()) -> None:
        self.rng = random.Random(seed)
        self.time = 0.0
        self.config = copy.deepcopy(config)
        self.ready_after = ready_after
        self.never_ready = set(never_ready)
        self.cluster = FakeCluster()
        self.cluster.on_change = self.check
        self.agents: dict[str, Pacer] = {}
        self.logs: dict[str, Recorder] = {}
        self.clocks: dict[str, Clock] = {}
        self.peak = 0
        self.outside_slot: list[tuple[float, str]] = []
        self.over_budget: list[tuple[float, int, int]] = []
        self.pending: dict[str, float] = {}  # node -> when its new driver pod becomes Ready (simulated kubelet)
        self.mig_done_at: dict[str, float] = {}
        self.limit_floor: int | None = None  # set when the budget is lowered: the holders in flight then
        selectors = {p["name"]: p["nodeSelector"] for p in self.config["pools"]}
        drivers = {p["name"]: (p.get("labels") or {}).get("gpu-stack/driver") for p in self.config["pools"]}
        for pool, count in pools.items():
            for i in range(count):
                name = f"{pool}-{i:03d}"
                node = renamed(base_node, name)
                node["metadata"]["labels"].update(selectors[pool])
                node["metadata"]["labels"].pop("gpu-stack/pool", None)
                node["metadata"]["resourceVersion"] = "1"
                node["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
                patch = labels.desired_patch(node, self.config) or {"metadata": {}}
                for section in ("labels", "annotations"):
                    for key, value in (patch["metadata"].get(section) or {}).items():
                        node["metadata"].setdefault(section, {})[key] = value
                if MIG_CONFIG in node["metadata"]["labels"]:
                    node["metadata"]["labels"][MIG_STATE] = "success"
                self.cluster.nodes[name] = node
                daemonset = drivers[pool]
                if daemonset:
                    self.cluster.add(driver_pod(f"driver-{name}", name, daemonset,
                                                revision=self._revision(daemonset)))
                if self.rng.random() < jobs:
                    self.cluster.add(gpu_job_pod(f"job-{name}", name))
        for name in self.cluster.nodes:
            self.clocks[name] = Clock(self, self.rng.uniform(-skew_seconds, skew_seconds))
            self.start_agent(name)

    def _revision(self, daemonset: str) -> str:
        try:
            return self.cluster.revision_of(daemonset)
        except ValueError:
            return "rev1"

    # --- the agents ---

    def start_agent(self, name: str) -> None:
        """A new agent process on `name`: nothing remembered but what the API server holds."""
        clock = self.clocks[name]
        self.logs.setdefault(name, Recorder())
        self.agents[name] = Pacer(self.cluster.core, self.cluster.apps, node_name=name, log=self.logs[name],
                                  now=clock.wall, clock=clock.monotonic, rng=random.Random(self.rng.random()).random)

    def pass_of(self, name: str) -> None:
        """One pass of `name`'s label loop; a transient error is what the loop retries, a fatal one fails the test."""
        try:
            self.agents[name](kube.get_node(self.cluster.core, name), self.config)
        except ApiException as exc:
            if not kube.is_transient(exc):
                raise

    # --- the cluster's controllers ---

    def tick(self, seconds: float) -> None:
        self.time += seconds
        cluster = self.cluster
        for pod in list(cluster.pods):
            if pod["metadata"].get("deletionTimestamp"):
                cluster.pods.remove(pod)
                owner = (pod["metadata"].get("ownerReferences") or [{}])[0]
                node = pod["spec"]["nodeName"]
                if owner.get("kind") == "DaemonSet" and "nvidia-driver" in str(pod["metadata"]["labels"]):
                    # The DaemonSet controller recreates it from the current template, not Ready yet.
                    daemonset = owner["name"]
                    cluster.add(driver_pod(f"driver-{node}-{int(self.time)}", node, daemonset, ready=False,
                                           revision=self._revision(daemonset)))
                    if node not in self.never_ready:
                        self.pending[node] = self.time + self.ready_after
        for node, when in list(self.pending.items()):
            if when <= self.time:
                del self.pending[node]
                for pod in cluster.pods:
                    if pod["spec"]["nodeName"] == node and "nvidia-driver" in str(pod["metadata"]["labels"]):
                        pod["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        for name, node in cluster.nodes.items():
            node_labels = node["metadata"]["labels"]
            if node_labels.get(MIG_STATE) == "pending":
                done = self.mig_done_at.setdefault(name, self.time + 30)
                if done <= self.time:
                    node_labels[MIG_STATE] = "success"
                    del self.mig_done_at[name]
        self.check()

    # --- the invariants ---

    def out_of_service(self) -> set[str]:
        down = set()
        for name, node in self.cluster.nodes.items():
            if (node.get("spec") or {}).get("unschedulable") or node["metadata"]["labels"].get(MIG_STATE) == "pending":
                down.add(name)
                continue
            daemonset = node["metadata"]["labels"].get("gpu-stack/driver")
            if daemonset and not any(p["spec"]["nodeName"] == name and "nvidia-driver" in str(p["metadata"]["labels"])
                                     and not p["metadata"].get("deletionTimestamp")
                                     and p["status"]["conditions"][0]["status"] == "True" for p in self.cluster.pods):
                down.add(name)
        return down

    def limit(self) -> int:
        removal = self.config["removal"]
        bound = removal["maxUnavailable"]
        if isinstance(bound, str):
            bound = max(1, -(-len(self.cluster.nodes) * int(bound[:-1]) // 100))
        if removal.get("maxParallelUpgrades"):
            bound = min(bound, removal["maxParallelUpgrades"])
        return bound

    def check(self) -> None:
        down = self.out_of_service()
        holders = self.cluster.holders()
        self.peak = max(self.peak, len(down))
        self.outside_slot += [(self.time, n) for n in sorted(down - holders)]
        allowed = self.limit() if self.limit_floor is None else max(self.limit(), self.limit_floor)
        if len(down) > allowed:
            self.over_budget.append((self.time, len(down), allowed))
        if self.limit_floor is not None and len(holders) <= self.limit():
            self.limit_floor = None  # once below the new budget, it holds from then on

    def lower_budget(self, to: int) -> None:
        self.limit_floor = len(self.cluster.holders())
        self.config["removal"]["maxUnavailable"] = to

    def roll_driver(self, daemonset: str, digest: str, revision: str) -> None:
        """What `pulumi up` does for a new driver version: the config first (node-labeling comes first), then the
        OnDelete DaemonSet's template."""
        self.config["drivers"][daemonset] = digest
        self.cluster.put_daemonset(daemonset, digest, revision)

    def upgraded(self, daemonset: str) -> bool:
        revision = self.cluster.revision_of(daemonset)
        nodes = [n for n, node in self.cluster.nodes.items()
                 if node["metadata"]["labels"].get("gpu-stack/driver") == daemonset]
        ready = [p for p in self.cluster.pods if p["metadata"]["labels"].get("app") == daemonset
                 and p["metadata"]["labels"].get("controller-revision-hash") == revision
                 and p["status"]["conditions"][0]["status"] == "True"]
        return len(ready) >= len(nodes)

    def evicted_twice(self) -> list[str]:
        return sorted({ref for ref in self.cluster.evicted if self.cluster.evicted.count(ref) > 1})
