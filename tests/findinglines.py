"""Support for tests/test_finding_lines.py: editing a shipped stack file the way a reviewer would (ruamel keeps its
comments and layout), where a key sits in the edited text as an independent YAML parser sees it, and which schema
key (docs/stack.schema.json notation: `[]` for a list item, `{}` for a map entry) a concrete key path is."""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from stacktest import ROOT

STACK_SCHEMA = json.loads((ROOT / "docs" / "stack.schema.json").read_text())
NAMESPACE = "gpu-stack:"
Path_ = tuple[Any, ...]  # ("gpu-stack:driver", "extraVolumes", 0, "hostPath", "path")


def yaml() -> YAML:
    y = YAML()
    y.width = 4096
    return y


def load(text: str) -> CommentedMap:
    return yaml().load(text)


def dump(document: CommentedMap) -> str:
    out = io.StringIO()
    yaml().dump(document, out)
    return out.getvalue()


def key_path(path: Path_) -> str:
    """`gpu-stack:driver.extraVolumes[0].hostPath.path`, as config errors and the source map write keys."""
    text = str(path[0])
    for part in path[1:]:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def get(config: CommentedMap, path: Path_) -> Any:
    node: Any = config
    for part in path:
        if isinstance(part, int):
            if not isinstance(node, list) or part >= len(node):
                return None
        elif not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def put(config: CommentedMap, path: Path_, value: Any) -> Path_:
    """Set `path` to `value`, making the mappings on the way; returns the path."""
    node: Any = config
    for part, following in zip(path, path[1:]):
        if isinstance(part, int):
            node = node[part]
            continue
        if node.get(part) is None:
            node[part] = CommentedSeq() if isinstance(following, int) else CommentedMap()
        node = node[part]
    node[path[-1]] = value
    return path


def region(text: str, path: Path_) -> tuple[int, int, int, int]:
    """(startLine, startColumn, endLine, endColumn), 1-based and end-exclusive as SARIF counts, of the key at `path`
    (of the item, for a list item written as a scalar) in `text`, as ruamel's parser places it."""
    node: Any = load(text)["config"]
    for part in path[:-1]:
        node = node[part]
    last = path[-1]
    if isinstance(last, int):
        line, column = node.lc.item(last)
        written = str(node[last])
    else:
        line, column = node.lc.key(last)
        written = str(last)
    return line + 1, column + 1, line + 1, column + 1 + len(written)


# --- schema keys ---------------------------------------------------------------------------------------------


def _alternatives(node: dict) -> list[dict]:
    found = [node]
    for key in ("anyOf", "oneOf", "allOf"):
        for alternative in node.get(key, []):
            found += _alternatives(alternative)
    return found


def schema_key(key: str) -> Optional[str]:
    """The schema notation of a concrete key path (`gpu-stack:nodePools[].nodeSelector{}` for
    `gpu-stack:nodePools[1].nodeSelector.node.kubernetes.io/instance-type`), None when the schema has no such key."""
    match = re.match(r"(gpu-stack:[A-Za-z0-9]+)(.*)$", key)
    if match is None:
        return None
    top, rest = match.groups()
    node = STACK_SCHEMA["properties"]["config"]["properties"].get(top)
    if node is None:
        return None
    return _walk([node], rest, top)


def _walk(nodes: list[dict], rest: str, written: str) -> Optional[str]:
    if not rest:
        return written
    options = [alternative for node in nodes for alternative in _alternatives(node)]
    index = re.match(r"\[\d+\]", rest)
    if index:
        items = [o["items"] for o in options if isinstance(o.get("items"), dict)]
        return _walk(items, rest[index.end():], written + "[]") if items else None
    if not rest.startswith("."):
        return None
    rest = rest[1:]
    for option in options:
        for name, child in (option.get("properties") or {}).items():
            if rest == name or rest.startswith(name + ".") or rest.startswith(name + "["):
                found = _walk([child], rest[len(name):], f"{written}.{name}")
                if found is not None:
                    return found
    maps = [o["additionalProperties"] for o in options if isinstance(o.get("additionalProperties"), dict)]
    if maps:
        scalar = all(not any(a.get("properties") or a.get("additionalProperties") or a.get("items") for a in _alternatives(m))
                     for m in maps)
        # a map of scalars: the rest is one map key (label keys hold dots); else the key ends at the next '.'
        cut = len(rest) if scalar else next((i for i, c in enumerate(rest) if c in ".["), len(rest))
        return _walk(maps, rest[cut:], written + "{}")
    return None


# --- edits ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Edit:
    """One reviewer's edit of one key that makes `rule` fail. `make` edits a stack's `config:` mapping (given the
    stack's loaded StackConfig) and returns the path of the key it wrote, or None when the key does not apply."""

    key: str  # docs/stack.schema.json notation
    rule: str
    make: Callable[[CommentedMap, Any], Optional[Path_]]
    why: str = ""

    @property
    def id(self) -> str:
        return self.key[len(NAMESPACE):]


def pools_where(cfg: Any, test: Callable[[Any], bool]) -> list[int]:
    return [i for i, pool in enumerate(cfg.node_pools) if test(pool)]


def first(indices: Sequence[int]) -> Optional[int]:
    return indices[0] if indices else None
