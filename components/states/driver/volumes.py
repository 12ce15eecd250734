"""The driver pod's host volumes, each making its own mounts: a container mounts `RUN_NVIDIA.mount(...)`, never a
volume name spelt again, so a mount cannot name a volume the pod lacks. Shared by every container of the driver
pod (the driver, k8s-driver-manager, the GPUDirect sidecars, the Driver Toolkit container) and by the vGPU manager,
which NVIDIA builds from the same template (GO:manifests/state-driver/0500_daemonset.yaml)."""

from __future__ import annotations

from components.catalogs import consts
from components.kit.builders import host_volume

RUN_NVIDIA = host_volume("run-nvidia", consts.RUN_NVIDIA, "DirectoryOrCreate")
VAR_LOG = host_volume("var-log", "/var/log")
DEV_LOG = host_volume("dev-log", "/dev/log")
HOST_OS_RELEASE = host_volume("host-os-release", "/etc/os-release")
FABRICMANAGER = host_volume("run-nvidia-fabricmanager", "/run/nvidia-fabricmanager", "DirectoryOrCreate")
TOPOLOGYD = host_volume("run-nvidia-topologyd", "/run/nvidia-topologyd", "DirectoryOrCreate")
MOFED_SOURCES = host_volume("mlnx-ofed-usr-src", "/run/mellanox/drivers/usr/src", "DirectoryOrCreate")
# rdma.useHostMofed: peermem builds against the host's MOFED sources, which a host install keeps in /usr/src
HOST_MOFED_SOURCES = host_volume(MOFED_SOURCES.name, "/usr/src", "DirectoryOrCreate")
MELLANOX_DRIVERS = host_volume("run-mellanox-drivers", "/run/mellanox/drivers", "DirectoryOrCreate")
VALIDATIONS = host_volume("run-nvidia-validations", consts.VALIDATIONS_DIR, "DirectoryOrCreate")
HOST_ROOT = host_volume("host-root", "/")
HOST_SYS = host_volume("host-sys", "/sys", "Directory")
FIRMWARE_SEARCH_PATH = host_volume("firmware-search-path", "/sys/module/firmware_class/parameters/path")
SYS_DEVICES_SYSTEM = host_volume("host-sys-devices-system", "/sys/devices/system", "Directory")
NV_FIRMWARE = host_volume("nv-firmware", f"{consts.DRIVER_INSTALL_DIR}/lib/firmware", "DirectoryOrCreate")
# the vGPU manager's own (GO:manifests/state-driver, driverType vgpu-host-manager)
CGROUP = host_volume("cgroup", "/sys/fs/cgroup")
VFIO = host_volume("vfio", "/dev/vfio")

# What the container of a host driver (the driver's, the vGPU manager's) mounts first, in the asset's order.
HOST_DRIVER_MOUNTS = (
    RUN_NVIDIA.mount(consts.RUN_NVIDIA, propagation="Bidirectional"),
    FABRICMANAGER.mount("/run/nvidia-fabricmanager"),
    TOPOLOGYD.mount("/run/nvidia-topologyd"),
    VAR_LOG.mount("/var/log"),
    DEV_LOG.mount("/dev/log"),
    HOST_OS_RELEASE.mount("/host-etc/os-release", read_only=True),
)

# The driver DaemonSet's, in the asset's order.
DRIVER_VOLUMES = (
    RUN_NVIDIA, VAR_LOG, DEV_LOG, HOST_OS_RELEASE, FABRICMANAGER, TOPOLOGYD, MOFED_SOURCES, MELLANOX_DRIVERS,
    VALIDATIONS, HOST_ROOT, HOST_SYS, FIRMWARE_SEARCH_PATH, SYS_DEVICES_SYSTEM, NV_FIRMWARE,
)
# The vGPU manager's: the driver's without the validations directory, with cgroup and vfio.
VGPU_MANAGER_VOLUMES = (
    RUN_NVIDIA, VAR_LOG, DEV_LOG, HOST_OS_RELEASE, CGROUP, VFIO, FABRICMANAGER, TOPOLOGYD, MOFED_SOURCES,
    MELLANOX_DRIVERS, HOST_ROOT, HOST_SYS, FIRMWARE_SEARCH_PATH, SYS_DEVICES_SYSTEM, NV_FIRMWARE,
)
