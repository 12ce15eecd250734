"""Where each key of a stack file is written: the line and column of every key path, in the notation config errors
use (`gpu-stack:nodePools[1].sharing.replicas`), so a finding can point at the line a reviewer has to change.

The file is composed (not constructed) through the same guarded loader that reads it for the render, so the
positions are those of the document the render saw. A key that is not written (a default in effect) is located
at the nearest key above it that is: `gpu-stack:upgrade.maxUnavailable` left out lands on `gpu-stack:upgrade`,
where a reviewer would add it, and the finding says its default applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional, Sequence

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from gpustack.sourcemap import Cause
from node_images.inputfiles import STACK_FILE_MAX_BYTES, GuardedLoader, load_yaml_text, read_text

POOLS_KEY = "gpu-stack:nodePools"


@dataclass(frozen=True)
class Position:
    """1-based, as SARIF and editors count; the end is the column after the key's last character."""

    key: str
    line: int
    column: int
    end_line: int
    end_column: int


def _join(prefix: str, part: str) -> str:
    if part.startswith("["):
        return prefix + part
    return f"{prefix}.{part}" if prefix else part


def _walk(node: Node, prefix: str) -> Iterator[tuple[str, Node, Node]]:
    """(key path, the node to point at, the value node) for every key and list item below `node`."""
    if isinstance(node, MappingNode):
        for key, value in node.value:
            if isinstance(key, ScalarNode):
                path = _join(prefix, key.value)
                yield path, key, value
                yield from _walk(value, path)
    elif isinstance(node, SequenceNode):
        for index, item in enumerate(node.value):
            path = _join(prefix, f"[{index}]")
            yield path, item, item
            yield from _walk(item, path)


def _position(key: str, node: Node) -> Position:
    start, end = node.start_mark, node.end_mark
    if isinstance(node, ScalarNode):
        return Position(key, start.line + 1, start.column + 1, end.line + 1, end.column + 1)
    # a list item or a mapping: its first line, not the whole block
    return Position(key, start.line + 1, start.column + 1, start.line + 1, start.column + 2)


class KeyLines:
    """The positions of one stack file's keys under `config:`, and the pool names in the order written."""

    def __init__(self, positions: dict[str, Position], pools: list[str], text_lines: Sequence[str] = ()):
        self._positions = positions
        self.pools = pools
        self.text_lines = list(text_lines)

    @classmethod
    def of_text(cls, text: str, source: str = "<stack file>") -> "KeyLines":
        """Raises InputFileError, as the render's own read would, for a file that is not YAML gpu-stack accepts."""
        load_yaml_text(text, source)
        loader = type("Loader", (GuardedLoader,), {"source": source})(text)
        try:
            root = loader.get_single_node()
        finally:
            loader.dispose()
        config = None
        if isinstance(root, MappingNode):
            config = next((value for key, value in root.value if isinstance(key, ScalarNode) and key.value == "config"), None)
        positions: dict[str, Position] = {}
        scalars: dict[str, str] = {}
        for path, node, value in _walk(config, "") if config is not None else ():
            positions[path] = _position(path, node)
            if isinstance(value, ScalarNode):
                scalars[path] = str(value.value)
        pools, index = [], 0
        while f"{POOLS_KEY}[{index}]" in positions:
            pools.append(scalars.get(f"{POOLS_KEY}[{index}].name", ""))
            index += 1
        return cls(positions, pools, text.splitlines())

    @classmethod
    def of_file(cls, path: Path) -> "KeyLines":
        return cls.of_text(read_text(path, STACK_FILE_MAX_BYTES, "STACK_FILE_MAX_BYTES", str(path)), str(path))

    def exact(self, key: str) -> Optional[Position]:
        return self._positions.get(key)

    def nearest(self, key: str) -> Optional[Position]:
        """The key's own position, else that of the closest key above it that the file writes."""
        while key:
            found = self._positions.get(key)
            if found is not None:
                return found
            cut = max(key.rfind("."), key.rfind("["))
            if cut <= 0:
                return None
            key = key[:cut]
        return None

    def locate(self, cause: Optional[Cause]) -> tuple[Optional[Position], str]:
        """Where a finding with this cause belongs, and what its message must add: the key's own line; a key the
        file leaves at its default at the nearest key above it that the file writes (where a reviewer adds it); a key
        that only decides the object (no key sets the field) the same way, saying so. (None, "") when the file
        writes nothing of it."""
        if cause is None:
            return None, ""
        found = self.nearest(cause.key)
        if found is None:
            return None, ""
        default = found.key != cause.key
        if cause.decides:
            return found, (f"no stack key sets this field; {cause.key} decides the object"
                           + (" and is not set in this file: its default applies" if default else ""))
        return found, f"{cause.key} is not set in this file: its default applies" if default else ""

    def line_region(self, line: Optional[int]) -> dict[str, int]:
        """The whole of one line (1 when unknown), for a finding with no key: SARIF consumers want every bound."""
        number = line if line is not None and 1 <= line <= max(len(self.text_lines), 1) else 1
        text = self.text_lines[number - 1] if number <= len(self.text_lines) else ""
        return {"startLine": number, "startColumn": 1, "endLine": number, "endColumn": max(len(text), 1) + 1}
