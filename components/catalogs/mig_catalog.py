"""The MIG manager's layouts on every MIG-capable GPU model, whether a layout fits, and what each one advertises.

Pure functions over the profile data of mig_profiles.py (no Pulumi, standard library only): the config validator,
the MIG manager component, the importer and the tests all call these. Models are keyed by the names in
`catalog.GPU_MODELS`.

Sources (fact sheet = /work/shared/reference/gpu-operator.md):

* Built-in layouts: the operator's `default-mig-parted-config` (GO:assets/state-mig-manager/0400_configmap.yaml at
  a22dbf6 / v26.7.0; fact sheet §6.5): `all-disabled`, `all-enabled`, `all-balanced` and `all-<profile>`.
* mig-parted config shape: fact sheet §6.4 and MP:api/spec/v1/spec.go (`device-filter` is a string or a list;
  `devices` is `all` or a list of GPU indices; `mig-devices` is required when `mig-enabled` is true and must be
  empty when it is false). MP:examples/config.yaml (`custom-config`) and MP:examples/dgx-station-80gb-config.yaml
  show per-GPU layouts: several entries, each for some GPU indices and/or PCI device ids.
* Resource naming: see `mig_resource_name` below (DP:internal/rm/rm.go, DP:internal/rm/device_map.go).

A custom layout is either one `{profile: count}` for every GPU, or a list of `GpuEntry` (mig-parted's entries).

Placement is approximated by slice sums: a set of MIG devices "fits" a GPU when every profile stays within its
per-GPU count and the summed compute and memory slices stay within the GPU's. Real GPUs also constrain *where*
each instance may start, so a few sum-feasible mixes are refused by the driver; every layout this module ships
(the operator's) is placeable.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Optional, Sequence, Union

from . import catalog
# Re-exported: callers read the profile data through the catalog.
from .mig_profiles import GEOMETRY, PROFILE_NAME, MigGeometry, MigProfile  # noqa: F401

NVIDIA_VENDOR_ID = "10DE"
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
STRATEGIES = ("none", "single", "mixed")

ALL_DISABLED = "all-disabled"
ALL_ENABLED = "all-enabled"
ALL_BALANCED = "all-balanced"
ALL_DEVICES = "all"  # mig-parted's `devices: all`

# A layout is picked with the node label `nvidia.com/mig.config=<name>`, so a name must be a label value.
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
# mig-parted's device filter: PCI device id then vendor id, as one 32-bit hex number ("0x20B210DE").
DEVICE_FILTER = re.compile(r"^0[xX][0-9A-Fa-f]{4}10[dD][eE]$")

_EMPTY: Mapping = MappingProxyType({})


@dataclass(frozen=True)
class GpuEntry:
    """One entry of a mig-parted layout: the GPUs it configures (`devices`, narrowed by `device_filter`) and how."""

    devices: Union[str, tuple[int, ...]]  # ALL_DEVICES or GPU indices
    mig_enabled: bool
    mig_devices: Mapping[str, int] = field(default_factory=dict)
    device_filter: Optional[tuple[str, ...]] = None  # "0xDDDD10DE" ids; None: every GPU

    def __post_init__(self) -> None:
        devices = self.devices if self.devices == ALL_DEVICES else tuple(self.devices)
        object.__setattr__(self, "devices", devices)
        object.__setattr__(self, "mig_devices", dict(self.mig_devices))
        if self.device_filter is not None:
            object.__setattr__(self, "device_filter", tuple(_filter_id(f) for f in self.device_filter))

    def applies_to(self, model: str) -> bool:
        return self.device_filter is None or bool(set(self.device_filter) & set(device_filter(model)))

    def describe(self) -> str:
        gpus = "GPUs all" if self.devices == ALL_DEVICES else "GPU " + ", ".join(map(str, self.devices))
        return gpus + (f" of {', '.join(self.device_filter)}" if self.device_filter else "")


@dataclass(frozen=True)
class Layout:
    name: str
    mig_enabled: bool
    devices: dict[str, int] = field(default_factory=dict)  # one GPU's devices; empty for per-GPU layouts
    entries: tuple[GpuEntry, ...] = ()  # per-GPU layouts: the entries that apply to the model

    def __post_init__(self) -> None:
        object.__setattr__(self, "devices", dict(self.devices))
        object.__setattr__(self, "entries", tuple(self.entries))

    @property
    def per_gpu(self) -> bool:
        return bool(self.entries)

    @property
    def creates_devices(self) -> bool:
        if self.per_gpu:
            return any(e.mig_enabled and e.mig_devices for e in self.entries)
        return self.mig_enabled and bool(self.devices)

    @property
    def enables_mig(self) -> bool:
        """MIG mode on some GPU: with no devices (`all-enabled`) the instances come from elsewhere (a DRA driver,
        or an admin's nvidia-smi), and the device plugin advertises them under `mixed` once they exist."""
        return any(e.mig_enabled for e in self.entries) if self.per_gpu else self.mig_enabled


LayoutValue = Union[Mapping[str, int], Sequence[GpuEntry]]


def _filter_id(value: str) -> str:
    if not isinstance(value, str) or not DEVICE_FILTER.fullmatch(value):
        raise ValueError(f"device filter {value!r} is not an NVIDIA PCI id as mig-parted takes it, e.g. 0x20B210DE")
    return "0x" + value[2:].upper()


def _is_per_gpu(value: LayoutValue) -> bool:
    return not isinstance(value, Mapping)


# ---------------------------------------------------------------------------------------------------------------
# Layouts


def layout_name(profile: str) -> str:
    """The operator's config name for a single-profile layout: `+` is written as `.` (`all-1g.10gb.me`)."""
    return "all-" + profile.replace("+", ".")


def _geometry(model: str) -> MigGeometry:
    if model in GEOMETRY:
        return GEOMETRY[model]
    if model in catalog.GPU_MODELS:
        raise ValueError(f"{model} is not MIG-capable; MIG-capable models: {', '.join(sorted(GEOMETRY))}")
    raise ValueError(f"unknown GPU model {model!r}; MIG-capable models: {', '.join(sorted(GEOMETRY))}")


def builtin_layouts(model: str) -> dict[str, Layout]:
    """The operator's layouts for one model: all-disabled, all-enabled, all-balanced and one `all-<profile>` per
    profile at that profile's per-GPU count. Sorted by name. ValueError for a model without MIG."""
    geometry = _geometry(model)
    layouts = {
        ALL_DISABLED: Layout(ALL_DISABLED, False, {}),
        ALL_ENABLED: Layout(ALL_ENABLED, True, {}),
        ALL_BALANCED: Layout(ALL_BALANCED, True, geometry.balanced),
    }
    for profile in geometry.profiles.values():
        name = layout_name(profile.name)
        layouts[name] = Layout(name, True, {profile.name: profile.max_count})
    return dict(sorted(layouts.items()))


def _all_builtin_names() -> dict[str, list[str]]:
    """Builtin layout name -> models that have it."""
    names: dict[str, list[str]] = {}
    for model in sorted(GEOMETRY):
        for name in builtin_layouts(model):
            names.setdefault(name, []).append(model)
    return names


BUILTIN_NAMES: frozenset[str] = frozenset(_all_builtin_names())


def check_devices(model: str, devices: Mapping[str, int]) -> list[str]:
    """Every reason `devices` (profile -> count) does not fit one GPU of `model`; an empty list means it fits.

    Fit is approximated by slice sums (each profile within its per-GPU count, summed compute and memory slices
    within the GPU's); placement offsets are not modelled.
    """
    try:
        geometry = _geometry(model)
    except ValueError as error:
        return [str(error)]
    problems = []
    compute = memory = 0
    for profile, count in devices.items():
        known = geometry.profiles.get(profile)
        if known is None:
            problems.append(
                f"unknown MIG profile {profile!r} for {model}; {model} profiles: {', '.join(geometry.profiles)}"
            )
            continue
        if isinstance(count, bool) or not isinstance(count, int):
            problems.append(f"{profile}: count must be a whole number, got {count!r}")
            continue
        if count < 1:
            problems.append(f"{profile}: count must be at least 1, got {count}")
            continue
        if count > known.max_count:
            problems.append(f"{profile}: at most {known.max_count} per {model} GPU, got {count}")
        compute += count * known.compute_slices
        memory += count * known.memory_slices
    if compute > geometry.compute_slices:
        problems.append(f"needs {compute} of {geometry.compute_slices} compute slices on {model}")
    if memory > geometry.memory_slices:
        problems.append(f"needs {memory} of {geometry.memory_slices} memory slices on {model}")
    return problems


def filter_models(ids: Sequence[str]) -> list[str]:
    """Catalog models with a PCI id among the device filter `ids`, in catalog order."""
    wanted = {_filter_id(i) for i in ids}
    return [m for m in catalog.GPU_MODELS if wanted & set(device_filter(m))]


def check_entries(model: str, entries: Sequence[GpuEntry]) -> list[str]:
    """Every reason the per-GPU layout `entries` is wrong on a node of `model` GPUs; empty when it is right.

    Each entry's MIG devices fit every GPU it configures: `model`'s when it applies to `model`, and those of the
    other catalog models its device filter names. An entry that creates MIG devices must be able to reach a MIG
    GPU of the catalog. No GPU of `model` is configured by two entries, and at least one entry applies to it.
    """
    problems = []
    applicable: list[tuple[int, GpuEntry]] = []
    for i, entry in enumerate(entries):
        where = f"entry {i} ({entry.describe()})"
        if not entry.mig_enabled and entry.mig_devices:
            problems.append(f"{where}: migDevices must be empty when migEnabled is false")
            continue
        targets = [model] if entry.applies_to(model) else []
        if entry.device_filter is not None:
            named = filter_models(entry.device_filter)
            targets += [m for m in named if m != model]
            if entry.mig_enabled and entry.mig_devices and not any(m in GEOMETRY for m in named):
                problems.append(
                    f"{where}: the device filter names no MIG-capable GPU model of the catalog "
                    f"({', '.join(sorted(GEOMETRY))}), so no GPU would get these MIG devices"
                )
        if entry.applies_to(model):
            applicable.append((i, entry))
        if entry.mig_enabled:
            for target in targets:
                on = where if target == model else f"{where} on {target}"
                problems += [f"{on}: {p}" for p in check_devices(target, entry.mig_devices)]
    seen: dict[object, int] = {}
    for i, entry in applicable:
        for gpu in (ALL_DEVICES,) if entry.devices == ALL_DEVICES else entry.devices:
            clash = next((j for key, j in seen.items() if ALL_DEVICES in (key, gpu) or key == gpu), None)
            if clash is not None:
                problems.append(
                    f"entries {clash} and {i} both configure {'every GPU' if gpu == ALL_DEVICES else f'GPU {gpu}'} "
                    f"of {model}; give each GPU one entry"
                )
                break
            seen[gpu] = i
    if not applicable:
        problems.append(
            f"no entry applies to {model}: every entry's deviceFilter leaves out its PCI ids "
            f"({', '.join(device_filter(model))}); add an entry without deviceFilter or with one of them"
        )
    return problems


def _custom_problems(model: str, name: str, value: LayoutValue) -> list[str]:
    problems = []
    if name in BUILTIN_NAMES:
        problems.append("shadows the builtin layout of that name; rename it")
    if not _LABEL_VALUE.fullmatch(name):
        problems.append(
            "the name is not a valid label value for nvidia.com/mig.config "
            "(at most 63 of A-Z a-z 0-9 - _ ., alphanumeric at both ends)"
        )
    if _is_per_gpu(value):
        if not value:
            problems.append("lists no entries")
        return problems + check_entries(model, value)
    if not value:
        problems.append(f"lists no MIG devices (use {ALL_ENABLED} for MIG mode alone)")
    return problems + check_devices(model, value)


def _custom_layout(model: str, name: str, value: LayoutValue) -> Layout:
    if _is_per_gpu(value):
        entries = tuple(e for e in value if e.applies_to(model))
        return Layout(name, any(e.mig_enabled for e in entries), {}, entries)
    return Layout(name, True, value)


def fitting_layouts(model: str, custom: Mapping[str, LayoutValue] = _EMPTY) -> list[str]:
    """Sorted names of the builtin layouts of `model` and the custom layouts (name -> devices or per-GPU entries)
    that fit it. ValueError for a model without MIG."""
    names = [name for name, layout in builtin_layouts(model).items() if not check_devices(model, layout.devices)]
    names += [name for name, value in custom.items() if not _custom_problems(model, name, value)]
    return sorted(set(names))


def resolve_layout(model: str, name: str, custom: Mapping[str, LayoutValue] = _EMPTY) -> tuple[Optional[Layout], list[str]]:
    """The layout `name` on `model`, looked up among its builtin layouts and `custom` (name -> devices or per-GPU
    entries).

    Returns (layout, []) or (None, problems); when the layout is refused the last problem lists the layouts that
    do fit the model ("layouts that fit A100-80GB: ..."). A per-GPU layout resolves to the entries that apply to
    `model`.
    """
    try:
        builtins = builtin_layouts(model)
    except ValueError as error:
        return None, [str(error)]
    fits = f"layouts that fit {model}: {', '.join(fitting_layouts(model, custom))}"
    if name in custom:
        problems = _custom_problems(model, name, custom[name])
        if problems:
            return None, [f"custom MIG layout {name!r} on {model}: {problem}" for problem in problems] + [fits]
        return _custom_layout(model, name, custom[name]), []
    if name in builtins:
        return builtins[name], []
    elsewhere = _all_builtin_names().get(name)
    if elsewhere:
        profile = next(iter(builtin_layouts(elsewhere[0])[name].devices))
        reason = (
            f"MIG layout {name!r} does not exist on {model}: profile {profile} is not a {model} profile "
            f"(the layout is for {', '.join(elsewhere)})"
        )
    else:
        reason = f"unknown MIG layout {name!r} for {model}"
        close = difflib.get_close_matches(name, fitting_layouts(model, custom), n=3)
        if close:
            reason += f" (did you mean {', '.join(close)}?)"
    return None, [reason, fits]


# ---------------------------------------------------------------------------------------------------------------
# Device plugin view


def single_strategy_problem(layout: Layout) -> Optional[str]:
    """Why `layout` cannot run under the MIG `single` strategy, or None.

    `single` needs the same MIG mode and one MIG profile type on every GPU of the node (GFD otherwise reports
    `<model>-MIG-INVALID` and the plugin refuses the node). It also needs MIG devices on every MIG-enabled GPU:
    the plugin fails with "device N has no MIG devices configured" under `single` (DP:internal/rm/device_map.go
    `assertAllMigDevicesAreValid`; under `mixed` that is only a warning), so `all-enabled` is refused too.
    """
    if layout.per_gpu:
        modes = {e.mig_enabled for e in layout.entries}
        if modes == {True, False}:
            return (
                f"MIG layout {layout.name!r} leaves some GPUs without MIG and splits others; the single MIG strategy "
                "needs the same MIG mode on every GPU of a node (the device plugin refuses the node); use the mixed "
                "strategy, or enable MIG on every GPU"
            )
        enabled = [e for e in layout.entries if e.mig_enabled]
        empty = next((e for e in enabled if not e.mig_devices), None)
        if empty is not None:
            return (
                f"MIG layout {layout.name!r} enables MIG on {empty.describe()} without MIG devices; under the single "
                "MIG strategy the device plugin refuses a MIG-enabled GPU that has none (use mixed, or give it devices)"
            )
        # One profile type across the node; the counts may differ from GPU to GPU.
        devices = {p: c for e in enabled for p, c in e.mig_devices.items()}
        return single_strategy_problem(Layout(layout.name, bool(enabled), devices))
    if not layout.mig_enabled:
        return None
    if not layout.devices:
        return (
            f"MIG layout {layout.name!r} enables MIG without MIG devices; under the single MIG strategy the "
            "device plugin refuses a MIG-enabled GPU that has none (use mixed, or a layout with MIG devices)"
        )
    if len(layout.devices) > 1:
        return (
            f"MIG layout {layout.name!r} mixes MIG profiles {', '.join(layout.devices)}; the single MIG strategy "
            "needs one profile type per node (GFD labels the product <model>-MIG-INVALID and the device plugin "
            "advertises nothing); use the mixed strategy or a single-profile layout"
        )
    return None


def mig_resource_name(profile: str) -> str:
    """The extended resource the device plugin's `mixed` strategy gives a MIG profile.

    DP:internal/rm/rm.go `AddDefaultResourcesToConfig` (k8s-device-plugin 1b826ac / v0.20.0) names each profile
    `mig-<profile>` with every `+` replaced by `.`, under the `nvidia.com/` prefix (resource names must be DNS
    subdomains: no `+`); `-` is kept. So `1g.10gb+me` -> `nvidia.com/mig-1g.10gb.me`, `1g.24gb+me.all` ->
    `nvidia.com/mig-1g.24gb.me.all`, `1g.24gb-me` -> `nvidia.com/mig-1g.24gb-me`. (DP:internal/resource/
    nvml-mig-device.go `GetName` applies the same `+` -> `.` rewrite.)
    """
    return MIG_RESOURCE_PREFIX + profile.replace("+", ".")


def resource_names(layout: Layout, strategy: str) -> dict[str, int]:
    """Extended resources the device plugin advertises for one GPU configured with a uniform `layout`.

    MIG disabled (any strategy) or strategy `none`: {"nvidia.com/gpu": 1}. `single`: {"nvidia.com/gpu": number of
    MIG devices}. `mixed`: {"nvidia.com/mig-<profile>": count} (see `mig_resource_name`). A MIG-enabled GPU
    with no MIG devices advertises nothing ({}), and so does a multi-profile layout under `single`, where the
    plugin refuses the node (see `single_strategy_problem`). Per-GPU layouts: `resources_by_gpu`.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown MIG strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")
    if layout.per_gpu:
        raise ValueError(f"MIG layout {layout.name!r} differs per GPU; use resources_by_gpu")
    if strategy == "none" or not layout.mig_enabled:
        return {GPU_RESOURCE: 1}
    if not layout.devices:
        return {}
    if strategy == "single":
        if len(layout.devices) > 1:
            return {}
        return {GPU_RESOURCE: sum(layout.devices.values())}
    return {mig_resource_name(profile): count for profile, count in sorted(layout.devices.items())}


def resources_by_gpu(layout: Layout, strategy: str) -> dict[str, dict[str, int]]:
    """Extended resources per GPU of a node: GPU index (or "all") -> what that GPU advertises (`resource_names`).
    Under `single` a node the strategy refuses advertises nothing on any GPU."""
    if not layout.per_gpu:
        return {ALL_DEVICES: resource_names(layout, strategy)}
    refused = strategy == "single" and single_strategy_problem(layout) is not None
    found: dict[str, dict[str, int]] = {}
    for entry in layout.entries:
        one = Layout(layout.name, entry.mig_enabled, entry.mig_devices)
        resources = {} if refused and entry.mig_enabled else resource_names(one, strategy)
        keys = [ALL_DEVICES] if entry.devices == ALL_DEVICES else [str(i) for i in entry.devices]
        found.update({key: resources for key in keys})
    return found


# ---------------------------------------------------------------------------------------------------------------
# mig-parted config


def device_filter(model: str) -> list[str]:
    """mig-parted device filter for a model: PCI device id then vendor 10DE, as the operator writes them
    ("0x20B210DE"). mig-parted parses these as numbers, so case only matters for a stable diff."""
    return [f"0x{pci[2:].upper()}{NVIDIA_VENDOR_ID}" for pci in catalog.GPU_MODELS[model].pci_device_ids]


# The mig-parted document itself (rendering it, reading an entry back) lives in mig_parted.py; re-exported here
# for the callers that know it as part of the catalog.
from .mig_parted import entry_from_mig_parted, mig_parted_config  # noqa: E402,F401
