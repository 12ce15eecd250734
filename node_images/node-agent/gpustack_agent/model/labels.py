"""Decide which labels the agent should change on its own node.

This module is pure (no I/O) so that every labelling rule can be tested against
recorded Node objects. Nodes are plain dicts shaped like ``kubectl get node -o json``.

The hard part is sharing label keys with other writers: the GPU Operator's driver
manager and MIG manager rewrite ``nvidia.com/gpu.deploy.*`` values while they work,
and users write ``"false"`` to opt a node out. The rules below therefore only ever
*add* a deploy label or *remove* one that belongs to another workload; they never
replace a value someone else chose.

Version 2 of the config adds ``removal``, the pace at which deploy labels may leave nodes; which changes wait for
it is decided in :mod:`.removal`. Version 3 makes it the fleet's one disruption budget (:mod:`.budget`): it adds
the upgrade's settings to ``removal`` and ``drivers``, each driver DaemonSet's template digest, so that the agent
upgrades its own node's driver within the budget (:mod:`.upgrade`). Version 4 gives each driver pool
``driverImages`` in place of a static ``gpu-stack/driver`` label: the DaemonSet of the node image a node runs
(:mod:`.driverimages`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from gpustack_agent.model import driverimages

SUPPORTED_CONFIG_VERSIONS = (1, 2, 3, 4)

POOL_LABEL = "gpu-stack/pool"
# Names the driver DaemonSet that serves the node (a pool label the Pulumi program sets); the driver DaemonSets
# select nodes by it, so changing its value hands the node from one DaemonSet to another.
DRIVER_LABEL = "gpu-stack/driver"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
OPERANDS_LABEL = "nvidia.com/gpu.deploy.operands"
APPLIED_LABELS_ANNOTATION = "gpu-stack/applied-labels"
PAUSED_MARKER = "paused-for-"

# Bounds on the document, far above what a Pulumi program writes (it refuses more pools than this itself): a
# document beyond them is a broken or hostile ConfigMap, and the agent compares every pool on every node event.
MAX_POOLS = 256
# Entries of one list or map: gpuNodeLabels, managedDeployLabels, a pool's nodeSelector, labels, deployLabels.
MAX_ENTRIES = 128

# Kubernetes label values: at most 63 characters, alphanumeric at both ends. All patterns here are used with
# fullmatch: Python's `$` would let a trailing newline through.
_LABEL_VALUE_RE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
# The name part of a label key (a qualified name): 1 to 63 characters, alphanumeric at both ends.
_LABEL_NAME_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
# RFC 1123 label, the form of a namespace name; a subdomain is dot-separated labels, the prefix of a label key.
_DNS_LABEL_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_PERCENT_RE = re.compile(r"([0-9]{1,3})%")
_DIGEST_RE = re.compile(r"[0-9a-f]{8,64}")
# As the Pulumi program bounds upgrade.drain.podSelector.
MAX_SELECTOR_LENGTH = 1024


class ConfigError(ValueError):
    """The node-pools config cannot be used; the agent must not touch labels."""


@dataclass(frozen=True)
class Pool:
    name: str
    node_selector: Mapping[str, str]
    deploy_labels: frozenset[str]
    labels: Mapping[str, str]
    # Not used for labelling: the inventory loop compares the node's GPUs with it. None from a Pulumi program
    # that predates the key.
    gpu_model: str | None = None
    # Version 4: the pool's driver DaemonSets, one per node image (empty: no managed driver, or an older document
    # whose labels name the one DaemonSet).
    driver_images: tuple[driverimages.DriverImage, ...] = ()


@dataclass(frozen=True)
class Removal:
    """The fleet's disruption budget and how a node goes through a change: at most ``max_unavailable`` nodes at
    once (a count, or "N%" of the GPU nodes with a managed driver) and at most ``max_parallel`` (0: no bound of its
    own), shared through the budget ConfigMap in ``namespace``, where the operands run. ``drain`` evicts GPU work
    that would otherwise make a label removal wait. The rest is version 3: ``driver_upgrade`` "rolling" lets the
    agent replace its node's outdated driver pod (cordon, evict GPU pods with ``gpu_pod_eviction``, delete the pod,
    wait until the new one is Ready, uncordon); a node not Ready within ``node_ready_timeout_seconds`` stays
    cordoned and halts the rollout; ``paused`` starts no new node."""

    max_unavailable: int | str
    drain: bool
    namespace: str
    max_parallel: int = 0
    paused: bool = False
    driver_upgrade: str = "manual"
    gpu_pod_eviction: bool = True
    drain_pod_selector: str = ""
    drain_timeout_seconds: int = 300
    node_ready_timeout_seconds: int = 1800


@dataclass(frozen=True)
class Config:
    gpu_node_labels: tuple[str, ...]
    managed_deploy_labels: frozenset[str]
    pools: tuple[Pool, ...]
    # None for a version 1 document: its Pulumi program granted the agent no Leases and no pods, so every change
    # is applied at once, as agents before 0.4.0 did.
    removal: Removal | None = None
    # Version 3: driver DaemonSet name -> the digest of its pod template (its gpu-stack/template-digest annotation).
    drivers: Mapping[str, str] = field(default_factory=dict)

    @property
    def driver_images(self) -> tuple[driverimages.DriverImage, ...]:
        return tuple(image for pool in self.pools for image in pool.driver_images)


def _shown(value: Any) -> str:
    """``value`` for an error message, cut to 80 characters: a broken document can hold megabytes."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:80]}... ({len(text)} characters)"


def _str_list(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{where} must be a list of non-empty strings, got {_shown(value)}")
    if len(value) > MAX_ENTRIES:
        raise ConfigError(f"{where} has {len(value)} entries, more than the limit of {MAX_ENTRIES}")
    for key in value:
        _check_label_key(key, where)
    return list(value)


def _str_map(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and k and isinstance(v, str) for k, v in value.items()
    ):
        raise ConfigError(f"{where} must be an object of string to string, got {_shown(value)}")
    if len(value) > MAX_ENTRIES:
        raise ConfigError(f"{where} has {len(value)} entries, more than the limit of {MAX_ENTRIES}")
    for key, item in value.items():
        _check_label_key(key, where)
        _check_label_value(item, f"{where}[{_shown(key)}]")
    return dict(value)


def is_label_value(value: str) -> bool:
    return len(value) <= 63 and _LABEL_VALUE_RE.fullmatch(value) is not None


def is_label_key(key: str) -> bool:
    """A Kubernetes label key: an optional DNS subdomain prefix of at most 253 characters and `/`, then a name of
    1 to 63 characters."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or _DNS_SUBDOMAIN_RE.fullmatch(prefix) is None):
        return False
    return len(name) <= 63 and _LABEL_NAME_RE.fullmatch(name) is not None


def _check_label_key(key: str, where: str) -> None:
    # The API server would refuse the patch (422), which ends the agent on every node at once.
    if not is_label_key(key):
        raise ConfigError(f"{where}: {_shown(key)} is not a valid Kubernetes label key")


def _check_label_value(value: str, where: str) -> None:
    # Caught here rather than by the API server, whose 422 would only show up as a
    # failed patch on every node at once.
    if not is_label_value(value):
        raise ConfigError(f"{where} {_shown(value)} is not a valid Kubernetes label value")


def _int_setting(raw: dict, key: str, default: int, low: int, high: int) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"removal.{key} must be an integer from {low} to {high}, got {_shown(value)}")
    return value


def _bool_setting(raw: dict, key: str, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"removal.{key} must be true or false, got {_shown(value)}")
    return value


def _parse_removal(raw: Any, version: int) -> Removal:
    if not isinstance(raw, dict):
        raise ConfigError(f"removal must be an object with maxUnavailable, drain and namespace, got {_shown(raw)}")
    budget = raw.get("maxUnavailable")
    if isinstance(budget, str):
        match = _PERCENT_RE.fullmatch(budget)
        if not match or not 1 <= int(match.group(1)) <= 100:
            raise ConfigError(f"removal.maxUnavailable must be a count of at least 1 or a percentage from 1% to "
                              f"100%, got {_shown(budget)}")
    elif isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        # bool is an int in Python, and `true` would otherwise read as a budget of one node.
        raise ConfigError(f"removal.maxUnavailable must be a count of at least 1 or a percentage from 1% to 100%, "
                          f"got {_shown(budget)}")
    drain = raw.get("drain")
    if not isinstance(drain, bool):
        raise ConfigError(f"removal.drain must be true or false, got {_shown(drain)}")
    namespace = raw.get("namespace")
    if not isinstance(namespace, str) or len(namespace) > 63 or not _DNS_LABEL_RE.fullmatch(namespace):
        raise ConfigError(f"removal.namespace must be a namespace name (an RFC 1123 label), got {_shown(namespace)}")
    if version < 3:
        # Version 2 paced label changes only: driver DaemonSets rolled by themselves.
        return Removal(budget, drain, namespace)
    strategy = raw.get("driverUpgrade")
    if strategy not in ("rolling", "manual"):
        raise ConfigError(f"removal.driverUpgrade must be rolling or manual, got {_shown(strategy)}")
    selector = raw.get("drainPodSelector", "")
    if not isinstance(selector, str) or len(selector) > MAX_SELECTOR_LENGTH:
        raise ConfigError(f"removal.drainPodSelector must be a label selector of at most {MAX_SELECTOR_LENGTH} "
                          f"characters, got {_shown(selector)}")
    return Removal(
        budget, drain, namespace,
        max_parallel=_int_setting(raw, "maxParallelUpgrades", 0, 0, 1_000_000),
        paused=_bool_setting(raw, "paused", False),
        driver_upgrade=strategy,
        gpu_pod_eviction=_bool_setting(raw, "gpuPodEviction", True),
        drain_pod_selector=selector,
        drain_timeout_seconds=_int_setting(raw, "drainTimeoutSeconds", 300, 0, 86_400),
        node_ready_timeout_seconds=_int_setting(raw, "nodeReadyTimeoutSeconds", 1800, 60, 86_400),
    )


def _parse_drivers(raw: Any) -> dict[str, str]:
    if not isinstance(raw, dict) or len(raw) > MAX_POOLS:
        raise ConfigError(f"drivers must be an object of at most {MAX_POOLS} DaemonSet names to template digests, "
                          f"got {_shown(raw)}")
    for name, digest in raw.items():
        if not isinstance(name, str) or len(name) > 253 or _DNS_SUBDOMAIN_RE.fullmatch(name) is None:
            raise ConfigError(f"drivers: {_shown(name)} is not a DaemonSet name")
        if not isinstance(digest, str) or _DIGEST_RE.fullmatch(digest) is None:
            raise ConfigError(f"drivers[{_shown(name)}] must be a template digest (hex), got {_shown(digest)}")
    return dict(raw)


def parse_config(raw: Any) -> Config:
    """Validate the node-pools config written by the Pulumi program.

    Raises ConfigError for anything the rules in :func:`desired_patch` could not
    apply safely, including an unknown ``version`` (a newer Pulumi program talking
    to an older agent image must not be half-understood).
    """
    if not isinstance(raw, dict):
        raise ConfigError(f"node-pools config must be a JSON object, got {type(raw).__name__}")
    version = raw.get("version")
    if isinstance(version, bool) or version not in SUPPORTED_CONFIG_VERSIONS:
        raise ConfigError(
            f"unsupported node-pools config version {_shown(version)}: this agent understands versions "
            f"{' and '.join(map(str, SUPPORTED_CONFIG_VERSIONS))}; deploy a node agent image that "
            "matches the Pulumi program"
        )
    # Required in version 2: without it, the removals version 2 exists to pace would go at full speed.
    removal = _parse_removal(raw.get("removal"), version) if version >= 2 else None
    drivers = _parse_drivers(raw.get("drivers", {})) if version >= 3 else {}

    gpu_node_labels = _str_list(raw.get("gpuNodeLabels"), "gpuNodeLabels")
    if not gpu_node_labels:
        raise ConfigError("gpuNodeLabels must name at least one label, or no node is a GPU node")

    # operands is the user's master switch (rule 5). If the agent managed it, setting
    # it to "false" would make the agent remove it, after which the agent would add
    # every deploy label back on the next pass.
    managed = frozenset(_str_list(raw.get("managedDeployLabels", []), "managedDeployLabels"))
    managed -= {OPERANDS_LABEL}

    raw_pools = raw.get("pools", [])
    if not isinstance(raw_pools, list):
        raise ConfigError(f"pools must be a list, got {_shown(raw_pools)}")
    if len(raw_pools) > MAX_POOLS:
        raise ConfigError(f"pools has {len(raw_pools)} entries, more than the limit of {MAX_POOLS}")

    pools: list[Pool] = []
    for index, raw_pool in enumerate(raw_pools):
        pools.append(_parse_pool(raw_pool, f"pools[{index}]", pools, managed, version))
    _check_labels_settle(pools, managed, gpu_node_labels)

    return Config(tuple(gpu_node_labels), managed, tuple(pools), removal, drivers)


def _parse_pool(raw_pool: Any, where: str, earlier: Sequence[Pool], managed: frozenset[str], version: int) -> Pool:
    """One entry of ``pools``, checked against the pools before it and the labels the agent manages."""
    if not isinstance(raw_pool, dict):
        raise ConfigError(f"{where} must be an object, got {_shown(raw_pool)}")
    name = raw_pool.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}.name must be a non-empty string, got {_shown(name)}")
    _check_label_value(name, f"{where}.name")
    if any(p.name == name for p in earlier):
        raise ConfigError(f"{where}.name {name!r} is used by more than one pool")
    selector = _str_map(raw_pool.get("nodeSelector", {}), f"{where}.nodeSelector")
    deploy = set(_str_list(raw_pool.get("deployLabels", []), f"{where}.deployLabels"))
    deploy -= {OPERANDS_LABEL}
    unmanaged = sorted(deploy - managed)
    if unmanaged:
        # The agent could add these but never remove them when the node changes pool.
        raise ConfigError(f"{where}.deployLabels {unmanaged} are not in managedDeployLabels")
    pool_labels = _str_map(raw_pool.get("labels", {}), f"{where}.labels")
    reserved = sorted(
        set(pool_labels) & ({POOL_LABEL, GPU_PRESENT_LABEL, OPERANDS_LABEL} | managed
                            | ({DRIVER_LABEL} if version >= 4 else set()))
    )
    if reserved:
        raise ConfigError(f"{where}.labels may not set {reserved}: the agent manages them by other rules")
    driver = pool_labels.get(DRIVER_LABEL)
    if driver is not None and (len(driver) > 253 or _DNS_SUBDOMAIN_RE.fullmatch(driver) is None):
        # Driver DaemonSets select nodes by it: a value that cannot name one leaves the node without a driver.
        raise ConfigError(f"{where}.labels[{DRIVER_LABEL!r}] {_shown(driver)} is not a DaemonSet name")
    gpu_model = raw_pool.get("gpuModel")
    if gpu_model is not None and (not isinstance(gpu_model, str) or not gpu_model or len(gpu_model) > 253):
        raise ConfigError(f"{where}.gpuModel must be a non-empty string of at most 253 characters, "
                          f"got {_shown(gpu_model)}")
    images: tuple[driverimages.DriverImage, ...] = ()
    if version >= 4 and "driverImages" in raw_pool:
        try:
            images = driverimages.parse(
                raw_pool["driverImages"], f"{where}.driverImages",
                is_name=lambda n: len(n) <= 253 and _DNS_SUBDOMAIN_RE.fullmatch(n) is not None,
                is_label_key=is_label_key, is_label_value=is_label_value)
        except driverimages.DriverImagesError as exc:
            raise ConfigError(str(exc)) from None
    return Pool(name, selector, frozenset(deploy), pool_labels, gpu_model, images)


def _check_labels_settle(pools: Sequence[Pool], managed: frozenset[str], gpu_node_labels: Sequence[str]) -> None:
    # If a selector or the GPU test depended on a label the agent writes, one pass
    # would change the outcome of the next and the labels would never settle.
    written = {POOL_LABEL, GPU_PRESENT_LABEL} | managed
    for pool in pools:
        written |= set(pool.labels) | ({DRIVER_LABEL} if pool.driver_images else set())
    for index, pool in enumerate(pools):
        clash = sorted(set(pool.node_selector) & written)
        if clash:
            raise ConfigError(f"pools[{index}].nodeSelector uses labels the agent writes: {clash}")
    clash = sorted(set(gpu_node_labels) & written)
    if clash:
        raise ConfigError(f"gpuNodeLabels uses labels the agent writes: {clash}")


def is_gpu_node(node_labels: Mapping[str, str], config: Config) -> bool:
    return any(node_labels.get(key) == "true" for key in config.gpu_node_labels)


def match_pool(node_labels: Mapping[str, str], config: Config) -> Pool | None:
    """First pool whose selector is a subset of the node's labels; order is priority."""
    for pool in config.pools:
        if all(node_labels.get(k) == v for k, v in pool.node_selector.items()):
            return pool
    return None


def read_applied_record(raw: Any) -> tuple[frozenset[str], str | None]:
    """The keys an applied-labels record names, and why it cannot be read (None when it can). An unreadable
    record counts as none, because removing labels on a guess could strip something a user set."""
    if raw is None:
        return frozenset(), None
    try:
        keys = json.loads(raw) if isinstance(raw, str) else None
    except (ValueError, RecursionError):
        return frozenset(), "not JSON"
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        return frozenset(), "not a JSON list of label keys"
    # The agent records a pool's labels, at most MAX_ENTRIES of them and the pool label.
    if len(keys) > MAX_ENTRIES + 1:
        return frozenset(), f"names more than {MAX_ENTRIES + 1} labels"
    return frozenset(keys), None


def applied_labels(annotations: Mapping[str, str]) -> frozenset[str]:
    """Keys recorded as applied by the agent (:func:`read_applied_record`)."""
    return read_applied_record(annotations.get(APPLIED_LABELS_ANNOTATION))[0]


def applied_record(keys: frozenset[str] | set[str]) -> str:
    """The value of the applied-labels annotation that records ``keys``."""
    return json.dumps(sorted(keys), separators=(",", ":"))


def desired_patch(node: Mapping[str, Any], config: Mapping[str, Any] | Config) -> dict[str, Any] | None:
    """JSON merge patch that brings ``node``'s labels in line with ``config``.

    Returns ``{"metadata": {"labels": {...}, "annotations": {...}}}`` holding only
    keys that change (``None`` deletes), or None when the node is already right.
    """
    cfg = config if isinstance(config, Config) else parse_config(config)
    metadata = node.get("metadata") or {}
    labels: Mapping[str, str] = metadata.get("labels") or {}
    annotations: Mapping[str, str] = metadata.get("annotations") or {}

    label_changes: dict[str, str | None] = {}
    owned: dict[str, str] = {}
    pool: Pool | None = None

    if is_gpu_node(labels, cfg):
        if labels.get(GPU_PRESENT_LABEL) != "true":
            label_changes[GPU_PRESENT_LABEL] = "true"

        pool = match_pool(labels, cfg)
        if pool is not None:
            owned = {POOL_LABEL: pool.name, **pool.labels}
            if pool.driver_images:
                driver = driverimages.wanted(labels, pool.driver_images, labels.get(DRIVER_LABEL))
                if driver is not None:
                    owned[DRIVER_LABEL] = driver

        operands_off = labels.get(OPERANDS_LABEL) == "false"
        # A node in no pool gets no deploy labels: treating it as a pool with an empty
        # deploy list means a node that leaves every pool stops running operands.
        wanted = frozenset() if operands_off or pool is None else pool.deploy_labels

        for key in sorted(cfg.managed_deploy_labels):
            value = labels.get(key)
            if key in wanted:
                # Missing or empty only: any other value was chosen by a manager or a user.
                if not value:
                    label_changes[key] = "true"
            elif value is not None:
                # A paused-for-* value means a manager is mid-operation and will write
                # the label back itself; deleting it would race that write. The user's
                # operands=false switch outranks that.
                if operands_off or PAUSED_MARKER not in value:
                    label_changes[key] = None

    untracked = {GPU_PRESENT_LABEL, OPERANDS_LABEL} | cfg.managed_deploy_labels
    for key in sorted(applied_labels(annotations) - owned.keys() - untracked):
        if key in labels:
            label_changes[key] = None
    for key, value in owned.items():
        if labels.get(key) != value:
            label_changes[key] = value

    annotation_changes: dict[str, str | None] = {}
    unlisted = None
    if owned and pool is not None and pool.driver_images:
        unlisted = driverimages.unlisted_reason(labels, pool.name, pool.driver_images)
    if annotations.get(driverimages.UNLISTED_ANNOTATION) != unlisted:
        annotation_changes[driverimages.UNLISTED_ANNOTATION] = unlisted
    current_record = annotations.get(APPLIED_LABELS_ANNOTATION)
    if owned:
        record = applied_record(set(owned))
        if current_record != record:
            annotation_changes[APPLIED_LABELS_ANNOTATION] = record
    elif current_record is not None:
        annotation_changes[APPLIED_LABELS_ANNOTATION] = None

    patch_metadata: dict[str, Any] = {}
    if label_changes:
        patch_metadata["labels"] = label_changes
    if annotation_changes:
        patch_metadata["annotations"] = annotation_changes
    return {"metadata": patch_metadata} if patch_metadata else None


def describe_changes(node: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, dict[str, dict[str, str | None]]]:
    """``{"labels": {key: {"old": ..., "new": ...}}, "annotations": {...}}`` for the log line."""
    metadata = node.get("metadata") or {}
    described: dict[str, dict[str, dict[str, str | None]]] = {}
    for section in ("labels", "annotations"):
        changes = (patch.get("metadata") or {}).get(section) or {}
        if changes:
            current = metadata.get(section) or {}
            described[section] = {
                key: {"old": current.get(key), "new": new} for key, new in sorted(changes.items())
            }
    return described
