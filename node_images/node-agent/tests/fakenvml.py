"""A stand-in for the NVML library behind pynvml, for the agent's tests and gpu-stack's (tests/test_inventory.py).

`FakeNvml.install(monkeypatch)` replaces the pynvml functions the inventory read calls. They answer with
pynvml's own ctypes structs and raise pynvml's own exception classes, so the code under test meets the
shapes the real library returns (bytes in char arrays, [current, pending] MIG modes, NotFound for an empty
MIG device slot). The GPU descriptions follow what NVML reports for the real parts: names, PCI device ids,
memory in MiB after the driver's reservations, seven MIG device slots, MIG device names "<GPU> MIG <profile>".
"""

from __future__ import annotations

from dataclasses import dataclass, field
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
            return f"{gpu.name} MIG {self._slots(gpu)[handle.mig_slot]}"
        return gpu.name

    def nvmlDeviceGetPciInfo(self, handle: _Handle) -> pynvml.nvmlPciInfo_t:
        gpu = self._enter("nvmlDeviceGetPciInfo", handle)
        info = pynvml.nvmlPciInfo_t()
        info.pciDeviceId = (gpu.device_id << 16) | gpu.vendor_id
        info.busId = gpu.bus_id.encode()
        return info

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle) -> pynvml.c_nvmlMemory_t:
        gpu = self._enter("nvmlDeviceGetMemoryInfo", handle)
        total = gpu.memory_mib << 20
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
        if index not in self._slots(gpu):
            raise pynvml.NVMLError_NotFound()
        return _Handle(handle.index, index)
