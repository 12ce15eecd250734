"""The fleet's one disruption budget: which nodes may be out of service for a change gpu-stack makes.

Every disruption the agents cause (a driver upgrade, a handover to another driver DaemonSet, a deploy label
removal, a MIG relayout) holds a slot for its whole duration. The slots are the entries of one ConfigMap,
``gpu-stack-upgrade-budget`` in the operands' namespace: ``data[<node name>]`` is the node's slot. A slot is
granted by the upgrade coordinator (:mod:`.coordinator`) with a compare-and-swap on the ConfigMap's
resourceVersion, so however many coordinators run for a moment (a Deployment rolling) and whatever agents before
0.8.0 still take for themselves, the API server admits a new holder only against the holders that really exist,
and the budget is never exceeded:

- no clock decides anything: a slot has no expiry. It is given back by its holder once the node's change finished
  (found again after a restart or a lost response, since the holder is named by the node), freed by the coordinator
  when the holder's Node no longer exists or its grant never reached a node that no longer wants it, or by an
  operator (``kubectl edit``). A node that died mid-change is out of service and keeps counting, as the operator's
  upgrade controller counts a node stuck in its state machine;
- a budget that shrinks (``maxUnavailable`` lowered, a percentage of fewer nodes) admits nobody until the
  holders are below it; holders already in progress finish;
- a holder marked ``failed`` (its new driver never became ready) stops every new admission until it is fixed.

This module is pure: the ConfigMap is a dict shaped like ``kubectl get configmap -o json``.
"""

from __future__ import annotations

import datetime
import json
import math
from dataclasses import dataclass
from typing import Any, Mapping

NAME = "gpu-stack-upgrade-budget"
# How many GPU nodes with a managed driver a percentage resolved against when the coordinator last granted a slot
# (informational: the coordinator counts them from its own watch of the nodes).
GPU_NODES_ANNOTATION = "gpu-stack/gpu-nodes"

# Why a node holds a slot.
DRIVER_UPGRADE, DRIVER_HANDOVER, LABEL_REMOVAL, MIG_RELAYOUT = "driver-upgrade", "driver-handover", "label-removal", "mig-relayout"



@dataclass(frozen=True)
class Limits:
    """``upgrade.maxUnavailable`` (a count, or "N%" of the GPU nodes with a managed driver) and
    ``upgrade.maxParallelUpgrades`` (0: no bound of its own), as the node-pools config carries them."""

    max_unavailable: int | str
    max_parallel: int = 0
    paused: bool = False

    def slots(self, gpu_nodes: int | None) -> int:
        """How many nodes may hold a slot. A percentage rounds up and is never below one, as the operator resolves
        maxUnavailable, so that a small fleet still makes progress; with no count yet it resolves against one."""
        if isinstance(self.max_unavailable, int):
            bound = self.max_unavailable
        else:
            percent = int(self.max_unavailable.rstrip("%"))
            bound = max(1, math.ceil(max(gpu_nodes or 0, 1) * percent / 100))
        return min(bound, self.max_parallel) if self.max_parallel > 0 else bound

    @property
    def counts_nodes(self) -> bool:
        return isinstance(self.max_unavailable, str)


def format_time(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_record(raw: Any) -> dict[str, Any]:
    """One slot record; one that is not a JSON object still holds its slot (someone wrote it by hand: ignoring it
    would admit one node too many)."""
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"reason": "unreadable"}


def holders(budget: Mapping[str, Any] | None, known: Mapping[str, tuple[Any, dict[str, Any]]] | None = None
            ) -> dict[str, dict[str, Any]]:
    """node -> slot record. ``known`` (node -> (raw, record) of an earlier read) saves parsing the records that did
    not change: a 1,000-holder budget changes one record at a time."""
    result: dict[str, dict[str, Any]] = {}
    for node, raw in ((budget or {}).get("data") or {}).items():
        earlier = (known or {}).get(node)
        result[node] = earlier[1] if earlier is not None and earlier[0] == raw else parse_record(raw)
    return result


def holder(budget: Mapping[str, Any] | None, node: str) -> dict[str, Any] | None:
    """``node``'s slot record, None if it holds none (the others are not parsed)."""
    data = (budget or {}).get("data") or {}
    return parse_record(data[node]) if node in data else None


def gpu_nodes(budget: Mapping[str, Any] | None) -> int | None:
    """The stored count of GPU nodes, None without one."""
    annotations = ((budget or {}).get("metadata") or {}).get("annotations") or {}
    raw = annotations.get(GPU_NODES_ANNOTATION)
    return int(raw) if isinstance(raw, str) and raw.isdigit() and len(raw) <= 7 else None


def record(reason: str, now: datetime.datetime, **extra: Any) -> str:
    """A slot record as the budget holds it: why, since when (informational), and what the grant was for."""
    return json.dumps({"reason": reason, "since": format_time(now), **extra}, sort_keys=True, separators=(",", ":"))


def create_body(namespace: str, node: str, slot: str, count: int | None = None) -> dict[str, Any]:
    """The budget ConfigMap as the first grant creates it (Pulumi never declares it: an update would reset the
    slots in use)."""
    metadata: dict[str, Any] = {"name": NAME, "namespace": namespace}
    if count is not None:
        metadata["annotations"] = {GPU_NODES_ANNOTATION: str(count)}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {node: slot}}


def _resource_version(budget: Mapping[str, Any]) -> str | None:
    return (budget.get("metadata") or {}).get("resourceVersion")


def grant_patch(budget: Mapping[str, Any], node: str, slot: str, count: int | None = None) -> dict[str, Any]:
    """A JSON merge patch giving ``node`` the slot ``slot``, carrying the resourceVersion of ``budget`` as read:
    the API server applies it only if nobody wrote the budget since (409 otherwise), so holders are admitted only
    against the holders that really exist. ``count`` updates the stored count of GPU nodes (what a percentage
    resolved against) for whoever reads the ConfigMap."""
    metadata: dict[str, Any] = {"resourceVersion": _resource_version(budget)}
    if count is not None and gpu_nodes(budget) != count:
        metadata["annotations"] = {GPU_NODES_ANNOTATION: str(count)}
    return {"metadata": metadata, "data": {node: slot}}


def release_patch(nodes: set[str] | frozenset[str]) -> dict[str, Any]:
    """A JSON merge patch removing the slots of ``nodes``: no resourceVersion, since removing a slot can never
    admit one too many and removing one that is already gone changes nothing (a lost answer is harmless)."""
    return {"data": {node: None for node in sorted(nodes)}}


def mark_patch(budget: Mapping[str, Any], node: str, why: str | None) -> dict[str, Any] | None:
    """A compare-and-swap patch marking ``node``'s slot failed (``why``) or clearing the mark (None); None when
    there is nothing to change (no such slot, or already so)."""
    current = holder(budget, node)
    if current is None or bool(current.get("failed")) == (why is not None):
        return None
    changed = {k: v for k, v in current.items() if k != "failed"}
    if why is not None:
        changed["failed"] = why[:200]
    return {"metadata": {"resourceVersion": _resource_version(budget)},
            "data": {node: json.dumps(changed, sort_keys=True, separators=(",", ":"))}}
