"""The validator's DRA counterpart: a node of a DRA pool is validated when the DRA driver hands out a working GPU.

NVIDIA's GPUCluster state `state-dra-validation` (GO:manifests/state-dra-validation/*, GO:internal/state/
dra_validation.go at a22dbf6 / v26.7.0) renders ServiceAccount `nvidia-dra-validator`, a ResourceClaimTemplate
`nvidia-dra-validator-gpu` (one `gpu.nvidia.com` device, ExactCount 1, `adminAccess: true`) and DaemonSet
`nvidia-dra-validator` on `nvidia.com/gpu.deploy.dra-validator=true`, validator image, whose pod claims that
device: it cannot start before the DRA driver publishes the node's GPUs, its `gpu-validation` init container runs
`nvidia-smi -L` on the CDI-injected GPU, and its main container only stays up. adminAccess makes the claim
non-exclusive: it reserves nothing and is satisfiable on a busy node. An adminAccess claim is accepted only in a
namespace labelled `resource.kubernetes.io/admin-access: "true"` (GO asset comment; kubernetes
test/integration/dra/adminaccess.go), and the DRAAdminAccess gate is alpha (off) on 1.32 and 1.33 and beta (on)
from 1.34 (kubernetes pkg/features/kube_features.go): before 1.34 the API server drops the field and the claim
would hold a GPU for good, so the validator is refused there (`DraValidator` names the API version it needs).

The pods carry `app: nvidia-operator-validator`, as NVIDIA's do, while the DaemonSet selects them by
`app.kubernetes.io/name: nvidia-dra-validator` (so it never adopts the operator validator's pods, nor that
DaemonSet these): k8s-driver-manager v0.12.0 waits for pods with that app label to terminate before it drains
the DRA kubelet plugin (DM:cmd/driver-manager/main.go `waitForPodsToTerminate`, `evictKubeletPlugin`; the plugin
must outlive every claim holder), and it pauses `nvidia.com/gpu.deploy.dra-validator` across a driver reload. The
same label makes gpu-stack's validation gate read them as the node's validator.

gpu-stack differences: the check also records its verdict as /run/nvidia/validations/dra-ready (what `nvidia-smi
-L` listed), which the main container's preStop withdraws, the way `plugin-ready` marks a device-plugin node;
the driver DaemonSet's readiness probe can then count it among the node's validated files. Both containers set
NVIDIA_VISIBLE_DEVICES=void, so only the claim's CDI devices can reach them and a runtime injecting every GPU
cannot fake a pass; they run as root (the image's user is 65532) to write the file, and without privilege.
"""

from __future__ import annotations

from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import (
    ContainerArgs,
    ExecActionArgs,
    LifecycleArgs,
    LifecycleHandlerArgs,
    PodResourceClaimArgs,
    ResourceClaimArgs,
    ResourceRequirementsArgs,
    VolumeArgs,
)
from pulumi_kubernetes.resource.v1 import (
    DeviceClaimArgs,
    DeviceRequestArgs,
    ExactDeviceRequestArgs,
    ResourceClaimSpecArgs,
    ResourceClaimTemplateSpecArgs,
)

from components.catalogs import consts
from components.kit.builders import (
    UNPRIVILEGED_ROOT,
    VALIDATIONS_VOLUME,
    Operands,
    also_after,
    child_opts,
    env,
    meta,
    mount,
    operand_daemonset,
)
from components.kit.dra_api import GPU_CLASS, NAME_LABEL, RESOURCE_GROUP
from components.kit.dra_plugin import pool_affinity
from components.kit.rbac import SCC_USE, rbac_set, rule

NAME = "nvidia-dra-validator"
CLAIM_TEMPLATE = "nvidia-dra-validator-gpu"
CLAIM = "validation-gpu"
DEPLOY_COMPONENT = "dra-validator"
READY_FILE = "dra-ready"
ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"
# What the operand namespace must carry for the validator's claim to be accepted.
NAMESPACE_LABELS = {ADMIN_ACCESS_LABEL: "true"}
# The pod label k8s-driver-manager and the validation gate read as "the node's validator".
VALIDATOR_APP = "nvidia-operator-validator"
REQUIRED_API_VERSION = f"{RESOURCE_GROUP}/v1"
ADMIN_ACCESS_DEFAULT_FROM = "1.34"


VALIDATIONS_MOUNT = mount(VALIDATIONS_VOLUME.name, consts.VALIDATIONS_DIR)


def gpu_validation(image: str) -> ContainerArgs:
    ready = f"{consts.VALIDATIONS_DIR}/{READY_FILE}"
    return ContainerArgs(
        name="gpu-validation",
        image=image,
        image_pull_policy="IfNotPresent",
        command=["sh", "-c"],
        # nvidia-smi comes with the claimed GPU's CDI injection; the file appears whole or not at all
        args=[f"nvidia-smi -L > {ready}.tmp && cat {ready}.tmp && mv {ready}.tmp {ready}"],
        env=[env("NVIDIA_VISIBLE_DEVICES", "void")],
        resources=ResourceRequirementsArgs(claims=[ResourceClaimArgs(name=CLAIM)]),
        security_context=UNPRIVILEGED_ROOT,
        volume_mounts=[VALIDATIONS_MOUNT],
    )


def main_container(image: str) -> ContainerArgs:
    return ContainerArgs(
        name=NAME,
        image=image,
        image_pull_policy="IfNotPresent",
        command=["sh", "-c"],
        args=["echo the DRA driver allocated a working GPU; while true; do sleep 86400; done"],
        env=[env("NVIDIA_VISIBLE_DEVICES", "void")],
        security_context=UNPRIVILEGED_ROOT,
        # a stopping validator takes its verdict back, so nothing trusts a node mid-change
        lifecycle=LifecycleArgs(
            # every verdict of the node, as the operator validator's preStop does: on a DRA node this is the only validator
            pre_stop=LifecycleHandlerArgs(exec_=ExecActionArgs(command=["sh", "-c", f"rm -f {consts.VALIDATIONS_DIR}/*-ready"]))
        ),
        volume_mounts=[VALIDATIONS_MOUNT],
    )


class DraValidator(pulumi.ComponentResource):
    daemonset: k8s.apps.v1.DaemonSet
    claim_template: k8s.resource.v1.ResourceClaimTemplate

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        resource_api_version: str,
        pools: Sequence[str],
        node_checks: Sequence[ContainerArgs] = (),
        node_check_volumes: Sequence[VolumeArgs] = (),
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        """`node_checks` (with the host paths they mount) run before the GPU claim check: the operator validator's
        driver, GPUDirect and toolkit checks, which do not run on DRA nodes otherwise and whose files the other
        operands' gates wait for."""
        if resource_api_version != REQUIRED_API_VERSION:
            raise ValueError(
                f"the DRA validator needs {REQUIRED_API_VERSION} (Kubernetes {ADMIN_ACCESS_DEFAULT_FROM} or later, where "
                f"adminAccess claims are on by default), not {resource_api_version}"
            )
        affinity = pool_affinity(pools)
        super().__init__("gpu-stack:index:DraValidator", name, None, opts)
        child = child_opts(self, depends_on)
        selector = {NAME_LABEL: NAME}
        # The node checks' driver validation lists the namespace's driver DaemonSets (GO:cmd/nvidia-validator
        # `isDriverManagedByOperator`) to tell a containerized driver from a host one, as the toolkit's does.
        rbac = rbac_set(NAME, ops.namespace, openshift=ops.openshift,
                        role_rules=[SCC_USE, rule(["apps"], ["daemonsets"], ["list"])], labels=selector, opts=child)
        self.claim_template = k8s.resource.v1.ResourceClaimTemplate(
            CLAIM_TEMPLATE,
            metadata=meta(CLAIM_TEMPLATE, ops.namespace, selector),
            spec=ResourceClaimTemplateSpecArgs(
                spec=ResourceClaimSpecArgs(
                    devices=DeviceClaimArgs(
                        requests=[
                            DeviceRequestArgs(
                                name=CLAIM,
                                # one GPU proves the driver allocates and injects; more would widen what a fault blocks
                                exactly=ExactDeviceRequestArgs(
                                    device_class_name=GPU_CLASS, allocation_mode="ExactCount", count=1, admin_access=True
                                ),
                            )
                        ]
                    )
                )
            ),
            opts=child,
        )
        self.daemonset = operand_daemonset(
            NAME,
            ops,
            operand="validator",
            deploy_component=DEPLOY_COMPONENT,
            service_account=NAME,
            selector_labels=selector,
            labels={"app": VALIDATOR_APP},
            affinity=affinity,
            init_containers=[*node_checks, gpu_validation(ops.images.validator)],
            containers=[main_container(ops.images.validator)],
            volumes=[VALIDATIONS_VOLUME, *(v for v in node_check_volumes if v.name != VALIDATIONS_VOLUME.name)],
            resource_claims=[PodResourceClaimArgs(name=CLAIM, resource_claim_template_name=CLAIM_TEMPLATE)],
            opts=also_after(child, *rbac.resources, self.claim_template),
        )
        self.register_outputs({"daemonset": NAME, "readyFile": READY_FILE, "pools": list(pools)})
