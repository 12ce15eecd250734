"""The fleet's one disruption budget: which nodes may be out of service for a change gpu-stack makes.

Every disruption the agent causes (a driver upgrade, a handover to another driver DaemonSet, a deploy label
removal, a MIG relayout) holds a slot for its whole duration. The slots are the entries of one ConfigMap,
``gpu-stack-upgrade-budget`` in the operands' namespace: ``data[<node name>]`` is the node's slot. Every write
to it is a compare-and-swap on its resourceVersion, so however many agents race, the API server admits a new
holder only against the holders that really exist, and the budget is never exceeded:

- no clock decides anything: a slot has no expiry. It is freed by its holder once the node's change finished
  (found again after a restart or a lost response, since the holder is named by the node), by any agent when
  the holder's Node no longer exists, or by an operator (``kubectl edit``). A node that died mid-change is out
  of service and keeps counting, as the operator's upgrade controller counts a node stuck in its state machine;
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
# How many GPU nodes with a managed driver a percentage resolves against, and when it was counted (informational:
# whether the count is stale is judged on the reader's own monotonic clock, never against this time).
GPU_NODES_ANNOTATION = "gpu-stack/gpu-nodes"
COUNT_EPOCH_ANNOTATION = "gpu-stack/count-epoch"
COUNTED_AT_ANNOTATION = "gpu-stack/counted-at"

# Why a node holds a slot.
DRIVER_UPGRADE, DRIVER_HANDOVER, LABEL_REMOVAL, MIG_RELAYOUT = "driver-upgrade", "driver-handover", "label-removal", "mig-relayout"

HOLDING, ACQUIRE, FULL, HALTED, PAUSED = "holding", "acquire", "full", "halted", "paused"


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


def holders(budget: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """node -> slot record; a record that is not a JSON object still holds its slot (someone wrote it by hand:
    ignoring it would admit one node too many)."""
    result: dict[str, dict[str, Any]] = {}
    for node, raw in ((budget or {}).get("data") or {}).items():
        try:
            record = json.loads(raw) if isinstance(raw, str) else None
        except ValueError:
            record = None
        result[node] = record if isinstance(record, dict) else {"reason": "unreadable"}
    return result


def gpu_nodes(budget: Mapping[str, Any] | None) -> tuple[int | None, str | None]:
    """The stored count of GPU nodes and its epoch (which changes with every recount); (None, None) without one."""
    annotations = ((budget or {}).get("metadata") or {}).get("annotations") or {}
    raw = annotations.get(GPU_NODES_ANNOTATION)
    count = int(raw) if isinstance(raw, str) and raw.isdigit() and len(raw) <= 7 else None
    return count, annotations.get(COUNT_EPOCH_ANNOTATION) if count is not None else None


def failed_holders(budget: Mapping[str, Any] | None) -> list[str]:
    return sorted(node for node, record in holders(budget).items() if record.get("failed"))


def decide(budget: Mapping[str, Any] | None, node: str, limits: Limits, count: int | None) -> str:
    """What ``node`` can do now: HOLDING (it is a holder), ACQUIRE (there is room), or why it waits: PAUSED
    (``upgrade.paused``), HALTED (a holder failed), FULL."""
    current = holders(budget)
    if node in current:
        return HOLDING
    if limits.paused:
        return PAUSED
    if any(record.get("failed") for record in current.values()):
        return HALTED
    return ACQUIRE if len(current) < limits.slots(count) else FULL


def _record(reason: str, now: datetime.datetime, **extra: Any) -> str:
    return json.dumps({"reason": reason, "since": format_time(now), **extra}, sort_keys=True, separators=(",", ":"))


def _base(budget: Mapping[str, Any] | None, namespace: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": NAME, "namespace": namespace}
    current_metadata = (budget or {}).get("metadata") or {}
    for key in ("resourceVersion", "labels", "annotations"):
        if current_metadata.get(key):
            metadata[key] = dict(current_metadata[key]) if isinstance(current_metadata[key], dict) else current_metadata[key]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": dict((budget or {}).get("data") or {})}


def with_holder(budget: Mapping[str, Any] | None, namespace: str, node: str, reason: str, now: datetime.datetime,
                count: tuple[int, str] | None = None, **extra: Any) -> dict[str, Any]:
    """The budget with ``node`` holding a slot for ``reason``; ``count`` (gpu nodes, epoch) replaces the stored
    count. The resourceVersion read goes with it: a write against a stale read gets 409."""
    body = _base(budget, namespace)
    body["data"][node] = _record(reason, now, **extra)
    if count is not None:
        annotations = body["metadata"].setdefault("annotations", {})
        annotations[GPU_NODES_ANNOTATION] = str(count[0])
        annotations[COUNT_EPOCH_ANNOTATION] = count[1]
        annotations[COUNTED_AT_ANNOTATION] = format_time(now)
    return body


def without(budget: Mapping[str, Any], namespace: str, nodes: set[str]) -> dict[str, Any]:
    body = _base(budget, namespace)
    for node in nodes:
        body["data"].pop(node, None)
    return body


def marked_failed(budget: Mapping[str, Any], namespace: str, node: str, why: str) -> dict[str, Any]:
    body = _base(budget, namespace)
    record = holders(budget).get(node, {"reason": "unknown"})
    body["data"][node] = json.dumps({**record, "failed": why[:200]}, sort_keys=True, separators=(",", ":"))
    return body


def cleared_failure(budget: Mapping[str, Any], namespace: str, node: str) -> dict[str, Any]:
    body = _base(budget, namespace)
    record = {k: v for k, v in holders(budget).get(node, {}).items() if k != "failed"}
    body["data"][node] = json.dumps(record, sort_keys=True, separators=(",", ":"))
    return body


def next_epoch(budget: Mapping[str, Any] | None) -> str:
    _, epoch = gpu_nodes(budget)
    return str(int(epoch) + 1) if epoch and epoch.isdigit() and len(epoch) < 12 else "1"
