"""RBAC for the operands: policy rules, the privileged-SCC rule every operand Role carries, and each component's
ServiceAccount with its Role, ClusterRole and bindings (Appendix B)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes._utilities import get_version as k8s_version
from pulumi_kubernetes.meta.v1 import ObjectMetaArgs
from pulumi_kubernetes.rbac.v1 import PolicyRuleArgs, RoleRefArgs, SubjectArgs

from components.catalogs import openshift as facts
from components.kit.builders import meta


def rule(api_groups: Sequence[str], resources: Sequence[str], verbs: Sequence[str], names: Sequence[str] = ()) -> PolicyRuleArgs:
    return PolicyRuleArgs(
        api_groups=list(api_groups), resources=list(resources), verbs=list(verbs), resource_names=list(names) or None
    )


# Every operand Role in NVIDIA's assets grants `use` of the privileged SCC; inert outside OpenShift, kept so the
# same stack works there.
SCC_USE = rule(["security.openshift.io"], ["securitycontextconstraints"], ["use"], ["privileged"])


def scc(service_account: str, namespace: str, opts: pulumi.ResourceOptions) -> Optional[pulumi.Resource]:
    """The SCC NVIDIA's asset ships for the operand running as `service_account`, admitting that account alone;
    None for an operand without one (it runs under the privileged SCC its Role may use)."""
    shape = facts.SCCS.get(service_account)
    if shape is None:
        return None
    everything = ["*"] if shape.any_capability else []
    fields = dict(
        allowHostDirVolumePlugin=True,
        allowHostIPC=shape.host_ipc,
        allowHostNetwork=shape.host_network,
        allowHostPID=shape.host_pid,
        allowHostPorts=shape.host_ports,
        allowPrivilegeEscalation=True,
        allowPrivilegedContainer=True,
        allowedCapabilities=everything,
        # Required by the SCC CRD, where NVIDIA's assets write null: empty lists and priority 0 mean the same.
        defaultAddCapabilities=[],
        priority=0,
        requiredDropCapabilities=[],
        fsGroup={"type": "RunAsAny"},
        groups=list(facts.SCC_GROUPS),
        readOnlyRootFilesystem=False,
        runAsUser={"type": "RunAsAny"},
        seLinuxContext={"type": "RunAsAny"},
        seccompProfiles=["*"],
        supplementalGroups={"type": "RunAsAny"},
        users=[f"system:serviceaccount:{namespace}:{service_account}"],
        volumes=["*"],
    )
    if shape.any_capability:
        fields["allowedUnsafeSysctls"] = ["*"]
    described = {"kubernetes.io/description": facts.SCC_DESCRIPTION} if shape.described else None
    return TopLevelObject(shape.name, facts.SCC_API_VERSION, facts.SCC_KIND, meta(shape.name, annotations=described), fields, opts)


class TopLevelObject(pulumi.CustomResource):
    """A custom resource whose fields sit beside its metadata rather than under `spec` (an SCC), which
    `apiextensions.CustomResource` cannot express; the provider sends every input as the object, as it does for
    CustomResource, under the same `kubernetes:<apiVersion>:<kind>` type."""

    def __init__(
        self, name: str, api_version: str, kind: str, metadata: ObjectMetaArgs, fields: dict, opts: pulumi.ResourceOptions
    ):
        super().__init__(
            f"kubernetes:{api_version}:{kind}",
            name,
            {"apiVersion": api_version, "kind": kind, "metadata": metadata, **fields},
            pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(version=k8s_version())),
        )


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
    openshift: bool = False,
    opts: pulumi.ResourceOptions,
) -> RbacSet:
    """ServiceAccount + Role/RoleBinding + ClusterRole/ClusterRoleBinding (each only when it has rules), all
    named after the component and each binding only its own SA, as in Appendix B; on OpenShift also the SCC
    NVIDIA's asset ships for the component, if it has one (states/driver/openshift.py)."""
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
    if openshift:
        # Before the pods: SCC admission picks among the SCCs a pod's account may use when the pod is created.
        constraints = scc(name, namespace, opts)
        if constraints is not None:
            resources.append(constraints)
    return RbacSet(service_account=sa, resources=resources)
