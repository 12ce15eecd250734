"""What GPUs a node actually has, read through NVML, and how that departs from its pool.

This is the one implementation of the NVML read: the agent's `inventory` loop uses it
to annotate its node, and gpu-stack's `python -m gpustack inventory` imports this
module (from the repository checkout) for the same read on a machine's own GPUs. It
therefore depends on nothing but the standard library, ``pynvml`` (the nvidia-ml-py
package) and :mod:`.labels`.

The drift checks here are the ones both callers can make from what they know: the
declared GPU model, the pool's MIG layout and its workload type. gpu-stack's CLI adds
the checks that need the whole stack configuration (driver plan, layout geometry).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

import pynvml

from .labels import POOL_LABEL, Config, parse_config

INVENTORY_ANNOTATION = "gpu-stack/inventory"
DRIFT_ANNOTATION = "gpu-stack/drift"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
WORKLOAD_CONFIG_LABEL = "nvidia.com/gpu.workload.config"
MIG_DISABLED_LAYOUT = "all-disabled"
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

# NVIDIA quotes GPU memory in decimal GB, and NVML reports what is left after the driver's reservations, so a
# healthy GPU lands a little above or below the quoted figure (an L4 reports 23034 MiB = 24.15 GB, an H100
# 80GB 81559 MiB = 85.5 GB). Only a shortfall beyond that spread means a smaller part.
MEMORY_TOLERANCE = 0.95

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
        layouts = {json.dumps(dict(g.mig_devices), sort_keys=True) for g in self.gpus}
        if self.mig_mode == "enabled" and len(layouts) == 1:
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


def _read_gpu(index: int, by_pci: Mapping[int, str]) -> Gpu:
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


def read_inventory(models: Mapping[str, ModelSpec] = MODELS) -> Inventory:
    """The GPUs NVML sees, each matched to a model of `models` by PCI device id.

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
            gpus.append(_read_gpu(index, by_pci))
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


# ---------------------------------------------------------------------------------------------------------------
# Drift: checks both the agent and gpu-stack's CLI make


@dataclass(frozen=True)
class Drift:
    kind: str  # model, mixed-models, memory, mig-mode, mig-layout, driver, workload, pool
    message: str

    def as_json(self) -> dict[str, str]:
        return {"kind": self.kind, "message": self.message}


def gpu_list(gpus: Iterable[Gpu]) -> str:
    """`GPU 3`, `GPUs 0-7`, `GPUs 0-1,4`."""
    indexes = sorted(gpu.index for gpu in gpus)
    runs: list[list[int]] = []
    for index in indexes:
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    text = ",".join(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]) for run in runs)
    return f"GPU {text}" if len(indexes) == 1 else f"GPUs {text}"


def _are(gpus: Sequence[Gpu]) -> str:
    return "is" if len(gpus) == 1 else "are"


def _have(gpus: Sequence[Gpu]) -> str:
    return "has" if len(gpus) == 1 else "have"


def format_devices(devices: Mapping[str, int]) -> str:
    return ", ".join(f"{count}x {profile}" for profile, count in sorted_devices(devices).items()) or "none"


def _describe(gpus: Sequence[Gpu]) -> str:
    gpu = gpus[0]
    if gpu.model is None:
        return f"{gpu.name} ({gpu.pci_device_id}), a GPU gpu-stack's catalog does not know"
    return f"{gpu.model} ({gpu.name}, {gpu.pci_device_id})"


def node_problems(inventory: Inventory, models: Mapping[str, ModelSpec] = MODELS) -> list[Drift]:
    """What is wrong with the node whatever pool it is in: mixed models, memory short of its model's."""
    problems = []
    groups = inventory.by_label()
    if len(groups) > 1:
        parts = ", ".join(f"{len(gpus)}x {label} ({gpu_list(gpus)})" for label, gpus in groups.items())
        problems.append(Drift("mixed-models", f"the node mixes GPU models: {parts}; a pool declares one gpuModel"))
    for label, gpus in groups.items():
        spec = models.get(gpus[0].model or "")
        if spec is None:
            continue
        floor = MEMORY_TOLERANCE * spec.memory_gb * 10**9
        short: dict[int, list[Gpu]] = {}
        for gpu in gpus:
            if gpu.memory_mib * (1 << 20) < floor:
                short.setdefault(gpu.memory_mib, []).append(gpu)
        for mib, low in sorted(short.items()):
            problems.append(
                Drift("memory", f"{gpu_list(low)} {_have(low)} {mib} MiB, below the {spec.memory_gb} GB the catalog gives {spec.name}")
            )
    return problems


def model_problems(inventory: Inventory, pool: str, declared: str) -> list[Drift]:
    problems = []
    for label, gpus in inventory.by_label().items():
        if gpus[0].model != declared:
            problems.append(
                Drift("model", f"{gpu_list(gpus)} {_are(gpus)} {_describe(gpus)}, but pool {pool} declares {declared}")
            )
    return problems


def _pending(gpus: Sequence[Gpu]) -> str:
    pending = gpus[0].mig_pending
    return f" ({pending} after the next GPU reset or reboot)" if pending else ""


def _by(gpus: Iterable[Gpu], key: Callable[[Gpu], Any]) -> list[list[Gpu]]:
    groups: dict[Any, list[Gpu]] = {}
    for gpu in gpus:
        groups.setdefault(key(gpu), []).append(gpu)
    return list(groups.values())


def mig_problems(
    inventory: Inventory,
    pool: str,
    layout: Optional[str],
    devices: Optional[Mapping[str, int]] = None,
    only_profile: Optional[str] = None,
) -> list[Drift]:
    """MIG mode and devices against the pool's layout (`nvidia.com/mig.config`); None means the pool does not use
    MIG. `devices` (MIG devices per GPU) or `only_profile` (the one profile a layout creates) check the devices."""
    problems = []
    if layout is None or layout == MIG_DISABLED_LAYOUT:
        enabled = [gpu for gpu in inventory.gpus if gpu.mig_mode == "enabled"]
        for gpus in _by(enabled, lambda g: g.mig_pending):
            where = f" ({MIG_CONFIG_LABEL}={layout})" if layout else ""
            problems.append(
                Drift("mig-mode", f"MIG mode is enabled on {gpu_list(gpus)}{_pending(gpus)}, but pool {pool} does not use MIG{where}")
            )
        return problems
    incapable = [gpu for gpu in inventory.gpus if gpu.mig_mode is None]
    for gpus in _by(incapable, lambda g: g.label):
        problems.append(
            Drift("mig-mode", f"{gpu_list(gpus)} ({gpus[0].label}) cannot run MIG, but pool {pool} declares MIG layout {layout}")
        )
    disabled = [gpu for gpu in inventory.gpus if gpu.mig_mode == "disabled"]
    for gpus in _by(disabled, lambda g: g.mig_pending):
        problems.append(
            Drift("mig-mode", f"MIG mode is disabled on {gpu_list(gpus)}{_pending(gpus)}, but pool {pool} declares MIG layout {layout}")
        )
    enabled = [gpu for gpu in inventory.gpus if gpu.mig_mode == "enabled"]
    for gpus in _by(enabled, lambda g: format_devices(g.mig_devices)):
        actual = gpus[0].mig_devices
        if devices is not None and dict(actual) != dict(devices):
            problems.append(
                Drift(
                    "mig-layout",
                    f"{gpu_list(gpus)} {_have(gpus)} MIG devices {format_devices(actual)}, but layout {layout} creates "
                    f"{format_devices(devices)} per GPU",
                )
            )
        elif only_profile is not None and set(actual) != {only_profile}:
            problems.append(
                Drift(
                    "mig-layout",
                    f"{gpu_list(gpus)} {_have(gpus)} MIG devices {format_devices(actual)}, but layout {layout} creates "
                    f"{only_profile} devices only",
                )
            )
    return problems


def passthrough_problems(inventory: Inventory, pool: str) -> list[Drift]:
    """A vm-passthrough pool's GPUs belong to vfio-pci; NVML seeing them means the NVIDIA driver holds them."""
    return [
        Drift(
            "workload",
            f"pool {pool} passes its GPUs to VMs through vfio-pci, but the NVIDIA driver holds {gpu_list(inventory.gpus)}",
        )
    ]


def single_profile(layout: str) -> Optional[str]:
    """The profile of a single-profile builtin layout: `all-1g.10gb.me` -> `1g.10gb+me` (mig-parted writes `+`
    as `.` in config names); None for all-disabled, all-enabled, all-balanced and custom layouts."""
    match = re.fullmatch(r"all-([0-9]+g\.[0-9]+gb)(.*)", layout)
    if not match:
        return None
    rest = match.group(2)
    return match.group(1) + ("+" + rest[1:] if rest.startswith(".") else rest)


# ---------------------------------------------------------------------------------------------------------------
# The agent's view: the node's pool from its labels and the node-pools config


def node_drift(inventory: Inventory, node_labels: Mapping[str, str], config: Config,
               models: Mapping[str, ModelSpec] = MODELS) -> list[Drift]:
    """Every disagreement between the node's hardware and the pool its gpu-stack/pool label names."""
    problems = node_problems(inventory, models)
    name = node_labels.get(POOL_LABEL)
    if name is None:
        return problems + [Drift("pool", f"the node has no {POOL_LABEL} label: it matches no pool's nodeSelector")]
    pool = next((p for p in config.pools if p.name == name), None)
    if pool is None:
        return problems + [Drift("pool", f"pool {name} ({POOL_LABEL}) is not in the node-pools config")]
    if pool.gpu_model is not None:
        problems += model_problems(inventory, name, pool.gpu_model)
    if pool.labels.get(WORKLOAD_CONFIG_LABEL) == "vm-passthrough":
        return problems + passthrough_problems(inventory, name)
    layout = pool.labels.get(MIG_CONFIG_LABEL)
    mig = mig_problems(inventory, name, layout, only_profile=single_profile(layout) if layout else None)
    state = node_labels.get(MIG_CONFIG_STATE_LABEL)
    if mig and state:
        # pending / rebooting: the MIG manager is still applying the layout; failed: it gave up.
        mig = [Drift(d.kind, f"{d.message} ({MIG_CONFIG_STATE_LABEL}={state})") for d in mig]
    return problems + mig


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def wanted_annotations(
    found: Inventory | NvmlUnavailable, node_labels: Mapping[str, str], config: Mapping[str, Any] | Config,
    models: Mapping[str, ModelSpec] = MODELS,
) -> tuple[dict[str, Optional[str]], list[Drift]]:
    """The two annotations for the node (None removes one) and the drift they record. ConfigError for an
    invalid node-pools config, before anything is decided."""
    config = config if isinstance(config, Config) else parse_config(config)
    if isinstance(found, NvmlUnavailable):
        # Drift cannot be judged without the hardware: no drift annotation rather than a stale or empty one.
        return {INVENTORY_ANNOTATION: _compact({"error": str(found)}), DRIFT_ANNOTATION: None}, []
    drift = node_drift(found, node_labels, config, models)
    return {
        INVENTORY_ANNOTATION: _compact(found.summary()),
        DRIFT_ANNOTATION: _compact([d.as_json() for d in drift]),
    }, drift


def annotation_patch(node: Mapping[str, Any], wanted: Mapping[str, Optional[str]]) -> Optional[dict[str, Any]]:
    """JSON merge patch setting `wanted` on the node, holding only the keys that change; None when none does."""
    current = (node.get("metadata") or {}).get("annotations") or {}
    changes = {key: value for key, value in wanted.items() if current.get(key) != value}
    return {"metadata": {"annotations": changes}} if changes else None
