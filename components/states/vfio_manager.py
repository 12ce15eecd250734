"""State `state-vfio-manager`: hands every NVIDIA GPU of a vm-passthrough node to vfio-pci for KubeVirt.

Objects as in GO:assets/state-vfio-manager with `TransformVFIOManager` applied. Since operator v26.3 the manager
is the k8s-driver-manager image's `vfio-manage` (fact sheet §2.11, §12): its `k8s-driver-manager` init first
makes sure no NVIDIA kernel driver holds the GPUs (pausing the node's GPU operands and unloading the modules if
one is loaded), then the main container binds all GPUs to vfio-pci and stays up so that its preStop gives them
back when the pod goes. The sandbox validator's `vfio-pci-validation` waits for that binding.

The init's env is the asset's and not the stack's upgrade policy: with eviction and auto-drain off the driver
manager fails (and retries) rather than evicting workloads if a loaded driver is still in use. Its RBAC is the
asset's, narrower than the driver's: no drain ever runs in it, so it needs no DaemonSet or ResourceClaim reads.

The DaemonSet is OnDelete and rolled by the node agents within the fleet's one budget (components/states/driver/
rolled.py): the pod's preStop unbinds every GPU from vfio-pci, so a restart under running passthrough VMs
would pull their GPUs. The node is cordoned and its VMs moved or waited for first, as for a driver upgrade.
"""

from __future__ import annotations

from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import ContainerArgs, ExecActionArgs, LifecycleArgs, LifecycleHandlerArgs, ResourceRequirementsArgs

from components.catalogs import consts
from components.kit.builders import (
    NODE_NAME_ENV,
    OPERATOR_NAMESPACE_ENV,
    PRIVILEGED,
    PRIVILEGED_S0,
    Operands,
    also_after,
    child_opts,
    env,
    host_path,
    mount,
    operand_daemonset_parts,
    register_daemonset,
)
from components.states.driver.rolled import UPDATE_STRATEGY, RolledDaemonSet, agent_rolled
from components.kit.rbac import SCC_USE, rbac_set, rule

NAME = "nvidia-vfio-manager"
DEPLOY_COMPONENT = "vfio-manager"
# The asset selects its pods by `name`, not `app`; kept so selectors written for the operator's pods still
# match. `app` is added as the asset labels its DaemonSet.
SELECTOR = {"name": NAME}
HOST_ROOT_ENV = "HOST_ROOT"
HOST_ROOT_MOUNT_PATH = "/host"
LIB_MODULES = "/lib/modules"

BIND = "vfio-manage bind --all"
UNBIND = "vfio-manage unbind --all"

DRIVER_MANAGER_ENV = (
    ("NVIDIA_VISIBLE_DEVICES", "void"),  # runc, never the nvidia runtime: the node has no container stack
    ("ENABLE_GPU_POD_EVICTION", "false"),
    ("ENABLE_AUTO_DRAIN", "false"),
)

# The asset's, but `pods/eviction`: with eviction and auto-drain off the manager never evicts (DM:cmd/driver-manager
# evicts only through DeleteOrEvictPods and DrainNode, both behind those switches), and a token on a GPU node must
# not evict pods of other nodes.
CLUSTER_RULES = (
    rule(["config.openshift.io"], ["clusterversions"], ["get", "list"]),
    # pausing and restoring the node's deploy labels
    rule([""], ["nodes"], ["get", "list", "patch", "watch"]),
    rule([""], ["pods"], ["get", "list", "watch"]),
)

VOLUMES = (
    host_path("host-sys", "/sys", "Directory"),
    host_path("host-lib-modules", LIB_MODULES, "Directory"),
    host_path("run-nvidia", consts.RUN_NVIDIA, "DirectoryOrCreate"),
    host_path("host-root", "/"),
)


def driver_manager(image: str) -> ContainerArgs:
    return ContainerArgs(
        name=consts.DRIVER_MANAGER_CONTAINER,
        image=image,
        image_pull_policy="IfNotPresent",
        command=["driver-manager"],
        args=["uninstall_driver"],
        env=[NODE_NAME_ENV, *(env(k, v) for k, v in DRIVER_MANAGER_ENV), OPERATOR_NAMESPACE_ENV],
        security_context=PRIVILEGED,
        volume_mounts=[
            mount("run-nvidia", consts.RUN_NVIDIA, propagation="Bidirectional"),
            mount("host-root", HOST_ROOT_MOUNT_PATH, read_only=True, propagation="HostToContainer"),
            mount("host-sys", "/sys"),
        ],
    )


def vfio_manager(image: str) -> ContainerArgs:
    return ContainerArgs(
        name=NAME,
        image=image,
        image_pull_policy="IfNotPresent",
        command=["/bin/sh", "-c"],
        # Binding is one-shot; the container lives on only to unbind in its preStop.
        args=[f"{BIND} && while true; do sleep 86400; done"],
        # vfio-manage loads the vfio-pci module from the host's root, not the image's
        env=[env(HOST_ROOT_ENV, HOST_ROOT_MOUNT_PATH)],
        resources=ResourceRequirementsArgs(limits={"memory": "200Mi"}, requests={"cpu": "100m", "memory": "200Mi"}),
        security_context=PRIVILEGED_S0,
        lifecycle=LifecycleArgs(pre_stop=LifecycleHandlerArgs(exec_=ExecActionArgs(command=["/bin/sh", "-c", UNBIND]))),
        volume_mounts=[
            mount("host-sys", "/sys"),
            mount("host-lib-modules", LIB_MODULES, read_only=True),
            mount("host-root", HOST_ROOT_MOUNT_PATH),
        ],
    )


def plan_vfio_manager(ops: Operands) -> RolledDaemonSet:
    """The VFIO manager DaemonSet, planned before `node-labeling` names its template digest: the node agents roll
    it as they roll drivers, since its preStop unbinds every GPU of the node from vfio-pci under the VMs using them."""
    # One image for both: vfio-manage ships in the k8s-driver-manager image.
    image = ops.images.driver_manager
    return agent_rolled(operand_daemonset_parts(
        NAME,
        ops,
        operand="vfioManager",
        deploy_component=DEPLOY_COMPONENT,
        service_account=NAME,
        selector_labels=SELECTOR,
        labels={"app": NAME},
        update_strategy=UPDATE_STRATEGY,
        init_containers=[driver_manager(image)],
        containers=[vfio_manager(image)],
        volumes=list(VOLUMES),
    ))


class VfioManager(pulumi.ComponentResource):
    daemonset: k8s.apps.v1.DaemonSet

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        planned: RolledDaemonSet,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:VfioManager", name, None, opts)
        child = child_opts(self, depends_on)
        rbac = rbac_set(NAME, ops.namespace, openshift=ops.openshift, role_rules=[SCC_USE], cluster_role_rules=CLUSTER_RULES, opts=child)
        self.daemonset = register_daemonset(NAME, planned.parts, also_after(child, *rbac.resources))
        self.register_outputs({"daemonset": NAME})
