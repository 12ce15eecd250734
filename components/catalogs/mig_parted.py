"""mig-parted documents: the config the MIG manager reads (built-in and custom layouts), and an entry read back.

Standard library only, like the rest of the MIG catalog (mig_catalog.py holds the layouts and fit checks; the
policy pack carries a copy of both). Shape: fact sheet §6.4 and MP:api/spec/v1/spec.go: `version: v1`,
`mig-configs: {<name>: [{device-filter?, devices: all | [indices], mig-enabled, mig-devices}]}`.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

from .mig_catalog import (
    ALL_DEVICES,
    ALL_DISABLED,
    ALL_ENABLED,
    GEOMETRY,
    PROFILE_NAME,
    GpuEntry,
    LayoutValue,
    _custom_problems,
    _EMPTY,
    _is_per_gpu,
    builtin_layouts,
    device_filter,
    filter_models,
)


def _ordered(devices: Mapping[str, int], models: Sequence[str]) -> dict[str, int]:
    """Devices in the profile order of the first MIG model among `models` (smallest profiles first)."""
    order = next((list(GEOMETRY[m].profiles) for m in models if m in GEOMETRY), sorted(devices))
    return dict(sorted(devices.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))


def _render(entry: GpuEntry, models: Sequence[str], filter_ids: Optional[Sequence[str]]) -> dict:
    rendered: dict = {"device-filter": list(filter_ids)} if filter_ids else {}
    rendered["devices"] = ALL_DEVICES if entry.devices == ALL_DEVICES else list(entry.devices)
    rendered["mig-enabled"] = entry.mig_enabled
    if entry.mig_enabled:
        rendered["mig-devices"] = _ordered(entry.mig_devices, models)
    return rendered


def _entries(per_model: Mapping[str, LayoutValue]) -> list[dict]:
    """mig-parted entries of one custom layout used on `per_model`'s models. A uniform layout gets one entry per
    model, filtered to its PCI ids. A per-GPU layout keeps its entries in order: an entry with a device filter once,
    as written; one without, once per model with that model's filter, so it never touches GPUs of other models."""
    models = sorted(per_model)
    value = per_model[models[0]]
    if not _is_per_gpu(value):
        return [_render(GpuEntry(ALL_DEVICES, True, per_model[m]), [m], device_filter(m)) for m in models]
    rendered = []
    for entry in value:
        if entry.device_filter is not None:
            rendered.append(_render(entry, filter_models(entry.device_filter), entry.device_filter))
        else:
            rendered += [_render(entry, [m], device_filter(m)) for m in models]
    return rendered


def mig_parted_config(custom: Mapping[str, Mapping[str, LayoutValue]] = _EMPTY) -> dict:
    """The mig-parted config document (`version: v1`, `mig-configs`) the stack mounts into the MIG manager.

    `all-disabled` / `all-enabled` are single unfiltered entries. Every other builtin layout has one entry per
    model that has it, filtered to that model's PCI ids; `custom` (layout name -> {model: devices or per-GPU
    entries}, one value per layout) adds its entries (see `_entries`). Layouts sorted by name, entries by model.

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
        for model, value in sorted(per_model.items()):
            problems += [f"custom MIG layout {name!r} on {model}: {p}" for p in _custom_problems(model, name, value)]
    if problems:
        raise ValueError("invalid custom MIG layouts:\n  " + "\n  ".join(problems))

    configs: dict[str, list[dict]] = {
        ALL_DISABLED: [{"devices": ALL_DEVICES, "mig-enabled": False}],
        ALL_ENABLED: [{"devices": ALL_DEVICES, "mig-enabled": True, "mig-devices": {}}],
    }
    for model in sorted(GEOMETRY):
        for name, layout in builtin_layouts(model).items():
            if layout.devices:
                configs.setdefault(name, []).append(_render(GpuEntry(ALL_DEVICES, True, layout.devices), [model], device_filter(model)))
    for name, per_model in custom.items():
        configs[name] = _entries(per_model)
    return {"version": "v1", "mig-configs": dict(sorted(configs.items()))}


def entry_from_mig_parted(raw: Mapping) -> GpuEntry:
    """A `GpuEntry` from one mig-parted entry (`device-filter`, `devices`, `mig-enabled`, `mig-devices`), as a
    mig-parted config file writes it. ValueError naming what is malformed."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"an entry is a mapping, got {type(raw).__name__}")
    unknown = sorted(set(raw) - {"device-filter", "devices", "mig-enabled", "mig-devices"})
    if unknown:
        raise ValueError(f"unknown keys {', '.join(map(str, unknown))}")
    devices = raw.get("devices")
    if devices != ALL_DEVICES and not (
        isinstance(devices, list) and devices and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in devices)
    ):
        raise ValueError(f"devices is {devices!r}; mig-parted takes 'all' or a list of GPU indices")
    enabled = raw.get("mig-enabled")
    if not isinstance(enabled, bool):
        raise ValueError(f"mig-enabled is {enabled!r}; mig-parted takes true or false")
    mig_devices = raw.get("mig-devices") or {}
    if not isinstance(mig_devices, Mapping) or not all(
        isinstance(p, str) and PROFILE_NAME.fullmatch(p) and isinstance(c, int) and not isinstance(c, bool) and c >= 1
        for p, c in mig_devices.items()
    ):
        raise ValueError(f"mig-devices is {mig_devices!r}; mig-parted takes {{<profile>: <count of at least 1>}}")
    raw_filter = raw.get("device-filter")
    filters = None if raw_filter is None else [raw_filter] if isinstance(raw_filter, str) else list(raw_filter)
    return GpuEntry(ALL_DEVICES if devices == ALL_DEVICES else tuple(devices), enabled, dict(mig_devices), tuple(filters) if filters else None)
