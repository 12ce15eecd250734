"""The coordinator as a process (``python -m gpustack_agent coordinate``): informers feed one queue, and each batch of
what they saw is followed by the requests the decisions of :class:`.coordinator.Coordinator` call for."""

from __future__ import annotations

import datetime
import queue
import random
import threading
import time
from typing import Any, Callable, Iterable

from kubernetes.client.exceptions import ApiException

from gpustack_agent.api import informer, kube, podops, slots
from gpustack_agent.coordinate.coordinator import BUDGET, Coordinator, DAEMONSETS, IN_LINE, Log, MANAGED, Need, SWEEP_SECONDS, TICK_SECONDS
from gpustack_agent.model import budget, drains, grants, labels, revisions, upgrade


class Threads:
    """The coordinator's informers as daemon threads feeding one queue (the benchmark swaps in green threads)."""

    def spawn(self, target: Callable[[], None]) -> None:
        threading.Thread(target=target, daemon=True).start()

    def queue(self) -> Any:
        return queue.Queue()


def sources(core: Any, apps: Any, namespace: str) -> tuple[informer.Source, ...]:
    return (
        informer.Source(IN_LINE, core.list_node, label_selector=upgrade.UPGRADE_STATE_LABEL, metadata=True),
        informer.Source(MANAGED, core.list_node, label_selector=labels.DRIVER_LABEL, metadata=True),
        informer.Source(BUDGET, core.list_namespaced_config_map, (namespace,),
                        field_selector=f"metadata.name={budget.NAME}"),
        informer.Source(DAEMONSETS, apps.list_namespaced_daemon_set, (namespace,)),
    )


class Fatal(RuntimeError):
    """An error retrying cannot fix (a permission the coordinator lacks)."""


def run(core: Any, apps: Any, *, namespace: str, load_config: Callable[[], labels.Config], log: Log,
        stop: Callable[[], bool] = lambda: False, sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.timezone.utc),
        rng: Callable[[], float] = random.random, runtime: Any = None,
        watch_seconds: int = informer.WATCH_SECONDS) -> None:
    """Coordinate until ``stop()``: informers feed the queue, each batch of what they saw is followed by the
    requests it calls for."""
    runtime = runtime or Threads()
    events = runtime.queue()
    state = Coordinator(namespace=namespace, log=log, clock=clock, now=now, rng=rng)
    watched = sources(core, apps, namespace)
    for source in watched:
        runtime.spawn(lambda source=source: informer.run(
            source, core.api_client, events.put, stop=stop, sleep=sleep, clock=clock, rng=rng,
            timeout=watch_seconds))
    actions = Actions(core, apps, state, log)
    synced: set[str] = set()
    while not stop():
        for source, kind, obj in _batch(events, TICK_SECONDS):
            if kind == informer.FATAL:
                raise Fatal(str(obj))
            if kind == informer.SYNC:
                synced.add(source)
            state.observe(source, kind, obj)
        if len(synced) < len(watched):
            continue  # decide nothing on a partial view
        config = load_config()
        if not actions.due(config):
            continue  # what came (a kubelet's status report, say) changes nothing the coordinator judges
        try:
            actions.step(config)
        except ApiException as exc:
            if not informer.is_transient(exc):
                raise Fatal(f"{exc.status} {exc.reason}") from exc
            log({"level": "warning", "event": "retry", "error": informer.describe(exc)})


def _batch(events: Any, timeout: float) -> Iterable[tuple[str, str, Any]]:
    """What the informers reported: waits up to ``timeout`` for the first, then takes what else is there."""
    try:
        yield events.get(timeout=timeout)
    except queue.Empty:
        return
    while True:
        try:
            yield events.get_nowait()
        except queue.Empty:
            return


class Actions:
    """The requests the coordinator's decisions call for."""

    def __init__(self, core: Any, apps: Any, state: Coordinator, log: Log) -> None:
        self.core, self.apps, self.state, self.log = core, apps, state, log
        self._next_sweep = state.clock() + SWEEP_SECONDS
        self._retry = False

    def due(self, config: labels.Config) -> bool:
        """Whether a step could decide anything new: something it judges changed, or a retry or a sweep is due."""
        state = self.state
        return bool(state.dirty or state.all_dirty or state.suspects or state.stale_revisions or self._retry
                    or (config is not state.config and config != state.config) or state.clock() >= self._next_sweep
                    or state.drains_due())

    def step(self, config: labels.Config) -> None:
        state = self.state
        self._retry = False
        state.configure(config)
        self._list_revisions()
        self._confirm_suspects()
        if state.clock() >= self._next_sweep:
            # The safety net under the events: every node judged again now and then.
            state.all_dirty = True
            self._next_sweep = state.clock() + SWEEP_SECONDS
        judged = state.refresh(config)
        if config.removal is None:
            return
        free, deliver = state.undelivered(config, judged)
        if free:
            self._free(free, "its grant never reached the node, which no longer needs a slot")
        for name, grant in deliver:
            self._deliver(name, grant)
        for name, need in state.next_grants(config):
            if not self._grant(name, need, config):
                break
        for name in state.drains_due():
            self._drain(name, config.removal)

    def _drain(self, name: str, rules: labels.Removal) -> None:
        """Evict what ``name``'s drain request asks for of the pods bound to it: a new or changed request lists the
        node's pods once; refusals (429) are asked again, by the uid seen, every EVICTION_RETRY_SECONDS."""
        drain = self.state.drains[name]
        if drain.pending:
            listed = kube.as_dict(self.core, self.core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={name}", _request_timeout=kube.REQUEST_TIMEOUT_SECONDS))
            chosen, refused = drains.targets(drain.request, name, listed.get("items") or [], rules.namespace,
                                             rules.drain_pod_selector)
            for ref, why in refused:
                if ref not in drain.evicted and ref not in drain.said:
                    drain.said.add(ref)
                    self.log({"level": "warning", "event": "eviction-refused", "node": name, "pod": ref,
                              "reason": why})
            drain.outstanding = {t.ref: t for t in chosen if t.ref not in drain.evicted}
            drain.pending = False
        for ref, target in sorted(drain.outstanding.items()):
            try:
                outcome = podops.evict(self.core, target.namespace, target.name, target.uid, node_name=name,
                                       log=self.log)
            except Exception:
                # Whether it went through is unknown (a lost response): the pods are listed again first, and one
                # already going is not asked twice.
                drain.pending = True
                raise
            if outcome == podops.CHANGED:
                drain.pending = True
            elif outcome != podops.REFUSED:
                drain.evicted.add(ref)
                del drain.outstanding[ref]
        drain.retry_at = self.state.clock() + drains.EVICTION_RETRY_SECONDS if drain.outstanding else None

    def _list_revisions(self) -> None:
        state = self.state
        for name in sorted(state.stale_revisions):
            found = state.daemonsets.get(name)
            if found is None:
                state.revisions.pop(name, None)
                continue
            state.revisions[name] = revisions.list_revisions(self.apps, state.namespace, found)
            state.dirty |= state.by_daemonset.get(name, set())
        state.stale_revisions = set()

    def _confirm_suspects(self) -> None:
        """Holders that left the coordinator's view: a read tells a deleted Node (its slot is freed now) from one
        that only lost a label."""
        state = self.state
        gone: set[str] = set()
        for name in sorted(state.suspects):
            try:
                state.seen(kube.get_node(self.core, name))
            except ApiException as exc:
                if exc.status != 404:
                    raise
                gone.add(name)
                state.gone(name)
        state.suspects = set()
        if gone:
            self._free(gone, "their Node objects were deleted")

    def _free(self, nodes: set[str], why: str) -> None:
        written = slots.write_if_unchanged(self.core, self.state.namespace, budget.release_patch(nodes))
        if written is not None:
            self.state.budget = written
        self.log({"level": "warning", "event": "slots-freed", "nodes": sorted(nodes)[:20], "count": len(nodes),
                  "reason": why})

    def _deliver(self, name: str, grant: str) -> None:
        try:
            self.state.seen(kube.patch_node(self.core, name, {"metadata": {"annotations": {
                grants.GRANT_ANNOTATION: grant}}}))
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.state.suspects.add(name)

    def _grant(self, name: str, need: Need, config: labels.Config) -> bool:
        """Write the slot (compare-and-swap), then tell the node; False when the budget changed under us (read
        again on the next step)."""
        state = self.state
        grant = state.grant_id()
        slot = need.record(state.now(), grant)
        count = state.count() if state.limits(config).counts_nodes else None
        if state.budget is None:
            try:
                written = kube.as_dict(self.core, self.core.create_namespaced_config_map(
                    namespace=state.namespace, body=budget.create_body(state.namespace, name, slot, count),
                    _request_timeout=kube.REQUEST_TIMEOUT_SECONDS))
            except ApiException as exc:
                if exc.status != 409:
                    raise
                written = None
        else:
            written = slots.write_if_unchanged(self.core, state.namespace,
                                               budget.grant_patch(state.budget, name, slot, count))
        if written is None:
            # Another writer came first: the next step decides again on the budget as it is now.
            state.budget = slots.Slots(self.core, node_name="", log=self.log).read(state.namespace)
            self._retry = True
            return False
        state.budget = written
        place = state.line.pop(name)
        self.log({"level": "info", "event": "slot-granted", "node": name, "reason": need.reason, "grant": grant,
                  "waitedSeconds": round(state.clock() - place.since, 3), "inLine": len(state.line),
                  **({"daemonSet": need.daemonset, "revision": need.revision} if need.daemonset else {})})
        self._deliver(name, grant)
        return True
