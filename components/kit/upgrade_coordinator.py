"""The upgrade coordinator: the one process that grants the fleet's disruption budget (node agent 0.8.0 and later)
and carries out the drains the agents ask for (0.10.0 and later).

The node agents no longer take slots of the budget ConfigMap themselves: a node waiting in line would have to poll
it (at 10,000 nodes that was about 1,800 requests/s), and first-come-first-served would need a queue all of them
write. Instead each agent asks on its own Node, and this Deployment, off the GPU nodes where it can, watches the
nodes that ask (and those whose driver pod is out of date), and grants slots in order with a compare-and-swap on
the ConfigMap, so the budget stays an invariant of the API server whatever runs (node_images/node-agent,
`coordinator.py`). It reads the same node-pools document as the agents.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.apps.v1 import DeploymentSpecArgs, DeploymentStrategyArgs
from pulumi_kubernetes.core.v1 import (
    AffinityArgs,
    ConfigMapVolumeSourceArgs,
    ContainerArgs,
    LocalObjectReferenceArgs,
    NodeAffinityArgs,
    NodeSelectorRequirementArgs,
    NodeSelectorTermArgs,
    PodSpecArgs,
    PodTemplateSpecArgs,
    PreferredSchedulingTermArgs,
    ResourceRequirementsArgs,
    SecurityContextArgs,
    TolerationArgs,
    VolumeArgs,
)
from pulumi_kubernetes.meta.v1 import LabelSelectorArgs, ObjectMetaArgs

from components.catalogs import consts
from components.kit.builders import Operands, also_after, env, meta, mount
from components.kit.rbac import rbac_set, rule

NAME = "gpu-stack-upgrade-coordinator"
# Nodes: the nodes waiting in line or holding a slot, and those with a managed driver (what a percentage counts),
# watched as metadata; the grant is an annotation on the node. Pods and evictions (node agent 0.10.0): the drains the
# agents ask for, each node's pods listed by a spec.nodeName field selector and only those bound to the node that
# asked evicted. The one token of the stack that evicts, on a pod kept off the GPU nodes where it can.
CLUSTER_RULES = (
    rule([""], ["nodes"], ["get", "list", "watch", "patch"]),
    rule([""], ["pods"], ["list"]),
    rule([""], ["pods/eviction"], ["create"]),
)


def role_rules(budget_configmap: str) -> tuple:
    """In the operands' namespace: the budget ConfigMap (created by the first grant: `create` cannot be limited to a
    name; watched through a metadata.name field selector, which a named list/watch rule admits), and the driver
    DaemonSets and their ControllerRevisions, to know each one's newest revision."""
    return (
        rule([""], ["configmaps"], ["create"]),
        rule([""], ["configmaps"], ["get", "list", "watch", "patch"], [budget_configmap]),
        rule(["apps"], ["daemonsets"], ["list", "watch"]),
        rule(["apps"], ["controllerrevisions"], ["list"]),
    )


# Where it can, not on a GPU node: its work is the fleet's, and a GPU node is where tenants' code runs.
OFF_GPU_NODES = AffinityArgs(
    node_affinity=NodeAffinityArgs(
        preferred_during_scheduling_ignored_during_execution=[
            PreferredSchedulingTermArgs(
                weight=100,
                preference=NodeSelectorTermArgs(
                    match_expressions=[NodeSelectorRequirementArgs(key=consts.GPU_PRESENT, operator="DoesNotExist")]
                ),
            )
        ]
    )
)


def upgrade_coordinator(
    ops: Operands,
    *,
    image: str,
    config_map: str,
    config_dir: str,
    config_key: str,
    budget_configmap: str,
    security: SecurityContextArgs,
    opts: pulumi.ResourceOptions,
) -> list[pulumi.Resource]:
    """The coordinator's ServiceAccount and RBAC, and its Deployment (one replica, replaced rather than rolled:
    two coordinators would be safe, each grant being a compare-and-swap, but would race for every slot)."""
    rbac = rbac_set(NAME, ops.namespace, openshift=ops.openshift, role_rules=role_rules(budget_configmap),
                    cluster_role_rules=CLUSTER_RULES, opts=opts)
    selector = {"app": NAME}
    container = ContainerArgs(
        name="coordinator",
        image=image,
        image_pull_policy="IfNotPresent",
        args=["coordinate"],
        env=[env("CONFIG_FILE", f"{config_dir}/{config_key}")],
        security_context=security,
        # Its cache holds a few labels of every node with a managed driver: 256Mi holds 10,000 with room.
        resources=ResourceRequirementsArgs(requests={"cpu": "20m", "memory": "64Mi"}, limits={"memory": "256Mi"}),
        volume_mounts=[mount("node-pools", config_dir, read_only=True)],
    )
    tolerations = [
        TolerationArgs(key=t.key, operator=t.operator, value=t.value, effect=t.effect, toleration_seconds=t.toleration_seconds)
        for t in ops.daemonsets.tolerations
    ]
    deployment = k8s.apps.v1.Deployment(
        NAME,
        metadata=meta(NAME, ops.namespace, {**selector, **ops.extra_labels}),
        spec=DeploymentSpecArgs(
            replicas=1,
            strategy=DeploymentStrategyArgs(type="Recreate"),
            selector=LabelSelectorArgs(match_labels=selector),
            template=PodTemplateSpecArgs(
                metadata=ObjectMetaArgs(labels={consts.MANAGED_BY: consts.STACK_NAME, **selector}),
                spec=PodSpecArgs(
                    service_account_name=NAME,
                    priority_class_name=ops.daemonsets.priority_class_name,
                    image_pull_secrets=[LocalObjectReferenceArgs(name=s) for s in ops.pull_secrets] or None,
                    affinity=OFF_GPU_NODES,
                    tolerations=tolerations or None,
                    containers=[container],
                    volumes=[VolumeArgs(name="node-pools", config_map=ConfigMapVolumeSourceArgs(name=config_map))],
                ),
            ),
        ),
        opts=also_after(opts, *rbac.resources),
    )
    return [*rbac.resources, deployment]
