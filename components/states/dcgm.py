"""State `state-dcgm`: a standalone DCGM host engine (nv-hostengine) per GPU node, and its node-local Service.

Objects as in GO:assets/state-dcgm with `TransformDCGM` applied. Off by default, as in the operator's Helm
chart: the DCGM exporter then runs an embedded host engine. On, the exporter connects to this one through the
Service, whose `internalTrafficPolicy: Local` keeps every exporter talking to its own node's engine.

DRA flavour (GO:manifests/state-dcgm, the GPUCluster state): on DRA nodes DaemonSet `nvidia-dcgm-dra` (deploy
label `dcgm-dra`, ServiceAccount with a Role reading resourceclaims) reaches the GPUs through an adminAccess claim
on all of them (ResourceClaimTemplate `nvidia-dcgm-admin`) instead of the NVIDIA runtime class, behind its own
node-local Service `nvidia-dcgm-dra`, which the DRA exporter uses. gpu-stack adds the DRA pools' affinity.
"""

from __future__ import annotations

from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import (
    ContainerArgs,
    ContainerPortArgs,
    PodResourceClaimArgs,
    ProbeArgs,
    ResourceClaimArgs,
    ResourceRequirementsArgs,
    ServicePortArgs,
    ServiceSpecArgs,
    TCPSocketActionArgs,
)

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
from components.kit.dra_api import RESOURCE_GROUP, admin_claim_template
from components.kit.dra_plugin import pool_affinity
from components.kit.rbac import SCC_USE, rbac_set, rule

NAME = "nvidia-dcgm"
CONTAINER = "nvidia-dcgm-ctr"
PORT = 5555
# What the exporter sets as DCGM_REMOTE_HOSTENGINE_INFO to use this engine.
REMOTE_HOSTENGINE = f"{NAME}:{PORT}"
DRA_NAME = f"{NAME}-dra"
DRA_REMOTE_HOSTENGINE = f"{DRA_NAME}:{PORT}"
DRA_CLAIM_TEMPLATE = "nvidia-dcgm-admin"
DRA_CLAIM = "admin-gpus"


def _tcp_probe() -> ProbeArgs:
    return ProbeArgs(tcp_socket=TCPSocketActionArgs(port=PORT), initial_delay_seconds=15)


def _engine(image: str, *, dra: bool) -> ContainerArgs:
    return ContainerArgs(
        name=CONTAINER,
        image=image,
        image_pull_policy="IfNotPresent",
        security_context=PRIVILEGED,
        ports=[ContainerPortArgs(name="dcgm", container_port=PORT)],
        liveness_probe=_tcp_probe(),
        readiness_probe=_tcp_probe(),
        # the DRA flavour sees its node's GPUs through its adminAccess claim
        resources=ResourceRequirementsArgs(claims=[ResourceClaimArgs(name=DRA_CLAIM)]) if dra else None,
    )


def _node_local_service(name: str, namespace: str, opts: pulumi.ResourceOptions) -> k8s.core.v1.Service:
    return k8s.core.v1.Service(
        name,
        metadata=meta(name, namespace, {"app": name}),
        spec=ServiceSpecArgs(
            type="ClusterIP",
            internal_traffic_policy="Local",
            selector={"app": name},
            ports=[ServicePortArgs(name="dcgm", port=PORT, protocol="TCP")],
        ),
        opts=opts,
    )


class Dcgm(pulumi.ComponentResource):
    daemonset: Optional[k8s.apps.v1.DaemonSet]
    service: Optional[k8s.core.v1.Service]
    dra_daemonset: Optional[k8s.apps.v1.DaemonSet]
    dra_service: Optional[k8s.core.v1.Service]

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        device_plugin_nodes: bool = True,
        dra_pools: Sequence[str] = (),
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        """`device_plugin_nodes` renders the engine of the device-plugin nodes; `dra_pools` the DRA flavour on them."""
        super().__init__("gpu-stack:index:Dcgm", name, None, opts)
        child = child_opts(self, depends_on)
        self.daemonset = self.service = self.dra_daemonset = self.dra_service = None
        if device_plugin_nodes:
            rbac = rbac_set(NAME, ops.namespace, openshift=ops.openshift, role_rules=[SCC_USE], opts=child)
            self.daemonset = operand_daemonset(
                NAME,
                ops,
                operand="dcgm",
                deploy_component="dcgm",
                service_account=NAME,
                runtime_class=True,
                # The host engine never calls the API server (its account holds only an SCC's `use`): no token to
                # steal on the node.
                automount_token=False,
                init_containers=[wait_for_validation(ops.images.validator, "toolkit-ready", volume="run-nvidia")],
                containers=[_engine(ops.images.dcgm, dra=False)],
                volumes=[RUN_NVIDIA_VOLUME],
                opts=also_after(child, *rbac.resources),
            )
            self.service = _node_local_service(NAME, ops.namespace, child)
        if dra_pools:
            labels = {"app": DRA_NAME}
            dra_rbac = rbac_set(
                DRA_NAME,
                ops.namespace,
                openshift=ops.openshift,
                role_rules=[SCC_USE, rule([RESOURCE_GROUP], ["resourceclaims"], ["get", "list", "watch"])],
                labels=labels,
                opts=child,
            )
            claim_template = admin_claim_template(DRA_CLAIM_TEMPLATE, ops.namespace, DRA_CLAIM, labels=labels, opts=child)
            self.dra_daemonset = operand_daemonset(
                DRA_NAME,
                ops,
                operand="dcgm",
                deploy_component="dcgm-dra",
                service_account=DRA_NAME,
                affinity=pool_affinity(dra_pools),
                containers=[_engine(ops.images.dcgm, dra=True)],
                volumes=[],
                resource_claims=[PodResourceClaimArgs(name=DRA_CLAIM, resource_claim_template_name=DRA_CLAIM_TEMPLATE)],
                opts=also_after(child, *dra_rbac.resources, claim_template),
            )
            self.dra_service = _node_local_service(DRA_NAME, ops.namespace, child)
        self.register_outputs(
            {"daemonsets": [n for n, ds in ((NAME, self.daemonset), (DRA_NAME, self.dra_daemonset)) if ds is not None]}
        )
