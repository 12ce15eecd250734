"""vGPU types per GPU board and the vGPU Device Manager's default configuration (`default-vgpu-devices-config`).

Pure data and pure functions (no Pulumi): the vGPU device manager component renders the ConfigMap from here, and
the config validator asks which vGPU types a pool's GPU model offers and whether a pool's `vgpuConfig` can be
applied to it. PCI device ids are written as in `catalog.GPU_MODELS` ("0x20B5"), so a model's ids look its vGPU
types up directly.

Sources:

* Every vGPU type, its per-GPU count and the `default` config: the operator's `default-vgpu-devices-config`
  (GO:assets/state-vgpu-device-manager/0500_configmap.yaml at a22dbf6 / v26.7.0, "vGPU 20.0"). The operator
  lists one config per type, each `devices: all` with that type at its per-GPU count, plus `default`: one
  device-filtered entry per PCI id. The tables below regroup that data by board; `devices_config()` renders a
  document equal, as data, to the operator's (only the order of the named configs differs).
* Config shape, type-name grammar and device filters: NVIDIA/vgpu-device-manager at v0.5.0+ (`api/spec/v1`,
  `pkg/types`): a config is a non-empty list of `{device-filter?, devices, vgpu-devices}`, `devices` is `all` or
  a list of GPU indices, `device-filter` is `0x<device><vendor>` (or a list of them), `vgpu-devices` maps a type
  to a positive count and never mixes time-sliced with MIG-backed types.
* Which board a PCI id is: the `device-filter` of the operator's `default` entries, whose type names the board's
  family (`0x20B5` -> `A100D-40C` -> family `A100D`).

Two things the operator's data leaves open, and what this module assumes:

* Family `DC` is two boards. Its types are the RTX PRO 6000 Blackwell Server Edition's (0x2BB5, 96 GB, four MIG
  slices) except six that only fit a 32 GB, two-slice GPU (`DC-1-16C/Q` x2, `DC-2-8C/Q` x4, `DC-2-32C/Q` x1):
  those are filed under the RTX PRO 4500 Blackwell Server Edition (0x2C3A, 32 GB, pci.ids), together with the
  `DC-16Q` x2 of its `default` entry. Inference: the operator names no board per type. The named config `DC-16Q`
  keeps the operator's count, 6, which only the 96 GB board holds, so it does not serve 0x2C3A here.
* 0x1E78 (Quadro RTX 6000/8000) and 0x25B6 (A2 / A16) are each shared by two boards, and `default` lists both
  boards' types for them; a PCI id alone cannot tell them apart, so both boards' types count as offered there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Optional

from . import catalog

NVIDIA_VENDOR_ID = "10DE"
SPEC_VERSION = "v1"
DEFAULT_CONFIG = "default"  # `vgpuDeviceManager.config.default` in the operator's Helm values
ALL_DEVICES = "all"

# --- vGPU type names ------------------------------------------------------------------------------------------

SERIES = ("A", "B", "C", "Q")
MIG_ATTRIBUTES = ("ME", "NOME", "MEALL", "GFX")

# Time-sliced: <board>-<framebuffer GB><series>, where the board may carry letter-only suffixes ("RTX6000-Ada").
# MIG-backed: <board>-<GPU instance slices>-<framebuffer GB><series>[attribute]. 0 GB stands for 512 MB.
_SERIES = f"(?P<series>[{''.join(SERIES)}])"
# longest first: MEALL before ME
_ATTRIBUTE = f"(?P<attr>{'|'.join(sorted(MIG_ATTRIBUTES, key=len, reverse=True))})"
_TIME_SLICED = re.compile(rf"^(?P<gpu>[A-Z0-9]+(?:-[A-Za-z]+)*)-(?P<gb>0|[1-9][0-9]*){_SERIES}$")
_MIG_BACKED = re.compile(rf"^(?P<gpu>[A-Z0-9]+)-(?P<slices>[1-9])-(?P<gb>0|[1-9][0-9]*){_SERIES}{_ATTRIBUTE}?$")
_PCI_ID = re.compile(r"^0x[0-9A-F]{4}$")


@dataclass(frozen=True)
class VgpuType:
    name: str
    family: str
    slices: int  # GPU-instance slices of a MIG-backed type; 0 for a time-sliced one
    framebuffer_gb: int
    series: str
    attribute: str = ""

    @property
    def mig_backed(self) -> bool:
        return self.slices > 0


def parse_type(name: str) -> VgpuType:
    """A vGPU type name split into its parts; ValueError when the vGPU device manager would refuse it."""
    match = _TIME_SLICED.fullmatch(name)
    if match:
        return VgpuType(name, match["gpu"], 0, int(match["gb"]), match["series"])
    match = _MIG_BACKED.fullmatch(name)
    if match:
        return VgpuType(name, match["gpu"], int(match["slices"]), int(match["gb"]), match["series"], match["attr"] or "")
    raise ValueError(f"{name!r} is not a vGPU type name (<board>-<GB><series> or <board>-<slices>-<GB><series>[attr])")


def normalize_pci_id(pci_id: str) -> str:
    """"0x20b5" / "20B5" -> "0x20B5", the spelling of catalog.GPU_MODELS."""
    digits = pci_id[2:] if pci_id[:2].lower() == "0x" else pci_id
    normalized = "0x" + digits.upper()
    if not _PCI_ID.fullmatch(normalized):
        raise ValueError(f"{pci_id!r} is not a 16-bit PCI device id")
    return normalized


def device_filter(pci_id: str) -> str:
    """The device manager's filter for an NVIDIA GPU: device id followed by the vendor id, "0x20B510DE"."""
    return normalize_pci_id(pci_id) + NVIDIA_VENDOR_ID


# --- boards ---------------------------------------------------------------------------------------------------


def _profiles(spec: str, *, graphics_variants: bool = False) -> Mapping[str, int]:
    """"1Q:16 2Q:8 ..." -> {profile: vGPU devices of that profile one GPU holds}. With `graphics_variants`, every
    MIG-backed profile also exists with the GFX attribute at the same count (the Blackwell RTX boards)."""
    profiles: dict[str, int] = {}
    for item in spec.split():
        profile, count = item.split(":")
        profiles[profile] = int(count)
    if graphics_variants:
        for profile, count in list(profiles.items()):
            if profile.count("-") == 1:  # "<slices>-<GB><series>"
                profiles[profile + "GFX"] = count
    return MappingProxyType(profiles)


# Time-sliced tables by framebuffer size; boards of one size share a table.
FB16 = _profiles("1Q:16 2Q:8 4C:4 4Q:4 8C:2 8Q:2 16C:1 16Q:1")
FB24 = _profiles("1Q:24 2Q:12 3Q:8 4C:6 4Q:6 6C:4 6Q:4 8C:3 8Q:3 12C:2 12Q:2 24C:1 24Q:1")
FB32 = _profiles("1Q:32 2Q:16 4C:8 4Q:8 8C:4 8Q:4 16C:2 16Q:2 32C:1 32Q:1")
FB48 = _profiles("1Q:32 2Q:24 3Q:16 4C:12 4Q:12 6C:8 6Q:8 8C:6 8Q:6 12C:4 12Q:4 16C:3 16Q:3 24C:2 24Q:2 48C:1 48Q:1")
# Quadro RTX 8000 passive: as FB48 except 4C, which holds 8 rather than 12.
RTX8000P = _profiles("1Q:32 2Q:24 3Q:16 4C:8 4Q:12 6C:8 6Q:8 8C:6 8Q:6 12C:4 12Q:4 16C:3 16Q:3 24C:2 24Q:2 48C:1 48Q:1")

# Compute boards: time-sliced C profiles, then MIG-backed ones (the single media-extension instance as "...CME").
A30 = _profiles("4C:6 6C:4 8C:3 12C:2 24C:1 1-6C:4 1-6CME:1 2-12C:2 2-12CME:1 4-24C:1")
A100_40GB = _profiles(
    "4C:10 5C:8 8C:5 10C:4 20C:2 40C:1 1-5C:7 1-5CME:1 1-10C:4 2-10C:3 3-20C:2 4-20C:1 7-40C:1"
)
A100_80GB = _profiles(
    "4C:20 8C:10 10C:8 16C:5 20C:4 40C:2 80C:1 1-10C:7 1-10CME:1 1-20C:4 2-20C:3 3-40C:2 4-40C:1 7-80C:1"
)
H100_64GB = _profiles("4C:16 8C:8 16C:4 32C:2 64C:1 1-8C:7 1-8CME:1 1-16C:4 2-16C:3 3-32C:2 4-32C:1 7-64C:1")
H100_80GB = _profiles(
    "4C:20 5C:16 8C:10 10C:8 16C:5 20C:4 40C:2 80C:1 1-10C:7 1-10CME:1 1-20C:4 2-20C:3 3-40C:2 4-40C:1 7-80C:1"
)
H100_94GB = _profiles(
    "4C:23 6C:15 11C:8 15C:6 23C:4 47C:2 94C:1 1-12C:7 1-12CME:1 1-24C:4 2-24C:3 3-47C:2 4-47C:1 7-94C:1"
)
H20_96GB = _profiles(
    "4C:24 6C:16 8C:12 12C:8 16C:6 24C:4 32C:3 48C:2 96C:1 1-12C:7 1-12CME:1 1-24C:4 2-24C:3 3-48C:2 4-48C:1 7-96C:1"
)
H200_141GB = _profiles(
    "4C:32 7C:20 8C:16 14C:10 17C:8 28C:5 35C:4 70C:2 141C:1 "
    "1-18C:7 1-18CME:1 1-35C:4 2-35C:3 3-71C:2 4-71C:1 7-141C:1"
)
# Grace Hopper, Blackwell HGX: the whole GPU time-sliced, or MIG-backed.
GH200_96GB = _profiles("96C:1 1-12C:7 1-12CME:1 1-24C:4 2-24C:3 3-48C:2 4-48C:1 7-96C:1")
GH200_144GB = _profiles("144C:1 1-18C:7 1-18CME:1 1-36C:4 2-36C:3 3-72C:2 4-72C:1 7-144C:1")
B200_180GB = _profiles("180C:1 1-23C:7 1-23CME:1 1-45C:4 2-45C:3 3-90C:2 4-90C:1 7-180C:1")
GB200_189GB = _profiles("189C:1 1-24C:7 1-24CME:1 1-47C:4 2-47C:3 3-95C:2 4-95C:1 7-189C:1")
B300_269GB = _profiles("269C:1 1-34C:7 1-34CME:1 1-67C:4 2-67C:3 3-135C:2 4-135C:1 7-269C:1")
# Blackwell RTX boards (family "DC", and "6000D"): Q and C, MIG-backed also as GFX.
DC_96GB = _profiles(
    "3Q:32 4Q:24 6Q:16 8C:12 8Q:12 12C:8 12Q:8 16C:6 16Q:6 24C:4 24Q:4 32C:3 32Q:3 48C:2 48Q:2 96C:1 96Q:1 "
    "1-2Q:48 1-3Q:32 1-4Q:24 1-6Q:16 1-8C:12 1-8Q:12 1-12C:8 1-12Q:8 1-24C:4 1-24Q:4 "
    "2-12C:8 2-12Q:8 2-16C:6 2-16Q:6 2-24C:4 2-24Q:4 2-48C:2 2-48Q:2 "
    "4-24C:4 4-24Q:4 4-32C:3 4-32Q:3 4-48C:2 4-48Q:2 4-96C:1 4-96Q:1",
    graphics_variants=True,
)
DC_32GB = _profiles("16Q:2 1-16C:2 1-16Q:2 2-8C:4 2-8Q:4 2-32C:1 2-32Q:1")
RTX6000D_84GB = _profiles("84C:1 84Q:1 1-42C:2 1-42Q:2 2-84C:1 2-84Q:1", graphics_variants=True)


@dataclass(frozen=True)
class Board:
    """One GPU board as the vGPU software sees it: the type-name family, the PCI device ids that identify it and
    the vGPU types one GPU of it holds (type name -> count)."""

    family: str
    pci_device_ids: tuple[str, ...]
    types: Mapping[str, int]
    default_type: str  # what the operator's `default` config creates on it (at its full count)

    @property
    def default_count(self) -> int:
        return self.types[self.default_type]


def _board(family: str, pci_ids: str, profiles: Mapping[str, int], default_profile: str) -> Board:
    types = MappingProxyType({f"{family}-{profile}": count for profile, count in profiles.items()})
    return Board(family, tuple(pci_ids.split()), types, f"{family}-{default_profile}")


# In the order of the operator's `default` config (which is the order its entries are written in).
BOARDS: tuple[Board, ...] = (
    _board("V100X", "0x1DB1", FB16, "8Q"),
    _board("V100L", "0x1DB3", FB16, "8Q"),
    _board("V100", "0x1DB4", FB16, "8Q"),
    _board("V100DX", "0x1DB5", FB32, "16Q"),
    _board("V100D", "0x1DB6", FB32, "16Q"),
    _board("V100S", "0x1DF6", FB32, "16Q"),
    _board("RTX8000P", "0x1E78", RTX8000P, "24Q"),
    _board("RTX6000P", "0x1E78", FB24, "12Q"),
    _board("T4", "0x1EB8", FB16, "8Q"),
    _board("A100X", "0x20B0", A100_40GB, "20C"),
    _board("A100DX", "0x20B2", A100_80GB, "40C"),
    _board("A100D", "0x20B5 0x20B8", A100_80GB, "40C"),
    _board("A30", "0x20B7 0x20B9", A30, "12C"),
    _board("A100", "0x20F1", A100_40GB, "20C"),
    _board("A800DX", "0x20F3", A100_80GB, "40C"),
    _board("A800D", "0x20F5 0x20FD", A100_80GB, "40C"),
    _board("A800", "0x20F6", A100_40GB, "20C"),
    _board("RTXA6000", "0x2230", FB48, "24Q"),
    _board("RTXA5000", "0x2231", FB24, "12Q"),
    _board("RTXA5500", "0x2233", FB24, "12Q"),
    _board("A40", "0x2235", FB48, "24Q"),
    _board("A10", "0x2236", FB24, "12Q"),
    _board("H100L", "0x2321", H100_94GB, "47C"),
    _board("H800", "0x2322", H100_80GB, "40C"),
    _board("H800XM", "0x2324", H100_80GB, "40C"),
    _board("H20", "0x2329", H20_96GB, "48C"),
    _board("H20X", "0x232C", H200_141GB, "70C"),
    _board("H100XM", "0x2330 0x2336", H100_80GB, "40C"),
    _board("H100", "0x2331", H100_80GB, "40C"),
    _board("H200X", "0x2335", H200_141GB, "70C"),
    _board("H100XS", "0x2337", H100_64GB, "32C"),
    _board("H100XL", "0x2339", H100_94GB, "47C"),
    _board("H800L", "0x233A", H100_94GB, "47C"),
    _board("H200", "0x233B", H200_141GB, "70C"),
    _board("GH200", "0x2342", GH200_96GB, "96C"),
    _board("GH200L", "0x2348", GH200_144GB, "144C"),
    _board("A16", "0x25B6", FB16, "8Q"),
    _board("A2", "0x25B6", FB16, "8Q"),
    _board("RTX6000-Ada", "0x26B1", FB48, "24Q"),
    _board("RTX5000-Ada", "0x26B2", FB32, "16Q"),
    _board("RTX5880-Ada", "0x26B3", FB48, "24Q"),
    _board("L40", "0x26B5", FB48, "24Q"),
    _board("L40S", "0x26B9", FB48, "24Q"),
    _board("L20", "0x26BA", FB48, "24Q"),
    _board("L2", "0x27B6", FB24, "12Q"),
    _board("L4", "0x27B8", FB24, "12Q"),
    _board("B200X", "0x2901", B200_180GB, "180C"),
    _board("GB200", "0x2941", GB200_189GB, "189C"),
    _board("DC", "0x2BB5", DC_96GB, "48Q"),
    _board("6000D", "0x2BB9", RTX6000D_84GB, "84Q"),
    _board("DC", "0x2C3A", DC_32GB, "16Q"),
    _board("B300X", "0x3182", B300_269GB, "269C"),
)


# --- the device manager's configuration document -------------------------------------------------------------


def single_type_counts() -> dict[str, int]:
    """Every vGPU type with the count its named config creates per GPU: the first board's (board order)."""
    counts: dict[str, int] = {}
    for board in BOARDS:
        for name, count in board.types.items():
            counts.setdefault(name, count)
    return counts


def default_entries() -> list[dict[str, Any]]:
    """The `default` config: per PCI id, the board's default type at its full count, filtered to that id."""
    return [
        {"device-filter": device_filter(pci_id), "devices": ALL_DEVICES, "vgpu-devices": {board.default_type: board.default_count}}
        for board in BOARDS
        for pci_id in board.pci_device_ids
    ]


# A stack's own named configs (`gpu-stack:vgpu.configs`) in the device manager's shape, by name.
Custom = Optional[Mapping[str, list[dict[str, Any]]]]


def vgpu_configs(custom: Custom = None) -> dict[str, list[dict[str, Any]]]:
    """Named configs: one per vGPU type (every GPU of the node gets that type), then `default`; then a stack's own
    configs, each replacing a built-in one of its name."""
    configs: dict[str, list[dict[str, Any]]] = {
        name: [{"devices": ALL_DEVICES, "vgpu-devices": {name: count}}] for name, count in single_type_counts().items()
    }
    configs[DEFAULT_CONFIG] = default_entries()
    configs.update(custom or {})
    return configs


def devices_config(custom: Custom = None) -> dict[str, Any]:
    return {"version": SPEC_VERSION, "vgpu-configs": vgpu_configs(custom)}


def config_names(custom: Custom = None) -> tuple[str, ...]:
    return tuple(vgpu_configs(custom))


# --- what a GPU model offers, and whether a config serves it -------------------------------------------------


def types_for_pci_id(pci_id: str) -> dict[str, int]:
    """vGPU types a GPU with this PCI id holds (type -> count per GPU); empty when the vGPU software knows no
    board with that id. An id two boards share (0x1E78, 0x25B6) offers both boards' types."""
    wanted = normalize_pci_id(pci_id)
    types: dict[str, int] = {}
    for board in BOARDS:
        if wanted in board.pci_device_ids:
            for name, count in board.types.items():
                types.setdefault(name, count)
    return types


def types_by_pci_id(pci_ids: Iterable[str]) -> dict[str, dict[str, int]]:
    return {normalize_pci_id(i): types_for_pci_id(i) for i in pci_ids}


def model_types(model: str) -> dict[str, dict[str, int]]:
    """For a `catalog.GPU_MODELS` model: each of its PCI ids -> the vGPU types a GPU with that id holds."""
    return types_by_pci_id(catalog.GPU_MODELS[model].pci_device_ids)


def vgpu_capable_models() -> tuple[str, ...]:
    """Catalog models at least one of whose PCI ids the vGPU software knows."""
    return tuple(name for name in catalog.GPU_MODELS if any(model_types(name).values()))


def entry_applies(entry: Mapping[str, Any], pci_id: str) -> bool:
    filters = entry.get("device-filter")
    if filters is None:
        return True
    filters = [filters] if isinstance(filters, str) else list(filters)
    return any(f.upper().startswith(device_filter(pci_id).upper()) for f in filters)


def config_problem_for_pci_id(config: str, pci_id: str, custom: Custom = None) -> Optional[str]:
    """Why applying `config` to a GPU with this PCI id fails or creates nothing, or None when it works: an entry
    applies there, and every entry that applies names only types the GPU holds, at most as many as it holds."""
    configs = vgpu_configs(custom)
    if config not in configs:
        return f"no vGPU config named {config!r}"
    gpu = normalize_pci_id(pci_id)
    offered = types_for_pci_id(gpu)
    if not offered:
        return f"{gpu} is no vGPU-capable GPU"
    applying = [e for e in configs[config] if entry_applies(e, gpu)]
    if not applying:
        return f"{gpu} has no entry, so nothing is created there"
    for entry in applying:
        for name, count in entry["vgpu-devices"].items():
            if name not in offered:
                return f"{gpu} offers no {name}"
            if count > offered[name]:
                return f"{gpu} holds {offered[name]} x {name}, not {count}"
    return None


def served_pci_ids(config: str, pci_ids: Iterable[str], custom: Custom = None) -> tuple[str, ...]:
    """The ids among `pci_ids` on which `config` applies cleanly."""
    return tuple(normalize_pci_id(i) for i in pci_ids if config_problem_for_pci_id(config, i, custom) is None)


def _model_hint(model: str) -> str:
    ids = catalog.GPU_MODELS[model].pci_device_ids
    boards = [
        f"{family} ({pci_id})"
        for pci_id, types in model_types(model).items()
        for family in sorted({parse_type(name).family for name in types})
    ]
    default = f", or {DEFAULT_CONFIG!r}" if served_pci_ids(DEFAULT_CONFIG, ids) else ""
    return f"{model} GPUs take the configs named after the vGPU types of {', '.join(boards)}{default}"


def config_problem(config: str, model: str, custom: Custom = None) -> Optional[str]:
    """Why `config` cannot serve a pool of catalog model `model`, or None. A model spans several PCI ids (SXM and
    PCIe parts, export variants) whose boards name their types differently, so a single-type config serves some
    of them only; the pool is refused when it serves none, and accepted otherwise (`served_pci_ids` says which)."""
    ids = catalog.GPU_MODELS[model].pci_device_ids
    if not any(model_types(model).values()):
        return f"{model} (PCI ids {', '.join(ids)}) has no vGPU types: the vGPU software does not support it"
    if config not in vgpu_configs(custom):
        return f"no vGPU config named {config!r}; {_model_hint(model)}"
    if served_pci_ids(config, ids, custom):
        return None
    reasons = dict.fromkeys(p for p in (config_problem_for_pci_id(config, i, custom) for i in ids) if p)
    return f"vGPU config {config!r} serves no {model} GPU ({'; '.join(reasons)}); {_model_hint(model)}"
