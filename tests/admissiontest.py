"""A ValidatingAdmissionPolicy judged offline, as the API server judges it (k8s.io/apiserver/pkg/admission/plugin/
policy/validating): the match constraints' resource rules, then every match condition (all must hold, or the policy
does not apply), then the validations in order, each a CEL expression over `request`, `object`, `oldObject` and
`variables`; an expression that errors takes the policy's failurePolicy.

The CEL is Google's C++ implementation (`cel-expr-python`) with the optional-types extension, the CEL dialect
Kubernetes enables for admission (`x.?field`, `map[?key]`, `.orValue()`). Kubernetes evaluates variables lazily;
here each is evaluated up front, and a validation that names one that failed fails as the API server's would.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from cel_expr_python import cel
from cel_expr_python.ext import ext_optional

INPUTS = ("request", "object", "oldObject", "variables", "params", "namespaceObject")
_VARIABLE_USE = re.compile(r"variables\.([_a-zA-Z][_a-zA-Z0-9]*)")


@functools.lru_cache(maxsize=None)
def _env() -> Any:
    return cel.NewEnv(variables={name: cel.Type.DYN for name in INPUTS}, extensions=[ext_optional.ExtOptional()])


@functools.lru_cache(maxsize=None)
def compile_cel(expression: str) -> Any:
    """The expression compiled as the API server would; raises on a syntax error."""
    return _env().compile(expression)


class CelError(Exception):
    """An expression that failed to evaluate (a field of null, no such key): the failurePolicy decides."""


def evaluate(expression: str, inputs: Mapping[str, Any]) -> Any:
    value = compile_cel(expression).eval(data={name: inputs.get(name) for name in INPUTS})
    if value.type() == cel.Type.ERROR:
        raise CelError(str(value.value()))
    return value.plain_value()


@dataclass(frozen=True)
class Decision:
    """`applies`: the policy matched the request (constraints and conditions); `allowed`: it let it through."""

    applies: bool
    allowed: bool
    message: str = ""


def _rule_matches(named: Mapping[str, Any], attributes: Mapping[str, Any]) -> bool:
    resource = attributes["resource"]
    sub = attributes.get("subResource") or ""
    wanted = f"{resource['resource']}/{sub}" if sub else resource["resource"]

    def one(pattern: str) -> bool:
        if pattern == "*":
            return not sub
        if "/" in pattern:
            main, subpattern = pattern.split("/", 1)
            return bool(sub) and main in ("*", resource["resource"]) and subpattern in ("*", sub)
        return pattern == wanted

    return (attributes["operation"] in named["operations"] or "*" in named["operations"]) and (
        resource["group"] in named["apiGroups"] or "*" in named["apiGroups"]) and (
        resource["version"] in named["apiVersions"] or "*" in named["apiVersions"]) and any(
        one(p) for p in named["resources"])


@dataclass
class Admission:
    """One admission request: `request` (an AdmissionRequest's fields), the object written and the one stored."""

    request: dict[str, Any]
    object: Optional[dict[str, Any]] = None
    old_object: Optional[dict[str, Any]] = None
    variables: dict[str, Any] = field(default_factory=dict)

    def inputs(self) -> dict[str, Any]:
        return {"request": self.request, "object": self.object, "oldObject": self.old_object,
                "variables": self.variables}


def admit(spec: Mapping[str, Any], admission: Admission) -> Decision:
    """What the policy with `spec` (bound with Deny) decides on `admission`."""
    fails_closed = spec.get("failurePolicy", "Fail") == "Fail"
    rules = (spec.get("matchConstraints") or {}).get("resourceRules") or []
    if not any(_rule_matches(r, admission.request) for r in rules):
        return Decision(applies=False, allowed=True)
    try:
        if not all(evaluate(c["expression"], admission.inputs()) for c in spec.get("matchConditions") or []):
            return Decision(applies=False, allowed=True)
    except CelError as exc:
        return Decision(applies=True, allowed=not fails_closed, message=f"match condition failed: {exc}")
    failed: dict[str, str] = {}
    for variable in spec.get("variables") or []:
        try:
            admission.variables[variable["name"]] = evaluate(variable["expression"], admission.inputs())
        except CelError as exc:
            failed[variable["name"]] = str(exc)
    for validation in spec.get("validations") or []:
        used = set(_VARIABLE_USE.findall(validation["expression"])) & set(failed)
        try:
            if used:
                raise CelError(failed[sorted(used)[0]])
            passed = evaluate(validation["expression"], admission.inputs())
        except CelError as exc:
            if fails_closed:
                return Decision(applies=True, allowed=False, message=f"expression failed: {exc}")
            continue
        if not passed:
            message = validation.get("message") or ""
            if validation.get("messageExpression"):
                message = evaluate(validation["messageExpression"], admission.inputs())
            return Decision(applies=True, allowed=False, message=message)
    return Decision(applies=True, allowed=True)


def request(operation: str, resource: str, name: str, *, username: str, node: Optional[str],
            group: str = "", version: str = "v1", sub_resource: str = "", namespace: str = "") -> dict[str, Any]:
    """An AdmissionRequest's fields as a policy sees them; `node`: the node-name claim of the token (None: none)."""
    extra = {"authentication.kubernetes.io/node-name": [node]} if node is not None else {}
    return {"operation": operation, "name": name, "namespace": namespace, "subResource": sub_resource,
            "resource": {"group": group, "version": version, "resource": resource},
            "userInfo": {"username": username, "groups": ["system:serviceaccounts"], "extra": extra}}
