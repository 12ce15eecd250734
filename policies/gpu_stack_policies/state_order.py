"""state-order: the apply order is the operator's state order, and nothing the validator needs waits for it.

A stack policy: it needs every resource with its parent and dependencies, which resource policies never see.

1. Every DaemonSet belongs to a state of `components/states/order.py` STATE_ORDER and is applied after every object of
   every enabled state before its own (a later upgrade wave's driver DaemonSets, which wait for gates at the
   end of the order, are left out of what the next states wait for). A resource waits for its own dependencies and, because it registers only
   after its parent did, for those of every component above it; a dependency on a component stands for all of
   the component's resources (pulumi.md §1.3). Helm releases count as objects of their state.
2. No deadlock on the validator. Some resources wait until `nvidia-operator-validator` pods are Ready: the
   validator DaemonSet itself when Pulumi awaits it (no `pulumi.com/skipAwait`), and gate Jobs (labelled
   `gpu-stack/validates` or running the node agent's `wait-validated`), each on the pools named by its `POOLS`
   env or on every GPU node. The validator on a node needs what its init containers check there: the driver
   (`COMPONENT=driver`), the toolkit (`toolkit`) and the device plugin (`plugin`) DaemonSets. If one of those,
   or the validator itself, is applied only after a resource that waits for the validator on nodes it also
   serves, neither ever completes and `pulumi up` hangs until its timeout. Pools come from the node labeller's
   document; a DaemonSet serves the pools whose deploy labels, `gpu-stack/pool` affinity and node selector it
   matches.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from pulumi_policy import EnforcementLevel, ReportViolation, StackValidationArgs, StackValidationPolicy

from gpu_stack_policies import fields, objects
from gpu_stack_policies.fields import report_at
from gpu_stack_policies.graph import Graph, gates_before, is_custom
from gpu_stack_policies.facts.order import STATE_NAMES

NAME = "state-order"
STACK_COMPONENT_TYPE = "gpu-stack:index:GpuStack"
# What each validator check needs on its node, as the deploy label of the component providing it.
CHECKED_COMPONENT = {"driver": "driver", "toolkit": "container-toolkit", "plugin": "device-plugin"}


def state_of(resource: Any) -> Optional[str]:
    node = resource.parent
    while node is not None:
        if node.parent is not None and node.parent.resource_type == STACK_COMPONENT_TYPE:
            return node.name if node.name in STATE_NAMES else None
        node = node.parent
    return None


def _label(resource: Any) -> str:
    kind = objects.kind_of(resource.resource_type) or resource.resource_type.rsplit(":", 1)[-1]
    return objects.describe(kind, resource.props, resource.name)


def _check_state_order(graph: Graph, report: ReportViolation) -> None:
    objects_of: dict[str, set[str]] = {}
    for resource in graph.resources:
        state = state_of(resource)
        # A later upgrade wave's driver DaemonSet belongs to state-driver but waits, by design, for the gates at
        # the end of the order; the states after state-driver wait for its first wave only.
        if state is not None and is_custom(resource) and not gates_before(graph, resource):
            objects_of.setdefault(state, set()).add(resource.urn)
    enabled = [s for s in STATE_NAMES if s in objects_of]
    for daemonset in objects.resources_by_kind(graph.resources, "DaemonSet"):
        state = state_of(daemonset)
        what = _label(daemonset)
        if state is None:
            report_at(
                report, fields.DEPENDENCIES,
                f"{what} belongs to no state of components/states/order.py STATE_ORDER, so nothing orders it against the "
                "other operands; fix: create it inside the component of its state (parent=the state component)",
                daemonset.urn,
            )
            continue
        before = graph.closure(daemonset)
        late = []
        for earlier in enabled[: enabled.index(state)]:
            missing = objects_of[earlier] - before
            if missing == objects_of[earlier]:
                late.append(earlier)
            elif missing:
                names = sorted(_label(graph.by_urn[urn]) for urn in missing)
                late.append(f"{earlier} ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})")
        if late:
            report_at(
                report, fields.DEPENDENCIES,
                f"{what} (state {state}, #{STATE_NAMES.index(state) + 1}) is applied without waiting for {', '.join(late)}; "
                "fix: build the states in STATE_ORDER in components/stack.py and pass the previous state as "
                "depends_on down to the DaemonSet (components/kit/builders.py child_opts)",
                daemonset.urn,
            )


def _pool_scope(spec: Any, pools: list[objects.Pool]) -> Optional[set[str]]:
    return {p.name for p in objects.pools_a_pod_can_reach(spec, pools)} if pools else None


def _command_line(container: objects.Container) -> list[str]:
    return [str(a) for a in objects.items(container.spec.get("command")) + objects.items(container.spec.get("args"))]


def _validator_waiters(resources: Iterable[Any], pools: list[objects.Pool]) -> list[tuple[Any, Optional[set[str]]]]:
    """Resources whose readiness (as Pulumi awaits it) needs validator pods Ready, with the pools they wait on."""
    waiters = []
    for resource in resources:
        kind = objects.kind_of(resource.resource_type)
        if not objects.is_awaited(resource.props):
            continue
        spec = objects.pod_spec(kind, resource.props)
        if kind == "DaemonSet" and objects.name_of(resource.props, resource.name) == objects.VALIDATOR_DAEMONSET:
            waiters.append((resource, _pool_scope(spec, pools)))
        elif kind == "Job":
            gate = [c for c in objects.containers(spec or {}) if objects.WAIT_VALIDATED in _command_line(c)]
            if gate or objects.VALIDATES_LABEL in objects.labels_of(resource.props):
                named = next((c.env["POOLS"] for c in gate if c.env.get("POOLS")), None)
                waiters.append((resource, {p for p in named.split(",") if p} if named else None))
    return waiters


def _validator_needs(resources: list[Any]) -> list[tuple[Any, str]]:
    """The validator DaemonSet and every DaemonSet one of its checks needs, with the reason."""
    validator = next(
        (
            r
            for r in objects.resources_by_kind(resources, "DaemonSet")
            if objects.name_of(r.props, r.name) == objects.VALIDATOR_DAEMONSET
        ),
        None,
    )
    if validator is None:
        return []
    checks = {}
    for container in objects.containers(objects.pod_spec("DaemonSet", validator.props) or {}):
        component = CHECKED_COMPONENT.get(container.env.get("COMPONENT", ""))
        if container.init and component:
            checks[component] = container.name
    needed: list[tuple[Any, str]] = [(validator, "those pods are its own")]
    for daemonset in objects.resources_by_kind(resources, "DaemonSet"):
        selected = objects.deploy_components(objects.pod_spec("DaemonSet", daemonset.props) or {})
        for component, check in checks.items():
            if component in selected and daemonset is not validator:
                needed.append((daemonset, f"the validator's {check} there waits for this DaemonSet"))
                break
    return needed


def _shared_nodes(scope: Optional[set[str]], waiter_scope: Optional[set[str]]) -> Optional[str]:
    """Where a needed DaemonSet and a waiter meet (None: every GPU node), or "" when they never do."""
    if scope is None and waiter_scope is None:
        return None
    common = waiter_scope if scope is None else scope if waiter_scope is None else scope & waiter_scope
    return f"pools {', '.join(sorted(common))}" if common else ""


def _check_validator_deadlock(graph: Graph, report: ReportViolation) -> None:
    _, pools = objects.find_pools(graph.resources)
    waiters = _validator_waiters(graph.resources, pools)
    for needed, reason in _validator_needs(graph.resources):
        before = graph.closure(needed)
        scope = _pool_scope(objects.pod_spec("DaemonSet", needed.props) or {}, pools)
        for waiter, waiter_scope in waiters:
            shared = _shared_nodes(scope, waiter_scope)
            if waiter.urn not in before or shared == "":
                continue
            report_at(
                report, fields.DEPENDENCIES,
                f"{_label(needed)} is applied only after {_label(waiter)}, which waits for "
                f"{objects.VALIDATOR_DAEMONSET} pods to be Ready on {shared or 'every GPU node'}; {reason}, so "
                "neither ever completes and `pulumi up` hangs until its timeout. Fix: drop that dependency (gates "
                "come after everything the validator checks, and nothing it checks depends on a gate), and keep "
                f"{objects.SKIP_AWAIT}: \"true\" on operand DaemonSets",
                needed.urn,
            )


def validate(args: StackValidationArgs, report: ReportViolation) -> None:
    graph = Graph(list(args.resources))
    _check_state_order(graph, report)
    _check_validator_deadlock(graph, report)


POLICY = StackValidationPolicy(
    name=NAME,
    description="[critical: pulumi up hangs] Operands are applied in the operator's state order, and nothing the validator needs waits for it.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate,
)
