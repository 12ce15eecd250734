"""Cross-key rules of a pool's sharing: the strategy's keys, MPS and MIG against the GPU model and the stack's
components, and the custom MIG layouts."""

from __future__ import annotations

from components.catalogs import catalog, mig_catalog
from components.config.base import _set_aliases, NAMESPACE, shown
from components.config.pools import MPS_MAX_REPLICAS, NodePool, Sharing
from components.config.stack import StackConfig


def sharing_checks(cfg: StackConfig, pool: NodePool, here: str) -> list[tuple[str, str]]:
    """One pool's sharing block: which keys each strategy takes, and what it needs deployed."""
    sharing = pool.sharing
    strategy = sharing.strategy
    where = f"{here}.sharing"
    problems: list[tuple[str, str]] = []
    if strategy == "none":
        return [(f"{where}.{key}", "only allowed with a sharing.strategy other than 'none'") for key in _set_keys(sharing)]
    if pool.workload_type != "container":
        return [(f"{where}.strategy", f"sharing applies to container pools only, not {pool.workload_type!r}")]
    if not cfg.components.device_plugin:
        problems.append((f"{where}.strategy", f"{strategy} needs gpu-stack:components.devicePlugin: true"))
    takes = {
        "time-slicing": {"replicas", "renameByDefault", "failRequestsGreaterThanOne"},
        "mps": {"replicas", "renameByDefault"},
        "mig-single": {"migLayout"},
        "mig-mixed": {"migLayout"},
    }[strategy]
    for key in sorted(_set_keys(sharing) - takes):
        problems.append((f"{where}.{key}", f"not used by strategy {strategy!r}; it takes: {', '.join(sorted(takes))}"))
    if strategy in ("time-slicing", "mps"):
        limit = MPS_MAX_REPLICAS if strategy == "mps" else 64
        if sharing.replicas is None:
            problems.append((f"{where}.replicas", f"required when sharing.strategy is {strategy!r} (2..{limit})"))
        elif sharing.replicas > limit:
            problems.append((f"{where}.replicas", f"got {sharing.replicas}; MPS serves at most {limit} clients per GPU"))
    if strategy == "mps" and not cfg.components.gfd:
        problems.append(
            (f"{where}.strategy", "mps needs gpu-stack:components.gfd: true (GFD labels nodes nvidia.com/mps.capable=true)")
        )
    if sharing.is_mig:
        problems += _mig_checks(cfg, pool, here)
    return problems


def _set_keys(sharing: Sharing) -> set[str]:
    return _set_aliases(sharing) - {"strategy"}


def _mig_checks(cfg: StackConfig, pool: NodePool, here: str) -> list[tuple[str, str]]:
    where = f"{here}.sharing"
    if not pool.model.mig_capable:
        capable = [name for name, m in catalog.GPU_MODELS.items() if m.mig_capable]
        return [(f"{where}.strategy", f"{pool.gpu_model} has no MIG support; MIG-capable models: {', '.join(capable)}")]
    problems: list[tuple[str, str]] = []
    if not cfg.components.mig_manager:
        problems.append((f"{where}.strategy", "MIG layouts are applied by the MIG manager: set gpu-stack:components.migManager: true"))
    name = pool.sharing.mig_layout
    if name is None:
        usable = _usable_layouts(pool, cfg.mig_layouts)
        return problems + [(f"{where}.migLayout", f"required with {pool.sharing.strategy!r}; usable layouts for {pool.gpu_model}: {', '.join(usable)}")]
    layout, reasons = mig_catalog.resolve_layout(pool.gpu_model, name, cfg.mig_layouts)
    problems += [(f"{where}.migLayout", reason) for reason in reasons]
    if layout is None:
        return problems
    if not layout.enables_mig:
        problems.append(
            (
                f"{where}.migLayout",
                f"{shown(name)} enables MIG on no GPU, so a MIG strategy has nothing to do; pick a layout with MIG "
                f"({', '.join(_usable_layouts(pool, cfg.mig_layouts))}) or sharing.strategy 'none' for whole GPUs",
            )
        )
    elif pool.sharing.mig_strategy == "single":
        reason = mig_catalog.single_strategy_problem(layout)
        if reason:
            problems.append((f"{where}.migLayout", reason))
    return problems


def _usable_layouts(pool: NodePool, custom: dict[str, mig_catalog.LayoutValue]) -> list[str]:
    """Layouts that fit the pool's GPU, create MIG devices, and suit the pool's MIG strategy."""
    usable = []
    for name in mig_catalog.fitting_layouts(pool.gpu_model, custom):
        layout, _ = mig_catalog.resolve_layout(pool.gpu_model, name, custom)
        if layout is None or not layout.creates_devices:
            continue
        if pool.sharing.mig_strategy == "single" and mig_catalog.single_strategy_problem(layout):
            continue
        usable.append(name)
    return usable


def mig_layout_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    used = {p.sharing.mig_layout for p in cfg.node_pools if p.sharing.is_mig}
    problems = []
    for name in cfg.mig_layouts:
        if name.startswith("all-"):
            problems.append((f"{NAMESPACE}:migLayouts.{name}", "names starting 'all-' belong to the built-in layouts; rename it"))
        elif name not in used:
            problems.append((f"{NAMESPACE}:migLayouts.{name}", "used by no nodePools[].sharing.migLayout; remove it or use it"))
    return problems
