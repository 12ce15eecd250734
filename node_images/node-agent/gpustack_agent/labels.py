"""Decide which labels the agent should change on its own node.

This module is pure (no I/O) so that every labelling rule can be tested against
recorded Node objects. Nodes are plain dicts shaped like ``kubectl get node -o json``.

The hard part is sharing label keys with other writers: the GPU Operator's driver
manager and MIG manager rewrite ``nvidia.com/gpu.deploy.*`` values while they work,
and users write ``"false"`` to opt a node out. The rules below therefore only ever
*add* a deploy label or *remove* one that belongs to another workload; they never
replace a value someone else chose.

Version 2 of the config adds ``removal``, the pace at which deploy labels may leave nodes; which changes wait for
it is decided in :mod:`.removal`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

SUPPORTED_CONFIG_VERSIONS = (1, 2)

POOL_LABEL = "gpu-stack/pool"
# Names the driver DaemonSet that serves the node (a pool label the Pulumi program sets); the driver DaemonSets
# select nodes by it, so changing its value hands the node from one DaemonSet to another.
DRIVER_LABEL = "gpu-stack/driver"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
OPERANDS_LABEL = "nvidia.com/gpu.deploy.operands"
APPLIED_LABELS_ANNOTATION = "gpu-stack/applied-labels"
PAUSED_MARKER = "paused-for-"

# Kubernetes label values: at most 63 characters, alphanumeric at both ends.
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
# RFC 1123 label, the form of a namespace name.
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_PERCENT_RE = re.compile(r"^([0-9]+)%$")


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


@dataclass(frozen=True)
class Removal:
    """How fast deploy labels may leave nodes: at most ``max_unavailable`` nodes at once (a count, or "N%" of the
    GPU nodes), sharing that budget through Leases in ``namespace``, where the operands run; ``drain`` evicts GPU
    work that would otherwise make a node wait."""

    max_unavailable: int | str
    drain: bool
    namespace: str


@dataclass(frozen=True)
class Config:
    gpu_node_labels: tuple[str, ...]
    managed_deploy_labels: frozenset[str]
    pools: tuple[Pool, ...]
    # None for a version 1 document: its Pulumi program granted the agent no Leases and no pods, so every change
    # is applied at once, as agents before 0.4.0 did.
    removal: Removal | None = None


def _str_list(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{where} must be a list of non-empty strings, got {value!r}")
    return list(value)


def _str_map(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and k and isinstance(v, str) for k, v in value.items()
    ):
        raise ConfigError(f"{where} must be an object of string to string, got {value!r}")
    return dict(value)


def is_label_value(value: str) -> bool:
    return len(value) <= 63 and bool(_LABEL_VALUE_RE.match(value))


def _check_label_value(value: str, where: str) -> None:
    # Caught here rather than by the API server, whose 422 would only show up as a
    # failed patch on every node at once.
    if not is_label_value(value):
        raise ConfigError(f"{where} {value!r} is not a valid Kubernetes label value")


def _parse_removal(raw: Any) -> Removal:
    if not isinstance(raw, dict):
        raise ConfigError(f"removal must be an object with maxUnavailable, drain and namespace, got {raw!r}")
    budget = raw.get("maxUnavailable")
    if isinstance(budget, str):
        match = _PERCENT_RE.match(budget)
        if not match or not 1 <= int(match.group(1)) <= 100:
            raise ConfigError(f"removal.maxUnavailable must be a count of at least 1 or a percentage from 1% to "
                              f"100%, got {budget!r}")
    elif isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        # bool is an int in Python, and `true` would otherwise read as a budget of one node.
        raise ConfigError(f"removal.maxUnavailable must be a count of at least 1 or a percentage from 1% to 100%, "
                          f"got {budget!r}")
    drain = raw.get("drain")
    if not isinstance(drain, bool):
        raise ConfigError(f"removal.drain must be true or false, got {drain!r}")
    namespace = raw.get("namespace")
    if not isinstance(namespace, str) or len(namespace) > 63 or not _DNS_LABEL_RE.match(namespace):
        raise ConfigError(f"removal.namespace must be a namespace name (an RFC 1123 label), got {namespace!r}")
    return Removal(budget, drain, namespace)


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
            f"unsupported node-pools config version {version!r}: this agent understands versions "
            f"{' and '.join(map(str, SUPPORTED_CONFIG_VERSIONS))}; deploy a node agent image that "
            "matches the Pulumi program"
        )
    # Required in version 2: without it, the removals version 2 exists to pace would go at full speed.
    removal = _parse_removal(raw.get("removal")) if version == 2 else None

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
        raise ConfigError(f"pools must be a list, got {raw_pools!r}")

    pools: list[Pool] = []
    for index, raw_pool in enumerate(raw_pools):
        where = f"pools[{index}]"
        if not isinstance(raw_pool, dict):
            raise ConfigError(f"{where} must be an object, got {raw_pool!r}")
        name = raw_pool.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}.name must be a non-empty string, got {name!r}")
        _check_label_value(name, f"{where}.name")
        if any(p.name == name for p in pools):
            raise ConfigError(f"{where}.name {name!r} is used by more than one pool")
        selector = _str_map(raw_pool.get("nodeSelector", {}), f"{where}.nodeSelector")
        deploy = set(_str_list(raw_pool.get("deployLabels", []), f"{where}.deployLabels"))
        deploy -= {OPERANDS_LABEL}
        unmanaged = sorted(deploy - managed)
        if unmanaged:
            # The agent could add these but never remove them when the node changes pool.
            raise ConfigError(f"{where}.deployLabels {unmanaged} are not in managedDeployLabels")
        pool_labels = _str_map(raw_pool.get("labels", {}), f"{where}.labels")
        for key, value in pool_labels.items():
            _check_label_value(value, f"{where}.labels[{key!r}]")
        reserved = sorted(
            set(pool_labels) & ({POOL_LABEL, GPU_PRESENT_LABEL, OPERANDS_LABEL} | managed)
        )
        if reserved:
            raise ConfigError(f"{where}.labels may not set {reserved}: the agent manages them by other rules")
        gpu_model = raw_pool.get("gpuModel")
        if gpu_model is not None and (not isinstance(gpu_model, str) or not gpu_model):
            raise ConfigError(f"{where}.gpuModel must be a non-empty string, got {gpu_model!r}")
        pools.append(Pool(name, selector, frozenset(deploy), pool_labels, gpu_model))

    # If a selector or the GPU test depended on a label the agent writes, one pass
    # would change the outcome of the next and the labels would never settle.
    written = {POOL_LABEL, GPU_PRESENT_LABEL} | managed
    for pool in pools:
        written |= set(pool.labels)
    for index, pool in enumerate(pools):
        clash = sorted(set(pool.node_selector) & written)
        if clash:
            raise ConfigError(f"pools[{index}].nodeSelector uses labels the agent writes: {clash}")
    clash = sorted(set(gpu_node_labels) & written)
    if clash:
        raise ConfigError(f"gpuNodeLabels uses labels the agent writes: {clash}")

    return Config(tuple(gpu_node_labels), managed, tuple(pools), removal)


def is_gpu_node(node_labels: Mapping[str, str], config: Config) -> bool:
    return any(node_labels.get(key) == "true" for key in config.gpu_node_labels)


def match_pool(node_labels: Mapping[str, str], config: Config) -> Pool | None:
    """First pool whose selector is a subset of the node's labels; order is priority."""
    for pool in config.pools:
        if all(node_labels.get(k) == v for k, v in pool.node_selector.items()):
            return pool
    return None


def applied_labels(annotations: Mapping[str, str]) -> frozenset[str]:
    """Keys recorded as applied by the agent; an unreadable record counts as none,
    because removing labels on a guess could strip something a user set."""
    raw = annotations.get(APPLIED_LABELS_ANNOTATION)
    if raw is None:
        return frozenset()
    try:
        keys = json.loads(raw)
    except ValueError:
        return frozenset()
    if not isinstance(keys, list):
        return frozenset()
    return frozenset(k for k in keys if isinstance(k, str))


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

    if is_gpu_node(labels, cfg):
        if labels.get(GPU_PRESENT_LABEL) != "true":
            label_changes[GPU_PRESENT_LABEL] = "true"

        pool = match_pool(labels, cfg)
        if pool is not None:
            owned = {POOL_LABEL: pool.name, **pool.labels}

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
