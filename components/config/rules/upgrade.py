"""Cross-key rules of `gpu-stack:upgrade`: waves against pools, the fleet budget, and gate timeouts against the least
time a wave takes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from components.config.base import NAMESPACE, shown
from components.config.pools import NodePool
from components.config.stack import StackConfig
from components.config.upgrade import fleet_budget_nodes


def _wait_for_completion_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    """waitForCompletion needs a rollout to pace and the node agent's image, which runs the wait."""
    if cfg.upgrade.wait_for_completion is None:
        return []
    key = f"{NAMESPACE}:upgrade.waitForCompletion"
    problems: list[tuple[str, str]] = []
    if cfg.upgrade.strategy != "rolling":
        # As the operator's upgradePolicy acts only in its automatic upgrades: with `manual`, whoever deletes a
        # driver pod has chosen that node's moment, and a wait would leave the node without a driver pod instead.
        problems.append(
            (
                key,
                "waits in a rolling update; with strategy 'manual' you delete each driver pod when its node is idle: "
                "use 'rolling' or remove waitForCompletion",
            )
        )
    if not cfg.driver_pools:
        problems.append((key, "no pool gets a driver DaemonSet (host drivers, VM pools), so nothing would wait: remove it"))
    if cfg.node_agent.image is None:
        # Every agent the image check admits (components/config/cluster.py) has the wait-for-completion step.
        problems.append((key, "runs the node agent's wait-for-completion step: set gpu-stack:nodeAgent.image"))
    return problems


def upgrade_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    upgrade = cfg.upgrade
    here = f"{NAMESPACE}:upgrade"
    problems: list[tuple[str, str]] = _wait_for_completion_checks(cfg)
    if upgrade.strategy == "rolling" and cfg.driver_pools and not cfg.components.node_labeler:
        # Driver DaemonSets are OnDelete: without the labeller's agents no driver pod would ever be replaced, and
        # the stack would apply cleanly and keep every node on its old driver.
        problems.append(
            (
                f"{here}.strategy",
                "'rolling' upgrades are performed by the node labeller's agents (driver DaemonSets are OnDelete): set "
                "gpu-stack:components.nodeLabeler: true, or use 'manual' and delete each node's driver pod yourself",
            )
        )
    if not upgrade.waves:
        return problems + _gate_timeout_checks(cfg)
    if upgrade.strategy != "rolling":
        problems.append((f"{here}.waves", "waves gate a rolling update; with strategy 'manual' nothing rolls: use 'rolling'"))
    if not cfg.components.node_labeler:
        problems.append((f"{here}.waves", "waves select nodes by the gpu-stack/pool label: set gpu-stack:components.nodeLabeler: true"))
    if cfg.validation.mode == "off":
        problems.append((f"{here}.waves", "a wave is done when its nodes validated: gpu-stack:validation.mode cannot be 'off'"))
    driver_pools = [p.name for p in cfg.driver_pools]
    all_pools = [p.name for p in cfg.node_pools]
    seen_waves: set[str] = set()
    wave_of: dict[str, str] = {}
    for i, wave in enumerate(upgrade.waves):
        where = f"{here}.waves[{i}]"
        if wave.name in seen_waves:
            problems.append((f"{where}.name", f"duplicate wave name {wave.name!r}"))
        seen_waves.add(wave.name)
        for j, name in enumerate(wave.pools):
            if name not in all_pools:
                problems.append((f"{where}.pools[{j}]", f"unknown pool {shown(name)}; pools with a deployed driver: {', '.join(driver_pools)}"))
            elif name not in driver_pools:
                problems.append((f"{where}.pools[{j}]", f"pool {shown(name)} gets no driver DaemonSet (host driver or VM pool); remove it"))
            elif name in wave_of:
                problems.append((f"{where}.pools[{j}]", f"pool {shown(name)} is already in wave {wave_of[name]!r}; a pool upgrades once"))
            else:
                wave_of[name] = wave.name
    missing = [name for name in driver_pools if name not in wave_of]
    if missing:
        problems.append((f"{here}.waves", f"pools in no wave: {', '.join(missing)}; every pool with a deployed driver needs one"))
    wave_of_daemonset: dict[str, tuple[str, str]] = {}
    for pool in cfg.driver_pools:
        daemonset, wave = cfg.pool_driver(pool).daemonset, wave_of.get(pool.name)
        if wave is None:
            continue
        seen = wave_of_daemonset.setdefault(daemonset, (wave, pool.name))
        if seen[0] != wave:
            problems.append(
                (
                    f"{here}.waves",
                    f"pools {seen[1]!r} (wave {seen[0]!r}) and {pool.name!r} (wave {wave!r}) share driver DaemonSet "
                    f"{daemonset!r}, which rolls in one wave: put them in the same wave",
                )
            )
    if not problems:
        problems += _gate_timeout_checks(cfg)
    return problems


# The least time one node's driver swap takes before its gate can count it, the driver build itself not counted:
# k8s-driver-manager waits for the operands to stop and unloads the modules (§5.3), the driver container's startup
# probe starts after its initial delay (60 s managed, 5 s precompiled, GO:internal/state/driver.go), then the
# validator's driver, toolkit, cuda and plugin checks run (§3.2).
MIN_NODE_SWAP_SECONDS = {"managed": 30 + 10 + 60 + 60, "precompiled": 30 + 10 + 5 + 60}


@dataclass(frozen=True)
class RolloutFloor:
    """The least time a set of pools takes to roll, and what it follows from: `nodes` declared nodes, `budget` of
    them out of service at once."""

    seconds: int
    nodes: int
    budget: int


def declared_fleet_nodes(cfg: StackConfig) -> int:
    """The GPU nodes with a deployed driver that the stack declares (expectedNodes): what a percentage budget is
    checked against here; the agents resolve it against the nodes they count."""
    return sum(p.expected_nodes for p in cfg.driver_pools if p.expected_nodes is not None)


def rollout_floor_seconds(cfg: StackConfig, pools: list[NodePool]) -> Optional[RolloutFloor]:
    """The least time the drivers of `pools` (one wave) take to roll over their declared nodes. The node agents
    replace driver pods within the fleet's one budget, whichever DaemonSet or pool a node belongs to, so the wave's
    declared nodes go ceil(nodes / budget) at a time, each batch taking at least one node swap (the quicker mode's,
    for a wave of managed and precompiled pools). None when nothing rolls or no pool declares expectedNodes."""
    if cfg.upgrade.strategy != "rolling":
        return None
    declared = [(p.expected_nodes, cfg.pool_driver(p).mode) for p in pools if p.expected_nodes is not None]
    declared = [(nodes, mode) for nodes, mode in declared if mode != "host"]
    if not declared:
        return None
    nodes = sum(n for n, _ in declared)
    budget = fleet_budget_nodes(cfg.upgrade, declared_fleet_nodes(cfg))
    swap = min(MIN_NODE_SWAP_SECONDS[mode] for _, mode in declared)
    return RolloutFloor(-(-nodes // budget) * swap, nodes, budget)


def _budget_text(cfg: StackConfig, budget: int) -> str:
    upgrade = cfg.upgrade
    text = f"maxUnavailable {upgrade.max_unavailable}"
    if isinstance(upgrade.max_unavailable, str):
        text += f" of {declared_fleet_nodes(cfg)} declared nodes"
    if upgrade.max_parallel_upgrades > 0:
        text += f", maxParallelUpgrades {upgrade.max_parallel_upgrades}"
    return f"{budget} at a time: {text}"


def _gate_timeout_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    """A gate whose timeout is shorter than its wave's rollout can only fail, halfway through the rollout."""
    problems: list[tuple[str, str]] = []
    pools = {p.name: p for p in cfg.node_pools}
    waves = cfg.upgrade.waves
    for i, wave in enumerate(waves[:-1]):
        floor = rollout_floor_seconds(cfg, [pools[n] for n in wave.pools if n in pools])
        if floor is not None and wave.timeout_seconds < floor.seconds:
            problems.append(
                (
                    f"{NAMESPACE}:upgrade.waves[{i}].timeoutSeconds",
                    f"got {wave.timeout_seconds}; wave {wave.name!r} declares {floor.nodes} expected nodes, which roll "
                    f"{_budget_text(cfg, floor.budget)}, and needs at least {floor.seconds} s to roll and validate: "
                    "raise the timeout or maxUnavailable",
                )
            )
    # The stack gate judges the last wave (every pool, without waves) as it rolls.
    last = [pools[n] for n in waves[-1].pools if n in pools] if waves else cfg.driver_pools
    floor = rollout_floor_seconds(cfg, last)
    if cfg.validation.mode != "off" and floor is not None and cfg.validation.timeout_seconds < floor.seconds:
        what = f"the last wave, {waves[-1].name!r}," if waves else "the driver pools"
        problems.append(
            (
                f"{NAMESPACE}:validation.timeoutSeconds",
                f"got {cfg.validation.timeout_seconds}; {what} declare {floor.nodes} expected nodes, which roll "
                f"{_budget_text(cfg, floor.budget)}, and need at least {floor.seconds} s to roll and validate: raise "
                "the timeout or maxUnavailable",
            )
        )
    return problems
