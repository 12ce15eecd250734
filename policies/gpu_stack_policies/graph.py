"""The dependency graph of a rendered stack, as the engine orders it, for the stack policies that reason about
apply order: a resource waits for its own dependencies and, because it registers only after its parent did, for
those of every component above it; a dependency on a component stands for all of its resources (pulumi.md §1.3).
"""

from __future__ import annotations

from typing import Any

from gpu_stack_policies import objects


def is_custom(resource: Any) -> bool:
    return resource.resource_type.startswith("kubernetes:") or resource.resource_type.startswith("pulumi:providers:")


class Graph:
    """Effective, transitive dependencies of every resource, as the engine orders them."""

    def __init__(self, resources: list[Any]):
        self.resources = resources
        self.children: dict[str, list[Any]] = {}
        for r in resources:
            if r.parent is not None:
                self.children.setdefault(r.parent.urn, []).append(r)
        self._closure: dict[str, set[str]] = {}
        self.by_urn = {r.urn: r for r in resources}

    def custom_descendants(self, resource: Any) -> set[str]:
        found: set[str] = set()
        for child in self.children.get(resource.urn, []):
            found |= {child.urn} if is_custom(child) else self.custom_descendants(child)
        return found

    def direct(self, resource: Any) -> set[str]:
        deps = list(resource.dependencies)
        ancestor = resource.parent
        while ancestor is not None:
            deps += ancestor.dependencies
            ancestor = ancestor.parent
        expanded: set[str] = set()
        for dep in deps:
            expanded |= {dep.urn} if is_custom(dep) else self.custom_descendants(dep)
        expanded.discard(resource.urn)
        return expanded

    def closure(self, resource: Any) -> set[str]:
        if resource.urn not in self._closure:
            self._closure[resource.urn] = set()  # guards against cycles while visiting
            found: set[str] = set()
            for urn in self.direct(resource):
                found.add(urn)
                if urn in self.by_urn:
                    found |= self.closure(self.by_urn[urn])
            self._closure[resource.urn] = found
        return self._closure[resource.urn]


def is_gate(resource: Any) -> bool:
    """A Job that waits for validated nodes: the node agent's `wait-validated`, or one labelled as a gate."""
    if objects.kind_of(resource.resource_type) != "Job":
        return False
    spec = objects.pod_spec("Job", resource.props) or {}
    for container in objects.containers(spec):
        line = [str(a) for a in objects.items(container.spec.get("command")) + objects.items(container.spec.get("args"))]
        if objects.WAIT_VALIDATED in line:
            return True
    return objects.VALIDATES_LABEL in objects.labels_of(resource.props)


def gates_before(graph: Graph, resource: Any) -> set[str]:
    """The gate Jobs `resource` waits for: how many upgrade waves go before it."""
    return {urn for urn in graph.closure(resource) if urn in graph.by_urn and is_gate(graph.by_urn[urn])}
