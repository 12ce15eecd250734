"""MIG geometry of every MIG-capable GPU model, the MIG manager's layouts, and what each layout advertises.

Pure data and pure functions (no Pulumi): the config validator, the MIG manager component and the tests all call
these. Models are keyed by the names in `catalog.GPU_MODELS`.

Sources (fact sheet = /work/shared/reference/gpu-operator.md):

* Profiles, per-GPU counts and `all-balanced` devices: fact sheet §6.5, checked against the operator's
  `default-mig-parted-config` (GO:assets/state-mig-manager/0400_configmap.yaml at a22dbf6 / v26.7.0).
* mig-parted config shape: fact sheet §6.4 and MP:api/spec/v1/spec.go (`device-filter` is a string or a list;
  `mig-devices` is required when `mig-enabled` is true and must be empty when it is false).
* Resource naming: see `resource_names` below (DP:internal/rm/rm.go, DP:internal/rm/device_map.go).

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
from typing import Mapping, Optional

from . import catalog

NVIDIA_VENDOR_ID = "10DE"
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
STRATEGIES = ("none", "single", "mixed")

ALL_DISABLED = "all-disabled"
ALL_ENABLED = "all-enabled"
ALL_BALANCED = "all-balanced"

# A layout is picked with the node label `nvidia.com/mig.config=<name>`, so a name must be a label value.
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
# "<compute>g.<memory>gb" optionally followed by a qualifier: "+me", "-me", "+gfx", "+me.all".
_PROFILE = re.compile(r"^(?P<compute>[1-9]\d*)g\.(?P<memory>[1-9]\d*)gb(?P<qualifier>[-+][a-z.]+)?$")

_EMPTY: Mapping = MappingProxyType({})


@dataclass(frozen=True)
class MigProfile:
    name: str
    compute_slices: int
    memory_slices: int
    max_count: int  # how many of this profile alone fit on one GPU (the operator's `all-<profile>` count)


@dataclass(frozen=True)
class MigGeometry:
    model: str
    compute_slices: int
    memory_slices: int
    profiles: dict[str, MigProfile]  # in (compute, memory, name) order
    balanced: dict[str, int]  # the operator's `all-balanced` devices for this model, profile -> count per GPU


@dataclass(frozen=True)
class Layout:
    name: str
    mig_enabled: bool
    devices: dict[str, int] = field(default_factory=dict)  # empty for all-disabled / all-enabled

    def __post_init__(self) -> None:
        object.__setattr__(self, "devices", dict(self.devices))


# model -> (compute slices, memory slices, {profile: max count per GPU}, all-balanced devices)
#
# Everything is the fact sheet §6.5 table. The operator file's family comments are loose and its single-profile
# entries mostly carry no device filter, so where the table does not name a profile for a model it is left out,
# except where noted:
_TABLE: dict[str, tuple[int, int, dict[str, int], dict[str, int]]] = {
    "A30": (4, 4, {"1g.6gb": 4, "1g.6gb+me": 1, "2g.12gb": 2, "2g.12gb+me": 1, "4g.24gb": 1},
            {"1g.6gb": 2, "2g.12gb": 1}),
    # 1g.10gb is x4 here: the operator's `all-1g.10gb` has a device-filtered A100-40GB entry.
    "A100-40GB": (7, 8, {"1g.5gb": 7, "1g.5gb+me": 1, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1,
                         "7g.40gb": 1},
                  {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}),
    # A100-80GB and H100-80GB share one row (and one device filter) in the operator file.
    "A100-80GB": (7, 8, {"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1,
                         "7g.80gb": 1},
                  {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),
    "H100-80GB": (7, 8, {"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1,
                         "7g.80gb": 1},
                  {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),
    "H100-NVL": (7, 8, {"1g.12gb": 7, "1g.12gb+me": 1, "1g.24gb": 4, "2g.24gb": 3, "3g.47gb": 2, "4g.47gb": 1,
                        "7g.94gb": 1},
                 {"1g.12gb": 2, "2g.24gb": 1, "3g.47gb": 1}),
    # The table gives H100-96GB 1g.12gb / 1g.24gb / 2g.24gb "above" (the H100 NVL counts) but not 1g.12gb+me, so
    # it is left out although the operator file files `all-1g.12gb.me` under a comment naming GH200 (whose 96 GB
    # part, 0x2342, is in this model's filter). Inference: counts 7 / 4 / 3 as on H100 NVL.
    "H100-96GB": (7, 8, {"1g.12gb": 7, "1g.24gb": 4, "2g.24gb": 3, "3g.48gb": 2, "4g.48gb": 1, "7g.96gb": 1},
                  {"1g.12gb": 2, "2g.24gb": 1, "3g.48gb": 1}),
    # `all-1g.35gb` is x4 for H200 (the operator filters it to 0x2335 only; here it applies to both H200 ids).
    "H200": (7, 8, {"1g.18gb": 7, "1g.18gb+me": 1, "1g.35gb": 4, "2g.35gb": 3, "3g.71gb": 2, "4g.71gb": 1,
                    "7g.141gb": 1},
             {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}),
    # GH200 144G HBM3e; 1g.18gb / 1g.18gb+me are shared with H200 (table).
    "GH200": (7, 8, {"1g.18gb": 7, "1g.18gb+me": 1, "1g.36gb": 4, "2g.36gb": 3, "3g.72gb": 2, "4g.72gb": 1,
                     "7g.144gb": 1},
              {"1g.18gb": 2, "2g.36gb": 1, "3g.72gb": 1}),
    "B200": (7, 8, {"1g.23gb": 7, "1g.23gb+me": 1, "1g.45gb": 4, "2g.45gb": 3, "3g.90gb": 2, "4g.90gb": 1,
                    "7g.180gb": 1},
             {"1g.23gb": 2, "2g.45gb": 1, "3g.90gb": 1}),
    # The table's GB200 single-profile column lacks 1g.23gb, but its all-balanced uses 1g.23gb and the operator
    # files `all-1g.23gb` (x7) and `all-1g.23gb.me` (x1) under "GB200, B200": both kept (inference).
    # Left out: 7g.189gb, 3g.95gb, 4g.95gb (no device filter, no table attribution): they add up to 189 GB, which
    # is not the 186 GB GB200 in catalog.py; one GPU has one full-GPU profile.
    "GB200": (7, 8, {"1g.23gb": 7, "1g.23gb+me": 1, "1g.47gb": 4, "2g.47gb": 3, "3g.93gb": 2, "4g.93gb": 1,
                     "7g.186gb": 1},
              {"1g.23gb": 2, "2g.47gb": 1, "3g.93gb": 1}),
    "B300": (7, 8, {"1g.34gb": 7, "1g.34gb+me": 1, "1g.67gb": 4, "2g.67gb": 3, "3g.135gb": 2, "4g.135gb": 1,
                    "7g.269gb": 1},
             {"1g.34gb": 2, "2g.67gb": 1, "3g.135gb": 1}),
    # `all-1g.35gb` is x7 on GB300 (device-filtered entry in the operator file).
    "GB300": (7, 8, {"1g.35gb": 7, "1g.35gb+me": 1, "1g.70gb": 4, "2g.70gb": 3, "3g.139gb": 2, "4g.139gb": 1,
                     "7g.278gb": 1},
              {"1g.35gb": 2, "2g.70gb": 1, "3g.139gb": 1}),
    # RTX PRO 6000 96GB. Its all-balanced uses plain 1g.24gb, which the table's single-profile column omits; the
    # operator's `all-1g.24gb` is x4 (inference: kept, x4). `all-1g.24gb.me` (1g.24gb+me) is attributed to no
    # model by the table and is left out.
    "RTX-PRO-6000": (4, 4, {"1g.24gb": 4, "1g.24gb+gfx": 4, "1g.24gb-me": 4, "1g.24gb+me.all": 1, "2g.48gb": 2,
                            "2g.48gb+gfx": 2, "2g.48gb-me": 2, "2g.48gb+me.all": 1, "4g.96gb": 1, "4g.96gb+gfx": 1},
                     {"1g.24gb": 2, "2g.48gb": 1}),
}


def _parse(profile: str) -> tuple[int, int]:
    """(compute slices, memory GB) from a profile name such as `3g.40gb` or `1g.24gb+me.all`."""
    match = _PROFILE.match(profile)
    if not match:
        raise ValueError(f"malformed MIG profile name {profile!r}")
    return int(match["compute"]), int(match["memory"])


def _build(model: str, compute: int, memory: int, counts: dict[str, int], balanced: dict[str, int]) -> MigGeometry:
    full_gb = {_parse(p)[1] for p in counts if _parse(p)[0] == compute}
    if len(full_gb) != 1:
        raise ValueError(f"{model}: expected one full-GPU ({compute}g) memory size, found {sorted(full_gb)}")
    (total_gb,) = full_gb
    profiles = {}
    for name, count in counts.items():
        gi, gb = _parse(name)
        # Memory slices from the profile's share of the full GPU's memory: sizes are rounded to whole GB
        # (1g.12gb of 94 GB is 1.02 slices, 1g.23gb of 186 GB is 0.99), so anything not near a whole number is a typo.
        share = gb * memory / total_gb
        slices = round(share)
        if slices < 1 or abs(share - slices) > 0.1:
            raise ValueError(f"{model}: {name} is {share:.2f} of {memory} memory slices")
        profiles[name] = MigProfile(name, gi, slices, count)
    ordered = dict(sorted(profiles.items(), key=lambda kv: (kv[1].compute_slices, kv[1].memory_slices, kv[0])))
    return MigGeometry(model, compute, memory, ordered, dict(balanced))


GEOMETRY: dict[str, MigGeometry] = {model: _build(model, *row) for model, row in _TABLE.items()}


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


def _custom_problems(model: str, name: str, devices: Mapping[str, int]) -> list[str]:
    problems = []
    if name in BUILTIN_NAMES:
        problems.append("shadows the builtin layout of that name; rename it")
    if not _LABEL_VALUE.match(name):
        problems.append(
            "the name is not a valid label value for nvidia.com/mig.config "
            "(at most 63 of A-Z a-z 0-9 - _ ., alphanumeric at both ends)"
        )
    if not devices:
        problems.append(f"lists no MIG devices (use {ALL_ENABLED} for MIG mode alone)")
    problems += check_devices(model, devices)
    return problems


def fitting_layouts(model: str, custom: Mapping[str, Mapping[str, int]] = _EMPTY) -> list[str]:
    """Sorted names of the builtin layouts of `model` and the custom layouts (name -> devices) that fit it.
    ValueError for a model without MIG."""
    names = [name for name, layout in builtin_layouts(model).items() if not check_devices(model, layout.devices)]
    names += [name for name, devices in custom.items() if not _custom_problems(model, name, devices)]
    return sorted(set(names))


def resolve_layout(
    model: str, name: str, custom: Mapping[str, Mapping[str, int]] = _EMPTY
) -> tuple[Optional[Layout], list[str]]:
    """The layout `name` on `model`, looked up among its builtin layouts and `custom` (name -> devices).

    Returns (layout, []) or (None, problems); when the layout is refused the last problem lists the layouts that
    do fit the model ("layouts that fit A100-80GB: ...").
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
        return Layout(name, True, custom[name]), []
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

    `single` needs one MIG profile type on every GPU of the node (GFD otherwise reports `<model>-MIG-INVALID`
    and the plugin refuses the node). It also needs MIG devices on every MIG-enabled GPU: the plugin fails with
    "device N has no MIG devices configured" under `single` (DP:internal/rm/device_map.go
    `assertAllMigDevicesAreValid`; under `mixed` that is only a warning), so `all-enabled` is refused too.
    """
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
            "needs one profile type per GPU (GFD labels the product <model>-MIG-INVALID and the device plugin "
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
    """Extended resources the device plugin advertises for one GPU configured with `layout`.

    MIG disabled (any strategy) or strategy `none`: {"nvidia.com/gpu": 1}. `single`: {"nvidia.com/gpu": number of
    MIG devices}. `mixed`: {"nvidia.com/mig-<profile>": count} (see `mig_resource_name`). A MIG-enabled GPU
    with no MIG devices advertises nothing ({}), and so does a multi-profile layout under `single`, where the
    plugin refuses the node (see `single_strategy_problem`).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown MIG strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")
    if strategy == "none" or not layout.mig_enabled:
        return {GPU_RESOURCE: 1}
    if not layout.devices:
        return {}
    if strategy == "single":
        if len(layout.devices) > 1:
            return {}
        return {GPU_RESOURCE: sum(layout.devices.values())}
    return {mig_resource_name(profile): count for profile, count in sorted(layout.devices.items())}


# ---------------------------------------------------------------------------------------------------------------
# mig-parted config


def device_filter(model: str) -> list[str]:
    """mig-parted device filter for a model: PCI device id then vendor 10DE, as the operator writes them
    ("0x20B210DE"). mig-parted parses these as numbers, so case only matters for a stable diff."""
    return [f"0x{pci[2:].upper()}{NVIDIA_VENDOR_ID}" for pci in catalog.GPU_MODELS[model].pci_device_ids]


def _entry(model: str, devices: Mapping[str, int]) -> dict:
    order = GEOMETRY[model].profiles
    ordered = sorted(devices.items(), key=lambda kv: list(order).index(kv[0]) if kv[0] in order else len(order))
    return {
        "device-filter": device_filter(model),
        "devices": "all",
        "mig-enabled": True,
        "mig-devices": dict(ordered),
    }


def mig_parted_config(custom: Mapping[str, Mapping[str, Mapping[str, int]]] = _EMPTY) -> dict:
    """The mig-parted config document (`version: v1`, `mig-configs`) the stack mounts into the MIG manager.

    `all-disabled` / `all-enabled` are single unfiltered entries. Every other builtin layout has one entry per
    model that has it, filtered to that model's PCI ids; `custom` (layout name -> {model: devices}) adds one
    filtered entry per model. Layouts sorted by name, entries by model.

    One entry per model, where the operator merges models with identical profiles under one filter (A100-80GB
    and H100-80GB): each entry then traces to one catalog model, filters never overlap, and a per-model count
    (`all-1g.10gb` is x4 on A100-40GB, x7 elsewhere) needs no special case. GPUs outside catalog.GPU_MODELS
    match no filtered entry and are left alone by those layouts.

    ValueError listing every problem when a custom layout is invalid for one of its models.
    """
    problems = []
    for name, per_model in sorted(custom.items()):
        if not per_model:
            problems.append(f"custom MIG layout {name!r} names no GPU model")
        for model, devices in sorted(per_model.items()):
            problems += [f"custom MIG layout {name!r} on {model}: {p}" for p in _custom_problems(model, name, devices)]
    if problems:
        raise ValueError("invalid custom MIG layouts:\n  " + "\n  ".join(problems))

    configs: dict[str, list[dict]] = {
        ALL_DISABLED: [{"devices": "all", "mig-enabled": False}],
        ALL_ENABLED: [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
    }
    for model in sorted(GEOMETRY):
        for name, layout in builtin_layouts(model).items():
            if layout.devices:
                configs.setdefault(name, []).append(_entry(model, layout.devices))
    for name, per_model in custom.items():
        configs[name] = [_entry(model, devices) for model, devices in sorted(per_model.items())]
    return {"version": "v1", "mig-configs": dict(sorted(configs.items()))}
