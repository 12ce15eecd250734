"""Roles, ClusterRoles and their bindings (k8s.io/kubernetes/pkg/apis/rbac/validation)."""

from __future__ import annotations

from typing import Any, Mapping

from gpustack.apiserver import formats
from gpustack.apiserver.engine import Obj, Report, mapping, rule

RBAC_GROUP = "rbac.authorization.k8s.io"
SUBJECT_KINDS = ("ServiceAccount", "User", "Group")


@rule("policy-rules", "k8s.io/kubernetes/pkg/apis/rbac/validation.ValidatePolicyRule (verbs; apiGroups and resources for "
      "resource rules; nonResourceURLs only in ClusterRoles, never mixed)", kinds=("Role", "ClusterRole"))
def policy_rules(obj: Obj, report: Report) -> None:
    namespaced = obj.get("kind") == "Role"
    for i, rule_ in enumerate(obj.get("rules") or []):
        here = f"rules[{i}]"
        if not rule_.get("verbs"):
            report(f"{here}.verbs", "Required value: verbs must contain at least one value")
        urls = rule_.get("nonResourceURLs") or []
        if urls:
            if namespaced:
                report(f"{here}.nonResourceURLs", "Invalid value: namespaced rules cannot apply to non-resource URLs")
            if rule_.get("apiGroups") or rule_.get("resources") or rule_.get("resourceNames"):
                report(f"{here}.nonResourceURLs", "Invalid value: rules cannot apply to both regular resources and non-resource URLs")
            continue
        if not rule_.get("apiGroups"):
            report(f"{here}.apiGroups", "Required value: resource rules must supply at least one api group")
        if not rule_.get("resources"):
            report(f"{here}.resources", "Required value: resource rules must supply at least one resource")


@rule("role-ref", "k8s.io/kubernetes/pkg/apis/rbac/validation.ValidateRoleBinding/ValidateClusterRoleBinding (roleRef apiGroup, "
      "kind, name)", kinds=("RoleBinding", "ClusterRoleBinding"))
def role_ref(obj: Obj, report: Report) -> None:
    ref = mapping(obj.get("roleRef"))
    if ref.get("apiGroup") != RBAC_GROUP:
        report("roleRef.apiGroup", f"Unsupported value {ref.get('apiGroup')!r}: supported values: {RBAC_GROUP}")
    kinds = ("Role", "ClusterRole") if obj.get("kind") == "RoleBinding" else ("ClusterRole",)
    if ref.get("kind") not in kinds:
        report("roleRef.kind", f"Unsupported value {ref.get('kind')!r}: supported values: {', '.join(kinds)}")
    name = ref.get("name") or ""
    if not name:
        report("roleRef.name", "Required value")
    for message in formats.is_path_segment_name(name):
        report("roleRef.name", f"Invalid value {name[:80]!r}: {message}")


def _subject(subject: Mapping[str, Any], here: str, namespaced: bool, report: Report) -> None:
    kind, name = subject.get("kind"), subject.get("name") or ""
    if not name:
        report(f"{here}.name", "Required value")
    if kind == "ServiceAccount":
        if subject.get("apiGroup"):
            report(f"{here}.apiGroup", f"Unsupported value {subject['apiGroup']!r}: supported values: \"\"")
        for message in formats.is_dns1123_subdomain(name) if name else []:
            report(f"{here}.name", f"Invalid value {name[:80]!r}: {message}")
        if not namespaced and not subject.get("namespace"):
            report(f"{here}.namespace", "Required value")
    elif kind in ("User", "Group"):
        if subject.get("apiGroup") != RBAC_GROUP:
            report(f"{here}.apiGroup", f"Unsupported value {subject.get('apiGroup')!r}: supported values: {RBAC_GROUP}")
    else:
        report(f"{here}.kind", f"Unsupported value {kind!r}: supported values: {', '.join(SUBJECT_KINDS)}")


@rule("binding-subjects", "k8s.io/kubernetes/pkg/apis/rbac/validation.ValidateRoleBindingSubject", kinds=("RoleBinding", "ClusterRoleBinding"))
def binding_subjects(obj: Obj, report: Report) -> None:
    namespaced = obj.get("kind") == "RoleBinding"
    for i, subject in enumerate(obj.get("subjects") or []):
        _subject(subject, f"subjects[{i}]", namespaced, report)
