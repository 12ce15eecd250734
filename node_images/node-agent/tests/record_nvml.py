"""Record what this machine's NVML answers, as JSON that `fakenvml.FakeNvml.from_recording` replays.

Run it on a GPU machine (root is not needed for anything the inventory reads):

    PYTHONPATH=node_images/node-agent python node_images/node-agent/tests/record_nvml.py > nvml.json

It asks every question the inventory read asks (`gpustack_agent/inventory/inventory.py`), plus the GPU instance profile
table (`nvmlDeviceGetGpuInstanceProfileInfoV` for every profile id, with its possible placements) that
`python -m gpustack inventory --mig-profiles` compares with gpu-stack's MIG catalog. A call that fails is
recorded as the name of the pynvml exception it raised, so the replay raises the same class. Nothing here
changes the GPU: no MIG mode, instance or clock is set.
"""

from __future__ import annotations

import ctypes
import json
import sys
from importlib import metadata
from typing import Any, Callable

import pynvml

PROFILE_FIELDS = (
    "id", "isP2pSupported", "sliceCount", "instanceCount", "multiprocessorCount", "copyEngineCount",
    "decoderCount", "encoderCount", "jpegCount", "ofaCount", "memorySizeMB",
)
MAX_PLACEMENTS = 16


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _ask(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except pynvml.NVMLError as error:
        return {"error": type(error).__name__}


def _placements(handle: Any, profile_id: int) -> Any:
    placements = (pynvml.c_nvmlGpuInstancePlacement_t * MAX_PLACEMENTS)()
    count = ctypes.c_uint(MAX_PLACEMENTS)
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, placements, ctypes.byref(count))
    return [[placements[i].start, placements[i].size] for i in range(count.value)]


def _profile(handle: Any, profile: int) -> dict[str, Any]:
    try:
        info = pynvml.nvmlDeviceGetGpuInstanceProfileInfoV(handle, profile)
    except pynvml.NVMLError as error:
        return {"profile": profile, "error": type(error).__name__}
    entry: dict[str, Any] = {"profile": profile, "name": _text(info.name)}
    entry.update({name: int(getattr(info, name)) for name in PROFILE_FIELDS})
    entry["placements"] = _ask(lambda: _placements(handle, info.id))
    return entry


def _mig_devices(handle: Any) -> Any:
    names = {}
    for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            device = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except pynvml.NVMLError_NotFound:
            continue
        names[str(slot)] = _text(pynvml.nvmlDeviceGetName(device))
    return names


def _gpu(index: int) -> dict[str, Any]:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    pci = pynvml.nvmlDeviceGetPciInfo(handle)
    return {
        "name": _text(pynvml.nvmlDeviceGetName(handle)),
        "pciDeviceId": int(pci.pciDeviceId),
        "pciSubSystemId": int(pci.pciSubSystemId),
        "busId": _text(pci.busId),
        "memoryTotal": int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
        "architecture": _ask(lambda: pynvml.nvmlDeviceGetArchitecture(handle)),
        "migMode": _ask(lambda: list(pynvml.nvmlDeviceGetMigMode(handle))),
        "maxMigDeviceCount": _ask(lambda: pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)),
        "migDevices": _ask(lambda: _mig_devices(handle)),
        "gpuInstanceProfiles": [_profile(handle, p) for p in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT)],
    }


def record() -> dict[str, Any]:
    pynvml.nvmlInit()
    try:
        return {
            "recordedWith": f"nvidia-ml-py {metadata.version('nvidia-ml-py')}",
            "driverVersion": _text(pynvml.nvmlSystemGetDriverVersion()),
            "cudaDriverVersion": _ask(pynvml.nvmlSystemGetCudaDriverVersion_v2),
            "gpus": [_gpu(index) for index in range(pynvml.nvmlDeviceGetCount())],
        }
    finally:
        pynvml.nvmlShutdown()


def main() -> None:
    try:
        recording = record()
    except pynvml.NVMLError as error:
        sys.exit(f"record_nvml: NVML cannot be read here ({type(error).__name__}: {error})")
    json.dump(recording, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
