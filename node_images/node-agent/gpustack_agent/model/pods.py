"""Facts about Pods that the gate and the paced removal both judge by. Pure: Pods are dicts shaped like
``kubectl get pod -o json``."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

# Every driver DaemonSet's pods carry it (components/states/driver/state.py), whatever the DaemonSet is called, and an
# orphaned pod keeps it after its DaemonSet is gone.
DRIVER_COMPONENT_LABEL = "app.kubernetes.io/component"
DRIVER_COMPONENT = "nvidia-driver"
DRIVER_POD_SELECTOR = f"{DRIVER_COMPONENT_LABEL}={DRIVER_COMPONENT}"
# NVIDIA's sandbox validator (VM nodes): its `app` label, fixed by the operator's asset.
SANDBOX_VALIDATOR_APP = "nvidia-sandbox-validator"

# Waiting reasons that do not clear up by waiting: the image cannot be had, the container cannot be created, or
# it keeps crashing.
FAILURE_REASONS = frozenset({
    "CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "InvalidImageName",
    "CreateContainerConfigError", "CreateContainerError",
})
INIT_ERROR = "Init:Error"


def metadata(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("metadata") or {}


def name(pod: Mapping[str, Any]) -> str:
    return metadata(pod).get("name", "")


def ref(pod: Mapping[str, Any]) -> str:
    """``namespace/name``, how log lines name a pod."""
    return f"{metadata(pod).get('namespace', '')}/{name(pod)}"


def node_name(pod: Mapping[str, Any]) -> str | None:
    return (pod.get("spec") or {}).get("nodeName") or None


def is_terminating(pod: Mapping[str, Any]) -> bool:
    return bool(metadata(pod).get("deletionTimestamp"))


def is_finished(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def is_ready(pod: Mapping[str, Any]) -> bool:
    # A terminating pod describes the previous rollout, not the one being waited for.
    if is_terminating(pod):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def owner(pod: Mapping[str, Any], kind: str) -> str | None:
    """Name of the pod's owner of ``kind`` (e.g. its DaemonSet), None without one."""
    for reference in metadata(pod).get("ownerReferences") or []:
        if reference.get("kind") == kind:
            return reference.get("name")
    return None


def is_driver_pod(pod: Mapping[str, Any]) -> bool:
    return (metadata(pod).get("labels") or {}).get(DRIVER_COMPONENT_LABEL) == DRIVER_COMPONENT


def is_sandbox_validator(pod: Mapping[str, Any]) -> bool:
    return (metadata(pod).get("labels") or {}).get("app") == SANDBOX_VALIDATOR_APP


def is_orphan(pod: Mapping[str, Any]) -> bool:
    """A driver pod whose DaemonSet was deleted with orphan propagation: nothing will ever replace or remove it."""
    return is_driver_pod(pod) and owner(pod, "DaemonSet") is None


def container_failures(pod: Mapping[str, Any]) -> list[dict[str, str]]:
    """``{container, reason}`` for each container of ``pod`` that is stuck in a way waiting will not fix: waiting
    with one of FAILURE_REASONS, or an init container that exited non-zero (kubectl's Init:Error)."""
    status = pod.get("status") or {}
    found: list[dict[str, str]] = []
    sections: Sequence[tuple[str, bool]] = (("initContainerStatuses", True), ("containerStatuses", False))
    for section, init in sections:
        for container in status.get(section) or []:
            state = container.get("state") or {}
            waiting = (state.get("waiting") or {}).get("reason")
            terminated = state.get("terminated")
            if waiting in FAILURE_REASONS:
                found.append({"container": container.get("name", ""), "reason": waiting})
            elif init and terminated is not None and int(terminated.get("exitCode") or 0) != 0:
                found.append({"container": container.get("name", ""), "reason": INIT_ERROR})
    return found
