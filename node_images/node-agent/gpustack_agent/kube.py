"""Kubernetes API glue and the control loops.

Everything that talks to the API server lives here and in :mod:`.pacer` (paced label
removal), so that :mod:`.labels`, :mod:`.removal`, :mod:`.budget`, :mod:`.upgrade`, :mod:`.pods` and
:mod:`.gate` stay pure. API objects are converted to dicts shaped like
``kubectl get -o json`` (camelCase keys) at this boundary, which is what the pure
modules and the recorded test fixtures use.

The loops take the API objects, clock, sleep, stop and log callables as arguments
so tests can drive one or two iterations against a mocked API.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from . import backoff, drift, gate, inventory, labelcheck, labels, pods
from . import podwatch
from .podwatch import HEALTHY, SHORT

# The client would otherwise send a dict body as a strategic merge patch; the
# patches computed here are JSON merge patches (null deletes a key).
MERGE_PATCH = "application/merge-patch+json"
REQUEST_TIMEOUT_SECONDS = 30.0
# Slack on top of the server-side watch timeout before the client gives up on a
# connection that died silently (e.g. a dropped NAT entry).
WATCH_CLIENT_SLACK_SECONDS = 30.0
DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"

Log = Callable[[dict[str, Any]], None]
Watcher = Callable[[Any, str, int, Optional[str]], Iterable[Mapping[str, Any]]]
Clients = tuple[client.CoreV1Api, client.BatchV1Api, client.AppsV1Api, client.CoordinationV1Api]


def load_clients() -> Clients:
    """API clients authenticated as the pod's service account."""
    config.load_incluster_config()
    api_client = client.ApiClient()
    return (client.CoreV1Api(api_client), client.BatchV1Api(api_client), client.AppsV1Api(api_client),
            client.CoordinationV1Api(api_client))


def as_dict(api: Any, obj: Any) -> dict[str, Any]:
    """A client model as the dict ``kubectl get -o json`` prints, what the pure modules read."""
    return api.api_client.sanitize_for_serialization(obj)


def get_node(core: Any, name: str) -> dict[str, Any]:
    return as_dict(core, core.read_node(name, _request_timeout=REQUEST_TIMEOUT_SECONDS))


def patch_node(core: Any, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """Apply a JSON merge patch to the node; the node as written."""
    return as_dict(core, core.patch_node(
        name=name,
        body=dict(body),
        _content_type=MERGE_PATCH,
        _request_timeout=REQUEST_TIMEOUT_SECONDS,
    ))


def watch_node(core: Any, name: str, timeout_seconds: int, resource_version: str | None) -> Iterator[dict[str, Any]]:
    """Events for one node as ``{"type": ..., "object": <node dict>}`` until the
    server ends the watch after ``timeout_seconds``."""
    return podwatch.watch_events(core.list_node, f"metadata.name={name}", timeout_seconds, resource_version)


def list_nodes(core: Any, label_selector: str, request_timeout: float = REQUEST_TIMEOUT_SECONDS) -> list[dict[str, Any]]:
    result = core.list_node(label_selector=label_selector, _request_timeout=request_timeout)
    return as_dict(core, result).get("items") or []


def list_pods(
    core: Any, namespace: str, label_selector: str, request_timeout: float = REQUEST_TIMEOUT_SECONDS
) -> list[dict[str, Any]]:
    result = core.list_namespaced_pod(
        namespace=namespace, label_selector=label_selector, _request_timeout=request_timeout
    )
    return as_dict(core, result).get("items") or []


def read_daemon_set(
    apps: Any, namespace: str, name: str, request_timeout: float = REQUEST_TIMEOUT_SECONDS
) -> dict[str, Any] | None:
    """The DaemonSet, or None if it does not exist: the gate's own `pulumi up` may
    not have created it yet, which is an answer ("not rolled out"), not an error."""
    try:
        result = apps.read_namespaced_daemon_set(name=name, namespace=namespace, _request_timeout=request_timeout)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return as_dict(apps, result)


def patch_job_annotations(
    batch: Any,
    namespace: str,
    name: str,
    annotations: Mapping[str, str],
    request_timeout: float = REQUEST_TIMEOUT_SECONDS,
) -> None:
    batch.patch_namespaced_job(
        name=name,
        namespace=namespace,
        body={"metadata": {"annotations": dict(annotations)}},
        _content_type=MERGE_PATCH,
        _request_timeout=request_timeout,
    )


def is_transient(exc: BaseException) -> bool:
    """Errors worth retrying: conflicts (someone else wrote the node first), an
    expired watch, throttling, server errors and broken connections. Anything else
    (401/403/404/422) will not fix itself by retrying the same request."""
    if isinstance(exc, ApiException):
        status = exc.status or 0
        # status 0 is how the client reports TLS failures, e.g. during API server rotation.
        return status == 0 or status in (409, 410, 429) or status >= 500
    return isinstance(exc, urllib3.exceptions.HTTPError)


def _describe(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, ApiException):
        return {"status": exc.status, "reason": exc.reason}
    return {"error": f"{type(exc).__name__}: {exc}"}


def reconcile_node(core: Any, node: Mapping[str, Any], config_data: Any, log: Log) -> dict[str, Any] | None:
    """Apply the labels ``config_data`` asks for, all at once; returns the node as written, None if unchanged."""
    return apply_label_patch(core, node, labels.desired_patch(node, config_data), log)


def apply_label_patch(core: Any, node: Mapping[str, Any], patch: Mapping[str, Any] | None, log: Log,
                      **record: Any) -> dict[str, Any] | None:
    """Send ``patch`` (from :func:`labels.desired_patch` or part of it) and log it, with ``record``'s keys
    added to the log line; returns the node as written, None when there was nothing to send."""
    if patch is None:
        return None
    metadata = node.get("metadata") or {}
    name = metadata["name"]
    body: dict[str, Any] = {"metadata": dict(patch["metadata"])}
    # resourceVersion turns the merge patch into a compare-and-swap: if a manager
    # changed a deploy label after `node` was read, the server answers 409 and the
    # loop re-reads instead of overwriting that manager's value.
    if metadata.get("resourceVersion"):
        body["metadata"]["resourceVersion"] = metadata["resourceVersion"]
    written = patch_node(core, name, body)
    log({"level": "info", "event": "labels-changed", "node": name, **record,
         **labels.describe_changes(node, patch)})
    return written


# What one pass of a loop reports: HEALTHY resets the backoff, SHORT (a watch the server ended long before its
# timeout) counts as a failure, NEUTRAL (a new pass asked for by an event) does neither.
# (podwatch.py holds them: its watches report them too.)


def keep_running(
    one_pass: Callable[[], str],
    *,
    node_name: str,
    resync_seconds: int,
    log: Log,
    stop: Callable[[], bool],
    sleep: Callable[[float], None],
    rng: Callable[[], float],
) -> None:
    """Run ``one_pass`` until ``stop()``, surviving what a node agent must survive: an invalid config (logged,
    retried after ``resync_seconds``; kubelet rewrites the mounted file in place, so a fix is picked up without a
    restart), transient API errors, a watch that ends at once, and any other error of a pass (garbage in an API
    object), all retried after a jittered exponential backoff, so no failure makes a hot loop. API errors retrying
    cannot fix (401, 403, 404, 422) end the process."""
    pause = backoff.Backoff(rng)
    while not stop():
        try:
            outcome = one_pass()
        except labels.ConfigError as exc:
            log({"level": "error", "event": "config-invalid", "node": node_name, "error": str(exc)})
            sleep(resync_seconds)
            continue
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            if not is_transient(exc):
                raise
            delay = pause.failure()
            log({"level": "warning", "event": "retry", "node": node_name, "delaySeconds": round(delay, 3), **_describe(exc)})
            sleep(delay)
            continue
        except Exception as exc:  # noqa: BLE001 - a DaemonSet agent must outlive one bad object; logged, retried
            delay = pause.failure()
            log({"level": "error", "event": "pass-failed", "node": node_name, "delaySeconds": round(delay, 3),
                 "error": labelcheck.shown(f"{type(exc).__name__}: {exc}")})
            sleep(delay)
            continue
        if outcome == HEALTHY:
            pause.reset()
        elif outcome == SHORT:
            delay = pause.failure()
            log({"level": "warning", "event": "watch-ended-early", "node": node_name,
                 "delaySeconds": round(delay, 3)})
            sleep(delay)


def run_inventory_loop(
    core: Any,
    *,
    node_name: str,
    load_config: Callable[[], Any],
    read_inventory: Callable[[], inventory.Inventory],
    resync_seconds: int,
    log: Log,
    stop: Callable[[], bool] = lambda: False,
    sleep: Callable[[float], None] = time.sleep,
    rng: Callable[[], float] = random.random,
) -> None:
    """Every ``resync_seconds`` until ``stop()``: read the GPUs through NVML, compare them with the node's pool,
    and keep the gpu-stack/inventory and gpu-stack/drift annotations current, logging each change. With an
    invalid config the annotations keep their last verdict.

    Polled, not watched: the hardware and the MIG state change without a node event, and a drift report a
    minute late is still a report.
    """

    warnings = labelcheck.Warnings(log)

    def one_pass() -> str:
        try:
            found: inventory.Inventory | inventory.NvmlUnavailable = read_inventory()
        except inventory.NvmlUnavailable as exc:
            # Normal until the driver is up (a managed driver installs after the node is labelled), so
            # record it and try again next pass.
            found = exc
        node = get_node(core, node_name)
        metadata = node.get("metadata") or {}
        warnings.report(node_name, labelcheck.mig_state_problems(node))
        wanted, departures = drift.wanted_annotations(found, metadata.get("labels") or {}, load_config())
        patch = drift.annotation_patch(node, wanted)
        if patch is not None:
            # No resourceVersion: only this loop writes these two keys, and a compare-and-swap would lose
            # every race with the label loop's writes to the same node for nothing.
            patch_node(core, node_name, patch)
            if isinstance(found, inventory.NvmlUnavailable):
                log({"level": "warning", "event": "inventory-unavailable", "node": node_name, "error": str(found)})
            else:
                log({"level": "warning" if departures else "info", "event": "inventory", "node": node_name,
                     "inventory": found.summary(), "drift": [d.as_json() for d in departures]})
        sleep(resync_seconds)
        return HEALTHY

    keep_running(one_pass, node_name=node_name, resync_seconds=resync_seconds, log=log, stop=stop, sleep=sleep, rng=rng)


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
