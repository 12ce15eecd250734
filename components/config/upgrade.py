"""How a driver change reaches the nodes: drain settings, waves, and the checks that the waves cover the driver
pools and that every gate's timeout leaves its wave time to roll."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Optional, Union

from pydantic import Field, StrictBool, StrictInt, field_validator

from components.config import limits
from components.config.base import (
    NAMESPACE,
    _count_or_percent,
    _Model,
    dns_label_problem,
    label_value_problem,
    qualified_name_problem,
    shown,
)

if TYPE_CHECKING:
    from components.config.pools import NodePool
    from components.config.stack import StackConfig


# A label selector as `kubectl drain --pod-selector` parses it: comma-separated equality or set-based terms.
_SELECTOR_TERM = re.compile(
    r"^\s*(?:(?P<exists>!?)(?P<bare>[^\s=!(),]+)|(?P<key>[^\s=!(),]+)\s*(?P<op>==|!=|=)\s*(?P<value>[^\s=!(),]*)"
    r"|(?P<skey>[^\s=!(),]+)\s+(?P<sop>in|notin)\s+\((?P<values>[^()]*)\))\s*$"
)


def label_selector_problem(selector: str) -> Optional[str]:
    """Why `selector` is not a label selector Kubernetes would parse; None when it is."""
    terms, depth, current = [], 0, ""
    for char in selector:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    for term in terms:
        match = _SELECTOR_TERM.fullmatch(term)
        if not match:
            return f"{shown(term.strip())} is not a selector term (key, !key, key=value, key!=value, key in (a,b), key notin (a,b))"
        key = match.group("bare") or match.group("key") or match.group("skey")
        values = [match.group("value")] if match.group("op") else []
        if match.group("sop"):
            values = [v.strip() for v in match.group("values").split(",")]
        if qualified_name_problem(key):
            return f"{shown(key)} is not a label key ({qualified_name_problem(key)})"
        for value in values:
            if label_value_problem(value):
                return f"{shown(value)} is not a label value ({label_value_problem(value)})"
    return None


class Drain(_Model):
    """k8s-driver-manager's drain settings (fact sheet §5.3); force, timeout and emptyDir deletion also govern the
    GPU-pod eviction that runs before any drain."""

    enabled: StrictBool = False
    force: StrictBool = False
    pod_selector: str = ""
    # 0 waits forever; the operator's upgrade policy defaults to 300.
    timeout_seconds: int = Field(default=300, ge=0, le=86_400)
    delete_empty_dir_data: StrictBool = False

    @field_validator("pod_selector")
    @classmethod
    def _selector(cls, value: str) -> str:
        if len(value) > MAX_POD_SELECTOR_LENGTH:
            raise ValueError(f"{len(value)} characters; at most {MAX_POD_SELECTOR_LENGTH}")
        problem = label_selector_problem(value) if value else None
        if problem:
            raise ValueError(f"{problem}; e.g. 'app=batch,tier!=critical'")
        return value


# Long enough for any hand-written selector; a longer one is a template gone wrong, and is not echoed back.
MAX_POD_SELECTOR_LENGTH = 1024


class WaitForCompletion(_Model):
    """ClusterPolicy `driver.upgradePolicy.waitForCompletion` (fact sheet §5): before a node's driver is swapped,
    wait until the pods matching podSelector on that node have completed. Runs as the node agent's
    `wait-for-completion` init container, first in every driver pod, before k8s-driver-manager evicts GPU pods."""

    pod_selector: str = Field(
        description=(
            "Label selector (equality or set-based, e.g. `app=batch` or `job-type in (training,eval)`) of the pods, "
            "in any namespace, whose completion each node's driver swap waits for. While it waits the node carries "
            "the taint `gpu-stack/wait-for-completion:NoSchedule` (node agent 0.7.0; older agents cordon) so no new "
            "matching pod lands there, and a cordon someone sets meanwhile stays after the wait."
        ),
    )
    timeout_seconds: int = Field(
        default=0,
        ge=0,
        le=86_400,
        description=(
            "How long to wait for the matching pods before the swap proceeds anyway (k8s-driver-manager then "
            "evicts GPU pods as usual); 0 waits until they completed, as the operator's default."
        ),
    )

    @field_validator("pod_selector")
    @classmethod
    def _selector(cls, value: str) -> str:
        if not value.strip():
            raise ValueError(
                "empty: an empty selector waits for nothing; name the pods, e.g. 'app=batch', or remove waitForCompletion"
            )
        if len(value) > MAX_POD_SELECTOR_LENGTH:
            raise ValueError(f"{len(value)} characters; at most {MAX_POD_SELECTOR_LENGTH}")
        problem = label_selector_problem(value)
        if problem:
            raise ValueError(f"{problem}; e.g. 'app=batch' or 'job-type in (training,eval)'")
        return value


class Wave(_Model):
    name: str
    pools: list[str] = Field(min_length=1, max_length=limits.MAX_POOLS_PER_WAVE)
    # How long the gate after this wave waits for its nodes' drivers to roll out and validate.
    timeout_seconds: int = Field(default=3600, ge=300, le=86_400)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        problem = dns_label_problem(value, limit=20)
        if problem:
            raise ValueError(problem)
        return value


class Upgrade(_Model):
    """How a driver change reaches the nodes. Driver DaemonSets are OnDelete; with `rolling` the node agent replaces
    each node's outdated driver pod itself, cordoning the node, while it holds a slot of the fleet's one disruption
    budget (`maxUnavailable`, capped by `maxParallelUpgrades`): it cordons the node, evicts its GPU pods (or waits for
    them to end without `gpuPodEviction`), deletes the old driver pod and uncordons once the new one is validated, as
    the operator's upgrade controller does; a new template that installs the same driver (same DRIVER_CONFIG_DIGEST)
    only restarts the pod. With `manual`, nothing changes on a node until someone deletes its driver pod, and then
    its k8s-driver-manager evicts and drains by these settings."""

    strategy: Literal["rolling", "manual"] = "rolling"
    max_unavailable: Union[int, str] = 1
    max_parallel_upgrades: StrictInt = Field(
        default=0,
        ge=0,
        le=limits.MAX_UNAVAILABLE_COUNT,
        description=(
            "How many nodes may be upgrading their driver at once, as the operator's "
            "`driver.upgradePolicy.maxParallelUpgrades`; 0 sets no bound of its own, so `maxUnavailable` alone bounds "
            "the rollout. A further cap on the fleet budget, never a second budget beside it."
        ),
    )
    paused: StrictBool = Field(
        default=False,
        description=(
            "Stops the rollout: no node starts a new disruption (driver upgrade or handover, deploy-label removal, "
            "MIG relayout); nodes already in progress finish and free their slots. Set it back to false to go on."
        ),
    )
    node_ready_timeout_seconds: StrictInt = Field(
        default=1800,
        ge=300,
        le=86_400,
        description=(
            "How long a node's new driver has to become Ready (loaded and validated) once its old driver pod is "
            "gone. A node that misses it stays cordoned and keeps its slot, is reported on its Node and in the "
            "agent's log, and halts the rollout: no further node starts until it is fixed."
        ),
    )
    gpu_pod_eviction: StrictBool = True
    drain: Drain = Drain()
    # Ordered: each wave's driver DaemonSets change only after the previous wave's nodes validated.
    waves: list[Wave] = Field(default=[], max_length=limits.MAX_WAVES)
    wait_for_completion: Optional[WaitForCompletion] = Field(
        default=None,
        description=(
            "Before each node's driver is swapped, wait for its pods matching `podSelector` to complete (at most "
            "`timeoutSeconds`), as the operator's `driver.upgradePolicy.waitForCompletion`. Needs `strategy: "
            "rolling` and `nodeAgent.image` (its wait-for-completion step); unset, driver pods are rendered as before."
        ),
    )

    # Before pydantic coerces: YAML's true would become the count 1, and 2.0 the count 2.
    _max_unavailable = field_validator("max_unavailable", mode="before")(_count_or_percent)


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


def _upgrade_checks(cfg: StackConfig) -> list[tuple[str, str]]:
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


def fleet_budget_nodes(upgrade: Upgrade, fleet_nodes: int) -> int:
    """How many nodes the fleet budget lets out of service at once: maxUnavailable, a percentage resolved against
    `fleet_nodes` (rounded up, never below one, as the node agents resolve it), capped by maxParallelUpgrades."""
    budget = upgrade.max_unavailable
    nodes = budget if isinstance(budget, int) else max(1, -(-fleet_nodes * int(budget[:-1]) // 100))
    return min(nodes, upgrade.max_parallel_upgrades) if upgrade.max_parallel_upgrades > 0 else nodes


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
