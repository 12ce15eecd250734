"""Kubernetes API access: the clients, reads and writes with their timeouts, the Node watch, and `keep_running`,
the backoff every program's loop runs under.

The model (gpustack_agent.model) stays pure: API objects are converted here to dicts shaped like ``kubectl get -o
json`` (camelCase keys), which is what the pure modules and the recorded test fixtures use. The programs' loops
(label, inventory, gate, coordinate) take the API objects, clock, sleep, stop and log callables as arguments so
tests can drive one or two iterations against a fake API.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Mapping, Optional

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from gpustack_agent.api import backoff, podwatch
from gpustack_agent.api.podwatch import HEALTHY, SHORT
from gpustack_agent.model import labelcheck, labels

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
