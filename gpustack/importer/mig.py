"""A mig-parted layout (the entry list of one `mig-configs` name in a MIG manager ConfigMap) as a
`gpu-stack:migLayouts` value.

mig-parted writes entries as `{device-filter?, devices: all | [indices], mig-enabled, mig-devices}` (fact sheet §6.4,
MP:api/spec/v1/spec.go); gpu-stack's per-GPU form is the same entries written camelCase (components/config/pools.py
`MigLayoutEntry`). Whether the layout fits a pool's GPU model is the config's check, not this module's: the stack
file the importer writes is loaded like any other.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

from components.catalogs import mig_catalog

LayoutValue = Union[dict[str, int], list[dict[str, Any]]]


def _config_entry(entry: mig_catalog.GpuEntry) -> dict[str, Any]:
    written: dict[str, Any] = {"devices": entry.devices if entry.devices == mig_catalog.ALL_DEVICES else list(entry.devices)}
    if entry.device_filter:
        written["deviceFilter"] = list(entry.device_filter)
    written["migEnabled"] = entry.mig_enabled
    if entry.mig_devices:
        written["migDevices"] = dict(entry.mig_devices)
    return written


def layout_from_mig_parted(entries: Sequence[Any]) -> tuple[Optional[LayoutValue], str]:
    """(migLayouts value, "") for a mig-parted entry list, or (None, why it cannot be carried).

    The value is the uniform `{profile: count}` form when every entry gives all its GPUs (`devices: all`) the same
    MIG devices (entries that differ only in their device filter, like the operator's per-model entries: the
    stack adds the pool's own filter back when it renders the layout). Otherwise it is the per-GPU list, one
    camelCase entry per mig-parted entry, in order: `devices`, `deviceFilter` (when the entry has one),
    `migEnabled`, `migDevices` (when not empty).
    """
    if isinstance(entries, (str, bytes)) or not isinstance(entries, Sequence):
        return None, f"a mig-parted layout is a list of entries, got {type(entries).__name__}"
    if not entries:
        return None, "the layout has no entries"
    parsed = []
    for i, raw in enumerate(entries):
        try:
            parsed.append(mig_catalog.entry_from_mig_parted(raw))
        except ValueError as error:
            return None, f"entry {i}: {error}"
    first = parsed[0]
    uniform = all(
        e.devices == mig_catalog.ALL_DEVICES and e.mig_enabled and e.mig_devices and e.mig_devices == first.mig_devices
        for e in parsed
    )
    if uniform:
        return dict(first.mig_devices), ""
    return [_config_entry(e) for e in parsed], ""
