"""Reading the render's source map (components/kit/sources.py): which stack key set a field of an object, for
every finding, SARIF result and diff line that points at a key.

`cause(object, pointer)` answers, most specific first:
1. the key of the field itself (a part of it after `#`: `image#/repository`), or of the document inside a text;
2. for a field holding several (a whole volume, a node selector, a container's env), the block of the config they
   all come from, where the rendered fields mirror the config's (`volumes/9/hostPath/path` from
   `driver.extraVolumes[0].hostPath.path`: the volume is `driver.extraVolumes[0]`), else the keys' common block;
3. the key of the nearest field above it (the text a document was rendered to);
4. the key that decides the object (its pool, its component's switch), marked `decides`: no key sets the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional

NAMESPACE_PREFIX = "gpu-stack:"
_API_PATH_PART = re.compile(r"\[([^\]]*)\]|\.?([^.\[]+)")


@dataclass(frozen=True)
class Cause:
    """The stack key behind a field; `decides`: no key sets the field, and this key decides its object."""

    key: str
    decides: bool = False


def escape(part: Any) -> str:
    return str(part).replace("~", "~0").replace("/", "~1")


def unescape(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")


def object_id(kind: Any, namespace: Any, name: Any) -> str:
    """As components/kit/sources.py names objects."""
    return f"{kind}/{namespace or ''}/{name}"


def pointer_of_path(path: Iterable[Any]) -> str:
    """A JSON pointer from a list of keys and indices (jsonschema's absolute_path)."""
    return "".join(f"/{escape(part)}" for part in path)


def pointer_of_api_path(path: str) -> str:
    """A JSON pointer from the API server rules' paths: `spec.template.spec.containers[0].env[1].name`,
    `data[node-pools.json]` (a map key in brackets)."""
    return "".join(f"/{escape(bracket if bracket is not None and bracket != '' else name)}"
                   for bracket, name in _API_PATH_PART.findall(path))


def _segments(pointer: str) -> list[str]:
    return [unescape(p) for p in pointer.split("/")[1:]] if pointer else []


def _strip_mirrored(key: str, relative: list[str]) -> str:
    """`key` less the trailing parts that mirror `relative` (the field's path below the one asked about)."""
    for part in reversed(relative):
        for suffix in (f"[{part}]", f".{part}"):
            if key.endswith(suffix) and len(key) > len(suffix):
                key = key[: -len(suffix)]
                break
        else:
            break
    return key


def _common_block(keys: list[str]) -> Optional[str]:
    """The longest key every one of `keys` is, or is below; None when that is the namespace alone."""
    first = keys[0]
    length = min(len(k) for k in keys)
    end = next((i for i in range(length) if any(k[i] != first[i] for k in keys)), length)
    common = first[:end]
    if not all(k == common or k[len(common)] in ".[" for k in keys):
        cut = max(common.rfind("."), common.rfind("["))
        common = common[:cut] if cut > 0 else ""
    return common if len(common) > len(NAMESPACE_PREFIX) and common.startswith(NAMESPACE_PREFIX) else None


class SourceMap:
    """One render's source map, as Recording.sources carries it (None: the program kept none)."""

    def __init__(self, data: Optional[Mapping[str, Any]]):
        self._objects: Mapping[str, Any] = (data or {}).get("objects") or {}

    def __bool__(self) -> bool:
        return bool(self._objects)

    def fields(self, ident: str) -> dict[str, str]:
        entry = self._objects.get(ident) or {}
        return {pointer: source["key"] for pointer, source in (entry.get("fields") or {}).items()}

    def decider(self, ident: str) -> Optional[str]:
        decided = (self._objects.get(ident) or {}).get("decidedBy")
        return decided["key"] if decided else None

    def field_key(self, ident: str, pointer: str) -> Optional[str]:
        """The key of the field at `pointer` or, for a field holding several, of the block they come from."""
        fields = self.fields(ident)
        if pointer in fields:
            return fields[pointer]
        below = [(p, k) for p, k in fields.items() if p.startswith(pointer + "/") or p.startswith(pointer + "#")]
        if below:
            keys = [_strip_mirrored(k, _segments(p[len(pointer):].replace("#", "", 1))) for p, k in below]
            return keys[0] if len(set(keys)) == 1 else _common_block(keys)
        return None

    def cause(self, ident: str, pointer: str) -> Optional[Cause]:
        fields = self.fields(ident)
        base, hash_, inner = pointer.partition("#")
        found = self.field_key(ident, pointer) if pointer else None
        if found is None and hash_:
            # up the document inside the text, then the text itself
            parts = inner.split("/")
            for cut in range(len(parts) - 1, 0, -1):
                found = fields.get(f"{base}#{'/'.join(parts[:cut])}")
                if found is not None:
                    break
        candidate = base
        while found is None and candidate:
            found = fields.get(candidate)
            candidate = candidate.rpartition("/")[0]
        if found is not None:
            return Cause(found)
        decider = self.decider(ident)
        return Cause(decider, decides=True) if decider else None
