"""From a Recording to what a reviewer reads: manifests in apply order, the dependency graph, and helpers.

`manifests.yaml` lists every Kubernetes object after everything it depends on. A resource's effective
dependencies are its own plus those of every component above it, because a child registers only after its
parent did, and the parent waited for its own `depends_on` (pulumi.md §1.3).
"""

from __future__ import annotations

import heapq
from typing import Any, Iterable

import yaml

from components.catalogs.consts import SKIP_AWAIT
from gpustack.mockrun import Recording, Registration

PULUMI_INTERNAL_INPUTS = ("__defaults",)


def integral(value: Any) -> Any:
    """The engine carries numbers as floats; Kubernetes objects want integers where they are whole."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: integral(v) for k, v in value.items() if k not in PULUMI_INTERNAL_INPUTS}
    if isinstance(value, list):
        return [integral(v) for v in value]
    return value


# Keys a reader looks for first; everything else follows alphabetically, so golden diffs stay stable.
KEY_PRIORITY = ("apiVersion", "kind", "metadata", "name", "namespace", "labels", "annotations", "image", "command", "args")


def canonical(value: Any) -> Any:
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: (KEY_PRIORITY.index(k) if k in KEY_PRIORITY else len(KEY_PRIORITY), k))
        return {k: canonical(value[k]) for k in keys}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


def kubernetes_object(registration: Registration) -> dict[str, Any]:
    return canonical(integral(registration.inputs))


def effective_dependencies(recording: Recording) -> dict[str, set[str]]:
    by_urn = recording.by_urn()
    children: dict[str, list[str]] = {}
    for r in recording.registrations:
        children.setdefault(r.parent, []).append(r.urn)

    def custom_descendants(urn: str) -> set[str]:
        found: set[str] = set()
        for child in children.get(urn, []):
            found |= {child} if by_urn[child].custom else custom_descendants(child)
        return found

    result: dict[str, set[str]] = {}
    for r in recording.registrations:
        deps: set[str] = set(r.dependencies)
        parent = r.parent
        while parent in by_urn:
            deps |= set(by_urn[parent].dependencies)
            parent = by_urn[parent].parent
        expanded: set[str] = set()
        for dep in deps:
            if dep in by_urn and not by_urn[dep].custom:
                expanded |= custom_descendants(dep)
            else:
                expanded.add(dep)
        expanded.discard(r.urn)
        result[r.urn] = expanded
    return result


def transitive_dependencies(recording: Recording) -> dict[str, set[str]]:
    """Everything a resource waits for, directly or through what it waits for."""
    direct = effective_dependencies(recording)
    closed: dict[str, set[str]] = {}

    def visit(urn: str) -> set[str]:
        if urn not in closed:
            closed[urn] = set()
            for dep in direct.get(urn, ()):
                closed[urn] |= {dep} | visit(dep)
        return closed[urn]

    for urn in direct:
        visit(urn)
    return closed


# Among objects free to go, the order Helm installs kinds in, then by name: registrations arrive in whatever order
# the asynchronous SDK completes them, and golden files must not depend on that.
KIND_ORDER = (
    "Namespace", "RuntimeClass", "ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding",
    "SecurityContextConstraints",
    "ConfigMap", "Secret", "Service", "DaemonSet", "Deployment", "Job",
)


def _tie_break(registration: Registration) -> tuple:
    kind = registration.inputs.get("kind", "")
    metadata = registration.inputs.get("metadata") or {}
    rank = KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)
    return rank, metadata.get("namespace") or "", metadata.get("name") or registration.name


def apply_order(recording: Recording) -> list[Registration]:
    """Kubernetes objects topologically sorted by effective dependencies; ties broken by kind, then name."""
    objects = sorted((r for r in recording.registrations if r.is_kubernetes_object), key=_tie_break)
    index = {r.urn: i for i, r in enumerate(objects)}
    deps = effective_dependencies(recording)
    pending = {r.urn: {d for d in deps[r.urn] if d in index} for r in objects}
    dependents: dict[str, list[str]] = {}
    for urn, before in pending.items():
        for d in before:
            dependents.setdefault(d, []).append(urn)
    ready = [index[u] for u, before in pending.items() if not before]
    heapq.heapify(ready)
    ordered: list[Registration] = []
    while ready:
        registration = objects[heapq.heappop(ready)]
        ordered.append(registration)
        for nxt in dependents.get(registration.urn, []):
            pending[nxt].discard(registration.urn)
            if not pending[nxt]:
                heapq.heappush(ready, index[nxt])
    if len(ordered) != len(objects):
        stuck = sorted(set(pending) - {r.urn for r in ordered})
        raise RuntimeError(f"dependency cycle among: {stuck}")
    return ordered


def manifests_yaml(recording: Recording) -> str:
    documents = [kubernetes_object(r) for r in apply_order(recording)]
    return yaml.safe_dump_all(documents, sort_keys=False, default_flow_style=False, width=120)


def awaited(registration: Registration) -> bool:
    annotations = ((registration.inputs.get("metadata") or {}).get("annotations") or {}) if registration.custom else {}
    return annotations.get(SKIP_AWAIT) != "true"


def graph(recording: Recording) -> dict[str, Any]:
    return {
        "resources": [
            {
                "urn": r.urn,
                "type": r.type,
                "name": r.name,
                "parent": r.parent,
                "dependencies": list(r.dependencies),
                "custom": r.custom,
                "awaited": awaited(r),
            }
            for r in recording.registrations
        ]
    }


def objects_in_order(recording: Recording) -> Iterable[tuple[Registration, dict[str, Any]]]:
    for registration in apply_order(recording):
        yield registration, kubernetes_object(registration)
