"""one-workload-type-per-node: a GPU node runs container operands or VM operands, never both.

The operator's labeller gives each node the deploy labels of exactly one workload type (`container`,
`vm-passthrough`, `vm-vgpu`); container operands (driver, toolkit, device plugin) and VM operands (vfio-manager,
vGPU manager, sandbox device plugin) on one node fight over the GPU: one loads `nvidia.ko`, the other binds the
GPU to `vfio-pci`. gpu-stack reproduces that with the node agent and the pools document, so the policy checks
both ends of it:

* the pools document (ConfigMap of the node labeller): every pool's deploy labels belong to its own workload
  type, and no two pools of different types can claim the same node (see `overlap_problem`);
* every DaemonSet: the deploy labels it selects exist on one side only, so it cannot be scheduled onto a node
  of the other side. A DaemonSet that selects no deploy label runs on every GPU node, whatever its type; only
  the DaemonSets named in `workloadAgnosticDaemonSets` (the node labeller, which decides the type, and NFD's
  worker, which labels every node before any type exists) may.

What counts as an overlap. Pool selectors are ANDed label maps, so two selectors can match one node unless they
disagree on the value of a key they share. The node agent applies the first pool (in `nodePools` order) that
matches, so a node never gets two types at once; an overlap across types is still refused, because then a
node's type depends on list order rather than on its labels: reordering `nodePools` or adding a label to a node
silently turns a container node into a VM node (driver unloaded, GPU bound to vfio-pci) or the reverse. The one
overlap allowed is an exception carved out of a broader pool: the earlier pool's selector contains every label
of the later one plus at least one more, so the more specific pool wins by specificity as well as by order
(e.g. `{gpu: a100, vm: "true"}` as vm-passthrough before `{gpu: a100}` as container).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)

from gpu_stack_policies import fields, objects
from gpu_stack_policies.fields import report_at
from gpu_stack_policies.facts import consts

NAME = "one-workload-type-per-node"
VM_TYPES = ("vm-passthrough", "vm-vgpu")
# The node labeller decides the type; NFD's worker finds the GPUs it decides by, on every node, and touches none.
DEFAULT_WORKLOAD_AGNOSTIC = ["gpu-stack-node-labeler", "node-feature-discovery-worker"]

CONFIG_SCHEMA = PolicyConfigSchema(
    properties={
        "workloadAgnosticDaemonSets": {
            "type": "array",
            "description": "DaemonSets allowed to run on GPU nodes of every workload type (by metadata.name).",
            "items": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"},
            "uniqueItems": True,
            "default": DEFAULT_WORKLOAD_AGNOSTIC,
        },
    }
)


def allowed_components(workload_type: str) -> set[str]:
    allowed = set(consts.DEPLOY_COMPONENTS_BY_WORKLOAD[workload_type])
    if workload_type == "container":
        allowed.add(consts.MIG_MANAGER_DEPLOY_COMPONENT)
    # the Kata sandbox device plugin stands in for KubeVirt's in kata mode
    allowed |= {consts.KATA_DEPLOY_SUBSTITUTES[c] for c in allowed if c in consts.KATA_DEPLOY_SUBSTITUTES}
    # and a DRA pool's nodes take the DRA kubelet plugin and validator in place of the device plugin's pair
    allowed |= {consts.DRA_DEPLOY_SUBSTITUTES[c] for c in allowed if c in consts.DRA_DEPLOY_SUBSTITUTES}
    return allowed


def side(workload_type: str) -> str:
    return "VM" if workload_type in VM_TYPES else "container"


def overlap_problem(earlier: objects.Pool, later: objects.Pool) -> Optional[str]:
    """Why two pools of different workload types may claim one node, or None (see the module docstring)."""
    if earlier.workload_type == later.workload_type:
        return None
    if not objects.selectors_compatible(earlier.node_selector, later.node_selector):
        return None
    earlier_is_an_exception = objects.is_subset(later.node_selector, earlier.node_selector) and (
        earlier.node_selector != later.node_selector
    )
    if earlier_is_an_exception:
        return None
    node = {**later.node_selector, **earlier.node_selector}
    return (
        f"pools {earlier.name!r} ({earlier.workload_type}, nodeSelector {earlier.node_selector}) and {later.name!r} "
        f"({later.workload_type}, nodeSelector {later.node_selector}) both match a node labelled {node}. The node "
        f"agent gives such a node the type of {earlier.name!r} because that pool comes first, so its workload type "
        f"hangs on list order: reordering nodePools or labelling a node switches it from {earlier.workload_type} to "
        f"{later.workload_type} operands (driver unloaded, GPU rebound) or back. "
        f"Fix: make the selectors disagree on a label (same key, different values), or put the more specific pool "
        "first with every label of the broader one plus its own"
    )


def _check_pools(pools: list[objects.Pool], where: str, report: ReportViolation) -> None:
    for pool in pools:
        workload = f"{pool.at}/labels/{fields.escape(consts.WORKLOAD_CONFIG)}"
        if pool.workload_type not in consts.WORKLOAD_TYPES:
            report_at(
                report, workload,
                f"{where}: pool {pool.name!r} has workload type {pool.workload_type!r}; fix: set "
                f"nodePools[].workloadType to one of {', '.join(consts.WORKLOAD_TYPES)}"
            )
            continue
        foreign = sorted(pool.deploy_components - allowed_components(pool.workload_type))
        if foreign:
            report_at(
                report, f"{pool.at}/deployLabels",
                f"{where}: pool {pool.name!r} is {pool.workload_type} but its nodes get the deploy labels of "
                f"{', '.join(consts.deploy_label(c) for c in foreign)}, so those operands would run on "
                f"{pool.workload_type} nodes; fix: the node labeller must write only the labels of "
                f"components/catalogs/consts.py DEPLOY_COMPONENTS_BY_WORKLOAD[{pool.workload_type!r}]"
            )
    for i, earlier in enumerate(pools):
        for later in pools[i + 1 :]:
            problem = overlap_problem(earlier, later)
            if problem:
                report_at(report, f"{later.at}/nodeSelector", f"{where}: {problem}")


def _check_daemonset(props: Mapping, agnostic: set[str], report: ReportViolation) -> None:
    name = objects.name_of(props)
    what = objects.describe("DaemonSet", props)
    if name in agnostic:
        return
    spec = objects.pod_spec("DaemonSet", props) or {}
    selected = objects.deploy_components(spec)
    reachable = [t for t in consts.WORKLOAD_TYPES if selected <= allowed_components(t)]
    sides = {side(t) for t in reachable}
    if not selected:
        report_at(
            report, "/spec/template/spec/nodeSelector",
            f"{what} selects no nvidia.com/gpu.deploy.<component> label, so it runs on GPU nodes of every workload "
            "type; fix: select the deploy label of its component (components/kit/builders.py operand_daemonset "
            "deploy_component), or name it in this policy's workloadAgnosticDaemonSets if it must run everywhere"
        )
    elif len(sides) > 1:
        report_at(
            report, "/spec/template/spec/nodeSelector",
            f"{what} selects only {', '.join(consts.deploy_label(c) for c in sorted(selected))}, which nodes of "
            f"{', '.join(reachable)} all carry, so it lands on container and VM nodes alike; fix: select a deploy "
            "label of one workload type (components/catalogs/consts.py DEPLOY_COMPONENTS_BY_WORKLOAD)"
        )


def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
    kind = objects.kind_of(args.resource_type)
    if kind == "ConfigMap":
        try:
            pools = objects.node_pools(args.props)
        except objects.PoolsDocumentError as error:
            report_at(report, f"/data/{objects.NODE_POOLS_KEY}",
                      f"{objects.describe(kind, args.props, args.name)}: {error}; fix: render it from components/states/node_labeler.py")
            return
        if pools is not None:
            _check_pools(pools, objects.describe(kind, args.props, args.name), report)
    elif kind == "DaemonSet":
        config: Mapping[str, Any] = args.get_config()
        agnostic = set(config.get("workloadAgnosticDaemonSets", DEFAULT_WORKLOAD_AGNOSTIC))
        _check_daemonset(args.props, agnostic, report)


POLICY = ResourceValidationPolicy(
    name=NAME,
    description="[critical: a node flips between container and VM operands] A GPU node runs the operands of one workload type: container or VM, never both.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate,
    config_schema=CONFIG_SCHEMA,
)
