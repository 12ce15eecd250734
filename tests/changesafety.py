"""The ordinary edits a platform team makes to a live stack, as functions of its configuration, for the
change-safety suite: each returns the edited copy, or None where the edit does not apply to the stack (a stack
without waves has no wave to rename)."""

from __future__ import annotations

import copy
import functools
import json
from dataclasses import dataclass
from typing import Any, Callable, Optional

from components.config import ConfigError, NodePool, StackConfig, load_config
from stacktest import bag

Config = dict[str, Any]
P, U = "gpu-stack:nodePools", "gpu-stack:upgrade"


def loaded(config: Config) -> StackConfig:
    """The validated config (models are frozen, so one per distinct config serves every caller)."""
    outcome = _load(json.dumps(config, sort_keys=True))
    if isinstance(outcome, ConfigError):
        raise outcome
    return outcome


@functools.lru_cache(maxsize=None)
def _load(config_json: str):
    # Collection asks every edit of every stack whether it applies: each distinct config loads once.
    try:
        return load_config(bag(json.loads(config_json)))
    except ConfigError as refused:
        return refused


def valid(config: Config) -> Optional[Config]:
    """`config` when the program accepts it; an edit that yields a refused stack does not apply."""
    try:
        loaded(config)
    except ConfigError:
        return None
    return config


def waves(config: Config) -> list[dict[str, Any]]:
    return (config.get(U) or {}).get("waves") or []


def pools(config: Config) -> list[dict[str, Any]]:
    return config[P]


def driver_pools(config: Config) -> list[NodePool]:
    return loaded(config).driver_pools


def managed_pools(config: Config) -> list[NodePool]:
    cfg = loaded(config)
    return [p for p in cfg.driver_pools if cfg.pool_driver(p).mode == "managed"]


def container_pools(config: Config) -> list[dict[str, Any]]:
    return [p for p in pools(config) if p.get("workloadType", "container") == "container"]


def _copy(config: Config) -> Config:
    return copy.deepcopy(config)


def _rename_in_waves(config: Config, old: str, new: Optional[str]) -> None:
    for wave in waves(config):
        wave["pools"] = [new if p == old else p for p in wave["pools"] if new is not None or p != old]
    if U in config and "waves" in config[U]:
        config[U]["waves"] = [w for w in waves(config) if w["pools"]]


# --- the edits --------------------------------------------------------------------------------------------------


def driver_version_bump(config: Config) -> Optional[Config]:
    if not managed_pools(config):
        return None
    edited = _copy(config)
    version = loaded(config).versions.driver
    branch = version.split(".")[0]
    edited.setdefault("gpu-stack:versions", {})["driver"] = f"{branch}.200.01"
    return valid(edited)


def kernel_module_type_switch(config: Config) -> Optional[Config]:
    if not driver_pools(config):
        return None
    current = loaded(config).driver.kernel_module_type
    for choice in ("open", "auto", "proprietary"):
        if choice != current:
            edited = _copy(config)
            edited.setdefault("gpu-stack:driver", {})["kernelModuleType"] = choice
            if valid(edited):
                return edited
    return None


def rename_wave(config: Config) -> Optional[Config]:
    if not waves(config):
        return None
    edited = _copy(config)
    waves(edited)[0]["name"] = "first-renamed"
    return valid(edited)


def reorder_waves(config: Config) -> Optional[Config]:
    if len(waves(config)) < 2:
        return None
    edited = _copy(config)
    edited[U]["waves"] = list(reversed(waves(edited)))
    return valid(edited)


def move_pool_to_another_wave(config: Config) -> Optional[Config]:
    """The last pool of the first wave with more than one pool moves to the wave before it (or after, for the
    first wave)."""
    all_waves = waves(config)
    for i, wave in enumerate(all_waves):
        if len(wave["pools"]) > 1 and len(all_waves) > 1:
            edited = _copy(config)
            target = i - 1 if i > 0 else i + 1
            pool = waves(edited)[i]["pools"].pop()
            waves(edited)[target]["pools"].append(pool)
            return valid(edited)
    return None


def _new_pool(config: Config, name: str, **changes: Any) -> Optional[dict[str, Any]]:
    """A pool like the stack's first driver pool (same model and OS image, no sharing), on nodes of its own."""
    for pool in container_pools(config):
        if pool["name"] in {p.name for p in driver_pools(config)}:
            new = {k: copy.deepcopy(v) for k, v in pool.items() if k in ("gpuModel", "os", "nodeImage", "allocation")}
            new.update(name=name, nodeSelector={"gpu-stack.example/pool": name}, **changes)
            return new
    return None


def add_wave(config: Config) -> Optional[Config]:
    """A new pool, upgraded in a new last wave."""
    new = _new_pool(config, "added")
    if not waves(config) or new is None:
        return None
    edited = _copy(config)
    pools(edited).insert(0, new)
    waves(edited).append({"name": "added", "pools": ["added"]})
    return valid(edited)


def remove_wave(config: Config) -> Optional[Config]:
    """The last wave's pools join the wave before it."""
    if len(waves(config)) < 2:
        return None
    edited = _copy(config)
    last = waves(edited).pop()
    waves(edited)[-1]["pools"] += last["pools"]
    return valid(edited)


def remove_all_waves(config: Config) -> Optional[Config]:
    if not waves(config):
        return None
    edited = _copy(config)
    del edited[U]["waves"]
    return valid(edited)


def add_pool(config: Config) -> Optional[Config]:
    new = _new_pool(config, "added")
    if new is None:
        return None
    edited = _copy(config)
    pools(edited).insert(0, new)
    if waves(edited):
        waves(edited)[-1]["pools"].append("added")
    return valid(edited)


def remove_pool(config: Config) -> Optional[Config]:
    """The last driver pool leaves the stack (and its wave, if it was alone there)."""
    names = [p.name for p in driver_pools(config)]
    if len(names) < 2:
        return None
    edited = _copy(config)
    gone = names[-1]
    edited[P] = [p for p in pools(edited) if p["name"] != gone]
    _rename_in_waves(edited, gone, None)
    return valid(edited)


def rename_pool(config: Config, *, keep_driver_name: bool = True) -> Optional[Config]:
    """The first driver pool gets a new name; it keeps its driver DaemonSet's name (`daemonSetName`) when the
    stack pins it, as the shipped stacks do, or when `keep_driver_name` pins the name it ran under."""
    names = [p.name for p in driver_pools(config)]
    if not names:
        return None
    edited = _copy(config)
    old = names[0]
    pool = next(p for p in pools(edited) if p["name"] == old)
    daemonset = loaded(config).pool_driver(loaded(config).node_pools[[p.name for p in loaded(config).node_pools].index(old)]).daemonset
    pool["name"] = f"{old[:30]}-renamed"
    driver = pool.setdefault("driver", {})
    if keep_driver_name:
        driver["daemonSetName"] = daemonset
    else:
        driver.pop("daemonSetName", None)
        if not driver:
            del pool["driver"]
    _rename_in_waves(edited, old, pool["name"])
    return valid(edited)


def rename_pool_unpinned(config: Config) -> Optional[Config]:
    return rename_pool(config, keep_driver_name=False)


def add_second_os(config: Config) -> Optional[Config]:
    """A pool booting another OS image (precompiled: another kernel), its driver a DaemonSet of its own."""
    cfg = loaded(config)
    if not cfg.driver_pools:
        return None
    first = cfg.driver_pools[0]
    plan = cfg.pool_driver(first)
    if plan.mode == "precompiled":
        new = _new_pool(config, "second-os", nodeImage="ubuntu24.04-6.8.0-79-generic-amd64")
        if new is not None and plan.node_image is not None and plan.node_image.name == new["nodeImage"]:
            new["nodeImage"] = "ubuntu22.04-6.5.0-45-generic-amd64"
    else:
        other = "rhel9" if plan.os_tag != "rhel9" else "ubuntu24.04"
        new = _new_pool(config, "second-os", os=other)
        if new is not None:
            new.pop("nodeImage", None)
    if new is None:
        return None
    edited = _copy(config)
    pools(edited).insert(0, new)
    if waves(edited):
        waves(edited)[-1]["pools"].append("second-os")
    return valid(edited)


def change_pool_os(config: Config) -> Optional[Config]:
    for pool in managed_pools(config):
        raw = next(p for p in pools(config) if p["name"] == pool.name)
        if "os" not in raw:
            continue
        edited = _copy(config)
        target = next(p for p in pools(edited) if p["name"] == pool.name)
        target["os"] = "ubuntu24.04" if raw["os"] != "ubuntu24.04" else "ubuntu22.04"
        if valid(edited):
            return edited
    return None


# The next node image of a pool's current one: a newer kernel of the same OS (precompiled), the next OS release
# (managed).
NEXT_IMAGE = {
    "ubuntu22.04-5.15.0-139-generic-amd64": "ubuntu22.04-6.5.0-45-generic-amd64",
    "ubuntu22.04-6.5.0-45-generic-amd64": "ubuntu22.04-5.15.0-139-generic-amd64",
    "ubuntu24.04-6.8.0-79-generic-amd64": "ubuntu22.04-6.5.0-45-generic-amd64",
}
NEXT_OS = {"ubuntu22.04": "ubuntu24.04", "ubuntu24.04": "ubuntu22.04"}


def _single_image_pool(config: Config) -> Optional[tuple[NodePool, str, str, str]]:
    """The first driver pool with one node image (or OS) that has a next one: (pool, key, old, new)."""
    cfg = loaded(config)
    for pool in cfg.driver_pools:
        if pool.listed:
            continue
        precompiled = cfg.pool_driver(pool).mode == "precompiled"
        if precompiled and pool.node_image in NEXT_IMAGE:
            return pool, "nodeImage", pool.node_image, NEXT_IMAGE[pool.node_image]
        raw = next(p for p in pools(config) if p["name"] == pool.name)
        if not precompiled and "os" in raw and raw["os"] in NEXT_OS:
            return pool, "os", raw["os"], NEXT_OS[raw["os"]]
    return None


def change_node_image_in_place(config: Config) -> Optional[Config]:
    """The edit that breaks a live pool: its one `nodeImage` (or `os`) pointed at the next image."""
    found = _single_image_pool(config)
    if found is None:
        return None
    pool, key, _, new = found
    edited = _copy(config)
    next(p for p in pools(edited) if p["name"] == pool.name)[key] = new
    return valid(edited)


def list_next_node_image(config: Config) -> Optional[Config]:
    """Step 1 of a node image rollout: the pool lists the next image next to its current one, and keeps its
    DaemonSet's name for the current one."""
    found = _single_image_pool(config)
    if found is None:
        return None
    pool, key, old, new = found
    edited = _copy(config)
    raw = next(p for p in pools(edited) if p["name"] == pool.name)
    raw[key] = [old, new]
    driver = raw.setdefault("driver", {})
    driver.pop("daemonSetName", None)
    driver["daemonSetNames"] = {old: loaded(config).pool_driver(pool).daemonset}
    return valid(edited)


def unlist_previous_node_image(config: Config) -> Optional[Config]:
    """Step 3, once no node runs the old image: the pool lists the new one alone (still a list, so the new
    DaemonSet keeps its name)."""
    edited = _copy(config)
    for raw in pools(edited):
        names = (raw.get("driver") or {}).get("daemonSetNames")
        if names:
            key = "nodeImage" if isinstance(raw.get("nodeImage"), list) else "os"
            raw[key] = raw[key][1:]
            del raw["driver"]["daemonSetNames"]
            if not raw["driver"]:
                del raw["driver"]
            return valid(edited)
    return None


def _sharing_switch(strategy: str) -> Callable[[Config], Optional[Config]]:
    settings = {
        "none": {"strategy": "none"},
        "time-slicing": {"strategy": "time-slicing", "replicas": 4},
        "mps": {"strategy": "mps", "replicas": 4},
        "mig-mixed": {"strategy": "mig-mixed", "migLayout": "all-balanced"},
    }[strategy]

    def switch(config: Config) -> Optional[Config]:
        for pool in container_pools(config):
            if pool.get("allocation") == "dra" or (pool.get("sharing") or {}).get("strategy", "none") == strategy:
                continue
            edited = _copy(config)
            target = next(p for p in pools(edited) if p["name"] == pool["name"])
            target["sharing"] = dict(settings)
            if strategy == "none":
                del target["sharing"]
            if valid(edited):
                return edited
        return None

    switch.__name__ = f"sharing_to_{strategy.replace('-', '_')}"
    return switch


def change_mig_layout(config: Config) -> Optional[Config]:
    for pool in container_pools(config):
        sharing = pool.get("sharing") or {}
        if not sharing.get("strategy", "").startswith("mig-"):
            continue
        for layout in ("all-1g.10gb", "all-3g.40gb", "all-balanced", "all-1g.12gb", "all-3g.47gb"):
            if layout == sharing.get("migLayout"):
                continue
            edited = _copy(config)
            next(p for p in pools(edited) if p["name"] == pool["name"])["sharing"]["migLayout"] = layout
            if valid(edited):
                return edited
    return None


def toggle_cdi(config: Config) -> Optional[Config]:
    edited = _copy(config)
    cdi = loaded(config).toolkit.cdi
    edited.setdefault("gpu-stack:toolkit", {})["cdi"] = not cdi
    return valid(edited)


def managed_to_host(config: Config) -> Optional[Config]:
    """The first managed pool's OS image starts shipping the driver."""
    managed = managed_pools(config)
    if not managed:
        return None
    edited = _copy(config)
    target = next(p for p in pools(edited) if p["name"] == managed[0].name)
    target["driver"] = {"mode": "host"}
    _rename_in_waves(edited, managed[0].name, None)
    return valid(edited)


def host_to_managed(config: Config) -> Optional[Config]:
    cfg = loaded(config)
    host = [p for p in cfg.container_pools if cfg.pool_driver(p).mode == "host"]
    if not host:
        return None
    edited = _copy(config)
    target = next(p for p in pools(edited) if p["name"] == host[0].name)
    target["driver"] = {"mode": "managed"}
    if waves(edited):
        waves(edited)[-1]["pools"].append(host[0].name)
    return valid(edited)


def change_validation_mode(config: Config) -> Optional[Config]:
    mode = loaded(config).validation.mode
    edited = _copy(config)
    edited.setdefault("gpu-stack:validation", {})["mode"] = "advisory" if mode == "strict" else "strict"
    return valid(edited)


def change_node_agent_image(config: Config) -> Optional[Config]:
    image = loaded(config).node_agent.image
    if image is None:
        return None
    edited = _copy(config)
    edited["gpu-stack:nodeAgent"]["image"] = image.rsplit(":", 1)[0] + ":0.10.1"
    return valid(edited)


def change_monitoring(config: Config) -> Optional[Config]:
    edited = _copy(config)
    monitoring = edited.setdefault("gpu-stack:monitoring", {})
    monitoring.setdefault("alerts", {})["gpuTemperatureWarningCelsius"] = 80
    current = loaded(config).monitoring.service_monitor.interval
    monitoring.setdefault("serviceMonitor", {})["interval"] = "20s" if current == "30s" else "30s"
    return valid(edited)


def change_pull_secrets(config: Config) -> Optional[Config]:
    edited = _copy(config)
    registry = edited.setdefault("gpu-stack:registry", {})
    registry["pullSecrets"] = [*registry.get("pullSecrets", []), "mirror-pull"]
    return valid(edited)


@dataclass(frozen=True)
class Edit:
    name: str
    apply: Callable[[Config], Optional[Config]]
    # What `pulumi up` then does to a live cluster, as the runbook (docs/runbook.md) states it; the suite pins the objects.
    effect: str
    # The stack the edit starts from, where it is a later step of a sequence (None: the shipped stack).
    start: Optional[Callable[[Config], Optional[Config]]] = None


EDITS = [
    Edit("driver version bump", driver_version_bump,
         "updates the driver DaemonSets of the pools on the stack's version in place (OnDelete: no pod moves yet); the node agents replace each node's driver within the fleet's one budget (maxUnavailable nodes at once across every DaemonSet), cordoned and drained, wave by wave behind the gates, which re-run"),
    Edit("kernel module type switch", kernel_module_type_switch,
         "as a version bump, for the pools whose effective module type changes"),
    Edit("rename a wave", rename_wave, "changes no object: a wave is an ordering, not an object"),
    Edit("reorder waves", reorder_waves,
         "creates and deletes gate Jobs (one per pool a later wave waits for) and updates their Role; no DaemonSet changes"),
    Edit("move a pool to another wave", move_pool_to_another_wave, "as reordering: only gates and what waits for them change"),
    Edit("add a wave", add_wave, "as adding a pool, plus gates for the pools of the wave that is no longer last"),
    Edit("remove a wave", remove_wave,
         "deletes the gates of the wave before it (with the last gate, the gates' RBAC); no DaemonSet changes"),
    Edit("remove all waves", remove_all_waves, "deletes every gate and the gates' RBAC; no DaemonSet changes"),
    Edit("add a pool", add_pool,
         "creates the pool's driver DaemonSet and updates the node-pools document and the stack gate's Role; nothing else moves"),
    Edit("remove a pool", remove_pool,
         "deletes the pool's driver DaemonSet with orphan propagation (the node agent retires each node's driver at the budget's pace, never under GPU work unless the upgrade drains), its gate, and what only it used"),
    Edit("rename a pool", rename_pool,
         "with `driver.daemonSetName` keeping the DaemonSet's name: updates it in place (its pool term), renames the pool's gate; the loaded drivers stay"),
    Edit("rename a pool, driver name unpinned", rename_pool_unpinned,
         "creates `nvidia-driver-daemonset-<new>` and deletes the old one with orphan propagation; the node agent hands each node over at the budget's pace, keeping the loaded driver"),
    Edit("add a second OS", add_second_os, "as adding a pool: the new pool's DaemonSet runs its own image; the others do not move"),
    Edit("change a pool's OS", change_pool_os,
         "DANGEROUS (`node-image-changed`): updates that pool's one DaemonSet in place to the new OS, so nodes still on the old OS lose their driver at once; list the new OS next to the old one instead"),
    Edit("change a pool's node image in place", change_node_image_in_place,
         "DANGEROUS (`node-image-changed`): the pool's one DaemonSet now selects the new kernel (or OS), so every node still on the old one loses its driver pod at once, outside the budget; list the new image next to the old one instead"),
    Edit("list a pool's next node image", list_next_node_image,
         "creates one driver DaemonSet for the new image (`nvidia-driver-daemonset-<pool>-[<kernel>-]<os>`); the pool's DaemonSet keeps its name and template through `daemonSetNames`, so no driver pod restarts; each node moves to the new DaemonSet when it boots the new image"),
    Edit("unlist a pool's previous node image", unlist_previous_node_image, start=list_next_node_image, effect=
         "(after the step before) deletes the old image's DaemonSet with orphan propagation; nodes still on the old image keep their driver until the node agent retires it at the budget's pace; `gpustack diff` notes how to count them"),
    Edit("sharing to none", _sharing_switch("none"),
         "updates the plugin configs and the node-pools document (deletes the configs, and updates the plugin and GFD, when no pool shares any more)"),
    Edit("sharing to time-slicing", _sharing_switch("time-slicing"),
         "updates or creates the plugin configs; the plugin and GFD gain their config-manager when this is the first sharing pool"),
    Edit("sharing to MPS", _sharing_switch("mps"), "as time-slicing, and creates the MPS control daemon with the first MPS pool"),
    Edit("sharing to MIG", _sharing_switch("mig-mixed"),
         "as time-slicing; the node-pools document names the layout (`nvidia.com/mig.config`), which the MIG manager applies on each node as its agent takes a slot of the fleet's budget"),
    Edit("change a MIG layout", change_mig_layout,
         "updates the node-pools document: each node's agent changes its layout label within the fleet's budget and holds the slot until the MIG manager reports success; nothing is replaced"),
    Edit("toggle CDI", toggle_cdi,
         "updates the toolkit, device plugin and MIG manager in place (on cri-o, every operand that names the nvidia RuntimeClass); the RuntimeClasses stay"),
    Edit("managed driver to host driver", managed_to_host,
         "deletes the pool's driver DaemonSet with orphan propagation (the last one takes the driver state's RBAC and probe ConfigMap along)"),
    Edit("host driver to managed driver", host_to_managed, "creates the pool's driver DaemonSet (and the driver state, if it is the first)"),
    Edit("change validation mode", change_validation_mode, "re-runs the stack gate in the new mode; nothing else changes"),
    Edit("change the node agent image", change_node_agent_image,
         "updates the labeller and inventory DaemonSets and the upgrade coordinator, and re-runs every gate with the new image"),
    Edit("change monitoring options", change_monitoring, "updates the ServiceMonitors and the PrometheusRule in place"),
    Edit("change pull secrets", change_pull_secrets,
         "every pod template names them: every workload rolls in place, the drivers within the fleet's budget, wave by wave, keeping the loaded driver (same digest), and every gate re-runs"),
]
