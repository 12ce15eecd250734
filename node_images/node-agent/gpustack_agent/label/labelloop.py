"""The label loop: one node's labels kept in line with the node-pools config, for as long as the agent runs.

It reads the Node once and then watches it, resuming every watch from the last resourceVersion seen, as client-go's
reflectors do; it calls its reconcile (:class:`.pacer.Pacer` in the agent) on every change of what a reconcile
reads, and at the time the reconcile asked to look again (:class:`Next`). While the reconcile waits on the node's
pods (a holder: pods leaving, a new driver getting Ready) it watches them instead, from its reconcile's own list.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol

from gpustack_agent.api import podwatch
from gpustack_agent.api.kube import get_node, keep_running, Log, reconcile_node, watch_node, Watcher
from gpustack_agent.api.podwatch import follow, watch_node_pods
from gpustack_agent.model import labelcheck, labels


@dataclass(frozen=True)
class Next:
    """What one reconcile asks of the label loop: to look again within ``seconds`` at the latest (None: at the
    resync), and whether to watch the node's pods instead of its Node (``pods``): then the reconciler's
    :class:`.podwatch.PodCache` is kept current from that watch, and each event the reconciler ``wants`` is
    reconciled at once, without a read."""

    seconds: float | None = None
    pods: bool = False


class Reconciler(Protocol):
    """The contract of the label loop's reconcile: brings one node in line and says when to look again."""

    # The node as the reconciler last read or wrote it: where the loop's next watch of the Node resumes from.
    node: Mapping[str, Any] | None
    pods: podwatch.PodCache

    def __call__(self, node: Mapping[str, Any], config: Any) -> Next: ...

    def wants(self, pod_event: Mapping[str, Any]) -> bool: ...


class _Immediate:
    """The reconcile of a version 1 document: every change at once, nothing to wait for."""

    def __init__(self, core: Any, log: Log) -> None:
        self.core, self.log = core, log
        self.node: Mapping[str, Any] | None = None
        self.pods = podwatch.PodCache(core, "")

    def __call__(self, node: Mapping[str, Any], config: Any) -> Next:
        self.node = node
        reconcile_node(self.core, node, config, self.log)
        return Next()

    def wants(self, pod_event: Mapping[str, Any]) -> bool:
        return False


class _NodeView:
    """The Node as the loop last saw it, and the resourceVersion its next watch resumes from."""

    def __init__(self) -> None:
        self.node: Mapping[str, Any] | None = None
        self.resource_version: str | None = None

    def set(self, node: Mapping[str, Any] | None) -> None:
        self.node = node
        self.resource_version = podwatch.resource_version_of(node or {}) if node is not None else None


def _judged_part(node: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    """What a reconcile reads of a Node: its labels, annotations and spec (cordon, taints), not its status."""
    metadata = node.get("metadata") or {}
    return metadata.get("labels"), metadata.get("annotations"), node.get("spec")


def watch_timeout(wait: Next, resync_seconds: int) -> int:
    """The watch's timeout for ``wait``: never shorter than asked (rounded up, so the next pass does not come a
    fraction of a second early and find nothing due), never longer than the resync."""
    seconds = resync_seconds if wait.seconds is None else min(float(resync_seconds), wait.seconds)
    return max(1, math.ceil(seconds))


def run_label_loop(
    core: Any,
    *,
    node_name: str,
    load_config: Callable[[], Any],
    resync_seconds: int,
    log: Log,
    stop: Callable[[], bool] = lambda: False,
    sleep: Callable[[float], None] = time.sleep,
    watch_events: Watcher = watch_node,
    rng: Callable[[], float] = random.random,
    reconcile: Reconciler | None = None,
    clock: Callable[[], float] = time.monotonic,
    watch_pods: Watcher | None = None,
) -> None:
    """Keep the node's labels reconciled until ``stop()`` is true.

    Each pass reconciles the node, then watches it until the reconcile's :class:`Next` is due (at most
    ``resync_seconds``), reconciling on every change; the watch timing out is the periodic resync that picks up
    config file changes (they produce no node event). The Node is read once: every later watch resumes from the
    last resourceVersion seen (bookmarks keep it fresh), as client-go's reflectors do; it is read again only after
    a watch failed (a resourceVersion the server no longer has among the causes). With an invalid config the labels
    stay as they are: guessing could strip deploy labels from every node (the agent's ``load_config``,
    :class:`.configfile.ConfigSource`, returns the last good one instead).

    ``reconcile`` (default: every change at once, :func:`reconcile_node`) is :class:`.pacer.Pacer` in the agent.
    While it asks for the node's pods (``Next.pods``: a holder waiting for pods to leave or a new driver to get
    Ready), the loop watches them instead of the Node, from its reconciler's own list of them.

    A watch the server ends long before its timeout (closed at once, an empty stream) counts as a failure: the
    next pass waits the loop's backoff. Labels and annotations the agent cannot make sense of are logged once
    each (``label-invalid``).
    """
    loop = _LabelLoop(core, node_name, load_config, resync_seconds, log, stop, clock,
                      reconcile if reconcile is not None else _Immediate(core, log), watch_events, watch_pods)
    keep_running(loop.one_pass, node_name=node_name, resync_seconds=resync_seconds, log=log, stop=stop, sleep=sleep,
                 rng=rng)


@dataclass(frozen=True)
class _Handled:
    """What the last reconcile was given (the Node's judged part, the config) and what it answered, and when."""

    judged: tuple[Any, Any, Any]
    config: Any
    wait: Next
    at: float


class _LabelLoop:
    """One node's passes (:func:`run_label_loop`): a reconcile, then a watch of the Node or of its pods."""

    def __init__(self, core: Any, node_name: str, load_config: Callable[[], Any], resync_seconds: int, log: Log,
                 stop: Callable[[], bool], clock: Callable[[], float], reconciler: Reconciler, watch_events: Watcher,
                 watch_pods: Watcher | None) -> None:
        self.core, self.node_name, self.load_config, self.resync_seconds = core, node_name, load_config, resync_seconds
        self.stop, self.clock, self.reconciler = stop, clock, reconciler
        self.watch_events, self.watch_pods = watch_events, watch_pods or watch_node_pods
        self.warnings = labelcheck.Warnings(log)
        self.view = _NodeView()
        self.handled: _Handled | None = None

    def handle(self, node: Mapping[str, Any]) -> Next:
        config_data = self.load_config()
        try:
            config = config_data if isinstance(config_data, labels.Config) else labels.parse_config(config_data)
        except labels.ConfigError:
            # The reconcile reports it (config-invalid) and changes nothing; without a config, nothing to judge.
            self.handled = None
            return self.reconciler(node, config_data)
        self.warnings.report(self.node_name, labelcheck.label_problems(node, config))
        wait = self.reconciler(node, config)
        # The reconcile's own writes answered with the Node as written: newer than what it was given, and where the
        # next watch resumes from (its own changes need no event).
        seen = self.reconciler.node or node
        self.view.set(seen)
        self.handled = _Handled(_judged_part(seen), config, wait, self.clock())
        return wait

    def unchanged(self, node: Mapping[str, Any]) -> bool:
        """An event that changes nothing a reconcile reads (the kubelet's status reports): no pass for it."""
        last = self.handled
        if last is None or last.judged != _judged_part(node):
            return False
        config = self.load_config()
        return last.config is config or last.config == config

    def resume(self, node: Mapping[str, Any]) -> Next | None:
        """At a resync, the last answer while it still stands: the Node and the config are as the reconcile saw
        them and what it asked to be woken for is not due. The watch saw every change of the Node (it resumed from
        the last resourceVersion), so a reconcile could only answer the same."""
        last = self.handled
        if last is None or last.wait.pods or not self.unchanged(node):
            return None
        due = None if last.wait.seconds is None else last.at + last.wait.seconds
        if due is not None and self.clock() >= due - 0.5:
            return None
        return Next(seconds=None if due is None else due - self.clock())

    def sooner(self, wait: Next, started: float, timeout: int) -> bool:
        return wait.seconds is not None and self.clock() + wait.seconds < started + timeout - 0.5

    def node_phase(self, wait: Next) -> str:
        timeout = watch_timeout(wait, self.resync_seconds)
        started = self.clock()

        def ends_pass(event: Mapping[str, Any]) -> bool:
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == podwatch.BOOKMARK:
                self.view.resource_version = podwatch.resource_version_of(obj) or self.view.resource_version
                return self.stop()
            if kind == podwatch.DELETED:
                self.view.set(None)
                return True
            if kind not in (podwatch.ADDED, podwatch.MODIFIED):
                return self.stop()
            self.view.set(obj)
            if self.stop():
                return True
            if self.unchanged(obj):
                return False
            # A node event that asks for another kind of wait, or a sooner look, starts a new pass.
            after = self.handle(obj)
            return after.pods or self.sooner(after, started, timeout)

        events = self.watch_events(self.core, self.node_name, timeout, self.view.resource_version)
        return follow(events, ends_pass, timeout, started, self.clock)

    def pods_phase(self, wait: Next) -> str:
        reconciler = self.reconciler
        pods = reconciler.pods
        if not pods.known:
            pods.refresh()
        self.view.set(reconciler.node)
        timeout = watch_timeout(wait, self.resync_seconds)
        started = self.clock()
        pods.live = True

        def ends_pass(event: Mapping[str, Any]) -> bool:
            pods.apply(event)
            if self.stop():
                return True
            if event.get("type") == podwatch.BOOKMARK or not reconciler.wants(event):
                return False
            after = self.handle(reconciler.node or {})
            return not after.pods or self.sooner(after, started, timeout)

        events = self.watch_pods(self.core, self.node_name, timeout, pods.resource_version)
        return follow(events, ends_pass, timeout, started, self.clock)

    def one_pass(self) -> str:
        view, reconciler = self.view, self.reconciler
        try:
            if view.node is None:
                view.set(get_node(self.core, self.node_name))
            wait = self.resume(view.node or {}) or self.handle(view.node or {})
            if wait.pods:
                return self.pods_phase(wait)
            reconciler.pods.live = False
            return self.node_phase(wait)
        except BaseException:
            # Whatever failed, the next pass starts from a fresh read of the Node and of the node's pods.
            view.set(None)
            reconciler.pods.live = False
            reconciler.pods.forget()
            raise
