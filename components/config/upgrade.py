"""How a driver change reaches the nodes: drain settings, waves, and the checks that the waves cover the driver
pools and that every gate's timeout leaves its wave time to roll."""

from __future__ import annotations

import re
from typing import Literal, Optional, Union

from pydantic import Field, StrictBool, StrictInt, field_validator

from components.config import limits
from components.config.base import (
    _count_or_percent,
    _Model,
    dns_label_problem,
    label_value_problem,
    qualified_name_problem,
    shown,
)


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


def fleet_budget_nodes(upgrade: Upgrade, fleet_nodes: int) -> int:
    """How many nodes the fleet budget lets out of service at once: maxUnavailable, a percentage resolved against
    `fleet_nodes` (rounded up, never below one, as the node agents resolve it), capped by maxParallelUpgrades."""
    budget = upgrade.max_unavailable
    nodes = budget if isinstance(budget, int) else max(1, -(-fleet_nodes * int(budget[:-1]) // 100))
    return min(nodes, upgrade.max_parallel_upgrades) if upgrade.max_parallel_upgrades > 0 else nodes
