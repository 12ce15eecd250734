"""State `state-sandbox-validation`: the per-node gate of VM pools, what `nvidia-operator-validator` is to
container pools.

Objects as in GO:assets/state-sandbox-validation with `TransformSandboxValidator` applied. The workload checks
(`vfio-pci`, `vgpu-manager`, `vgpu-devices`) read the node's `nvidia.com/gpu.workload.config` label (falling back
to DEFAULT_GPU_WORKLOAD_CONFIG), record it in `workload-type` under /run/nvidia/validations, and only do real
work on a node of their own type: `vfio-pci` waits until every NVIDIA GPU is bound to vfio-pci (the VFIO
manager's job) and writes `vfio-pci-ready`; the vGPU checks write `vgpu-manager-ready` / `vgpu-devices-ready`.
The sandbox device plugin waits on those files (fact sheet §3.2, §3.4). `cc-manager-validation` is there only
with the CC manager, as the operator does.

One deliberate difference: the operator always keeps the two vGPU checks; here they are dropped when no pool
runs vGPU, where they could only skip (`vfio-pci-validation` already records `workload-type` on every node),
and with them the `/run/nvidia/driver` mount only `vgpu-manager-validation` reads, a path VM nodes without a
vGPU manager never have. The DaemonSet's `app` label is fixed: k8s-driver-manager waits for pods labelled
`app=nvidia-sandbox-validator` to go before it unloads a driver (fact sheet §5.3).
"""

from __future__ import annotations

from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import (
    ContainerArgs,
    SecurityContextArgs,
    VolumeMountArgs,
)

from components.catalogs import consts
from components.kit.builders import (
    NODE_NAME_ENV,
    PRIVILEGED_ROOT,
    PRIVILEGED_ROOT_S0,
    VALIDATIONS_VOLUME,
    Operands,
    also_after,
    child_opts,
    env,
    host_path,
    mount,
    operand_daemonset,
    validator_container,
    validator_main,
)
from components.kit.rbac import SCC_USE, rbac_set, rule

NAME = "nvidia-sandbox-validator"
DEPLOY_COMPONENT = "sandbox-validator"
APP_LABELS = {"app": NAME, consts.PART_OF: "gpu-operator"}
DEFAULT_WORKLOAD_ENV = "DEFAULT_GPU_WORKLOAD_CONFIG"

# Files the checks write under /run/nvidia/validations that other states gate on.
WORKLOAD_TYPE_FILE = "workload-type"
VFIO_PCI_READY = "vfio-pci-ready"
VGPU_DEVICES_READY = "vgpu-devices-ready"

# The checks only read their own Node (for the workload label and cc.capable).
CLUSTER_RULES = (rule([""], ["nodes"], ["get"]),)

VALIDATIONS_MOUNT = mount(VALIDATIONS_VOLUME.name, consts.VALIDATIONS_DIR, propagation="Bidirectional")
HOST_ROOT_MOUNT = mount("host-root", "/host", read_only=True, propagation="HostToContainer")
DRIVER_INSTALL_VOLUME = "driver-install-path"


def init_containers(image: str, *, cc_manager: bool, vgpu: bool, default_workload: str) -> list[ContainerArgs]:
    """The checks in the asset's order; every one waits (WITH_WAIT) until its condition holds."""
    workload = env(DEFAULT_WORKLOAD_ENV, default_workload)

    def check(
        component: str,
        mounts: Sequence[VolumeMountArgs],
        security_context: SecurityContextArgs,
        *,
        workload_aware: bool = True,
    ) -> ContainerArgs:
        return validator_container(
            f"{component}-validation",
            image,
            component,
            with_wait=True,
            # the operator gives the default to the checks that decide by workload type; cc-manager decides by
            # the node's nvidia.com/cc.capable label instead
            extra_env=[NODE_NAME_ENV, *([workload] if workload_aware else [])],
            mounts=mounts,
            security_context=security_context,
        )

    checks = []
    if cc_manager:
        checks.append(check("cc-manager", [VALIDATIONS_MOUNT], PRIVILEGED_ROOT_S0, workload_aware=False))
    checks.append(check("vfio-pci", [HOST_ROOT_MOUNT, VALIDATIONS_MOUNT], PRIVILEGED_ROOT_S0))
    if vgpu:
        checks += [
            check(
                "vgpu-manager",
                [
                    HOST_ROOT_MOUNT,
                    mount(DRIVER_INSTALL_VOLUME, consts.DRIVER_INSTALL_DIR, propagation="HostToContainer"),
                    VALIDATIONS_MOUNT,
                ],
                PRIVILEGED_ROOT_S0,
            ),
            check("vgpu-devices", [VALIDATIONS_MOUNT], PRIVILEGED_ROOT),
        ]
    return checks


class SandboxValidator(pulumi.ComponentResource):
    daemonset: k8s.apps.v1.DaemonSet

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        cc_manager: bool,
        vgpu: bool,
        default_workload: str,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:SandboxValidator", name, None, opts)
        child = child_opts(self, depends_on)
        rbac = rbac_set(NAME, ops.namespace, openshift=ops.openshift, role_rules=[SCC_USE], cluster_role_rules=CLUSTER_RULES, opts=child)
        # Clearing every file, workload-type included, holds the device plugin's gate shut until a new
        # validator pod has re-read the node's workload type.
        main = validator_main(NAME, ops.images.validator, withdraw="*", mounts=[VALIDATIONS_MOUNT])
        volumes = [VALIDATIONS_VOLUME, host_path("host-root", "/")]
        if vgpu:
            volumes.insert(1, host_path(DRIVER_INSTALL_VOLUME, consts.DRIVER_INSTALL_DIR))
        self.daemonset = operand_daemonset(
            NAME,
            ops,
            operand="sandboxValidator",
            deploy_component=DEPLOY_COMPONENT,
            service_account=NAME,
            selector_labels=APP_LABELS,
            init_containers=init_containers(ops.images.validator, cc_manager=cc_manager, vgpu=vgpu, default_workload=default_workload),
            containers=[main],
            volumes=volumes,
            opts=also_after(child, *rbac.resources),
        )
        self.register_outputs({"daemonset": NAME})
