"""`node-inventory`: every container GPU node reports what its hardware really is, next to what its pool says.

No operator state does this. The node agent's `inventory` loop (node_images/node-agent) reads the GPUs through
NVML every resync and writes two annotations on its own node: `gpu-stack/inventory`
(model, count, memory, MIG mode, driver) and `gpu-stack/drift` (each disagreement with the pool the node
labeller matched it to, `[]` when none), so `kubectl get nodes -o json` shows drift between declared and actual
pools. It reads the labeller's pools document, so it runs only with the labeller.

NVML needs the driver's libraries and device nodes, which the `nvidia` runtime class injects (utility
capability only); nothing else of the host is mounted, and the agent keeps its unprivileged, read-only shape.
There is no privileged validation gate in front of it: until the driver answers, the agent reports the NVML
error in `gpu-stack/inventory` and tries again every resync.
"""

from __future__ import annotations

from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import ConfigMapVolumeSourceArgs, ContainerArgs, ResourceRequirementsArgs, VolumeArgs

from components.kit.builders import AGENT_SECURITY, NODE_NAME_ENV, Operands, also_after, child_opts, env, mount, operand_daemonset
from components.kit.rbac import rbac_set, rule
from components.states.node_labeler import CONFIG_DIR, CONFIG_KEY, CONFIGMAP

NAME = "gpu-stack-node-inventory"
# The agent's annotations; the drift one is what alerting and `kubectl` read.
INVENTORY_ANNOTATION = "gpu-stack/inventory"
DRIFT_ANNOTATION = "gpu-stack/drift"


class NodeInventory(pulumi.ComponentResource):
    daemonset: k8s.apps.v1.DaemonSet

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        image: str,
        resync_seconds: int,
        pools_config: k8s.core.v1.ConfigMap,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:NodeInventory", name, None, opts)
        child = child_opts(self, depends_on)
        rbac = rbac_set(NAME, ops.namespace, openshift=ops.openshift, cluster_role_rules=[rule([""], ["nodes"], ["get", "patch"])], opts=child)
        agent = ContainerArgs(
            name="node-inventory",
            image=image,
            image_pull_policy="IfNotPresent",
            args=["inventory"],
            env=[
                NODE_NAME_ENV,
                env("CONFIG_FILE", f"{CONFIG_DIR}/{CONFIG_KEY}"),
                env("RESYNC_SECONDS", str(resync_seconds)),
                env("NVIDIA_VISIBLE_DEVICES", "all"),
                env("NVIDIA_DRIVER_CAPABILITIES", "utility"),
            ],
            security_context=AGENT_SECURITY,
            resources=ResourceRequirementsArgs(requests={"cpu": "10m", "memory": "32Mi"}, limits={"memory": "128Mi"}),
            volume_mounts=[mount("node-pools", CONFIG_DIR, read_only=True)],
        )
        self.daemonset = operand_daemonset(
            NAME,
            ops,
            # gpu-stack's own, though it runs where the toolkit does: operands.toolkit does not reach it
            operand=None,
            # container GPU nodes (device plugin or DRA), the ones whose driver the runtime can inject
            deploy_component="container-toolkit",
            service_account=NAME,
            runtime_class=True,
            containers=[agent],
            volumes=[VolumeArgs(name="node-pools", config_map=ConfigMapVolumeSourceArgs(name=CONFIGMAP))],
            opts=also_after(child, *rbac.resources, pools_config),
        )
        self.register_outputs({"daemonset": NAME, "annotations": [INVENTORY_ANNOTATION, DRIFT_ANNOTATION]})
