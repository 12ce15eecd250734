"""Watches as the agent's loops read them: events as plain dicts, resumed from the last resourceVersion seen, and the
pods on one node kept current from a watch (an informer of one node's pods)."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Mapping, Optional

from kubernetes import client, watch

from gpustack_agent.api import backoff

WATCH_CLIENT_SLACK_SECONDS = 30.0
Watcher = Callable[[Any, str, int, Optional[str]], Any]
HEALTHY, SHORT, NEUTRAL = "healthy", "short", "neutral"
ADDED, MODIFIED, DELETED, BOOKMARK = "ADDED", "MODIFIED", "DELETED", "BOOKMARK"


class _RawWatch(watch.Watch):
    """A watch whose events keep their objects as the dicts the API server sent: the agent reads dicts shaped like
    ``kubectl get -o json`` everywhere, and building client models of every event only to turn them back costs CPU
    on every node. Its API client (which reads the proxy settings of the environment when made, and is used only to
    read an error response) is made once, not for every watch."""

    _shared_client: Any = None

    def __init__(self) -> None:
        self._raw_return_type = None
        self._stop = False
        self.resource_version = None
        if _RawWatch._shared_client is None:
            _RawWatch._shared_client = client.ApiClient()
        self._api_client = _RawWatch._shared_client

    def get_return_type(self, _func: Any) -> str:
        return ""

    def get_watch_argument_name(self, _func: Any) -> str:
        # Every call here lists objects (`watch=true`), never follows a log; the client would otherwise read the
        # list method's signature and docstring on every watch to tell.
        return "watch"


def watch_events(list_call: Callable[..., Any], field_selector: str | None, timeout_seconds: int,
                 resource_version: str | None, *, label_selector: str | None = None,
                 headers: Mapping[str, str] | None = None) -> Iterator[dict[str, Any]]:
    """Events of what ``list_call`` lists under the selectors, as ``{"type": ..., "object": <dict>}``, until the
    server ends the watch after ``timeout_seconds``. Bookmarks are asked for: the server then tells the newest
    resourceVersion even of a quiet watch (and before it closes one at its timeout), so the next watch resumes from
    there without reading the object again. A resourceVersion the server no longer has ends the watch with
    ApiException 410: the caller reads anew."""
    kwargs: dict[str, Any] = {
        "timeout_seconds": int(timeout_seconds),
        "_request_timeout": timeout_seconds + WATCH_CLIENT_SLACK_SECONDS,
        "allow_watch_bookmarks": True,
    }
    if field_selector:
        kwargs["field_selector"] = field_selector
    if label_selector:
        kwargs["label_selector"] = label_selector
    if headers:
        kwargs["_headers"] = dict(headers)
    if resource_version:
        kwargs["resource_version"] = resource_version
    watcher = _RawWatch()
    try:
        for event in watcher.stream(list_call, **kwargs):
            # A blank or garbled line of the stream reaches us as an event without an object (or not as an event):
            # skipped, not a failed pass.
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


def resource_version_of(obj: Mapping[str, Any]) -> str | None:
    return (obj.get("metadata") or {}).get("resourceVersion") or None


class PodCache:
    """The pods on one node, every namespace: listed once, then kept current by the events of a watch from the
    list's resourceVersion while ``live`` (the label loop's pod watch). A holder judges its progress on every pod
    event from this, without a read."""

    def __init__(self, core: Any, node_name: str) -> None:
        self.core = core
        self.node_name = node_name
        self._items: dict[tuple[str, str], dict[str, Any]] | None = None
        self.resource_version: str | None = None
        self.live = False

    def forget(self) -> None:
        """What was listed is stale (no watch kept it current): the next read lists again."""
        if not self.live:
            self._items = None

    @property
    def known(self) -> bool:
        return self._items is not None

    def current(self) -> list[dict[str, Any]]:
        if self._items is None:
            self.refresh()
        return list((self._items or {}).values())

    def refresh(self) -> None:
        listed = self.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={self.node_name}", _request_timeout=30.0)
        body = self.core.api_client.sanitize_for_serialization(listed)
        self._items = {_key(pod): pod for pod in body.get("items") or []}
        self.resource_version = (body.get("metadata") or {}).get("resourceVersion")

    def apply(self, event: Mapping[str, Any]) -> None:
        """One event of the watch on the node's pods."""
        obj = event.get("object") or {}
        version = resource_version_of(obj)
        if version:
            self.resource_version = version
        if self._items is None or event.get("type") == BOOKMARK:
            return
        if event.get("type") == DELETED:
            self._items.pop(_key(obj), None)
        elif event.get("type") in (ADDED, MODIFIED):
            self._items[_key(obj)] = dict(obj)


def _key(pod: Mapping[str, Any]) -> tuple[str, str]:
    metadata = pod.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


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
