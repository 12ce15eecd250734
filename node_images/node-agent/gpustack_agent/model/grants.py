"""The handshake between a node's agent and the upgrade coordinator, written on the node itself.

A node's agent never takes a slot of the fleet's budget on its own (from 0.8.0): it asks, and the coordinator
(:mod:`.coordinator`, one Deployment off the GPU nodes) grants slots in the order nodes asked. Both sides speak
through the Node object, which the agent already watches, so a node waiting for its turn costs the API server
nothing but that watch:

- the agent asks for a slot for a label change (a deploy label removal, a driver handover, a MIG relayout) with
  ``gpu-stack/upgrade-state=upgrade-required`` and the ``gpu-stack/slot-request`` annotation (why, and since when
  on the agent's wall clock: informational, no decision reads it except to order requests the coordinator found
  already waiting when it started);
- a driver upgrade is not asked for: the coordinator sees it, from the ``gpu-stack/driver-revision`` label each
  agent keeps equal to its driver pod's ``controller-revision-hash``, compared with its DaemonSet's newest
  ControllerRevision;
- the coordinator writes the slot into the budget ConfigMap (a compare-and-swap: the one invariant), then tells the
  node with the ``gpu-stack/slot-grant`` annotation, the grant's id; the agent acts on a grant only once the budget
  ConfigMap holds a slot of that id for its node, and removes the annotation when it gives the slot back.

This module is pure: nodes are dicts shaped like ``kubectl get node -o json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from gpustack_agent.model import budget

REQUEST_ANNOTATION = "gpu-stack/slot-request"
GRANT_ANNOTATION = "gpu-stack/slot-grant"
# The controller-revision-hash of the node's driver pod (of the DaemonSet its gpu-stack/driver label names).
DRIVER_REVISION_LABEL = "gpu-stack/driver-revision"
# What a slot record in the budget names, besides its reason: the grant's id, and for a driver upgrade the
# DaemonSet, its template digest and revision it was granted for.
GRANT_KEY, DAEMONSET_KEY, DIGEST_KEY, REVISION_KEY = "grant", "daemonSet", "digest", "revision"
# A grant id is the coordinator's own token; anything longer was not written by it.
MAX_GRANT_LENGTH = 64


def _annotations(node: Mapping[str, Any]) -> Mapping[str, str]:
    return (node.get("metadata") or {}).get("annotations") or {}


def labels_of(node: Mapping[str, Any]) -> Mapping[str, str]:
    return (node.get("metadata") or {}).get("labels") or {}


def request_of(node: Mapping[str, Any]) -> dict[str, str] | None:
    """The node's request for a slot, ``{"reason": ..., "since": ...}``; None without one (or an unreadable one,
    which the coordinator ignores and the agent overwrites)."""
    raw = _annotations(node).get(REQUEST_ANNOTATION)
    if not isinstance(raw, str) or len(raw) > 1024:
        return None
    try:
        request = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(request, dict) or not isinstance(request.get("reason"), str):
        return None
    return {"reason": request["reason"], "since": str(request.get("since") or "")}


def request_value(reason: str, since: str) -> str:
    return json.dumps({"reason": reason, "since": since}, sort_keys=True, separators=(",", ":"))


def grant_of(node: Mapping[str, Any]) -> str | None:
    """The id of the grant the coordinator last told this node of, None without one."""
    grant = _annotations(node).get(GRANT_ANNOTATION)
    return grant if isinstance(grant, str) and 0 < len(grant) <= MAX_GRANT_LENGTH else None


def driver_revision(node: Mapping[str, Any]) -> str | None:
    return labels_of(node).get(DRIVER_REVISION_LABEL) or None


def granted(record: Mapping[str, Any] | None, grant: str | None) -> bool:
    """Whether the budget's slot ``record`` is the one ``grant`` names."""
    return record is not None and grant is not None and record.get(GRANT_KEY) == grant


@dataclass
class Hold:
    """A slot this node holds: what it was granted for, and how far the change has come."""

    reason: str
    # None: a slot an agent before 0.8.0 took for itself, resumed after the upgrade.
    grant: str | None
    # A driver upgrade's target, as the coordinator granted it (None: the node's own label and config say).
    daemonset: str | None = None
    digest: str | None = None
    failed: bool = False
    drain_started: float | None = None
    restart_started: float | None = None

    @classmethod
    def of(cls, record: Mapping[str, Any], grant: str | None) -> "Hold":
        return cls(reason=str(record.get("reason") or budget.LABEL_REMOVAL), grant=grant,
                   daemonset=record.get(DAEMONSET_KEY) or None, digest=record.get(DIGEST_KEY) or None,
                   failed=bool(record.get("failed")))
