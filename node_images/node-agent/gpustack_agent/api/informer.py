"""List, then watch from the list's resourceVersion, forever: what client-go calls a reflector, for the coordinator.

Each informer runs on its own (a thread in the coordinator, a green thread in the benchmark) and hands what it
sees to one queue as ``(source, type, object)``: ``SYNC`` with every object after a list, then the watch's
``ADDED``/``MODIFIED``/``DELETED``. A watch that times out is resumed from the last resourceVersion (bookmarks keep
it current), so a quiet informer costs one request per timeout; a resourceVersion the server no longer has (410)
makes it list again. Transient errors are retried after the agents' backoff; an error retrying cannot fix (a
missing permission) is handed on as ``FATAL`` for the coordinator to stop on, naming what was refused.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import urllib3
from kubernetes.client.exceptions import ApiException

from gpustack_agent.api import backoff, podwatch

SYNC, FATAL = "SYNC", "FATAL"
PAGE_SIZE = 500
WATCH_SECONDS = 1800
# Asks for metadata only: names, labels and annotations, what the coordinator reads of a Node.
METADATA_LIST = {"Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"}
METADATA_WATCH = {"Accept": "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"}

Emit = Callable[[tuple[str, str, Any]], None]


@dataclass(frozen=True)
class Source:
    """What one informer lists and watches: ``list_call`` (a client method such as ``CoreV1Api.list_node``) with
    ``args`` and the selectors, as metadata only with ``metadata``."""

    name: str
    list_call: Callable[..., Any]
    args: tuple[Any, ...] = ()
    label_selector: str | None = None
    field_selector: str | None = None
    metadata: bool = False

    def list(self, api_client: Any) -> tuple[list[dict[str, Any]], str | None]:
        """Every object, page by page, and the resourceVersion to watch from."""
        kwargs: dict[str, Any] = {"limit": PAGE_SIZE, "_request_timeout": 60.0}
        if self.label_selector:
            kwargs["label_selector"] = self.label_selector
        if self.field_selector:
            kwargs["field_selector"] = self.field_selector
        if self.metadata:
            kwargs["_headers"] = dict(METADATA_LIST)
            kwargs["_preload_content"] = False
        items: list[dict[str, Any]] = []
        while True:
            response = self.list_call(*self.args, **kwargs)
            body = (json.loads(response.data) if hasattr(response, "data")
                    else api_client.sanitize_for_serialization(response))
            items += [item for item in body.get("items") or [] if isinstance(item, dict)]
            metadata = body.get("metadata") or {}
            if not metadata.get("continue"):
                return items, metadata.get("resourceVersion")
            kwargs["_continue"] = metadata["continue"]

    def watch(self, timeout: int, resource_version: str | None) -> Iterable[dict[str, Any]]:
        return podwatch.watch_events(functools.partial(self.list_call, *self.args), self.field_selector, timeout,
                                     resource_version, label_selector=self.label_selector,
                                     headers=METADATA_WATCH if self.metadata else None)


def describe(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"{exc.status} {exc.reason or ''}".strip()
    return f"{type(exc).__name__}: {exc}"


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, ApiException):
        status = exc.status or 0
        return status == 0 or status in (409, 410, 429) or status >= 500
    return isinstance(exc, urllib3.exceptions.HTTPError)


def run(source: Source, api_client: Any, emit: Emit, *, stop: Callable[[], bool], sleep: Callable[[float], None],
        clock: Callable[[], float], rng: Callable[[], float], timeout: int = WATCH_SECONDS) -> None:
    """List and watch ``source`` until ``stop()``."""
    version: str | None = None
    pause = backoff.Backoff(rng)
    while not stop():
        try:
            if version is None:
                items, version = source.list(api_client)
                emit((source.name, SYNC, items))
            started = clock()
            for event in source.watch(timeout, version):
                obj: Mapping[str, Any] = event.get("object") or {}
                version = podwatch.resource_version_of(obj) or version
                if event["type"] != podwatch.BOOKMARK:
                    emit((source.name, event["type"], obj))
                if stop():
                    return
            if backoff.watch_ended_early(clock() - started, timeout):
                sleep(pause.failure())
            else:
                pause.reset()
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            if not is_transient(exc):
                emit((source.name, FATAL, f"{source.name}: {describe(exc)}"))
                return
            if isinstance(exc, ApiException) and exc.status == 410:
                version = None  # the server no longer has it: list again
                continue
            sleep(pause.failure())
