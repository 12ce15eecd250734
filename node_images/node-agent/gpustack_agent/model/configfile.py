"""The node-pools config file: read within bounds, and kept at its last good version while a bad one is mounted.

The Pulumi program writes it into a ConfigMap that kubelet mounts and rewrites in place. A document that cannot
be used stops the agent at startup with exit 2 (the pod's CrashLoopBackOff shows it, and no label is touched);
one that turns bad while the agent runs is logged once per distinct error and the agent goes on with the last good
document, which is what the node's labels were made from, rather than with a guess (or with nothing, which would
also stop renewing a removal slot the node holds).
"""

from __future__ import annotations

import json
from typing import Any, Callable

from gpustack_agent.model import labels
from gpustack_agent.model.labelcheck import shown

# A ConfigMap holds at most 1 MiB of data; a file beyond that is not one kubelet mounted from the Pulumi program.
MAX_CONFIG_BYTES = 1 << 20
# The document is an object of lists of objects of maps: 4 levels; a few to spare for keys a newer program adds.
MAX_CONFIG_DEPTH = 8


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            # Python would keep the last one silently, while a reader of the ConfigMap may see the first.
            raise ValueError(f"duplicate key {shown(repr(key))}")
        result[key] = value
    return result


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _depth(value: Any) -> int:
    """Nesting depth of a parsed document, without recursion (that is what a deep document breaks)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return deepest


def parse_bytes(data: bytes, path: str) -> Any:
    """The JSON document in ``data``; ConfigError naming ``path`` and why for anything out of bounds."""
    if len(data) > MAX_CONFIG_BYTES:
        raise labels.ConfigError(f"node-pools config {path} is {len(data)} bytes, more than the limit of "
                                 f"{MAX_CONFIG_BYTES}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise labels.ConfigError(f"node-pools config {path} is not UTF-8 (byte {exc.start})") from None
    try:
        raw = json.loads(text, object_pairs_hook=_refuse_duplicates, parse_constant=_refuse_constant)
    except RecursionError:
        raise labels.ConfigError(f"node-pools config {path} is nested deeper than {MAX_CONFIG_DEPTH} levels") from None
    except ValueError as exc:
        raise labels.ConfigError(f"cannot read node-pools config {path}: {exc}") from None
    if _depth(raw) > MAX_CONFIG_DEPTH:
        raise labels.ConfigError(f"node-pools config {path} is nested deeper than {MAX_CONFIG_DEPTH} levels")
    return raw


def read_config(path: str) -> labels.Config:
    """Parse the mounted ConfigMap; any problem reading it is a ConfigError, so the label loop treats a missing
    file like an invalid one and leaves labels alone."""
    try:
        with open(path, "rb") as handle:
            # One byte more than the limit is enough to know it is over.
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise labels.ConfigError(f"cannot read node-pools config {path}: {exc}") from exc
    return labels.parse_config(parse_bytes(data, path))


class ConfigSource:
    """``load()`` re-reads the file on every call (kubelet updates it in place) and returns the last good config
    while the file is bad; ConfigError only before any good one was read."""

    def __init__(self, path: str, *, node_name: str, log: Callable[[dict[str, Any]], None],
                 read: Callable[[str], labels.Config] = read_config) -> None:
        self.path, self.node_name, self.log, self.read = path, node_name, log, read
        self.good: labels.Config | None = None
        self._last_error: str | None = None

    def load(self) -> labels.Config:
        try:
            config = self.read(self.path)
        except labels.ConfigError as exc:
            if self.good is None:
                raise
            if str(exc) != self._last_error:
                self._last_error = str(exc)
                self.log({"level": "error", "event": "config-invalid", "node": self.node_name, "error": str(exc),
                          "using": "the last good config"})
            return self.good
        if self._last_error is not None:
            self.log({"level": "info", "event": "config-valid", "node": self.node_name})
            self._last_error = None
        self.good = config
        return config
