"""docs/security.md, generated from the render of every shipped stack: what each ServiceAccount token on a GPU node
can read and write, what a stolen one can still write once the node-bound admission policies judge it, and the
same account in gpu-stack 0.9.0 and in NVIDIA's GPU Operator (components/catalogs/token_reach.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from components.catalogs import token_reach
from components.kit.node_claim import NODE_NAME_CLAIM
from components.states import node_write_policy
from gpustack import generated
from gpustack.mockrun import PROJECT_DIR, Recording, run_program
from gpustack.render import objects_in_order

PAGE = PROJECT_DIR / "docs" / "security.md"
READS = frozenset({"get", "list", "watch"})
DENIED = {("", "pods/eviction")}
Grant = tuple  # as components/catalogs/token_reach.py writes one


@dataclass
class Account:
    """One ServiceAccount whose pods run on GPU nodes, across the shipped stacks."""

    name: str
    workloads: set[str] = field(default_factory=set)
    stacks: set[str] = field(default_factory=set)
    token: bool = False
    grants: set[tuple[str, str, str, tuple[str, ...], str]] = field(default_factory=set)
    bound_in: set[str] = field(default_factory=set)
    # (group, resource pattern) of the writes a rendered admission policy judges by the node in the token: the
    # node-bound policies' (components/states/node_write_policy.py SHAPES) and NVIDIA's ResourceSlice policy for the
    # DRA kubelet plugin (components/kit/dra_api.py slice_policy), read from the render, not listed here.
    judged: set[tuple[str, str]] = field(default_factory=set)


def _rules(objects: Sequence[Mapping[str, Any]], namespace: str, account: str) -> Iterable[tuple[Mapping, str]]:
    """(rule, "cluster" or "namespace") of every role the account is bound to."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects
             if o["kind"] in ("Role", "ClusterRole")}
    for binding in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        here = binding["metadata"].get("namespace")
        if not any(s.get("kind") == "ServiceAccount" and s.get("name") == account and (s.get("namespace") or here) == namespace
                   for s in binding.get("subjects") or []):
            continue
        ref = binding["roleRef"]
        role = roles.get((ref["kind"], here if ref["kind"] == "Role" else None, ref["name"]))
        scope = "cluster" if binding["kind"] == "ClusterRoleBinding" else "namespace"
        for rule in (role or {}).get("rules") or []:
            yield rule, scope


def _grants(objects, namespace: str, account: str) -> set[tuple[str, str, str, tuple[str, ...], str]]:
    """(group, resource, verb, names, scope) of each verb the account may use."""
    found = set()
    for rule, scope in _rules(objects, namespace, account):
        for group in rule.get("apiGroups") or [""]:
            if group == "security.openshift.io":
                continue  # an SCC's `use` is checked on the account when a pod is admitted, not with its token
            for resource in rule.get("resources") or []:
                for verb in rule.get("verbs") or []:
                    found.add((group, resource, verb, tuple(rule.get("resourceNames") or ()), scope))
    return found


def _pod_specs(objects) -> Iterable[tuple[Mapping, Mapping]]:
    for obj in objects:
        if obj["kind"] == "DaemonSet":
            yield obj, obj["spec"]["template"]["spec"]


def _bound_accounts(objects) -> set[str]:
    named: set[str] = set()
    for obj in objects:
        if obj["kind"] == "ValidatingAdmissionPolicy" and obj["metadata"]["name"].startswith(node_write_policy.POLICY_PREFIX):
            for condition in obj["spec"].get("matchConditions") or []:
                named |= {u.rsplit(":", 1)[-1] for u in condition["expression"].split("'")[1::2]}
    return named


def _named_accounts(expression: str) -> set[str]:
    return {quoted.rsplit(":", 1)[-1] for quoted in expression.split("'")[1::2]
            if quoted.startswith("system:serviceaccount:")}


def _node_judged(objects) -> dict[str, set[tuple[str, str]]]:
    """Per ServiceAccount, the (group, resource) patterns of every admission policy that compares the node in the
    request's token (`authentication.kubernetes.io/node-name`) with what the write touches."""
    judged: dict[str, set[tuple[str, str]]] = {}
    for obj in objects:
        spec = obj.get("spec") or {}
        if obj["kind"] != "ValidatingAdmissionPolicy" or not any(
                NODE_NAME_CLAIM in v.get("expression", "") for v in spec.get("variables") or []):
            continue
        patterns = {(group, resource) for rule in spec["matchConstraints"]["resourceRules"]
                    for group in rule["apiGroups"] for resource in rule["resources"]}
        for condition in spec.get("matchConditions") or []:
            for account in _named_accounts(condition["expression"]):
                judged.setdefault(account, set()).update(patterns)
    return judged


def _is_judged(group: str, resource: str, patterns: set[tuple[str, str]]) -> bool:
    parent, _, sub = resource.partition("/")
    return (group, resource) in patterns or bool(sub) and (group, f"{parent}/*") in patterns


def accounts(renders: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Account]:
    """Every GPU-node ServiceAccount of the shipped stacks' renders (stack -> its objects)."""
    found: dict[str, Account] = {}
    for stack, objects in sorted(renders.items()):
        bound = _bound_accounts(objects)
        judged = _node_judged(objects)
        pods = list(_pod_specs(objects))
        names = {spec.get("serviceAccountName", "default") for _, spec in pods} | (bound - {""})
        for name in names:
            account = found.setdefault(name, Account(name))
            account.stacks.add(stack)
            mine = [(o, s) for o, s in pods if s.get("serviceAccountName", "default") == name]
            account.workloads |= {o["metadata"]["name"] for o, _ in mine} or {"(started by the DRA controller)"}
            account.token |= any(s.get("automountServiceAccountToken") is not False for _, s in mine) or not mine
            account.grants |= _grants(objects, pods[0][0]["metadata"]["namespace"], name)
            if name in bound:
                account.bound_in.add(stack)
            account.judged |= judged.get(name, set())
    return found


# --- cells ----------------------------------------------------------------------------------------------------------


def _resource(group: str, resource: str, names: Sequence[str]) -> str:
    shown = f"{group}/{resource}" if group else resource
    return f"{shown} {', '.join(names)}" if names else shown


def describe(grants: Iterable[tuple[str, str, str, tuple[str, ...], str]], *, kept: str = "",
             judged: set[tuple[str, str]] = frozenset()) -> str:
    """`resource` verbs per resource, cluster-wide first, then those of the namespace; `kept` notes the writes an
    admission policy keeps on the token's node (`judged`)."""
    merged: dict[tuple[str, str, tuple[str, ...], str], set[str]] = {}
    for group, resource, verb, names, scope in grants:
        merged.setdefault((group, resource, names, scope), set()).add(verb)
    parts = []
    order = sorted(merged.items(), key=lambda item: (item[0][3] != "cluster", item[0][1], item[0][0], item[0][2]))
    for (group, resource, names, scope), verbs in order:
        notes = ([] if scope == "cluster" else ["namespace"]) + ([kept] if kept and _is_judged(group, resource, judged) else [])
        suffix = f" ({', '.join(notes)})" if notes else ""
        parts.append(f"`{_resource(group, resource, names)}` {', '.join(sorted(verbs))}{suffix}")
    return "; ".join(parts) or "none"


def _expand(catalogued: Iterable[Grant]) -> set[tuple[str, str, str, tuple[str, ...], str]]:
    return {(group, resource, verb, tuple(names[0]) if names else (), scope)
            for group, resources, verbs, scope, *names in catalogued for resource in resources for verb in verbs}


def writes(grants) -> set:
    return {g for g in grants if g[2] not in READS}


def effective(account: Account) -> str:
    """What a stolen token of the account can still write where the node-bound policies are rendered."""
    left = {g for g in writes(account.grants) if (g[0], g[1]) not in DENIED}
    return describe(left, kept="own node only", judged=account.judged)


def before(account: Account) -> str:
    old = writes(account.grants) | _expand(token_reach.REMOVED_IN_0_10_0.get(account.name, ()))
    token = account.token or account.name in token_reach.TOKEN_REMOVED_IN_0_10_0
    return describe(old) if token else "no token"


def nvidia(account: Account) -> str:
    if account.name in token_reach.NVIDIA_ABSENT:
        return "no such pod (the operator's controller, a Deployment, does this work)"
    if account.name not in token_reach.NVIDIA_WRITES:
        return "–"
    return describe(_expand(token_reach.NVIDIA_WRITES[account.name]))


# --- the page -------------------------------------------------------------------------------------------------------

HEADER = """<!-- Generated by `python -m gpustack docs` from the render of every stack in stacks/ (gpustack/security.py);
do not edit by hand. -->
# Security: the tokens on a GPU node

GPU nodes run other people's code, and the container stack itself has had escapes (NVIDIA Container Toolkit
CVE-2024-0132, CVE-2025-23266). Whoever gets root on a GPU node reads every ServiceAccount token mounted there: one
per pod, each with its account's RBAC. This page lists, per ServiceAccount whose pods run on GPU nodes, what its
token can read and write, across the shipped stacks ({stacks}).

## What keeps a stolen token on its node

- **Node-bound admission policies** (components/states/node_write_policy.py): four ValidatingAdmissionPolicies with Deny
  bindings, `gpu-stack-node-bound-nodes`, `-pods`, `-nodefeatures` and `-configmaps`, match every account below and
  no other user. A write to a Node (`nodes`, `nodes/status`: labels, annotations, taints, cordons), a pod (created
  with `spec.nodeName`, changed or deleted while bound), a NodeFeature object or a ConfigMap (the MIG manager's
  `<node>-mig-config`, the node's own slot of the upgrade budget) is admitted only for the node named in the token
  (`authentication.kubernetes.io/node-name`), and a request without that claim is denied.
- **No eviction from a GPU node.** The Eviction API cannot be kept to one node by admission (an eviction's request
  carries the Eviction, not the pod), so no account below holds `pods/eviction`, and the pods policy denies any
  eviction by them. A node's drain is asked for on its own Node (`gpu-stack/drain-request`) and carried out by the
  upgrade coordinator (`gpu-stack-upgrade-coordinator`, a Deployment kept off GPU nodes where it can), which evicts
  only pods it lists bound to that node, under the slot the budget holds for it, each by uid. k8s-driver-manager's
  own eviction and drain are off with `upgrade.strategy: rolling` (the default); with `manual`, nothing else drains a
  node whose driver pod someone deletes, so it keeps them and its `pods/eviction`, and `gpustack check` warns.
- **Tokens only where used**: a pod whose account holds no rights mounts no token (`tokens-only-where-needed`).
- **One account per NFD role**: NFD's worker, on every node, writes only NodeFeature objects in its namespace; the
  GPU Operator's values ran it as the master, with cluster-wide `nodes` writes.

The node claim: Kubernetes writes the node a pod-bound token was issued for into the token, and the API server
puts it in the request's user info, from the feature gate ServiceAccountTokenPodNodeInfo (KEP-4193): alpha in 1.29,
beta and on by default from **1.30**, GA and locked on in 1.32 (kubernetes/website
content/en/docs/reference/command-line-tools-reference/feature-gates/ServiceAccountTokenPodNodeInfo.md). A stack
that declares a version before 1.30 in `cluster.kubernetesVersions` renders no node-bound policy, and `gpustack
check` warns for each account below that could then write other nodes (`gpu-node-token-reach`).
"""

REMAINS = """
## What a stolen token can still do

- **Read.** Admission never sees reads, and RBAC cannot grant "the pods of my node": several accounts list and
  watch every pod of the cluster (pod specs carry env values: keep secrets in Secrets, which none of these accounts
  reads), every Node, and the operands' DaemonSets. RBAC has no rule by field selector; only an authorizer webhook
  that reads the request's selectors could keep these reads on one node.
- **Its own node, fully.** Root on the node owns the node: it can relabel, taint or cordon its Node, delete or
  evict nothing else, and write its own NodeFeatures, MIG config and budget slot. A forged drain request makes the
  coordinator evict only GPU work bound to that node, and only while the node holds a slot.
- **Writes in the operands' namespace** that name no node: the DRA kubelet plugin's Deployments (with the
  MPSSupport gate, `apps/deployments` in the namespace, where pods may run privileged), the compute-domain daemons'
  ComputeDomains and cliques, the validator's ClusterPolicy finalizers. These are NVIDIA's grants, kept as the DRA
  driver and the operator use them.
- **The coordinator's token** evicts anywhere and patches any Node; its pod prefers nodes without
  `nvidia.com/gpu.present`, and lands on a GPU node only where no other node can take it. The same holds for NFD's
  master (all Nodes' labels), which prefers control-plane nodes.
- **Older clusters**: where a declared Kubernetes version predates 1.30, the node-bound policies are not rendered and
  every write in the RBAC column reaches every node.
"""


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _table(found: Mapping[str, Account], all_stacks: Sequence[str]) -> list[str]:
    lines = ["## Each token, now", "",
             _row(["ServiceAccount", "pods (DaemonSets)", "token", "reads", "writes (RBAC)",
                   "what a stolen token can write"]),
             _row(["---"] * 6)]
    for name, account in sorted(found.items()):
        where = "" if account.stacks == set(all_stacks) else f" ({', '.join(sorted(account.stacks))})"
        reads = {g for g in account.grants if g[2] in READS}
        lines.append(_row([f"`{name}`{where}", ", ".join(f"`{w}`" for w in sorted(account.workloads)),
                           "yes" if account.token else "no", describe(reads), describe(writes(account.grants)),
                           effective(account) if account.token else "nothing (no token)"]))
    return lines


def _beside(found: Mapping[str, Account]) -> list[str]:
    lines = ["", "## Before this change, and beside NVIDIA's operator", "",
             "Writes only: gpu-stack 0.9.0 had no node-bound policy, so each of its writes reached every node; NVIDIA's",
             "GPU Operator renders none either (only its DRA driver's chart keeps ResourceSlices on their node).", "",
             _row(["ServiceAccount", "gpu-stack 0.9.0", "gpu-stack 0.10.0 (what a stolen token can write)",
                   "NVIDIA GPU Operator"]),
             _row(["---"] * 4)]
    for name, account in sorted(found.items()):
        now = effective(account) if account.token else "nothing (no token)"
        lines.append(_row([f"`{name}`", before(account), now, nvidia(account)]))
    return lines


def page(renders: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    found = accounts(renders)
    stacks = sorted(renders)
    header = HEADER.format(stacks=", ".join(f"`{s}`" for s in stacks))
    return "\n".join([header, *_table(found, stacks), *_beside(found), REMAINS])


def shipped_renders() -> dict[str, list[dict[str, Any]]]:
    """Every stack in stacks/, rendered as the CLI renders it."""
    from components.config import stack_file_config, stack_file_secret_keys
    from node_images.inputfiles import load_stack_file

    renders = {}
    for path in sorted((PROJECT_DIR / "stacks").glob("Pulumi.*.yaml")):
        stack = path.name[len("Pulumi."):-len(".yaml")]
        document = load_stack_file(path)
        recording: Recording = run_program(stack, stack_file_config(document), secret_keys=stack_file_secret_keys(document))
        renders[stack] = [obj for _, obj in objects_in_order(recording)]
    return renders


def stale(path: Path = PAGE, renders: Mapping[str, Sequence[Mapping[str, Any]]] | None = None) -> bool:
    """Whether the page differs from what `renders` (default: every shipped stack, rendered here) give."""
    return generated.stale(path, page(shipped_renders() if renders is None else renders))


def write(path: Path = PAGE) -> bool:
    return generated.write(path, page(shipped_renders()))
