"""rbac-least-privilege: each component's ServiceAccount gets its own, enumerated permissions and nothing more.

* Roles and ClusterRoles name their verbs, resources, API groups and URLs: no `*`, no verbs that hand out
  more rights than the role holds (`escalate`, `bind`, `impersonate`), no `aggregationRule` (other ClusterRoles
  would widen it later).
* Bindings never reference `cluster-admin`, bind only ServiceAccounts, and bind each one only to its own role:
  gpu-stack names a component's ServiceAccount, Role, ClusterRole and both bindings alike (components/kit/rbac.py
  `rbac_set`, as NVIDIA's assets do), so a binding whose role is named differently from its ServiceAccount
  grants one component another's rights. A RoleBinding's ServiceAccount lives in the binding's namespace. Node
  Feature Discovery's master, worker and gc too have one ServiceAccount each (the GPU Operator's values shared the
  master's among all three, so every node's worker carried the master's cluster-wide node writes).
"""

from __future__ import annotations

from typing import Mapping

from pulumi_policy import EnforcementLevel, ReportViolation, ResourceValidationArgs, ResourceValidationPolicy

from gpu_stack_policies import objects
from gpu_stack_policies.fields import report_at

NAME = "rbac-least-privilege"
ESCALATING_VERBS = ("escalate", "bind", "impersonate")
CLUSTER_ADMIN = "cluster-admin"
RULE_FIELDS = ("verbs", "resources", "apiGroups", "nonResourceURLs", "resourceNames")


def _check_role(kind: str, props: Mapping, name: str, report: ReportViolation) -> None:
    what = objects.describe(kind, props, name)
    if kind == "ClusterRole" and props.get("aggregationRule"):
        report_at(report, "/aggregationRule", f"{what} has an aggregationRule, so any ClusterRole with matching labels widens it; fix: list its rules")
    for index, rule in enumerate(objects.items(props.get("rules"))):
        rule = objects.mapping(rule)
        for field_name in RULE_FIELDS:
            values = [str(v) for v in objects.items(rule.get(field_name))]
            if any("*" in v for v in values):
                report_at(
                    report, f"/rules/{index}/{field_name}",
                    f"{what}: rules[{index}].{field_name} {values} uses a wildcard, granting everything that exists "
                    f"now or later; fix: list the {field_name} the component uses (fact sheet Appendix B)"
                )
        escalating = sorted(set(ESCALATING_VERBS) & {str(v) for v in objects.items(rule.get("verbs"))})
        if escalating:
            report_at(
                report, f"/rules/{index}/verbs",
                f"{what}: rules[{index}] grants {', '.join(escalating)}, which lets the holder give itself rights it "
                "does not have; fix: drop those verbs"
            )


def _check_binding(kind: str, props: Mapping, name: str, report: ReportViolation) -> None:
    what = objects.describe(kind, props, name)
    role_ref = objects.mapping(props.get("roleRef"))
    role = str(role_ref.get("name") or "")
    if role == CLUSTER_ADMIN:
        report_at(report, "/roleRef/name", f"{what} binds cluster-admin; fix: bind a role with the component's own rules (components/kit/rbac.py rbac_set)")
    for index, subject in enumerate(objects.items(props.get("subjects"))):
        subject = objects.mapping(subject)
        at = f"/subjects/{index}"
        subject_kind, subject_name = subject.get("kind"), str(subject.get("name") or "")
        if subject_kind != "ServiceAccount":
            report_at(
                report, f"{at}/kind",
                f"{what} binds {subject_kind} {subject_name!r}; only operand ServiceAccounts may hold the stack's roles; "
                "fix: bind the component's ServiceAccount"
            )
            continue
        if subject_name != role:
            report_at(
                report, f"{at}/name",
                f"{what} binds ServiceAccount {subject_name!r} to {role_ref.get('kind')} {role!r}, another "
                f"component's role; fix: bind {subject_name!r} only to its own role {subject_name!r} and give that "
                "role the rules it needs"
            )
        namespace = objects.namespace_of(props)
        if kind == "RoleBinding" and subject.get("namespace") and namespace and subject.get("namespace") != namespace:
            report_at(
                report, f"{at}/namespace",
                f"{what} binds ServiceAccount {subject.get('namespace')}/{subject_name}, from another namespace; fix: "
                f"bind the ServiceAccount of {namespace}"
            )


def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
    kind = objects.kind_of(args.resource_type)
    if kind in ("Role", "ClusterRole"):
        _check_role(kind, args.props, args.name, report)
    elif kind in ("RoleBinding", "ClusterRoleBinding"):
        _check_binding(kind, args.props, args.name, report)


POLICY = ResourceValidationPolicy(
    name=NAME,
    description="[high: security] RBAC lists what each component needs: no wildcards, no cluster-admin, each ServiceAccount bound to its own role.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate,
)
