"""A drain asked for by a node and carried out by the upgrade coordinator (from 0.10.0).

The node agent runs on a GPU node, where tenants' code runs: a token stolen there must not evict a pod on any other
node, and the Eviction API cannot be limited by admission to one node (an eviction's admission request carries the
Eviction, not the pod it names, so no policy can compare the pod's node with the token's). So the agent no longer
holds ``pods/eviction``. It asks on its own Node, which an admission policy lets it write and no other Node
(components/states/node_write_policy.py):

- ``gpu-stack/drain-request``: the grant the node holds its slot under, and the pods (``namespace/name``) the
  drain has to evict now, as the agent chose them (GPU work, not of a DaemonSet, selected by ``drainPodSelector``);
- the coordinator, off the GPU nodes, acts on a request only while the budget holds a slot of that grant for that
  node, not marked failed (the drain's timeout, which the agent judges); it lists the pods bound to the node and
  evicts those the request names that are bound there and that the drain selects itself, each once, with a
  precondition on the uid it saw, so a pod that went and came back under the same name on another node is never
  taken. A pod the request names that is not on the node is refused and logged, whoever wrote the request;
- an eviction answered 429 (a PodDisruptionBudget, or KubeVirt live-migrating the VM instead) is asked again every
  ``EVICTION_RETRY_SECONDS`` while the request stands; the agent removes the request when it gives the slot back or
  marks it failed.

This module is pure: nodes and pods are dicts shaped like ``kubectl get -o json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from gpustack_agent.model import pods as podinfo, removal

DRAIN_ANNOTATION = "gpu-stack/drain-request"
# As before 0.10.0, when the agent evicted: a refused eviction is asked again this often (KubeVirt restarts a
# migration that failed; a PodDisruptionBudget's room frees elsewhere).
EVICTION_RETRY_SECONDS = 30.0
# An annotation is at most 256 KiB with all others on the object; a node runs at most a few hundred pods.
MAX_REQUEST_LENGTH = 65536
NOT_ON_NODE = "not on the node that asked (gone, or another node's)"
NOT_SELECTED = "not GPU work the drain selects"


@dataclass(frozen=True)
class Request:
    """A node's drain request: the grant it holds its slot under ("" for a slot an agent before 0.8.0 took) and
    the pods to evict."""

    grant: str
    pods: frozenset[str]


def request_value(grant: str | None, pod_refs: Iterable[str]) -> str:
    return json.dumps({"grant": grant or "", "pods": sorted(set(pod_refs))}, sort_keys=True, separators=(",", ":"))


def request_of(node: Mapping[str, Any]) -> Request | None:
    """The node's drain request; None without one, or with one nobody could have meant (unreadable, oversized)."""
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(DRAIN_ANNOTATION)
    if not isinstance(raw, str) or len(raw) > MAX_REQUEST_LENGTH:
        return None
    try:
        parsed = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("grant"), str):
        return None
    refs = parsed.get("pods")
    if not isinstance(refs, list) or not all(isinstance(r, str) and "/" in r for r in refs):
        return None
    return Request(parsed["grant"], frozenset(refs))


def wanted(work: Sequence[Mapping[str, Any]], selector: str) -> list[str]:
    """What a drain asks to be evicted of the node's GPU work: what the selector selects and is not going already."""
    return sorted(podinfo.ref(p) for p in work if removal.selected(p, selector) and not podinfo.is_terminating(p))


def covers(request: Request | None, grant: str | None, refs: Iterable[str]) -> bool:
    """Whether a standing request already asks for ``refs`` under ``grant`` (no write needed)."""
    return request is not None and request.grant == (grant or "") and set(refs) <= request.pods


def request_patch(node: Mapping[str, Any], grant: str | None, work: Sequence[Mapping[str, Any]],
                  selector: str) -> dict[str, Any] | None:
    """The patch that asks for ``work``'s drain on the node; None when the standing request asks for it already, so
    that the request is written again only when work it does not name came (a pod bound before the cordon), never
    for a pod that went. The agent removes it with the slot, or when the slot is marked failed."""
    refs = wanted(work, selector)
    if not refs or covers(request_of(node), grant, refs):
        return None
    return {"metadata": {"annotations": {DRAIN_ANNOTATION: request_value(grant, refs)}}}


def granted(request: Request, record: Mapping[str, Any] | None) -> bool:
    """Whether the budget's slot ``record`` of the node is the one the request is made under, and not failed."""
    if record is None or record.get("failed"):
        return False
    return str(record.get("grant") or "") == request.grant


@dataclass
class Target:
    """One pod the coordinator is to evict, as it saw it bound to the node."""

    namespace: str
    name: str
    uid: str | None

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class Drain:
    """What the coordinator keeps of one node's drain: the request it acted on, what it evicted, what it has still
    to evict (refused so far: asked again from ``retry_at``), and whether the request changed since it last listed
    the node's pods."""

    request: Request
    evicted: set[str] = field(default_factory=set)
    outstanding: dict[str, Target] = field(default_factory=dict)
    retry_at: float | None = None
    pending: bool = True
    # What was logged as not evictable, so that each is said once.
    said: set[str] = field(default_factory=set)


def targets(request: Request, node_name: str, node_pods: Sequence[Mapping[str, Any]], namespace: str,
            selector: str) -> tuple[list[Target], list[tuple[str, str]]]:
    """Of the pods ``request`` names, those to evict (bound to ``node_name``, GPU work the drain selects, not going
    already) and those refused, with why. ``node_pods``: the pods the API server lists on the node; each is checked
    again here, so no list answer can make the coordinator evict a pod of another node."""
    bound = {podinfo.ref(p): p for p in node_pods if podinfo.node_name(p) == node_name}
    drainable = {podinfo.ref(p) for p in removal.gpu_work(list(bound.values()), namespace)
                 if removal.selected(p, selector)}
    chosen: list[Target] = []
    refused: list[tuple[str, str]] = []
    for ref in sorted(request.pods):
        pod = bound.get(ref)
        if pod is None:
            refused.append((ref, NOT_ON_NODE))
        elif ref not in drainable:
            refused.append((ref, NOT_SELECTED))
        elif not podinfo.is_terminating(pod):
            metadata = podinfo.metadata(pod)
            chosen.append(Target(str(metadata.get("namespace") or ""), podinfo.name(pod), metadata.get("uid")))
    return chosen, refused
