"""single-driver-per-node: no node can be selected by two driver DaemonSets, and host-driver pools by none.

Two driver pods on one node unload each other's kernel modules. A stack policy: for each pair of driver
DaemonSets it asks whether one node could satisfy both, from their `nvidia.com/gpu.deploy.driver` selector, any
other node selector (the precompiled kernel label) and their affinity (`gpu-stack/pool`, `gpu-stack/driver`, and
the OS a DaemonSet of a pool's node image selects), against the pools the node labeller's document declares. A pool whose nodes carry no driver deploy label (its image ships the driver)
must not be named by any driver DaemonSet.
"""

from __future__ import annotations

import itertools

from pulumi_policy import EnforcementLevel, ReportViolation, StackValidationArgs, StackValidationPolicy

from gpu_stack_policies import drivers, objects
from gpu_stack_policies.fields import report_at

NAME = "single-driver-per-node"
FIX = (
    "fix: let gpu-stack plan the driver DaemonSets (components/states/driver/targets.py plan_targets), which names each one's pools "
    "in a gpu-stack/pool affinity; a pool is served by exactly one"
)


def validate(args: StackValidationArgs, report: ReportViolation) -> None:
    resources = list(args.resources)
    sets = drivers.driver_sets(resources)
    _, pools = objects.find_pools(resources)
    with_driver = drivers.driver_pools(pools)
    for first, second in itertools.combinations(sets, 2):
        if not objects.selectors_compatible(first.other_node_selector, second.other_node_selector):
            continue  # e.g. two kernels: no node reports both
        if pools:
            shared = sorted({p.name for p in first.reachable(with_driver)} & {p.name for p in second.reachable(with_driver)})
            # Two DaemonSets of one pool (one per node image) select disjoint nodes by NFD's OS and kernel labels.
            shared = [name for name in shared
                      if objects.could_share_a_node(first.spec, second.spec, next(p for p in with_driver if p.name == name))]
            if not shared:
                continue
            where = f"the nodes of pool(s) {', '.join(shared)}"
        else:
            named_first, named_second = first.named_pools, second.named_pools
            if named_first is not None and named_second is not None and not named_first & named_second:
                continue
            where = "the same nodes (no node pools document to tell them apart)"
        report_at(report, "/spec/template/spec/affinity",
                  f"{first.what} and {second.what} can both run on {where}, and would unload each other's driver; {FIX}", second.resource.urn)
    host_pools = {p.name for p in pools} - {p.name for p in with_driver}
    for driver in sets:
        named = driver.named_pools or set()
        for pool in sorted(named & host_pools):
            report_at(
                report, "/spec/template/spec/affinity",
                f"{driver.what} names pool {pool!r}, whose nodes ship their own driver (no nvidia.com/gpu.deploy.driver "
                f"label); fix: remove the pool from the DaemonSet, or give the pool driver.mode managed or precompiled",
                driver.resource.urn,
            )


POLICY = StackValidationPolicy(
    name=NAME,
    description="[critical: two drivers fight over one node] Driver DaemonSet selectors are disjoint, and host-driver pools get no driver DaemonSet.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate,
)
