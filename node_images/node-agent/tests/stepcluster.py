"""Step by step: agents' passes and coordinator steps driven by hand against one counting API server
(simcluster.Server), for tests that pin one behaviour pass by pass. Time moves only when a test says
(``cluster.wait(seconds)``): terminating pods go after their grace period, DaemonSets are observed."""

from __future__ import annotations

import copy
import datetime
import json
from typing import Any, Mapping

from gpustack_agent.api import informer
from gpustack_agent.coordinate import coordinate, coordinator
from gpustack_agent.label import labelloop
from gpustack_agent.label.pacer import Pacer
from gpustack_agent.model import budget, labels
from simcluster import CONFIG_MAPS, DAEMON_SETS, NODES, PODS, Api, Hub, Server

NAMESPACE = "gpu-operator"
EPOCH = datetime.datetime(2025, 6, 2, 10, 0, tzinfo=datetime.timezone.utc)


class Recorder:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def __call__(self, record: dict[str, Any]) -> None:
        self.records.append(record)

    def events(self) -> list[str]:
        return [r["event"] for r in self.records]

    def last(self, event: str) -> dict[str, Any]:
        return [r for r in self.records if r["event"] == event][-1]


class Agent:
    """One node's label agent: a Pacer whose passes read the node from the server."""

    def __init__(self, cluster: "Cluster", node: str, *, skew: float = 0.0) -> None:
        self.cluster = cluster
        self.node = node
        self.log = Recorder()
        self.api = Api(cluster.server, f"agent/{node}")
        self.pacer = Pacer(self.api, self.api, node_name=node, log=self.log,
                           now=lambda: EPOCH + datetime.timedelta(seconds=cluster.hub.now + skew),
                           clock=lambda: cluster.hub.now, rng=lambda: 0.5)

    def reconcile(self, config: Mapping[str, Any] | labels.Config) -> labelloop.Next:
        """One pass: what the label loop does on an event of the Node or at a resync."""
        return self.pacer(self.api.read_node(self.node), config)

    def requests(self) -> int:
        return self.cluster.server.count([self.api.caller])

    def events(self) -> list[str]:
        return self.log.events()

    def last(self, event: str) -> dict[str, Any]:
        return self.log.last(event)


class Cluster:
    def __init__(self, nodes: list[dict[str, Any]] = (), pods: list[dict[str, Any]] = ()) -> None:  # type: ignore[assignment]
        self.hub = Hub()
        self.server = Server(self.hub)
        self.coordinator_log = Recorder()
        self.coordinator_api = Api(self.server, "coordinator")
        self.coordinator: coordinator.Coordinator | None = None
        for node in nodes:
            self.server.put(NODES, copy.deepcopy(node))
        for pod in pods:
            self.add(pod)

    # --- objects ---

    def add(self, *pods: dict[str, Any]) -> None:
        for pod in pods:
            pod = copy.deepcopy(pod)
            pod["metadata"].setdefault("namespace", NAMESPACE)
            self.server.put(PODS, pod)

    def node(self, name: str) -> dict[str, Any]:
        return self.server.objects[NODES][("", name)]

    def node_labels(self, name: str) -> dict[str, str]:
        return self.node(name)["metadata"].get("labels") or {}

    def annotations(self, name: str) -> dict[str, str]:
        return self.node(name)["metadata"].get("annotations") or {}

    def patch_node(self, name: str, patch: dict[str, Any]) -> None:
        """Someone else (a person, another controller) writes the node."""
        Api(self.server, "someone").patch_node(name, patch)

    def pods(self) -> list[dict[str, Any]]:
        return list(self.server.objects[PODS].values())

    def pod(self, name: str, namespace: str = NAMESPACE) -> dict[str, Any] | None:
        return self.server.get(PODS, namespace, name)

    def finish_pod(self, name: str, namespace: str) -> None:
        pod = self.server.get(PODS, namespace, name)
        assert pod is not None
        self.server.put(PODS, {**pod, "status": {**pod["status"], "phase": "Succeeded"}})

    def ready(self, name: str, namespace: str = NAMESPACE) -> None:
        pod = self.server.get(PODS, namespace, name)
        assert pod is not None
        self.server.put(PODS, {**pod, "status": {"phase": "Running",
                                                  "conditions": [{"type": "Ready", "status": "True"}]}})

    def budget(self) -> dict[str, Any] | None:
        return self.server.get(CONFIG_MAPS, NAMESPACE, budget.NAME)

    def holders(self) -> set[str]:
        return set(budget.holders(self.budget()))

    def holders_grant(self, node: str) -> str:
        """The grant the budget holds ``node``'s slot under."""
        return str(budget.holders(self.budget())[node].get("grant") or "")

    def put_budget(self, data: Mapping[str, Any]) -> None:
        """The budget as agents and coordinators before this test left it."""
        self.server.put(CONFIG_MAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                      "metadata": {"name": budget.NAME, "namespace": NAMESPACE},
                                      "data": {k: v if isinstance(v, str) else json.dumps(v) for k, v in data.items()}})

    def put_daemonset(self, name: str, digest: str, revision: str, *, config_digest: str | None = None) -> None:
        """A driver DaemonSet at ``revision`` (observed by its controller), its ControllerRevision and all."""
        current = self.server.get(DAEMON_SETS, NAMESPACE, name)
        generation = int(((current or {}).get("metadata") or {}).get("generation") or 0) + 1
        self.server.put(DAEMON_SETS, {
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": NAMESPACE, "generation": generation,
                         "labels": {"app": name, "app.kubernetes.io/component": "nvidia-driver"},
                         "annotations": {"gpu-stack/template-digest": digest}},
            "spec": {"selector": {"matchLabels": {"app": name}}, "updateStrategy": {"type": "OnDelete"}},
            "status": {"observedGeneration": generation}})
        number = 1 + max((int(r["revision"]) for r in self.server.revisions
                          if r["metadata"]["labels"]["app"] == name), default=0)
        self.server.revisions.append({
            "apiVersion": "apps/v1", "kind": "ControllerRevision", "revision": number,
            "data": {"spec": {"template": {"spec": {"containers": [{"name": "nvidia-driver-ctr", "env": [
                {"name": "DRIVER_CONFIG_DIGEST", "value": config_digest or revision}]}]}}}},
            "metadata": {"name": f"{name}-{revision}", "namespace": NAMESPACE,
                         "labels": {"app": name, "controller-revision-hash": revision},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": name,
                                              "uid": f"uid-{name}", "controller": True}]}})

    # --- time ---

    def wait(self, seconds: float) -> None:
        """Time passes: terminating pods whose grace ran out are gone."""
        self.hub.run(self.hub.now + seconds)

    # --- the coordinator ---

    def coordinate(self, config: Mapping[str, Any] | labels.Config) -> list[dict[str, Any]]:
        """One coordinator step on what it lists now (as after a restart, or on its informers' news); returns what it
        logged."""
        parsed = config if isinstance(config, labels.Config) else labels.parse_config(copy.deepcopy(config))
        state = coordinator.Coordinator(namespace=NAMESPACE, log=self.coordinator_log, clock=lambda: self.hub.now,
                                        now=lambda: EPOCH + datetime.timedelta(seconds=self.hub.now),
                                        rng=lambda: 0.25)
        if self.coordinator is not None:
            # The same process: its line keeps its order, its grants their numbering.
            state.line, state._grants, state.drains = self.coordinator.line, self.coordinator._grants, self.coordinator.drains
        for source in coordinate.sources(self.coordinator_api, self.coordinator_api, NAMESPACE):
            items, _ = source.list(self.coordinator_api.api_client)
            state.observe(source.name, informer.SYNC, items)
        before = len(self.coordinator_log.records)
        coordinate.Actions(self.coordinator_api, self.coordinator_api, state, self.coordinator_log).step(parsed)
        self.coordinator = state
        return self.coordinator_log.records[before:]
