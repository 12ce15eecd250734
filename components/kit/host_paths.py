"""The operator's host-path transforms, applied to every operand DaemonSet as `preProcessDaemonSet` applies them
(GO:controllers/object_controls.go `transformForHostRoot`, `transformForDriverInstallDir`, and the DCGM exporter's
kubeletRootDir rewrite; fact sheet §1.4 items 2-3).

States build their pods with NVIDIA's default paths and the asset's volume names (`host-root`, `host-dev-char`,
`driver-install-dir`, the kubelet directories); this module moves them by name, so a state never spells a moved
path itself. Nothing is edited in place: volumes and containers are module-level constants shared between
DaemonSets and renders, so every change is a copy.
"""

from __future__ import annotations

import copy
from typing import Optional, Sequence

from pulumi_kubernetes.core.v1 import ContainerArgs, EnvVarArgs, HostPathVolumeSourceArgs, VolumeArgs, VolumeMountArgs

from components.catalogs import consts
from components.config.hostpaths import HostPaths


def _host_path_of(volume: VolumeArgs) -> Optional[str]:
    source = volume.host_path
    return source.path if isinstance(source, HostPathVolumeSourceArgs) else None


def _moved(volume: VolumeArgs, path: str) -> VolumeArgs:
    source = volume.host_path
    return VolumeArgs(name=volume.name, host_path=HostPathVolumeSourceArgs(path=path, type=source.type))


def _set_env(container: ContainerArgs, name: str, value: str, *, keep: Sequence[str] = ()) -> ContainerArgs:
    """A copy of `container` with `name=value` (replacing a literal value, unless that value is in `keep`)."""
    entries = list(container.env or [])
    for i, entry in enumerate(entries):
        if isinstance(entry, EnvVarArgs) and entry.name == name:
            if entry.value in keep:
                return container
            entries[i] = EnvVarArgs(name=name, value=value)
            break
    else:
        entries.append(EnvVarArgs(name=name, value=value))
    moved = copy.copy(container)
    moved.env = entries
    return moved


def _remount(container: ContainerArgs, volume: str, path: str) -> ContainerArgs:
    mounts = list(container.volume_mounts or [])
    if not any(isinstance(m, VolumeMountArgs) and m.name == volume for m in mounts):
        return container
    moved = copy.copy(container)
    moved.volume_mounts = [
        VolumeMountArgs(
            name=m.name,
            mount_path=path,
            read_only=m.read_only,
            mount_propagation=m.mount_propagation,
            sub_path=m.sub_path,
        )
        if isinstance(m, VolumeMountArgs) and m.name == volume
        else m
        for m in mounts
    ]
    return moved


def apply_host_paths(
    paths: HostPaths,
    volumes: Sequence[VolumeArgs],
    init_containers: Sequence[ContainerArgs],
    containers: Sequence[ContainerArgs],
) -> tuple[list[VolumeArgs], list[ContainerArgs], list[ContainerArgs]]:
    """`(volumes, init_containers, containers)` with the stack's host paths in place of NVIDIA's defaults."""
    volumes, inits, mains = list(volumes), list(init_containers), list(containers)
    by_name = {v.name: i for i, v in enumerate(volumes) if _host_path_of(v) is not None}

    def move(name: str, path: str) -> bool:
        if name not in by_name:
            return False
        volumes[by_name[name]] = _moved(volumes[by_name[name]], path)
        return True

    if paths.root_fs != consts.DEFAULT_ROOT_FS:
        if move(consts.HOST_ROOT_VOLUME, paths.root_fs):
            # Every container learns where the host's root is; one whose HOST_ROOT names the in-container mount
            # point (vfio-manage, the DRA kubelet plugin) keeps it: the operator's transform would point it at a
            # host path that does not exist inside the container.
            keep = (consts.HOST_ROOT_MOUNT,)
            inits = [_set_env(c, consts.HOST_ROOT_ENV, paths.root_fs, keep=keep) for c in inits]
            mains = [_set_env(c, consts.HOST_ROOT_ENV, paths.root_fs, keep=keep) for c in mains]
        move(consts.HOST_DEV_CHAR_VOLUME, paths.dev_char)

    if paths.driver_install_dir != consts.DRIVER_INSTALL_DIR and move(consts.DRIVER_INSTALL_DIR_VOLUME, paths.driver_install_dir):
        # Only the driver validation is told: the other operands mount the directory at /driver-root and learn
        # the host path from the driver-ready file the validation writes.
        directory = paths.driver_install_dir
        for i, c in enumerate(inits):
            if c.name == consts.DRIVER_VALIDATION_CONTAINER:
                c = _set_env(c, consts.DRIVER_INSTALL_DIR_ENV, directory)
                c = _set_env(c, consts.DRIVER_INSTALL_DIR_CTR_PATH_ENV, directory)
                inits[i] = _remount(c, consts.DRIVER_INSTALL_DIR_VOLUME, directory)

    if paths.kubelet_root_dir != consts.DEFAULT_KUBELET_ROOT_DIR:
        for name, subdir in consts.KUBELET_VOLUMES.items():
            default = f"{consts.DEFAULT_KUBELET_ROOT_DIR}/{subdir}"
            if name not in by_name or _host_path_of(volumes[by_name[name]]) != default:
                continue
            moved = paths.kubelet_dir(subdir)
            move(name, moved)
            env_name = consts.KUBELET_PATH_ENV.get(name)
            if env_name is None:
                continue
            # The DRA kubelet plugin registers absolute socket paths: the container sees them where the kubelet does.
            mains = [_remount(c, name, moved) for c in mains]
            mains = [_set_env(c, env_name, moved) if any(m.name == name for m in c.volume_mounts or []) else c for c in mains]
    return volumes, inits, mains
