"""State `state-vgpu-manager`: NVIDIA's vGPU host driver (the "vGPU manager") on vm-vgpu nodes.

Objects as in GO:assets/state-vgpu-manager with `TransformVGPUManager` applied: SA/Role/RoleBinding/ClusterRole/
ClusterRoleBinding `nvidia-vgpu-manager` and DaemonSet `nvidia-vgpu-manager-daemonset`. Its `k8s-driver-manager`
init makes sure no other NVIDIA driver holds the GPUs (pausing the node's GPU operands and unloading the modules
if one is loaded, fact sheet §5.3), then `nvidia-driver init` of the vGPU manager image installs and loads the
host driver with `nvidia_vgpu_vfio`, starts the vGPU daemons, enables SR-IOV virtual functions and stays up; on
exit it disables them and unloads the modules again. The sandbox validator's `vgpu-manager-validation` waits
for that and writes `vgpu-manager-ready`, which the vGPU device manager waits for.

NVIDIA publishes no vGPU manager image (the software is licensed), so the stack takes the complete reference of
the one the user built, `-<osTag>` suffix included (the operator appends the OS tag to `vgpuManager.version`).
The init's env is the asset's, not the stack's upgrade policy (eviction and auto-drain off), as for the VFIO
manager; so is the RBAC, the driver's minus node updates and ResourceClaim reads. The pod gets the asset's 120 s
to shut down: disabling the virtual functions and unloading the driver take longer than the default 30 s.

No licence reaches this pod: the operator mounts `driver.licensingConfig` only into the driver container of vGPU
*guests*, and the vGPU manager's entrypoint reads neither licensing file (only /drivers/nvidia.conf for module
parameters). VMs on vm-vgpu nodes are licensed by the guest driver inside each VM.

Not rendered: the OpenShift Driver Toolkit sidecar and the `openshift.io/scc` annotation (as elsewhere); the
asset has no probes.
"""

from __future__ import annotations

from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import (
    ContainerArgs,
)

from components.catalogs import consts
from components.kit.builders import (
    PRIVILEGED_S0,
    Operands,
    also_after,
    child_opts,
    host_path,
    mount,
    operand_daemonset,
)
from components.kit.rbac import SCC_USE, rbac_set, rule
from components.states.vfio_manager import driver_manager

NAME = "nvidia-vgpu-manager"
DAEMONSET = "nvidia-vgpu-manager-daemonset"
CONTAINER = "nvidia-vgpu-manager-ctr"
DEPLOY_COMPONENT = "vgpu-manager"
TERMINATION_GRACE_PERIOD_SECONDS = 120


CLUSTER_RULES = (
    rule(["config.openshift.io"], ["clusterversions"], ["get", "list"]),
    # pausing and restoring the node's deploy labels
    rule([""], ["nodes"], ["get", "list", "patch", "watch"]),
    rule([""], ["pods"], ["get", "list", "watch"]),
    rule([""], ["pods/eviction"], ["create"]),
    rule(["apps"], ["daemonsets"], ["get"]),
)

VOLUMES = (
    host_path("run-nvidia", consts.RUN_NVIDIA, "DirectoryOrCreate"),
    host_path("host-os-release", "/etc/os-release"),
    host_path("cgroup", "/sys/fs/cgroup", "Directory"),
    host_path("vfio", "/dev/vfio", "Directory"),
    host_path("host-root", "/"),
    host_path("host-sys", "/sys", "Directory"),
    host_path("var-log", "/var/log", "Directory"),
    host_path("dev-log", "/dev/log"),
    host_path("firmware-search-path", "/sys/module/firmware_class/parameters/path"),
    host_path("nv-firmware", f"{consts.DRIVER_INSTALL_DIR}/lib/firmware", "DirectoryOrCreate"),
)


def vgpu_manager(image: str) -> ContainerArgs:
    return ContainerArgs(
        name=CONTAINER,
        image=image,
        image_pull_policy="IfNotPresent",
        command=["nvidia-driver"],
        args=["init"],
        security_context=PRIVILEGED_S0,
        volume_mounts=[
            mount("run-nvidia", consts.RUN_NVIDIA, propagation="Bidirectional"),
            mount("host-os-release", "/host-etc/os-release"),
            mount("vfio", "/dev/vfio"),
            mount("cgroup", "/sys/fs/cgroup"),
            mount("var-log", "/var/log"),
            mount("dev-log", "/dev/log"),
            mount("firmware-search-path", "/sys/module/firmware_class/parameters/path"),
            mount("nv-firmware", "/lib/firmware"),
        ],
    )



class VgpuManager(pulumi.ComponentResource):
    daemonset: k8s.apps.v1.DaemonSet

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        image: str,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:VgpuManager", name, None, opts)
        child = child_opts(self, depends_on)
        rbac = rbac_set(NAME, ops.namespace, openshift=ops.openshift, role_rules=[SCC_USE], cluster_role_rules=CLUSTER_RULES, opts=child)
        self.daemonset = operand_daemonset(
            DAEMONSET,
            ops,
            deploy_component=DEPLOY_COMPONENT,
            service_account=NAME,
            template_annotations={"kubectl.kubernetes.io/default-container": CONTAINER},
            host_pid=True,
            host_ipc=True,
            init_containers=[driver_manager(ops.images.driver_manager)],
            containers=[vgpu_manager(image)],
            volumes=list(VOLUMES),
            termination_grace_period_seconds=TERMINATION_GRACE_PERIOD_SECONDS,
            opts=also_after(child, *rbac.resources),
        )
        self.register_outputs({"daemonset": DAEMONSET, "image": image})
