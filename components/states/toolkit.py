"""State `state-container-toolkit`: configures containerd or cri-o on each GPU node for the NVIDIA runtime / CDI.

Objects as in GO:assets/state-container-toolkit plus the operator's runtime transforms (`TransformToolkit`,
`transformForRuntime`, `transformRuntimeConfigAndSocketMounts`, fact sheet §8): the runtime's config file,
drop-in directory and socket are mounted at fixed in-container paths and named in env.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import ConfigMapVolumeSourceArgs, ContainerArgs, VolumeArgs, VolumeMountArgs

from components.catalogs import consts
from components.catalogs.openshift import CRIO_HOOKS_DIR
from components.config.keys import derived
from components.kit.builders import (
    OPERATOR_NAMESPACE_ENV,
    PRIVILEGED_ROOT_S0,
    PRIVILEGED_S0,
    SOURCE_DRIVER_READY,
    Operands,
    also_after,
    child_opts,
    env,
    env_from_field,
    host_path,
    meta,
    mount,
    operand_daemonset,
    validator_container,
)
from components.kit.rbac import SCC_USE, rbac_set, rule
from components.states.prerequisites import RUNTIME_CLASS

NAME = "nvidia-container-toolkit"
DAEMONSET = "nvidia-container-toolkit-daemonset"
ENTRYPOINT_CONFIGMAP = "nvidia-container-toolkit-entrypoint"

CONFIG_TARGET_DIR = "/runtime/config-dir/"
DROP_IN_TARGET_DIR = "/runtime/config-dir.d/"
SOCKET_TARGET_DIR = "/runtime/sock-dir/"

# The sleep works around containerd >= 1.6.9 sending SIGTERM to a toolkit that restarts it too early (the
# operator's entrypoint carries the same delay).
ENTRYPOINT = f"""#!/bin/sh
{SOURCE_DRIVER_READY}sleep 5
exec nvidia-toolkit
"""


@dataclass(frozen=True)
class RuntimeFiles:
    """Where the container runtime keeps its files on the host; `runtime` is the operator's RUNTIME value."""

    runtime: str
    config_env: str
    config: str
    drop_in: str
    socket_env: Optional[str]
    socket: Optional[str]


def runtime_files(
    container_runtime: str, *, config: Optional[str], drop_in: Optional[str], socket: Optional[str]
) -> RuntimeFiles:
    if container_runtime == "containerd":
        return RuntimeFiles(
            derived("containerd", container_runtime),
            "CONTAINERD_CONFIG",
            config or "/etc/containerd/config.toml",
            drop_in or "/etc/containerd/conf.d/99-nvidia.toml",
            "CONTAINERD_SOCKET",
            socket or "/run/containerd/containerd.sock",
        )
    # cri-o reads drop-ins from a fixed directory and is reloaded without a socket.
    return RuntimeFiles(
        derived("crio", container_runtime), "CRIO_CONFIG", config or "/etc/crio/config.toml",
        drop_in or "/etc/crio/crio.conf.d/99-nvidia.conf", None, None,
    )


def _directory(path: str) -> str:
    return derived(posixpath.dirname(path), path)


def toolkit_env(files: RuntimeFiles, *, cdi: bool, install_dir: str, runtime_class: str = RUNTIME_CLASS) -> list:
    base = [
        env("ROOT", install_dir),
        env("NVIDIA_CONTAINER_RUNTIME_MODES_CDI_DEFAULT_KIND", "management.nvidia.com/gpu"),
        env("NVIDIA_VISIBLE_DEVICES", "void"),
        env("TOOLKIT_PID_FILE", "/run/nvidia/toolkit/toolkit.pid"),
        env_from_field("NRI_NAMESPACE", "metadata.namespace"),
    ]
    if cdi:
        # Native CDI injects GPUs; `nvidia` stays a RuntimeClass for the operands, never the default runtime.
        base += [
            env("CDI_ENABLED", "true"),
            env("NVIDIA_RUNTIME_SET_AS_DEFAULT", "false"),
            env("NVIDIA_CONTAINER_RUNTIME_MODE", "cdi"),
            env("CRIO_CONFIG_MODE", "config"),
        ]
    elif files.runtime == "crio":
        # Without CDI the operator keeps cri-o on the OCI prestart hook rather than making nvidia the default.
        base.append(env("CRIO_CONFIG_MODE", "hook"))
    base.append(env("RUNTIME", files.runtime))
    if files.runtime == "containerd":
        base.append(env("CONTAINERD_RUNTIME_CLASS", runtime_class))
    config_file = CONFIG_TARGET_DIR + posixpath.basename(files.config)
    base += [env("RUNTIME_CONFIG", config_file), env(files.config_env, config_file)]
    base += [
        env("RUNTIME_DROP_IN_CONFIG", DROP_IN_TARGET_DIR + posixpath.basename(files.drop_in)),
        env("RUNTIME_DROP_IN_CONFIG_HOST_PATH", files.drop_in),
    ]
    if files.socket and files.socket_env:
        socket_file = SOCKET_TARGET_DIR + posixpath.basename(files.socket)
        base += [env("RUNTIME_SOCKET", socket_file), env(files.socket_env, socket_file)]
    return base


def runtime_paths(files: RuntimeFiles) -> tuple[list[VolumeMountArgs], list[VolumeArgs]]:
    """The container runtime's config, drop-in and socket directories: the mounts and the host paths behind them."""
    runtime_mounts = [
        mount(f"{files.runtime}-config", CONFIG_TARGET_DIR),
        mount(f"{files.runtime}-drop-in-config", DROP_IN_TARGET_DIR),
    ]
    runtime_volumes = [
        host_path(f"{files.runtime}-config", _directory(files.config), "DirectoryOrCreate"),
        host_path(f"{files.runtime}-drop-in-config", _directory(files.drop_in), "DirectoryOrCreate"),
    ]
    if files.socket:
        runtime_mounts.append(mount(f"{files.runtime}-socket", SOCKET_TARGET_DIR))
        runtime_volumes.append(host_path(f"{files.runtime}-socket", _directory(files.socket)))
    return runtime_mounts, runtime_volumes


def driver_validation_container(ops: Operands) -> ContainerArgs:
    """The toolkit pod's gate: waits for the driver's validation before the runtime is configured."""
    return validator_container(
        "driver-validation",
        ops.images.validator,
        "driver",
        with_wait=True,
        extra_env=[OPERATOR_NAMESPACE_ENV],
        security_context=PRIVILEGED_ROOT_S0,
        mounts=[
            mount("driver-install-dir", consts.DRIVER_INSTALL_DIR, propagation="HostToContainer"),
            mount("run-nvidia-validations", consts.VALIDATIONS_DIR, propagation="Bidirectional"),
            mount("host-root", "/host", read_only=True, propagation="HostToContainer"),
            mount("host-dev-char", "/host-dev-char"),
        ],
    )


def toolkit_container(ops: Operands, files: RuntimeFiles, runtime_mounts: list[VolumeMountArgs]) -> ContainerArgs:
    """NVIDIA's toolkit container: installs the runtime hooks and configures the node's container runtime."""
    return ContainerArgs(
        name="nvidia-container-toolkit-ctr",
        image=ops.images.toolkit,
        image_pull_policy="IfNotPresent",
        command=["/bin/sh", "-c"],
        args=["/bin/entrypoint.sh"],
        env=toolkit_env(files, cdi=ops.cdi, install_dir=ops.toolkit_install_dir, runtime_class=ops.runtime_class or RUNTIME_CLASS),
        security_context=PRIVILEGED_S0,
        volume_mounts=[
            mount(ENTRYPOINT_CONFIGMAP, "/bin/entrypoint.sh", read_only=True, sub_path="entrypoint.sh"),
            mount("toolkit-root", "/run/nvidia/toolkit"),
            mount("run-nvidia-validations", consts.VALIDATIONS_DIR),
            mount("toolkit-install-dir", ops.toolkit_install_dir),
            mount("crio-hooks", "/usr/share/containers/oci/hooks.d"),
            mount("driver-install-dir", "/driver-root", propagation="HostToContainer"),
            mount("host-root", "/host", read_only=True, propagation="HostToContainer"),
            mount("cdi-root", consts.CDI_SPEC_DIR),
            *runtime_mounts,
        ],
    )


class ContainerToolkit(pulumi.ComponentResource):
    daemonset: k8s.apps.v1.DaemonSet

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        files: RuntimeFiles,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:ContainerToolkit", name, None, opts)
        child = child_opts(self, depends_on)
        rbac = rbac_set(NAME, ops.namespace, openshift=ops.openshift, role_rules=[SCC_USE, rule(["apps"], ["daemonsets"], ["list"])], opts=child)
        entrypoint = k8s.core.v1.ConfigMap(
            ENTRYPOINT_CONFIGMAP,
            metadata=meta(ENTRYPOINT_CONFIGMAP, ops.namespace, {"app": DAEMONSET}),
            data={"entrypoint.sh": ENTRYPOINT},
            opts=child,
        )
        runtime_mounts, runtime_volumes = runtime_paths(files)
        # cri-o outside OpenShift reads hooks from /usr/share (the asset's /run path is OpenShift's).
        hooks_dir = "/usr/share/containers/oci/hooks.d" if files.runtime == "crio" and not ops.openshift else CRIO_HOOKS_DIR
        driver_validation = driver_validation_container(ops)
        toolkit = toolkit_container(ops, files, runtime_mounts)
        self.daemonset = operand_daemonset(
            DAEMONSET,
            ops,
            operand="toolkit",
            deploy_component="container-toolkit",
            service_account=NAME,
            host_pid=True,
            init_containers=[driver_validation],
            containers=[toolkit],
            volumes=[
                VolumeArgs(
                    name=ENTRYPOINT_CONFIGMAP, config_map=ConfigMapVolumeSourceArgs(name=ENTRYPOINT_CONFIGMAP, default_mode=0o700)
                ),
                host_path("toolkit-root", "/run/nvidia/toolkit", "DirectoryOrCreate"),
                host_path("run-nvidia-validations", consts.VALIDATIONS_DIR, "DirectoryOrCreate"),
                host_path("driver-install-dir", consts.DRIVER_INSTALL_DIR, "DirectoryOrCreate"),
                host_path("host-root", "/"),
                host_path("toolkit-install-dir", ops.toolkit_install_dir),
                host_path("crio-hooks", hooks_dir),
                host_path("host-dev-char", "/dev/char"),
                host_path("cdi-root", consts.CDI_SPEC_DIR, "DirectoryOrCreate"),
                *runtime_volumes,
            ],
            opts=also_after(child, *rbac.resources, entrypoint),
        )
        self.register_outputs({"daemonset": DAEMONSET, "runtime": files.runtime})
