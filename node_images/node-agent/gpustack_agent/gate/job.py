"""The `gate` program's Job: polls the GPU nodes and their validators until the verdict (gate.py) settles or the
timeout passes, then records it on the Job, in its log and in the termination message."""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import urllib3
from kubernetes.client.exceptions import ApiException

from gpustack_agent.api import backoff
from gpustack_agent.api.kube import Log, _describe, list_nodes, list_pods, patch_job_annotations, read_daemon_set
from gpustack_agent.gate import gate
from gpustack_agent.model import pods


def run_gate(
    core: Any,
    batch: Any,
    *,
    namespace: str,
    job_namespace: str,
    job_name: str,
    timeout_seconds: int,
    poll_seconds: int,
    mode: str,
    log: Log,
    out: Callable[[str], None],
    apps: Any = None,
    pools: Sequence[str] = (),
    driver_daemonsets: Sequence[str] = (),
    validator_daemonsets: Sequence[str] = (),
    sandbox_validator: bool = False,
    dra_validator: bool = False,
    expected_nodes: Mapping[str, int] | None = None,
    termination_message_path: str | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    rng: Callable[[], float] = random.random,
) -> int:
    """Poll until every GPU node is validated or ``timeout_seconds`` pass, record
    the verdict on the Job, print it, and return the process exit code.

    ``pools`` restricts the judged nodes to those node pools; ``driver_daemonsets``
    (DaemonSets in ``namespace``, read through ``apps``) must also have finished
    their rollout before the verdict is ``validated``, and ``validator_daemonsets`` (those that
    roll by themselves) too, so that no old-template validator pod vouches. With ``dra_validator`` the
    DRA nodes count as GPU nodes, judged by the DRA validator's pods. With ``sandbox_validator``
    the VM nodes (sandbox-validator deploy label) are judged too, by their
    nvidia-sandbox-validator pods in ``namespace``. ``expected_nodes`` (pool -> count) is
    how many validated nodes each of those pools needs. The verdict is settled early when
    validated, or failed (a validator or driver pod that cannot start, restarted between two
    polls or failing for gate.FAILURE_CONFIRM_SECONDS). The verdict also goes to ``termination_message_path``, cut to the kubelet's limit."""
    scope = GateScope(namespace, tuple(pools), tuple(driver_daemonsets), tuple(validator_daemonsets), sandbox_validator,
                      dra_validator, expected_nodes)
    started = clock()
    deadline = started + timeout_seconds
    result: dict[str, Any] | None = None
    last_error = "no poll completed"
    pause = backoff.Backoff(rng)
    while True:
        delay = float(poll_seconds)
        # Bound each call by the time left so a hung API server cannot stretch the
        # gate past its timeout by more than one poll.
        request_timeout = max(1.0, min(float(poll_seconds), deadline - clock()))
        try:
            result = _poll(core, apps, scope, request_timeout, result, lambda: clock() - started)
            log({"level": "info", "event": "poll", **_progress(result)})
            pause.reset()
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            # Every error is retried until the deadline, 403 included: the Job is
            # created by the same `pulumi up` as its RBAC, which may land a moment later.
            # Never sooner than the next poll, later while the failures go on.
            delay = max(delay, pause.failure())
            last_error = json.dumps(_describe(exc), separators=(",", ":"))
            log({"level": "warning", "event": "poll-failed", "delaySeconds": round(delay, 3), **_describe(exc)})
        if result is not None and gate.is_settled(result, mode):
            break
        remaining = deadline - clock()
        if remaining <= 0:
            break
        sleep(min(delay, remaining))

    if result is None:
        result = gate.unavailable_result(last_error, pools, sandbox=sandbox_validator)
    _publish(batch, job_namespace, job_name, poll_seconds, result, log, out, termination_message_path)
    return gate.exit_code(result, mode)


@dataclass(frozen=True)
class GateScope:
    """What one gate judges (:func:`run_gate`)."""

    namespace: str
    pools: tuple[str, ...]
    driver_daemonsets: tuple[str, ...]
    validator_daemonsets: tuple[str, ...]
    sandbox_validator: bool
    dra_validator: bool
    expected_nodes: Mapping[str, int] | None


def _poll(core: Any, apps: Any, scope: GateScope, request_timeout: float, previous: dict[str, Any] | None,
          elapsed: Callable[[], float]) -> dict[str, Any]:
    """One look at the judged nodes and pods, and the verdict on them."""
    namespace, pools = scope.namespace, scope.pools
    daemonsets = None
    if scope.driver_daemonsets:
        # Read before the pods, so a rollout seen as finished is never judged
        # by validator pods listed before it finished.
        daemonsets = {name: read_daemon_set(apps, namespace, name, request_timeout) for name in scope.driver_daemonsets}
    validators = None
    if scope.validator_daemonsets:
        validators = {name: read_daemon_set(apps, namespace, name, request_timeout) for name in scope.validator_daemonsets}
    nodes = list_nodes(core, gate.node_selector(pools), request_timeout)
    if scope.dra_validator:
        listed = {n["metadata"]["name"] for n in nodes}
        nodes += [n for n in list_nodes(core, gate.node_selector(pools, dra=True), request_timeout)
                  if n["metadata"]["name"] not in listed]
    sandbox_nodes = None
    if scope.sandbox_validator:
        sandbox_nodes = list_nodes(core, gate.node_selector(pools, sandbox=True), request_timeout)
    validator_pods = list_pods(core, namespace, gate.VALIDATOR_POD_SELECTOR, request_timeout)
    sandbox_pods: list[dict[str, Any]] = []
    if scope.sandbox_validator:
        sandbox_pods = list_pods(core, namespace, gate.SANDBOX_VALIDATOR_POD_SELECTOR, request_timeout)
    driver_pods: list[dict[str, Any]] = []
    if scope.driver_daemonsets:
        driver_pods = driver_like_pods(core, namespace, daemonsets or {}, request_timeout)
    return gate.evaluate(nodes, validator_pods, pools=pools, daemonsets=daemonsets,
                         sandbox_nodes=sandbox_nodes, sandbox_pods=sandbox_pods, driver_pods=driver_pods,
                         expected_nodes=scope.expected_nodes, previous=previous, now=elapsed(),
                         validator_daemonsets=validators)


def _progress(result: Mapping[str, Any]) -> dict[str, Any]:
    """A poll's log line: the verdict's counts, not its lists."""
    progress = {"status": result["status"], "gpuNodes": result["gpuNodes"], "validatedNodes": result["validatedNodes"]}
    for key, count_key in (("skipped", "skippedNodes"), ("failures", "failures"), ("missingNodes", "poolsMissingNodes")):
        if key in result:
            progress[count_key] = len(result[key])
    if "sandboxNodes" in result:
        progress["sandboxNodes"] = result["sandboxNodes"]
    if "driverRollout" in result:
        progress["rolledOutDaemonSets"] = sum(r["done"] for r in result["driverRollout"])
    if "upgradeStates" in result:
        progress["upgradeStates"] = result["upgradeStates"]
    return progress


def _publish(batch: Any, job_namespace: str, job_name: str, poll_seconds: int, result: Mapping[str, Any], log: Log,
             out: Callable[[str], None], termination_message_path: str | None) -> None:
    """The verdict on the Job's annotation, on stdout and in the termination message."""
    line = json.dumps(result, separators=(",", ":"))
    try:
        patch_job_annotations(batch, job_namespace, job_name, {gate.RESULT_ANNOTATION: line},
                              max(1.0, float(poll_seconds)))
    except (ApiException, urllib3.exceptions.HTTPError) as exc:
        # The verdict still reaches the log and the exit code; losing the annotation
        # must not turn a validated stack into a failed Job.
        log({"level": "error", "event": "annotate-failed", "job": job_name, **_describe(exc)})
    out(line)
    if termination_message_path:
        write_termination_message(termination_message_path, result, log)


def driver_like_pods(core: Any, namespace: str, daemonsets: Mapping[str, Mapping[str, Any] | None],
                     request_timeout: float) -> list[dict[str, Any]]:
    """The pods of the gate's driver-like DaemonSets: every driver pod by the label they all carry (one list however
    many driver DaemonSets), a vGPU or VFIO manager's by its DaemonSet's own selector; gate.evaluate keeps those the
    named DaemonSets own."""
    found = {podinfo_key(p): p for p in list_pods(core, namespace, pods.DRIVER_POD_SELECTOR, request_timeout)}
    for daemonset in daemonsets.values():
        template = (((daemonset or {}).get("spec") or {}).get("template") or {}).get("metadata") or {}
        if daemonset is None or (template.get("labels") or {}).get(pods.DRIVER_COMPONENT_LABEL) == pods.DRIVER_COMPONENT:
            continue
        match = ((daemonset.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        selector = ",".join(f"{k}={v}" for k, v in sorted(match.items()))
        if selector:
            found.update({podinfo_key(p): p for p in list_pods(core, namespace, selector, request_timeout)})
    return list(found.values())


def podinfo_key(pod: Mapping[str, Any]) -> tuple[str, str]:
    metadata = pod.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def write_termination_message(path: str, result: Mapping[str, Any], log: Log) -> None:
    """The verdict where `kubectl describe pod`, the Job's status and `pulumi up`'s error show it. Optional like
    the annotation: a read-only or missing file must not change the exit code."""
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(gate.termination_message(result))
    except OSError as exc:
        log({"level": "warning", "event": "termination-message-failed", "path": path,
             "error": f"{type(exc).__name__}: {exc}"})
