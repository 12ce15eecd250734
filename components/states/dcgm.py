"""State `state-dcgm`: a standalone DCGM host engine (nv-hostengine) per GPU node, and its node-local Service.

Objects as in GO:assets/state-dcgm with `TransformDCGM` applied. Off by default, as in the operator's Helm
chart: the DCGM exporter then runs an embedded host engine. On, the exporter connects to this one through the
Service, whose `internalTrafficPolicy: Local` keeps every exporter talking to its own node's engine.
"""

from __future__ import annotations

from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import ContainerArgs, ContainerPortArgs, ProbeArgs, ServicePortArgs, ServiceSpecArgs, TCPSocketActionArgs

from components.kit.builders import (
    PRIVILEGED,
    RUN_NVIDIA_VOLUME,
    Operands,
    also_after,
    child_opts,
    meta,
    operand_daemonset,
    wait_for_validation,
)
from components.kit.rbac import SCC_USE, rbac_set

NAME = "nvidia-dcgm"
CONTAINER = "nvidia-dcgm-ctr"
PORT = 5555
# What the exporter sets as DCGM_REMOTE_HOSTENGINE_INFO to use this engine.
REMOTE_HOSTENGINE = f"{NAME}:{PORT}"


def _tcp_probe() -> ProbeArgs:
    return ProbeArgs(tcp_socket=TCPSocketActionArgs(port=PORT), initial_delay_seconds=15)


class Dcgm(pulumi.ComponentResource):
    daemonset: k8s.apps.v1.DaemonSet
    service: k8s.core.v1.Service

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:Dcgm", name, None, opts)
        child = child_opts(self, depends_on)
        rbac = rbac_set(NAME, ops.namespace, role_rules=[SCC_USE], opts=child)
        engine = ContainerArgs(
            name=CONTAINER,
            image=ops.images.dcgm,
            image_pull_policy="IfNotPresent",
            security_context=PRIVILEGED,
            ports=[ContainerPortArgs(name="dcgm", container_port=PORT)],
            liveness_probe=_tcp_probe(),
            readiness_probe=_tcp_probe(),
        )
        self.daemonset = operand_daemonset(
            NAME,
            ops,
            deploy_component="dcgm",
            service_account=NAME,
            runtime_class=True,
            init_containers=[wait_for_validation(ops.images.validator, "toolkit-ready", volume="run-nvidia")],
            containers=[engine],
            volumes=[RUN_NVIDIA_VOLUME],
            opts=also_after(child, *rbac.resources),
        )
        self.service = k8s.core.v1.Service(
            NAME,
            metadata=meta(NAME, ops.namespace, {"app": NAME}),
            spec=ServiceSpecArgs(
                type="ClusterIP",
                internal_traffic_policy="Local",
                selector={"app": NAME},
                ports=[ServicePortArgs(name="dcgm", port=PORT, protocol="TCP")],
            ),
            opts=child,
        )
        self.register_outputs({"daemonset": NAME, "service": NAME})
