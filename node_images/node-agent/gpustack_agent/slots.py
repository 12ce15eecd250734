"""The requests behind :mod:`.budget`: read the budget ConfigMap, take, give back and mark a node's slot, count the
GPU nodes a percentage resolves against, and wake a waiting node when a slot frees.

Every write is a compare-and-swap against the budget as read. A write whose answer was lost is found out by the
next read (the node is, or is not, among the holders), so taking and giving back are idempotent by the node's
name; a 409 is a race lost to another agent and is answered by reading again, never by giving up the slot.

API load: a waiting node reads the budget only when it may start (its own jittered poll, scaled so the whole
fleet's waiting nodes poll about WAITING_POLLS_PER_SECOND times a second, or when a node that freed a slot wakes
it), never on every event of its Node. Counting the GPU nodes is a metadata-only list, done by the node taking a
slot when the stored count is older than COUNT_TTL_SECONDS on that node's own monotonic clock.
"""

from __future__ import annotations

import datetime
import random
import time
from typing import Any, Callable

from kubernetes.client.exceptions import ApiException

from . import budget, kube, nodenames

# The whole fleet's waiting nodes read the budget about this often in all, from their own jittered timers; a slot
# that frees is otherwise taken at once by the node its holder wakes.
WAITING_POLLS_PER_SECOND = 5.0
WAITING_POLL_MIN_SECONDS = 30.0
WAITING_POLL_MAX_SECONDS = 1800.0
COUNT_TTL_SECONDS = 600.0
# A node that frees a slot wakes one of the first N waiting nodes (by name), picked at random, N the budget's slots
# within these bounds: a whole batch of holders frees its slots within seconds, and picking among fewer nodes than
# slots would wake the same few again and again.
WAKE_CANDIDATES = 20
MAX_WAKE_CANDIDATES = 500


def wake_candidates(slots: int | None) -> int:
    return min(MAX_WAKE_CANDIDATES, max(WAKE_CANDIDATES, slots or 0))
WAKE_ANNOTATION = "gpu-stack/upgrade-wake"
UPGRADE_STATE_LABEL = "gpu-stack/upgrade-state"
WAITING = "upgrade-required"
# Nodes with a driver DaemonSet of gpu-stack: what a percentage budget is a percentage of.
MANAGED_DRIVER_SELECTOR = "gpu-stack/driver"


def waiting_poll_seconds(gpu_nodes: int | None, rng: Callable[[], float]) -> float:
    """The pause before a waiting node reads the budget again: the fleet's waiting nodes together read it about
    WAITING_POLLS_PER_SECOND times a second, each pause jittered by +-50 % so that they never poll in step."""
    mean = min(WAITING_POLL_MAX_SECONDS, max(WAITING_POLL_MIN_SECONDS, (gpu_nodes or 0) / WAITING_POLLS_PER_SECOND))
    return mean * (0.5 + rng())


class Slots:
    """One node's view of the budget ConfigMap in ``namespace``."""

    def __init__(self, core: Any, *, node_name: str, log: kube.Log, now: Callable[[], datetime.datetime],
                 clock: Callable[[], float] = time.monotonic, rng: Callable[[], float] = random.random) -> None:
        self.core = core
        self.node_name = node_name
        self.log = log
        self.now = now
        self.clock = clock
        self.rng = rng
        self.last: dict[str, Any] | None = None
        # The budget's slots as last resolved, to size the wake's pick.
        self.slots: int | None = None
        # (count epoch, when this agent first saw it on its own clock): a count is stale by this node's watch alone.
        self._count_seen: tuple[str | None, float] | None = None

    # --- reads ---

    def read(self, namespace: str) -> dict[str, Any] | None:
        try:
            found = self.core.read_namespaced_config_map(
                name=budget.NAME, namespace=namespace, _request_timeout=kube.REQUEST_TIMEOUT_SECONDS)
        except ApiException as exc:
            if exc.status == 404:
                self.last = None
                return None
            raise
        self.last = kube.as_dict(self.core, found)
        count, epoch = budget.gpu_nodes(self.last)
        if self._count_seen is None or self._count_seen[0] != epoch:
            self._count_seen = (epoch, self.clock())
        return self.last

    def count_is_stale(self) -> bool:
        return self._count_seen is None or self._count_seen[0] is None or (
            self.clock() - self._count_seen[1] > COUNT_TTL_SECONDS)

    def count_gpu_nodes(self) -> int:
        return len(nodenames.list_node_names(self.core, MANAGED_DRIVER_SELECTOR))

    # --- writes ---

    def _write(self, namespace: str, body: dict[str, Any], create: bool) -> bool:
        """The compare-and-swap; False when another agent wrote first (409) or the budget went away (404)."""
        try:
            if create:
                written = self.core.create_namespaced_config_map(
                    namespace=namespace, body=body, _request_timeout=kube.REQUEST_TIMEOUT_SECONDS)
            else:
                written = self.core.replace_namespaced_config_map(
                    name=budget.NAME, namespace=namespace, body=body, _request_timeout=kube.REQUEST_TIMEOUT_SECONDS)
        except ApiException as exc:
            if exc.status in (404, 409):
                return False
            raise
        self.last = kube.as_dict(self.core, written)
        return True

    def acquire(self, namespace: str, limits: budget.Limits, reason: str, **extra: Any) -> str:
        """Read the budget and take a slot if there is room: HOLDING when this node holds one now (taken now or
        before), else why it waits (FULL, HALTED, PAUSED, or FULL after a race lost to another agent)."""
        current = self.read(namespace)
        count, _ = budget.gpu_nodes(current)
        fresh: tuple[int, str] | None = None
        if limits.counts_nodes and (count is None or self.count_is_stale()):
            names = set(nodenames.list_node_names(self.core, MANAGED_DRIVER_SELECTOR))
            count = len(names)
            fresh = (count, budget.next_epoch(current))
            current = self._pruned(namespace, current, names)
        self.slots = limits.slots(count)
        decision = budget.decide(current, self.node_name, limits, count)
        if decision != budget.ACQUIRE:
            return decision
        body = budget.with_holder(current, namespace, self.node_name, reason, self.now(), fresh, **extra)
        if self._write(namespace, body, create=current is None):
            held = len(budget.holders(self.last))
            self.log({"level": "info", "event": "slot-acquired", "node": self.node_name, "reason": reason,
                      "holders": held, "slots": limits.slots(count)})
            if held < limits.slots(count):
                # Room is left (two freed slots woke the same node, or the budget grew): pass it on now rather
                # than leave it empty until some waiting node's poll.
                self.wake_one()
            return budget.HOLDING
        # Lost the race, or the answer to our own write was lost: the budget as it is now says which.
        return budget.HOLDING if self.node_name in budget.holders(self.read(namespace)) else budget.FULL

    def _pruned(self, namespace: str, current: dict[str, Any] | None, known: set[str]) -> dict[str, Any] | None:
        """``current`` without the holders whose Node was deleted (a slot nothing else would ever free); looked for
        only when the GPU nodes are counted anyway, so it costs a read only for holders outside that count."""
        gone = {n for n in budget.holders(current) if n not in known and n != self.node_name
                and not nodenames.node_exists(self.core, n)}
        if not gone or current is None:
            return current
        if self._write(namespace, budget.without(current, namespace, gone), create=False):
            self.log({"level": "warning", "event": "slots-freed", "node": self.node_name, "gone": sorted(gone),
                      "reason": "their Node objects were deleted"})
        return self.read(namespace)

    def holds(self, namespace: str) -> dict[str, Any] | None:
        """This node's slot record as the budget holds it now, None if it holds none."""
        return budget.holders(self.read(namespace)).get(self.node_name)

    def release(self, namespace: str, *, wake: bool = True) -> None:
        """Give this node's slot back (and the slots of holders whose Node no longer exists, seen on the way),
        then wake one waiting node. Repeated until the budget no longer names this node: a 409 is another agent's
        write in between, a lost answer is found by the next read."""
        for _ in range(10):
            current = self.read(namespace)
            if current is None or self.node_name not in budget.holders(current):
                break
            if self._write(namespace, budget.without(current, namespace, {self.node_name}), create=False):
                break
        else:
            raise ApiException(status=409, reason="the budget kept changing under ten releases in a row")
        self.log({"level": "info", "event": "slot-released", "node": self.node_name})
        if wake:
            self.wake_one()

    def mark(self, namespace: str, why: str | None) -> None:
        """Mark this node's slot failed (``why``) or clear the mark (None); a failed slot halts new admissions."""
        for _ in range(10):
            current = self.read(namespace)
            record = budget.holders(current).get(self.node_name)
            if current is None or record is None or bool(record.get("failed")) == (why is not None):
                return
            body = (budget.marked_failed(current, namespace, self.node_name, why) if why is not None
                    else budget.cleared_failure(current, namespace, self.node_name))
            if self._write(namespace, body, create=False):
                return

    def wake_one(self, selector: str = f"{UPGRADE_STATE_LABEL}={WAITING}") -> None:
        """Nudge one node ``selector`` selects (by default a waiting one) with an annotation its own watch sees, so
        a freed slot is taken in a second rather than at the next poll; best effort, the polls are the safety net."""
        try:
            waiting = nodenames.list_node_names(self.core, selector, limit=wake_candidates(self.slots))
            waiting = [n for n in waiting if n != self.node_name]
            if not waiting:
                return
            target = waiting[int(self.rng() * len(waiting)) % len(waiting)]
            kube.patch_node(self.core, target, {"metadata": {"annotations": {
                WAKE_ANNOTATION: f"{self.node_name}/{budget.format_time(self.now())}"}}})
        except ApiException as exc:
            if not kube.is_transient(exc) and exc.status != 404:
                raise
