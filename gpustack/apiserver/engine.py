"""The rule registry and the walk: which rules apply to which object, and how a problem is reported.

A rule is a function of one rendered object (or, for a stack rule, of all of them) that calls `report(path,
message)` for each thing the API server would refuse. It is registered with the Kubernetes function it mirrors,
so a reader can hold the two side by side.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

Obj = Mapping[str, Any]
# How much of a name or value a message echoes: enough to find it, never a whole oversized input.
SHOWN = 80
Report = Callable[[str, str], None]


@dataclass(frozen=True)
class ApiProblem:
    kind: str
    name: str
    namespace: Optional[str]
    path: str
    rule: str
    mirrors: str
    message: str

    def __str__(self) -> str:
        name = self.name if len(self.name) <= SHOWN else self.name[: SHOWN - 3] + "..."
        where = f"{self.kind}/{name}" if not self.namespace else f"{self.kind}/{self.namespace}/{name}"
        return f"{where}: {self.path}: {self.message} [{self.rule}: {self.mirrors}]"


@dataclass(frozen=True)
class Rule:
    id: str
    mirrors: str
    kinds: Optional[frozenset[str]]
    check: Callable[..., None]
    # A stack rule sees every object at once (uniqueness, references between objects).
    stack: bool = False

    def applies_to(self, obj: Obj) -> bool:
        return self.kinds is None or obj.get("kind") in self.kinds


RULES: dict[str, Rule] = {}


def rule(rule_id: str, mirrors: str, *, kinds: Optional[Sequence[str]] = None) -> Callable[[Callable[[Obj, Report], None]], Callable[[Obj, Report], None]]:
    def register(check: Callable[[Obj, Report], None]) -> Callable[[Obj, Report], None]:
        if rule_id in RULES:
            raise ValueError(f"rule {rule_id} registered twice")
        RULES[rule_id] = Rule(rule_id, mirrors, frozenset(kinds) if kinds else None, check)
        return check

    return register


StackReport = Callable[[Obj, str, str], None]


def stack_rule(rule_id: str, mirrors: str) -> Callable[[Callable[[Sequence[Obj], StackReport], None]], Callable[[Sequence[Obj], StackReport], None]]:
    def register(check: Callable[[Sequence[Obj], StackReport], None]) -> Callable[[Sequence[Obj], StackReport], None]:
        if rule_id in RULES:
            raise ValueError(f"rule {rule_id} registered twice")
        RULES[rule_id] = Rule(rule_id, mirrors, None, check, stack=True)
        return check

    return register


def _problem(rule_: Rule, obj: Obj, path: str, message: str) -> ApiProblem:
    meta = obj.get("metadata") or {}
    return ApiProblem(str(obj.get("kind", "?")), str(meta.get("name", "?")), meta.get("namespace"), path, rule_.id, rule_.mirrors, message)


def validate(obj: Obj) -> list[ApiProblem]:
    """Everything the API server would refuse in one object, rule by rule."""
    problems: list[ApiProblem] = []
    for rule_ in RULES.values():
        if rule_.stack or not rule_.applies_to(obj):
            continue
        rule_.check(obj, lambda path, message, r=rule_: problems.append(_problem(r, obj, path, message)))
    return problems


def validate_all(objects: Sequence[Obj]) -> list[ApiProblem]:
    """Every object's problems, then those between objects (one stack applied to one cluster)."""
    problems = [p for obj in objects for p in validate(obj)]
    for rule_ in RULES.values():
        if rule_.stack:
            rule_.check(objects, lambda obj, path, message, r=rule_: problems.append(_problem(r, obj, path, message)))
    return problems


# --- walking the parts of an object many rules look at --------------------------------------------------------

WORKLOAD_KINDS = ("Pod", "PodTemplate", "DaemonSet", "Deployment", "ReplicaSet", "StatefulSet", "Job", "CronJob")


def pod_specs(obj: Obj) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(path, pod spec) for a Pod or for the pod template of a workload."""
    kind = obj.get("kind")
    spec = obj.get("spec") or {}
    if kind == "Pod":
        yield "spec", spec
    elif kind == "CronJob":
        template = ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}
        yield "spec.jobTemplate.spec.template.spec", template.get("spec") or {}
    elif kind == "PodTemplate":
        yield "template.spec", (obj.get("template") or {}).get("spec") or {}
    elif kind in WORKLOAD_KINDS:
        yield "spec.template.spec", (spec.get("template") or {}).get("spec") or {}


def pod_template_metadata(obj: Obj) -> Iterator[tuple[str, Mapping[str, Any]]]:
    kind = obj.get("kind")
    spec = obj.get("spec") or {}
    if kind == "CronJob":
        template = ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}
        yield "spec.jobTemplate.spec.template.metadata", template.get("metadata") or {}
    elif kind in WORKLOAD_KINDS and kind != "Pod":
        yield "spec.template.metadata", (spec.get("template") or {}).get("metadata") or {}


def containers(pod: Mapping[str, Any], path: str) -> Iterator[tuple[str, Mapping[str, Any], bool]]:
    """(path, container, is_init) for init containers, then app containers."""
    for i, c in enumerate(pod.get("initContainers") or []):
        yield f"{path}.initContainers[{i}]", c, True
    for i, c in enumerate(pod.get("containers") or []):
        yield f"{path}.containers[{i}]", c, False


def mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
