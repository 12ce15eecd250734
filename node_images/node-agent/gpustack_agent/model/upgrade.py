"""Decide whether a node's driver pod is out of date, and what the node's upgrade state says.

Driver DaemonSets are OnDelete (components/states/driver/state.py): a new template changes no pod until someone deletes
it, and the one who does is the node's own agent, holding a slot of the fleet's budget (:mod:`.budget`) that the
coordinator granted it (:mod:`.coordinator`). A driver
pod is out of date, as the operator's upgrade controller judges it (fact sheet §5.2), when its
``controller-revision-hash`` is not the hash of its DaemonSet's newest ControllerRevision; that revision is the
current template only once the DaemonSet controller observed the DaemonSet's generation, and it is the template
the Pulumi program wrote only once the DaemonSet carries the template digest the node-pools config names (the
config reaches the node before the DaemonSet changes: node-labeling comes first in the state order).

Each node shows where it is in ``gpu-stack/upgrade-state`` (the operator's ``nvidia.com/gpu-driver-upgrade-state``,
with fewer steps), whatever its disruption: a driver upgrade, a handover, a label removal or a MIG relayout.

This module is pure: pods, DaemonSets and ControllerRevisions are dicts shaped like ``kubectl get -o json``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Mapping, Sequence

from gpustack_agent.model import pods as podinfo

UPGRADE_STATE_LABEL = "gpu-stack/upgrade-state"


class UpgradeState(StrEnum):
    """A node's step in a paced change, as ``gpu-stack/upgrade-state`` shows it (the label's values, spelt as NVIDIA's
    upgrade controller spells the same steps): waiting for a slot, then holding one until done or failed."""

    WAITING = "upgrade-required"  # a change waits for a slot
    DRAINING = "drain-required"  # holding a slot: cordoned, GPU work being evicted or waited for
    RESTARTING = "pod-restart-required"  # the old driver pod deleted, waiting until the new one is Ready (validated)
    CHANGING = "change-in-progress"  # holding a slot for a handover, label removal or MIG relayout
    DONE = "upgrade-done"
    FAILED = "upgrade-failed"  # the new driver did not become Ready in time: cordoned, and the rollout halted

    # As the label's plain value hashes: a member and the str read back from a Node are one key in a dict or set.
    def __hash__(self) -> int:
        return str.__hash__(self)


WAITING, DRAINING, RESTARTING, CHANGING, DONE, FAILED = UpgradeState
# The states of a node that holds a slot: after a restart, an agent that finds one of these reads the budget.
HOLDING_STATES = frozenset({DRAINING, RESTARTING, CHANGING, FAILED})

# Says that this agent cordoned the node, so that it lifts only its own cordon, never one a person or another
# controller set.
CORDON_ANNOTATION = "gpu-stack/cordoned-by"
CORDON_OWNER = "node-agent"
# Read by k8s-driver-manager in the new driver pod (fact sheet §5.3): the agent has cordoned and evicted already,
# so the driver manager neither evicts nor uncordons (which would lift the cordon before the new driver works).
UPGRADE_ENABLED_ANNOTATION = "nvidia.com/gpu-driver-upgrade-enabled"
# A person who wants a node the agent cordoned to stay cordoned says so with this annotation: a hand `kubectl
# cordon` of a node already cordoned changes nothing on it, so nothing else could tell the agent.
KEEP_CORDONED_ANNOTATION = "gpu-stack/keep-cordoned"
TEMPLATE_DIGEST_ANNOTATION = "gpu-stack/template-digest"
REVISION_HASH_LABEL = "controller-revision-hash"


def driver_pods(node_pods: Sequence[Mapping[str, Any]], daemonset: str) -> list[Mapping[str, Any]]:
    """The node's live pods of driver-like DaemonSet ``daemonset`` (a driver, a vGPU or VFIO manager)."""
    return [p for p in node_pods if podinfo.owner(p, "DaemonSet") == daemonset
            and not podinfo.is_finished(p)]


def current_revision(daemonset: Mapping[str, Any] | None, revisions: Sequence[Mapping[str, Any]],
                     digest: str) -> str | None:
    """The hash of ``daemonset``'s current template, once it is the template of ``digest`` and the DaemonSet
    controller has caught up with it; None until then (ask again later)."""
    if daemonset is None:
        return None
    metadata = daemonset.get("metadata") or {}
    if (metadata.get("annotations") or {}).get(TEMPLATE_DIGEST_ANNOTATION) != digest:
        return None
    observed = int((daemonset.get("status") or {}).get("observedGeneration") or 0)
    if observed < int(metadata.get("generation") or 0):
        return None
    name = metadata.get("name")
    owned = [r for r in revisions if podinfo.owner(r, "DaemonSet") == name]
    if not owned:
        return None
    newest = max(owned, key=lambda r: int(r.get("revision") or 0))
    labels = (newest.get("metadata") or {}).get("labels") or {}
    return labels.get(REVISION_HASH_LABEL) or str((newest.get("metadata") or {}).get("name", "")).rpartition("-")[2]


CONFIG_DIGEST_ENV = "DRIVER_CONFIG_DIGEST"


def _config_digest(pod_spec: Mapping[str, Any]) -> str | None:
    for container in (pod_spec.get("containers") or []) + (pod_spec.get("initContainers") or []):
        for variable in container.get("env") or []:
            if variable.get("name") == CONFIG_DIGEST_ENV and isinstance(variable.get("value"), str):
                return variable["value"]
    return None


def revision_config_digest(revisions: Sequence[Mapping[str, Any]], revision: str) -> str | None:
    """DRIVER_CONFIG_DIGEST of the template at ``revision`` (a ControllerRevision's data holds the template)."""
    for candidate in revisions:
        labels = (candidate.get("metadata") or {}).get("labels") or {}
        if labels.get(REVISION_HASH_LABEL) == revision:
            template = ((candidate.get("data") or {}).get("spec") or {}).get("template") or {}
            return _config_digest(template.get("spec") or {})
    return None


def keeps_driver(pod: Mapping[str, Any], new_config_digest: str | None) -> bool:
    """Whether replacing ``pod`` keeps the loaded driver: k8s-driver-manager's fast path (fact sheet §4.1, §5.3
    step 6) when the install's DRIVER_CONFIG_DIGEST is unchanged, e.g. a new pull secret or agent image. Then no GPU
    work needs to leave: the node is not cordoned and nothing is evicted."""
    old = _config_digest(pod.get("spec") or {})
    return old is not None and old == new_config_digest


def outdated_pod(node_pods: Sequence[Mapping[str, Any]], daemonset: str, revision: str) -> Mapping[str, Any] | None:
    """The node's driver pod of ``daemonset`` that is not at ``revision`` (and not already going), if any."""
    for pod in driver_pods(node_pods, daemonset):
        if podinfo.is_terminating(pod):
            continue
        if (podinfo.metadata(pod).get("labels") or {}).get(REVISION_HASH_LABEL) != revision:
            return pod
    return None


def upgraded(node_pods: Sequence[Mapping[str, Any]], daemonset: str, revision: str) -> bool:
    """Whether the node runs exactly one driver pod of ``daemonset``, at ``revision`` and Ready: a driver's readiness
    probe passes only once the node's validator wrote its files, so the node can run GPU work again. A vGPU or VFIO
    manager has no such probe: its node is back once the sandbox validator passed after it."""
    live = driver_pods(node_pods, daemonset)
    if not (len(live) == 1 and podinfo.is_ready(live[0]) and (
            (podinfo.metadata(live[0]).get("labels") or {}).get(REVISION_HASH_LABEL) == revision)):
        return False
    return podinfo.is_driver_pod(live[0]) or sandbox_validated_after(node_pods, live[0])


def sandbox_validated_after(node_pods: Sequence[Mapping[str, Any]], manager: Mapping[str, Any]) -> bool:
    """Whether a sandbox validator pod created no earlier than ``manager`` is Ready. The manager's
    k8s-driver-manager pauses the sandbox validator while it (re)loads the host driver (fact sheet §5.3 step 4),
    so the validator pod that passes after a restart is a new one, whose init containers waited for the new
    manager's `vgpu-manager-ready` or `vfio-pci-ready`; the one from before says nothing of the new manager."""
    since = str(podinfo.metadata(manager).get("creationTimestamp") or "")
    return any(podinfo.is_sandbox_validator(p) and podinfo.is_ready(p) and not podinfo.is_terminating(p)
               and str(podinfo.metadata(p).get("creationTimestamp") or "") >= since for p in node_pods)


def cordoned_by_us(node: Mapping[str, Any]) -> bool:
    return ((node.get("metadata") or {}).get("annotations") or {}).get(CORDON_ANNOTATION) == CORDON_OWNER


def unschedulable(node: Mapping[str, Any]) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


def state_of(node: Mapping[str, Any]) -> str | None:
    return ((node.get("metadata") or {}).get("labels") or {}).get(UPGRADE_STATE_LABEL)


def cordon_patch(node: Mapping[str, Any], state: str) -> dict[str, Any]:
    """Cordon (unless someone else already did: then the node stays as it is and is never uncordoned by us), tell
    k8s-driver-manager the upgrade is handled, and show ``state``."""
    patch: dict[str, Any] = {"metadata": {"labels": {UPGRADE_STATE_LABEL: state},
                                          "annotations": {UPGRADE_ENABLED_ANNOTATION: "true"}}}
    if not unschedulable(node):
        patch["spec"] = {"unschedulable": True}
        patch["metadata"]["annotations"][CORDON_ANNOTATION] = CORDON_OWNER
        _compare_and_swap(patch, node)
    return patch


def _compare_and_swap(patch: dict[str, Any], node: Mapping[str, Any]) -> None:
    """A cordon someone sets (or lifts) between the read and this write must not be taken for the agent's: the
    write carries the node's resourceVersion, and a 409 makes the next pass read again."""
    resource_version = (node.get("metadata") or {}).get("resourceVersion")
    if resource_version:
        patch["metadata"]["resourceVersion"] = resource_version


def finish_patch(node: Mapping[str, Any], state: str | None = DONE) -> dict[str, Any]:
    """Uncordon if this agent cordoned, and show ``state`` (None: no state, as a node that never waited)."""
    patch: dict[str, Any] = {"metadata": {"labels": {UPGRADE_STATE_LABEL: state},
                                          "annotations": {UPGRADE_ENABLED_ANNOTATION: None}}}
    if cordoned_by_us(node):
        patch["metadata"]["annotations"][CORDON_ANNOTATION] = None
        if unschedulable(node) and not keeps_cordon(node):
            patch["spec"] = {"unschedulable": None}
        _compare_and_swap(patch, node)
    return patch


def keeps_cordon(node: Mapping[str, Any]) -> bool:
    return KEEP_CORDONED_ANNOTATION in ((node.get("metadata") or {}).get("annotations") or {})
