"""What `gpustack check` found, each traced to the stack key that causes it, so that a code-scanning annotation lands
on the line a reviewer has to change (`check --format sarif`).

Nothing here knows which key a policy or a state is about: every finding names an object and one of its fields,
and the render's own source map (components/kit/sources.py, read by gpustack/sourcemap.py) says which key set that
field, or which key decides the object when none did.
- a configuration problem names its own key;
- a policy violation names the field the policy judged (policies/gpu_stack_policies/fields.py);
- a schema or API-server problem names the field the schema or the rule refuses.
gpustack/keylines.py finds the key's line in the stack file (or the nearest line above it that the file writes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional

from components.config import ConfigError
from gpustack.apiserver.engine import ApiProblem
from gpustack.mockrun import Recording, Registration
from gpustack.policyrun import Violation
from gpustack.schema import SchemaProblem
from gpustack.sourcemap import Cause, SourceMap, object_id, pointer_of_api_path

CONFIG_RULE, STACK_FILE_RULE, SCHEMA_RULE = "stack-config", "stack-file", "kubernetes-schema"
APISERVER_PREFIX, POLICY_PREFIX = "apiserver/", "policy/"
LEVELS = {"mandatory": "error", "advisory": "warning", "remediate": "note"}


@dataclass(frozen=True)
class Finding:
    rule: str
    level: str  # SARIF's: error, warning, note
    message: str
    stack: str
    # the key behind it (gpustack/sourcemap.py); None: the stack file as a whole
    cause: Optional[Cause] = None
    # the object it is about (`DaemonSet gpu-operator/nvidia-driver-daemonset`), "" for a config or file problem
    object: str = ""
    # where the loader itself stopped (a stack file that does not parse): no key to look up
    line: Optional[int] = None
    # what the finding is about, so that a fingerprint survives a reworded message
    subject: str = field(default="", compare=False)


def cause_text(cause: Optional[Cause]) -> str:
    """How a text report names the key behind a finding: `set by gpu-stack:x.y`, or the key deciding the object."""
    if cause is None:
        return ""
    if cause.decides:
        return f"no stack key sets this field; {cause.key} decides the object"
    return f"set by {cause.key}"


def config_findings(stack: str, error: ConfigError) -> list[Finding]:
    return [Finding(CONFIG_RULE, "error", f"{path}: {message}", stack, cause=Cause(path), subject=path)
            for path, message in error.problems]


def _describe(registration: Registration) -> str:
    meta = registration.inputs.get("metadata") or {}
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{registration.inputs.get('kind', '?')} {where}{meta.get('name', registration.name)}"


def _ident(registration: Registration) -> str:
    meta = registration.inputs.get("metadata") or {}
    return object_id(registration.inputs.get("kind"), meta.get("namespace"), meta.get("name"))


class ObjectIndex:
    """Rendered objects of one recording by URN and by (kind, name), with the render's source map."""

    def __init__(self, recording: Recording):
        self.sources = SourceMap(recording.sources)
        self.by_urn = recording.by_urn()
        self._by_object: dict[tuple[str, str], Registration] = {}
        for r in recording.registrations:
            if r.is_kubernetes_object:
                meta = r.inputs.get("metadata") or {}
                self._by_object.setdefault((str(r.inputs.get("kind")), str(meta.get("name"))), r)

    def find(self, kind: str, name: str) -> Optional[Registration]:
        return self._by_object.get((kind, name))

    def cause(self, registration: Optional[Registration], pointer: str) -> Optional[Cause]:
        if registration is None or not registration.is_kubernetes_object:
            return None
        return self.sources.cause(_ident(registration), pointer)


def schema_finding(stack: str, problem: SchemaProblem, index: ObjectIndex) -> Finding:
    registration = index.find(problem.kind, problem.name)
    return Finding(SCHEMA_RULE, "error", f"Kubernetes {problem.kubernetes_version} {problem.kind}/{problem.name}: {problem.message}",
                   stack, cause=index.cause(registration, problem.pointer),
                   object=_describe(registration) if registration else f"{problem.kind} {problem.name}",
                   subject=f"{problem.kind}/{problem.name}:{problem.pointer}")


def api_finding(stack: str, problem: ApiProblem, index: ObjectIndex) -> Finding:
    registration = index.find(problem.kind, problem.name)
    return Finding(APISERVER_PREFIX + problem.rule, "error", str(problem), stack,
                   cause=index.cause(registration, pointer_of_api_path(problem.path)),
                   object=_describe(registration) if registration else f"{problem.kind} {problem.name}",
                   subject=f"{problem.kind}/{problem.name}:{problem.path}")


def violation_finding(stack: str, violation: Violation, index: ObjectIndex) -> Finding:
    registration = index.by_urn.get(violation.urn)
    return Finding(
        POLICY_PREFIX + violation.policy, LEVELS.get(violation.enforcement, "warning"), violation.message, stack,
        cause=index.cause(registration, violation.field),
        object=_describe(registration) if registration is not None and registration.is_kubernetes_object else "",
        subject=f"{violation.urn.rsplit('::', 1)[-1]}:{violation.field}",
    )


def from_check(stack: str, recording: Recording, problems: Iterable[SchemaProblem], refused: Iterable[ApiProblem],
               violations: Iterable[Violation]) -> list[Finding]:
    """Every finding of one stack's check, in the text format's order: schema, API server, policies."""
    index = ObjectIndex(recording)
    return ([schema_finding(stack, p, index) for p in problems] + [api_finding(stack, p, index) for p in refused]
            + [violation_finding(stack, v, index) for v in violations])
