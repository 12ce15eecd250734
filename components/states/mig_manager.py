"""State `state-mig-manager`: applies the MIG layout named by each node's `nvidia.com/mig.config` label.

Objects as in GO:assets/state-mig-manager with `TransformMIGManager` applied. The mig-parted config always
comes from a ConfigMap the stack renders (the operator's custom-config path, `CONFIG_FILE`), never from the
profiles the MIG manager would discover on the node at start: every layout a pool names was checked against
the pool's GPU model at config time (components/catalogs/mig_catalog.py), and that check is only worth something if
the node applies the same document. Without custom layouts the ConfigMap is `default-mig-parted-config` with
the operator's built-in layouts; with them it is `gpu-stack-mig-parted-config`, built-ins plus custom, a per-GPU
custom layout in mig-parted's own entries (`device-filter`, `devices`, `mig-enabled`, `mig-devices`).
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
import yaml
from pulumi_kubernetes.core.v1 import ContainerArgs

from components.catalogs import consts
from components.catalogs import mig_catalog
from components.config.keys import yaml_text
from components.kit.builders import (
    NODE_NAME_ENV,
    PRIVILEGED,
    SOURCE_DRIVER_READY,
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
    wait_for_validation,
)
from components.kit.rbac import SCC_USE, rbac_set, rule

NAME = "nvidia-mig-manager"
DEFAULT_CONFIGMAP = "default-mig-parted-config"
CUSTOM_CONFIGMAP = "gpu-stack-mig-parted-config"
GPU_CLIENTS_CONFIGMAP = consts.MIG_DEFAULT_GPU_CLIENTS
ENTRYPOINT_CONFIGMAP = "nvidia-mig-manager-entrypoint"
CONFIG_DIR = "/mig-parted-config"

ROLE_RULES = (
    SCC_USE,
    rule([""], ["pods"], ["get", "list", "watch", "delete"]),
    rule([""], ["configmaps"], ["create", "get", "list", "update", "patch"]),
)
CLUSTER_RULES = (
    rule([""], ["nodes"], ["get", "list", "watch", "update", "patch"]),
    rule([""], ["pods"], ["list"]),
)

# Host services that hold the GPUs open; with a host-installed driver the MIG manager stops them around a
# reconfiguration (WITH_SHUTDOWN_HOST_GPU_CLIENTS) and starts them again after.
GPU_CLIENT_SERVICES = (
    "nvsm.service",
    "nvsm-mqtt.service",
    "nvsm-core.service",
    "nvsm-api-gateway.service",
    "nvsm-notifier.service",
    "nv_peer_mem.service",
    "nvidia-dcgm.service",
    "dcgm.service",
    "dcgm-exporter.service",
)

ENTRYPOINT = f"""#!/bin/sh
{SOURCE_DRIVER_READY}
# Host GPU clients only exist, and only need stopping, when the driver is the host's own.
export WITH_SHUTDOWN_HOST_GPU_CLIENTS=$IS_HOST_DRIVER
echo "WITH_SHUTDOWN_HOST_GPU_CLIENTS=$WITH_SHUTDOWN_HOST_GPU_CLIENTS"
echo "starting nvidia-mig-manager"
exec nvidia-mig-manager
"""


def mig_manager_env(*, cdi: bool, toolkit_install_dir: Optional[str], with_reboot: bool) -> list:
    values = [
        NODE_NAME_ENV,
        env_from_field("POD_NAME", "metadata.name"),
        env_from_field("POD_NAMESPACE", "metadata.namespace"),
        env("GPU_CLIENTS_FILE", "/gpu-clients/clients.yaml"),
        env_from_field("DEFAULT_GPU_CLIENTS_NAMESPACE", "metadata.namespace"),
        env("CONFIG_FILE", f"{CONFIG_DIR}/config.yaml"),
        env("WITH_REBOOT", "true" if with_reboot else "false"),
    ]
    if cdi:
        values.append(env("CDI_ENABLED", "true"))
        if toolkit_install_dir:
            values.append(env("NVIDIA_CDI_HOOK_PATH", f"{toolkit_install_dir}/toolkit/nvidia-cdi-hook"))
    return values


def mig_manager_container(ops: Operands, *, toolkit_enabled: bool, with_reboot: bool) -> ContainerArgs:
    """The MIG manager's own container: mig-parted through NVIDIA's entrypoint, with the host's GPU clients."""
    return ContainerArgs(
        name=NAME,
        image=ops.images.mig_manager,
        image_pull_policy="IfNotPresent",
        command=["/bin/sh", "-c"],
        args=["/bin/entrypoint.sh"],
        env=mig_manager_env(
            cdi=ops.cdi, toolkit_install_dir=ops.toolkit_install_dir if toolkit_enabled else None, with_reboot=with_reboot
        ),
        security_context=PRIVILEGED,
        volume_mounts=[
            mount(ENTRYPOINT_CONFIGMAP, "/bin/entrypoint.sh", read_only=True, sub_path="entrypoint.sh"),
            mount("run-nvidia-validations", consts.VALIDATIONS_DIR),
            mount("host-sys", "/sys"),
            mount("host-root", "/host", propagation="HostToContainer"),
            mount("gpu-clients", "/gpu-clients"),
            mount("mig-parted-config", CONFIG_DIR),
            mount("driver-install-dir", "/driver-root", propagation="HostToContainer"),
            mount("cdi-root", consts.CDI_SPEC_DIR),
        ],
    )


class MigManager(pulumi.ComponentResource):
    daemonset: k8s.apps.v1.DaemonSet
    config_map_name: str

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        custom_layouts: Mapping[str, Mapping[str, mig_catalog.LayoutValue]],
        with_reboot: bool,
        toolkit_enabled: bool,
        gpu_clients_config_map: Optional[str] = None,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:MigManager", name, None, opts)
        child = child_opts(self, depends_on)
        rbac = rbac_set(NAME, ops.namespace, openshift=ops.openshift, role_rules=ROLE_RULES, cluster_role_rules=CLUSTER_RULES, opts=child)
        self.config_map_name = CUSTOM_CONFIGMAP if custom_layouts else DEFAULT_CONFIGMAP
        parted = k8s.core.v1.ConfigMap(
            self.config_map_name,
            metadata=meta(self.config_map_name, ops.namespace, {"app": NAME}),
            data={"config.yaml": yaml_text(mig_catalog.mig_parted_config(custom_layouts), sort_keys=False)},
            opts=child,
        )
        config_maps: list[pulumi.Resource] = [parted]
        if gpu_clients_config_map is None:
            config_maps.append(k8s.core.v1.ConfigMap(
                GPU_CLIENTS_CONFIGMAP,
                metadata=meta(GPU_CLIENTS_CONFIGMAP, ops.namespace, {"app": NAME}),
                data={"clients.yaml": yaml.safe_dump({"version": "v1", "systemd-services": list(GPU_CLIENT_SERVICES)}, sort_keys=False)},
                opts=child,
            ))
        config_maps.append(k8s.core.v1.ConfigMap(
            ENTRYPOINT_CONFIGMAP,
            metadata=meta(ENTRYPOINT_CONFIGMAP, ops.namespace, {"app": NAME}),
            data={"entrypoint.sh": ENTRYPOINT},
            opts=child,
        ))
        manager = mig_manager_container(ops, toolkit_enabled=toolkit_enabled, with_reboot=with_reboot)
        self.daemonset = operand_daemonset(
            NAME,
            ops,
            operand="migManager",
            deploy_component="mig-manager",
            service_account=NAME,
            runtime_class=True,
            host_pid=True,
            host_ipc=True,
            init_containers=[wait_for_validation(ops.images.validator, "toolkit-ready")],
            containers=[manager],
            volumes=[
                config_map_volume(ENTRYPOINT_CONFIGMAP, mode=0o700),
                host_path("host-sys", "/sys", "Directory"),
                host_path("run-nvidia-validations", consts.VALIDATIONS_DIR, "DirectoryOrCreate"),
                host_path("driver-install-dir", consts.DRIVER_INSTALL_DIR, "DirectoryOrCreate"),
                host_path("host-root", "/"),
                config_map_volume("gpu-clients", config_map=gpu_clients_config_map or GPU_CLIENTS_CONFIGMAP),
                config_map_volume("mig-parted-config", config_map=self.config_map_name),
                host_path("cdi-root", consts.CDI_SPEC_DIR, "DirectoryOrCreate"),
            ],
            opts=also_after(child, *rbac.resources, *config_maps),
        )
        self.register_outputs({"daemonset": NAME, "configMap": self.config_map_name})
