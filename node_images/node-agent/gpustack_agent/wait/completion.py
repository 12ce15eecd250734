"""`wait-for-completion`: before the driver on a node is replaced, wait for the node's matching pods to finish.

NVIDIA's upgrade controller does this in its `wait-for-jobs-required` state (ClusterPolicy
`driver.upgradePolicy.waitForCompletion`): the node is cordoned, so no new matching pod lands on it, and the
controller waits until the pods matching `podSelector` on the node have completed, or `timeoutSeconds` passed (0:
forever), before it deletes GPU pods and replaces the driver. gpu-stack has no upgrade controller; this runs as
the first init container of each driver pod, before k8s-driver-manager evicts GPU pods and swaps the driver.

While it waits, the node carries the agent's own NoSchedule taint HOLD_TAINT_KEY rather than a cordon: a person who
cordons the node meanwhile (maintenance found during a wait that can last days) writes `spec.unschedulable`, which
the agent never touches, so lifting the hold can never lift their cordon. A cordon would be indistinguishable: a
`kubectl cordon` of a node already cordoned writes nothing. The taint keeps new pods off as a cordon does, except
that it also holds back pods of DaemonSets that do not tolerate it; the driver DaemonSet tolerates it, so a driver
pod recreated mid-wait runs this step again and lifts a hold an earlier run could not. Nodes a version before 0.7.0
cordoned (annotation CORDON_ANNOTATION) are still uncordoned by the next run.

Exit codes: 0 when the wait ended (no matching pod left, or the timeout passed: the driver swap proceeds, as
NVIDIA's controller proceeds to pod deletion), 1 when the API could not be reached at all within the timeout or
answered with an error retrying cannot fix: the kubelet then restarts the init container, so the driver swap never
runs on a node whose work nobody looked at.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any, Callable, Mapping, Optional, Sequence, TypeVar

import urllib3
from kubernetes.client.exceptions import ApiException

from gpustack_agent.api import backoff, kube

# The hold while the wait runs (see above); the driver DaemonSet's pods tolerate it (components/states/driver/extensions.py).
HOLD_TAINT_KEY = "gpu-stack/wait-for-completion"
HOLD_TAINT = {"key": HOLD_TAINT_KEY, "effect": "NoSchedule"}
# The cordon record of agents before 0.7.0, lifted by the next run (unless KEEP_CORDONED_ANNOTATION says to keep it,
# shared with the driver upgrade, upgrade.py).
CORDON_ANNOTATION = "gpu-stack/wait-for-completion-cordoned"
KEEP_CORDONED_ANNOTATION = "gpu-stack/keep-cordoned"
FINISHED_PHASES = ("Succeeded", "Failed")
# Matching pods are jobs that run for minutes to days: polled at first every FIRST_POLL_SECONDS, then less often,
# never less often than every MAX_POLL_SECONDS, so the swap starts soon after the last one ends.
FIRST_POLL_SECONDS = 5.0
MAX_POLL_SECONDS = 60.0
# How long lifting the hold may retry after the wait ended (the wait's timeout may be over by then).
RELEASE_BUDGET_SECONDS = 300.0
# The kernel's sysfs entry of the loaded NVIDIA driver; /sys/module is the host's in every container (one kernel).
DRIVER_MODULE = "/sys/module/nvidia"
# At most this many pods are named in a log line; podCount counts them all.
LOGGED_PODS = 10
EXIT_OK, EXIT_FAILED = 0, 1

T = TypeVar("T")


class Unreachable(Exception):
    """The API server did not answer within the time the agent had."""


# --- pure decisions over API objects (dicts) -----------------------------------------------------------------


def _taints(node: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list((node.get("spec") or {}).get("taints") or [])


def holds(node: Mapping[str, Any]) -> bool:
    return any(t.get("key") == HOLD_TAINT_KEY for t in _taints(node))


def _compare_and_swap(node: Mapping[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    # A merge patch replaces the whole taint list: without the resourceVersion, a taint the node lifecycle
    # controller (or anyone) adds between the read and this write would be dropped.
    resource_version = (node.get("metadata") or {}).get("resourceVersion")
    if resource_version:
        body.setdefault("metadata", {})["resourceVersion"] = resource_version
    return body


def hold_patch(node: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """The merge patch that adds the hold taint to ``node``; None when an earlier run's hold is still there."""
    if holds(node):
        return None
    return _compare_and_swap(node, {"spec": {"taints": [*_taints(node), dict(HOLD_TAINT)]}})


def owns_cordon(node: Mapping[str, Any]) -> bool:
    return CORDON_ANNOTATION in ((node.get("metadata") or {}).get("annotations") or {})


def release_patch(node: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """The merge patch that lifts the hold taint and a pre-0.7.0 run's cordon record (and its cordon, unless someone
    asked to keep it); None when the node carries neither. Every other taint and any cordon stay as they are."""
    body: dict[str, Any] = {}
    if holds(node):
        body["spec"] = {"taints": [t for t in _taints(node) if t.get("key") != HOLD_TAINT_KEY] or None}
    if owns_cordon(node):
        body["metadata"] = {"annotations": {CORDON_ANNOTATION: None}}
        if KEEP_CORDONED_ANNOTATION not in ((node.get("metadata") or {}).get("annotations") or {}):
            body.setdefault("spec", {})["unschedulable"] = None
    return _compare_and_swap(node, body) if body else None


def running_pods(pods: Sequence[Mapping[str, Any]], own_pod: Optional[tuple[str, str]]) -> list[str]:
    """`namespace/name` of the pods that have not completed, sorted, leaving out the agent's own pod (a selector
    may match the driver pod that runs this init container, which can only finish after the wait)."""
    names = []
    for pod in pods:
        metadata = pod.get("metadata") or {}
        key = (metadata.get("namespace") or "", metadata.get("name") or "")
        if own_pod is not None and key == own_pod:
            continue
        if (pod.get("status") or {}).get("phase") in FINISHED_PHASES:
            continue
        names.append("/".join(key))
    return sorted(names)


# --- the API --------------------------------------------------------------------------------------------------


class Waiter:
    """One run of `wait-for-completion` against the CoreV1Api ``core``, on an injected clock."""

    def __init__(
        self,
        core: Any,
        *,
        node_name: str,
        pod_selector: str,
        timeout_seconds: int,
        own_pod: Optional[tuple[str, str]],
        log: kube.Log,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        rng: Callable[[], float] = random.random,
        driver_loaded: Callable[[], bool] = lambda: os.path.isdir(DRIVER_MODULE),
    ) -> None:
        self.core, self.node_name, self.pod_selector = core, node_name, pod_selector
        self.timeout_seconds, self.own_pod, self.log = timeout_seconds, own_pod, log
        self.clock, self.sleep, self.rng, self.driver_loaded = clock, sleep, rng, driver_loaded

    def run(self) -> int:
        started = self.clock()
        deadline = started + self.timeout_seconds if self.timeout_seconds else None
        base = {"node": self.node_name, "podSelector": self.pod_selector}
        if not self.driver_loaded():
            # A node that just joined or rebooted: no driver is loaded, so no work can be using one and the swap
            # interrupts nothing. Waiting here could only deadlock: GPU jobs restarted on the node wait for the
            # driver this wait holds back. A hold an earlier run left is still lifted.
            self.log({"level": "info", "event": "no-driver-loaded", **base})
            waited = True
        else:
            try:
                self._retrying(self._hold, deadline)
            except Unreachable as exc:
                self.log({"level": "error", "event": "api-unreachable", **base, "error": str(exc)})
                return EXIT_FAILED
            waited = self._guarded_wait(deadline, base, started)
        try:
            self._retrying(self._release, self.clock() + RELEASE_BUDGET_SECONDS)
        except Unreachable as exc:
            # Exit 1: the kubelet restarts this init container, whose next run finds the taint and lifts it.
            self.log({"level": "error", "event": "release-failed", **base, "error": str(exc)})
            return EXIT_FAILED
        return EXIT_OK if waited else EXIT_FAILED

    def _guarded_wait(self, deadline: Optional[float], base: dict[str, Any], started: float) -> bool:
        try:
            return self._wait(deadline, base, started)
        except BaseException:
            # A fatal API error or SIGTERM (the driver pod is being deleted): lift the hold if the API lets us, so a
            # node is never left held by a wait that is no longer running.
            self._release_once()
            raise

    # --- steps ---

    def _hold(self, timeout: float) -> None:
        node = self._node(timeout)
        patch = hold_patch(node)
        if patch is None:
            self.log({"level": "info", "event": "hold-resumed", "node": self.node_name, "taint": HOLD_TAINT_KEY})
            return
        # A 409 (the node changed since the read) is retried by _retrying from a fresh read.
        self._patch(patch, timeout)
        self.log({"level": "info", "event": "held", "node": self.node_name, "taint": HOLD_TAINT_KEY})

    def _release(self, timeout: float) -> None:
        node = self._node(timeout)
        patch = release_patch(node)
        if patch is not None:
            self._patch(patch, timeout)
            event = {"level": "info", "event": "released", "node": self.node_name}
            if "unschedulable" in patch.get("spec", {}):
                event["uncordoned"] = True  # the cordon of an agent before 0.7.0
            self.log(event)

    def _release_once(self) -> None:
        try:
            self._release(kube.REQUEST_TIMEOUT_SECONDS)
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            self.log({"level": "error", "event": "release-failed", "node": self.node_name, **kube._describe(exc)})

    def _wait(self, deadline: Optional[float], base: dict[str, Any], started: float) -> bool:
        """Poll until no matching pod runs or the deadline passed; False when no list ever succeeded."""
        poll, listed, last = FIRST_POLL_SECONDS, False, None
        pause = backoff.Backoff(self.rng)
        while True:
            remaining = None if deadline is None else deadline - self.clock()
            try:
                running = running_pods(self._pods(self._request_timeout(remaining)), self.own_pod)
                listed = True
                pause.reset()
                if not running:
                    self.log({"level": "info", "event": "pods-completed", **base,
                              "waitedSeconds": round(self.clock() - started)})
                    return True
                if running != last:
                    self.log({"level": "info", "event": "waiting", **base, **_named(running)})
                last, delay = running, poll
                poll = min(poll * 2, MAX_POLL_SECONDS)
            except (ApiException, urllib3.exceptions.HTTPError) as exc:
                if not kube.is_transient(exc):
                    raise
                delay = pause.failure()
                self.log({"level": "warning", "event": "retry", "node": self.node_name,
                          "delaySeconds": round(delay, 3), **kube._describe(exc)})
            remaining = None if deadline is None else deadline - self.clock()
            if remaining is not None and remaining <= 0:
                if not listed:
                    self.log({"level": "error", "event": "api-unreachable", **base,
                              "error": "no pod list succeeded within the timeout"})
                    return False
                # As NVIDIA's controller does at its timeout: go on to the GPU pod eviction and the driver swap.
                self.log({"level": "warning", "event": "wait-timed-out", **base,
                          "timeoutSeconds": self.timeout_seconds, **_named(last or [])})
                return True
            self.sleep(delay if remaining is None else min(delay, remaining))

    # --- requests ---

    def _retrying(self, step: Callable[[float], T], deadline: Optional[float]) -> T:
        """``step`` until it succeeds, retrying transient errors with jittered backoff until ``deadline`` (None:
        forever); errors retrying cannot fix (401, 403, 404, 422) are raised."""
        pause = backoff.Backoff(self.rng)
        while True:
            remaining = None if deadline is None else deadline - self.clock()
            try:
                return step(self._request_timeout(remaining))
            except (ApiException, urllib3.exceptions.HTTPError) as exc:
                if not kube.is_transient(exc):
                    raise
                remaining = None if deadline is None else deadline - self.clock()
                if remaining is not None and remaining <= 0:
                    raise Unreachable(", ".join(f"{k}={v}" for k, v in kube._describe(exc).items())) from exc
                delay = pause.failure()
                self.log({"level": "warning", "event": "retry", "node": self.node_name,
                          "delaySeconds": round(delay, 3), **kube._describe(exc)})
                self.sleep(delay if remaining is None else min(delay, remaining))

    @staticmethod
    def _request_timeout(remaining: Optional[float]) -> float:
        # A hung API server must not stretch the wait past its timeout by more than one request.
        if remaining is None:
            return kube.REQUEST_TIMEOUT_SECONDS
        return max(1.0, min(kube.REQUEST_TIMEOUT_SECONDS, remaining))

    def _node(self, timeout: float) -> dict[str, Any]:
        return kube.as_dict(self.core, self.core.read_node(self.node_name, _request_timeout=timeout))

    def _patch(self, body: Mapping[str, Any], timeout: float) -> None:
        self.core.patch_node(name=self.node_name, body=dict(body), _content_type=kube.MERGE_PATCH,
                             _request_timeout=timeout)

    def _pods(self, timeout: float) -> list[dict[str, Any]]:
        result = self.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={self.node_name}", label_selector=self.pod_selector,
            _request_timeout=timeout)
        return kube.as_dict(self.core, result).get("items") or []


def _named(running: Sequence[str]) -> dict[str, Any]:
    return {"pods": list(running[:LOGGED_PODS]), "podCount": len(running)}
