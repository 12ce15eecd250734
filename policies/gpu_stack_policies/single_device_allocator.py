"""single-device-allocator: no node runs both the device plugin and the DRA kubelet plugin.

Both hand out the same GPUs: the device plugin advertises them as `nvidia.com/gpu` to the kubelet, the DRA
driver publishes them in ResourceSlices, and neither knows what the other gave away, so one GPU ends up in two
pods (NVIDIA's DRA chart refuses to install its GPU plugin for this reason until KEP 5004 is GA,
k8s-dra-driver-gpu deployments/helm/dra-driver-nvidia-gpu/templates/validation.yaml). gpu-stack chooses one
allocator per pool (`nodePools[].allocation`); this stack policy checks both ends of that choice:

* the pools document (node labeller ConfigMap): no pool's nodes get both deploy labels,
  `nvidia.com/gpu.deploy.device-plugin` and `nvidia.com/gpu.deploy.dra-driver`;
* the DaemonSets: no pool is reachable by a device-plugin DaemonSet and a DRA kubelet plugin DaemonSet, judged
  from their node selection the way single-driver-per-node judges drivers (deploy labels, other node selector
  keys and the `gpu-stack/pool` affinity against the pools document; without one, by the pools their affinities
  name, where no affinity means every node).

A DaemonSet is on the device-plugin side when it requires the device-plugin deploy label (the plugin and the MPS
control daemon that serves it) or runs a container named `nvidia-device-plugin`; on the DRA side when it requires
the dra-driver deploy label or runs `gpu-kubelet-plugin`. Recognising the workload as well as the label catches a
plugin that lost its deploy label, which would otherwise run on every GPU node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional

from pulumi_policy import EnforcementLevel, ReportViolation, StackValidationArgs, StackValidationPolicy

from gpu_stack_policies import objects
from gpu_stack_policies.fields import report_at
from gpu_stack_policies.facts import consts

NAME = "single-device-allocator"
# The deploy components of components/states/device_plugin.py and components/states/dra_driver.py (tests compare them).
DEVICE_PLUGIN_COMPONENT = "device-plugin"
DRA_COMPONENT = "dra-driver"
DEVICE_PLUGIN_CONTAINER = "nvidia-device-plugin"
DRA_PLUGIN_BINARY = "gpu-kubelet-plugin"
DEVICE_PLUGIN_SIDE = "device plugin"
DRA_SIDE = "DRA kubelet plugin"
FIX = (
    "fix: give each pool one allocator (nodePools[].allocation: device-plugin or dra), so the node labeller writes "
    f"{consts.deploy_label(DEVICE_PLUGIN_COMPONENT)} or {consts.deploy_label(DRA_COMPONENT)}, never both, and "
    "keep each plugin DaemonSet on its own deploy label"
)


@dataclass(frozen=True)
class Allocator:
    resource: Any
    what: str
    side: str
    spec: Mapping

    @property
    def named_pools(self) -> Optional[set[str]]:
        return objects.named_label_values(self.spec, consts.POOL_LABEL)

    @property
    def other_node_selector(self) -> dict[str, str]:
        return {k: v for k, v in objects.node_selector(self.spec).items() if not k.startswith(consts.DEPLOY_PREFIX)}


def _runs(container: objects.Container, binary: str) -> bool:
    words = [str(w) for w in [*objects.items(container.spec.get("command")), *objects.items(container.spec.get("args"))]]
    return any(binary in word for word in words)


def side_of(spec: Mapping) -> list[str]:
    """The allocator sides a pod spec belongs to (both when it is confused enough to require both labels)."""
    components = objects.deploy_components(spec)
    found = objects.containers(spec)
    sides = []
    if DEVICE_PLUGIN_COMPONENT in components or any(c.name == DEVICE_PLUGIN_CONTAINER and not c.init for c in found):
        sides.append(DEVICE_PLUGIN_SIDE)
    if DRA_COMPONENT in components or any(_runs(c, DRA_PLUGIN_BINARY) for c in found if not c.init):
        sides.append(DRA_SIDE)
    return sides


def allocators(resources: Iterable[Any]) -> list[Allocator]:
    found = []
    for resource in objects.resources_by_kind(resources, "DaemonSet"):
        spec = objects.pod_spec("DaemonSet", resource.props) or {}
        what = objects.describe("DaemonSet", resource.props, resource.name)
        found += [Allocator(resource, what, side, spec) for side in side_of(spec)]
    return found


def _shared_nodes(first: Allocator, second: Allocator, pools: list[objects.Pool]) -> Optional[str]:
    """Where both can run, in words, or None when no node can carry both."""
    if first.resource is second.resource:
        return "every node it runs on"
    if not objects.selectors_compatible(first.other_node_selector, second.other_node_selector):
        return None
    if pools:
        reachable = {p.name for p in objects.pools_a_pod_can_reach(first.spec, pools)}
        shared = sorted(reachable & {p.name for p in objects.pools_a_pod_can_reach(second.spec, pools)})
        return f"the nodes of pool(s) {', '.join(shared)}" if shared else None
    named_first, named_second = first.named_pools, second.named_pools
    if named_first is not None and named_second is not None and not named_first & named_second:
        return None
    return "the same nodes (no node pools document to tell them apart)"


def validate(args: StackValidationArgs, report: ReportViolation) -> None:
    resources = list(args.resources)
    labeller, pools = objects.find_pools(resources)
    for pool in pools:
        if {DEVICE_PLUGIN_COMPONENT, DRA_COMPONENT} <= pool.deploy_components:
            report_at(
                report, f"{pool.at}/deployLabels",
                f"{objects.describe('ConfigMap', labeller.props, labeller.name)}: pool {pool.name!r} gets both "
                f"{consts.deploy_label(DEVICE_PLUGIN_COMPONENT)} and {consts.deploy_label(DRA_COMPONENT)}, so its "
                f"nodes would run the device plugin and the DRA kubelet plugin and hand out each GPU twice; {FIX}",
                labeller.urn,
            )
    found = allocators(resources)
    plugins = [a for a in found if a.side == DEVICE_PLUGIN_SIDE]
    dra = [a for a in found if a.side == DRA_SIDE]
    for device_plugin in plugins:
        for kubelet_plugin in dra:
            where = _shared_nodes(device_plugin, kubelet_plugin, pools)
            if where is None:
                continue
            if device_plugin.resource is kubelet_plugin.resource:
                report_at(report, "/spec/template/spec/nodeSelector",
                          f"{device_plugin.what} is both a device plugin and a DRA kubelet plugin; {FIX}", device_plugin.resource.urn)
                continue
            report_at(
                report, "/spec/template/spec/affinity",
                f"{device_plugin.what} ({DEVICE_PLUGIN_SIDE}) and {kubelet_plugin.what} ({DRA_SIDE}) can both run on "
                f"{where}, and would each hand out the same GPUs; {FIX}",
                kubelet_plugin.resource.urn,
            )


POLICY = StackValidationPolicy(
    name=NAME,
    description="[critical: GPUs handed out twice] No node runs both the device plugin and the DRA kubelet plugin: each pool has one GPU allocator.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate,
)
