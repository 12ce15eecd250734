"""State `state-device-plugin`: advertises `nvidia.com/gpu` to the kubelet on every container GPU node.

Objects as in GO:assets/state-device-plugin with `TransformDevicePlugin` applied. When any pool shares its GPUs
the stack renders one config ConfigMap whose keys are per-pool plugin configs (k8s-device-plugin
`api/config/v1`), and the config-manager init/sidecar pair selects the key named by the node label
`nvidia.com/device-plugin.config`, exactly as the operator does for `devicePlugin.config.name`.
"""

from __future__ import annotations

from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import ConfigMapVolumeSourceArgs, ContainerArgs, VolumeArgs, VolumeMountArgs

from components.catalogs import consts
from components.kit import sharing
from components.kit.builders import (
    PRIVILEGED,
    SOURCE_DRIVER_READY,
    Operands,
    also_after,
    child_opts,
    env,
    host_path,
    meta,
    mig_env,
    mount,
    operand_daemonset,
    wait_for_validation,
)
from components.kit.config_manager import DEFAULT_PLUGIN_CONFIG_KEY, PLUGIN_CONFIGS_CONFIGMAP, PLUGIN_CONFIG_FILE, config_manager, plugin_config_mounts, plugin_config_volumes
from components.kit.rbac import SCC_USE, rbac_set, rule
from components.config import NodePool

NAME = "nvidia-device-plugin"
DAEMONSET = "nvidia-device-plugin-daemonset"
CONTAINER = "nvidia-device-plugin"
ENTRYPOINT_CONFIGMAP = "nvidia-device-plugin-entrypoint"
MPS_ROOT = consts.DEFAULT_MPS_ROOT
CLUSTER_RULES = (rule([""], ["nodes"], ["get", "list", "watch"]),)

# Waits for driver-ready, sources it, and turns on GDS/GDRCopy device injection when their modules are loaded
# (the same contract as NVIDIA's entrypoint, which also never overrides a value set explicitly in env).
ENTRYPOINT = f"""#!/bin/sh
{SOURCE_DRIVER_READY}
if lsmod | grep -q "^gdrdrv "; then
  GDRCOPY_ENABLED="${{GDRCOPY_ENABLED:-true}}"
fi
if lsmod | grep -q "^nvidia_fs "; then
  GDS_ENABLED="${{GDS_ENABLED:-true}}"
  MOFED_ENABLED="${{MOFED_ENABLED:-true}}"
fi
echo "starting nvidia-device-plugin"
exec nvidia-device-plugin
"""


def mps_volumes(mps_root: str) -> list[VolumeArgs]:
    """The MPS root and its shm on the host, as the plugin and the MPS daemon mount them (a moved root moves both,
    as the operator's TransformDevicePlugin and TransformMPSControlDaemon do)."""
    return [host_path("mps-root", mps_root, "DirectoryOrCreate"), host_path("mps-shm", f"{mps_root}/shm")]


def gpudirect_env(*, gds: bool, gdrcopy: bool) -> list:
    """Device injection for GPUDirect: /dev/nvidia-fs* and the InfiniBand devices with GDS, /dev/gdrdrv with
    GDRCopy, as TransformDevicePlugin sets it when the stack enables them."""
    values = [env("GDS_ENABLED", "true"), env("MOFED_ENABLED", "true")] if gds else []
    return values + ([env("GDRCOPY_ENABLED", "true")] if gdrcopy else [])


def plugin_env(*, mig_strategy: str, cdi: bool, toolkit_install_dir: Optional[str], with_config: bool, mps_root: str = MPS_ROOT) -> list:
    device_list_strategy = "cdi-annotations,cdi-cri" if cdi else "envvar"
    values = [
        env("PASS_DEVICE_SPECS", "true"),
        env("FAIL_ON_INIT_ERROR", "true"),
        env("DEVICE_LIST_STRATEGY", device_list_strategy),
        env("DEVICE_ID_STRATEGY", "uuid"),
        env("NVIDIA_VISIBLE_DEVICES", "all"),
        env("NVIDIA_DRIVER_CAPABILITIES", "all"),
        env("MPS_ROOT", mps_root),
    ]
    if with_config:
        values.append(env("CONFIG_FILE", PLUGIN_CONFIG_FILE))
    values += mig_env(None if with_config else mig_strategy)
    if cdi:
        values += [env("CDI_ENABLED", "true"), env("CDI_ANNOTATION_PREFIX", "cdi.k8s.io/")]
        if toolkit_install_dir:
            values.append(env("NVIDIA_CDI_HOOK_PATH", f"{toolkit_install_dir}/toolkit/nvidia-cdi-hook"))
    return values


def plugin_paths(mps_root: str) -> tuple[list[VolumeMountArgs], list[VolumeArgs]]:
    """The plugin container's mounts and the pod's volumes behind them (the sharing configs come on top)."""
    plugin_mounts = [
        mount(ENTRYPOINT_CONFIGMAP, "/bin/entrypoint.sh", read_only=True, sub_path="entrypoint.sh"),
        mount("device-plugin", "/var/lib/kubelet/device-plugins"),
        mount("run-nvidia-validations", consts.VALIDATIONS_DIR),
        mount("driver-install-dir", "/driver-root", propagation="HostToContainer"),
        mount("host-root", "/host", read_only=True, propagation="HostToContainer"),
        mount("cdi-root", consts.CDI_SPEC_DIR),
        mount("mps-shm", "/dev/shm"),  # lets the plugin health-check an MPS daemon
        mount("mps-root", "/mps"),
    ]
    volumes = [
        VolumeArgs(name=ENTRYPOINT_CONFIGMAP, config_map=ConfigMapVolumeSourceArgs(name=ENTRYPOINT_CONFIGMAP, default_mode=0o700)),
        host_path("device-plugin", "/var/lib/kubelet/device-plugins"),
        host_path("run-nvidia-validations", consts.VALIDATIONS_DIR, "DirectoryOrCreate"),
        host_path("driver-install-dir", consts.DRIVER_INSTALL_DIR, "DirectoryOrCreate"),
        host_path("host-root", "/"),
        host_path("cdi-root", consts.CDI_SPEC_DIR, "DirectoryOrCreate"),
        *mps_volumes(mps_root),
    ]
    return plugin_mounts, volumes


def plugin_container(ops: Operands, *, mig_strategy: str, toolkit_enabled: bool, with_config: bool, mps_root: str,
                     gds: bool, gdrcopy: bool, mounts: list[VolumeMountArgs]) -> ContainerArgs:
    """NVIDIA's device plugin container, started through the entrypoint that waits for the toolkit."""
    return ContainerArgs(
        name=CONTAINER,
        image=ops.images.device_plugin,
        image_pull_policy="IfNotPresent",
        command=["/bin/sh", "-c"],
        args=["/bin/entrypoint.sh"],
        security_context=PRIVILEGED,
        env=[
            *plugin_env(
                mig_strategy=mig_strategy,
                cdi=ops.cdi,
                toolkit_install_dir=ops.toolkit_install_dir if toolkit_enabled else None,
                with_config=with_config,
                mps_root=mps_root,
            ),
            *gpudirect_env(gds=gds, gdrcopy=gdrcopy),
        ],
        volume_mounts=mounts,
    )


class DevicePlugin(pulumi.ComponentResource):
    daemonset: k8s.apps.v1.DaemonSet
    config_map: Optional[k8s.core.v1.ConfigMap]

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        mig_strategy: str,
        shared_pools: Sequence[NodePool],
        toolkit_enabled: bool,
        gds: bool = False,
        gdrcopy: bool = False,
        mps_root: str = MPS_ROOT,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:DevicePlugin", name, None, opts)
        child = child_opts(self, depends_on)
        rbac = rbac_set(NAME, ops.namespace, openshift=ops.openshift, role_rules=[SCC_USE], cluster_role_rules=CLUSTER_RULES, opts=child)
        entrypoint = k8s.core.v1.ConfigMap(
            ENTRYPOINT_CONFIGMAP,
            metadata=meta(ENTRYPOINT_CONFIGMAP, ops.namespace, {"app": DAEMONSET}),
            data={"entrypoint.sh": ENTRYPOINT},
            opts=child,
        )
        with_config = bool(shared_pools)
        self.config_map = (
            k8s.core.v1.ConfigMap(
                PLUGIN_CONFIGS_CONFIGMAP,
                metadata=meta(PLUGIN_CONFIGS_CONFIGMAP, ops.namespace, {"app": DAEMONSET}),
                data=sharing.plugin_configs(mig_strategy, shared_pools),
                opts=child,
            )
            if with_config
            else None
        )
        plugin_mounts, volumes = plugin_paths(mps_root)
        init = [wait_for_validation(ops.images.validator, "toolkit-ready")]
        sidecars: list[ContainerArgs] = []
        if with_config:
            plugin_mounts += plugin_config_mounts()
            volumes += plugin_config_volumes()
            init.append(config_manager(ops.images.device_plugin, sidecar=False, process_to_signal=CONTAINER))
            sidecars.append(config_manager(ops.images.device_plugin, sidecar=True, process_to_signal=CONTAINER))
        plugin = plugin_container(ops, mig_strategy=mig_strategy, toolkit_enabled=toolkit_enabled, with_config=with_config,
                                  mps_root=mps_root, gds=gds, gdrcopy=gdrcopy, mounts=plugin_mounts)
        after = [*rbac.resources, entrypoint, *([self.config_map] if self.config_map else [])]
        self.daemonset = operand_daemonset(
            DAEMONSET,
            ops,
            operand="devicePlugin",
            deploy_component="device-plugin",
            service_account=NAME,
            runtime_class=True,
            # the config-manager sidecar signals the plugin process, so they share a PID namespace
            share_process_namespace=True if with_config else None,
            init_containers=init,
            containers=[plugin, *sidecars],
            volumes=volumes,
            opts=also_after(child, *after),
        )
        config_keys = sorted([DEFAULT_PLUGIN_CONFIG_KEY, *(p.name for p in shared_pools)]) if with_config else []
        self.register_outputs({"daemonset": DAEMONSET, "configs": config_keys})
