"""The `inventory` program's loop: the node's GPUs read through NVML every resync, and their drift from the node's
pool kept in the gpu-stack/inventory and gpu-stack/drift annotations."""

from __future__ import annotations

import random
import time
from typing import Any, Callable

from gpustack_agent.api.kube import Log, get_node, keep_running, patch_node
from gpustack_agent.api.podwatch import HEALTHY
from gpustack_agent.inventory import drift, inventory
from gpustack_agent.model import labelcheck


def run_inventory_loop(
    core: Any,
    *,
    node_name: str,
    load_config: Callable[[], Any],
    read_inventory: Callable[[], inventory.Inventory],
    resync_seconds: int,
    log: Log,
    stop: Callable[[], bool] = lambda: False,
    sleep: Callable[[float], None] = time.sleep,
    rng: Callable[[], float] = random.random,
) -> None:
    """Every ``resync_seconds`` until ``stop()``: read the GPUs through NVML, compare them with the node's pool,
    and keep the gpu-stack/inventory and gpu-stack/drift annotations current, logging each change. With an
    invalid config the annotations keep their last verdict.

    Polled, not watched: the hardware and the MIG state change without a node event, and a drift report a
    minute late is still a report.
    """

    warnings = labelcheck.Warnings(log)

    def one_pass() -> str:
        try:
            found: inventory.Inventory | inventory.NvmlUnavailable = read_inventory()
        except inventory.NvmlUnavailable as exc:
            # Normal until the driver is up (a managed driver installs after the node is labelled), so
            # record it and try again next pass.
            found = exc
        node = get_node(core, node_name)
        metadata = node.get("metadata") or {}
        warnings.report(node_name, labelcheck.mig_state_problems(node))
        wanted, departures = drift.wanted_annotations(found, metadata.get("labels") or {}, load_config())
        patch = drift.annotation_patch(node, wanted)
        if patch is not None:
            # No resourceVersion: only this loop writes these two keys, and a compare-and-swap would lose
            # every race with the label loop's writes to the same node for nothing.
            patch_node(core, node_name, patch)
            if isinstance(found, inventory.NvmlUnavailable):
                log({"level": "warning", "event": "inventory-unavailable", "node": node_name, "error": str(found)})
            else:
                log({"level": "warning" if departures else "info", "event": "inventory", "node": node_name,
                     "inventory": found.summary(), "drift": [d.as_json() for d in departures]})
        sleep(resync_seconds)
        return HEALTHY

    keep_running(one_pass, node_name=node_name, resync_seconds=resync_seconds, log=log, stop=stop, sleep=sleep, rng=rng)
