"""What a token stolen on a GPU node can do, read from the render.

Every DaemonSet of the stack runs on GPU nodes (NFD's worker on every node), where tenants' code runs: whoever
escapes a container there reads the ServiceAccount token of each of its pods. Three policies:

* `node-bound-tokens` (mandatory): where the stack renders gpu-stack's node-bound admission policies
  (components/states/node_write_policy.py: `gpu-stack-node-bound-nodes`, `-pods`, `-nodefeatures`, `-configmaps`), each names every
  DaemonSet's ServiceAccount in its match condition and is bound with Deny, so that a new operand cannot slip by.
* `gpu-node-token-reach` (advisory: what `gpustack check` warns of): a DaemonSet's ServiceAccount that may evict
  (`pods/eviction`: admission cannot keep an eviction on one node, since its request carries the Eviction and not
  the pod), and, where no node-bound policy is rendered (a declared Kubernetes version before 1.30 does not stamp the
  node claim in tokens), each that may write Nodes, pods or NodeFeature objects of every node.
* `tokens-only-where-needed` (mandatory): a pod whose ServiceAccount holds no rights (or only `use` of an OpenShift
  SCC, which admission checks against the account, not with the pod's token) does not mount a token:
  `automountServiceAccountToken: false`.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from pulumi_policy import EnforcementLevel, ReportViolation, StackValidationArgs, StackValidationPolicy

from gpu_stack_policies import fields, objects
from gpu_stack_policies.fields import report_at

NODE_BOUND = "node-bound-tokens"
REACH = "gpu-node-token-reach"
WHERE_NEEDED = "tokens-only-where-needed"
POLICY_PREFIX = "gpu-stack-node-bound-"
POLICIES = tuple(f"{POLICY_PREFIX}{what}" for what in ("nodes", "pods", "nodefeatures", "configmaps"))
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection", "*"}
# What a written object names a node by: each write here is kept to the token's node by one of POLICIES.
NODE_BOUND_RESOURCES = {("", "nodes"), ("", "nodes/status"), ("", "pods"), ("", "pods/status"),
                        ("", "pods/ephemeralcontainers"), ("nfd.k8s-sigs.io", "nodefeatures")}
SCC_GROUP = "security.openshift.io"
_USERNAME = re.compile(r"'system:serviceaccount:([^:']+):([^']+)'")


def _accounts(resources: Iterable[Any]) -> dict[tuple[str, str], Any]:
    """(namespace, ServiceAccount) of every DaemonSet's pods -> the DaemonSet."""
    found: dict[tuple[str, str], Any] = {}
    for ds in objects.resources_by_kind(resources, "DaemonSet"):
        spec = objects.pod_spec("DaemonSet", ds.props) or {}
        name = str(spec.get("serviceAccountName") or "default")
        found.setdefault((str(objects.namespace_of(ds.props) or ""), name), ds)
    return found


def rules_by_account(resources: list) -> dict[tuple[str, str], list[Mapping]]:
    """(namespace, ServiceAccount) -> every rule it is bound to, through RoleBindings and ClusterRoleBindings: one
    pass over the stack, whatever the number of accounts."""
    roles = {(objects.kind_of(r.resource_type), objects.namespace_of(r.props), objects.name_of(r.props)): r
             for kind in ("Role", "ClusterRole") for r in objects.resources_by_kind(resources, kind)}
    found: dict[tuple[str, str], list[Mapping]] = {}
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        for binding in objects.resources_by_kind(resources, kind):
            bound_here = objects.namespace_of(binding.props)
            ref = objects.mapping(binding.props.get("roleRef"))
            role = roles.get((ref.get("kind"), bound_here if ref.get("kind") == "Role" else None, ref.get("name")))
            rules = [objects.mapping(r) for r in objects.items(role.props.get("rules"))] if role is not None else []
            for subject in (objects.mapping(s) for s in objects.items(binding.props.get("subjects"))):
                if subject.get("kind") == "ServiceAccount":
                    key = (str(subject.get("namespace") or bound_here or ""), str(subject.get("name") or ""))
                    found.setdefault(key, []).extend(rules)
    return found


def _grants(rules: list[Mapping], group: str, resource: str, verbs: set[str]) -> bool:
    return any((group in objects.items(r.get("apiGroups")) or "*" in objects.items(r.get("apiGroups")))
               and (resource in objects.items(r.get("resources")) or "*" in objects.items(r.get("resources")))
               and verbs & set(objects.items(r.get("verbs"))) for r in rules)


def node_writes(rules: list[Mapping]) -> list[str]:
    """The node-bound resources the rules let the holder write."""
    return sorted(f"{g}/{r}" if g else r for g, r in NODE_BOUND_RESOURCES if _grants(rules, g, r, WRITE_VERBS))


def evicts(rules: list[Mapping]) -> bool:
    return _grants(rules, "", "pods/eviction", {"create", "*"})


def holds_rights(rules: list[Mapping]) -> bool:
    """Whether the rules grant anything a pod would use its token for (an SCC's `use` is checked on the account)."""
    return any(set(objects.items(r.get("apiGroups"))) != {SCC_GROUP} for r in rules)


def _policies(resources: list) -> dict[str, Any]:
    return {objects.name_of(r.props): r for r in objects.resources_by_kind(resources, "ValidatingAdmissionPolicy")
            if objects.name_of(r.props) in POLICIES}


def named(policy: Any) -> set[tuple[str, str]]:
    """(namespace, ServiceAccount) of every username a node-bound policy's match conditions name."""
    spec = objects.mapping(policy.props.get("spec"))
    found: set[tuple[str, str]] = set()
    for condition in objects.items(spec.get("matchConditions")):
        found |= set(_USERNAME.findall(str(objects.mapping(condition).get("expression") or "")))
    return found


def _denying(resources: list) -> set[str]:
    return {str(objects.mapping(b.props.get("spec")).get("policyName"))
            for b in objects.resources_by_kind(resources, "ValidatingAdmissionPolicyBinding")
            if "Deny" in objects.items(objects.mapping(b.props.get("spec")).get("validationActions"))}


def validate_node_bound(args: StackValidationArgs, report: ReportViolation) -> None:
    resources = list(args.resources)
    policies = _policies(resources)
    if not policies:
        return  # not rendered: `gpu-node-token-reach` says what that leaves open
    accounts = _accounts(resources)
    denying = _denying(resources)
    for name in POLICIES:
        policy = policies.get(name)
        if policy is None:
            report_at(report, fields.NODE_BOUND, f"ValidatingAdmissionPolicy {name} is missing beside the other "
                      "node-bound policies; fix: render them all (components/states/node_write_policy.py node_bound_policies)")
            continue
        if name not in denying:
            report_at(report, "/metadata/name", f"ValidatingAdmissionPolicy {name} has no binding with Deny, so it "
                      "enforces nothing; fix: bind it with validationActions [Deny]", policy.urn)
        missing = sorted(set(accounts) - named(policy))
        for namespace, account in missing:
            report_at(report, "/spec/matchConditions/0/expression",
                      f"ServiceAccount {namespace}/{account} runs on GPU nodes (DaemonSet "
                      f"{objects.name_of(accounts[(namespace, account)].props)}) but {name} does not name it, so its "
                      "token may write other nodes; fix: register the DaemonSet under GpuStack, whose "
                      "GpuNodeAccounts names every DaemonSet's account", policy.urn)


def validate_reach(args: StackValidationArgs, report: ReportViolation) -> None:
    resources = list(args.resources)
    bound = bool(_policies(resources))
    rbac = rules_by_account(resources)
    for (namespace, account), ds in sorted(_accounts(resources).items(), key=lambda item: item[0]):
        rules = rbac.get((namespace, account), [])
        what = objects.describe("DaemonSet", ds.props, ds.name)
        if evicts(rules):
            report_at(report, "/spec/template/spec/serviceAccountName",
                      f"{what} runs as {account}, whose token (on every node it runs on) may evict any pod of the "
                      "cluster: admission cannot keep an eviction on one node; fix: let the node agents' drain empty "
                      "the node (gpu-stack:upgrade.strategy: rolling turns k8s-driver-manager's own eviction off)",
                      ds.urn)
        writes = node_writes(rules)
        if writes and not bound:
            report_at(report, fields.NODE_BOUND,
                      f"{what} runs as {account}, whose token may write {', '.join(writes)} of any node: the "
                      "node-bound admission policies are rendered only when every declared Kubernetes version stamps "
                      "the node claim in tokens (1.30 and later); fix: declare only gpu-stack:cluster."
                      "kubernetesVersions of 1.30 or later once the cluster runs them", ds.urn)


def validate_where_needed(args: StackValidationArgs, report: ReportViolation) -> None:
    resources = list(args.resources)
    rbac = rules_by_account(resources)
    for kind in objects.POD_TEMPLATE_KINDS:
        for workload in objects.resources_by_kind(resources, kind):
            spec = objects.pod_spec(kind, workload.props) or {}
            if spec.get("automountServiceAccountToken") is False:
                continue
            account = str(spec.get("serviceAccountName") or "default")
            namespace = str(objects.namespace_of(workload.props) or "")
            if not holds_rights(rbac.get((namespace, account), [])):
                report_at(report, f"{objects.pod_spec_pointer(kind)}/automountServiceAccountToken",
                          f"{objects.describe(kind, workload.props, workload.name)} mounts a token of {account}, which "
                          "holds no rights: a token nothing uses is one more to steal; fix: automountServiceAccountToken: "
                          "false", workload.urn)


NODE_BOUND_POLICY = StackValidationPolicy(
    name=NODE_BOUND,
    description="[high: security] The node-bound admission policies name the ServiceAccount of every DaemonSet and are bound with Deny.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate_node_bound,
)
REACH_POLICY = StackValidationPolicy(
    name=REACH,
    description="[high: security] No token on GPU nodes evicts, and none writes Nodes, pods or NodeFeatures of other nodes unchecked.",
    enforcement_level=EnforcementLevel.ADVISORY,
    validate=validate_reach,
)
WHERE_NEEDED_POLICY = StackValidationPolicy(
    name=WHERE_NEEDED,
    description="[medium: security] A pod whose ServiceAccount holds no rights mounts no token.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate_where_needed,
)
