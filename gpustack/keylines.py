"""Where each key of a stack file is written: the line and column of every key path, in the notation config errors
use (`gpu-stack:nodePools[1].sharing.replicas`), so a finding can point at the line a reviewer has to change.

The file is composed (not constructed) through the same guarded loader that reads it for the render, so the
positions are those of the document the render saw. A key that is not written (a default in effect) is located
at the nearest key above it that is: `gpu-stack:upgrade.maxUnavailable` left out lands on `gpu-stack:upgrade`,
where a reviewer would add it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional, Sequence

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from node_images.inputfiles import STACK_FILE_MAX_BYTES, GuardedLoader, load_yaml_text, read_text

POOLS_KEY = "gpu-stack:nodePools"
# A key path's placeholder for "the pool this finding is about" (`gpu-stack:nodePools[].sharing`).
ANY_POOL = f"{POOLS_KEY}[]"


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

    def __init__(self, positions: dict[str, Position], pools: list[str]):
        self._positions = positions
        self.pools = pools

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
        return cls(positions, pools)

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

    def for_pool(self, key: str, pool: Optional[str]) -> Optional[str]:
        """`gpu-stack:nodePools[].x` made concrete for the named pool; None when the pool is unknown or not written."""
        if not key.startswith(ANY_POOL):
            return key
        if pool is None or pool not in self.pools:
            return None
        return f"{POOLS_KEY}[{self.pools.index(pool)}]{key[len(ANY_POOL):]}"

    def locate(self, keys: Sequence[str], context: Sequence[str], pools: Sequence[str]) -> Optional[Position]:
        """Where a finding belongs. `keys` say what to change: the first that the file writes, or whose nearest
        written parent exists, wins (a key left at its default is added under that parent). `context` are the keys
        that decide the finding: the first one written, else the first one's nearest written parent. Keys of one
        pool (`gpu-stack:nodePools[]...`) are tried for each of `pools` in turn."""
        for key in self._concrete(keys, pools):
            found = self.nearest(key)
            if found is not None:
                return found
        concrete = self._concrete(context, pools)
        for key in concrete:
            if key in self._positions:
                return self._positions[key]
        for key in concrete:
            found = self.nearest(key)
            if found is not None:
                return found
        return None

    def _concrete(self, keys: Sequence[str], pools: Sequence[str]) -> list[str]:
        concrete: list[str] = []
        for key in keys:
            if key.startswith(ANY_POOL):
                concrete += [k for k in (self.for_pool(key, pool) for pool in pools) if k]
            else:
                concrete.append(key)
        return concrete
