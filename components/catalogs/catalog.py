"""Data the stack is checked against: the GPU Operator v26.7.0 image set and the GPU models gpu-stack knows.

Versions come from the operator's Helm values at tag v26.7.0 (fact sheet §12); the registry paths are
NVIDIA's published ones. Nothing here is computed: a reviewer can diff this file against a release note.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

OPERATOR_RELEASE = "v26.7.0"

DEFAULT_REGISTRY = "nvcr.io"

# component -> (repository path below the registry, default tag)
IMAGES: dict[str, tuple[str, str]] = {
    "driver": ("nvidia/driver", "595.91.07"),
    "driverManager": ("nvidia/cloud-native/k8s-driver-manager", "v0.12.0"),
    "toolkit": ("nvidia/k8s/container-toolkit", "v1.20.0"),
    "devicePlugin": ("nvidia/k8s-device-plugin", "v0.20.0"),
    # GFD ships in the device plugin's image but is versioned on its own in the operator (`gfd.version`).
    "gfd": ("nvidia/k8s-device-plugin", "v0.20.0"),
    # The validator image also runs the node status exporter (`nvidia-validator`, COMPONENT=metrics).
    "validator": ("nvidia/gpu-operator", OPERATOR_RELEASE),
    "dcgm": ("nvidia/cloud-native/dcgm", "4.6.0-1-ubuntu24.04"),
    "dcgmExporter": ("nvidia/k8s/dcgm-exporter", "4.6.0-4.8.3-distroless"),
    "migManager": ("nvidia/cloud-native/k8s-mig-manager", "v0.15.0"),
    # KubeVirt's GPU device plugin, for vm-passthrough and vm-vgpu nodes (`sandboxDevicePlugin`).
    "sandboxDevicePlugin": ("nvidia/kubevirt-gpu-device-plugin", "v1.6.0"),
    # Kata sandboxes get NVIDIA's own sandbox device plugin (`kataSandboxDevicePlugin`) and the confidential
    # computing manager (`ccManager`); vGPU nodes the vGPU device manager (`vgpuDeviceManager`).
    "kataDevicePlugin": ("nvidia/cloud-native/nvidia-sandbox-device-plugin", "v0.0.5"),
    "ccManager": ("nvidia/cloud-native/k8s-cc-manager", "v0.4.3"),
    "vgpuDeviceManager": ("nvidia/cloud-native/vgpu-device-manager", "v0.5.0"),
    # GPUDirect sidecars of the driver DaemonSet (`gds`, `gdrcopy`); tags get the node's OS suffix like the driver's.
    "gds": ("nvidia/cloud-native/nvidia-fs", "2.29.4"),
    "gdrcopy": ("nvidia/cloud-native/gdrdrv", "v2.6"),
    "draDriver": ("nvidia/dra-driver-nvidia-gpu", "v0.5.0"),  # GPUCluster's `draDriver` (DRA mode pools)
}

# nvidia-fs from this release on builds only against the open kernel modules (GO:internal/consts/consts.go
# MinimumGDSVersionForOpenRM).
GDS_MIN_VERSION_FOR_OPEN_MODULES = (2, 17, 5)

# The operator bundles NFD as a Helm subchart (deployments/gpu-operator/Chart.yaml); gpu-stack renders the objects
# of that chart version itself (components/states/nfd.py), with the image of the chart's appVersion from NFD's
# registry, or from `registry.override` under the same path.
NFD_CHART = "node-feature-discovery"
NFD_CHART_VERSION = "0.19.0"
NFD_REGISTRY = "registry.k8s.io"
NFD_IMAGE = ("nfd/node-feature-discovery", "v0.19.0")

ARCHITECTURES = ("volta", "turing", "ampere", "ada-lovelace", "hopper", "blackwell")


@dataclass(frozen=True)
class GpuModel:
    name: str
    pci_device_ids: tuple[str, ...]
    architecture: str
    memory_gib: int
    mig_capable: bool

    @property
    def driver(self) -> "DriverSupport":
        return DRIVER_SUPPORT[self.name]


KERNEL_MODULE_RULES = ("any", "open-only", "proprietary-only")


@dataclass(frozen=True)
class DriverSupport:
    """Which driver branches and kernel modules run a GPU model."""

    min_branch: int
    max_branch: int | None = None  # the last branch that still supports it
    kernel_modules: str = "any"  # one of KERNEL_MODULE_RULES

    def __post_init__(self) -> None:
        if self.kernel_modules not in KERNEL_MODULE_RULES:
            raise ValueError(f"kernel_modules {self.kernel_modules!r} is not one of {', '.join(KERNEL_MODULE_RULES)}")

    def branch_problem(self, branch: int) -> str | None:
        if branch < self.min_branch:
            return f"needs driver branch {self.min_branch} or later"
        if self.max_branch is not None and branch > self.max_branch:
            return f"is supported up to driver branch {self.max_branch} only"
        return None

    def module_problem(self, kernel_module_type: str) -> str | None:
        if self.kernel_modules == "open-only" and kernel_module_type == "proprietary":
            return "runs only on the open kernel modules (use 'open' or 'auto')"
        if self.kernel_modules == "proprietary-only" and kernel_module_type == "open":
            return "predates Turing, so the open kernel modules do not drive it (use 'proprietary' or 'auto')"
        return None


# First branch whose NVIDIA/open-gpu-kernel-modules README lists the model's PCI id in "Compatible GPUs" (the
# table starts at 515.48.07, so Turing and Ampere read 515: the open modules cover "any Turing or later GPU").
# Volta never had open modules, and its ids leave the driver's name table at 590 (R580 is its last branch).
# Grace Hopper and Blackwell are supported on the open modules only (NVIDIA's R560 announcement).
DRIVER_SUPPORT: dict[str, DriverSupport] = {
    "V100": DriverSupport(515, max_branch=580, kernel_modules="proprietary-only"),
    "T4": DriverSupport(515),
    "A10": DriverSupport(515),
    "A30": DriverSupport(515),
    "A100-40GB": DriverSupport(515),
    "A100-80GB": DriverSupport(515),
    "L4": DriverSupport(525),
    "L40S": DriverSupport(535),
    "H100-80GB": DriverSupport(525),
    "H100-NVL": DriverSupport(535),
    "H100-96GB": DriverSupport(535),
    "H200": DriverSupport(550),
    "GH200": DriverSupport(565, kernel_modules="open-only"),
    "B200": DriverSupport(570, kernel_modules="open-only"),
    "GB200": DriverSupport(570, kernel_modules="open-only"),
    "B300": DriverSupport(580, kernel_modules="open-only"),
    "GB300": DriverSupport(580, kernel_modules="open-only"),
    "RTX-PRO-6000": DriverSupport(575, kernel_modules="open-only"),
}


# PCI ids follow the device filters of the operator's default-mig-parted-config (fact sheet §6.5) where the
# model is MIG-capable; the MIG profile table itself arrives with the MIG catalog.
GPU_MODELS: dict[str, GpuModel] = {
    m.name: m
    for m in (
        GpuModel("V100", ("0x1DB4", "0x1DB5", "0x1DB6"), "volta", 32, False),
        GpuModel("T4", ("0x1EB8",), "turing", 16, False),
        GpuModel("A10", ("0x2236",), "ampere", 24, False),
        GpuModel("A30", ("0x20B7",), "ampere", 24, True),
        GpuModel("A100-40GB", ("0x20B0", "0x20B1", "0x20F1", "0x20F6"), "ampere", 40, True),
        GpuModel("A100-80GB", ("0x20B2", "0x20B5", "0x20F3", "0x20F5"), "ampere", 80, True),
        GpuModel("L4", ("0x27B8",), "ada-lovelace", 24, False),
        GpuModel("L40S", ("0x26B9",), "ada-lovelace", 48, False),
        GpuModel("H100-80GB", ("0x2330", "0x2331", "0x2322", "0x2324"), "hopper", 80, True),
        GpuModel("H100-NVL", ("0x2321", "0x233A"), "hopper", 94, True),
        GpuModel("H100-96GB", ("0x2342", "0x233D"), "hopper", 96, True),
        GpuModel("H200", ("0x2335", "0x233B"), "hopper", 141, True),
        GpuModel("GH200", ("0x2348",), "hopper", 144, True),
        GpuModel("B200", ("0x2901",), "blackwell", 180, True),
        GpuModel("GB200", ("0x2941",), "blackwell", 186, True),
        GpuModel("B300", ("0x3182",), "blackwell", 269, True),
        GpuModel("GB300", ("0x31C2",), "blackwell", 278, True),
        GpuModel("RTX-PRO-6000", ("0x2BB5",), "blackwell", 96, True),
    )
}


# PCI device names from the pci.ids database (pciutils/pciids, vendor 10de) for the ids whose entries were
# checked; the KubeVirt GPU device plugin names its resource after them (`kubevirt_resource_name`). An id the
# database lacks would be advertised by its hex id instead; ids not listed here are not permitted to VMs.
PCI_DEVICE_NAMES: dict[str, str] = {
    "0x20B0": "GA100 [A100 SXM4 40GB]",
    "0x20F1": "GA100 [A100 PCIe 40GB]",
    "0x20B2": "GA100 [A100 SXM4 80GB]",
    "0x20B5": "GA100 [A100 PCIe 80GB]",
    "0x20B7": "GA100GL [A30 PCIe]",
    "0x2236": "GA102GL [A10]",
    "0x1EB8": "TU104GL [Tesla T4]",
    "0x27B8": "AD104GL [L4]",
    "0x26B9": "AD102GL [L40S]",
    "0x2330": "GH100 [H100 SXM5 80GB]",
    "0x2331": "GH100 [H100 PCIe]",
    "0x2321": "GH100 [H100L 94GB]",
    "0x2335": "GH100 [H200 SXM 141GB]",
    "0x2901": "GB100 [B200]",
}


def kubevirt_resource_name(pci_device_id: str) -> Optional[str]:
    """The resource NVIDIA's KubeVirt GPU device plugin advertises for a GPU bound to vfio-pci: its pci.ids name
    upper-cased, `/` and `.` and whitespace runs turned into `_`, anything else but letters, digits and `_`
    dropped (kubevirt-gpu-device-plugin v1.6.0 `getDeviceName`); None for an id gpu-stack has no name for."""
    name = PCI_DEVICE_NAMES.get(pci_device_id)
    if name is None:
        return None
    name = re.sub(r"\s+", "_", name.strip().upper().replace("/", "_").replace(".", "_"))
    return "nvidia.com/" + re.sub(r"[^A-Za-z0-9_.]+", "", name)
