"""Which stack keys a plan's changes come from, for `gpustack diff` ("changes because `driver.extraVolumes` changed").

Each changed field of an object (every leaf that differs, and inside a ConfigMap's YAML or JSON document every
value that differs) is traced through the render's source map (gpustack/sourcemap.py): the new render's for what
it creates or updates, the old one's for what it deletes (a base rendered by a program too old to keep a source map
names none). A created or deleted object is traced to the key that decides it (its pool, its component's switch).
Of those keys, a change names the ones whose value differs between the two stack files: a field whose key kept its
value changed because the program did.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterator, Mapping, Optional

import yaml

from gpustack.changes import CREATE, DELETE, Change, Plan
from gpustack.mockrun import Recording, Registration
from gpustack.render import integral
from gpustack.sourcemap import SourceMap, escape, object_id

Config = Mapping[str, Any]  # a stack file's `config:` mapping, values as written


def _document(text: Any) -> Optional[Any]:
    """The YAML or JSON document a ConfigMap value holds, or None for plain text."""
    if not isinstance(text, str) or "\n" not in text:
        return None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    return document if isinstance(document, (dict, list)) else None


def changed_pointers(old: Any, new: Any, pointer: str = "") -> Iterator[str]:
    """The JSON pointer of every leaf that differs (a document inside a text after '#')."""
    if old == new:
        return
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in sorted(set(old) | set(new), key=str):
            yield from changed_pointers(old.get(key), new.get(key), f"{pointer}/{escape(key)}")
        return
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for index, (a, b) in enumerate(zip(old, new)):
            yield from changed_pointers(a, b, f"{pointer}/{index}")
        return
    before, after = _document(old), _document(new)
    if before is not None and after is not None and "#" not in pointer:
        inner = list(changed_pointers(before, after))
        yield from (f"{pointer}#{p}" for p in inner) if inner else (pointer,)
        return
    yield pointer


def _ident(registration: Registration) -> str:
    meta = registration.inputs.get("metadata") or {}
    return object_id(registration.inputs.get("kind"), meta.get("namespace"), meta.get("name"))


def _keys_of_field(sources: SourceMap, ident: str, pointer: str) -> list[str]:
    """The key that set a field, and the keys of its parts (an image's repository and version)."""
    found = [k for k in [sources.field_key(ident, pointer)] if k]
    found += [key for at, key in sources.fields(ident).items() if at.startswith(pointer + "#")]
    if not found:
        cause = sources.cause(ident, pointer)
        if cause is not None and not cause.decides:
            found.append(cause.key)
    return found


def keys_behind(change: Change, before: Recording, after: Recording) -> list[str]:
    """Every key a change's fields (or, created or deleted, the object) come from, in first-seen order."""
    side = before if change.action == DELETE else after
    registration = side.by_urn().get(change.urn)
    if registration is None or not registration.is_kubernetes_object:
        return []
    sources, ident = SourceMap(side.sources), _ident(registration)
    if change.action in (CREATE, DELETE):
        # what its fields come from, then what decides it (a pool added whole names only the pool)
        decider = sources.decider(ident)
        return list(dict.fromkeys([*sources.fields(ident).values(), *([decider] if decider else [])]))
    old = next((r for r in before.registrations if r.urn == change.urn or r.urn in registration.aliases), None)
    if old is None:
        return []
    found: list[str] = []
    for pointer in changed_pointers(integral(old.inputs), integral(registration.inputs)):
        found += _keys_of_field(sources, ident, pointer)
    return list(dict.fromkeys(found))


_PART = re.compile(r"\[(\d+)\]|\.?([^.\[]+)")


def value_at(config: Config, key: str) -> Any:
    """The value a stack file writes at a key path (`gpu-stack:nodePools[1].nodeSelector.node.kubernetes.io/x`);
    None where it writes nothing. A map key may hold dots: the longest key of the mapping that the path goes on
    with is the one meant."""
    top = re.match(r"[^.\[]+", key)
    if top is None or top.group() not in config:
        return None
    node: Any = config[top.group()]
    rest = key[top.end():]
    while rest:
        index = re.match(r"\[(\d+)\]", rest)
        if index:
            position = int(index.group(1))
            if not isinstance(node, list) or position >= len(node):
                return None
            node, rest = node[position], rest[index.end():]
            continue
        if not rest.startswith(".") or not isinstance(node, Mapping):
            return None
        rest = rest[1:]
        name = max((str(k) for k in node if rest == str(k) or rest.startswith((f"{k}.", f"{k}["))), key=len, default=None)
        if name is None:
            return None
        node, rest = node[name], rest[len(name):]
    return node


def _parsed(config: Config) -> dict[str, Any]:
    """A config as the loader reads a stack file's values (an object given as JSON text is that object)."""
    parsed = {}
    for key, value in config.items():
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                pass
        parsed[key] = value
    return parsed


def because(plan: Plan, before: Recording, after: Recording, before_config: Optional[Config],
            after_config: Optional[Config]) -> dict[str, list[str]]:
    """URN -> the keys whose new value its change comes from (every key behind it when the configs are unknown)."""
    old, new = (_parsed(before_config), _parsed(after_config)) if before_config is not None and after_config is not None else (None, None)
    result: dict[str, list[str]] = {}
    for change in plan.changes:
        keys = keys_behind(change, before, after)
        if old is not None and new is not None:
            keys = [k for k in keys if value_at(old, k) != value_at(new, k)]
        if keys:
            result[change.urn] = keys
    return result
