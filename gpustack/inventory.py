"""`python -m gpustack inventory [--stack NAME] [--pool NAME] [--json]`: this machine's GPUs against a stack.

The NVML read is the node agent's (node_images/node-agent/gpustack_agent/inventory/inventory.py), imported from the
checkout so the CLI and the agent running in the cluster can never read the hardware differently. This module
adds what needs the whole stack: the pool entry a node like this one gets, and every disagreement with the
pools that could hold it (model, memory, MIG mode and layout, driver plan, workload type).

Exit codes: 0 the node fits a pool (or no --stack); 1 it fits none (every disagreement printed); 2 invalid
stack or unknown --pool; 3 no NVML, no driver, no GPU or an NVML error (message on stderr).
"""

from __future__ import annotations

import json
import re
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, TextIO

import yaml

from components.catalogs import catalog
from components.catalogs import mig_catalog
from components.kit import sharing
from components.config import DIGEST, LABEL_VALUE, MIG_LAYOUT_NAME, OS_TAG, NodePool, StackConfig

AGENT_DIR = Path(__file__).resolve().parent.parent / "node_images" / "node-agent"
# The agent is not an installed package (its image copies it next to the entrypoint); tests/test_node_labeling.py
# reaches it the same way.
if str(AGENT_DIR) not in sys.path:
    sys.path.insert(0, str(AGENT_DIR))

from gpustack_agent.inventory import drift as agent_drift  # noqa: E402
from gpustack_agent.inventory import inventory as agent  # noqa: E402
from gpustack_agent.inventory.drift import Drift  # noqa: E402
from gpustack_agent.inventory.inventory import Inventory, NvmlUnavailable  # noqa: E402

EXIT_OK, EXIT_DRIFT, EXIT_CONFIG, EXIT_NO_GPU = 0, 1, 2, 3
HOSTNAME_LABEL = "kubernetes.io/hostname"
OS_RELEASE = Path("/etc/os-release")

# The catalog itself, in the shape the agent's read and checks take.
CATALOG_MODELS: dict[str, agent.ModelSpec] = {
    m.name: agent.ModelSpec(m.name, m.pci_device_ids, m.memory_gib, m.mig_capable) for m in catalog.GPU_MODELS.values()
}

__all__ = ["Drift", "Inventory", "NvmlUnavailable", "compare", "read_inventory", "suggest_pool", "suggest_mig_layouts"]


def read_inventory() -> Inventory:
    """This machine's GPUs through NVML, matched to catalog models; NvmlUnavailable when there are none to read."""
    return agent.read_inventory(CATALOG_MODELS)


# ---------------------------------------------------------------------------------------------------------------
# The pool entry a node like this one gets


class NoPoolEntry(ValueError):
    """No single nodePools entry can describe the node."""


def local_hostname() -> str:
    return socket.gethostname()


def local_os_tag(path: Path = OS_RELEASE) -> Optional[str]:
    """The OS as NFD reports it (ID + VERSION_ID, e.g. ubuntu22.04), when it is one a pool's `os` accepts."""
    try:
        text = path.read_text()
    except OSError:
        return None
    fields = dict(re.findall(r'^([A-Z_]+)="?([^"\n]*)"?$', text, re.MULTILINE))
    os_id, version = fields.get("ID", ""), fields.get("VERSION_ID", "")
    for tag in (f"{os_id}{version}", f"{os_id}{version.split('.')[0]}"):
        if OS_TAG.fullmatch(tag):
            return tag
    return None


def _pool_name(model: str) -> str:
    return model.lower()


def _layout_for(model: str, devices: Mapping[str, int]) -> tuple[str, bool]:
    """(layout name, is custom): the builtin layout creating exactly `devices`, or a custom one named after them."""
    for name, layout in mig_catalog.builtin_layouts(model).items():
        if layout.devices and dict(layout.devices) == dict(devices):
            return name, False
    name = _pool_name(model) + "-" + "-".join(f"{n}x{p.replace('+', '.')}" for p, n in agent.sorted_devices(devices).items())
    # A layout name is a node label value: past 63 characters fall back to a plain one.
    return (name if MIG_LAYOUT_NAME.fullmatch(name) else f"{_pool_name(model)}-layout"), True


def _current_layout(inventory: Inventory) -> Optional[tuple[str, dict[str, int], bool]]:
    """(name, devices, is custom) when every GPU runs MIG with the same devices; mig-parted applies one layout per
    node, so anything else has no layout to declare."""
    if any(gpu.mig_mode != "enabled" for gpu in inventory.gpus):
        return None
    distinct = {json.dumps(dict(gpu.mig_devices), sort_keys=True) for gpu in inventory.gpus}
    if len(distinct) != 1:
        return None
    devices = json.loads(distinct.pop())
    model = inventory.gpus[0].model
    if not devices or model not in mig_catalog.GEOMETRY:
        return None
    name, custom = _layout_for(model, devices)
    return name, devices, custom


def _single_model(inventory: Inventory) -> str:
    groups = inventory.by_label()
    if len(groups) > 1:
        parts = ", ".join(f"{len(gpus)}x {label}" for label, gpus in groups.items())
        raise NoPoolEntry(f"the node mixes GPU models ({parts}); a pool declares one gpuModel")
    gpu = inventory.gpus[0]
    if gpu.model is None:
        raise NoPoolEntry(
            f"{gpu.name} ({gpu.pci_device_id}) is not in gpu-stack's catalog (components/catalogs/catalog.py), so no pool can "
            "declare it"
        )
    return gpu.model


def suggest_pool(inventory: Inventory, *, hostname: str, os_tag: Optional[str] = None) -> dict[str, Any]:
    """The `gpu-stack:nodePools` entry for this node, with the stack files' camelCase keys.

    It selects the node by `kubernetes.io/hostname` (the one label known without the cluster; widen it to the
    node group's label for a pool), and declares the MIG layout the GPUs run now, under the mixed strategy,
    which serves every layout. NoPoolEntry for mixed or unknown GPUs."""
    model = _single_model(inventory)
    host = hostname.lower()
    # A hostname that is no label value (an FQDN past 63 characters) leaves the empty selector: every GPU node.
    entry: dict[str, Any] = {
        "name": _pool_name(model),
        "nodeSelector": {HOSTNAME_LABEL: host} if len(host) <= 63 and LABEL_VALUE.fullmatch(host) else {},
        "gpuModel": model,
    }
    if os_tag is not None:
        entry["os"] = os_tag
    current = _current_layout(inventory)
    if current is not None:
        entry["sharing"] = {"strategy": "mig-mixed", "migLayout": current[0]}
    return entry


def suggest_mig_layouts(inventory: Inventory) -> dict[str, dict[str, int]]:
    """The `gpu-stack:migLayouts` entry the suggested pool needs when its GPUs run a layout no builtin creates."""
    current = _current_layout(inventory)
    if current is None or not current[2]:
        return {}
    return {current[0]: current[1]}


# ---------------------------------------------------------------------------------------------------------------
# Comparing with a stack


class UnknownPool(ValueError):
    pass


@dataclass
class PoolVerdict:
    pool: str
    gpu_model: str
    disagreements: list[Drift] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return not self.disagreements

    def as_json(self) -> dict[str, Any]:
        return {
            "pool": self.pool,
            "gpuModel": self.gpu_model,
            "fits": self.fits,
            "disagreements": [d.as_json() for d in self.disagreements],
            "notes": list(self.notes),
        }


@dataclass
class Comparison:
    node: list[Drift]  # whatever the pool: mixed models, short memory, no pool declaring the GPUs
    pools: list[PoolVerdict]

    @property
    def fits(self) -> list[str]:
        return [v.pool for v in self.pools if v.fits] if not self.node else []

    @property
    def disagreements(self) -> list[Drift]:
        return self.node + [d for v in self.pools for d in v.disagreements]

    def as_json(self) -> dict[str, Any]:
        return {
            "fits": self.fits,
            "node": [d.as_json() for d in self.node],
            "pools": [v.as_json() for v in self.pools],
        }


def _subset(inventory: Inventory, gpus: list[agent.Gpu]) -> Inventory:
    return Inventory(inventory.driver_version, inventory.cuda_version, tuple(gpus))


def _consequence(cfg: StackConfig, planned: str) -> str:
    when = "when its driver pod is deleted (upgrade strategy manual)" if cfg.upgrade.strategy == "manual" else (
        "when its DaemonSet rolls out on this node"
    )
    return (
        f"gpu-stack's driver container replaces it {when}; a driver the host installed stays, as k8s-driver-manager "
        f"then labels the node nvidia.com/gpu.deploy.driver=pre-installed and {planned} never runs"
    )


def driver_problems(inventory: Inventory, cfg: StackConfig, pool: NodePool) -> tuple[list[Drift], list[str]]:
    """The installed driver against the pool's driver plan: (disagreements, notes)."""
    plan = cfg.pool_driver(pool)
    installed, branch = inventory.driver_version, inventory.driver_branch
    if branch is None:
        return [], [f"driver version {installed!r} has no branch number to compare"]
    if plan.mode == "host":
        # The host's driver is the one the pool runs: it must drive the GPUs that are here.
        problems = []
        for label, gpus in inventory.by_label().items():
            support = catalog.DRIVER_SUPPORT.get(gpus[0].model or "")
            problem = support.branch_problem(branch) if support else None
            if problem:
                problems.append(
                    Drift(
                        "driver",
                        f"pool {pool.name} uses the host's driver, and driver {installed} (branch {branch}) cannot run "
                        f"its GPUs: {label} {problem}",
                    )
                )
        return problems, []
    if plan.mode == "managed":
        if DIGEST.fullmatch(plan.version):
            return [], [f"pool {pool.name} pins its managed driver by digest, so the installed {installed} is not compared"]
        if installed == plan.version:
            return [], []
        planned, planned_branch, what = plan.version, int(plan.version.split(".")[0]), "managed driver"
    else:
        planned_branch = int(plan.branch)
        if branch == planned_branch:
            # Precompiled images follow their branch's latest release, so any release of it is the plan.
            return [], []
        planned, what = f"branch {plan.branch}", "precompiled driver"
    if branch == planned_branch:
        relation = f"another release of branch {branch} than pool {pool.name}'s {what} {planned}"
    else:
        age = "older" if branch < planned_branch else "newer"
        relation = f"branch {branch}, {age} than pool {pool.name}'s {what} {planned}"
    return [Drift("driver", f"installed driver {installed} is {relation}: {_consequence(cfg, planned)}")], []


def _mig_problems(inventory: Inventory, cfg: StackConfig, pool: NodePool) -> list[Drift]:
    layout = sharing.mig_config_label(pool)
    if not pool.sharing.is_mig or layout is None:
        return agent_drift.mig_problems(inventory, pool.name, layout)
    problems = []
    for label, gpus in inventory.by_label().items():
        model = gpus[0].model
        devices = None
        if model in mig_catalog.GEOMETRY:
            resolved, reasons = mig_catalog.resolve_layout(model, layout, cfg.mig_layouts)
            if resolved is None:
                problems.append(
                    Drift("mig-layout", f"MIG layout {layout} of pool {pool.name} does not fit the {model}: {'; '.join(reasons)}")
                )
            elif resolved.per_gpu:
                problems += _per_gpu_mig_problems(inventory, gpus, pool, layout, resolved)
                continue
            else:
                devices = resolved.devices
        problems += agent_drift.mig_problems(_subset(inventory, gpus), pool.name, layout, devices=devices)
    return problems


def _per_gpu_mig_problems(
    inventory: Inventory, gpus: list[agent.Gpu], pool: NodePool, layout: str, resolved: mig_catalog.Layout
) -> list[Drift]:
    """A per-GPU layout's entries, each against the GPUs it names (GPUs no entry names are left as they are)."""
    problems = []
    for entry in resolved.entries:
        named = [g for g in gpus if entry.devices == mig_catalog.ALL_DEVICES or g.index in entry.devices]
        if not named:
            continue
        if entry.mig_enabled:
            problems += agent_drift.mig_problems(_subset(inventory, named), pool.name, layout, devices=entry.mig_devices or None)
        else:
            enabled = [g for g in named if g.mig_mode == "enabled"]
            if enabled:
                problems.append(Drift(
                    "mig-mode",
                    f"MIG mode is enabled on {agent_drift.gpu_list(enabled)}, but pool {pool.name}'s MIG layout {layout} disables it there",
                ))
    return problems


def judge(inventory: Inventory, cfg: StackConfig, pool: NodePool) -> PoolVerdict:
    verdict = PoolVerdict(pool.name, pool.gpu_model)
    verdict.disagreements += agent_drift.model_problems(inventory, pool.name, pool.gpu_model)
    if pool.workload_type == "vm-passthrough":
        verdict.disagreements += agent_drift.passthrough_problems(inventory, pool.name)
    elif pool.workload_type == "container":
        verdict.disagreements += _mig_problems(inventory, cfg, pool)
        problems, notes = driver_problems(inventory, cfg, pool)
        verdict.disagreements += problems
        verdict.notes += notes
    return verdict


def compare(inventory: Inventory, cfg: StackConfig, pool_name: Optional[str] = None) -> Comparison:
    """The node against each pool of `cfg` that could hold it: `pool_name`, or every pool declaring one of its GPU
    models. UnknownPool when `pool_name` is not a pool of the stack."""
    node = agent_drift.node_problems(inventory, CATALOG_MODELS)
    if pool_name is not None:
        pools = [p for p in cfg.node_pools if p.name == pool_name]
        if not pools:
            raise UnknownPool(f"the stack has no pool {pool_name!r}; pools: {', '.join(p.name for p in cfg.node_pools)}")
    else:
        models = {gpu.model for gpu in inventory.gpus}
        pools = [p for p in cfg.node_pools if p.gpu_model in models]
        if not pools:
            have = ", ".join(f"{len(gpus)}x {label}" for label, gpus in inventory.by_label().items())
            declared = ", ".join(f"{p.gpu_model} ({p.name})" for p in cfg.node_pools)
            node.append(Drift("model", f"no pool of the stack declares this node's GPUs ({have}); pools declare {declared}"))
    return Comparison(node, [judge(inventory, cfg, pool) for pool in pools])


# ---------------------------------------------------------------------------------------------------------------
# Output


def _mig_cell(gpu: agent.Gpu) -> str:
    if gpu.mig_mode is None:
        return "-"
    pending = f" ({gpu.mig_pending} after reset)" if gpu.mig_pending else ""
    if gpu.mig_mode == "enabled":
        return f"enabled{pending}: {agent_drift.format_devices(gpu.mig_devices)}"
    return f"disabled{pending}"


def inventory_header(inventory: Inventory) -> str:
    count = len(inventory.gpus)
    return f"NVIDIA driver {inventory.driver_version}, CUDA {inventory.cuda_version}: {count} GPU{'s' if count > 1 else ''}"


def inventory_table(inventory: Inventory) -> list[str]:
    lines = [inventory_header(inventory)]
    rows = [("GPU", "MODEL", "PCI ID", "MEMORY", "ARCH", "MIG", "NAME")]
    for gpu in inventory.gpus:
        rows.append((str(gpu.index), gpu.model or "unknown", gpu.pci_device_id, f"{gpu.memory_mib} MiB",
                     gpu.architecture, _mig_cell(gpu), gpu.name))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    return lines


def _yaml(document: Any) -> list[str]:
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False).rstrip("\n").splitlines()


def comparison_lines(stack: str, comparison: Comparison) -> list[str]:
    lines = [f"Stack {stack}:"]
    for drift in comparison.node:
        lines.append(f"  node: {drift.kind}: {drift.message}")
    for verdict in comparison.pools:
        count = len(verdict.disagreements)
        state = "fits" if verdict.fits else f"{count} disagreement{'s' if count > 1 else ''}"
        lines.append(f"  pool {verdict.pool} ({verdict.gpu_model}): {state}")
        lines += [f"    {d.kind}: {d.message}" for d in verdict.disagreements]
        lines += [f"    note: {note}" for note in verdict.notes]
    fits = comparison.fits
    if fits:
        lines.append(f"{stack}: the node fits pool {', '.join(fits)}")
    else:
        count = len(comparison.disagreements)
        lines.append(f"{stack}: DRIFT - {count} disagreement{'s' if count > 1 else ''}; the node fits no pool")
    return lines


def run(
    *,
    stack: Optional[str] = None,
    cfg: Optional[StackConfig] = None,
    pool: Optional[str] = None,
    as_json: bool = False,
    read: Callable[[], Inventory] = read_inventory,
    out: Optional[TextIO] = None,
    err: Optional[TextIO] = None,
) -> int:
    """The `inventory` subcommand once the stack (if any) is loaded; returns the exit code."""
    # Looked up per call, so a redirected sys.stdout (tests, callers) is the one written to.
    out, err = out or sys.stdout, err or sys.stderr
    if pool is not None and cfg is None:
        print("--pool needs --stack: it names a pool of that stack", file=err)
        return EXIT_CONFIG
    if cfg is not None and pool is not None and pool not in {p.name for p in cfg.node_pools}:
        print(f"stack {stack} has no pool {pool!r}; pools: {', '.join(p.name for p in cfg.node_pools)}", file=err)
        return EXIT_CONFIG
    try:
        found = read()
    except NvmlUnavailable as exc:
        print(f"gpustack inventory: {exc}", file=err)
        return EXIT_NO_GPU
    try:
        entry: Optional[dict[str, Any]] = suggest_pool(found, hostname=local_hostname(), os_tag=local_os_tag())
        entry_problem = None
    except NoPoolEntry as exc:
        entry, entry_problem = None, str(exc)
    layouts = suggest_mig_layouts(found)
    comparison = compare(found, cfg, pool) if cfg is not None else None
    code = EXIT_DRIFT if comparison is not None and not comparison.fits else EXIT_OK

    if as_json:
        document: dict[str, Any] = {
            "inventory": found.as_json(),
            "poolEntry": entry,
            "poolEntryProblem": entry_problem,
            "migLayouts": layouts,
        }
        if comparison is not None:
            document["stack"] = {"name": stack, **comparison.as_json()}
        print(json.dumps(document, indent=2), file=out)
        return code

    lines = inventory_table(found) + [""]
    if entry is None:
        lines.append(f"No pool entry for this node: {entry_problem}")
    else:
        lines.append("Pool entry for this node (gpu-stack:nodePools):")
        lines += _yaml([entry])
        if entry.get("os") is None:
            lines.append("(the OS is not one a pool's `os` takes: add `os:` or `nodeImage:`)")
    if layouts:
        lines.append("MIG layout it needs (gpu-stack:migLayouts):")
        lines += _yaml(layouts)
    if comparison is not None:
        lines += [""] + comparison_lines(stack or "stack", comparison)
    print("\n".join(lines), file=out)
    return code
