"""Decide which removal slot a node may take: the shared budget of nodes losing deploy labels at once.

The agents on different nodes never talk to each other; they share the budget through Leases named
``gpu-stack-removal-<i>`` for i below the budget, one node per Lease. The agent's RBAC can read a Lease by name but
not list them, so the names are the only index. This module is pure (Leases are dicts shaped like ``kubectl get
lease -o json``) so every slot decision can be tested against a fixed clock; the requests are in :mod:`.pacer`.
"""

from __future__ import annotations

import datetime
import math
from typing import Any, Mapping

LEASE_PREFIX = "gpu-stack-removal-"
# A holder renews at every pass, every PACE_POLL_SECONDS (pacer.py) while it holds a slot. Five minutes is what a
# node that died while holding one costs the others; an agent that merely restarted finds its own Lease again.
LEASE_DURATION_SECONDS = 300
CREATE, RENEW, TAKE_OVER = "create", "renew", "take-over"


def budget(max_unavailable: int | str, gpu_nodes: int) -> int:
    """Slots for ``max_unavailable`` among ``gpu_nodes``: a percentage rounds up and is never below one, as
    Kubernetes resolves a DaemonSet's maxUnavailable, so that a small fleet can still make progress."""
    if isinstance(max_unavailable, int):
        return max_unavailable
    percent = int(max_unavailable.rstrip("%"))
    return max(1, math.ceil(gpu_nodes * percent / 100))


def lease_name(index: int) -> str:
    return f"{LEASE_PREFIX}{index}"


def format_time(moment: datetime.datetime) -> str:
    """MicroTime, the format of a Lease's acquireTime and renewTime."""
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: Any) -> datetime.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)


def holder(lease: Mapping[str, Any] | None) -> str | None:
    if lease is None:
        return None
    return (lease.get("spec") or {}).get("holderIdentity") or None


def is_expired(lease: Mapping[str, Any], now: datetime.datetime) -> bool:
    """Whether the holder stopped renewing: renewTime (acquireTime before the first renewal) plus
    leaseDurationSeconds lies in the past. A Lease without either time cannot show that its holder is alive."""
    spec = lease.get("spec") or {}
    renewed = parse_time(spec.get("renewTime")) or parse_time(spec.get("acquireTime"))
    duration = spec.get("leaseDurationSeconds")
    if renewed is None or not isinstance(duration, int):
        return True
    return renewed + datetime.timedelta(seconds=duration) < now


def slot_action(lease: Mapping[str, Any] | None, node: str, now: datetime.datetime) -> str | None:
    """What ``node`` can do with one slot, whose Lease is ``lease`` (None: it does not exist): CREATE it, RENEW
    it (already this node's), TAKE_OVER a Lease nobody holds or whose holder stopped renewing, or None while
    another node holds it."""
    if lease is None:
        return CREATE
    current = holder(lease)
    if current == node:
        return RENEW
    if current is None or is_expired(lease, now):
        return TAKE_OVER
    return None


def lease_body(
    name: str, namespace: str, node: str, now: datetime.datetime, current: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The Lease ``node`` writes to hold slot ``name``: a new one, or ``current`` renewed or taken over. The
    resourceVersion of ``current`` goes with it, so that of two nodes taking over the same expired Lease the
    second gets a 409 instead of both believing they hold it."""
    spec = dict((current or {}).get("spec") or {})
    for key in ("acquireTime", "renewTime"):
        # Read back through the client, a MicroTime comes as an ISO string without the fixed six fraction
        # digits (none at all on a whole second) that the API server requires of it.
        moment = parse_time(spec.get(key))
        if moment is not None:
            spec[key] = format_time(moment)
    taking = current is None or holder(current) != node
    transitions = int(spec.get("leaseTransitions") or 0)
    if current is not None and taking:
        transitions += 1
    spec.update(
        holderIdentity=node,
        leaseDurationSeconds=LEASE_DURATION_SECONDS,
        renewTime=format_time(now),
        leaseTransitions=transitions,
    )
    if taking:
        spec["acquireTime"] = format_time(now)
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if current is not None:
        current_metadata = current.get("metadata") or {}
        for key in ("resourceVersion", "labels", "annotations"):
            if current_metadata.get(key):
                metadata[key] = current_metadata[key]
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}
