"""`wait-for-completion`: before the driver on a node is replaced, wait for the node's matching pods to finish.

NVIDIA's upgrade controller does this in its `wait-for-jobs-required` state (ClusterPolicy
`driver.upgradePolicy.waitForCompletion`): the node is cordoned, so no new matching pod lands on it, and the
controller waits until the pods matching `podSelector` on the node have completed, or `timeoutSeconds` passed (0:
forever), before it deletes GPU pods and replaces the driver. gpu-stack has no upgrade controller; this runs as
the first init container of each driver pod, before k8s-driver-manager evicts GPU pods and swaps the driver.

The cordon is the agent's own: a node someone else cordoned stays as it is, and one the agent cordons carries the
annotation CORDON_ANNOTATION until the agent uncordons it, also when the agent was restarted in between.
k8s-driver-manager leaves a node it found cordoned cordoned, so the agent uncordons before it exits.

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

from . import backoff, kube

# Names the node's cordon as this agent's, so it (and only it) uncordons the node.
CORDON_ANNOTATION = "gpu-stack/wait-for-completion-cordoned"
# A cordon a person sets on a node this agent already cordoned writes nothing the agent could see; this annotation
# says to keep it (shared with the driver upgrade, upgrade.py).
KEEP_CORDONED_ANNOTATION = "gpu-stack/keep-cordoned"
FINISHED_PHASES = ("Succeeded", "Failed")
# Matching pods are jobs that run for minutes to days: polled at first every FIRST_POLL_SECONDS, then less often,
# never less often than every MAX_POLL_SECONDS, so the swap starts soon after the last one ends.
FIRST_POLL_SECONDS = 5.0
MAX_POLL_SECONDS = 60.0
# How long uncordoning may retry after the wait ended (the wait's timeout may be over by then).
UNCORDON_BUDGET_SECONDS = 300.0
# The kernel's sysfs entry of the loaded NVIDIA driver; /sys/module is the host's in every container (one kernel).
DRIVER_MODULE = "/sys/module/nvidia"
# At most this many pods are named in a log line; podCount counts them all.
LOGGED_PODS = 10
EXIT_OK, EXIT_FAILED = 0, 1

T = TypeVar("T")


class Unreachable(Exception):
    """The API server did not answer within the time the agent had."""


# --- pure decisions over API objects (dicts) -----------------------------------------------------------------


def cordon_patch(node: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """The merge patch that cordons ``node`` and records the cordon as the agent's; None when the node is already
    cordoned (by someone else, who keeps it, or by an earlier run of the agent, whose record stays)."""
    metadata = node.get("metadata") or {}
    if (node.get("spec") or {}).get("unschedulable"):
        return None
    body: dict[str, Any] = {"metadata": {"annotations": {CORDON_ANNOTATION: "true"}}, "spec": {"unschedulable": True}}
    # Compare-and-swap: a node someone cordons between the read and this write must not be recorded as ours.
    if metadata.get("resourceVersion"):
        body["metadata"]["resourceVersion"] = metadata["resourceVersion"]
    return body


def owns_cordon(node: Mapping[str, Any]) -> bool:
    return CORDON_ANNOTATION in ((node.get("metadata") or {}).get("annotations") or {})


def uncordon_patch(node: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """The merge patch that lifts the agent's cordon and its record; None when the node carries no record."""
    if not owns_cordon(node):
        return None
    body: dict[str, Any] = {"metadata": {"annotations": {CORDON_ANNOTATION: None}}, "spec": {"unschedulable": None}}
    if KEEP_CORDONED_ANNOTATION in ((node.get("metadata") or {}).get("annotations") or {}):
        # Someone asked for the node to stay cordoned while it waited: only the agent's record goes.
        del body["spec"]
    resource_version = (node.get("metadata") or {}).get("resourceVersion")
    if resource_version:
        body["metadata"]["resourceVersion"] = resource_version
    return body


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
            # driver this wait holds back. A cordon an earlier run left is still lifted.
            self.log({"level": "info", "event": "no-driver-loaded", **base})
            waited = True
        else:
            try:
                self._retrying(self._cordon, deadline)
            except Unreachable as exc:
                self.log({"level": "error", "event": "api-unreachable", **base, "error": str(exc)})
                return EXIT_FAILED
            waited = self._guarded_wait(deadline, base, started)
        try:
            self._retrying(self._uncordon, self.clock() + UNCORDON_BUDGET_SECONDS)
        except Unreachable as exc:
            # Exit 1: the kubelet restarts this init container, whose next run finds the record and uncordons.
            self.log({"level": "error", "event": "uncordon-failed", **base, "error": str(exc)})
            return EXIT_FAILED
        return EXIT_OK if waited else EXIT_FAILED

    def _guarded_wait(self, deadline: Optional[float], base: dict[str, Any], started: float) -> bool:
        try:
            return self._wait(deadline, base, started)
        except BaseException:
            # A fatal API error or SIGTERM (the driver pod is being deleted): lift the cordon if the API lets us,
            # so a node is never left cordoned by a wait that is no longer running.
            self._uncordon_once()
            raise

    # --- steps ---

    def _cordon(self, timeout: float) -> None:
        node = self._node(timeout)
        patch = cordon_patch(node)
        if patch is None:
            event = "cordon-resumed" if owns_cordon(node) else "cordon-kept"
            # cordon-kept: someone else's cordon; theirs to lift, so the agent never uncordons this node.
            self.log({"level": "info", "event": event, "node": self.node_name})
            return
        self._patch(patch, timeout)
        self.log({"level": "info", "event": "cordoned", "node": self.node_name, "annotation": CORDON_ANNOTATION})

    def _uncordon(self, timeout: float) -> None:
        patch = uncordon_patch(self._node(timeout))
        if patch is not None:
            self._patch(patch, timeout)
            self.log({"level": "info", "event": "uncordoned", "node": self.node_name})

    def _uncordon_once(self) -> None:
        try:
            self._uncordon(kube.REQUEST_TIMEOUT_SECONDS)
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            self.log({"level": "error", "event": "uncordon-failed", "node": self.node_name, **kube._describe(exc)})

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
