"""How a node's GPUs depart from its pool: the checks both the node agent and gpu-stack's CLI make.

The agent judges what the node-pools ConfigMap carries (declared GPU model, the pool's MIG layout label and
workload type) and writes the result as two node annotations; `python -m gpustack inventory` adds the checks
that need the whole stack configuration (driver plan, layout geometry). What the hardware is comes from
:mod:`.inventory`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from gpustack_agent.inventory.inventory import Gpu, Inventory, MODELS, ModelSpec, NvmlUnavailable, sorted_devices
from gpustack_agent.model import driverimages
from gpustack_agent.model.labels import Config, parse_config, POOL_LABEL

INVENTORY_ANNOTATION = "gpu-stack/inventory"
DRIFT_ANNOTATION = "gpu-stack/drift"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
WORKLOAD_CONFIG_LABEL = "nvidia.com/gpu.workload.config"
MIG_DISABLED_LAYOUT = "all-disabled"

# NVIDIA quotes GPU memory in decimal GB, and NVML reports what is left after the driver's reservations, so a
# healthy GPU lands a little above or below the quoted figure (an L4 reports 23034 MiB = 24.15 GB, an H100
# 80GB 81559 MiB = 85.5 GB). Only a shortfall beyond that spread means a smaller part.
MEMORY_TOLERANCE = 0.95


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
    unlisted = driverimages.unlisted_reason(node_labels, name, pool.driver_images) if pool.driver_images else None
    if unlisted:
        problems.append(Drift("node-image", f"the node {unlisted}"))
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
