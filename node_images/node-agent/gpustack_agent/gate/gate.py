"""Decide whether the GPU stack is validated on every GPU node.

``pulumi up`` returns as soon as the API server accepts the objects, long before
drivers are compiled and the NVIDIA validator has run on each node. The gate Job
turns "the validator pod is Ready on every node that should run it" into one result
that a pipeline can wait on. This module is pure (no I/O) so the verdict can be
tested against recorded Pod, Node and DaemonSet objects.

A driver upgrade rolls out in waves of node pools, with a gate between waves. That
gate judges only its wave's pools, and the validators alone cannot vouch for it:
nodes the rolling update has not reached yet still have a Ready validator from the
previous driver, and a node whose driver is being replaced has its validator paused
(deploy label `paused-for-driver-upgrade`), so it drops out of the selection. The
gate therefore also waits for the wave's driver DaemonSets to finish their rollout.

Nodes of VM pools (KubeVirt passthrough) run no container stack and no operator
validator; NVIDIA's sandbox validator checks them instead (VFIO binding, vGPU
manager and devices). When asked to, the gate judges those nodes by their sandbox
validator pod in the same way.

Cordoned and NotReady nodes are not judged (someone is working on them, or they are gone) but listed as skipped;
a pool can declare how many nodes it must have validated, so that skipped or missing nodes cannot make a gate
pass by shrinking the fleet it judges. A validator or driver pod that cannot start (its image cannot be pulled,
it crash-loops) fails the gate at once instead of at its timeout.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from gpustack_agent.model import pods as podinfo
from gpustack_agent.model.driverimages import UNLISTED_ANNOTATION
from gpustack_agent.model.labels import POOL_LABEL

# Nodes that should run the validator: the agent marks GPU nodes with
# gpu.present, and a node opted out of the validator has no pod to wait for.
GPU_NODE_SELECTOR = "nvidia.com/gpu.present=true,nvidia.com/gpu.deploy.operator-validator=true"
VALIDATOR_POD_SELECTOR = "app=nvidia-operator-validator"
# VM nodes: the sandbox validator's init containers (cc-manager-validation,
# vfio-pci-validation, vgpu-manager-validation, vgpu-devices-validation) are its stages.
SANDBOX_NODE_SELECTOR = "nvidia.com/gpu.present=true,nvidia.com/gpu.deploy.sandbox-validator=true"
# DRA nodes: the DRA validator stands in for the operator validator, and its pods carry the same app label
# (as NVIDIA's do), so VALIDATOR_POD_SELECTOR finds them; label selectors cannot OR, so these nodes are listed
# apart and judged with the rest.
DRA_NODE_SELECTOR = "nvidia.com/gpu.present=true,nvidia.com/gpu.deploy.dra-validator=true"
SANDBOX_VALIDATOR_POD_SELECTOR = f"app={podinfo.SANDBOX_VALIDATOR_APP}"
RESULT_ANNOTATION = "gpu-stack/validation"

VALIDATED = "validated"
NOT_VALIDATED = "not-validated"
NO_GPU_NODES = "no-gpu-nodes"
FAILED = "failed"

CORDONED = "cordoned"
NODE_NOT_READY = "not ready"
# The kubelet keeps at most this many bytes of a container's termination message.
TERMINATION_MESSAGE_LIMIT = 4096

STRICT = "strict"
ADVISORY = "advisory"
MODES = (STRICT, ADVISORY)


def node_selector(pools: Sequence[str] = (), *, sandbox: bool = False, dra: bool = False) -> str:
    """GPU_NODE_SELECTOR (SANDBOX_NODE_SELECTOR with ``sandbox``, DRA_NODE_SELECTOR
    with ``dra``), narrowed to the nodes the agent put in ``pools`` when given."""
    base = SANDBOX_NODE_SELECTOR if sandbox else DRA_NODE_SELECTOR if dra else GPU_NODE_SELECTOR
    if not pools:
        return base
    return f"{base},{POOL_LABEL} in ({','.join(pools)})"


def _count(status: Mapping[str, Any], key: str) -> int:
    # The API server omits these counters while they are zero.
    return int(status.get(key) or 0)


def daemonset_rollout(name: str, daemonset: Mapping[str, Any] | None) -> dict[str, Any]:
    """Whether DaemonSet ``name`` runs its current template, available, on every node
    it should run on. ``daemonset`` is None when it does not exist yet."""
    if daemonset is None:
        return {"daemonset": name, "desired": 0, "updated": 0, "available": 0, "done": False, "reason": "not found"}
    generation = int((daemonset.get("metadata") or {}).get("generation") or 0)
    status = daemonset.get("status") or {}
    observed = _count(status, "observedGeneration")
    desired = _count(status, "desiredNumberScheduled")
    updated = _count(status, "updatedNumberScheduled")
    available = _count(status, "numberAvailable")
    if observed < generation:
        # Until the controller has seen the new template, the counters describe the
        # old one and may well say "all updated".
        reason = f"generation {generation} not observed yet (observed {observed})"
    else:
        behind = []
        if updated != desired:
            behind.append(f"updated {updated}/{desired}")
        if available != desired:
            behind.append(f"available {available}/{desired}")
        reason = ", ".join(behind)
    rollout: dict[str, Any] = {
        "daemonset": name, "desired": desired, "updated": updated, "available": available, "done": not reason,
    }
    if reason:
        rollout["reason"] = reason
    return rollout


def rolls(daemonset: Mapping[str, Any]) -> bool:
    """Whether the DaemonSet controller replaces its pods by itself (RollingUpdate, the default): an OnDelete
    validator keeps its pods until someone deletes them, so its rollout is never waited for."""
    return ((daemonset.get("spec") or {}).get("updateStrategy") or {}).get("type", "RollingUpdate") != "OnDelete"


def _pending_init_container(pod: Mapping[str, Any]) -> str | None:
    """The init container the validator is stuck on: each one validates a stage
    (driver, toolkit, CUDA, plugin; for the sandbox validator VFIO, vGPU manager,
    vGPU devices), so its name says which stage has not passed."""
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


def _in_pools(nodes: Sequence[Mapping[str, Any]], pools: Sequence[str]) -> list[Mapping[str, Any]]:
    return [n for n in nodes if ((n.get("metadata") or {}).get("labels") or {}).get(POOL_LABEL) in pools]


def _node_names(nodes: Sequence[Mapping[str, Any]]) -> set[str]:
    return {(n.get("metadata") or {}).get("name", "") for n in nodes} - {""}


def _pods_by_node(pods: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name:
            by_node.setdefault(node_name, []).append(pod)
    return by_node


def _not_ready_reason(node_pods: Sequence[Mapping[str, Any]], validator: str) -> str | None:
    """Why ``validator`` ("validator" or "sandbox validator") does not vouch for a
    node whose pods of that validator are ``node_pods``; None when one is Ready."""
    if not node_pods:
        return f"no {validator} pod"
    if any(podinfo.is_ready(p) for p in node_pods):
        return None
    stage = _pending_init_container(_pod_to_report(node_pods))
    return f"{validator} not ready: {stage}" if stage else f"{validator} not ready"


def skip_reason(node: Mapping[str, Any]) -> str | None:
    """Why ``node`` is not judged: CORDONED (``spec.unschedulable``: drained or being repaired, its pods may be
    gone on purpose) or NODE_NOT_READY (its kubelet does not report, so its pods' status is stale)."""
    if (node.get("spec") or {}).get("unschedulable"):
        return CORDONED
    conditions = (node.get("status") or {}).get("conditions") or []
    if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
        return NODE_NOT_READY
    return None


# A failure seen for this long without clearing is one: longer than the kubelet's first image-pull back-offs
# (10, 20, 40, 80 s), so a registry's rate limit during a fleet rollout does not fail `pulumi up`.
FAILURE_CONFIRM_SECONDS = 180


def _restarts(pod: Mapping[str, Any], container: str) -> int:
    status = pod.get("status") or {}
    for entry in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        if entry.get("name") == container:
            return int(entry.get("restartCount") or 0)
    return 0


def pod_failures(pod_list: Sequence[Mapping[str, Any]], nodes: set[str]) -> list[dict[str, Any]]:
    """``{node, pod, container, reason, restarts}`` for each container of the pods on ``nodes`` that cannot start
    (see :func:`pods.container_failures`). A terminating pod is the previous rollout's and is left out."""
    found = []
    for pod in pod_list:
        node = podinfo.node_name(pod)
        if node in nodes and not podinfo.is_terminating(pod):
            found += [{"node": node, "pod": podinfo.name(pod), **f, "restarts": _restarts(pod, f["container"])}
                      for f in podinfo.container_failures(pod)]
    return sorted(found, key=lambda f: (f["node"], f["pod"], f["container"]))


def _key(failure: Mapping[str, Any]) -> tuple[str, str, str]:
    return failure["node"], failure["pod"], failure["container"]


def with_first_sighting(failures: Sequence[dict[str, Any]], previous: Mapping[str, Any] | None,
                        now: float) -> list[dict[str, Any]]:
    """``failures``, each with ``since``: when the gate first saw it (seconds on its own clock), carried over from
    the ``previous`` poll for the same container of the same pod."""
    first = {_key(f): f.get("since", now) for f in (previous or {}).get("failures") or []}
    return [{**f, "since": first.get(_key(f), round(now, 1))} for f in failures]


def confirmed_failures(
    failures: Sequence[Mapping[str, Any]], previous: Mapping[str, Any] | None, now: float = 0.0
) -> list[Mapping[str, Any]]:
    """The ``failures`` that are not a blip: the container restarted since the ``previous`` poll (a crash loop), or
    it has been failing for FAILURE_CONFIRM_SECONDS. The reason may change in between: ErrImagePull and
    ImagePullBackOff alternate for one image that cannot be had."""
    before = {_key(f): f for f in (previous or {}).get("failures") or []}
    confirmed = []
    for failure in failures:
        seen = before.get(_key(failure))
        if seen is None:
            continue
        restarted = int(failure.get("restarts") or 0) > int(seen.get("restarts") or 0)
        if restarted or now - float(failure.get("since", now)) >= FAILURE_CONFIRM_SECONDS:
            confirmed.append(failure)
    return confirmed


def missing_nodes(
    judged: Mapping[str, Mapping[str, Any]], not_validated: set[str], expected_nodes: Mapping[str, int]
) -> list[dict[str, Any]]:
    """``{pool, expected, validated}`` for each pool of ``expected_nodes`` with fewer validated nodes among the
    ``judged`` ones (name -> node) than it expects."""
    missing = []
    for pool, expected in expected_nodes.items():
        validated = sum(
            1 for name, node in judged.items()
            if name not in not_validated and ((node.get("metadata") or {}).get("labels") or {}).get(POOL_LABEL) == pool
        )
        if validated < expected:
            missing.append({"pool": pool, "expected": expected, "validated": validated})
    return missing


def _why_not_validated(node: Mapping[str, Any], validator_pods: Sequence[Mapping[str, Any]] | None,
                       sandbox_pods: Sequence[Mapping[str, Any]] | None) -> str:
    """Why a judged node is not validated ('' when it is): its validator's (None: not judged by it) and its sandbox
    validator's pods."""
    reasons = [
        *([_not_ready_reason(validator_pods, "validator")] if validator_pods is not None else []),
        *([_not_ready_reason(sandbox_pods, "sandbox validator")] if sandbox_pods is not None else []),
    ]
    failed = [r for r in reasons if r]
    if failed:
        unlisted = ((node.get("metadata") or {}).get("annotations") or {}).get(UNLISTED_ANNOTATION)
        if unlisted:
            # No driver DaemonSet of its pool is built for the node's image: the validator cannot run there.
            failed.insert(0, f"node image not listed: {unlisted}")
    return "; ".join(failed)


def _pod_failures(validator_pods: Sequence[Mapping[str, Any]], driver_pods: Sequence[Mapping[str, Any]],
                  judged: Sequence[str], skipped: Sequence[Mapping[str, str]]) -> list[dict[str, Any]]:
    """Validator pods that cannot start on a judged node, and the gate's own driver pods that cannot start."""
    # A driver pod of the gate's own DaemonSets fails it wherever it runs, but on a node whose kubelet does not
    # report: a node the agent cordoned for its upgrade, or whose validator the driver manager paused, is not
    # judged for its validator, and its driver crash-looping must not wait for the gate's timeout.
    not_reporting = {s["node"] for s in skipped if s["reason"] == NODE_NOT_READY}
    driver_nodes = {podinfo.node_name(p) for p in driver_pods} - not_reporting - {None}
    return sorted(pod_failures(validator_pods, set(judged)) + pod_failures(driver_pods, driver_nodes),
                  key=lambda f: (f["node"], f["pod"], f["container"]))


def _validator_rollouts(validator_daemonsets: Mapping[str, Mapping[str, Any] | None] | None) -> list[dict[str, Any]]:
    # A validator DaemonSet mid-rollout still has Ready pods of its old template, which vouch for nothing new.
    return [daemonset_rollout(name, ds) for name, ds in (validator_daemonsets or {}).items() if ds is not None and rolls(ds)]


def _status(any_judged: bool, rolled_out: bool, missing: bool, unhealthy: bool, pools: Sequence[str],
            expected_nodes: Mapping[str, int] | None) -> str:
    """The verdict short of a confirmed failure."""
    # no-gpu-nodes ends polling in advisory mode, so a driver DaemonSet that has
    # not finished (or not even been created yet) rules it out.
    if not any_judged and rolled_out and not missing and pools and all((expected_nodes or {}).get(p) == 0 for p in pools):
        # Every judged pool declared itself empty (expectedNodes: 0, a pool scaled to zero): nothing to vouch for is
        # then the expected answer, not a wrong selector.
        return VALIDATED
    if not any_judged and rolled_out and not missing:
        return NO_GPU_NODES
    if unhealthy or not rolled_out or missing:
        return NOT_VALIDATED
    return VALIDATED


def evaluate(
    nodes: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
    *,
    pools: Sequence[str] = (),
    daemonsets: Mapping[str, Mapping[str, Any] | None] | None = None,
    sandbox_nodes: Sequence[Mapping[str, Any]] | None = None,
    sandbox_pods: Sequence[Mapping[str, Any]] = (),
    driver_pods: Sequence[Mapping[str, Any]] = (),
    expected_nodes: Mapping[str, int] | None = None,
    previous: Mapping[str, Any] | None = None,
    now: float = 0.0,
    validator_daemonsets: Mapping[str, Mapping[str, Any] | None] | None = None,
) -> dict[str, Any]:
    """Verdict for ``nodes`` (already selected by ``node_selector(pools)``) given the
    validator ``pods`` (already selected by VALIDATOR_POD_SELECTOR) and, when the
    gate waits for driver rollouts, ``daemonsets``: each named DaemonSet, or None
    where it does not exist.

    When the gate also judges VM nodes, ``sandbox_nodes`` (selected by
    ``node_selector(pools, sandbox=True)``) are judged by ``sandbox_pods`` (selected
    by SANDBOX_VALIDATOR_POD_SELECTOR) in the same way, and the result counts them
    in ``sandboxNodes``. A node in both lists needs both validators Ready.

    Cordoned and NotReady nodes are listed in ``skipped`` and not judged. Each pool of ``expected_nodes`` needs
    at least that many validated nodes (``missingNodes`` otherwise). A validator pod, or a ``driver_pods`` pod
    owned by one of ``daemonsets``, that cannot start on a judged node is listed in ``failures``; seen in the
    ``previous`` poll's result too and restarted since, or failing for FAILURE_CONFIRM_SECONDS by ``now`` (the
    gate's own clock), it makes the status ``failed``."""
    sandbox = sandbox_nodes is not None
    if pools:
        # The server already selected by pool; checking again here keeps the verdict
        # a function of its arguments, whatever node list it is handed.
        nodes = _in_pools(nodes, pools)
        sandbox_nodes = _in_pools(sandbox_nodes or (), pools)
    rollouts = [daemonset_rollout(name, ds) for name, ds in (daemonsets or {}).items()]
    validator_rollouts = _validator_rollouts(validator_daemonsets)
    rolled_out = all(r["done"] for r in rollouts + validator_rollouts)
    every_node = {name: n for n in [*nodes, *(sandbox_nodes or ())] if (name := (n.get("metadata") or {}).get("name", ""))}
    skipped = [{"node": name, "reason": reason} for name, node in sorted(every_node.items()) if (reason := skip_reason(node))]
    skipped_names = {s["node"] for s in skipped}
    container_names = _node_names(nodes) - skipped_names
    sandbox_names = _node_names(sandbox_nodes or ()) - skipped_names
    pods_by_node = _pods_by_node(pods)
    sandbox_pods_by_node = _pods_by_node(sandbox_pods)
    names = sorted(container_names | sandbox_names)
    not_validated = [{"node": name, "reason": reason} for name in names if (reason := _why_not_validated(
        every_node[name], pods_by_node.get(name, []) if name in container_names else None,
        sandbox_pods_by_node.get(name, []) if name in sandbox_names else None))]
    missing = missing_nodes({n: every_node[n] for n in names}, {e["node"] for e in not_validated},
                            expected_nodes or {})
    ours = [p for p in driver_pods if podinfo.owner(p, "DaemonSet") in (daemonsets or {})]
    failures = with_first_sighting(_pod_failures([*pods, *(sandbox_pods if sandbox else ())], ours, names, skipped),
                                   previous, now)
    if confirmed_failures(failures, previous, now):
        status = FAILED
    else:
        status = _status(bool(names), rolled_out, bool(missing), bool(not_validated or failures), pools, expected_nodes)
    result: dict[str, Any] = {
        "status": status,
        "gpuNodes": len(names),
        "validatedNodes": len(names) - len(not_validated),
        "notValidated": not_validated,
    }
    # Only when there is something to say, so that the result of a healthy fleet reads as it always did.
    for key, entries in (("skipped", skipped), ("missingNodes", missing), ("failures", failures),
                         ("upgradeStates", upgrade_states([every_node[n] for n in [*names, *(s["node"] for s in skipped)]]))):
        if entries:
            result[key] = entries
    if sandbox:
        result["sandboxNodes"] = len(sandbox_names)
    if pools:
        result["pools"] = list(pools)
    if daemonsets is not None:
        result["driverRollout"] = rollouts
    if any(not r["done"] for r in validator_rollouts):
        result["validatorRollout"] = validator_rollouts
    return result


UPGRADE_STATE_LABEL = "gpu-stack/upgrade-state"


def upgrade_states(nodes: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How many of ``nodes`` are in each ``gpu-stack/upgrade-state`` (the node agents' step in a change), so a
    gate's verdict says where a rollout stands: waiting for a slot, draining, restarting, failed, done."""
    counts: dict[str, int] = {}
    for node in nodes:
        state = ((node.get("metadata") or {}).get("labels") or {}).get(UPGRADE_STATE_LABEL)
        if state:
            counts[state] = counts.get(state, 0) + 1
    return dict(sorted(counts.items()))


def unavailable_result(error: str, pools: Sequence[str] = (), *, sandbox: bool = False) -> dict[str, Any]:
    """Verdict when the API never answered: nothing was shown to be validated."""
    result: dict[str, Any] = {
        "status": NOT_VALIDATED,
        "gpuNodes": 0,
        "validatedNodes": 0,
        "notValidated": [],
    }
    if sandbox:
        result["sandboxNodes"] = 0
    result["error"] = error
    if pools:
        result["pools"] = list(pools)
    return result


def is_settled(result: Mapping[str, Any], mode: str) -> bool:
    """True when polling can stop early because the answer cannot change: validated, or failed (a pod that
    cannot start does not recover by waiting). No GPU nodes settles only an advisory gate: a strict one keeps
    looking, since a gate that judged nothing vouches for nothing (a wrong selector, nodes still joining)."""
    if result["status"] == NO_GPU_NODES:
        return mode == ADVISORY
    return result["status"] in (VALIDATED, FAILED)


def exit_code(result: Mapping[str, Any], mode: str) -> int:
    """Only strict mode turns a failed validation into a failed Job, and in strict
    mode only `validated` passes; advisory mode reports through the annotation and
    log but lets the pipeline continue."""
    if mode not in MODES:
        raise ValueError(f"MODE must be one of {MODES}, got {mode!r}")
    return 1 if mode == STRICT and result["status"] != VALIDATED else 0


def _compact(result: Mapping[str, Any]) -> str:
    return json.dumps(result, separators=(",", ":"))


def termination_message(result: Mapping[str, Any], limit: int = TERMINATION_MESSAGE_LIMIT) -> str:
    """``result`` as compact JSON of at most ``limit`` bytes, still valid JSON: the longest list is halved until it
    fits, and ``omitted`` says how many entries of each list were left out (the Job annotation and the log keep
    them all)."""
    line = _compact(result)
    trimmed = dict(result)
    omitted: dict[str, int] = {}
    while len(line.encode()) > limit:
        lists = [(len(value), key) for key, value in trimmed.items() if isinstance(value, list) and value]
        if not lists:
            # Nothing left to halve (a very long error): the status alone still tells pass from fail.
            return _compact({"status": result.get("status"), "omitted": "all but the status"})
        _, key = max(lists)
        keep = len(trimmed[key]) // 2
        omitted[key] = omitted.get(key, 0) + len(trimmed[key]) - keep
        trimmed[key] = trimmed[key][:keep]
        trimmed["omitted"] = dict(omitted)
        line = _compact(trimmed)
    return line
