"""The upgrade coordinator: grants the fleet's disruption budget to nodes, in the order they came to need it.

One Deployment (``python -m gpustack_agent coordinate``, :mod:`.coordinate`), off the GPU nodes. It watches, as metadata only, the nodes
waiting in line or holding a slot (``gpu-stack/upgrade-state``) and the nodes with a managed driver
(``gpu-stack/driver``: what a percentage budget counts), the budget ConfigMap and the driver DaemonSets. From those:

- the line: a node that asked for a slot (:mod:`.grants`), and a node whose driver pod is out of date (its
  ``gpu-stack/driver-revision`` is an older revision of its DaemonSet than the newest, once the DaemonSet carries
  the template the node-pools config names and its controller has caught up) join it when the coordinator first
  sees them; nodes that come to need a slot at the same moment (a wave's DaemonSets updated) are ordered by a hash
  of their name and the revision, so that no node is always last;
- grants, first in line first, while the budget has room (``maxUnavailable``, a count or a percentage of the
  nodes with a managed driver; ``maxParallelUpgrades``), none while ``paused`` or while a holder is marked failed.
  A grant is a compare-and-swap on the budget ConfigMap, then the ``gpu-stack/slot-grant`` annotation on the node;
- frees: a holder whose Node was deleted (seen at once, confirmed by a read), and a grant that never reached a
  node that no longer needs it. A node gives its own slot back when it is through;
- drains (0.10.0): a holder that asks for one on its Node (:mod:`.drains`) has the pods it names evicted, those
  bound to it alone, while the budget holds its slot under the grant it names. The coordinator is the only
  holder of ``pods/eviction`` in the stack, and runs off the GPU nodes where it can.

Nothing here must run alone for the budget to hold: the ConfigMap's compare-and-swap admits holders only against
those that exist, so a second coordinator (a rolling Deployment) or a stale one can lose a race, never add a slot.
The coordinator keeps no state the cluster does not hold: after a restart it lists, and the line is rebuilt (the
requests found waiting ordered by when they were made, on their agents' clocks).
"""

from __future__ import annotations

import datetime
import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from gpustack_agent.api import informer
from gpustack_agent.model import budget, drains, grants, labels, removal, upgrade

IN_LINE, MANAGED, BUDGET, DAEMONSETS = "nodes-in-line", "nodes-with-a-driver", "budget", "driver-daemonsets"
# The coordinator re-reads its node-pools file this often: kubelet rewrites it in place, without an event.
TICK_SECONDS = 5.0
# Every node is judged again this often, whatever the events said: the safety net under them.
SWEEP_SECONDS = 300.0
LABELS_READ = (upgrade.UPGRADE_STATE_LABEL, labels.DRIVER_LABEL, grants.DRIVER_REVISION_LABEL,
               *removal.DRIVER_LIKE_DEPLOY_LABELS)
ANNOTATIONS_READ = (grants.REQUEST_ANNOTATION, grants.GRANT_ANNOTATION, drains.DRAIN_ANNOTATION)
Log = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Need:
    """Why a node needs a slot, and for a driver upgrade the DaemonSet, digest and revision it goes to."""

    reason: str
    daemonset: str | None = None
    digest: str | None = None
    revision: str | None = None
    # The agent's wall clock when it asked (informational; orders requests found waiting at the start).
    asked: str = ""

    def record(self, now: datetime.datetime, grant: str) -> str:
        target = ({grants.DAEMONSET_KEY: self.daemonset, grants.DIGEST_KEY: self.digest,
                   grants.REVISION_KEY: self.revision} if self.daemonset else {})
        return budget.record(self.reason, now, **{grants.GRANT_KEY: grant}, **target)


@dataclass
class InLine:
    need: Need
    since: float  # the coordinator's clock when it first saw the need


def _project(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a Node the coordinator reads: a few labels and annotations (a 10,000-node cache stays small)."""
    metadata = obj.get("metadata") or {}
    node_labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    return {"metadata": {"name": metadata.get("name"),
                         "labels": {k: node_labels[k] for k in LABELS_READ if k in node_labels},
                         "annotations": {k: annotations[k] for k in ANNOTATIONS_READ if k in annotations}}}


def _template_state(daemonset: Mapping[str, Any] | None) -> tuple[Any, ...]:
    """What decides a DaemonSet's current revision: its generation, what its controller observed, its digest."""
    metadata = (daemonset or {}).get("metadata") or {}
    return (metadata.get("generation"), ((daemonset or {}).get("status") or {}).get("observedGeneration"),
            (metadata.get("annotations") or {}).get(upgrade.TEMPLATE_DIGEST_ANNOTATION))


def _order_key(name: str, salt: str) -> str:
    return hashlib.sha256(f"{salt}/{name}".encode()).hexdigest()


class Coordinator:
    """What the coordinator knows of the cluster, and what it decides from it. Requests are made by
    :mod:`.coordinate`."""

    def __init__(self, *, namespace: str, log: Log, clock: Callable[[], float], now: Callable[[], datetime.datetime],
                 rng: Callable[[], float]) -> None:
        self.namespace = namespace
        self.log = log
        self.clock = clock
        self.now = now
        self.nodes: dict[str, dict[str, Any]] = {}
        self.members: dict[str, set[str]] = {IN_LINE: set(), MANAGED: set()}
        self.budget: dict[str, Any] | None = None
        self.daemonsets: dict[str, dict[str, Any]] = {}
        # DaemonSet -> its ControllerRevisions, listed when its generation or template changed.
        self.revisions: dict[str, list[dict[str, Any]]] = {}
        self.stale_revisions: set[str] = set()
        self.line: dict[str, InLine] = {}
        # DaemonSet -> the nodes whose gpu-stack/driver names it: judged again when it changes.
        self.by_daemonset: dict[str, set[str]] = {}
        # Nodes whose need may have changed since the last step; all of them after a config change.
        self.dirty: set[str] = set()
        self.all_dirty = True
        self.suspects: set[str] = set()
        self.config: labels.Config | None = None
        self._holders: tuple[str | None, dict[str, dict[str, Any]]] | None = None
        self._records: dict[str, tuple[Any, dict[str, Any]]] = {}
        self._epoch = "%08x" % int(rng() * 0xFFFFFFFF)
        self._grants = 0
        # Holders whose drain request stands, and how far each came.
        self.drains: dict[str, drains.Drain] = {}

    # --- what the informers report ---------------------------------------------------------------------

    def observe(self, source: str, kind: str, obj: Any) -> None:
        if source in self.members:
            self._observe_nodes(source, kind, obj)
        elif source == BUDGET:
            before = self.holders()
            self.budget = (obj[0] if obj else None) if kind == informer.SYNC else (
                None if kind == "DELETED" else dict(obj))
            self._holders_changed(before)
        elif source == DAEMONSETS:
            self._observe_daemonsets(kind, obj)

    def _observe_daemonsets(self, kind: str, obj: Any) -> None:
        """The operands' DaemonSets (driver-like ones are those the config's `drivers` names: a vGPU or VFIO manager
        carries no label of its own that says so). Their ControllerRevisions are listed again only when what decides
        the newest one changed, not on each status update of a rollout."""
        if kind == informer.SYNC:
            self.daemonsets = {d["metadata"]["name"]: d for d in obj}
            self.stale_revisions = set(self.daemonsets) & self._driver_like()
            self.all_dirty = True
            return
        name = obj["metadata"]["name"]
        before = _template_state(self.daemonsets.get(name))
        if kind == "DELETED":
            self.daemonsets.pop(name, None)
        else:
            self.daemonsets[name] = dict(obj)
        if name in self._driver_like() and _template_state(self.daemonsets.get(name)) != before:
            self.stale_revisions.add(name)
            self.dirty |= self.by_daemonset.get(name, set())

    def _driver_like(self) -> set[str]:
        return set(self.config.drivers) if self.config is not None else set(self.daemonsets)

    def _holders_changed(self, before: Mapping[str, Any]) -> None:
        after = self.holders()
        changed = {n for n in set(before) | set(after) if before.get(n) is not after.get(n)}
        self.dirty |= changed
        # A new holder the coordinator does not see (no label it watches): whether its Node exists is read once.
        self.suspects |= {n for n in changed if n in after and n not in self.nodes}

    def _observe_nodes(self, source: str, kind: str, obj: Any) -> None:
        members = self.members[source]
        if kind == informer.SYNC:
            listed = {item["metadata"]["name"]: _project(item) for item in obj}
            # Members that the new list lacks left the selection or were deleted while the watch was down.
            left = members - set(listed)
            self.suspects |= {n for n in left if n in self.holders()}
            members.clear()
            members.update(listed)
            for name, projected in listed.items():
                self._set_node(name, projected)
            for name in left:
                if not any(name in m for m in self.members.values()):
                    self._drop_node(name)
            self.all_dirty = True
            return
        name = (obj.get("metadata") or {}).get("name")
        if not name:
            return
        if kind == "DELETED":
            # Deleted, or no longer selected (a label removed): a read tells which, when it holds a slot.
            members.discard(name)
            if name in self.holders():
                self.suspects.add(name)
            if not any(name in m for m in self.members.values()):
                self._drop_node(name)
            return
        members.add(name)
        self._set_node(name, _project(obj))

    def _set_node(self, name: str, projected: dict[str, Any]) -> None:
        """A node's labels and annotations as seen now; nothing to judge again unless what the coordinator reads
        of it changed (a kubelet status report changes none of it)."""
        old = self.nodes.get(name)
        if old == projected:
            return
        old_set = (old or {}).get("metadata", {}).get("labels", {}).get(labels.DRIVER_LABEL)
        new_set = projected["metadata"]["labels"].get(labels.DRIVER_LABEL)
        if old_set != new_set:
            self.by_daemonset.get(old_set or "", set()).discard(name)
            if new_set:
                self.by_daemonset.setdefault(new_set, set()).add(name)
        self.nodes[name] = projected
        self.dirty.add(name)

    def _drop_node(self, name: str) -> None:
        old = self.nodes.pop(name, None)
        driver_set = (old or {}).get("metadata", {}).get("labels", {}).get(labels.DRIVER_LABEL)
        self.by_daemonset.get(driver_set or "", set()).discard(name)
        self.dirty.add(name)

    def seen(self, obj: Mapping[str, Any]) -> None:
        """A node as this coordinator's own read or write returned it."""
        name = (obj.get("metadata") or {}).get("name")
        if name:
            self._set_node(name, _project(obj))

    def gone(self, name: str) -> None:
        for members in self.members.values():
            members.discard(name)
        self._drop_node(name)
        self.line.pop(name, None)

    # --- the line ----------------------------------------------------------------------------------------

    def holders(self) -> dict[str, dict[str, Any]]:
        """The budget's slots, each record parsed once for as long as it does not change."""
        version = ((self.budget or {}).get("metadata") or {}).get("resourceVersion")
        if self._holders is None or self._holders[0] != version or version is None:
            data = (self.budget or {}).get("data") or {}
            known = self._records
            parsed = budget.holders(self.budget, known)
            self._records = {node: (data[node], record) for node, record in parsed.items()}
            self._holders = (version, parsed)
        return self._holders[1]

    def count(self) -> int:
        """The nodes with a managed driver: what a percentage budget resolves against."""
        return len(self.members[MANAGED])

    def _current(self, daemonset: str, digest: str) -> tuple[str, set[str]] | None:
        """``daemonset``'s newest revision once it runs the template ``digest`` names, and every revision it has."""
        found = self.daemonsets.get(daemonset)
        owned = self.revisions.get(daemonset) or []
        revision = upgrade.current_revision(found, owned, digest)
        if revision is None:
            return None
        return revision, {(r.get("metadata") or {}).get("labels", {}).get(upgrade.REVISION_HASH_LABEL, "")
                          for r in owned}

    def _deployed(self, daemonset: str, node_labels: Mapping[str, str]) -> bool:
        """Whether the node is deployed ``daemonset``'s operand: the driver-like deploy labels its pods select are
        `true` on it (a host-installed driver, a node paused by its driver manager: not upgraded)."""
        found = self.daemonsets.get(daemonset) or {}
        selector = ((((found.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeSelector") or {})
        wanted = {k: v for k, v in selector.items() if k in removal.DRIVER_LIKE_DEPLOY_LABELS}
        if not wanted:
            return removal.runs_driver_like(node_labels)
        return all(node_labels.get(k) == v for k, v in wanted.items())

    def need(self, name: str, config: labels.Config) -> Need | None:
        node = self.nodes.get(name)
        if node is None or config.removal is None or name in self.holders():
            return None
        request = grants.request_of(node)
        if request is not None and upgrade.state_of(node) == upgrade.WAITING:
            return Need(request["reason"], asked=request["since"])
        node_labels = node["metadata"]["labels"]
        daemonset = node_labels.get(labels.DRIVER_LABEL)
        revision = node_labels.get(grants.DRIVER_REVISION_LABEL)
        digest = config.drivers.get(daemonset or "")
        if (config.removal.driver_upgrade != "rolling" or not daemonset or not revision or not digest
                or not self._deployed(daemonset, node_labels)):
            return None
        current = self._current(daemonset, digest)
        # A revision the DaemonSet never had is another DaemonSet's (the node is being handed over): not judged.
        if current is None or revision == current[0] or revision not in current[1]:
            return None
        return Need(budget.DRIVER_UPGRADE, daemonset, digest, current[0])

    def configure(self, config: labels.Config) -> None:
        """A new node-pools document: every node judged again, the revisions of newly named driver-like DaemonSets
        read."""
        if config != self.config:
            self.stale_revisions |= (set(config.drivers) - set(self.revisions)) & set(self.daemonsets)
            self.config = config
            self.all_dirty = True

    def refresh(self, config: labels.Config) -> set[str]:
        """Bring the line up to date with the nodes that changed (all of them after a config change): who joins,
        who leaves (no longer needs a slot), whose need changed (keeping its place). Returns the nodes judged."""
        self.configure(config)
        names = set(self.nodes) | set(self.line) | set(self.holders()) if self.all_dirty else self.dirty
        self.all_dirty = False
        self.dirty = set()
        joining: list[tuple[str, Need]] = []
        for name in names:
            need = self.need(name, config)
            if need is None:
                self.line.pop(name, None)
            elif name in self.line:
                self.line[name].need = need
            else:
                joining.append((name, need))
        # Those who came to need a slot together: requests by when they were made, the rest in an order no name
        # decides (a rollout whose nodes are granted by name would always leave the same nodes last).
        joining.sort(key=lambda item: (item[1].asked == "", item[1].asked,
                                       _order_key(item[0], item[1].revision or item[1].reason)))
        started = self.clock()
        for name, need in joining:
            self.line[name] = InLine(need, started)
        self._judge_drains(names)
        return names

    def _judge_drains(self, names: set[str]) -> None:
        """Whose drain request stands, under a slot the budget holds for it: a new or changed request is acted on
        (listed and evicted) in the next step; one withdrawn, or whose slot went or failed, is dropped."""
        held = self.holders()
        for name in names | set(self.drains):
            node = self.nodes.get(name)
            request = drains.request_of(node) if node is not None else None
            if request is None or not drains.granted(request, held.get(name)):
                self.drains.pop(name, None)
                continue
            current = self.drains.get(name)
            if current is None or current.request.grant != request.grant:
                self.drains[name] = drains.Drain(request)
            elif current.request != request:
                current.request, current.pending = request, True

    def drains_due(self) -> list[str]:
        """Holders whose drain has something to do now: a request not acted on yet, or refusals to ask again."""
        now = self.clock()
        return sorted(name for name, drain in self.drains.items()
                      if drain.pending or (drain.retry_at is not None and now >= drain.retry_at))

    # --- decisions ---------------------------------------------------------------------------------------

    def limits(self, config: labels.Config) -> budget.Limits:
        assert config.removal is not None
        rules = config.removal
        return budget.Limits(rules.max_unavailable, rules.max_parallel, rules.paused)

    def next_grants(self, config: labels.Config) -> list[tuple[str, Need]]:
        """The nodes first in line, as many as the budget has room for."""
        if config.removal is None or not self.line:
            return []
        limits = self.limits(config)
        held = self.holders()
        if limits.paused or any(record.get("failed") for record in held.values()):
            return []
        room = limits.slots(self.count()) - len(held)
        chosen: list[tuple[str, Need]] = []
        for name, place in self.line.items():
            if len(chosen) >= room:
                break
            if name not in held:
                chosen.append((name, place.need))
        return chosen

    def undelivered(self, config: labels.Config, names: set[str]) -> tuple[set[str], list[tuple[str, str]]]:
        """Slots the coordinator granted whose node does not show the grant and is not at work under it: freed when
        the node no longer needs one (it withdrew, or its driver got up to date some other way), else delivered
        again (the annotation's write was lost). Slots an agent before 0.8.0 took carry no grant: left alone."""
        free: set[str] = set()
        deliver: list[tuple[str, str]] = []
        held = self.holders()
        for name in sorted(n for n in names if n in held):
            record = held[name]
            grant = record.get(grants.GRANT_KEY)
            node = self.nodes.get(name)
            if not grant or node is None or grants.grant_of(node) == grant:
                continue
            if upgrade.state_of(node) in upgrade.HOLDING_STATES:
                continue
            still = self._still_needs(name, record, config)
            if still:
                deliver.append((name, str(grant)))
            else:
                free.add(name)
        return free, deliver

    def _still_needs(self, name: str, record: Mapping[str, Any], config: labels.Config) -> bool:
        node = self.nodes[name]
        if grants.request_of(node) is not None and upgrade.state_of(node) == upgrade.WAITING:
            return True
        if record.get("reason") != budget.DRIVER_UPGRADE:
            return False
        node_labels = node["metadata"]["labels"]
        return node_labels.get(grants.DRIVER_REVISION_LABEL) not in (None, record.get(grants.REVISION_KEY))

    def grant_id(self) -> str:
        self._grants += 1
        return f"{self._epoch}-{self._grants}"
