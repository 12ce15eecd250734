"""What GPUs a node actually has, read through NVML.

This is the one implementation of the NVML read: the agent's `inventory` loop uses it
to annotate its node, and gpu-stack's `python -m gpustack inventory` imports this
module (from the repository checkout) for the same read on a machine's own GPUs. It
therefore depends on nothing but the standard library and ``pynvml`` (the nvidia-ml-py
package). How the hardware departs from its pool is :mod:`.drift`.
"""

from __future__ import annotations

import ctypes
import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import pynvml

NVIDIA_VENDOR_ID = 0x10DE

# NVML's architecture enum -> the names gpu-stack's catalog (and GFD's `gpu.family` label) use.
ARCHITECTURES: dict[int, str] = {
    pynvml.NVML_DEVICE_ARCH_KEPLER: "kepler",
    pynvml.NVML_DEVICE_ARCH_MAXWELL: "maxwell",
    pynvml.NVML_DEVICE_ARCH_PASCAL: "pascal",
    pynvml.NVML_DEVICE_ARCH_VOLTA: "volta",
    pynvml.NVML_DEVICE_ARCH_TURING: "turing",
    pynvml.NVML_DEVICE_ARCH_AMPERE: "ampere",
    pynvml.NVML_DEVICE_ARCH_ADA: "ada-lovelace",
    pynvml.NVML_DEVICE_ARCH_HOPPER: "hopper",
    pynvml.NVML_DEVICE_ARCH_BLACKWELL: "blackwell",
    pynvml.NVML_DEVICE_ARCH_RUBIN: "rubin",
}
UNKNOWN_ARCHITECTURE = "unknown"

# A MIG device's NVML name ends in its profile: "NVIDIA A100-SXM4-80GB MIG 1g.10gb", "... MIG 1g.10gb+me", or
# "... MIG 1c.3g.40gb" for one compute instance of several in a GPU instance.
_PROFILE_IN_NAME = re.compile(r"MIG\s+((?:[0-9]+c\.)?[0-9]+g\.[0-9]+gb(?:[-+][a-z.]+)?)\s*$")
_PROFILE_KEY = re.compile(r"^([0-9]+)g\.([0-9]+)gb")


@dataclass(frozen=True)
class ModelSpec:
    """What the drift checks need of a GPU model (components/catalog.py GpuModel, which the agent image lacks)."""

    name: str
    pci_device_ids: tuple[str, ...]
    memory_gb: int
    mig_capable: bool


# Kept equal to components/catalog.py GPU_MODELS by tests/test_inventory.py: the agent image carries only this
# package, and gpu-stack's CLI passes the catalog's own table instead.
MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        ModelSpec("V100", ("0x1DB4", "0x1DB5", "0x1DB6"), 32, False),
        ModelSpec("T4", ("0x1EB8",), 16, False),
        ModelSpec("A10", ("0x2236",), 24, False),
        ModelSpec("A30", ("0x20B7",), 24, True),
        ModelSpec("A100-40GB", ("0x20B0", "0x20B1", "0x20F1", "0x20F6"), 40, True),
        ModelSpec("A100-80GB", ("0x20B2", "0x20B5", "0x20F3", "0x20F5"), 80, True),
        ModelSpec("L4", ("0x27B8",), 24, False),
        ModelSpec("L40S", ("0x26B9",), 48, False),
        ModelSpec("H100-80GB", ("0x2330", "0x2331", "0x2322", "0x2324"), 80, True),
        ModelSpec("H100-NVL", ("0x2321", "0x233A"), 94, True),
        ModelSpec("H100-96GB", ("0x2342", "0x233D"), 96, True),
        ModelSpec("H200", ("0x2335", "0x233B"), 141, True),
        ModelSpec("GH200", ("0x2348",), 144, True),
        ModelSpec("B200", ("0x2901",), 180, True),
        ModelSpec("GB200", ("0x2941",), 186, True),
        ModelSpec("B300", ("0x3182",), 269, True),
        ModelSpec("GB300", ("0x31C2",), 278, True),
        ModelSpec("RTX-PRO-6000", ("0x2BB5",), 96, True),
    )
}


class NvmlUnavailable(Exception):
    """NVML cannot tell what GPUs this machine has: no library, no driver, no GPU, or an NVML error."""


@dataclass(frozen=True)
class MigProfileInfo:
    """One GPU instance profile as the driver offers it on a GPU (nvmlDeviceGetGpuInstanceProfileInfoV)."""

    name: str  # as mig-parted layouts write it: "1g.10gb+me"
    nvml_id: int  # the id nvidia-smi mig -lgip shows
    compute_slices: int
    memory_slices: Optional[int]  # the size of its placements; None when NVML gives none
    instances: int  # how many fit on an empty GPU
    memory_mib: int

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "nvmlId": self.nvml_id,
            "computeSlices": self.compute_slices,
            "memorySlices": self.memory_slices,
            "instances": self.instances,
            "memoryMiB": self.memory_mib,
        }


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    pci_device_id: str  # "0x20B2": the device half of NVML's pciDeviceId, as catalog.py writes it
    pci_bus_id: str
    memory_mib: int
    architecture: str
    model: Optional[str]  # catalog name; None when the PCI id is not in the catalog
    mig_mode: Optional[str]  # "enabled" | "disabled"; None on a GPU without MIG
    mig_pending: Optional[str]  # the mode after the next GPU reset, when it differs from mig_mode
    mig_devices: Mapping[str, int] = field(default_factory=dict)  # MIG devices per profile, MIG enabled only
    mig_profiles: tuple[MigProfileInfo, ...] = ()  # read only when asked for, MIG-capable GPUs only

    @property
    def label(self) -> str:
        """The model name, or what NVML calls a GPU the catalog does not know."""
        return self.model or f"{self.name} ({self.pci_device_id})"

    def as_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "model": self.model,
            "pciDeviceId": self.pci_device_id,
            "pciBusId": self.pci_bus_id,
            "memoryMiB": self.memory_mib,
            "architecture": self.architecture,
            "migCapable": self.mig_mode is not None,
            "migMode": self.mig_mode,
            "migPending": self.mig_pending,
            "migDevices": dict(self.mig_devices),
            **({"migProfiles": [p.as_json() for p in self.mig_profiles]} if self.mig_profiles else {}),
        }


@dataclass(frozen=True)
class Inventory:
    driver_version: str
    cuda_version: str
    gpus: tuple[Gpu, ...]

    @property
    def driver_branch(self) -> Optional[int]:
        head = self.driver_version.split(".")[0]
        return int(head) if head.isdigit() else None

    def by_label(self) -> dict[str, list[Gpu]]:
        groups: dict[str, list[Gpu]] = {}
        for gpu in self.gpus:
            groups.setdefault(gpu.label, []).append(gpu)
        return groups

    @property
    def mig_mode(self) -> str:
        modes = {gpu.mig_mode or "unsupported" for gpu in self.gpus}
        return modes.pop() if len(modes) == 1 else "mixed"

    def as_json(self) -> dict[str, Any]:
        return {
            "driverVersion": self.driver_version,
            "cudaVersion": self.cuda_version,
            "count": len(self.gpus),
            "gpus": [gpu.as_json() for gpu in self.gpus],
        }

    def summary(self) -> dict[str, Any]:
        """The compact form the agent writes to the gpu-stack/inventory annotation."""
        groups = self.by_label()
        summary: dict[str, Any] = {
            "model": next(iter(groups)) if len(groups) == 1 else "mixed",
            "count": len(self.gpus),
            "memoryMiB": min(gpu.memory_mib for gpu in self.gpus),
            "migMode": self.mig_mode,
            "driver": self.driver_version,
        }
        if len(groups) > 1:
            summary["models"] = {label: len(gpus) for label, gpus in groups.items()}
        if self.mig_mode == "enabled":
            layouts = {json.dumps(dict(g.mig_devices), sort_keys=True) for g in self.gpus}
            if len(layouts) == 1:
                summary["migDevices"] = json.loads(layouts.pop())
        return summary


# ---------------------------------------------------------------------------------------------------------------
# Reading


def _text(value: Any) -> str:
    # ctypes char arrays in NVML's structs come back as bytes; the wrapped string getters already decode.
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def pci_index(models: Mapping[str, ModelSpec]) -> dict[int, str]:
    return {int(pci, 16): spec.name for spec in models.values() for pci in spec.pci_device_ids}


def profile_name(raw_name: str) -> str:
    """`1g.10gb+me` from a MIG device's NVML name ("NVIDIA A100-SXM4-80GB MIG 1g.10gb+me"), the form mig-parted
    layouts use; the whole name when it carries no profile."""
    match = _PROFILE_IN_NAME.search(raw_name)
    return match.group(1) if match else raw_name.strip()


def _profile_key(profile: str) -> tuple[int, int, str]:
    match = _PROFILE_KEY.match(profile)
    return (int(match.group(1)), int(match.group(2)), profile) if match else (1 << 30, 0, profile)


def sorted_devices(devices: Mapping[str, int]) -> dict[str, int]:
    return dict(sorted(devices.items(), key=lambda kv: _profile_key(kv[0])))


def _cuda_version() -> str:
    try:
        raw = pynvml.nvmlSystemGetCudaDriverVersion_v2()
    except pynvml.NVMLError_FunctionNotFound:
        raw = pynvml.nvmlSystemGetCudaDriverVersion()
    # NVML encodes CUDA 12.4 as 12040.
    return f"{raw // 1000}.{(raw % 1000) // 10}"


def _architecture(handle: Any) -> str:
    try:
        return ARCHITECTURES.get(pynvml.nvmlDeviceGetArchitecture(handle), UNKNOWN_ARCHITECTURE)
    except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
        return UNKNOWN_ARCHITECTURE


def _mode(value: int) -> str:
    return "enabled" if value == pynvml.NVML_DEVICE_MIG_ENABLE else "disabled"


def _mig_devices(handle: Any) -> dict[str, int]:
    """MIG devices per profile: what a mig-parted layout's `mig-devices` counts and the device plugin advertises.

    Read through the MIG device handles rather than the GPU instance calls, which NVML reserves for privileged
    users: the agent runs as uid 65532."""
    devices: dict[str, int] = {}
    for index in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            device = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
        except pynvml.NVMLError_NotFound:
            # Slots are not filled in order: a layout of four devices may leave any three of seven empty.
            continue
        name = profile_name(_text(pynvml.nvmlDeviceGetName(device)))
        devices[name] = devices.get(name, 0) + 1
    return sorted_devices(devices)


# Profile ids a driver does not offer on a GPU answer NotSupported; ids newer than the driver, InvalidArgument.
_ABSENT_PROFILE = (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument)
_MAX_PLACEMENTS = 16


def _placement_size(handle: Any, nvml_id: int) -> Optional[int]:
    placements = (pynvml.c_nvmlGpuInstancePlacement_t * _MAX_PLACEMENTS)()
    count = ctypes.c_uint(_MAX_PLACEMENTS)
    try:
        pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, nvml_id, placements, ctypes.byref(count))
    except _ABSENT_PROFILE:
        return None
    sizes = {placements[i].size for i in range(count.value)}
    return sizes.pop() if len(sizes) == 1 else None


def _mig_profiles(handle: Any) -> tuple[MigProfileInfo, ...]:
    """The GPU instance profiles the driver offers on this GPU. They are a property of GPU and driver, readable
    with MIG mode off, and reading them changes nothing."""
    profiles = []
    for profile in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfoV(handle, profile)
        except _ABSENT_PROFILE:
            continue
        profiles.append(
            MigProfileInfo(
                name=profile_name(_text(info.name)),
                nvml_id=int(info.id),
                compute_slices=int(info.sliceCount),
                memory_slices=_placement_size(handle, int(info.id)),
                instances=int(info.instanceCount),
                memory_mib=int(info.memorySizeMB),
            )
        )
    return tuple(sorted(profiles, key=lambda p: _profile_key(p.name)))


def _read_gpu(index: int, by_pci: Mapping[int, str], with_profiles: bool = False) -> Gpu:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    pci = pynvml.nvmlDeviceGetPciInfo(handle)
    # pciDeviceId packs the 16-bit device id above the 16-bit vendor id (0x20B210DE for an A100 SXM4 80GB).
    device_id = (pci.pciDeviceId >> 16) & 0xFFFF
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
    try:
        current, pending = pynvml.nvmlDeviceGetMigMode(handle)
    except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
        mig_mode = mig_pending = None
    else:
        mig_mode, mig_pending = _mode(current), _mode(pending)
    return Gpu(
        index=index,
        name=_text(pynvml.nvmlDeviceGetName(handle)),
        pci_device_id=f"0x{device_id:04X}",
        pci_bus_id=_text(pci.busId),
        memory_mib=memory.total // (1 << 20),
        architecture=_architecture(handle),
        model=by_pci.get(device_id) if (pci.pciDeviceId & 0xFFFF) == NVIDIA_VENDOR_ID else None,
        mig_mode=mig_mode,
        mig_pending=mig_pending if mig_pending != mig_mode else None,
        mig_devices=_mig_devices(handle) if mig_mode == "enabled" else {},
        mig_profiles=_mig_profiles(handle) if with_profiles and mig_mode is not None else (),
    )


def unavailable_reason(error: "pynvml.NVMLError", step: str) -> str:
    if isinstance(error, pynvml.NVMLError_LibraryNotFound):
        return (
            "NVML (libnvidia-ml.so.1) is not installed: this machine has no NVIDIA driver, or its libraries are "
            "not on the loader path (gpu-stack's containerized driver keeps them under /run/nvidia/driver; point "
            "LD_LIBRARY_PATH at its library directory)"
        )
    if isinstance(error, pynvml.NVMLError_DriverNotLoaded):
        return "the NVIDIA kernel driver is not loaded (NVML: Driver Not Loaded)"
    if isinstance(error, pynvml.NVMLError_NoPermission):
        return f"NVML refused {step} (Insufficient Permissions): run as root or as a user that can open /dev/nvidia*"
    return f"NVML error in {step}: {error}"


def read_inventory(models: Mapping[str, ModelSpec] = MODELS, mig_profiles: bool = False) -> Inventory:
    """The GPUs NVML sees, each matched to a model of `models` by PCI device id; with `mig_profiles`, also the
    GPU instance profiles the driver offers on each MIG-capable GPU.

    Raises NvmlUnavailable, with a message for a person, when NVML or the driver is missing, when it sees no
    GPU, and on any NVML error; NVML is shut down again whenever it was initialised.
    """
    by_pci = pci_index(models)
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        raise NvmlUnavailable(unavailable_reason(error, "nvmlInit")) from None
    step = "nvmlSystemGetDriverVersion"
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        step = "nvmlSystemGetCudaDriverVersion"
        cuda = _cuda_version()
        step = "nvmlDeviceGetCount"
        count = pynvml.nvmlDeviceGetCount()
        gpus = []
        for index in range(count):
            step = f"reading GPU {index}"
            gpus.append(_read_gpu(index, by_pci, with_profiles=mig_profiles))
    except pynvml.NVMLError as error:
        raise NvmlUnavailable(unavailable_reason(error, step)) from None
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            # The read is complete (or has already failed with its own error); a failing shutdown changes neither.
            pass
    if not gpus:
        raise NvmlUnavailable(f"NVML sees no GPU (NVIDIA driver {driver} is loaded)")
    return Inventory(driver, cuda, tuple(gpus))
