"""Node labelling: what the operator's NodeLabelingReconciler does, done by gpu-stack's node agent.

Every operand selects nodes by `nvidia.com/gpu.deploy.<component>=true`, so something must write those labels,
for nodes that join after `pulumi up` too. Pulumi itself never manages Node objects: the driver manager and MIG
manager rewrite these labels at run time (`paused-for-*`, `pre-installed`, `false`), and a Node resource in
state would fight them on every update. Instead the stack renders the desired labels per pool into a ConfigMap
and the agent (node_images/node-agent) applies them to its own node, keeping every run-time value it finds.

The same agent performs driver upgrades (driver DaemonSets are OnDelete, components/states/driver/state.py): the document
names each driver DaemonSet's template digest, and an agent replaces its own node's outdated driver pod only while
it holds a slot of the fleet's one disruption budget (`removal`), which also paces driver handovers, deploy-label
removals and MIG relayouts. The upgrade coordinator beside it (kit/upgrade_coordinator.py) grants those slots, in
the order nodes came to need them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence, Union

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import (
    AffinityArgs,
    ConfigMapVolumeSourceArgs,
    ContainerArgs,
    NodeAffinityArgs,
    NodeSelectorArgs,
    NodeSelectorRequirementArgs,
    NodeSelectorTermArgs,
    ResourceRequirementsArgs,
    VolumeArgs,
)

from components.catalogs import consts
from components.kit.builders import AGENT_SECURITY, NODE_NAME_ENV, Operands, also_after, child_opts, env, meta, mount, operand_daemonset
from components.kit.rbac import rbac_set, rule
from components.kit import sharing
from components.kit.upgrade_coordinator import upgrade_coordinator
from components.config import NodePool, Upgrade
from components.config.keys import json_text

NAME = "gpu-stack-node-labeler"
CONFIGMAP = "gpu-stack-node-pools"
CONFIG_KEY = "node-pools.json"
CONFIG_DIR = "/etc/gpu-stack"
# The fleet's disruption budget, created and written by the agents alone (node_images/node-agent).
BUDGET_CONFIGMAP = "gpu-stack-upgrade-budget"
# 2 adds `removal`: deploy labels leave a node no faster than the upgrade's budget, and never from under GPU
# work unless the upgrade drains (node agent 0.4.0 and later; 0.3.0 refuses version 2 and changes no label).
# 3 makes `removal` the fleet's one disruption budget with the upgrade's settings, and adds `drivers`, each driver
# DaemonSet's template digest: the agent performs driver upgrades (node agent 0.6.0 and later; older agents
# refuse version 3 and change nothing, which components/config/cluster.py refuses before that can happen).
# 4 moves `gpu-stack/driver` out of a pool's static labels into `driverImages`: each driver DaemonSet of the pool
# with the NFD labels of the nodes it is built for, so the agent assigns a node the DaemonSet of the node image it
# runs (node agent 0.7.0 and later; components/config/image_lists.py).
CONFIG_VERSION = 4

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


def pool_labels(pool: NodePool, *, device_plugin_configs: bool) -> dict[str, str]:
    labels = {consts.WORKLOAD_CONFIG: pool.workload_type}
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
class DriverImage:
    """One driver DaemonSet of a pool and the NFD labels of the nodes it serves (empty: every node of the pool)."""

    daemonset: str
    node_labels: Mapping[str, str]

    def as_json(self) -> dict:
        return {"daemonSet": self.daemonset, "nodeLabels": dict(self.node_labels)}


@dataclass(frozen=True)
class Removal:
    """The fleet's one disruption budget and how a node goes through a change under it. At most `max_unavailable`
    nodes (a count, or "N%" of the GPU nodes with a managed driver) are out of service at once for anything the
    agents do: a driver upgrade (`driver_upgrade` "rolling"), a handover to another driver DaemonSet, a deploy
    label removal, a MIG relayout; `max_parallel_upgrades` caps it further (0: no cap of its own). `paused` starts
    no new disruption. A node whose new driver is not Ready within `node_ready_timeout_seconds` stays cordoned and
    halts the rollout. The agents share the budget through a ConfigMap they create in `namespace` at run time."""

    max_unavailable: Union[int, str]
    max_parallel_upgrades: int
    paused: bool
    drain: bool
    drain_pod_selector: str
    drain_timeout_seconds: int
    gpu_pod_eviction: bool
    driver_upgrade: str
    node_ready_timeout_seconds: int
    namespace: str

    @classmethod
    def of(cls, upgrade: Upgrade, namespace: str) -> "Removal":
        drain = upgrade.drain
        return cls(
            max_unavailable=upgrade.max_unavailable,
            max_parallel_upgrades=upgrade.max_parallel_upgrades,
            paused=upgrade.paused,
            drain=drain.enabled,
            drain_pod_selector=drain.pod_selector,
            drain_timeout_seconds=drain.timeout_seconds,
            gpu_pod_eviction=upgrade.gpu_pod_eviction,
            driver_upgrade=upgrade.strategy,
            node_ready_timeout_seconds=upgrade.node_ready_timeout_seconds,
            namespace=namespace,
        )

    def as_json(self) -> dict:
        return {
            "maxUnavailable": self.max_unavailable,
            "maxParallelUpgrades": self.max_parallel_upgrades,
            "paused": self.paused,
            "drain": self.drain,
            "drainPodSelector": self.drain_pod_selector,
            "drainTimeoutSeconds": self.drain_timeout_seconds,
            "gpuPodEviction": self.gpu_pod_eviction,
            "driverUpgrade": self.driver_upgrade,
            "nodeReadyTimeoutSeconds": self.node_ready_timeout_seconds,
            "namespace": self.namespace,
        }


def agent_config(
    pools: Sequence[NodePool],
    *,
    driver_images: Mapping[str, Sequence[DriverImage]],
    driver_digests: Mapping[str, str],
    device_plugin_configs: bool,
    removal: Removal,
    sandbox_mode: str = "kubevirt",
) -> dict:
    """The document the agent reads; pool order is match order (first match wins). `driver_images`: each pool's
    driver-like DaemonSets (drivers, one per node image; a VM pool's vGPU or VFIO manager), which the agent writes
    as the node's gpu-stack/driver label by the node image the node runs. `driver_digests`: every driver-like
    DaemonSet of the stack and its `gpu-stack/template-digest`, the template the agent upgrades a node to once the
    DaemonSet in the cluster carries it."""
    return {
        "version": CONFIG_VERSION,
        "gpuNodeLabels": list(consts.NFD_GPU_LABELS),
        "managedDeployLabels": [consts.deploy_label(c) for c in consts.ALL_DEPLOY_COMPONENTS],
        "removal": removal.as_json(),
        "drivers": dict(driver_digests),
        "pools": [
            {
                "name": pool.name,
                # Not read by the labelling rules: it is what the policy pack and drift reports compare against.
                "gpuModel": pool.gpu_model,
                "nodeSelector": dict(pool.node_selector),
                "deployLabels": deploy_labels(pool, driver_deployed=pool.name in driver_images, sandbox_mode=sandbox_mode),
                "labels": pool_labels(pool, device_plugin_configs=device_plugin_configs),
                **({"driverImages": [image.as_json() for image in driver_images[pool.name]]}
                   if pool.name in driver_images else {}),
            }
            for pool in pools
        ],
    }


# The agent runs where tenants' code runs, so its token holds only what its own node needs (the node-bound admission
# policy, components/states/node_write_policy.py, keeps its writes on its own Node and its own node's pods). Nodes: its
# own Node (watched by a metadata.name field selector, which RBAC cannot name per node), its labels, the cordon and
# the handshake with the coordinator, drain requests included. Pods: the GPU work on its node (cluster-wide, by
# field selector, watched while the node waits for it to end), which a change must not pull the operands from
# under. No `pods/eviction` (node agent 0.10.0): the coordinator evicts for it, pods of its node alone. Agents of
# 0.9.0 still running while the DaemonSet rolls are refused (403) if they were draining: they exit, are replaced
# first (the DaemonSet controller replaces an unavailable pod ahead of the others), and the new agent resumes the
# slot and asks the coordinator.
CLUSTER_RULES = (
    rule([""], ["nodes"], ["get", "list", "watch", "patch"]),
    rule([""], ["pods"], ["list", "watch"]),
)
# In the operands' namespace. The budget ConfigMap, which the coordinator creates at run time (Pulumi never declares
# it, or a `pulumi up` would reset the slots in use): an agent reads its slot and gives it back or marks it failed
# (patch), as agents of 0.8.0 and 0.9.0 did. Driver pods: deleting the node's outdated one is the upgrade (and a handover).
# DaemonSets and ControllerRevisions: whether the driver DaemonSet in the cluster already carries the template the
# document names, and which pods are of it. The grants of agents before 0.8.0 (configmaps create and update, the
# Leases of agents before 0.6.0) are gone: this program needs 0.10.0 (components/config/cluster.py), and
# neither 0.9.0 nor 0.8.0 ran them.
ROLE_RULES = (
    rule([""], ["pods"], ["delete"]),
    rule([""], ["configmaps"], ["get", "patch"], [BUDGET_CONFIGMAP]),
    rule(["apps"], ["daemonsets"], ["get"]),
    rule(["apps"], ["controllerrevisions"], ["list"]),
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
    coordinator: list[pulumi.Resource]

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        image: str,
        pools: Sequence[NodePool],
        driver_images: Mapping[str, Sequence[DriverImage]],
        driver_digests: Mapping[str, str],
        device_plugin_configs: bool,
        removal: Removal,
        sandbox_mode: str,
        resync_seconds: int,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:NodeLabeler", name, None, opts)
        child = child_opts(self, depends_on)
        rbac = rbac_set(NAME, ops.namespace, openshift=ops.openshift, role_rules=ROLE_RULES, cluster_role_rules=CLUSTER_RULES, opts=child)
        document = agent_config(
            pools,
            driver_images=driver_images,
            driver_digests=driver_digests,
            device_plugin_configs=device_plugin_configs,
            removal=removal,
            sandbox_mode=sandbox_mode,
        )
        self.config_map = k8s.core.v1.ConfigMap(
            CONFIGMAP,
            metadata=meta(CONFIGMAP, ops.namespace, {"app": NAME}),
            data={CONFIG_KEY: json_text(document, indent=2, sort_keys=True)},
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
            operand=None,
            deploy_component=None,
            service_account=NAME,
            affinity=GPU_NODE_AFFINITY,
            containers=[agent],
            volumes=[VolumeArgs(name="node-pools", config_map=ConfigMapVolumeSourceArgs(name=CONFIGMAP))],
            opts=also_after(child, *rbac.resources, self.config_map),
        )
        self.coordinator = upgrade_coordinator(
            ops, image=image, config_map=CONFIGMAP, config_dir=CONFIG_DIR, config_key=CONFIG_KEY,
            budget_configmap=BUDGET_CONFIGMAP, security=AGENT_SECURITY, opts=also_after(child, self.config_map))
        self.register_outputs({"daemonset": NAME, "pools": [p.name for p in pools]})
