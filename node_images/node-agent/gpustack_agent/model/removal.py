"""Decide which label changes must wait for a removal slot, and what a node holding one still waits for.

Removing a deploy label pulls an operand (the driver, the device plugin, ...) off the node. When a pool is
renamed or removed, or loses a component, every node of it would lose its operands in the same second; with
config version 2 the agent instead paces those removals: at most ``removal.maxUnavailable`` nodes at once (the
slots of :mod:`.budget`), never from under GPU work unless the upgrade drains. Changing a node's
``gpu-stack/driver`` label (handing it from one driver DaemonSet to another), changing its MIG layout
(``nvidia.com/mig.config``) and retiring a driver pod whose DaemonSet was deleted with orphan propagation go at the
same pace, within the same budget as driver upgrades.

This module is pure: nodes and pods are dicts, and :mod:`.pacer` does the requests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from gpustack_agent.model import driverimages, pods as podinfo
from gpustack_agent.model.budget import DRIVER_HANDOVER, LABEL_REMOVAL, MIG_RELAYOUT
from gpustack_agent.model.labels import APPLIED_LABELS_ANNOTATION, applied_record, Config, desired_patch, DRIVER_LABEL, OPERANDS_LABEL

DRIVER_DEPLOY_LABEL = "nvidia.com/gpu.deploy.driver"
# The operands whose pod is the node's "driver": its restart takes the GPUs from the work on the node (the driver; the
# vGPU manager under vGPU VMs; the VFIO manager, whose preStop unbinds every GPU from vfio-pci under passthrough
# VMs). Their DaemonSets are OnDelete and the node-pools document names each in `drivers`.
DRIVER_LIKE_DEPLOY_LABELS = (DRIVER_DEPLOY_LABEL, "nvidia.com/gpu.deploy.vgpu-manager",
                             "nvidia.com/gpu.deploy.vfio-manager")


def runs_driver_like(node_labels: Mapping[str, str]) -> bool:
    """Whether the node is deployed a driver-like operand (its deploy label is `true`)."""
    return any(node_labels.get(label) == "true" for label in DRIVER_LIKE_DEPLOY_LABELS)
# A pool's MIG layout, and where the MIG manager reports applying it (fact sheet §6.4): a relayout repartitions the
# node's GPUs, so it waits for a slot and holds it until the MIG manager says success or failed.
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
MIG_IN_PROGRESS = ("pending", "rebooting")
GPU_RESOURCE_PREFIX = "nvidia.com/"
# Log lines name this many pods and count the rest.
NAMED_PODS = 5


@dataclass(frozen=True)
class Plan:
    """What the agent wants to change on its node, split by whether it must wait for a slot."""

    patch: dict[str, Any] | None
    # The part that needs no slot: additions, value changes, the pool label; None when there is none.
    immediate: dict[str, Any] | None
    # Managed deploy labels the rest of ``patch`` removes.
    removing: frozenset[str] = frozenset()
    # (old, new) value of gpu-stack/driver that the rest of ``patch`` sets; new None removes the label.
    driver_change: tuple[str, str | None] | None = None
    # Orphaned driver pods on the node (names in the removal namespace), to be deleted.
    orphans: tuple[str, ...] = ()
    operands_off: bool = False
    # (old, new) nvidia.com/mig.config that the rest of ``patch`` sets: a relayout of the node's GPUs.
    mig_change: tuple[str, str] | None = None

    @property
    def paced(self) -> bool:
        """Whether something must wait for a slot. The user's operands=false switch never waits: it asks for
        every operand to leave this node now."""
        return bool(self.removing or self.driver_change or self.mig_change
                    or (self.orphans and not self.operands_off))

    @property
    def reason(self) -> str:
        """Why the node takes a slot, as the budget records it."""
        if self.driver_change:
            return DRIVER_HANDOVER
        if self.mig_change and not self.removing:
            return MIG_RELAYOUT
        return LABEL_REMOVAL


def _labels(node: Mapping[str, Any]) -> Mapping[str, str]:
    return (node.get("metadata") or {}).get("labels") or {}


def _immediate_part(node: Mapping[str, Any], patch: Mapping[str, Any], held_back: set[str],
                    removes_driver: bool) -> dict[str, Any] | None:
    metadata = node.get("metadata") or {}
    label_changes = {k: v for k, v in ((patch.get("metadata") or {}).get("labels") or {}).items() if k not in held_back}
    annotation_changes = dict((patch.get("metadata") or {}).get("annotations") or {})
    if removes_driver and APPLIED_LABELS_ANNOTATION in annotation_changes:
        # Until its removal is applied, the record must keep naming gpu-stack/driver: a label missing from the
        # record is one the agent never removes, and the paced removal would silently never happen.
        final = annotation_changes[APPLIED_LABELS_ANNOTATION]
        record = applied_record(set(json.loads(final)) | {DRIVER_LABEL}) if final else applied_record({DRIVER_LABEL})
        if record == (metadata.get("annotations") or {}).get(APPLIED_LABELS_ANNOTATION):
            del annotation_changes[APPLIED_LABELS_ANNOTATION]
        else:
            annotation_changes[APPLIED_LABELS_ANNOTATION] = record
    immediate: dict[str, Any] = {}
    if label_changes:
        immediate["labels"] = label_changes
    if annotation_changes:
        immediate["annotations"] = annotation_changes
    return {"metadata": immediate} if immediate else None


def plan(node: Mapping[str, Any], config: Config, node_pods: Sequence[Mapping[str, Any]] = ()) -> Plan:
    """Split :func:`labels.desired_patch` for ``node`` into what may be applied now and what waits for a slot.

    ``node_pods`` are the pods in the removal namespace on the node, where orphaned driver pods are looked for.
    Paced: removing a managed deploy label (the node left its pool, its pool was removed or renamed, or lost a
    component), changing or removing an existing gpu-stack/driver value, and orphaned driver pods. Adding
    gpu-stack/driver where the node has none is not: the node's current driver pod belongs to the DaemonSet of
    that name and stays."""
    labels = _labels(node)
    operands_off = labels.get(OPERANDS_LABEL) == "false"
    orphans = tuple(sorted(podinfo.name(p) for p in node_pods
                           if podinfo.is_orphan(p) and not podinfo.is_terminating(p)))
    patch = desired_patch(node, config)
    if patch is None:
        return Plan(None, None, orphans=orphans, operands_off=operands_off)
    changes = (patch.get("metadata") or {}).get("labels") or {}
    removing: frozenset[str] = frozenset()
    driver_change = None
    if not operands_off:
        removing = frozenset(k for k, v in changes.items() if v is None and k in config.managed_deploy_labels)
        if DRIVER_LABEL in changes and labels.get(DRIVER_LABEL):
            # A node that moved onto another image its pool lists (rebooted into the next kernel, reimaged) has no
            # working driver of its old DaemonSet to protect: it goes to the new one at once. One whose image no
            # entry lists loses its DaemonSet at the pace, never from under GPU work: its driver may still work.
            if not (changes[DRIVER_LABEL] and driverimages.moved_off(labels, labels[DRIVER_LABEL], config.driver_images)):
                driver_change = (labels[DRIVER_LABEL], changes[DRIVER_LABEL])
        elif changes.get(DRIVER_LABEL):
            # A node labelled before gpu-stack/driver existed: its driver pod's DaemonSet says which one serves it
            # now, and moving it to another is a handover like any other, not a first label.
            serving = {podinfo.owner(p, "DaemonSet") for p in node_pods
                       if podinfo.is_driver_pod(p) and not podinfo.is_finished(p) and not podinfo.is_terminating(p)}
            serving.discard(None)
            if serving and changes[DRIVER_LABEL] not in serving:
                old = sorted(serving)[0]
                if not driverimages.moved_off(labels, old, config.driver_images):
                    driver_change = (old, changes[DRIVER_LABEL])
    mig_change = None
    if not operands_off and changes.get(MIG_CONFIG_LABEL) and labels.get(MIG_CONFIG_LABEL):
        mig_change = (labels[MIG_CONFIG_LABEL], changes[MIG_CONFIG_LABEL])
        # Shown at once, as the MIG manager shows it when it starts: otherwise the success of the previous layout
        # would read as this one's, and the slot would be given back before the GPUs were repartitioned.
        patch = {**patch, "metadata": {**patch["metadata"],
                                       "labels": {**changes, MIG_STATE_LABEL: "pending"}}}
    held_back = (set(removing) | ({DRIVER_LABEL} if driver_change else set())
                 | ({MIG_CONFIG_LABEL, MIG_STATE_LABEL} if mig_change else set()))
    removes_driver = driver_change is not None and driver_change[1] is None
    immediate = _immediate_part(node, patch, held_back, removes_driver) if held_back else patch
    return Plan(patch, immediate, removing, driver_change, orphans, operands_off, mig_change)


def _requests_gpu(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    if spec.get("resourceClaims"):
        return True
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        resources = container.get("resources") or {}
        for section in ("requests", "limits"):
            if any(key.startswith(GPU_RESOURCE_PREFIX) for key in resources.get(section) or {}):
                return True
    return False


def gpu_work(node_pods: Sequence[Mapping[str, Any]], removal_namespace: str, *,
             include_daemonsets: bool = False) -> list[Mapping[str, Any]]:
    """The pods on a node (all namespaces) that a deploy label removal would pull the GPUs from: not finished,
    not the stack's own operands (the removal namespace), asking for an ``nvidia.com/`` resource or holding
    resource claims. For a drain, pods of a DaemonSet and mirror pods are left out as ``kubectl drain
    --ignore-daemonsets`` leaves them (evicted, they would come straight back, and a drain would never end); a
    wait for the work to end (``include_daemonsets``) counts them, since nothing evicts them."""
    return [
        pod for pod in node_pods
        if not podinfo.is_finished(pod)
        and podinfo.metadata(pod).get("namespace") != removal_namespace
        and (include_daemonsets or podinfo.owner(pod, "DaemonSet") is None)
        and (include_daemonsets or podinfo.owner(pod, "Node") is None)
        and _requests_gpu(pod)
    ]


def selected(pod: Mapping[str, Any], selector: str) -> bool:
    """Whether ``pod``'s labels match ``selector`` (as `kubectl drain --pod-selector` reads it: comma-separated
    ``k``, ``!k``, ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``); an empty selector selects all."""
    pod_labels = podinfo.metadata(pod).get("labels") or {}
    terms, depth, current = [], 0, ""
    for char in selector:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    for term in (t.strip() for t in terms):
        if not term:
            continue
        for op in (" notin ", " in "):
            if op in term:
                key, _, values = term.partition(op)
                wanted = {v.strip() for v in values.strip().strip("()").split(",")}
                inside = pod_labels.get(key.strip()) in wanted
                if inside != (op == " in "):
                    return False
                break
        else:
            if "!=" in term:
                key, _, value = term.partition("!=")
                if pod_labels.get(key.strip()) == value.strip():
                    return False
            elif "=" in term:
                key, _, value = term.replace("==", "=").partition("=")
                if pod_labels.get(key.strip()) != value.strip():
                    return False
            elif term.startswith("!"):
                if term[1:].strip() in pod_labels:
                    return False
            elif term not in pod_labels:
                return False
    return True


def named_pods(pod_list: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``{"pods": [up to NAMED_PODS namespace/name], "podCount": n}`` for a log line."""
    refs = sorted(podinfo.ref(p) for p in pod_list)
    return {"pods": refs[:NAMED_PODS], "podCount": len(refs)}


def labels_after(node: Mapping[str, Any], patch: Mapping[str, Any] | None) -> dict[str, str]:
    """The node's labels once ``patch`` (a JSON merge patch) is applied."""
    merged = dict(_labels(node))
    for key, value in (((patch or {}).get("metadata") or {}).get("labels") or {}).items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def hold_reasons(node_labels: Mapping[str, str], node_pods: Sequence[Mapping[str, Any]], config: Config) -> list[str]:
    """Why a node holding a slot is still in transition, judged from its labels and the pods in the removal
    namespace on it; empty once the slot can go back. In transition:

    - an operand pod whose node selector needs a managed deploy label the node no longer has: the removal has
      not finished taking it off (its DaemonSet deletes it; the slot covers the time it takes);
    - a driver pod that is orphaned, or belongs to another DaemonSet than the node's gpu-stack/driver label names;
    - a node labelled for driver DaemonSet B (and `nvidia.com/gpu.deploy.driver=true`) without a Ready pod of B:
      the handover is done only once the new driver runs. A driver that never gets Ready keeps the slot, which
      halts further removals, as a DaemonSet's rolling update halts on a node that does not come back.
    """
    reasons: list[str] = []
    driver = node_labels.get(DRIVER_LABEL)
    for pod in sorted(node_pods, key=podinfo.name):
        if podinfo.is_finished(pod):
            continue
        name = podinfo.name(pod)
        selector = (pod.get("spec") or {}).get("nodeSelector") or {}
        gone = sorted(k for k in selector if k in config.managed_deploy_labels and k not in node_labels)
        owner = podinfo.owner(pod, "DaemonSet")
        if gone:
            reasons.append(f"{name} is leaving (node selector needs {', '.join(gone)})")
        elif podinfo.is_orphan(pod):
            reasons.append(f"{name} is an orphaned driver pod")
        elif podinfo.is_driver_pod(pod) and driver and owner != driver:
            reasons.append(f"{name} is a driver pod of DaemonSet {owner}, not {driver}")
    if node_labels.get(MIG_STATE_LABEL) in MIG_IN_PROGRESS:
        reasons.append(f"the MIG manager is applying {node_labels.get(MIG_CONFIG_LABEL)} "
                       f"({MIG_STATE_LABEL}={node_labels.get(MIG_STATE_LABEL)})")
    if driver and runs_driver_like(node_labels) and not any(
        podinfo.owner(p, "DaemonSet") == driver and podinfo.is_ready(p)
        for p in node_pods
    ):
        reasons.append(f"no Ready driver pod of DaemonSet {driver} yet")
    return reasons
