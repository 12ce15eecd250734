"""State `state-node-status-exporter`: per-node validation status as Prometheus metrics on port 8000.

Objects as in GO:assets/state-node-status-exporter with `TransformNodeStatusExporter` applied: the validator
image in `COMPONENT=metrics` mode reads the `*-ready` files under /run/nvidia/validations and exports
`gpu_operator_node_*` gauges, the per-node half of what the stack's health rules aggregate. Off by default,
as in the operator. The asset's `imagePullPolicy: Always` is overwritten by the operator's transform with the
component's policy (default IfNotPresent); that is what is rendered here.
"""

from __future__ import annotations

from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import ContainerArgs, ContainerPortArgs

from components.kit.builders import (
    NODE_NAME_ENV,
    OPERATOR_NAMESPACE_ENV,
    PRIVILEGED,
    RUN_NVIDIA_VOLUME,
    Operands,
    also_after,
    child_opts,
    env,
    host_path,
    metrics_endpoint,
    mount,
    operand_daemonset,
)
from components.kit.rbac import rbac_set, rule
from components.config import ServiceMonitorSettings

NAME = "nvidia-node-status-exporter"
PORT = 8000
PORT_NAME = "node-status"

ROLE_RULES = (
    # NVIDIA's role grants `use` on every SCC here, not only `privileged`.
    rule(["security.openshift.io"], ["securitycontextconstraints"], ["use"]),
    rule([""], ["pods"], ["get", "list"]),
    rule(["apps"], ["daemonsets"], ["get", "list", "watch"]),
)
CLUSTER_RULES = (rule([""], ["nodes"], ["get", "list", "watch"]),)


class NodeStatusExporter(pulumi.ComponentResource):
    daemonset: k8s.apps.v1.DaemonSet
    service: k8s.core.v1.Service

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        service_monitor_settings: Optional[ServiceMonitorSettings],
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:NodeStatusExporter", name, None, opts)
        child = child_opts(self, depends_on)
        rbac = rbac_set(NAME, ops.namespace, openshift=ops.openshift, role_rules=ROLE_RULES, cluster_role_rules=CLUSTER_RULES, opts=child)
        exporter = ContainerArgs(
            name=NAME,
            image=ops.images.validator,
            image_pull_policy="IfNotPresent",
            command=["nvidia-validator"],
            env=[
                env("NVIDIA_VISIBLE_DEVICES", "void"),
                env("COMPONENT", "metrics"),
                env("METRICS_PORT", str(PORT)),
                NODE_NAME_ENV,
                OPERATOR_NAMESPACE_ENV,
            ],
            ports=[ContainerPortArgs(name=PORT_NAME, container_port=PORT)],
            security_context=PRIVILEGED,
            volume_mounts=[
                mount("run-nvidia", "/run/nvidia", propagation="HostToContainer"),
                mount("host-root", "/host", read_only=True, propagation="HostToContainer"),
            ],
        )
        self.daemonset = operand_daemonset(
            NAME,
            ops,
            operand="nodeStatusExporter",
            deploy_component="node-status-exporter",
            service_account=NAME,
            containers=[exporter],
            volumes=[RUN_NVIDIA_VOLUME, host_path("host-root", "/")],
            opts=also_after(child, *rbac.resources),
        )
        self.service = metrics_endpoint(
            NAME,
            ops.namespace,
            port_name=PORT_NAME,
            port=PORT,
            monitor=service_monitor_settings,
            opts=child,
        )
        self.register_outputs({"daemonset": NAME, "service": NAME})
