"""One node's disruptions, paced by the fleet's budget: the requests behind :mod:`.removal` and :mod:`.upgrade`.

A :class:`Pacer` is the label loop's reconcile for one node (``labelloop.run_label_loop(reconcile=pacer)``). With a
version 1 config it applies every change at once, as agents before 0.4.0 did. With ``removal`` (versions 2 to 4)
each change that takes the node (or part of it) out of service waits for a slot of the budget, which the upgrade
coordinator grants in the order nodes asked (:mod:`.grants`, :mod:`.coordinator`):

- label changes (:func:`removal.plan`): what needs no slot is applied at once; a deploy label removal, a driver
  handover or a MIG relayout is asked for. With the slot in hand the node is cordoned first, so that no pod bound
  after the agent looked loses its operands, then its GPU work is waited for or drained (a handover and a relayout
  as a driver upgrade: evicted with ``gpuPodEviction`` or ``drain``; a removal evicts only with ``drain``, and
  without it gives the slot back while GPU work runs and asks again once it ended), the change is applied, and the
  slot is held until the node is through (:func:`removal.hold_reasons`);
- a drain is asked for on the node's own Node (:mod:`.drains`): the coordinator, which alone may evict, evicts the
  pods named that are bound to this node; the agent judges the drain's timeout;
- a driver upgrade (version 3, ``driverUpgrade: rolling``; a vGPU or VFIO manager's too) is granted unasked: the
  coordinator sees the pod is out of date from the ``gpu-stack/driver-revision`` label the agent keeps. The node is
  cordoned, its GPU pods and VMs evicted (KubeVirt live-migrates those it can) or waited for, the old pod deleted
  for the OnDelete DaemonSet to create the new one; once that is Ready (and validated) the node is uncordoned and
  the slot given back. One not Ready within ``nodeReadyTimeoutSeconds`` leaves the node cordoned and its slot
  marked failed, which halts the rollout.

A node shows its step in ``gpu-stack/upgrade-state`` (:class:`upgrade.UpgradeState`). Waiting costs the API server
nothing: a node that asked for a slot reads nothing until its grant arrives on its own Node, which it watches
anyway; a holder follows its pods from one list and a watch (:class:`.podwatch.PodCache`), judging every pod event
without a read.
"""

from __future__ import annotations

import datetime
import json
import random
import time
from typing import Any, Callable, Mapping, Sequence

from gpustack_agent.api import kube, podops, podwatch, slots
from gpustack_agent.label import labelloop
from gpustack_agent.model import budget, drains, grants, labels, pods as podinfo, removal, revisions, upgrade

Now = Callable[[], datetime.datetime]
# An idle node looks at its pods (orphaned driver pods, its driver pod's revision) this often even without a
# reason: the safety net under the config and the node's own events, which normally say when to look.
RECHECK_SECONDS = 1800.0
# A holder (or a node waiting for GPU work to end) watches its pods and judges every event of them; this bound is
# only the safety net that re-establishes the watch, long so that 1,000 holders cost about one request a second.
HOLD_WATCH_SECONDS = 1800.0


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


class Pacer:
    """Reconciles one node, pacing its disruptions; keeps between passes what it learnt (its slot, the driver
    DaemonSets' current revisions, the node's pods while it watches them) and when it next needs to look."""

    def __init__(self, core: Any, apps: Any, *, node_name: str, log: kube.Log, now: Now = utc_now,
                 clock: Callable[[], float] = time.monotonic, rng: Callable[[], float] = random.random) -> None:
        self.core = core
        self.apps = apps
        self.node_name = node_name
        self.log = log
        self.now = now
        self.clock = clock
        self.rng = rng
        self.slots = slots.Slots(core, node_name=node_name, log=log)
        self.pods = podwatch.PodCache(core, node_name)
        self.node: dict[str, Any] | None = None
        self.hold: grants.Hold | None = None
        self._resumed = False
        self._checked_config: labels.Config | None = None
        self._next_check = 0.0
        self.revisions = revisions.DriverRevisions(apps)
        self._last_notice: tuple[str, str] | None = None
        self._driver_sets: frozenset[str] = frozenset()

    def __call__(self, node: Mapping[str, Any], config_data: Any) -> labelloop.Next:
        config = config_data if isinstance(config_data, labels.Config) else labels.parse_config(config_data)
        self.node = dict(node)
        self._driver_sets = frozenset(config.drivers)
        if config.removal is None:
            written = kube.reconcile_node(self.core, node, config, self.log)
            self.node = written or self.node
            return labelloop.Next()
        self.pods.forget()
        wait = self._reconcile(config, config.removal)
        return wait

    def wants(self, pod_event: Mapping[str, Any]) -> bool:
        """Whether a pod event can move the node on: a pod going, or a driver-like or sandbox validator pod changing."""
        pod = pod_event.get("object") or {}
        return (pod_event.get("type") == podwatch.DELETED or podinfo.is_driver_pod(pod) or podinfo.is_finished(pod)
                or podinfo.is_terminating(pod) or podinfo.owner(pod, "DaemonSet") in self._driver_sets
                or podinfo.is_sandbox_validator(pod))

    # --- one pass ---------------------------------------------------------------------------------------

    def _pods(self) -> list[dict[str, Any]]:
        """Every pod on the node, all namespaces: listed at most once a pass, and only in a pass that needs them
        (none while the loop's pod watch keeps them current)."""
        return self.pods.current()

    def _operand_pods(self, namespace: str) -> list[dict[str, Any]]:
        return [p for p in self._pods() if podinfo.metadata(p).get("namespace") == namespace]

    def _reconcile(self, config: labels.Config, rules: labels.Removal) -> labelloop.Next:
        if not self._resumed:
            self._resume(rules)
        self._accept_grant(rules)
        # A node waiting in line looks at nothing until its grant comes: its request says what it waits for.
        recheck = self.clock() >= self._next_check and not self._waiting_in_line()
        look = self.hold is not None or config != self._checked_config or recheck or self.pods.live
        plan = self._plan(config, rules, look)
        look = look or self.pods.known
        if plan.paced and plan.immediate is not None:
            # What needs no slot goes first, whatever becomes of the rest: a slot can take hours to come.
            self._apply(plan.immediate)
            plan = self._plan(config, rules, look)
        if not plan.paced and plan.patch is not None:
            self._apply(plan.patch)
        if plan.paced and plan.operands_off:
            # Only with operands=false, which asks for every operand to leave at once: never paced.
            self._delete_orphans(rules.namespace, plan.orphans)
            plan = removal.plan(self._node(), config, ())

        if self.hold is not None:
            wait = self._hold_step(config, rules, plan)
        elif plan.paced:
            wait = self._ask(rules, plan)
        else:
            wait = self._idle(config, rules, look)
        if look:
            # Noted only once the pass went through: a write that failed leaves it to be looked at again.
            self._checked_config = config
            self._next_check = self.clock() + RECHECK_SECONDS * (0.5 + self.rng())
        if wait.seconds is None and not wait.pods and self.hold is None:
            wait = labelloop.Next(seconds=max(1.0, self._next_check - self.clock()))
        return wait

    def _node(self) -> dict[str, Any]:
        return self.node or {}

    def _plan(self, config: labels.Config, rules: labels.Removal, look: bool) -> removal.Plan:
        plan = removal.plan(self._node(), config, self._operand_pods(rules.namespace) if look else ())
        if not look and ((plan.patch or {}).get("metadata") or {}).get("labels", {}).get(labels.DRIVER_LABEL):
            # A first gpu-stack/driver label: whether it hands the node over depends on its driver pod.
            plan = removal.plan(self._node(), config, self._operand_pods(rules.namespace))
        return plan

    # --- the handshake with the coordinator ---------------------------------------------------------------

    def _resume(self, rules: labels.Removal) -> None:
        """After a restart: the budget says whether this node holds a slot (one granted, or one an agent before
        0.8.0 took), read only when the node shows it might."""
        self._resumed = True
        node = self._node()
        if upgrade.state_of(node) not in upgrade.HOLDING_STATES and grants.grant_of(node) is None:
            return
        record = self.slots.record(rules.namespace)
        if record is None:
            return
        self.hold = grants.Hold.of(record, record.get(grants.GRANT_KEY))
        self.log({"level": "info", "event": "slot-resumed", "node": self.node_name, "reason": self.hold.reason})

    def _accept_grant(self, rules: labels.Removal) -> None:
        """A grant the coordinator wrote on the node is acted on once the budget holds a slot of that id for it;
        one the budget does not hold (given back meanwhile, or removed by hand) is wiped."""
        grant = grants.grant_of(self._node())
        if grant is None or (self.hold is not None and self.hold.grant == grant):
            return
        record = self.slots.record(rules.namespace)
        if not grants.granted(record, grant):
            self._patch({"metadata": {"annotations": {grants.GRANT_ANNOTATION: None}}})
            return
        assert record is not None
        self.hold = grants.Hold.of(record, grant)
        self._last_notice = None
        self.log({"level": "info", "event": "slot-acquired", "node": self.node_name, "reason": self.hold.reason,
                  "grant": grant})

    def _ask(self, rules: labels.Removal, plan: removal.Plan) -> labelloop.Next:
        """Ask the coordinator for a slot for ``plan``, and wait: the grant comes as an event of the Node. A
        removal that does not drain never waits in line while GPU work runs on the node: it watches the work end."""
        node = self._node()
        request = grants.request_of(node)
        if self._waiting_in_line() and request is not None and request["reason"] == plan.reason:
            return labelloop.Next()
        if self._removal_without_drain(plan, rules) and self._busy_with_gpu_work(plan, rules):
            self._withdraw()
            return labelloop.Next(pods=True, seconds=HOLD_WATCH_SECONDS)
        self._patch({"metadata": {
            "labels": {upgrade.UPGRADE_STATE_LABEL: upgrade.WAITING},
            "annotations": {grants.REQUEST_ANNOTATION: grants.request_value(plan.reason,
                                                                            budget.format_time(self.now()))}}})
        self._notice("info", "slot-requested", reason=plan.reason)
        return labelloop.Next()

    def _waiting_in_line(self) -> bool:
        node = self._node()
        return grants.request_of(node) is not None and upgrade.state_of(node) == upgrade.WAITING

    def _withdraw(self) -> None:
        """Take back a request for a change that is no longer wanted, or has to wait for GPU work first."""
        node = self._node()
        if grants.request_of(node) is None and upgrade.state_of(node) != upgrade.WAITING:
            return
        self._patch({"metadata": {"labels": {upgrade.UPGRADE_STATE_LABEL: None},
                                  "annotations": {grants.REQUEST_ANNOTATION: None}}})

    def _idle(self, config: labels.Config, rules: labels.Removal, looked: bool) -> labelloop.Next:
        self._withdraw()
        if not looked:
            return labelloop.Next()
        self._publish_driver_revision(config, rules)
        if self._driver_pod_expected(config, rules):
            # A new node: its driver pod comes after its deploy labels. Its revision is what the coordinator judges
            # upgrades by, so the agent follows the pods until the pod is there.
            return labelloop.Next(pods=True, seconds=HOLD_WATCH_SECONDS)
        return labelloop.Next()

    # --- holding a slot ---------------------------------------------------------------------------------

    def _hold_step(self, config: labels.Config, rules: labels.Removal, plan: removal.Plan) -> labelloop.Next:
        assert self.hold is not None
        if self.hold.reason == budget.DRIVER_UPGRADE:
            return self._upgrade_step(config, rules)
        return self._change_step(config, rules, plan)

    def _finish(self, config: labels.Config, rules: labels.Removal, state: str | None = upgrade.DONE) -> None:
        """Uncordon (if this agent cordoned), show ``state``, give the slot back."""
        node = kube.get_node(self.core, self.node_name)  # fresh: the uncordon is a compare-and-swap
        self.node = node
        patch = upgrade.finish_patch(node, state)
        patch["metadata"]["annotations"][grants.GRANT_ANNOTATION] = None
        patch["metadata"]["annotations"][grants.REQUEST_ANNOTATION] = None
        patch["metadata"]["annotations"][drains.DRAIN_ANNOTATION] = None
        revision = self._driver_revision(config, rules)
        if revision is not None and revision != grants.driver_revision(node):
            patch["metadata"]["labels"][grants.DRIVER_REVISION_LABEL] = revision
        self.node = kube.patch_node(self.core, self.node_name, patch)
        self.slots.release(rules.namespace)
        self.hold = None
        self._last_notice = None
        self._next_check = 0.0

    # --- label changes (handover, removal, MIG relayout) ------------------------------------------------

    def _change_step(self, config: labels.Config, rules: labels.Removal, plan: removal.Plan) -> labelloop.Next:
        if plan.paced:
            ready = self._ready_for_change(config, rules, plan)
            if ready is not None:
                return ready
            if plan.driver_change:
                self.log({"level": "info", "event": "driver-handover", "node": self.node_name,
                          "driver": {"old": plan.driver_change[0], "new": plan.driver_change[1]}})
            # Read again: the state and cordon writes above moved its resourceVersion, which the label patch carries.
            self.node = kube.get_node(self.core, self.node_name)
            self._apply(plan.patch, paced=True)
            self._delete_orphans(rules.namespace, plan.orphans)
        reasons = removal.hold_reasons(removal.labels_after(self._node(), None),
                                       self._operand_pods(rules.namespace), config)
        if reasons:
            if upgrade.state_of(self._node()) != upgrade.CHANGING:
                self._patch({"metadata": {"labels": {upgrade.UPGRADE_STATE_LABEL: upgrade.CHANGING}}})
            self._notice("info", "slot-holding", reason=self.hold.reason if self.hold else None, waitingFor=reasons)
            if removal.MIG_STATE_LABEL in grants.labels_of(self._node()) and grants.labels_of(self._node()).get(
                    removal.MIG_STATE_LABEL) in removal.MIG_IN_PROGRESS:
                # The MIG manager reports on the Node, not in a pod: its Node's events move this wait on.
                return labelloop.Next(seconds=HOLD_WATCH_SECONDS)
            return labelloop.Next(pods=True, seconds=HOLD_WATCH_SECONDS)
        self._finish(config, rules)
        return labelloop.Next()

    def _ready_for_change(self, config: labels.Config, rules: labels.Removal,
                          plan: removal.Plan) -> labelloop.Next | None:
        """None once the node may be changed (cordoned, its GPU work gone, or a handover that keeps the loaded
        driver); otherwise what to wait for."""
        if self._removal_without_drain(plan, rules):
            self._cordon()
            if self._busy_with_gpu_work(plan, rules):
                # Work bound before the cordon must not lose its GPUs, and must not keep a slot for as long as it
                # runs: given back, asked for again once the work ended.
                self._finish(config, rules, state=None)
                return labelloop.Next(pods=True, seconds=HOLD_WATCH_SECONDS)
            return None
        if plan.driver_change and self._handover_keeps_driver(config, rules, plan):
            return None
        if self._drained_for_upgrade(rules):
            return None
        return labelloop.Next(pods=True, seconds=self._drain_wait(rules))

    @staticmethod
    def _removal_without_drain(plan: removal.Plan, rules: labels.Removal) -> bool:
        return plan.reason == budget.LABEL_REMOVAL and not rules.drain

    def _handover_keeps_driver(self, config: labels.Config, rules: labels.Removal, plan: removal.Plan) -> bool:
        """Whether handing the node to another driver DaemonSet keeps its loaded driver (the same install: the new
        pod's k8s-driver-manager does not unload it), so that its GPU work stays."""
        assert plan.driver_change is not None
        new = plan.driver_change[1]
        digest = config.drivers.get(new or "")
        if not new or not digest:
            return False
        known = self.revisions.current(new, digest, rules.namespace)
        if known is None:
            return False
        serving = [p for p in self._operand_pods(rules.namespace) if podinfo.is_driver_pod(p)
                   and not podinfo.is_terminating(p) and not podinfo.is_finished(p)]
        return bool(serving) and all(upgrade.keeps_driver(p, known[1]) for p in serving)

    # --- driver upgrades --------------------------------------------------------------------------------

    def _target(self, config: labels.Config) -> tuple[str, str] | None:
        """The driver DaemonSet and template digest this node's upgrade goes to: the grant's, else the node's."""
        daemonset = grants.labels_of(self._node()).get(labels.DRIVER_LABEL)
        assert self.hold is not None
        if self.hold.daemonset and self.hold.daemonset != daemonset:
            return None  # the node left that DaemonSet since the grant
        digest = self.hold.digest or config.drivers.get(daemonset or "")
        return (daemonset, digest) if daemonset and digest else None

    def _upgrade_step(self, config: labels.Config, rules: labels.Removal) -> labelloop.Next:
        assert self.hold is not None
        target = self._target(config)
        known = self.revisions.current(*target, rules.namespace) if target else None
        if target is None or known is None:
            # The node left its driver DaemonSet, or the DaemonSet moved on to another template since the grant (the
            # coordinator grants again for that one): nothing to do under this slot.
            self._finish(config, rules)
            return labelloop.Next()
        daemonset, revision = target[0], known[0]
        operands = self._operand_pods(rules.namespace)
        if upgrade.upgraded(operands, daemonset, revision):
            if self.hold.failed:
                self.slots.mark(rules.namespace, None)
            self.log({"level": "info", "event": "driver-upgraded", "node": self.node_name, "daemonset": daemonset,
                      "revision": revision})
            self._finish(config, rules)
            return labelloop.Next()
        old = upgrade.outdated_pod(operands, daemonset, revision)
        if old is not None:
            if upgrade.keeps_driver(old, known[1]):
                self._notice("info", "driver-restart", reason="same driver install: no cordon, no eviction")
            elif not self._drained_for_upgrade(rules):
                return labelloop.Next(pods=True, seconds=self._drain_wait(rules))
            self._delete_pod(rules.namespace, podinfo.name(old), "out of date: its DaemonSet has a new template")
            self.hold.restart_started = self.clock()
            self._patch({"metadata": {"labels": {upgrade.UPGRADE_STATE_LABEL: upgrade.RESTARTING}}})
            return labelloop.Next(pods=True, seconds=float(rules.node_ready_timeout_seconds) + 1)
        if self.hold.restart_started is None:
            if not upgrade.driver_pods(operands, daemonset) and upgrade.state_of(self._node()) != upgrade.RESTARTING:
                # No driver pod of it on the node, and none deleted by this agent: nothing to upgrade (the node's
                # driver is not deployed, or was never there); the revision label goes so it is not granted again.
                self._finish(config, rules)
                return labelloop.Next()
            # Resumed after a restart with the old pod already gone: the bound counts from now.
            self.hold.restart_started = self.clock()
        waited = self.clock() - self.hold.restart_started
        if waited > rules.node_ready_timeout_seconds and not self.hold.failed:
            self._fail(rules, f"the new driver pod of {daemonset} was not Ready (validated) within "
                              f"{rules.node_ready_timeout_seconds}s")
            return labelloop.Next(pods=True, seconds=HOLD_WATCH_SECONDS)
        self._notice("info", "slot-holding", reason=self.hold.reason,
                     waitingFor=[f"a Ready driver pod of {daemonset} at revision {revision}"])
        left = rules.node_ready_timeout_seconds - waited
        return labelloop.Next(pods=True, seconds=HOLD_WATCH_SECONDS if self.hold.failed else max(1.0, left + 1))

    def _driver_revision(self, config: labels.Config, rules: labels.Removal) -> str | None:
        """The revision of the node's live driver pod of the DaemonSet its gpu-stack/driver label names."""
        daemonset = grants.labels_of(self._node()).get(labels.DRIVER_LABEL)
        if not daemonset or not self.pods.known:
            return None
        for pod in upgrade.driver_pods(self._operand_pods(rules.namespace), daemonset):
            if not podinfo.is_terminating(pod):
                revision = (podinfo.metadata(pod).get("labels") or {}).get(upgrade.REVISION_HASH_LABEL)
                if revision:
                    return revision
        return None

    def _publish_driver_revision(self, config: labels.Config, rules: labels.Removal) -> None:
        """Keep ``gpu-stack/driver-revision`` equal to the node's driver pod's revision: the coordinator grants a
        driver upgrade when it differs from the DaemonSet's newest. Removed when the node has no driver DaemonSet."""
        node = self._node()
        current = grants.driver_revision(node)
        if not grants.labels_of(node).get(labels.DRIVER_LABEL):
            wanted = None
        else:
            wanted = self._driver_revision(config, rules) or current
        if wanted != current:
            self._patch({"metadata": {"labels": {grants.DRIVER_REVISION_LABEL: wanted}}})

    def _driver_pod_expected(self, config: labels.Config, rules: labels.Removal) -> bool:
        node_labels = grants.labels_of(self._node())
        daemonset = node_labels.get(labels.DRIVER_LABEL)
        return bool(daemonset) and removal.runs_driver_like(node_labels) and (
            self._driver_revision(config, rules) is None)

    # --- cordon, drain, failure -------------------------------------------------------------------------

    def _cordon(self) -> None:
        """Cordon, deciding from a fresh read: the cordon write is a compare-and-swap against it
        (upgrade.cordon_patch), and this pass's own writes have already moved the node on."""
        node = self._node()
        if upgrade.unschedulable(node) and upgrade.state_of(node) == upgrade.DRAINING:
            return
        node = kube.get_node(self.core, self.node_name)
        self.node = node
        if not upgrade.unschedulable(node) or upgrade.state_of(node) != upgrade.DRAINING:
            self._patch(upgrade.cordon_patch(node, upgrade.DRAINING))

    def _busy_with_gpu_work(self, plan: removal.Plan, rules: labels.Removal) -> bool:
        # Every GPU pod, DaemonSet pods too: without a drain nothing is evicted, so none is taken from under.
        work = removal.gpu_work(self._pods(), rules.namespace, include_daemonsets=True)
        if work:
            self._notice("warning", "removal-waiting", reason="gpu work on the node", drain=False,
                         labels=sorted(plan.removing), **removal.named_pods(work))
        return bool(work)

    def _drained(self, rules: labels.Removal) -> bool:
        """Cordon, then evict the GPU work the drain selects, each pod once; True when no GPU work is left at all:
        a pod the selector spares is never evicted, and is waited for instead of pulled from under."""
        assert self.hold is not None
        self._cordon()
        work = removal.gpu_work(self._pods(), rules.namespace)
        if not work:
            return True
        if self.hold.drain_started is None:
            self.hold.drain_started = self.clock()
        if rules.drain_timeout_seconds and self.clock() - self.hold.drain_started > rules.drain_timeout_seconds:
            if not self.hold.failed:
                self._fail(rules, f"GPU pods still running after {rules.drain_timeout_seconds}s of eviction: "
                                  f"{', '.join(removal.named_pods(work)['pods'])}")
            return False
        self._ask_drain(work, rules)
        return False

    def _drained_for_upgrade(self, rules: labels.Removal) -> bool:
        """Cordon, then make the GPU work leave: evicted with gpuPodEviction (or drain), else waited for."""
        if rules.gpu_pod_eviction or rules.drain:
            return self._drained(rules)
        self._cordon()
        work = removal.gpu_work(self._pods(), rules.namespace, include_daemonsets=True)
        if work:
            self._notice("info", "upgrade-waiting", reason="gpu work on the node", **removal.named_pods(work))
        return not work

    def _drain_wait(self, rules: labels.Removal) -> float:
        """How long a holder waiting for GPU work to leave may watch before its drain timeout needs judging."""
        assert self.hold is not None
        # The coordinator asks refused evictions again; only the drain's timeout needs a timer here.
        if not (rules.gpu_pod_eviction or rules.drain) or not rules.drain_timeout_seconds or self.hold.failed:
            return HOLD_WATCH_SECONDS
        started = self.hold.drain_started if self.hold.drain_started is not None else self.clock()
        return min(HOLD_WATCH_SECONDS, max(1.0, rules.drain_timeout_seconds - (self.clock() - started) + 1))

    def _fail(self, rules: labels.Removal, why: str) -> None:
        """The node stays cordoned and holds its slot, marked failed: no other node starts until it is fixed."""
        assert self.hold is not None
        self.hold.failed = True
        self.slots.mark(rules.namespace, why)
        self._patch({"metadata": {"labels": {upgrade.UPGRADE_STATE_LABEL: upgrade.FAILED},
                                  "annotations": {drains.DRAIN_ANNOTATION: None}}})
        self.log({"level": "error", "event": "upgrade-failed", "node": self.node_name, "error": why})

    # --- requests on pods and the node ------------------------------------------------------------------

    def _ask_drain(self, work: Sequence[Mapping[str, Any]], rules: labels.Removal) -> None:
        """Ask the coordinator, on this node's own Node, to evict the GPU work the drain selects."""
        assert self.hold is not None
        self._notice("info", "draining", **removal.named_pods(work))
        patch = drains.request_patch(self._node(), self.hold.grant, work, rules.drain_pod_selector)
        if patch is not None:
            self._patch(patch)

    def _delete_pod(self, namespace: str, name: str, why: str) -> None:
        podops.delete_pod(self.core, namespace, name, why, node_name=self.node_name, log=self.log)

    def _delete_orphans(self, namespace: str, names: Sequence[str]) -> None:
        for name in names:
            self._delete_pod(namespace, name, "orphaned: its DaemonSet was deleted")

    def _patch(self, patch: Mapping[str, Any]) -> None:
        """A state, cordon, handshake or revision change: a cordon or uncordon carries the node's resourceVersion
        (upgrade.cordon_patch, finish_patch); the agent's own labels and annotations need none (a label patch,
        which shares keys with other writers, goes through :meth:`_apply`)."""
        self.node = kube.patch_node(self.core, self.node_name, patch)

    def _apply(self, patch: Mapping[str, Any] | None, *, paced: bool = False) -> None:
        record = {"paced": True} if paced else {}
        written = kube.apply_label_patch(self.core, self._node(), patch, self.log, **record)
        if written is not None:
            self.node = written

    def _notice(self, level: str, event: str, **fields: Any) -> None:
        """Log a waiting state once, not on every pass: a wait can last hours."""
        key = (event, json.dumps(fields, sort_keys=True))
        if key != self._last_notice:
            self._last_notice = key
            self.log({"level": level, "event": event, "node": self.node_name, **fields})
