"""Every policy of the gpu-stack pack, in one list, one module per policy (`drivers.py` and `objects.py` are the
shared readers)."""

from __future__ import annotations

from pulumi_policy import EnforcementLevel, Policy

from gpu_stack_policies import (
    cdi,
    driver_support,
    gpu_quota,
    images,
    mig_layouts,
    node_tokens,
    precompiled_images,
    privileged,
    protected_objects,
    rbac,
    scc,
    sharing,
    single_device_allocator,
    single_driver,
    state_order,
    upgrade_safety,
    workload_types,
)

# Shared by policies/__main__.py and the offline runner (gpustack/policyrun.py), so both run the same pack.
PACK_NAME = "gpu-stack"
# Policies without a level of their own; every policy here sets one.
PACK_ENFORCEMENT = EnforcementLevel.ADVISORY

POLICIES: list[Policy] = [
    workload_types.POLICY,
    state_order.POLICY,
    mig_layouts.POLICY,
    images.POLICY,
    privileged.POLICY,
    rbac.POLICY,
    node_tokens.NODE_BOUND_POLICY,
    node_tokens.REACH_POLICY,
    node_tokens.WHERE_NEEDED_POLICY,
    scc.POLICY,
    cdi.POLICY,
    sharing.POLICY,
    gpu_quota.POLICY,
    driver_support.POLICY,
    precompiled_images.POLICY,
    single_driver.POLICY,
    single_device_allocator.POLICY,
    upgrade_safety.POLICY,
    protected_objects.POLICY,
]
