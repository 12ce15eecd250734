"""ValidatingAdmissionPolicy and its binding (k8s.io/kubernetes/pkg/apis/admissionregistration/validation).

What the API server refuses before it compiles any CEL: the match constraints' rules, the names of match conditions
and variables, at least one validation, the binding's actions. Whether each expression compiles is a test's to say
(tests/admissiontest.py evaluates every rendered policy with a CEL runtime): the CEL runtime is a test dependency,
and no stack key changes an expression.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping, Sequence

from gpustack.apiserver import formats
from gpustack.apiserver.engine import Obj, Report, mapping, rule

FAILURE_POLICIES = ("Fail", "Ignore")
OPERATIONS = ("*", "CREATE", "UPDATE", "DELETE", "CONNECT")
REASONS = ("Unauthorized", "Forbidden", "Invalid", "RequestEntityTooLarge")
VALIDATION_ACTIONS = ("Deny", "Warn", "Audit")
MAX_MATCH_CONDITIONS = 64
_CEL_IDENTIFIER = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*")


def _required_list(values: Any, path: str, report: Report) -> list:
    if not values:
        report(path, "Required value")
        return []
    return list(values)


def _wildcard_alone(values: Sequence[str], path: str, report: Report) -> None:
    if "*" in values and len(values) > 1:
        report(path, f"Invalid value {list(values)!r}: if '*' is present, must not specify other values")


def _resources(resources: Sequence[str], path: str, report: Report) -> None:
    """validateResources: no empty entry; `*` alone; `x/*` and `*/y` forms only with a resource and subresource."""
    for i, resource in enumerate(resources):
        if not resource:
            report(f"{path}[{i}]", "Required value")
        elif resource.count("/") > 1 or resource.endswith("/") or resource.startswith("/"):
            report(f"{path}[{i}]", f"Invalid value {resource[:80]!r}: must be a resource or resource/subresource")
    if "*" in resources and len(resources) > 1:
        report(path, "Invalid value: if '*' is present, must not specify other resources without subresources")


def _rules(rules: Sequence[Mapping[str, Any]], path: str, report: Report) -> None:
    for i, named in enumerate(rules):
        here = f"{path}[{i}]"
        operations = _required_list(named.get("operations"), f"{here}.operations", report)
        for j, operation in enumerate(operations):
            if operation not in OPERATIONS:
                report(f"{here}.operations[{j}]", f"Unsupported value {operation!r}: supported values: {', '.join(OPERATIONS)}")
        _wildcard_alone(operations, f"{here}.operations", report)
        _wildcard_alone(_required_list(named.get("apiGroups"), f"{here}.apiGroups", report), f"{here}.apiGroups", report)
        _wildcard_alone(_required_list(named.get("apiVersions"), f"{here}.apiVersions", report), f"{here}.apiVersions", report)
        _resources(_required_list(named.get("resources"), f"{here}.resources", report), f"{here}.resources", report)


def _named_expressions(items: Sequence[Mapping[str, Any]], path: str, report: Report,
                       name_problems: Callable[[str], list[str]]) -> None:
    """Match conditions and variables alike: each a valid, unique name and an expression."""
    seen: set[str] = set()
    for i, item in enumerate(items):
        name = str(item.get("name") or "")
        for message in name_problems(name):
            report(f"{path}[{i}].name", message)
        if name in seen:
            report(f"{path}[{i}].name", f"Duplicate value: {name!r}")
        seen.add(name)
        if not str(item.get("expression") or "").strip():
            report(f"{path}[{i}].expression", "Required value")


def _condition_name(name: str) -> list[str]:
    if not name:
        return ["Required value"]
    return [f"Invalid value {name[:80]!r}: {m}" for m in formats.is_qualified_name(name)]


def _variable_name(name: str) -> list[str]:
    # a variable is read as `variables.<name>`: a CEL identifier
    return [] if _CEL_IDENTIFIER.fullmatch(name) else [f"Invalid value {name[:80]!r}: name is not a valid CEL identifier"]


def _validations(validations: Sequence[Mapping[str, Any]], path: str, report: Report) -> None:
    for i, validation in enumerate(validations):
        here = f"{path}[{i}]"
        if not str(validation.get("expression") or "").strip():
            report(f"{here}.expression", "Required value")
        message = validation.get("message")
        if message is not None and ("\n" in str(message) or not str(message).strip()):
            report(f"{here}.message", "Invalid value: message must be non-empty and must not contain line breaks")
        reason = validation.get("reason")
        if reason is not None and reason not in REASONS:
            report(f"{here}.reason", f"Unsupported value {reason!r}: supported values: {', '.join(REASONS)}")


@rule("admission-policy", "k8s.io/kubernetes/pkg/apis/admissionregistration/validation.ValidateValidatingAdmissionPolicy "
      "(failurePolicy; matchConstraints rules; match condition and variable names; at least one validation)",
      kinds=("ValidatingAdmissionPolicy",))
def admission_policy(obj: Obj, report: Report) -> None:
    spec = mapping(obj.get("spec"))
    policy = spec.get("failurePolicy")
    if policy is not None and policy not in FAILURE_POLICIES:
        report("spec.failurePolicy", f"Unsupported value {policy!r}: supported values: {', '.join(FAILURE_POLICIES)}")
    constraints = spec.get("matchConstraints")
    if not constraints:
        report("spec.matchConstraints", "Required value")
    else:
        _rules(_required_list(mapping(constraints).get("resourceRules"), "spec.matchConstraints.resourceRules", report),
               "spec.matchConstraints.resourceRules", report)
    conditions = spec.get("matchConditions") or []
    if len(conditions) > MAX_MATCH_CONDITIONS:
        report("spec.matchConditions", f"Too many: {len(conditions)}: must have at most {MAX_MATCH_CONDITIONS} items")
    _named_expressions(conditions, "spec.matchConditions", report, _condition_name)
    _named_expressions(spec.get("variables") or [], "spec.variables", report, _variable_name)
    if not spec.get("validations") and not spec.get("auditAnnotations"):
        report("spec.validations", "Required value: validations or auditAnnotations must contain at least one item")
    _validations(spec.get("validations") or [], "spec.validations", report)


@rule("admission-policy-binding", "k8s.io/kubernetes/pkg/apis/admissionregistration/validation."
      "ValidateValidatingAdmissionPolicyBinding (policyName; validationActions: unique, known, not Deny with Warn)",
      kinds=("ValidatingAdmissionPolicyBinding",))
def admission_policy_binding(obj: Obj, report: Report) -> None:
    spec = mapping(obj.get("spec"))
    name = str(spec.get("policyName") or "")
    if not name:
        report("spec.policyName", "Required value")
    for message in formats.is_dns1123_subdomain(name) if name else []:
        report("spec.policyName", f"Invalid value {name[:80]!r}: {message}")
    actions = spec.get("validationActions") or []
    if not actions:
        report("spec.validationActions", "Required value: at least one validation action is required")
    for i, action in enumerate(actions):
        if action not in VALIDATION_ACTIONS:
            report(f"spec.validationActions[{i}]", f"Unsupported value {action!r}: supported values: {', '.join(VALIDATION_ACTIONS)}")
        if action in actions[:i]:
            report(f"spec.validationActions[{i}]", f"Duplicate value: {action!r}")
    if "Deny" in actions and "Warn" in actions:
        report("spec.validationActions", "Invalid value: must not contain both Deny and Warn (repeating the same "
                                         "validation failure information in the API response and headers serves no purpose)")
