"""A stand-in for the NVML library behind pynvml, for the agent's tests and gpu-stack's (tests/test_inventory.py).

`FakeNvml.install(monkeypatch)` replaces the pynvml functions the inventory read calls. They answer with
pynvml's own ctypes structs and raise pynvml's own exception classes, so the code under test meets the
shapes the real library returns (bytes in char arrays, [current, pending] MIG modes, NotFound for an empty
MIG device slot). The GPU descriptions follow what NVML reports for the real parts: names, PCI device ids,
memory in MiB after the driver's reservations, seven MIG device slots, MIG device names "<GPU> MIG <profile>".

`FakeNvml.from_recording(path)` replays what a real machine's NVML answered, as `record_nvml.py` wrote it
(fixtures/nvml/: an H100 80GB HBM3 under driver 580.159.04, recorded on a lent GPU machine), GPU instance
profile tables included.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pynvml

ENABLE, DISABLE = pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_DISABLE


@dataclass
class FakeGpu:
    name: str
    device_id: int
    memory_mib: int
    architecture: int
    mig: Optional[tuple[int, int]] = None  # (current, pending); None: nvmlDeviceGetMigMode is not supported
    instances: dict[str, int] = field(default_factory=dict)  # profile (as in layouts) -> MIG devices
    max_mig_devices: int = 7
    fail: dict[str, Exception] = field(default_factory=dict)  # pynvml function -> error it raises for this GPU
    vendor_id: int = 0x10DE
    bus_id: str = ""
    sub_system_id: int = 0
    memory_bytes: Optional[int] = None  # exact total, when a recording has one that is not whole MiB
    mig_slots: dict[int, str] = field(default_factory=dict)  # recorded MIG device names by slot, over `instances`
    # recorded nvmlDeviceGetGpuInstanceProfileInfoV answers by profile constant: the info, or {"error": <class>}
    profiles: list[dict[str, Any]] = field(default_factory=list)


def _error(name: str) -> Exception:
    """pynvml's own exception class of that name, as the recording stored it."""
    return getattr(pynvml, name)()


def _replayed(recorded: dict[str, Any]) -> FakeGpu:
    pci_id = recorded["pciDeviceId"]
    fail = {}
    for function, key in (("nvmlDeviceGetArchitecture", "architecture"), ("nvmlDeviceGetMigMode", "migMode"),
                          ("nvmlDeviceGetMaxMigDeviceCount", "maxMigDeviceCount")):
        if isinstance(recorded[key], dict):
            fail[function] = _error(recorded[key]["error"])
    mig_mode = recorded["migMode"]
    return FakeGpu(
        name=recorded["name"],
        device_id=(pci_id >> 16) & 0xFFFF,
        vendor_id=pci_id & 0xFFFF,
        memory_mib=recorded["memoryTotal"] >> 20,
        memory_bytes=recorded["memoryTotal"],
        architecture=recorded["architecture"] if "architecture" not in fail else 0,
        mig=None if isinstance(mig_mode, dict) else (mig_mode[0], mig_mode[1]),
        max_mig_devices=recorded["maxMigDeviceCount"] if "nvmlDeviceGetMaxMigDeviceCount" not in fail else 0,
        mig_slots={int(slot): name for slot, name in (recorded["migDevices"] or {}).items()},
        fail=fail,
        bus_id=recorded["busId"],
        sub_system_id=recorded["pciSubSystemId"],
        profiles=list(recorded["gpuInstanceProfiles"]),
    )


def a100_80gb(mig: Optional[tuple[int, int]] = (DISABLE, DISABLE), instances: Optional[dict[str, int]] = None) -> FakeGpu:
    return FakeGpu("NVIDIA A100-SXM4-80GB", 0x20B2, 81920, pynvml.NVML_DEVICE_ARCH_AMPERE, mig, dict(instances or {}))


def a100_40gb(mig: Optional[tuple[int, int]] = (DISABLE, DISABLE), instances: Optional[dict[str, int]] = None) -> FakeGpu:
    return FakeGpu("NVIDIA A100-SXM4-40GB", 0x20B0, 40960, pynvml.NVML_DEVICE_ARCH_AMPERE, mig, dict(instances or {}))


def h100_80gb(mig: Optional[tuple[int, int]] = (DISABLE, DISABLE), instances: Optional[dict[str, int]] = None) -> FakeGpu:
    return FakeGpu("NVIDIA H100 80GB HBM3", 0x2330, 81559, pynvml.NVML_DEVICE_ARCH_HOPPER, mig, dict(instances or {}))


def h200(mig: Optional[tuple[int, int]] = (DISABLE, DISABLE), instances: Optional[dict[str, int]] = None) -> FakeGpu:
    return FakeGpu("NVIDIA H200", 0x2335, 143771, pynvml.NVML_DEVICE_ARCH_HOPPER, mig, dict(instances or {}))


def l4() -> FakeGpu:
    return FakeGpu("NVIDIA L4", 0x27B8, 23034, pynvml.NVML_DEVICE_ARCH_ADA)


def t4() -> FakeGpu:
    return FakeGpu("Tesla T4", 0x1EB8, 15360, pynvml.NVML_DEVICE_ARCH_TURING)


class _Handle:
    def __init__(self, index: int, mig_slot: Optional[int] = None) -> None:
        self.index = index
        self.mig_slot = mig_slot


class FakeNvml:
    """The NVML library of one machine: `gpus` in index order, the driver and CUDA versions, and `fail`
    (pynvml function -> error) for the system-level calls."""

    FUNCTIONS = (
        "nvmlInit", "nvmlShutdown", "nvmlSystemGetDriverVersion", "nvmlSystemGetCudaDriverVersion",
        "nvmlSystemGetCudaDriverVersion_v2", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetName",
        "nvmlDeviceGetPciInfo", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetArchitecture", "nvmlDeviceGetMigMode",
        "nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMigDeviceHandleByIndex",
        "nvmlDeviceGetGpuInstanceProfileInfoV", "nvmlDeviceGetGpuInstancePossiblePlacements",
    )

    def __init__(self, gpus: list[FakeGpu], driver: str = "595.91.07", cuda: int = 13000,
                 fail: Optional[dict[str, Exception]] = None) -> None:
        self.gpus = gpus
        for index, gpu in enumerate(gpus):
            gpu.bus_id = gpu.bus_id or f"00000000:{0x10 + index:02X}:00.0"
        self.driver = driver
        self.cuda = cuda
        self.fail = dict(fail or {})
        self.calls: list[str] = []
        self.initialised = 0

    @classmethod
    def from_recording(cls, path: Path) -> "FakeNvml":
        recording = json.loads(Path(path).read_text())
        return cls([_replayed(gpu) for gpu in recording["gpus"]], driver=recording["driverVersion"],
                   cuda=recording["cudaDriverVersion"])

    def install(self, monkeypatch: Any) -> "FakeNvml":
        for name in self.FUNCTIONS:
            monkeypatch.setattr(pynvml, name, getattr(self, name))
        return self

    def _enter(self, function: str, handle: Optional[_Handle] = None) -> Optional[FakeGpu]:
        self.calls.append(function)
        if function in self.fail:
            raise self.fail[function]
        if handle is None:
            return None
        gpu = self.gpus[handle.index]
        if function in gpu.fail:
            raise gpu.fail[function]
        return gpu

    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1
        self._enter("nvmlShutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        return self.cuda

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion_v2")
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._enter("nvmlDeviceGetHandleByIndex", _Handle(index))
        return _Handle(index)

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        gpu = self._enter("nvmlDeviceGetName", handle)
        if handle.mig_slot is not None:
            return gpu.mig_slots.get(handle.mig_slot) or f"{gpu.name} MIG {self._slots(gpu)[handle.mig_slot]}"
        return gpu.name

    def nvmlDeviceGetPciInfo(self, handle: _Handle) -> pynvml.nvmlPciInfo_t:
        gpu = self._enter("nvmlDeviceGetPciInfo", handle)
        info = pynvml.nvmlPciInfo_t()
        info.pciDeviceId = (gpu.device_id << 16) | gpu.vendor_id
        info.busId = gpu.bus_id.encode()
        info.pciSubSystemId = gpu.sub_system_id
        return info

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle) -> pynvml.c_nvmlMemory_t:
        gpu = self._enter("nvmlDeviceGetMemoryInfo", handle)
        total = gpu.memory_bytes if gpu.memory_bytes is not None else gpu.memory_mib << 20
        return pynvml.c_nvmlMemory_t(total=total, free=total - (512 << 20), used=512 << 20)

    def nvmlDeviceGetArchitecture(self, handle: _Handle) -> int:
        return self._enter("nvmlDeviceGetArchitecture", handle).architecture

    def nvmlDeviceGetMigMode(self, handle: _Handle) -> list[int]:
        gpu = self._enter("nvmlDeviceGetMigMode", handle)
        if gpu.mig is None:
            raise pynvml.NVMLError_NotSupported()
        return list(gpu.mig)

    @staticmethod
    def _slots(gpu: FakeGpu) -> dict[int, str]:
        """MIG device slot -> profile. The devices take the top slots, so the low ones read as empty (NotFound)
        and a reader must not stop at the first empty slot."""
        profiles = [profile for profile, count in gpu.instances.items() for _ in range(count)]
        return {gpu.max_mig_devices - 1 - i: profile for i, profile in enumerate(profiles)}

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: _Handle) -> int:
        gpu = self._enter("nvmlDeviceGetMaxMigDeviceCount", handle)
        if gpu.mig is None:
            raise pynvml.NVMLError_NotSupported()
        return gpu.max_mig_devices

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: _Handle, index: int) -> _Handle:
        gpu = self._enter("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        if gpu.mig is None or gpu.mig[0] != ENABLE:
            raise pynvml.NVMLError_InvalidArgument()
        if index not in (gpu.mig_slots or self._slots(gpu)):
            raise pynvml.NVMLError_NotFound()
        return _Handle(handle.index, index)

    @staticmethod
    def _profile(gpu: FakeGpu, match: Any) -> dict[str, Any]:
        entry = next((e for e in gpu.profiles if match(e)), None)
        if entry is None:
            raise pynvml.NVMLError_NotSupported()
        if "error" in entry:
            raise _error(entry["error"])
        return entry

    def nvmlDeviceGetGpuInstanceProfileInfoV(self, handle: _Handle, profile: int, version: int = 2) -> Any:
        gpu = self._enter("nvmlDeviceGetGpuInstanceProfileInfoV", handle)
        if profile >= pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT:
            raise pynvml.NVMLError_InvalidArgument()
        entry = self._profile(gpu, lambda e: e["profile"] == profile)
        info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
        for name, value in entry.items():
            if name not in ("profile", "placements", "name"):
                setattr(info, name, value)
        info.name = entry["name"].encode()
        return info

    def nvmlDeviceGetGpuInstancePossiblePlacements(self, handle: _Handle, profile_id: int, placements: Any,
                                                   count: Any) -> int:
        gpu = self._enter("nvmlDeviceGetGpuInstancePossiblePlacements", handle)
        entry = self._profile(gpu, lambda e: e.get("id") == profile_id and "error" not in e)
        if isinstance(entry["placements"], dict):
            raise _error(entry["placements"]["error"])
        for i, (start, size) in enumerate(entry["placements"]):
            placements[i].start, placements[i].size = start, size
        count._obj.value = len(entry["placements"])
        return pynvml.NVML_SUCCESS
