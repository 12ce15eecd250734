"""Host paths a Kubernetes distribution moves (`gpu-stack:hostPaths`), as the GPU Operator's ClusterPolicy
`hostPaths` section has them, and the rules that tie them to the rest of the stack.

NVIDIA applies them to every operand DaemonSet in `preProcessDaemonSet` (fact sheet §1.4); gpu-stack does the same
in components/kit/host_paths.py, and the policy pack follows the moved paths by the volumes that carry them.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from components.catalogs import consts
from components.config.base import _Model, shown
from components.config.keys import derived

# An absolute, normalised path of plain name characters: it becomes a hostPath, an env value and, for the kubelet
# root, part of other paths, so no '.'/'..' segment, no doubled or trailing '/', no spaces, quotes or globs.
_SEGMENT = r"[A-Za-z0-9_+@-][A-Za-z0-9._+@-]*"
HOST_PATH = re.compile(rf"^/({_SEGMENT}(/{_SEGMENT})*)?$")
MAX_PATH = 255
SYSTEM_DIRS = consts.SYSTEM_DIRS


def _host_path(value: str) -> str:
    if len(value) > MAX_PATH:
        raise ValueError(f"{shown(value)} is longer than {MAX_PATH} characters")
    if not HOST_PATH.fullmatch(value) or any(part in (".", "..") for part in value.split("/")):
        raise ValueError(
            f"{shown(value)} is not an absolute, normalised host path (/a/b: letters, digits and . _ + @ -; no '..', no "
            "trailing '/')"
        )
    return value


def _outside_system_dirs(value: str) -> str:
    for system in SYSTEM_DIRS:
        if value == system or value.startswith(system + "/"):
            raise ValueError(
                f"{shown(value)} is inside {system}, which the kernel or the OS owns; pick a directory outside "
                f"{', '.join(SYSTEM_DIRS)}"
            )
    return value


def _not_root_or_system(value: str) -> str:
    if value == "/":
        raise ValueError("'/' would hand the whole host to a read-write mount; name the directory itself")
    return _outside_system_dirs(value)


class HostPaths(_Model):
    """Host paths a Kubernetes distribution moves (k0s, MicroK8s, Talos, Bottlerocket, GKE COS): the node's root as the
    operands mount it, a driver installed outside gpu-stack, and the kubelet's root directory (ClusterPolicy
    hostPaths). The container runtime's own files are toolkit.runtimeConfig, runtimeDropInConfig and runtimeSocket."""

    root_fs: str = Field(
        default=consts.DEFAULT_ROOT_FS,
        alias="rootFS",  # NVIDIA's spelling (ClusterPolicy hostPaths.rootFS), not the generated rootFs
        description=(
            "Where the node's root filesystem is, as the operands see it (ClusterPolicy hostPaths.rootFS). Other "
            "than '/', every `host-root` volume mounts it, every container of those pods gets HOST_ROOT=<rootFS> "
            "(an in-container HOST_ROOT=/host stays) and `host-dev-char` mounts <rootFS>/dev/char, as the operator's "
            "preProcessDaemonSet does."
        ),
    )
    driver_install_dir: str = Field(
        default=consts.DRIVER_INSTALL_DIR,
        description=(
            "Where a driver installed outside gpu-stack keeps its root (ClusterPolicy hostPaths.driverInstallDir, "
            "e.g. GKE COS /home/kubernetes/bin/nvidia). Moves every `driver-install-dir` volume, and the "
            "driver-validation containers' DRIVER_INSTALL_DIR / DRIVER_INSTALL_DIR_CTR_PATH and mount with it. A "
            "driver gpu-stack deploys always installs into /run/nvidia/driver, so only pools with driver.mode "
            "host may use another."
        ),
    )
    kubelet_root_dir: str = Field(
        default=consts.DEFAULT_KUBELET_ROOT_DIR,
        description=(
            "The kubelet's --root-dir (ClusterPolicy hostPaths.kubeletRootDir; k0s: /var/lib/k0s/kubelet). NVIDIA "
            "moves only the DCGM exporter's pod-resources mount; gpu-stack also moves the device plugins' "
            "device-plugins directory (the kubelet only sees a plugin that registers through its own "
            "<root>/device-plugins/kubelet.sock) and the DRA kubelet plugin's plugins and plugins_registry "
            "directories (as NVIDIA's DRA manifest does)."
        ),
    )

    _paths = field_validator("root_fs", "driver_install_dir", "kubelet_root_dir")(_host_path)

    @field_validator("driver_install_dir", "kubelet_root_dir")
    @classmethod
    def _not_the_host_root(cls, value: str) -> str:
        return _not_root_or_system(value)

    @field_validator("root_fs")
    @classmethod
    def _root_outside_system_dirs(cls, value: str) -> str:
        return value if value == "/" else _outside_system_dirs(value)

    @property
    def dev_char(self) -> str:
        return consts.DEV_CHAR if self.root_fs == "/" else derived(f"{self.root_fs}{consts.DEV_CHAR}", self.root_fs)

    def kubelet_dir(self, subdir: str) -> str:
        return derived(f"{self.kubelet_root_dir}/{subdir}", self.kubelet_root_dir)
