"""Which field of an object each violation is about: a JSON pointer into the object's properties, as the policy
reads them (`/spec/template/spec/volumes/9/hostPath/path`), with the pointer into a document a ConfigMap carries
as text after a `#` (`/data/node-pools.json#/pools/1/nodeSelector`) and a part of a composed value after it too
(`/spec/template/spec/containers/0/image#/repository`). A violation about the order resources are applied in names
DEPENDENCIES instead.

Every policy reports through `report_at`, which hands the engine the message alone, exactly as `report` would:
CrossGuard's violations carry no field. The offline toolkit listens (`listening`) and gets the field of each
violation in the order reported, which is how `gpustack check` traces a violation to the stack key that set the
field (gpustack/findings.py), without reading the message.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Optional

from pulumi_policy import ReportViolation

# Not a property: the resource's dependencies, its place in the apply order (what a state or an upgrade wave decides).
DEPENDENCIES = "@dependencies"
# Not a property either: whether a pod's token is kept to its node by admission (the declared Kubernetes versions).
NODE_BOUND = "@node-bound"

# (message, field) of each violation, in the order reported
Listener = Callable[[str, str], None]
_listeners: list[Listener] = []


def escape(part: Any) -> str:
    return str(part).replace("~", "~0").replace("/", "~1")


def pointer(*parts: Any) -> str:
    """`/a/b/0` from its parts, each escaped; a part that is already a pointer (starts with '/') goes in as it is."""
    return "".join(str(p) if str(p).startswith("/") else f"/{escape(p)}" for p in parts if p != "")


def report_at(report: ReportViolation, field: str, message: str, urn: Optional[str] = None) -> None:
    for listener in _listeners:
        listener(message, field)
    if urn is None:
        report(message)
    else:
        report(message, urn)


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)
