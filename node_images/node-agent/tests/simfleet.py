"""A fleet of GPU nodes in virtual time: the real node agents and the real coordinator against one counting API
server (:mod:`simcluster`), with the controllers they wait for simulated, faults injected, and the budget's
invariants checked after every change.

Each node runs ``python -m gpustack_agent label`` as the agent runs it (``__main__.run_label_agent``: the label loop
and its Pacer) and, optionally, the ``inventory`` loop; one ``coordinate`` process grants slots. The simulated
controllers: the DaemonSet controller (a driver pod for every node its DaemonSet selects, created at the
DaemonSet's current revision; OnDelete, so an outdated pod stays until someone deletes it; pods removed from nodes
no longer selected), the kubelet (a pod deleted or evicted terminates for its grace period; a new driver pod runs
its init containers, then gets Ready once its startup probe, install and validation are through; the Node's status
is reported every five minutes), the MIG manager (a layout marked pending is applied after 30 s), kubelet's
ConfigMap volume sync (each process sees a new node-pools document up to a minute late), and `pulumi up` (the
node-pools document first, then the driver DaemonSets' templates).

Out of service, as the budget counts it: a node cordoned, with a MIG layout being applied, or with a managed driver
and no Ready driver pod of its DaemonSet. Every change is checked: no more nodes out of service than the budget,
none out of service without a slot; the peak and every job evicted are recorded, so that a test asserts on what
happened, not on what the agents believed.
"""

from __future__ import annotations

import datetime
import json
import random
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import greenlet
from kubernetes.client.exceptions import ApiException

from gpustack_agent import __main__ as agent_main
from gpustack_agent.coordinate import coordinate
from gpustack_agent.model import budget, labels, removal
from gpustack_agent.inventory import loop
from simcluster import CONFIG_MAPS, DAEMON_SETS, NODES, PODS, Api, GreenRuntime, Hub, Server

NAMESPACE = "gpu-operator"
MIG_CONFIG, MIG_STATE = "nvidia.com/mig.config", "nvidia.com/mig.config.state"
DRIVER_LABEL, DRIVER_DEPLOY = "gpu-stack/driver", "nvidia.com/gpu.deploy.driver"
COMPONENT_LABEL, DRIVER_COMPONENT = "app.kubernetes.io/component", "nvidia-driver"
VIRT_LAUNCHER = "virt-launcher"
SANDBOX_VALIDATOR = "nvidia-sandbox-validator"
LIVE_MIGRATE = "sim.kubevirt.io/evictionStrategy"
REVISION_HASH = "controller-revision-hash"
EPOCH = datetime.datetime(2026, 11, 27, 12, 0, tzinfo=datetime.timezone.utc)


@dataclass(frozen=True)
class StepTimes:
    """How long what the agents wait for takes (fact sheet Appendix E, §2.3, §3, §5.3), and one assumption: 240 s
    to build and load a managed driver."""

    job_grace_s: float = 30.0  # terminationGracePeriodSeconds default of an evicted GPU job
    old_pod_stop_s: float = 10.0  # the old driver pod's preStop and exit
    pod_create_s: float = 1.0  # the DaemonSet controller notices and creates the pod
    operand_stop_s: float = 30.0  # k8s-driver-manager waits for operand pods to exit (§5.3 step 5)
    unload_s: float = 10.0  # module unload and rootfs unmount (§5.3 step 9)
    install_s: float = 240.0  # assumption: build and load a managed driver; not in the fact sheet
    probe_delay_s: float = 60.0  # startup probe initialDelaySeconds, managed driver (§2.3)
    probe_period_s: float = 10.0
    validation_s: float = 60.0  # toolkit restart and the validator's driver, toolkit, cuda and plugin checks
    mig_apply_s: float = 30.0
    migration_s: float = 60.0  # a VM's live migration to another node
    status_report_s: float = 300.0  # kubelet's nodeStatusReportFrequency
    config_sync_s: float = 60.0  # kubelet's ConfigMap volume sync, at most

    def init_s(self) -> float:
        return self.operand_stop_s + self.unload_s

    def ready_after_start(self) -> float:
        """From a new driver pod's creation to Ready (its readiness probe passes once the validator did)."""
        probes = max(0, -(-(self.install_s - self.probe_delay_s) // self.probe_period_s))
        started = self.init_s() + self.probe_delay_s + probes * self.probe_period_s
        return started + -(-self.validation_s // self.probe_period_s) * self.probe_period_s


class ConfigFeed:
    """The node-pools document as each process's mounted file shows it: a new version reaches each reader after its
    own sync delay."""

    def __init__(self, hub: Hub, document: dict[str, Any], rng: random.Random, sync_s: float) -> None:
        self.hub, self.rng, self.sync_s = hub, rng, sync_s
        self.versions: list[tuple[float, dict[str, Any], labels.Config]] = []
        self.lag: dict[str, float] = {}
        self.publish(document, at_once=True)

    def publish(self, document: dict[str, Any], at_once: bool = False) -> None:
        self.versions.append((float("-inf") if at_once else self.hub.now, json.loads(json.dumps(document)),
                              labels.parse_config(document)))

    @property
    def document(self) -> dict[str, Any]:
        return json.loads(json.dumps(self.versions[-1][1]))

    def reader(self, name: str) -> Callable[[], labels.Config]:
        lag = self.lag.setdefault(name, self.rng.uniform(0, self.sync_s))

        def load() -> labels.Config:
            seen = self.hub.now - lag
            for published, _, config in reversed(self.versions):
                if published <= seen:
                    return config
            return self.versions[0][2]
        return load


class Fleet:
    def __init__(self, document: dict[str, Any], nodes: Mapping[str, Mapping[str, Any]], *,
                 drivers: Mapping[str, tuple[str, str]], jobs: Iterable[str] = (), seed: int = 1,
                 skew_seconds: float = 600.0, steps: StepTimes = StepTimes(), resync_seconds: int = 900,
                 inventory: Callable[[], Any] | None = None, inventory_seconds: int = 900,
                 never_ready: Iterable[str] = ()) -> None:
        self.hub = Hub()
        self.server = Server(self.hub)
        self.rng = random.Random(seed)
        self.steps = steps
        self.resync_seconds = resync_seconds
        self.namespace = document["removal"]["namespace"] if document.get("removal") else NAMESPACE
        self.feed = ConfigFeed(self.hub, document, self.rng, steps.config_sync_s)
        self.skews = {name: self.rng.uniform(-skew_seconds, skew_seconds) for name in nodes}
        self.agents: dict[str, greenlet.greenlet] = {}
        self.inventories: dict[str, greenlet.greenlet] = {}
        self.coordinators: list[GreenRuntime] = []
        self.coordinator_tasks: list[greenlet.greenlet] = []
        self.logs: dict[str, list[dict[str, Any]]] = {}
        self.inventory = inventory
        self.inventory_seconds = inventory_seconds
        self.jobs_on = set(jobs)
        # Nodes whose new driver pod never gets Ready (a driver that does not build on them).
        self.never_ready = set(never_ready)
        self._invariants = Invariants(self)
        self.server.on_evict = self._kubevirt_eviction
        # (VM, from node, to node) of every live migration done, and the VMs being migrated now.
        self.migrations: list[tuple[str, str, str]] = []
        self._migrating: set[str] = set()
        self.server.observers += [self._daemonset_controller, self._mig_manager, self._invariants.observe,
                                  self._invariants.gpu_work]
        for name, (digest, revision) in drivers.items():
            self.put_daemonset(name, digest, revision)
        for name, metadata in nodes.items():
            self._add_node(name, metadata)
        for name in nodes:
            self.hub.at(self.rng.uniform(0, steps.status_report_s), lambda name=name: self._report_status(name))

    # --- objects ------------------------------------------------------------------------------------------

    def _add_node(self, name: str, metadata: Mapping[str, Any]) -> None:
        self.server.put(NODES, {"apiVersion": "v1", "kind": "Node",
                                "metadata": {"name": name, "labels": dict(metadata.get("labels") or {}),
                                             "annotations": dict(metadata.get("annotations") or {})},
                                "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
        if name in self.jobs_on:
            self.add_job(name)

    def add_job(self, node: str, name: str | None = None, namespace: str = "ml-team") -> None:
        job = name or f"job-{node}"
        self.server.put(PODS, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": job, "namespace": namespace, "labels": {"app": "training"},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": job,
                                              "controller": True}]},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": self.steps.job_grace_s,
                     "containers": [{"name": "main", "image": "registry.example/train:1",
                                     "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})

    def add_vm(self, node: str, name: str, *, migratable: bool, resource: str = "nvidia.com/NVIDIA_A10-12Q") -> None:
        """A running KubeVirt VM's virt-launcher pod on ``node``, holding a vGPU; ``migratable``: its
        evictionStrategy is LiveMigrate."""
        self.server.put(PODS, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{VIRT_LAUNCHER}-{name}-{int(self.hub.now)}", "namespace": "vms",
                         "labels": {"kubevirt.io": VIRT_LAUNCHER, "vm.kubevirt.io/name": name},
                         "annotations": {LIVE_MIGRATE: "LiveMigrate" if migratable else "None"},
                         "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                                              "name": name, "uid": name, "controller": True}]},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 30,
                     "containers": [{"name": "compute", "image": "virt-launcher:1",
                                     "resources": {"limits": {resource: "1"}}}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})

    def vms(self) -> dict[str, str]:
        """Each running VM (not a terminating launcher) and the node it runs on."""
        return {p["metadata"]["labels"]["vm.kubevirt.io/name"]: p["spec"]["nodeName"]
                for p in self.server.objects[PODS].values()
                if p["metadata"]["labels"].get("kubevirt.io") == VIRT_LAUNCHER
                and not p["metadata"].get("deletionTimestamp")}

    def _kubevirt_eviction(self, namespace: str, name: str) -> None:
        """KubeVirt's admission of an eviction of a virt-launcher pod: a VM whose evictionStrategy is LiveMigrate is
        migrated instead (429: the pod goes once the VM runs elsewhere); any other goes as the eviction asks."""
        pod = self.server.get(PODS, namespace, name)
        if pod is None or pod["metadata"].get("annotations", {}).get(LIVE_MIGRATE) != "LiveMigrate":
            return
        vm = pod["metadata"]["labels"]["vm.kubevirt.io/name"]
        if vm not in self._migrating:
            self._migrating.add(vm)
            self.hub.at(self.hub.now + self.steps.migration_s, lambda: self._migrated(namespace, name, vm))
        raise ApiException(status=429, reason="Eviction triggered evacuation of VMI")

    def _migrated(self, namespace: str, name: str, vm: str) -> None:
        self._migrating.discard(vm)
        pod = self.server.get(PODS, namespace, name)
        if pod is None:
            return
        source = pod["spec"]["nodeName"]
        pool = self.node(source)["metadata"]["labels"].get(labels.POOL_LABEL)
        targets = sorted(n["metadata"]["name"] for n in self.server.objects[NODES].values()
                         if n["metadata"]["name"] != source and not (n.get("spec") or {}).get("unschedulable")
                         and n["metadata"]["labels"].get(labels.POOL_LABEL) == pool)
        if not targets:
            return  # nowhere to go: the migration fails, and the eviction is asked again
        target = targets[self.rng.randrange(len(targets))]
        self.add_vm(target, vm, migratable=True, resource=next(iter(
            pod["spec"]["containers"][0]["resources"]["limits"])))
        self.migrations.append((vm, source, target))
        self.server.put(PODS, {**pod, "spec": {**pod["spec"], "terminationGracePeriodSeconds": 5}})
        self.server.terminate_pod(namespace, name)

    def put_daemonset(self, name: str, digest: str, revision: str, *, observed_after: float = 1.0,
                      component: str | None = None, deploy_label: str | None = None) -> None:
        """A driver-like DaemonSet whose template (digest) is at ``revision``: what `pulumi up` writes, and the
        ControllerRevision the DaemonSet controller makes of it once it observed the new generation. A driver
        DaemonSet selects the nodes its `gpu-stack/driver` label names; a vGPU or VFIO manager's (another
        ``component``) selects by its ``deploy_label`` alone, as NVIDIA's assets do."""
        current = self.server.get(DAEMON_SETS, self.namespace, name)
        generation = int(((current or {}).get("metadata") or {}).get("generation") or 0) + 1
        if current is not None:  # a new template of the same DaemonSet: its pods' labels and selection stay
            component = component or current["metadata"]["labels"][COMPONENT_LABEL]
            deploy_label = deploy_label or next(iter(current["spec"]["template"]["spec"]["nodeSelector"]))
        component, deploy_label = component or DRIVER_COMPONENT, deploy_label or DRIVER_DEPLOY
        self.server.put(DAEMON_SETS, {
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": self.namespace, "generation": generation,
                         "labels": {"app": name, COMPONENT_LABEL: component},
                         "annotations": {"gpu-stack/template-digest": digest}},
            "spec": {"selector": {"matchLabels": {"app": name}}, "updateStrategy": {"type": "OnDelete"},
                     "template": {"metadata": {"labels": {"app": name, COMPONENT_LABEL: component}},
                                  "spec": {"nodeSelector": {deploy_label: "true"}}}},
            "status": {"observedGeneration": generation - 1}})

        def observe() -> None:
            found = self.server.get(DAEMON_SETS, self.namespace, name)
            if found is None or found["metadata"]["generation"] != generation:
                return
            number = 1 + max((int(r["revision"]) for r in self.server.revisions
                              if r["metadata"]["labels"]["app"] == name), default=0)
            if not any(r["metadata"]["labels"][REVISION_HASH] == revision and r["metadata"]["labels"]["app"] == name
                       for r in self.server.revisions):
                self.server.revisions.append({
                    "apiVersion": "apps/v1", "kind": "ControllerRevision", "revision": number,
                    "data": {"spec": {"template": {"spec": {"containers": [{"name": "nvidia-driver-ctr", "env": [
                        {"name": "DRIVER_CONFIG_DIGEST", "value": revision}]}]}}}},
                    "metadata": {"name": f"{name}-{revision}", "namespace": self.namespace,
                                 "labels": {"app": name, REVISION_HASH: revision},
                                 "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": name,
                                                      "uid": f"uid-{name}", "controller": True}]}})
            else:
                for r in self.server.revisions:
                    if r["metadata"]["labels"]["app"] == name and r["metadata"]["labels"][REVISION_HASH] == revision:
                        r["revision"] = number
            self.server.put(DAEMON_SETS, {**found, "status": {"observedGeneration": generation}})
        if observed_after <= 0:
            observe()
        else:
            self.hub.at(self.hub.now + observed_after, observe)

    def revision_of(self, daemonset: str) -> str:
        owned = [r for r in self.server.revisions if r["metadata"]["labels"]["app"] == daemonset]
        return max(owned, key=lambda r: r["revision"])["metadata"]["labels"][REVISION_HASH]

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        return [self.server.objects[PODS][k] for k in self.server.pods_on.get(node, ())]

    def node(self, name: str) -> dict[str, Any]:
        return self.server.objects[NODES][("", name)]

    def holders(self) -> set[str]:
        return set(budget.holders(self.server.get(CONFIG_MAPS, self.namespace, budget.NAME)))

    # --- processes ----------------------------------------------------------------------------------------

    def start(self) -> None:
        self._invariants.reset()
        for name in sorted(self.server.objects[NODES]):
            self.start_agent(name[1])
            if self.inventory is not None:
                self.start_inventory(name[1])
        self.start_coordinator()

    def _log(self, name: str) -> Callable[[dict[str, Any]], None]:
        records = self.logs.setdefault(name, [])
        return records.append

    def start_agent(self, name: str) -> None:
        api = Api(self.server, f"agent/{name}")
        skew = self.skews.get(name, 0.0)
        task_rng = random.Random(self.rng.random())

        def run() -> None:
            agent_main.run_label_agent(
                api, api, node_name=name, load_config=self.feed.reader(f"agent/{name}"),
                resync_seconds=self.resync_seconds, log=self._log(f"agent/{name}"),
                now=lambda: EPOCH + datetime.timedelta(seconds=self.hub.now + skew),
                clock=lambda: self.hub.now, rng=task_rng.random, sleep=self.hub.sleep)
        self.agents[name] = self.hub.spawn(run, f"agent/{name}")

    def start_inventory(self, name: str) -> None:
        api = Api(self.server, f"inventory/{name}")
        task_rng = random.Random(self.rng.random())
        assert self.inventory is not None
        read = self.inventory

        def run() -> None:
            self.hub.sleep(task_rng.uniform(0, self.inventory_seconds))
            loop.run_inventory_loop(api, node_name=name, load_config=self.feed.reader(f"inventory/{name}"),
                                    read_inventory=read, resync_seconds=self.inventory_seconds,
                                    log=self._log(f"inventory/{name}"), sleep=self.hub.sleep, rng=task_rng.random)
        self.inventories[name] = self.hub.spawn(run, f"inventory/{name}")

    def restart_agent(self, name: str) -> None:
        """The agent's process dies (nothing after its last request happens) and a new one starts."""
        self.hub.kill(self.agents[name])
        self.start_agent(name)

    def start_coordinator(self) -> None:
        api = Api(self.server, "coordinator")
        runtime = GreenRuntime(self.hub, "coordinator")
        task_rng = random.Random(self.rng.random())
        load = self.feed.reader("coordinator")

        def run() -> None:
            coordinate.run(api, api, namespace=self.namespace, load_config=load, log=self._log("coordinator"),
                            sleep=self.hub.sleep, clock=lambda: self.hub.now,
                            now=lambda: EPOCH + datetime.timedelta(seconds=self.hub.now), rng=task_rng.random,
                            runtime=runtime)
        self.coordinators.append(runtime)
        self.coordinator_tasks.append(self.hub.spawn(run, "coordinator"))

    def restart_coordinator(self) -> None:
        for task in self.coordinator_tasks:
            self.hub.kill(task)
        for runtime in self.coordinators:
            for task in runtime.tasks:
                self.hub.kill(task)
        self.coordinators, self.coordinator_tasks = [], []
        self.start_coordinator()

    def delete_node(self, name: str) -> None:
        """The Node object is deleted (autoscaling, a spot reclaim): its pods and processes go with it."""
        for task in (self.agents.pop(name, None), self.inventories.pop(name, None)):
            if task is not None:
                self.hub.kill(task)
        for pod in list(self.pods_on(name)):
            self.server.delete(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"])
        self.server.delete(NODES, "", name)

    # --- pulumi up ----------------------------------------------------------------------------------------

    def publish(self, document: dict[str, Any]) -> None:
        self.feed.publish(document)

    def roll_drivers(self, targets: Mapping[str, tuple[str, str]]) -> None:
        """`pulumi up` with new driver templates: the node-pools document first (node labelling comes first in the
        state order), then each DaemonSet's template."""
        document = self.feed.document
        for name, (digest, _) in targets.items():
            document.setdefault("drivers", {})[name] = digest
        self.publish(document)
        for name, (digest, revision) in targets.items():
            self.put_daemonset(name, digest, revision)

    # --- the simulated controllers ------------------------------------------------------------------------

    def _driver_sets(self) -> list[dict[str, Any]]:
        return list(self.server.objects[DAEMON_SETS].values())

    def _daemonset_controller(self, kind: str, old: Any, new: Any) -> None:
        if kind == PODS and new is None and old is not None:
            node = old["spec"].get("nodeName")
            if _driver_like(old) and node:
                self.hub.at(self.hub.now + self.steps.pod_create_s, lambda: self._sync_node_drivers(node))
        elif kind == NODES and new is not None and old is not None and (
                old["metadata"].get("labels") != new["metadata"].get("labels")):
            name = new["metadata"]["name"]
            self.hub.at(self.hub.now + self.steps.pod_create_s, lambda: self._sync_node_drivers(name))

    def _sync_node_drivers(self, node: str) -> None:
        found = self.server.get(NODES, "", node)
        node_labels = (found or {}).get("metadata", {}).get("labels") or {}
        pods = [p for p in self.pods_on(node) if _driver_like(p)]
        for daemonset in self._driver_sets():
            name = daemonset["metadata"]["name"]
            template = daemonset["spec"]["template"]
            wanted = template["spec"]["nodeSelector"]
            selected = found is not None and all(node_labels.get(k) == v for k, v in wanted.items()) and (
                template["metadata"]["labels"].get(COMPONENT_LABEL) != DRIVER_COMPONENT
                or node_labels.get(DRIVER_LABEL) == name)
            mine = [p for p in pods if (p["metadata"].get("ownerReferences") or [{}])[0].get("name") == name]
            if selected and not mine:
                self._create_driver_pod(node, name)
            elif not selected:
                for pod in mine:
                    self.server.terminate_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])

    def _create_driver_pod(self, node: str, daemonset: str, *, ready: bool = False) -> None:
        revision = self.revision_of(daemonset)
        found = self.server.get(DAEMON_SETS, self.namespace, daemonset)
        template = found["spec"]["template"] if found else {"metadata": {"labels": {}}, "spec": {}}
        name = f"{daemonset}-{node}-{int(self.hub.now * 1000)}"
        manager = template["metadata"]["labels"].get(COMPONENT_LABEL, DRIVER_COMPONENT) != DRIVER_COMPONENT
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": self.namespace, "creationTimestamp": self.timestamp(),
                            "labels": {"app": daemonset,
                                       COMPONENT_LABEL: template["metadata"]["labels"].get(COMPONENT_LABEL,
                                                                                           DRIVER_COMPONENT),
                                       REVISION_HASH: revision},
                            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": daemonset,
                                                 "uid": f"uid-{daemonset}", "controller": True}]},
               "spec": {"nodeName": node, "terminationGracePeriodSeconds": self.steps.old_pod_stop_s,
                        "nodeSelector": dict(template["spec"].get("nodeSelector") or {DRIVER_DEPLOY: "true"}),
                        "containers": [{"name": "nvidia-driver-ctr", "image": f"driver:{revision}",
                                        "env": [{"name": "DRIVER_CONFIG_DIGEST", "value": revision}]}]},
               "status": {"phase": "Running" if ready else "Pending",
                          "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}
        self.server.put(PODS, pod)
        if ready:
            if manager:
                self._sandbox_validator(node, ready=True)
            return
        if manager:
            self._pause_sandbox_validator(node)

        def running() -> None:
            current = self.server.get(PODS, self.namespace, name)
            if current is not None and not current["metadata"].get("deletionTimestamp"):
                # A vGPU or VFIO manager has no probe: Ready once running; its validation is the sandbox validator's.
                self.server.put(PODS, {**current, "status": {"phase": "Running", "conditions": [
                    {"type": "Ready", "status": "True" if manager else "False"}]}})
                if manager:
                    self._sandbox_validator(node, ready=False)

        def ready_now() -> None:
            current = self.server.get(PODS, self.namespace, name)
            if current is not None and not current["metadata"].get("deletionTimestamp") and node not in self.never_ready:
                self.server.put(PODS, {**current, "status": {"phase": "Running", "conditions": [
                    {"type": "Ready", "status": "True"}]}})
        self.hub.at(self.hub.now + self.steps.init_s(), running)
        self.hub.at(self.hub.now + self.steps.ready_after_start(), ready_now)

    def timestamp(self) -> str:
        return (EPOCH + datetime.timedelta(seconds=self.hub.now)).strftime("%Y-%m-%dT%H:%M:%SZ")

    def _pause_sandbox_validator(self, node: str) -> None:
        """k8s-driver-manager in a new vGPU or VFIO manager pod pauses the node's sandbox validator (§5.3 step 4)."""
        for pod in self.pods_on(node):
            if pod["metadata"]["labels"].get("app") == SANDBOX_VALIDATOR and not pod["metadata"].get(
                    "deletionTimestamp"):
                self.server.terminate_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])

    def _sandbox_validator(self, node: str, *, ready: bool) -> None:
        """The sandbox validator pod, created once the labels are restored; its init containers pass once the
        manager loaded the host driver."""
        name = f"{SANDBOX_VALIDATOR}-{node}-{int(self.hub.now * 1000)}"
        self.server.put(PODS, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": self.namespace, "creationTimestamp": self.timestamp(),
                         "labels": {"app": SANDBOX_VALIDATOR},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": SANDBOX_VALIDATOR,
                                              "uid": f"uid-{SANDBOX_VALIDATOR}", "controller": True}]},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 5,
                     "containers": [{"name": "nvidia-sandbox-validator", "image": "validator:1"}]},
            "status": {"phase": "Running" if ready else "Pending",
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}})
        if ready:
            return

        def validated() -> None:
            current = self.server.get(PODS, self.namespace, name)
            if current is not None and not current["metadata"].get("deletionTimestamp") and (
                    node not in self.never_ready):
                self.server.put(PODS, {**current, "status": {"phase": "Running", "conditions": [
                    {"type": "Ready", "status": "True"}]}})
        self.hub.at(self.hub.now + self.steps.install_s + self.steps.validation_s, validated)

    def _mig_manager(self, kind: str, old: Any, new: Any) -> None:
        if kind != NODES or new is None:
            return
        if new["metadata"].get("labels", {}).get(MIG_STATE) == "pending" and (
                (old or {}).get("metadata", {}).get("labels", {}).get(MIG_STATE) != "pending"):
            name = new["metadata"]["name"]

            def applied() -> None:
                current = self.server.get(NODES, "", name)
                if current is not None and current["metadata"]["labels"].get(MIG_STATE) == "pending":
                    self.server.put(NODES, {**current, "metadata": {**current["metadata"], "labels": {
                        **current["metadata"]["labels"], MIG_STATE: "success"}}})
            self.hub.at(self.hub.now + self.steps.mig_apply_s, applied)

    def _report_status(self, name: str) -> None:
        """The kubelet's periodic status report: an event on the Node with no change any agent cares about."""
        current = self.server.get(NODES, "", name)
        if current is None:
            return
        self.server.put(NODES, {**current, "status": {**current["status"], "heartbeat": self.hub.now}})
        self.hub.at(self.hub.now + self.steps.status_report_s, lambda: self._report_status(name))

    def settle_driver_pods(self) -> None:
        """Before the agents start: every selected node runs a Ready driver pod at its DaemonSet's revision."""
        for (_, node), found in list(self.server.objects[NODES].items()):
            node_labels = found["metadata"]["labels"]
            if removal.runs_driver_like(node_labels) and node_labels.get(DRIVER_LABEL):
                self._create_driver_pod(node, node_labels[DRIVER_LABEL], ready=True)

    # --- the invariants -----------------------------------------------------------------------------------

    @property
    def peak(self) -> int:
        return self._invariants.peak

    @property
    def over_budget(self) -> list[tuple[float, int, int]]:
        return self._invariants.over_budget

    @property
    def outside_slot(self) -> list[tuple[float, str]]:
        return self._invariants.outside_slot

    def out_of_service(self) -> set[str]:
        return set(self._invariants.down)

    def lower_budget(self, to: Any) -> None:
        self._invariants.floor = len(self.holders())
        document = self.feed.document
        document["removal"]["maxUnavailable"] = to
        self.publish(document)

    @property
    def under_gpu_work(self) -> list[tuple[float, str, str]]:
        return self._invariants.under_gpu_work

    def finish_job(self, node: str, name: str | None = None, namespace: str = "ml-team") -> None:
        """The node's GPU job completes."""
        job = self.server.get(PODS, namespace, name or f"job-{node}")
        if job is not None:
            self.server.put(PODS, {**job, "status": {**job["status"], "phase": "Succeeded"}})

    def evicted_twice(self) -> list[str]:
        seen = self.server.evictions
        return sorted({ref for ref in seen if seen.count(ref) > 1})

    def upgraded(self, daemonset: str, revision: str) -> bool:
        """Every node of ``daemonset`` runs a Ready driver pod at ``revision``."""
        for (_, name), found in self.server.objects[NODES].items():
            if found["metadata"]["labels"].get(DRIVER_LABEL) != daemonset:
                continue
            if not any(p["metadata"]["labels"].get(REVISION_HASH) == revision and _ready(p)
                       for p in self.pods_on(name)):
                return False
        return True

    def settled(self) -> bool:
        return not self.holders() and not self._invariants.down


def labelled_nodes(document: Mapping[str, Any], base_labels: Mapping[str, str],
                   pools: Mapping[str, int]) -> dict[str, dict[str, Any]]:
    """``count`` nodes of each pool, named ``<pool>-<i>``, labelled as their agents would have labelled them under
    ``document`` (pool labels, deploy labels, their driver DaemonSet, the record of what the agent applied)."""
    selectors = {p["name"]: p["nodeSelector"] for p in document["pools"]}
    config = labels.parse_config(document)
    nodes: dict[str, dict[str, Any]] = {}
    for pool, count in pools.items():
        for i in range(count):
            name = f"{pool}-{i:04d}"
            node = {"metadata": {"name": name, "labels": {**base_labels, **selectors[pool],
                                                          "kubernetes.io/hostname": name},
                                 "annotations": {}}}
            node["metadata"]["labels"].pop(labels.POOL_LABEL, None)
            patch = labels.desired_patch(node, config) or {"metadata": {}}
            for section in ("labels", "annotations"):
                for key, value in (patch["metadata"].get(section) or {}).items():
                    if value is None:
                        node["metadata"][section].pop(key, None)
                    else:
                        node["metadata"][section][key] = value
            if MIG_CONFIG in node["metadata"]["labels"]:
                node["metadata"]["labels"][MIG_STATE] = "success"
            nodes[name] = node["metadata"]
    return nodes


def _driver_like(pod: Mapping[str, Any]) -> bool:
    """A pod of a driver-like DaemonSet (a driver, a vGPU or VFIO manager): the fleet's are all in its namespace."""
    return pod["metadata"].get("namespace") == NAMESPACE and pod["metadata"]["labels"].get("app") != (
        SANDBOX_VALIDATOR) and any(r.get("kind") == "DaemonSet" for r in pod["metadata"].get("ownerReferences") or [])


def _gpu_job(pod: Mapping[str, Any]) -> bool:
    """A GPU pod of a user that is still running (not one terminating: it was drained or waited for)."""
    if pod["metadata"].get("deletionTimestamp") or pod["status"].get("phase") in ("Succeeded", "Failed"):
        return False
    return any(k.startswith("nvidia.com/") for c in pod["spec"].get("containers") or []
               for k in ((c.get("resources") or {}).get("limits") or {}))


def _ready(pod: Mapping[str, Any]) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in pod["status"].get("conditions") or [])


class Invariants:
    """Out of service, tracked per node on every change; the budget checked against it."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.down: set[str] = set()
        self.peak = 0
        self.over_budget: list[tuple[float, int, int]] = []
        self.outside_slot: list[tuple[float, str]] = []
        self.floor: int | None = None
        self.holders: set[str] = set()
        # Nodes with a managed driver: what a percentage budget counts.
        self.managed: set[str] = set()
        self._outside: set[str] = set()
        # (time, node, what) for every driver pod deleted and every MIG relayout started under running GPU work.
        self.under_gpu_work: list[tuple[float, str, str]] = []

    def gpu_work(self, kind: str, old: Any, new: Any) -> None:
        """A driver pod that starts terminating, or a MIG layout that starts being applied, while a GPU pod runs on
        the node: work taken from under."""
        if kind == PODS and new is not None and new["metadata"].get("deletionTimestamp") and not (
                (old or {}).get("metadata") or {}).get("deletionTimestamp") and _driver_like(new):
            node, what = new["spec"]["nodeName"], f"driver pod {new['metadata']['name']} deleted"
        elif kind == NODES and new is not None and new["metadata"].get("labels", {}).get(MIG_STATE) == "pending" and (
                (old or {}).get("metadata", {}).get("labels", {}).get(MIG_STATE) != "pending"):
            node, what = new["metadata"]["name"], "MIG relayout started"
        else:
            return
        running = [p["metadata"]["name"] for p in self.fleet.pods_on(node) if _gpu_job(p)]
        if running:
            self.under_gpu_work.append((self.fleet.hub.now, node, f"{what} under {', '.join(running)}"))

    def reset(self) -> None:
        """Judge every node afresh and forget what setting the fleet up looked like."""
        for (_, name), found in self.fleet.server.objects[NODES].items():
            if (found["metadata"].get("labels") or {}).get(DRIVER_LABEL):
                self.managed.add(name)
            self._judge(name)
        self.peak, self.over_budget, self.outside_slot = len(self.down), [], []
        self._outside = self.down - self.holders

    def _is_down(self, name: str) -> bool:
        found = self.fleet.server.get(NODES, "", name)
        if found is None:
            return False
        node_labels = found["metadata"].get("labels") or {}
        if (found.get("spec") or {}).get("unschedulable") or node_labels.get(MIG_STATE) == "pending":
            return True
        daemonset = node_labels.get(DRIVER_LABEL)
        if not daemonset or not removal.runs_driver_like(node_labels):
            return False
        return not any((p["metadata"].get("ownerReferences") or [{}])[0].get("name") == daemonset and _ready(p)
                       for p in self.fleet.pods_on(name))

    def limit(self) -> int:
        rules = self.fleet.feed.versions[-1][2].removal
        assert rules is not None
        return budget.Limits(rules.max_unavailable, rules.max_parallel).slots(len(self.managed))

    def observe(self, kind: str, old: Any, new: Any) -> None:
        obj = new if new is not None else old
        if kind == CONFIG_MAPS and obj["metadata"]["name"] == budget.NAME:
            before, self.holders = self.holders, set(((new or {}).get("data") or {}))
            self._check(before - self.holders)
        elif kind == NODES:
            name = obj["metadata"]["name"]
            if old is not None and new is not None and old["metadata"].get("labels") is new["metadata"].get(
                    "labels") and old.get("spec") is new.get("spec"):
                return  # a status report: nothing the budget counts changed
            if new is not None and (new["metadata"].get("labels") or {}).get(DRIVER_LABEL):
                self.managed.add(name)
            else:
                self.managed.discard(name)
            self._judge(name)
            self._check({name})
        elif kind == PODS and obj["spec"].get("nodeName"):
            self._judge(obj["spec"]["nodeName"])
            self._check({obj["spec"]["nodeName"]})

    def _judge(self, name: str) -> None:
        if self._is_down(name):
            self.down.add(name)
        else:
            self.down.discard(name)

    def _check(self, touched: set[str]) -> None:
        """The nodes ``touched`` (judged again, or no longer holding a slot) and the count of those down."""
        now = self.fleet.hub.now
        self.peak = max(self.peak, len(self.down))
        for name in sorted(touched):
            outside = name in self.down and name not in self.holders
            if outside and name not in self._outside:
                self.outside_slot.append((now, name))
            (self._outside.add if outside else self._outside.discard)(name)
        if self.fleet.feed.versions[-1][2].removal is None:
            return
        limit = self.limit()
        allowed = limit if self.floor is None else max(limit, self.floor)
        if len(self.down) > allowed:
            self.over_budget.append((now, len(self.down), allowed))
        if self.floor is not None and len(self.holders) <= limit:
            self.floor = None  # once below the new budget, it holds from then on
