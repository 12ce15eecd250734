"""RBAC for the operands: policy rules, the privileged-SCC rule every operand Role carries, and each component's
ServiceAccount with its Role, ClusterRole and bindings (Appendix B)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.rbac.v1 import PolicyRuleArgs, RoleRefArgs, SubjectArgs

from components.kit.builders import meta


def rule(api_groups: Sequence[str], resources: Sequence[str], verbs: Sequence[str], names: Sequence[str] = ()) -> PolicyRuleArgs:
    return PolicyRuleArgs(
        api_groups=list(api_groups), resources=list(resources), verbs=list(verbs), resource_names=list(names) or None
    )


# Every operand Role in NVIDIA's assets grants `use` of the privileged SCC; inert outside OpenShift, kept so the
# same stack works there.
SCC_USE = rule(["security.openshift.io"], ["securitycontextconstraints"], ["use"], ["privileged"])


@dataclass
class RbacSet:
    service_account: k8s.core.v1.ServiceAccount
    resources: list[pulumi.Resource]


def rbac_set(
    name: str,
    namespace: str,
    *,
    role_rules: Sequence[PolicyRuleArgs] = (),
    cluster_role_rules: Sequence[PolicyRuleArgs] = (),
    labels: Optional[dict[str, str]] = None,
    opts: pulumi.ResourceOptions,
) -> RbacSet:
    """ServiceAccount + Role/RoleBinding + ClusterRole/ClusterRoleBinding (each only when it has rules), all
    named after the component and each binding only its own SA, as in Appendix B."""
    sa = k8s.core.v1.ServiceAccount(name, metadata=meta(name, namespace, labels), opts=opts)
    subject = [SubjectArgs(kind="ServiceAccount", name=name, namespace=namespace)]
    bound = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[sa]))
    resources: list[pulumi.Resource] = [sa]
    if role_rules:
        role = k8s.rbac.v1.Role(name, metadata=meta(name, namespace, labels), rules=list(role_rules), opts=opts)
        role_binding = k8s.rbac.v1.RoleBinding(
            name,
            metadata=meta(name, namespace, labels),
            role_ref=RoleRefArgs(api_group="rbac.authorization.k8s.io", kind="Role", name=name),
            subjects=subject,
            opts=pulumi.ResourceOptions.merge(bound, pulumi.ResourceOptions(depends_on=[role])),
        )
        resources += [role, role_binding]
    if cluster_role_rules:
        cluster_role = k8s.rbac.v1.ClusterRole(name, metadata=meta(name, labels=labels), rules=list(cluster_role_rules), opts=opts)
        binding = k8s.rbac.v1.ClusterRoleBinding(
            name,
            metadata=meta(name, labels=labels),
            role_ref=RoleRefArgs(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=name),
            subjects=subject,
            opts=pulumi.ResourceOptions.merge(bound, pulumi.ResourceOptions(depends_on=[cluster_role])),
        )
        resources += [cluster_role, binding]
    return RbacSet(service_account=sa, resources=resources)
