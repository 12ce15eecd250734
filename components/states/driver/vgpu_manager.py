"""State `state-vgpu-manager`: NVIDIA's vGPU host driver (the "vGPU manager") on vm-vgpu nodes.

Rendered in the form NVIDIA's NVIDIADriver renders it today (`driverType: vgpu-host-manager`,
GO:manifests/state-driver/0500_daemonset.yaml, golden internal/state/testdata/golden/driver-vgpu-host-manager.yaml),
which replaced the ClusterPolicy asset (assets/state-vgpu-manager). Objects: SA/Role/RoleBinding/ClusterRole/
ClusterRoleBinding `nvidia-vgpu-manager` (the driver's rules: nodes update, ResourceClaim reads) and DaemonSet
`nvidia-vgpu-manager-daemonset`, names kept from the ClusterPolicy form because they are this stack's contract.

Its `k8s-driver-manager` init keeps the stack's upgrade policy in its env (GPU-pod eviction, drain), unlike the
driver's, whose own eviction is off with `rolling`: changing that env would change the template, and the agents
would restart every vGPU manager, stopping every VM that cannot migrate. It never evicts all the same: the agents
drain the node (the coordinator evicting) before they delete a manager pod, and set
`nvidia.com/gpu-driver-upgrade-enabled`, which makes the manager leave eviction to the upgrade; a pod deleted by
hand finds its eviction refused, its account holding no `pods/eviction` with `rolling` (`cluster_rules`), and
retries until someone drains the node. Either way no other NVIDIA driver holds the GPUs when `nvidia-driver init`
of the vGPU manager image
installs and loads the host driver with `nvidia_vgpu_vfio`, starts the vGPU daemons and enables SR-IOV virtual
functions; on exit it disables them and unloads the modules again. The sandbox validator's
`vgpu-manager-validation` waits for that and writes `vgpu-manager-ready`, which the vGPU device manager waits for.

Updates are OnDelete, as NVIDIA's: restarting the vGPU manager takes the vGPUs from every VM on the node, so the
node agents roll it as they roll drivers (components/states/driver/rolled.py), node by node within the fleet's one
budget: cordon, evict the VMs (KubeVirt live-migrates those that can), delete the pod, wait for the new one and the
sandbox validator, uncordon (docs/vm-workloads.md). The pod gets 120 s to shut down: disabling the virtual
functions and unloading the driver take longer than the default 30 s. Like NVIDIA's, the container has no
startup probe or preStop hook (nothing writes .driver-ctr-ready on a vGPU host).

NVIDIA publishes no vGPU manager image (the software is licensed), so the stack takes the complete reference of
the one the user built, `-<osTag>` suffix included. No licence reaches this pod: VMs on vm-vgpu nodes are licensed
by the guest driver inside each VM. On OpenShift the pod gets OPENSHIFT_VERSION and the proxy; with the Driver
Toolkit there is one DaemonSet per RHCOS build of the vm-vgpu pools' OSes (`vgpu_manager_flavours`), each built by
that build's DTK container as NVIDIA's golden driver-vgpu-host-manager-openshift.yaml shows.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import AffinityArgs, ContainerArgs, PodAffinityTermArgs, PodAntiAffinityArgs
from pulumi_kubernetes.meta.v1 import LabelSelectorArgs, LabelSelectorRequirementArgs

from components.catalogs import consts
from components.catalogs.openshift import DTK_DRIVER_VERB, DTK_ENTRYPOINT, NFD_OSTREE_VERSION
from components.kit.builders import (
    NODE_NAME_ENV,
    PRIVILEGED_S0,
    Operands,
    also_after,
    child_opts,
    env,
    env_from_field,
    operand_daemonset_parts,
    register_daemonset,
)
from components.config import StackConfig, Upgrade
from components.config.driver_extensions import DRIVERS_DIR, NamedFiles
from components.states.driver.extensions import config_map_files
from components.kit import naming
from components.states.driver.targets import OpenShiftDriver
from components.states.driver.openshift import driver_env, driver_mounts, driver_volumes, toolkit_container, toolkit_labels
from components.kit.rbac import SCC_USE, rbac_set
from components.states.driver.rolled import UPDATE_STRATEGY, RolledDaemonSet, agent_rolled
from components.states.driver.manager import driver_manager
from components.states.driver.state import COMPONENT_LABEL, PRECOMPILED_LABEL, cluster_rules
from components.states.driver.state import NAME as DRIVER_COMPONENT
from components.states.driver import volumes as v

NAME = "nvidia-vgpu-manager"
DAEMONSET = "nvidia-vgpu-manager-daemonset"
CONTAINER = consts.DRIVER_CONTAINER
COMPONENT = "nvidia-vgpu-host-manager"
DEPLOY_COMPONENT = "vgpu-manager"
TERMINATION_GRACE_PERIOD_SECONDS = 120

def config_digest(image: str, openshift: Optional[OpenShiftDriver] = None, kernel_module_config: Optional[NamedFiles] = None) -> str:
    """DRIVER_CONFIG_DIGEST: lets k8s-driver-manager keep a loaded vGPU manager whose image (and, on OpenShift, DTK
    build, and the kernel module parameters it loads with) did not change."""
    material: dict = {"image": image, "driverType": COMPONENT}
    if openshift is not None:
        material["openshift"] = dataclasses.asdict(openshift)
    if kernel_module_config is not None:
        material["kernelModuleConfig"] = kernel_module_config.model_dump(mode="json", by_alias=True)
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


def vgpu_manager(image: str, digest: str, openshift: Optional[OpenShiftDriver] = None, extra_mounts: Sequence = ()) -> ContainerArgs:
    dtk = openshift is not None and openshift.toolkit
    return ContainerArgs(
        name=CONTAINER,
        image=image,
        image_pull_policy="IfNotPresent",
        # With the Driver Toolkit the container prepares the sources and the DTK container builds them.
        command=[DTK_ENTRYPOINT] if dtk else ["nvidia-driver"],
        args=[DTK_DRIVER_VERB] if dtk else ["init"],
        env=[
            env("NVIDIA_VISIBLE_DEVICES", "void"),
            NODE_NAME_ENV,
            env_from_field("NODE_IP", "status.hostIP"),
            env("DRIVER_CONFIG_DIGEST", digest),
            *driver_env(openshift),
        ],
        security_context=PRIVILEGED_S0,
        volume_mounts=[
            *v.HOST_DRIVER_MOUNTS,
            v.CGROUP.mount("/sys/fs/cgroup"),
            v.VFIO.mount("/dev/vfio"),
            v.MOFED_SOURCES.mount("/run/mellanox/drivers/usr/src", propagation="HostToContainer"),
            v.MELLANOX_DRIVERS.mount("/run/mellanox/drivers", propagation="HostToContainer"),
            v.FIRMWARE_SEARCH_PATH.mount("/sys/module/firmware_class/parameters/path"),
            v.SYS_DEVICES_SYSTEM.mount("/sys/devices/system"),
            v.NV_FIRMWARE.mount("/lib/firmware"),
            *driver_mounts(openshift),
            *extra_mounts,
        ],
    )


# One host driver per node: never next to a container driver or another vGPU manager (NVIDIA's list names
# `nvidia-vgpu-manager`, which no pod carries; the vGPU manager's own component is listed here instead).
ONE_DRIVER_PER_NODE = AffinityArgs(
    pod_anti_affinity=PodAntiAffinityArgs(
        required_during_scheduling_ignored_during_execution=[
            PodAffinityTermArgs(
                label_selector=LabelSelectorArgs(
                    match_expressions=[
                        LabelSelectorRequirementArgs(key=COMPONENT_LABEL, operator="In", values=[DRIVER_COMPONENT, COMPONENT])
                    ]
                ),
                topology_key="kubernetes.io/hostname",
            )
        ]
    )
)


def vgpu_manager_flavours(cfg: StackConfig) -> list[Optional[OpenShiftDriver]]:
    """None off OpenShift; on OpenShift one flavour, or with the Driver Toolkit one per RHCOS build of the OSes the
    vm-vgpu pools run, as the operator renders one vGPU manager DaemonSet per build."""
    openshift = cfg.cluster.openshift
    if cfg.cluster.platform != "openshift" or openshift is None:
        return [None]
    proxy = openshift.proxy
    proxy_env, trusted_ca = (proxy.env, proxy.trusted_ca) if proxy is not None else ((), False)
    dtk = cfg.driver_toolkit
    builds = {
        build: image
        for pool in cfg.pools_of("vm-vgpu")
        for tag in pool.os_tags
        for build, image in (dtk.builds(tag).items() if dtk is not None else ())
    }
    if not builds:
        return [OpenShiftDriver(openshift.version, proxy_env, trusted_ca)]
    return [OpenShiftDriver(openshift.version, proxy_env, trusted_ca, build, image) for build, image in builds.items()]


def daemonset_name(openshift: Optional[OpenShiftDriver]) -> str:
    """One DaemonSet, or on OpenShift with the Driver Toolkit one per RHCOS build (each DTK builds for its kernel):
    named from the build, as the driver's."""
    return naming.bounded(f"{DAEMONSET}-{openshift.rhcos}") if openshift is not None and openshift.toolkit else DAEMONSET


def plan_vgpu_managers(
    ops: Operands,
    *,
    image: str,
    upgrade: Upgrade,
    flavours: Sequence[Optional[OpenShiftDriver]] = (None,),
    kernel_module_config: Optional[NamedFiles] = None,
) -> list[RolledDaemonSet]:
    """The vGPU manager DaemonSet, or one per RHCOS build (`flavours`, one OpenShiftDriver each; none off OpenShift),
    planned before `node-labeling` names their template digests: the node agents roll them as they roll drivers."""
    # vgpu.kernelModuleConfig: its keys into /drivers, as the driver's kernel module config.
    module_volume, module_mounts = config_map_files(kernel_module_config, DRIVERS_DIR) if kernel_module_config else (None, [])
    planned = []
    for openshift in flavours:
        digest = config_digest(image, openshift, kernel_module_config)
        daemonset = daemonset_name(openshift)
        dtk = toolkit_container(openshift, digest)
        daemonset_labels, pod_labels = toolkit_labels(openshift)
        build = {NFD_OSTREE_VERSION: openshift.rhcos} if dtk is not None and openshift else None
        parts = operand_daemonset_parts(
            daemonset,
            ops,
            operand="vgpuManager",
            deploy_component=DEPLOY_COMPONENT,
            service_account=NAME,
            labels={COMPONENT_LABEL: COMPONENT, PRECOMPILED_LABEL: "false", **pod_labels},
            template_annotations={"kubectl.kubernetes.io/default-container": CONTAINER},
            extra_node_selector=build,
            host_pid=True,
            affinity=ONE_DRIVER_PER_NODE,
            update_strategy=UPDATE_STRATEGY,
            init_containers=[driver_manager(ops.images.driver_manager, upgrade, digest, own_eviction=True)],
            containers=[vgpu_manager(image, digest, openshift, module_mounts), *([dtk] if dtk else [])],
            volumes=[*(volume.args for volume in v.VGPU_MANAGER_VOLUMES), *driver_volumes(openshift),
                     *([module_volume] if module_volume else [])],
            termination_grace_period_seconds=TERMINATION_GRACE_PERIOD_SECONDS,
        )
        planned.append(agent_rolled(parts.labelled(daemonset_labels), build))
    return planned


class VgpuManager(pulumi.ComponentResource):
    """`state-vgpu-manager`: RBAC and the planned vGPU manager DaemonSets (`plan_vgpu_managers`)."""

    daemonsets: dict[str, k8s.apps.v1.DaemonSet]

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        image: str,
        upgrade: Upgrade,
        planned: Sequence[RolledDaemonSet],
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:VgpuManager", name, None, opts)
        child = child_opts(self, depends_on)
        # `pods/eviction` only where the manager evicts by itself (`manual`): with `rolling` the agents drain the node
        # before they delete a manager pod, as they do for a driver (the module docstring says why its env stays).
        rbac = rbac_set(NAME, ops.namespace, openshift=ops.openshift, role_rules=[SCC_USE], cluster_role_rules=cluster_rules(upgrade), opts=child)
        self.daemonsets = {
            rolled.name: register_daemonset(rolled.name, rolled.parts, also_after(child, *rbac.resources)) for rolled in planned
        }
        self.register_outputs({"daemonsets": list(self.daemonsets), "image": image})
