"""Decide whether the GPU stack is validated on every GPU node.

``pulumi up`` returns as soon as the API server accepts the objects, long before
drivers are compiled and the NVIDIA validator has run on each node. The gate Job
turns "the validator pod is Ready on every node that should run it" into one result
that a pipeline can wait on. This module is pure (no I/O) so the verdict can be
tested against recorded Pod and Node objects.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

# Nodes that should run the validator: the agent marks GPU nodes with
# gpu.present, and a node opted out of the validator has no pod to wait for.
GPU_NODE_SELECTOR = "nvidia.com/gpu.present=true,nvidia.com/gpu.deploy.operator-validator=true"
VALIDATOR_POD_SELECTOR = "app=nvidia-operator-validator"
RESULT_ANNOTATION = "gpu-stack/validation"

VALIDATED = "validated"
NOT_VALIDATED = "not-validated"
NO_GPU_NODES = "no-gpu-nodes"

STRICT = "strict"
ADVISORY = "advisory"
MODES = (STRICT, ADVISORY)


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    # A terminating pod describes the previous rollout, not what `pulumi up` just applied.
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _pending_init_container(pod: Mapping[str, Any]) -> str | None:
    """The init container the validator is stuck on: each one validates a stage
    (driver, toolkit, CUDA, plugin), so its name says which stage has not passed."""
    for status in (pod.get("status") or {}).get("initContainerStatuses") or []:
        state = status.get("state") or {}
        if "running" in state or "waiting" in state:
            return status.get("name")
    return None


def _pod_to_report(pods: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    # During a rollout the old pod may linger next to the new one; the new one's
    # progress is the interesting part.
    def key(pod: Mapping[str, Any]) -> tuple[bool, str]:
        metadata = pod.get("metadata") or {}
        return (not metadata.get("deletionTimestamp"), metadata.get("creationTimestamp") or "")

    return max(pods, key=key)


def evaluate(nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Verdict for ``nodes`` (already selected by GPU_NODE_SELECTOR) given the
    validator ``pods`` (already selected by VALIDATOR_POD_SELECTOR)."""
    pods_by_node: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name:
            pods_by_node.setdefault(node_name, []).append(pod)

    names = sorted({(n.get("metadata") or {}).get("name", "") for n in nodes} - {""})
    not_validated: list[dict[str, str]] = []
    for name in names:
        node_pods = pods_by_node.get(name, [])
        if not node_pods:
            not_validated.append({"node": name, "reason": "no validator pod"})
        elif not any(_pod_ready(p) for p in node_pods):
            stage = _pending_init_container(_pod_to_report(node_pods))
            reason = f"validator not ready: {stage}" if stage else "validator not ready"
            not_validated.append({"node": name, "reason": reason})

    if not names:
        status = NO_GPU_NODES
    elif not_validated:
        status = NOT_VALIDATED
    else:
        status = VALIDATED
    return {
        "status": status,
        "gpuNodes": len(names),
        "validatedNodes": len(names) - len(not_validated),
        "notValidated": not_validated,
    }


def unavailable_result(error: str) -> dict[str, Any]:
    """Verdict when the API never answered: nothing was shown to be validated."""
    return {
        "status": NOT_VALIDATED,
        "gpuNodes": 0,
        "validatedNodes": 0,
        "notValidated": [],
        "error": error,
    }


def is_settled(result: Mapping[str, Any]) -> bool:
    """True when polling can stop early because the answer cannot get better."""
    return result["status"] in (VALIDATED, NO_GPU_NODES)


def exit_code(result: Mapping[str, Any], mode: str) -> int:
    """Only strict mode turns a failed validation into a failed Job; advisory mode
    reports through the annotation and log but lets the pipeline continue."""
    if mode not in MODES:
        raise ValueError(f"MODE must be one of {MODES}, got {mode!r}")
    return 1 if mode == STRICT and result["status"] == NOT_VALIDATED else 0
