"""Node-bound writes: a token stolen on a GPU node writes that node alone.

GPU nodes run tenants' code, and the container stack has had escapes (NVIDIA Container Toolkit CVE-2024-0132,
CVE-2025-23266): whoever gets root there reads every ServiceAccount token mounted on the node. Several of those
tokens may write Nodes, pods or NodeFeature objects cluster-wide by RBAC (the driver manager, the MIG, vGPU device
and CC managers, the DRA kubelet plugin, the node agent, the validator's workload pods, GFD and NFD's worker),
because RBAC cannot say "the node this pod runs on".

Admission can. A ServiceAccount token the kubelet requests for a pod carries the node it was issued for, and the
API server puts it in the request's user info as `authentication.kubernetes.io/node-name` (KEP-4193, feature gate
ServiceAccountTokenPodNodeInfo: alpha in 1.29, beta and on by default from 1.30, GA and locked on in 1.32;
kubernetes/website content/en/docs/reference/command-line-tools-reference/feature-gates/
ServiceAccountTokenPodNodeInfo.md). ValidatingAdmissionPolicy is GA (admissionregistration.k8s.io/v1) from 1.30 too.
NVIDIA's DRA driver chart compares that claim with a ResourceSlice's node (components/kit/dra_api.py
`slice_policy`); the policies here do the same, for every ServiceAccount whose pods run on GPU nodes (every
DaemonSet's of the stack, and the compute-domain daemons' that the DRA controller starts), and leave every other
user alone (a match condition on the username):

- `gpu-stack-node-bound-nodes`: `nodes` and `nodes/status` (label, annotation, taint, cordon writes; create and
  delete too) only to the Node named in the token;
- `gpu-stack-node-bound-pods`: a pod created only with `spec.nodeName` that node (the validator creates its
  workload pods so), a pod updated, patched or deleted (any subresource) only while bound to that node, and no
  eviction at all (an eviction's request carries the Eviction, not the pod, so no policy can see its node: drains
  go through the upgrade coordinator, off the GPU nodes);
- `gpu-stack-node-bound-nodefeatures`: NodeFeature objects (`nfd.k8s-sigs.io`) created, changed or deleted only
  for that node (`nfd.node.kubernetes.io/node-name`, the label NFD's master reads to know which Node to label;
  NFD's worker and GFD set it to their own node);
- `gpu-stack-node-bound-configmaps`: in ConfigMaps, the node's own: the MIG manager's `<node>-mig-config`, and the
  node's own record in the upgrade budget (the agent gives its slot back or marks it failed). RBAC lets the MIG
  manager write every ConfigMap of the operands' namespace, the node agents' document and the device plugin's
  configs among them, which would reach every node.

A request without the claim is denied: a token not bound to a pod on a node (one a person minted with `kubectl
create token` for these accounts) writes nothing. Reads cannot be limited by admission; docs/security.md lists
what each token still reads. The policies are rendered only when every Kubernetes version the stack declares stamps
the claim by default (`enforceable`); otherwise `gpustack check` warns (policies/gpu_stack_policies/
node_tokens.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi import _types as pulumi_types
from pulumi_kubernetes.admissionregistration.v1 import (
    MatchConditionArgs,
    MatchResourcesArgs,
    NamedRuleWithOperationsArgs,
    ValidatingAdmissionPolicyBindingSpecArgs,
    ValidatingAdmissionPolicySpecArgs,
    ValidationArgs,
    VariableArgs,
)

from components.config import StackConfig
from components.kit.builders import also_after, meta
from components.kit.node_claim import NODE_NAME_CLAIM, REQUEST_NODE
from components.states.node_labeler import BUDGET_CONFIGMAP
from components.kit.sources import decided_by

NODE_FEATURE_NODE_LABEL = "nfd.node.kubernetes.io/node-name"
NODE_FEATURE_GROUP = "nfd.k8s-sigs.io"
# The MIG manager keeps its node's applied config in `<node>-mig-config` (MP:cmd/nvidia-mig-manager/main.go).
MIG_CONFIG_SUFFIX = "-mig-config"
# The first minor that stamps the claim by default (ServiceAccountTokenPodNodeInfo beta) and serves
# admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy.
MIN_KUBERNETES_MINOR = 30
POLICY_PREFIX = "gpu-stack-node-bound-"
WRITES = ["CREATE", "UPDATE", "DELETE"]
DAEMONSET_TYPE = "kubernetes:apps/v1:DaemonSet"

CLAIMED = ValidationArgs(
    expression="variables.requestNode != ''",
    message=(f"the token carries no node ({NODE_NAME_CLAIM}): this ServiceAccount writes only from a pod's token, "
             "and only to the node the pod runs on"),
)


def _label(obj: str) -> str:
    return f"{obj}.metadata.?labels[?'{NODE_FEATURE_NODE_LABEL}'].orValue('')"


def _data(obj: str) -> str:
    return f"{obj}.?data.orValue({{}})"


@dataclass(frozen=True)
class Shape:
    """One policy: what it matches, and the node names a request touches (all must be the token's node)."""

    name: str
    rules: tuple[NamedRuleWithOperationsArgs, ...]
    touched: str
    what: str
    extra: tuple[ValidationArgs, ...] = ()


SHAPES = (
    Shape(
        f"{POLICY_PREFIX}nodes",
        (NamedRuleWithOperationsArgs(api_groups=[""], api_versions=["v1"], operations=WRITES,
                                     resources=["nodes", "nodes/status"]),),
        "[request.name]",
        "that Node",
    ),
    Shape(
        f"{POLICY_PREFIX}pods",
        (NamedRuleWithOperationsArgs(api_groups=[""], api_versions=["v1"], operations=WRITES,
                                     resources=["pods", "pods/*"]),),
        # A new pod by the node it is created for; any other create of a subresource (an eviction, a binding) names
        # no node it could be judged by. A change or a delete by the node the pod is bound to.
        "request.operation == 'CREATE' ? [request.subResource == '' ? object.spec.?nodeName.orValue('') : '']"
        " : [oldObject.spec.?nodeName.orValue('')]",
        "pods bound to that node",
        (ValidationArgs(
            expression="request.subResource != 'eviction'",
            message=("no token on a GPU node evicts: a node's drain is asked for on its own Node and carried out by "
                     "gpu-stack's upgrade coordinator, which evicts only pods bound to that node"),
        ),),
    ),
    Shape(
        f"{POLICY_PREFIX}nodefeatures",
        (NamedRuleWithOperationsArgs(api_groups=[NODE_FEATURE_GROUP], api_versions=["*"], operations=WRITES,
                                     resources=["nodefeatures"]),),
        # The node a NodeFeature labels, before and after the write: none may be moved to or from another node.
        f"(request.operation == 'CREATE' ? [] : [{_label('oldObject')}])"
        f" + (request.operation == 'DELETE' ? [] : [{_label('object')}])",
        "NodeFeature objects of that node",
    ),
    Shape(
        f"{POLICY_PREFIX}configmaps",
        (NamedRuleWithOperationsArgs(api_groups=[""], api_versions=["v1"], operations=WRITES, resources=["configmaps"]),),
        # The MIG manager's per-node config (named after the node), and the node's own slot in the budget: which
        # slots' records the write changes, adds or removes. Any other ConfigMap of the namespace (the node agents'
        # document, the device plugin's configs) names no node and is refused.
        f"request.name == variables.requestNode + '{MIG_CONFIG_SUFFIX}' && request.operation != 'DELETE'"
        " ? [variables.requestNode]"
        f" : request.name == '{BUDGET_CONFIGMAP}' && request.operation == 'UPDATE' ? ("
        f"{_data('oldObject')}.filter(k, !(k in {_data('object')}) || object.data[k] != oldObject.data[k])"
        f" + {_data('object')}.filter(k, !(k in {_data('oldObject')}))"
        " + (object.metadata.?labels.orValue({}) == oldObject.metadata.?labels.orValue({})"
        " && object.metadata.?annotations.orValue({}) == oldObject.metadata.?annotations.orValue({}) ? [] : ['']))"
        " : ['']",
        "ConfigMaps of that node (its MIG config, its slot of the upgrade budget)",
    ),
)


def kubernetes_minor(version: str) -> int:
    return int(version.split(".")[1])


def enforceable(kubernetes_versions: Sequence[str]) -> bool:
    """Whether every declared version stamps the node claim by default and serves the policies' API."""
    return bool(kubernetes_versions) and all(kubernetes_minor(v) >= MIN_KUBERNETES_MINOR for v in kubernetes_versions)


def username(namespace: str, service_account: str) -> str:
    return f"system:serviceaccount:{namespace}:{service_account}"


def match_expression(usernames: Sequence[str]) -> str:
    return "request.userInfo.username in [" + ", ".join(f"'{u}'" for u in sorted(set(usernames))) + "]"


def policy_spec(shape: Shape, usernames: Sequence[str]) -> ValidatingAdmissionPolicySpecArgs:
    return ValidatingAdmissionPolicySpecArgs(
        failure_policy="Fail",
        match_constraints=MatchResourcesArgs(resource_rules=list(shape.rules)),
        match_conditions=[MatchConditionArgs(name="from-a-gpu-node-service-account",
                                             expression=match_expression(usernames))],
        variables=[REQUEST_NODE, VariableArgs(name="touched", expression=shape.touched)],
        validations=[
            CLAIMED,
            *shape.extra,
            ValidationArgs(
                expression="variables.touched.all(node, node == variables.requestNode)",
                message_expression=f"'a token issued on node ' + variables.requestNode + ' may write only {shape.what}'",
            ),
        ],
    )


def node_bound_policies(usernames: Sequence[str], opts: pulumi.ResourceOptions) -> list[pulumi.Resource]:
    """The policies and their Deny bindings (a binding after its policy: a binding to a policy not there yet
    is refused by nothing, but enforces nothing either)."""
    resources: list[pulumi.Resource] = []
    for shape in SHAPES:
        policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
            shape.name, metadata=meta(shape.name), spec=policy_spec(shape, usernames), opts=opts)
        binding = k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
            shape.name,
            metadata=meta(shape.name),
            spec=ValidatingAdmissionPolicyBindingSpecArgs(policy_name=shape.name, validation_actions=["Deny"]),
            opts=also_after(opts, policy),
        )
        resources += [policy, binding]
    return resources


# --- which ServiceAccounts run on GPU nodes -------------------------------------------------------------------------


def _get(value: Any, name: str, camel: str) -> Any:
    if pulumi_types.is_input_type(type(value)):
        value = pulumi_types.input_type_to_dict(value)
    if isinstance(value, Mapping):
        found = value.get(camel)
        return value.get(name) if found is None else found
    return None


@dataclass
class GpuNodeAccounts:
    """The ServiceAccounts of every DaemonSet the stack registers, noted as each registers (`record` is a resource
    transformation on GpuStack, like components/kit/sources.py's; it changes nothing): every DaemonSet of the stack
    runs on GPU nodes (NFD's worker on every node), so the list is derived from what is rendered, never kept in step
    by hand. Accounts of pods that something else starts on GPU nodes are added with `add`."""

    names: set[str] = field(default_factory=set)

    def record(self, args: pulumi.ResourceTransformationArgs) -> None:
        if args.type_ != DAEMONSET_TYPE or not isinstance(args.props, Mapping):
            return None
        template = _get(args.props.get("spec"), "template", "template")
        account = _get(_get(template, "spec", "spec"), "service_account_name", "serviceAccountName")
        if isinstance(account, str):
            self.names.add(account)
        return None

    def add(self, *names: str) -> None:
        self.names.update(names)


class NodeBoundWrites(pulumi.ComponentResource):
    """The node-bound admission policies for the ServiceAccounts of `namespace` named in `accounts`."""

    def __init__(self, name: str, *, namespace: str, accounts: Sequence[str],
                 depends_on: Sequence[pulumi.Resource] = (), opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-stack:index:NodeBoundWrites", name, None, opts)
        usernames = [username(namespace, a) for a in sorted(set(accounts))]
        node_bound_policies(usernames, pulumi.ResourceOptions(parent=self, depends_on=list(depends_on)))
        self.register_outputs({"serviceAccounts": sorted(set(accounts))})


def node_bound_writes(cfg: StackConfig, namespace: str, accounts: GpuNodeAccounts,
                      states: Mapping[str, pulumi.ComponentResource], after: Sequence[pulumi.Resource],
                      opts: pulumi.ResourceOptions) -> Optional[NodeBoundWrites]:
    """The policies for every account of a GPU-node pod, built after every state (`states`, each of which may name
    accounts of pods it starts at run time as `node_accounts`); None where a declared Kubernetes version does not
    stamp the node claim (`gpustack check` warns then: policies/gpu_stack_policies/node_tokens.py)."""
    decided_by(cfg.cluster, "kubernetes_versions")
    for state in states.values():
        accounts.add(*getattr(state, "node_accounts", ()))
    if not enforceable(cfg.cluster.kubernetes_versions) or not accounts.names:
        return None
    return NodeBoundWrites("node-bound-writes", namespace=namespace, accounts=sorted(accounts.names),
                           depends_on=after, opts=opts)
