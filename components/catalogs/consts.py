"""Labels, host paths and names shared by more than one operator state (fact sheet §7, §9, Appendix C).

Constants used by a single component live in that component's module.
"""

from __future__ import annotations

# --- node labels -------------------------------------------------------------------------------------------
GPU_PRESENT = "nvidia.com/gpu.present"
DEPLOY_PREFIX = "nvidia.com/gpu.deploy."
DEPLOY_OPERANDS = "nvidia.com/gpu.deploy.operands"
WORKLOAD_CONFIG = "nvidia.com/gpu.workload.config"
DEVICE_PLUGIN_CONFIG = "nvidia.com/device-plugin.config"
MIG_CONFIG = "nvidia.com/mig.config"
# Read by the vGPU device manager; a node without it gets DEFAULT_VGPU_CONFIG.
VGPU_CONFIG = "nvidia.com/vgpu.config"
# Written by gpu-stack's node agent: the pool a node matched (node_images/node-agent).
POOL_LABEL = "gpu-stack/pool"
# The driver DaemonSet a node belongs to, written by the node agent from its pool: a driver DaemonSet selects
# nodes by it, so a pool rename never changes which DaemonSet runs a node's driver, and moving a node to another
# DaemonSet is a label change the agent makes at the upgrade's pace.
DRIVER_DAEMONSET_LABEL = "gpu-stack/driver"

# NFD labels that mark a node as carrying an NVIDIA GPU (GO:controllers/state_manager.go).
NFD_GPU_LABELS = (
    "feature.node.kubernetes.io/pci-10de.present",
    "feature.node.kubernetes.io/pci-0302_10de.present",
    "feature.node.kubernetes.io/pci-0300_10de.present",
)
NFD_KERNEL_FULL = "feature.node.kubernetes.io/kernel-version.full"
NFD_OS_ID = "feature.node.kubernetes.io/system-os_release.ID"
NFD_OS_VERSION_ID = "feature.node.kubernetes.io/system-os_release.VERSION_ID"

WORKLOAD_TYPES = ("container", "vm-passthrough", "vm-vgpu")

# Deploy labels per workload type, as the operator's node labeller sets them (GO:controllers/state_manager.go
# gpuStateLabels). `mig-manager` is added to container nodes whose GPU is MIG-capable.
DEPLOY_COMPONENTS_BY_WORKLOAD: dict[str, tuple[str, ...]] = {
    "container": (
        "driver",
        "gpu-feature-discovery",
        "container-toolkit",
        "device-plugin",
        "dcgm",
        "dcgm-exporter",
        "node-status-exporter",
        "operator-validator",
        "client",
    ),
    "vm-passthrough": (
        "sandbox-device-plugin",
        "sandbox-validator",
        "vfio-manager",
        "kata-manager",
        "cc-manager",
        "client",
    ),
    "vm-vgpu": (
        "sandbox-device-plugin",
        "vgpu-manager",
        "vgpu-device-manager",
        "sandbox-validator",
        "cc-manager",
        "client",
    ),
}
MIG_MANAGER_DEPLOY_COMPONENT = "mig-manager"
# The host GPU clients the MIG manager stops around a reconfiguration: NVIDIA's ConfigMap, which the operator (and
# gpu-stack) renders unless migManager.gpuClientsConfig names another (fact sheet §11).
MIG_DEFAULT_GPU_CLIENTS = "default-gpu-clients"
# The RuntimeClass (name and handler) operands run under, ClusterPolicy's operator.runtimeClass default.
DEFAULT_RUNTIME_CLASS = "nvidia"
CDI_RUNTIME_CLASSES = ("nvidia-cdi", "nvidia-legacy")
# With sandboxWorkloads.mode kata, vm-passthrough nodes take Kata's sandbox device plugin in place of KubeVirt's
# (GO:controllers/state_manager.go, fact sheet §7).
KATA_DEPLOY_SUBSTITUTES: dict[str, str] = {"sandbox-device-plugin": "kata-sandbox-device-plugin"}

# A DRA pool's nodes take NVIDIA's DRA kubelet plugin and the DRA validator in place of the device plugin and the
# operator validator (the GPUCluster states' deploy labels, fact sheet §1.6).
# DCGM and its exporter come in their DRA flavour there, which claims the node's GPUs with adminAccess
# (GO:manifests/state-dcgm, state-dcgm-exporter).
DRA_DEPLOY_SUBSTITUTES: dict[str, str] = {
    "device-plugin": "dra-driver",
    "operator-validator": "dra-validator",
    "dcgm": "dcgm-dra",
    "dcgm-exporter": "dcgm-exporter-dra",
}

# Every deploy label the labeller may remove when a node's workload type says it does not belong there.
ALL_DEPLOY_COMPONENTS: tuple[str, ...] = (
    "driver",
    "container-toolkit",
    "operator-validator",
    "device-plugin",
    "gpu-feature-discovery",
    "dcgm",
    "dcgm-exporter",
    "node-status-exporter",
    "mig-manager",
    "client",
    "sandbox-device-plugin",
    "kata-sandbox-device-plugin",
    "sandbox-validator",
    "vfio-manager",
    "vgpu-manager",
    "vgpu-device-manager",
    "kata-manager",
    "cc-manager",
    "dra-driver",
    "dra-validator",
    "dcgm-dra",
    "dcgm-exporter-dra",
)


def deploy_label(component: str) -> str:
    return f"{DEPLOY_PREFIX}{component}"


# --- the driver pod's containers (GO:manifests/state-driver/0500_daemonset.yaml): one spelling for the builders, the
# operand overrides and the OpenShift Driver Toolkit verbs (the policy pack keeps its own list, as an independent check)
DRIVER_CONTAINER = "nvidia-driver-ctr"
DRIVER_MANAGER_CONTAINER = "k8s-driver-manager"
PEERMEM_CONTAINER = "nvidia-peermem-ctr"
GDS_CONTAINER = "nvidia-fs-ctr"
GDRCOPY_CONTAINER = "nvidia-gdrcopy-ctr"

# --- host paths (Appendix C) ---------------------------------------------------------------------------------
VALIDATIONS_DIR = "/run/nvidia/validations"
DRIVER_INSTALL_DIR = "/run/nvidia/driver"
CDI_SPEC_DIR = "/var/run/cdi"
RUN_NVIDIA = "/run/nvidia"
# The MPS control daemon's root on the host (pipes, logs; its shm below), ClusterPolicy devicePlugin.mps.root.
DEFAULT_MPS_ROOT = "/run/nvidia/mps"

# Host paths a distribution may move, and the operand volumes NVIDIA's `preProcessDaemonSet` rewrites for them
# by name (GO:controllers/object_controls.go `transformForHostRoot`, `transformForDriverInstallDir`): the policy
# pack follows a moved path only through these volumes.
DEFAULT_ROOT_FS = "/"
# Directories the kernel or the OS own: a moved host root, outside driver or kubelet root inside them is a typo
# with consequences (the driver directory is mounted read-write and created when missing).
SYSTEM_DIRS = ("/proc", "/sys", "/dev", "/boot", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/usr/bin", "/usr/sbin")
DEFAULT_KUBELET_ROOT_DIR = "/var/lib/kubelet"
DEV_CHAR = "/dev/char"
HOST_ROOT_VOLUME = "host-root"
HOST_DEV_CHAR_VOLUME = "host-dev-char"
DRIVER_INSTALL_DIR_VOLUME = "driver-install-dir"
# Where the host-root volume is mounted in every operand container; HOST_ROOT with this value is an in-container
# path (vfio-manage, the DRA kubelet plugin), any other HOST_ROOT is the host's own path (the validator).
HOST_ROOT_MOUNT = "/host"
HOST_ROOT_ENV = "HOST_ROOT"
DRIVER_INSTALL_DIR_ENV = "DRIVER_INSTALL_DIR"
DRIVER_INSTALL_DIR_CTR_PATH_ENV = "DRIVER_INSTALL_DIR_CTR_PATH"
DRIVER_VALIDATION_CONTAINER = "driver-validation"
# Kubelet directories the operands mount, by volume name -> directory under the kubelet root. The DRA kubelet
# plugin hands the kubelet absolute socket paths, so its directories keep the host path inside the container too
# and its env names them; the device plugin and pod-resources APIs are found at fixed in-container paths.
KUBELET_VOLUMES = {
    "device-plugin": "device-plugins",
    "pod-gpu-resources": "pod-resources",
    "plugins-registry": "plugins_registry",
    "plugins": "plugins",
}
KUBELET_PATH_ENV = {"plugins-registry": "KUBELET_REGISTRAR_DIRECTORY_PATH", "plugins": "KUBELET_PLUGINS_DIRECTORY_PATH"}
# GPUDirect RDMA with a host-installed MOFED: the driver builds nvidia-peermem against the host's /usr/src
# instead of the MOFED container's (GO:controllers/object_controls.go `transformDriverContainer`, fact sheet §2.3).
MOFED_USR_SRC_VOLUME = "mlnx-ofed-usr-src"
MOFED_CONTAINER_USR_SRC = "/run/mellanox/drivers/usr/src"
HOST_USR_SRC = "/usr/src"
USE_HOST_MOFED_ENV = "USE_HOST_MOFED"

# Annotations understood by pulumi-kubernetes (pulumi.md §3.2).
SKIP_AWAIT = "pulumi.com/skipAwait"
TIMEOUT_SECONDS = "pulumi.com/timeoutSeconds"
# How pulumi-kubernetes deletes an object (foreground by default); `orphan` leaves its pods running.
DELETION_PROPAGATION = "pulumi.com/deletionPropagationPolicy"

# Label put on every object the stack renders, so `kubectl get -l` finds them.
PART_OF = "app.kubernetes.io/part-of"
MANAGED_BY = "app.kubernetes.io/managed-by"
STACK_NAME = "gpu-stack"
