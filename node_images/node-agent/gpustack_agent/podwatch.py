"""A holder's wait: the pods on its node, watched until an event can move it on."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Mapping, Optional

from kubernetes import watch

from . import backoff

WATCH_CLIENT_SLACK_SECONDS = 30.0
Watcher = Callable[[Any, str, int, Optional[str]], Any]
HEALTHY, SHORT, NEUTRAL = "healthy", "short", "neutral"


def watch_events(list_call: Callable[..., Any], field_selector: str, timeout_seconds: int,
                 resource_version: str | None) -> Iterator[dict[str, Any]]:
    """Events of what ``list_call`` lists under ``field_selector``, as ``{"type": ..., "object": <dict>}``, until
    the server ends the watch after ``timeout_seconds``."""
    kwargs: dict[str, Any] = {
        "field_selector": field_selector,
        "timeout_seconds": int(timeout_seconds),
        "_request_timeout": timeout_seconds + WATCH_CLIENT_SLACK_SECONDS,
    }
    if resource_version:
        kwargs["resource_version"] = resource_version
    watcher = watch.Watch()
    try:
        for event in watcher.stream(list_call, **kwargs):
            # A blank or garbled line of the stream reaches us as an event without an object (or not as an event):
            # skipped, not a failed pass; ERROR events (410 Gone) are still passed on for the caller to judge.
            if not isinstance(event, dict) or not isinstance(event.get("type"), str) or not isinstance(
                    event.get("raw_object"), dict):
                continue
            yield {"type": event["type"], "object": event["raw_object"]}
    finally:
        watcher.stop()


def watch_node_pods(core: Any, name: str, timeout_seconds: int, resource_version: str | None
                    ) -> Iterator[dict[str, Any]]:
    """Events of the pods on one node, every namespace."""
    return watch_events(core.list_pod_for_all_namespaces, f"spec.nodeName={name}", timeout_seconds, resource_version)


def await_pods(core: Any, node_name: str, timeout: int, wants: Callable[[Mapping[str, Any]], bool],
                resource_version: str | None, watch_pods: Optional[Watcher], stop: Callable[[], bool],
                clock: Callable[[], float]) -> str:
    """Watch the node's pods from ``resource_version`` (the pass's own read of them) until an event ``wants``
    (NEUTRAL: look again now) or ``timeout`` (HEALTHY)."""
    started = clock()
    events = (watch_pods or watch_node_pods)(core, node_name, timeout, resource_version)
    return follow(events, lambda event: stop() or wants(event), timeout, started, clock)


def follow(events: Iterable[dict[str, Any]], ends_pass: Callable[[Mapping[str, Any]], bool], timeout: int,
           started: float, clock: Callable[[], float]) -> str:
    """Read a watch until an event ``ends_pass`` (NEUTRAL: look again now) or the stream ends (HEALTHY, or SHORT
    when it ended well before ``timeout``: the caller backs off)."""
    stream = iter(events)
    try:
        for event in stream:
            if ends_pass(event):
                return NEUTRAL
    finally:
        # Release the watch connection now when leaving early (an error, a stop), not whenever the generator
        # happens to be collected.
        close = getattr(stream, "close", None)
        if close is not None:
            close()
    return SHORT if backoff.watch_ended_early(clock() - started, timeout) else HEALTHY


