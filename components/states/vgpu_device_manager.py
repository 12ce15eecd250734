"""State `state-vgpu-device-manager`: creates the vGPU devices a vm-vgpu node's VMs are given.

Objects as in GO:assets/state-vgpu-device-manager with `TransformVGPUDeviceManager` applied: SA/Role/RoleBinding/
ClusterRole/ClusterRoleBinding `nvidia-vgpu-device-manager`, ConfigMap `default-vgpu-devices-config` and DaemonSet
`nvidia-vgpu-device-manager`. The ConfigMap is the operator's document, rendered from components/catalogs/vgpu_catalog.py:
one named config per vGPU type plus `default` (each board's middle type, filtered by PCI id).

On its node the device manager applies the config named by the node label `nvidia.com/vgpu.config`, or
DEFAULT_VGPU_CONFIG when the label is missing, and records the outcome in `nvidia.com/vgpu.config.state`
(`pending`, `success`, `failed`). While it changes devices it sets the node's sandbox device plugin and sandbox
validator deploy labels to `false` and waits for their pods to go, then restores the labels (which is why it
may update Nodes and read Pods). It starts only after the vGPU manager is up: its init waits for
`vgpu-manager-ready` (a containerized vGPU manager) or `host-vgpu-manager-ready` (one installed on the host),
both written by the sandbox validator. The sandbox validator's `vgpu-devices-validation` then waits for the
devices, and the sandbox device plugin for its `vgpu-devices-ready`. The DaemonSet's `app` label is fixed:
k8s-driver-manager waits for pods labelled `app=nvidia-vgpu-device-manager` to go before it unloads a driver.

The device manager reads the config file on every apply and the ConfigMap is mounted without subPath, so a
changed document reaches running pods without a restart; it is applied at the next label change or pod start.
Not rendered: the `openshift.io/scc` annotation (as elsewhere).
"""

from __future__ import annotations

from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import ContainerArgs

from components.catalogs import consts
from components.catalogs import vgpu_catalog
from components.config.keys import yaml_text
from components.kit.builders import (
    NODE_NAME_ENV,
    PRIVILEGED,
    PRIVILEGED_ROOT,
    VALIDATIONS_VOLUME,
    Operands,
    also_after,
    child_opts,
    config_map_volume,
    env,
    env_from_field,
    host_path,
    meta,
    mount,
    operand_daemonset,
)
from components.kit.rbac import SCC_USE, rbac_set, rule

NAME = "nvidia-vgpu-device-manager"
DEPLOY_COMPONENT = "vgpu-device-manager"
CONFIGMAP = "default-vgpu-devices-config"
CONFIG_KEY = "config.yaml"
CONFIG_DIR = "/vgpu-config"
DRIVER_ROOT_MOUNT = "/driver-root"

# Files the sandbox validator's vgpu-manager-validation writes (fact sheet §3.2, Appendix C).
VGPU_MANAGER_READY = "vgpu-manager-ready"
HOST_VGPU_MANAGER_READY = "host-vgpu-manager-ready"

ROLE_RULES = (SCC_USE, rule([""], ["pods"], ["get", "list", "watch"]))
CLUSTER_RULES = (
    rule(["config.openshift.io"], ["clusterversions"], ["get", "list"]),
    # the vgpu.config(.state) labels and pausing the sandbox operands' deploy labels
    rule([""], ["nodes"], ["get", "list", "watch", "update"]),
)

VOLUMES = (
    config_map_volume("vgpu-config", config_map=CONFIGMAP),
    host_path("host-sys", "/sys", "Directory"),
    host_path("host-root", "/"),
    host_path("driver-install-dir", consts.DRIVER_INSTALL_DIR, "DirectoryOrCreate"),
    VALIDATIONS_VOLUME,
)


def wait_for_vgpu_manager(image: str) -> ContainerArgs:
    """The asset's gate, in the validator image (the operator's transform sets it) for nothing but a shell."""
    validations = consts.VALIDATIONS_DIR
    return ContainerArgs(
        name="vgpu-manager-validation",
        image=image,
        image_pull_policy="IfNotPresent",
        command=["sh", "-c"],
        args=[
            f"until [ -f {validations}/{VGPU_MANAGER_READY} ] || [ -f {validations}/{HOST_VGPU_MANAGER_READY} ]; "
            "do echo waiting for the NVIDIA vGPU manager; sleep 5; done"
        ],
        # transformValidatorSecurityContext: uid 0 on every validation container
        security_context=PRIVILEGED_ROOT,
        volume_mounts=[mount(VALIDATIONS_VOLUME.name, validations, propagation="Bidirectional")],
    )


def device_manager(image: str, default_config: str) -> ContainerArgs:
    return ContainerArgs(
        name=NAME,
        image=image,
        image_pull_policy="IfNotPresent",
        env=[
            env_from_field("NAMESPACE", "metadata.namespace"),
            NODE_NAME_ENV,
            env("CONFIG_FILE", f"{CONFIG_DIR}/{CONFIG_KEY}"),
            env("DEFAULT_VGPU_CONFIG", default_config),
        ],
        security_context=PRIVILEGED,
        volume_mounts=[
            mount("vgpu-config", CONFIG_DIR),
            mount("host-sys", "/sys"),
            mount("host-root", "/host", propagation="HostToContainer"),
            mount("driver-install-dir", DRIVER_ROOT_MOUNT, propagation="HostToContainer"),
        ],
    )


def render_config(custom: vgpu_catalog.Custom = None) -> str:
    """The `config.yaml` of `default-vgpu-devices-config`, from the catalog's document and the stack's own configs."""
    return yaml_text(vgpu_catalog.devices_config(custom), sort_keys=False, default_flow_style=False, width=120)


class VgpuDeviceManager(pulumi.ComponentResource):
    daemonset: k8s.apps.v1.DaemonSet
    config_map: k8s.core.v1.ConfigMap

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        default_config: str,
        configs: vgpu_catalog.Custom = None,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:VgpuDeviceManager", name, None, opts)
        if default_config not in vgpu_catalog.config_names(configs):
            raise ValueError(f"DEFAULT_VGPU_CONFIG {default_config!r} is not a config of {CONFIGMAP}")
        child = child_opts(self, depends_on)
        rbac = rbac_set(NAME, ops.namespace, openshift=ops.openshift, role_rules=ROLE_RULES, cluster_role_rules=CLUSTER_RULES, opts=child)
        self.config_map = k8s.core.v1.ConfigMap(
            CONFIGMAP,
            metadata=meta(CONFIGMAP, ops.namespace, {"app": NAME}),
            data={CONFIG_KEY: render_config(configs)},
            opts=child,
        )
        self.daemonset = operand_daemonset(
            NAME,
            ops,
            operand="vgpuDeviceManager",
            deploy_component=DEPLOY_COMPONENT,
            service_account=NAME,
            init_containers=[wait_for_vgpu_manager(ops.images.validator)],
            containers=[device_manager(ops.images.vgpu_device_manager, default_config)],
            volumes=list(VOLUMES),
            opts=also_after(child, *rbac.resources, self.config_map),
        )
        self.register_outputs({"daemonset": NAME, "configMap": CONFIGMAP, "defaultConfig": default_config})
