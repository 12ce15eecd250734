"""One node's disruptions, paced by the fleet's budget: the requests behind :mod:`.removal` and :mod:`.upgrade`.

A :class:`Pacer` is the label loop's reconcile for one node (``kube.run_label_loop(reconcile=pacer)``). With a
version 1 config it applies every change at once, as agents before 0.4.0 did. With ``removal`` (versions 2 and 3)
each change that takes the node (or part of it) out of service waits for a slot of the budget (:mod:`.slots`):

- label changes (:func:`removal.plan`): what needs no slot is applied at once; a deploy label removal, a driver
  handover or a MIG relayout takes a slot, waits for GPU work to end (or drains it, cordoned first), is applied,
  and holds the slot until the node is through (:func:`removal.hold_reasons`);
- a driver upgrade (version 3, ``driverUpgrade: rolling``): when the node's driver pod is out of date
  (:mod:`.upgrade`), the node takes a slot, is cordoned, its GPU pods are evicted (or waited for), its driver pod
  is deleted so that the OnDelete DaemonSet creates the new one, and once that one is Ready (its readiness probe
  waits for the validator) the node is uncordoned and the slot given back. A new driver not Ready within
  ``nodeReadyTimeoutSeconds`` leaves the node cordoned and its slot marked failed, which halts the rollout.

A node shows its step in ``gpu-stack/upgrade-state``. Waiting costs the API server almost nothing: a waiting node
reads the budget on its own jittered timer (:func:`slots.waiting_poll_seconds`) or when a node that freed a slot
wakes it, never on every event of its Node; an idle node sends no request at all in a pass.
"""

from __future__ import annotations

import datetime
import json
import random
import time
from typing import Any, Callable, Mapping, Sequence

from kubernetes.client.exceptions import ApiException

from . import budget, kube, labels, removal, slots, upgrade
from . import pods as podinfo

Now = Callable[[], datetime.datetime]
# An idle node looks at its pods (orphaned driver pods, an outdated driver) this often even without a reason: the
# safety net under the config digest and the node's own events, which normally say when to look.
RECHECK_SECONDS = 1800.0
# While a holder waits for something the DaemonSet controller or the kubelet does (pods leaving, the new driver
# getting Ready), it watches its node's pods and looks again on their events; this bound is only the safety net,
# kept long so that 1,000 holders re-establish their watches at under 2 requests/s.
HOLD_WATCH_SECONDS = 600


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


class Pacer:
    """Reconciles one node, pacing its disruptions; keeps between passes what it learnt (its slot, the driver
    DaemonSets' current revisions, the pods it evicted) and when it next needs to look."""

    def __init__(self, core: Any, apps: Any, *, node_name: str, log: kube.Log, now: Now = utc_now,
                 clock: Callable[[], float] = time.monotonic, rng: Callable[[], float] = random.random) -> None:
        self.core = core
        self.apps = apps
        self.node_name = node_name
        self.log = log
        self.now = now
        self.clock = clock
        self.rng = rng
        self.slots = slots.Slots(core, node_name=node_name, log=log, now=now, clock=clock, rng=rng)
        # The reason of the slot this node holds; None while it holds none.
        self.holding: str | None = None
        self.resumed = False
        self.revisions: dict[tuple[str, str], str] = {}
        self.config_digests: dict[tuple[str, str], str | None] = {}
        self.evicted: set[str] = set()
        self._drain_started: float | None = None
        self._restart_started: float | None = None
        self._failed = False
        self._next_poll = 0.0
        self._next_check = 0.0
        self._wake_seen: str | None = None
        self._wake_looked: str | None = None
        self._checked_config: labels.Config | None = None
        self._pods_cache: list[dict[str, Any]] | None = None
        self.pods_version: str | None = None
        self._last_notice: tuple[str, str] | None = None

    def __call__(self, node: Mapping[str, Any], config_data: Any) -> bool:
        """Reconcile ``node``; returns whether it holds a slot, so the loop looks again soon."""
        config = config_data if isinstance(config_data, labels.Config) else labels.parse_config(config_data)
        if config.removal is None:
            kube.reconcile_node(self.core, node, config, self.log)
            return False
        self._pods_cache = None
        self._reconcile(node, config, config.removal)
        return self.holding is not None

    def wait_seconds(self, resync_seconds: int) -> float:
        """How long the label loop may watch before the next pass: a holder looks again within HOLD_WATCH_SECONDS
        (sooner on its pods' events, see :meth:`wants`), a waiting node when its poll is due."""
        if self.holding is not None:
            return float(min(resync_seconds, HOLD_WATCH_SECONDS))
        if self._next_poll > self.clock():
            return float(min(resync_seconds, max(1.0, self._next_poll - self.clock())))
        return float(resync_seconds)

    def wants(self, pod_event: Mapping[str, Any]) -> bool:
        """Whether a pod event on this node can move the holder on: a pod deleted (GPU work gone, an operand or
        the old driver gone), or a driver pod changing (the new one Ready)."""
        pod = pod_event.get("object") or {}
        return pod_event.get("type") == "DELETED" or podinfo.is_driver_pod(pod)

    # --- one pass ---------------------------------------------------------------------------------------

    def _pods(self) -> list[dict[str, Any]]:
        """Every pod on the node, all namespaces: read at most once a pass, and only in a pass that needs them."""
        if self._pods_cache is None:
            result = self.core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={self.node_name}", _request_timeout=kube.REQUEST_TIMEOUT_SECONDS)
            listed = kube.as_dict(self.core, result)
            self._pods_cache = listed.get("items") or []
            # Where a holder's pod watch starts: events after this read, none it has already judged.
            self.pods_version = (listed.get("metadata") or {}).get("resourceVersion")
        return self._pods_cache

    def _operand_pods(self, namespace: str) -> list[dict[str, Any]]:
        return [p for p in self._pods() if podinfo.metadata(p).get("namespace") == namespace]

    def _reconcile(self, node: Mapping[str, Any], config: labels.Config, rules: labels.Removal) -> None:
        if not self.resumed:
            # After a restart (or a lost answer to our own write): the budget says whether this node holds a slot.
            self.resumed = True
            record = self.slots.holds(rules.namespace)
            if record is not None:
                self.holding = str(record.get("reason") or budget.LABEL_REMOVAL)
                self._failed = bool(record.get("failed"))
                self.log({"level": "info", "event": "slot-resumed", "node": self.node_name, "reason": self.holding})
        state = upgrade.state_of(node)
        wake = ((node.get("metadata") or {}).get("annotations") or {}).get(slots.WAKE_ANNOTATION)
        # An event of a waiting node's Node (the kubelet's status updates among them) is no reason to read
        # anything: it looks when its poll is due or it was woken, so 9,000 waiting nodes stay quiet.
        look = (self.holding is not None or config != self._checked_config or self.clock() >= self._next_check
                or state in (upgrade.DRAINING, upgrade.RESTARTING, upgrade.FAILED) or wake != self._wake_looked
                or (state == upgrade.WAITING and self.clock() >= self._next_poll))
        self._wake_looked = wake
        plan = removal.plan(node, config, self._operand_pods(rules.namespace) if look else ())
        if not look and ((plan.patch or {}).get("metadata") or {}).get("labels", {}).get(labels.DRIVER_LABEL):
            # A first gpu-stack/driver label: whether it hands the node over depends on its driver pod.
            look = True
            plan = removal.plan(node, config, self._operand_pods(rules.namespace))
        if plan.paced and plan.immediate is not None:
            # What needs no slot goes first, whatever becomes of the rest: a slot can take hours to come.
            self._apply(node, plan.immediate)
            node = kube.get_node(self.core, self.node_name)
            plan = removal.plan(node, config, self._operand_pods(rules.namespace) if look else ())
        if not look and ((plan.patch or {}).get("metadata") or {}).get("labels", {}).get(labels.DRIVER_LABEL):
            # A first gpu-stack/driver label: whether it hands the node over depends on its driver pod.
            look = True
            plan = removal.plan(node, config, self._operand_pods(rules.namespace))
        if not plan.paced:
            self._apply(node, plan.patch)
            if plan.patch is not None:
                node = kube.get_node(self.core, self.node_name)
        if plan.paced and plan.operands_off:
            # Only with operands=false, which asks for every operand to leave at once: never paced.
            self._delete_orphans(rules.namespace, plan.orphans)
            plan = removal.plan(node, config, ())
        if look:
            self._checked_config = config
            self._next_check = self.clock() + RECHECK_SECONDS * (0.5 + self.rng())

        if self.holding == budget.DRIVER_UPGRADE:
            self._upgrade_step(node, config, rules)
            return
        if self.holding is not None:
            self._change_step(node, config, rules, plan)
            return
        if plan.paced:
            if plan.removing and not rules.drain and self._busy_with_gpu_work(plan, rules):
                # Never a slot held for hours of somebody's job: looked at before taking one, and again after.
                return
            if self._take(node, rules, plan.reason, plan=plan):
                self._change_step(node, config, rules, plan)
            return
        if look and self._outdated_driver(node, config, rules) is not None:
            if self._take(node, rules, budget.DRIVER_UPGRADE):
                self._upgrade_step(node, config, rules)
            return
        if look and upgrade.state_of(node) == upgrade.WAITING:
            # Waited for a change that no longer needs doing (the config changed back).
            self._patch(node, {"metadata": {"labels": {upgrade.UPGRADE_STATE_LABEL: None}}})

    # --- taking a slot ----------------------------------------------------------------------------------

    def _take(self, node: Mapping[str, Any], rules: labels.Removal, reason: str, *,
              plan: removal.Plan | None = None) -> bool:
        """Take a slot when this node's poll is due or it was woken; show ``upgrade-required`` while waiting."""
        if upgrade.state_of(node) != upgrade.WAITING:
            self._patch(node, {"metadata": {"labels": {upgrade.UPGRADE_STATE_LABEL: upgrade.WAITING}}})
        wake = ((node.get("metadata") or {}).get("annotations") or {}).get(slots.WAKE_ANNOTATION)
        if self.clock() < self._next_poll and wake == self._wake_seen:
            return False
        self._wake_seen = wake
        limits = budget.Limits(rules.max_unavailable, rules.max_parallel, rules.paused)
        decision = self.slots.acquire(rules.namespace, limits, reason)
        if decision == budget.HOLDING:
            # The pods read before the slot was taken are stale now: what is judged with the slot in hand is read anew.
            self._pods_cache = None
            self.holding = reason
            self._failed = False
            self._drain_started = self._restart_started = None
            self.evicted = set()
            self._last_notice = None
            if plan is not None and plan.driver_change:
                self.log({"level": "info", "event": "driver-handover", "node": self.node_name,
                          "driver": {"old": plan.driver_change[0], "new": plan.driver_change[1]}})
            return True
        count, _ = budget.gpu_nodes(self.slots.last)
        self._next_poll = self.clock() + slots.waiting_poll_seconds(count, self.rng)
        self._notice("warning" if decision == budget.HALTED else "info", "slot-waiting", reason=reason,
                     why=decision, holders=len(budget.holders(self.slots.last)),
                     failed=budget.failed_holders(self.slots.last)[:5])
        return False

    def _release(self, rules: labels.Removal) -> None:
        self.slots.release(rules.namespace)
        self.holding = None
        self._failed = False
        self._last_notice = None
        self._next_check = 0.0

    # --- label changes (handover, removal, MIG relayout) ------------------------------------------------

    def _change_step(self, node: Mapping[str, Any], config: labels.Config, rules: labels.Removal,
                     plan: removal.Plan) -> None:
        if plan.paced:
            if plan.removing and not rules.drain and self._busy_with_gpu_work(plan, rules):
                # Looked at again with the slot in hand: a job bound since the last look must not lose its GPUs,
                # and must not keep a slot for as long as it runs (nothing was applied yet).
                self._release(rules)
                return
            if plan.removing and rules.drain and not self._drained(node, rules):
                return
            # Read again: the state and cordon writes above moved its resourceVersion, which the label patch carries.
            node = kube.get_node(self.core, self.node_name)
            self._apply(node, plan.patch, paced=True)
            self._delete_orphans(rules.namespace, plan.orphans)
            node = kube.get_node(self.core, self.node_name)
            self._pods_cache = None
        reasons = removal.hold_reasons(removal.labels_after(node, None), self._operand_pods(rules.namespace), config)
        if reasons:
            if upgrade.state_of(node) != upgrade.CHANGING:
                self._patch(node, {"metadata": {"labels": {upgrade.UPGRADE_STATE_LABEL: upgrade.CHANGING}}})
            self._notice("info", "slot-holding", reason=self.holding, waitingFor=reasons)
            return
        node = kube.get_node(self.core, self.node_name)  # not a stale event's copy: see _upgrade_step
        self._patch(node, upgrade.finish_patch(node))
        self._release(rules)

    def _cordon(self, node: Mapping[str, Any]) -> None:
        """Cordon for a drain, deciding from a fresh read: the cordon write is a compare-and-swap against it
        (upgrade.cordon_patch), and this pass's own state patch has already moved the node on."""
        if upgrade.unschedulable(node) and upgrade.state_of(node) == upgrade.DRAINING:
            return
        node = kube.get_node(self.core, self.node_name)
        if not upgrade.unschedulable(node) or upgrade.state_of(node) != upgrade.DRAINING:
            self._patch(node, upgrade.cordon_patch(node, upgrade.DRAINING))

    def _busy_with_gpu_work(self, plan: removal.Plan, rules: labels.Removal) -> bool:
        # Every GPU pod, DaemonSet pods too: without a drain nothing is evicted, so none is taken from under.
        work = removal.gpu_work(self._pods(), rules.namespace, include_daemonsets=True)
        if work:
            self._notice("warning", "removal-waiting", reason="gpu work on the node", drain=False,
                         labels=sorted(plan.removing), **removal.named_pods(work))
        return bool(work)

    def _drained(self, node: Mapping[str, Any], rules: labels.Removal) -> bool:
        """Cordon, then evict the GPU work the drain selects, each pod once; True when no GPU work is left at all:
        a pod the selector spares is never evicted, and is waited for instead of pulled from under."""
        self._cordon(node)
        work = removal.gpu_work(self._pods(), rules.namespace)
        if not work:
            return True
        if self._drain_started is None:
            self._drain_started = self.clock()
        if rules.drain_timeout_seconds and self.clock() - self._drain_started > rules.drain_timeout_seconds:
            self._fail(node, rules, f"GPU pods still running after {rules.drain_timeout_seconds}s of eviction: "
                                    f"{', '.join(removal.named_pods(work)['pods'])}")
            return False
        self._evict([p for p in work if removal.selected(p, rules.drain_pod_selector)])
        return False

    # --- driver upgrades --------------------------------------------------------------------------------

    def _driver_of(self, node: Mapping[str, Any], config: labels.Config) -> tuple[str, str] | None:
        daemonset = ((node.get("metadata") or {}).get("labels") or {}).get(labels.DRIVER_LABEL)
        digest = config.drivers.get(daemonset or "")
        return (daemonset, digest) if daemonset and digest else None

    def _revision(self, daemonset: str, digest: str, namespace: str) -> str | None:
        """The current revision of ``daemonset`` once it runs the template ``digest`` names; cached per digest."""
        key = (daemonset, digest)
        if key not in self.revisions:
            found = kube.read_daemon_set(self.apps, namespace, daemonset)
            revisions: list[dict[str, Any]] = []
            if found is not None:
                selector = ",".join(f"{k}={v}" for k, v in sorted(
                    (((found.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}).items()))
                result = self.apps.list_namespaced_controller_revision(
                    namespace=namespace, label_selector=selector, _request_timeout=kube.REQUEST_TIMEOUT_SECONDS)
                revisions = kube.as_dict(self.apps, result).get("items") or []
            revision = upgrade.current_revision(found, revisions, digest)
            self.config_digests[key] = upgrade.revision_config_digest(revisions, revision or "")
            if revision is None:
                # Pulumi has not written that template yet (a later wave's DaemonSet waits for the gates before
                # it), or the controller has not seen it: look again on the waiting nodes' jittered schedule, so
                # that a later wave's thousands of nodes do not read their DaemonSet every few seconds.
                count, _ = budget.gpu_nodes(self.slots.last if self.slots.last is not None
                                            else self.slots.read(namespace))
                self._next_check = min(self._next_check, self.clock() + slots.waiting_poll_seconds(count, self.rng))
                return None
            self.revisions[key] = revision
            # The first of its DaemonSet's nodes to see the new template tells one more, which tells one more:
            # a wave's nodes all know within seconds of its DaemonSets' update, at two requests a node.
            self.slots.wake_one(f"{labels.DRIVER_LABEL}={daemonset},{slots.UPGRADE_STATE_LABEL}!={slots.WAITING}")
        return self.revisions[key]

    def _outdated_driver(self, node: Mapping[str, Any], config: labels.Config,
                         rules: labels.Removal) -> Mapping[str, Any] | None:
        driver = self._driver_of(node, config)
        if rules.driver_upgrade != "rolling" or driver is None:
            return None
        if not upgrade.driver_pods(self._operand_pods(rules.namespace), driver[0]):
            return None
        revision = self._revision(driver[0], driver[1], rules.namespace)
        if revision is None:
            return None
        return upgrade.outdated_pod(self._operand_pods(rules.namespace), driver[0], revision)

    def _upgrade_step(self, node: Mapping[str, Any], config: labels.Config, rules: labels.Removal) -> None:
        driver = self._driver_of(node, config)
        revision = self._revision(*driver, rules.namespace) if driver else None
        if driver is None or revision is None:
            # The node left its driver DaemonSet, or the template is not known yet; nothing to do under a slot.
            if driver is None:
                self._patch(node, upgrade.finish_patch(node))
                self._release(rules)
            return
        daemonset = driver[0]
        operands = self._operand_pods(rules.namespace)
        if upgrade.upgraded(operands, daemonset, revision):
            if self._failed:
                self.slots.mark(rules.namespace, None)
            # Read fresh: the pass may run on a watch event older than this agent's own cordon, and finishing from
            # it would leave the node cordoned.
            node = kube.get_node(self.core, self.node_name)
            self._patch(node, upgrade.finish_patch(node))
            self.log({"level": "info", "event": "driver-upgraded", "node": self.node_name, "daemonset": daemonset,
                      "revision": revision})
            self._release(rules)
            return
        old = upgrade.outdated_pod(operands, daemonset, revision)
        if old is not None:
            if upgrade.keeps_driver(old, self.config_digests.get((daemonset, driver[1]))):
                self._notice("info", "driver-restart", reason="same driver install: no cordon, no eviction")
            elif not self._drain_for_upgrade(node, rules):
                return
            self._delete_pod(rules.namespace, podinfo.name(old), "out of date: its DaemonSet has a new template")
            self._restart_started = self.clock()
            self._patch(kube.get_node(self.core, self.node_name),
                        {"metadata": {"labels": {upgrade.UPGRADE_STATE_LABEL: upgrade.RESTARTING}}})
            return
        if self._restart_started is None:
            # Resumed after a restart with the old pod already gone: the bound counts from now.
            self._restart_started = self.clock()
        waited = self.clock() - self._restart_started
        if waited > rules.node_ready_timeout_seconds and not self._failed:
            self._fail(node, rules, f"the new driver pod of {daemonset} was not Ready (validated) within "
                                    f"{rules.node_ready_timeout_seconds}s")
            return
        self._notice("info", "slot-holding", reason=self.holding, waitingFor=[f"a Ready driver pod of {daemonset} "
                                                                              f"at revision {revision}"])

    def _drain_for_upgrade(self, node: Mapping[str, Any], rules: labels.Removal) -> bool:
        """Cordon, then make the GPU work leave: evicted with gpuPodEviction (or drain), else waited for."""
        if rules.gpu_pod_eviction or rules.drain:
            return self._drained(node, rules)
        self._cordon(node)
        work = removal.gpu_work(self._pods(), rules.namespace, include_daemonsets=True)
        if work:
            self._notice("info", "upgrade-waiting", reason="gpu work on the node", **removal.named_pods(work))
        return not work

    def _fail(self, node: Mapping[str, Any], rules: labels.Removal, why: str) -> None:
        """The node stays cordoned and holds its slot, marked failed: no other node starts until it is fixed."""
        self._failed = True
        self.slots.mark(rules.namespace, why)
        self._patch(kube.get_node(self.core, self.node_name),
                    {"metadata": {"labels": {upgrade.UPGRADE_STATE_LABEL: upgrade.FAILED}}})
        self.log({"level": "error", "event": "upgrade-failed", "node": self.node_name, "error": why})

    # --- requests on pods and the node ------------------------------------------------------------------

    def _evict(self, work: Sequence[Mapping[str, Any]]) -> None:
        self._notice("info", "draining", **removal.named_pods(work))
        for pod in work:
            ref = podinfo.ref(pod)
            if podinfo.is_terminating(pod) or ref in self.evicted:
                continue
            metadata = podinfo.metadata(pod)
            body = {"apiVersion": "policy/v1", "kind": "Eviction",
                    "metadata": {"name": metadata.get("name"), "namespace": metadata.get("namespace")}}
            try:
                self.core.create_namespaced_pod_eviction(
                    name=metadata.get("name"), namespace=metadata.get("namespace"), body=body,
                    _request_timeout=kube.REQUEST_TIMEOUT_SECONDS)
            except ApiException as exc:
                if exc.status == 429:
                    # A PodDisruptionBudget allows no disruption now; asked again next pass, until the drain timeout.
                    self.log({"level": "warning", "event": "eviction-blocked", "node": self.node_name, "pod": ref})
                    continue
                if exc.status != 404:
                    raise
            self.evicted.add(ref)

    def _delete_pod(self, namespace: str, name: str, why: str) -> None:
        try:
            self.core.delete_namespaced_pod(name=name, namespace=namespace,
                                            _request_timeout=kube.REQUEST_TIMEOUT_SECONDS)
        except ApiException as exc:
            if exc.status != 404:
                raise
            return
        self.log({"level": "info", "event": "driver-pod-deleted", "node": self.node_name,
                  "pod": f"{namespace}/{name}", "reason": why})

    def _delete_orphans(self, namespace: str, names: Sequence[str]) -> None:
        for name in names:
            self._delete_pod(namespace, name, "orphaned: its DaemonSet was deleted")

    def _patch(self, node: Mapping[str, Any], patch: Mapping[str, Any]) -> None:
        """A state, cordon or annotation change: a cordon or uncordon carries the node's resourceVersion
        (upgrade.cordon_patch, finish_patch), a state label is the agent's own and needs none (a label patch,
        which shares keys with other writers, goes through :meth:`_apply`)."""
        kube.patch_node(self.core, self.node_name, patch)

    def _apply(self, node: Mapping[str, Any], patch: Mapping[str, Any] | None, *, paced: bool = False) -> None:
        if paced:
            kube.apply_label_patch(self.core, node, patch, self.log, paced=True)
        else:
            kube.apply_label_patch(self.core, node, patch, self.log)

    def _notice(self, level: str, event: str, **fields: Any) -> None:
        """Log a waiting state once, not on every pass: a wait can last hours."""
        key = (event, json.dumps(fields, sort_keys=True))
        if key != self._last_notice:
            self._last_notice = key
            self.log({"level": level, "event": event, "node": self.node_name, **fields})
