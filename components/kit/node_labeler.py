"""Node labelling: what the operator's NodeLabelingReconciler does, done by gpu-stack's node agent.

Every operand selects nodes by `nvidia.com/gpu.deploy.<component>=true`, so something must write those labels,
for nodes that join after `pulumi up` too. Pulumi itself never manages Node objects: the driver manager and MIG
manager rewrite these labels at run time (`paused-for-*`, `pre-installed`, `false`), and a Node resource in
state would fight them on every update. Instead the stack renders the desired labels per pool into a ConfigMap
and the agent (node_images/node-agent) applies them to its own node, keeping every run-time value it finds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence, Union

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import (
    AffinityArgs,
    CapabilitiesArgs,
    ConfigMapVolumeSourceArgs,
    ContainerArgs,
    NodeAffinityArgs,
    NodeSelectorArgs,
    NodeSelectorRequirementArgs,
    NodeSelectorTermArgs,
    ResourceRequirementsArgs,
    SecurityContextArgs,
    VolumeArgs,
)

from components.catalogs import consts
from components.kit.builders import NODE_NAME_ENV, Operands, also_after, child_opts, env, meta, mount, operand_daemonset
from components.kit.rbac import rbac_set, rule
from components.kit import sharing
from components.config import NodePool

NAME = "gpu-stack-node-labeler"
CONFIGMAP = "gpu-stack-node-pools"
CONFIG_KEY = "node-pools.json"
CONFIG_DIR = "/etc/gpu-stack"
# 2 adds `removal`: deploy labels leave a node no faster than the upgrade's budget, and never from under GPU
# work unless the upgrade drains (node agent 0.4.0 and later; 0.3.0 refuses version 2 and changes no label).
CONFIG_VERSION = 2

AGENT_SECURITY = SecurityContextArgs(
    run_as_non_root=True,
    run_as_user=65532,
    allow_privilege_escalation=False,
    read_only_root_filesystem=True,
    capabilities=CapabilitiesArgs(drop=["ALL"]),
)


def deploy_labels(pool: NodePool, *, driver_deployed: bool, sandbox_mode: str = "kubevirt") -> list[str]:
    components = list(consts.DEPLOY_COMPONENTS_BY_WORKLOAD[pool.workload_type])
    if sandbox_mode == "kata" and pool.workload_type == "vm-passthrough":
        components = [consts.KATA_DEPLOY_SUBSTITUTES.get(c, c) for c in components]
    if pool.workload_type == "container" and pool.allocation == "dra":
        components = [consts.DRA_DEPLOY_SUBSTITUTES.get(c, c) for c in components]
    if not driver_deployed and "driver" in components:
        # The node image ships the driver: no driver DaemonSet may ever select these nodes.
        components.remove("driver")
    if pool.workload_type == "container" and pool.model.mig_capable:
        components.append(consts.MIG_MANAGER_DEPLOY_COMPONENT)
    return [consts.deploy_label(c) for c in components]


def pool_labels(pool: NodePool, *, device_plugin_configs: bool, driver_daemonset: Optional[str] = None) -> dict[str, str]:
    labels = {consts.WORKLOAD_CONFIG: pool.workload_type}
    if driver_daemonset is not None:
        labels[consts.DRIVER_DAEMONSET_LABEL] = driver_daemonset
    if pool.workload_type == "vm-vgpu" and pool.vgpu_config:
        labels[consts.VGPU_CONFIG] = pool.vgpu_config
    if pool.workload_type == "container":
        if device_plugin_configs:
            labels[consts.DEVICE_PLUGIN_CONFIG] = sharing.config_key(pool)
        mig_layout = sharing.mig_config_label(pool)
        if mig_layout is not None:
            labels[consts.MIG_CONFIG] = mig_layout
    return labels


@dataclass(frozen=True)
class Removal:
    """How fast deploy labels may leave nodes when a pool is renamed or removed or a node leaves its pool: at most
    `max_unavailable` nodes at once (the upgrade's budget), never under running GPU work unless `drain`. The agents
    share the budget through Leases in `namespace`, where they also hand orphaned driver pods over."""

    max_unavailable: Union[int, str]
    drain: bool
    namespace: str

    def as_json(self) -> dict:
        return {"maxUnavailable": self.max_unavailable, "drain": self.drain, "namespace": self.namespace}


def agent_config(
    pools: Sequence[NodePool],
    *,
    driver_daemonsets: Mapping[str, str],
    device_plugin_configs: bool,
    removal: Removal,
    sandbox_mode: str = "kubevirt",
) -> dict:
    """The document the agent reads; pool order is match order (first match wins)."""
    return {
        "version": CONFIG_VERSION,
        "gpuNodeLabels": list(consts.NFD_GPU_LABELS),
        "managedDeployLabels": [consts.deploy_label(c) for c in consts.ALL_DEPLOY_COMPONENTS],
        "removal": removal.as_json(),
        "pools": [
            {
                "name": pool.name,
                # Not read by the labelling rules: it is what the policy pack and drift reports compare against.
                "gpuModel": pool.gpu_model,
                "nodeSelector": dict(pool.node_selector),
                "deployLabels": deploy_labels(pool, driver_deployed=pool.name in driver_daemonsets, sandbox_mode=sandbox_mode),
                "labels": pool_labels(
                    pool, device_plugin_configs=device_plugin_configs, driver_daemonset=driver_daemonsets.get(pool.name)
                ),
            }
            for pool in pools
        ],
    }


# Nodes: its own labels. Pods: the GPU work on its node (cluster-wide, by field selector), which a removal must not
# pull the operands from under, and eviction of it when the upgrade drains. Leases: the shared removal budget;
# deleting pods: handing an orphaned driver pod over to its new DaemonSet.
CLUSTER_RULES = (
    rule([""], ["nodes"], ["get", "list", "watch", "patch"]),
    rule([""], ["pods"], ["list"]),
    rule([""], ["pods/eviction"], ["create"]),
)
ROLE_RULES = (
    rule([""], ["pods"], ["get", "list", "delete"]),
    rule(["coordination.k8s.io"], ["leases"], ["get", "create", "update", "delete"]),
)

# Any of NFD's NVIDIA PCI labels puts the agent on a node; terms of a node selector are ORed.
GPU_NODE_AFFINITY = AffinityArgs(
    node_affinity=NodeAffinityArgs(
        required_during_scheduling_ignored_during_execution=NodeSelectorArgs(
            node_selector_terms=[
                NodeSelectorTermArgs(match_expressions=[NodeSelectorRequirementArgs(key=label, operator="In", values=["true"])])
                for label in consts.NFD_GPU_LABELS
            ]
        )
    )
)


class NodeLabeler(pulumi.ComponentResource):
    daemonset: k8s.apps.v1.DaemonSet
    config_map: k8s.core.v1.ConfigMap

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        image: str,
        pools: Sequence[NodePool],
        driver_daemonsets: Mapping[str, str],
        device_plugin_configs: bool,
        removal: Removal,
        sandbox_mode: str,
        resync_seconds: int,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:NodeLabeler", name, None, opts)
        child = child_opts(self, depends_on)
        rbac = rbac_set(NAME, ops.namespace, role_rules=ROLE_RULES, cluster_role_rules=CLUSTER_RULES, opts=child)
        document = agent_config(
            pools,
            driver_daemonsets=driver_daemonsets,
            device_plugin_configs=device_plugin_configs,
            removal=removal,
            sandbox_mode=sandbox_mode,
        )
        self.config_map = k8s.core.v1.ConfigMap(
            CONFIGMAP,
            metadata=meta(CONFIGMAP, ops.namespace, {"app": NAME}),
            data={CONFIG_KEY: json.dumps(document, indent=2, sort_keys=True)},
            opts=child,
        )
        agent = ContainerArgs(
            name="node-labeler",
            image=image,
            image_pull_policy="IfNotPresent",
            args=["label"],
            env=[NODE_NAME_ENV, env("CONFIG_FILE", f"{CONFIG_DIR}/{CONFIG_KEY}"), env("RESYNC_SECONDS", str(resync_seconds))],
            security_context=AGENT_SECURITY,
            resources=ResourceRequirementsArgs(requests={"cpu": "10m", "memory": "32Mi"}, limits={"memory": "128Mi"}),
            volume_mounts=[mount("node-pools", CONFIG_DIR, read_only=True)],
        )
        self.daemonset = operand_daemonset(
            NAME,
            ops,
            deploy_component=None,
            service_account=NAME,
            affinity=GPU_NODE_AFFINITY,
            containers=[agent],
            volumes=[VolumeArgs(name="node-pools", config_map=ConfigMapVolumeSourceArgs(name=CONFIGMAP))],
            opts=also_after(child, *rbac.resources, self.config_map),
        )
        self.register_outputs({"daemonset": NAME, "pools": [p.name for p in pools]})
