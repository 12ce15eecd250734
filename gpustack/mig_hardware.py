"""`python -m gpustack inventory --mig-profiles`: the MIG profiles a GPU's driver offers, held against the catalog.

gpu-stack judges every MIG layout by components/catalogs/mig_profiles.py: a layout naming a profile the catalog
lacks is refused at config time, and one naming a profile the driver does not offer on the GPU passes the config
and then fails in the MIG manager on the node. NVML answers the driver's side on any MIG-capable GPU, with MIG
mode on or off and without changing it, so this compares the two, profile by profile: names, instances per GPU,
compute slices and memory slices (the size of the profile's placements).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, TextIO

from components.catalogs import mig_profiles
from gpustack.inventory import CATALOG_MODELS, EXIT_DRIFT, EXIT_NO_GPU, EXIT_OK, inventory_header
from gpustack_agent.inventory import inventory as agent
from gpustack_agent.inventory.drift import gpu_list
from gpustack_agent.inventory.inventory import Inventory, MigProfileInfo, NvmlUnavailable


def read_with_profiles() -> Inventory:
    return agent.read_inventory(CATALOG_MODELS, mig_profiles=True)


@dataclass(frozen=True)
class ProfileTable:
    """The profile table of one group of GPUs that share model and profiles, and how the catalog differs."""

    label: str
    model: Optional[str]
    gpus: tuple[agent.Gpu, ...]
    profiles: tuple[MigProfileInfo, ...]
    problems: tuple[str, ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "label": self.label,
            "gpus": [gpu.index for gpu in self.gpus],
            "profiles": [profile.as_json() for profile in self.profiles],
            "catalogAgrees": not self.problems,
            "problems": list(self.problems),
        }


def _slices(value: Optional[int], total: int) -> str:
    return "?" if value is None else f"{value}/{total}"


def profile_differences(known: Optional[mig_profiles.MigProfile], info: MigProfileInfo) -> list[str]:
    """How the catalog's entry for one profile differs from what the driver offers (known: the catalog's entry)."""
    if known is None:
        return []
    differences = []
    if known.max_count != info.instances:
        differences.append(f"{info.name}: {info.instances} per GPU by the driver, {known.max_count} in the catalog")
    if known.compute_slices != info.compute_slices:
        differences.append(f"{info.name}: {info.compute_slices} compute slices by the driver, "
                           f"{known.compute_slices} in the catalog")
    if info.memory_slices is not None and known.memory_slices != info.memory_slices:
        differences.append(f"{info.name}: {info.memory_slices} memory slices by the driver, "
                           f"{known.memory_slices} in the catalog")
    return differences


def catalog_problems(model: Optional[str], label: str, offered: Sequence[MigProfileInfo], driver: str) -> list[str]:
    """Each way the catalog's profiles for `model` differ from what driver `driver` offers on the GPU."""
    geometry = mig_profiles.GEOMETRY.get(model or "")
    if geometry is None:
        names = ", ".join(p.name for p in offered)
        return [f"gpu-stack's MIG catalog has no {label}, so every MIG layout for it is refused; the driver offers {names}"]
    problems = []
    for info in offered:
        known = geometry.profiles.get(info.name)
        if known is None:
            problems.append(f"{info.name}: driver {driver} offers it ({info.instances} per GPU) but the catalog lacks "
                            f"it, so gpu-stack refuses a layout that uses it")
        problems += profile_differences(known, info)
    offered_names = {info.name for info in offered}
    for name in geometry.profiles:
        if name not in offered_names:
            problems.append(f"{name}: in the catalog, but driver {driver} does not offer it on this GPU, so a layout "
                            f"that uses it passes gpu-stack and fails in the MIG manager")
    return problems


def profile_tables(inventory: Inventory) -> list[ProfileTable]:
    """One table per group of MIG-capable GPUs with the same model and profiles, in GPU order."""
    groups: dict[tuple[str, tuple[MigProfileInfo, ...]], list[agent.Gpu]] = {}
    for gpu in inventory.gpus:
        if gpu.mig_mode is not None:
            groups.setdefault((gpu.label, gpu.mig_profiles), []).append(gpu)
    return [
        ProfileTable(label, gpus[0].model, tuple(gpus), profiles,
                     tuple(catalog_problems(gpus[0].model, label, profiles, inventory.driver_version)))
        for (label, profiles), gpus in groups.items()
    ]


def table_lines(table: ProfileTable) -> list[str]:
    geometry = mig_profiles.GEOMETRY.get(table.model or "")
    compute = geometry.compute_slices if geometry else max((p.compute_slices for p in table.profiles), default=0)
    memory = geometry.memory_slices if geometry else max((p.memory_slices or 0 for p in table.profiles), default=0)
    known = geometry.profiles if geometry else {}
    rows = [("PROFILE", "NVML ID", "COMPUTE", "MEMORY", "PER GPU", "MEMORY MiB", "CATALOG")]
    for p in table.profiles:
        entry = known.get(p.name)
        verdict = "missing" if entry is None else ("differs" if profile_differences(entry, p) else "ok")
        rows.append((p.name, str(p.nvml_id), _slices(p.compute_slices, compute), _slices(p.memory_slices, memory),
                     str(p.instances), str(p.memory_mib), verdict))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [f"{table.label} ({gpu_list(table.gpus)}): {len(table.profiles)} GPU instance profiles"]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    if table.problems:
        lines.append(f"{table.label}: the catalog differs from the driver:")
        lines += [f"  {problem}" for problem in table.problems]
    else:
        lines.append(f"{table.label}: the catalog agrees with the driver")
    return lines


def run(
    *,
    as_json: bool = False,
    read: Callable[[], Inventory] = read_with_profiles,
    out: Optional[TextIO] = None,
    err: Optional[TextIO] = None,
) -> int:
    """`inventory --mig-profiles`: 0 when the catalog agrees (or no GPU runs MIG), 1 when it differs, 3 without NVML."""
    out, err = out or sys.stdout, err or sys.stderr
    try:
        found = read()
    except NvmlUnavailable as exc:
        print(f"gpustack inventory: {exc}", file=err)
        return EXIT_NO_GPU
    tables = profile_tables(found)
    code = EXIT_DRIFT if any(table.problems for table in tables) else EXIT_OK
    without = [gpu for gpu in found.gpus if gpu.mig_mode is None]
    if as_json:
        document = {
            "driverVersion": found.driver_version,
            "tables": [table.as_json() for table in tables],
            "withoutMig": [{"index": gpu.index, "label": gpu.label} for gpu in without],
        }
        print(json.dumps(document, indent=2), file=out)
        return code
    lines = [inventory_header(found)]
    for table in tables:
        lines += [""] + table_lines(table)
    for label in dict.fromkeys(gpu.label for gpu in without):
        gpus = [gpu for gpu in without if gpu.label == label]
        lines += ["", f"{label} ({gpu_list(gpus)}): no MIG"]
    print("\n".join(lines), file=out)
    return code
