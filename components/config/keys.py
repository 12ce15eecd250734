"""Which stack key each configuration value came from, carried by the value itself.

`load_config` hands the program a StackConfig whose every string and number is tagged with its key path, in the
notation config errors use (`gpu-stack:nodePools[1].sharing.replicas`), and whether the stack file wrote it or its
default applies. A tagged value is its plain type in every other respect (`KeyedStr` is a `str`: equal, hashed
and serialised as the same text), so the program builds exactly what it built before; wherever it copies a value
into a Kubernetes object unchanged, the tag goes with it, and components/kit/sources.py reads it off the object's
fields. A value the program derives (an image reference joined from parts, a YAML document) is tagged by the
builder that derives it (`derived`, `text_of`). Booleans cannot be subclassed: a builder that turns a switch into
a field names its key (`key_of_field`).

Each config model's own key path is kept too (`path_of`), for what a whole block decides (a pool, a component).
"""

from __future__ import annotations

import json
import weakref
from typing import Any, Callable, Iterator, Mapping, Optional

import yaml
from pydantic import BaseModel, SecretStr

NAMESPACE = "gpu-stack"


class Keyed:
    """The tag: the key path, and whether the stack file wrote it (else its default applies)."""

    key: str
    written: bool


class KeyedStr(str, Keyed):
    pass


class KeyedInt(int, Keyed):
    pass


class KeyedFloat(float, Keyed):
    pass


class KeyedText(KeyedStr):
    """A document rendered to text (a ConfigMap's YAML or JSON) and the keys of the values inside it, by JSON pointer
    into the document (`/sharing/timeSlicing/resources/0/replicas`)."""

    inner: dict[str, tuple[str, bool]]


_TAGGED: dict[type, type] = {str: KeyedStr, int: KeyedInt, float: KeyedFloat}


def keyed(value: Any, key: str, written: bool = True) -> Any:
    """`value` tagged with `key`; a value that cannot carry a tag (None, a bool, a container) is returned as is."""
    exact = _TAGGED.get(type(value))
    if exact is not None:
        result = exact(value)
        result.key, result.written = key, written
        return result
    for plain, tagged in _TAGGED.items():
        if isinstance(value, plain) and not isinstance(value, bool):
            result = tagged(value)
            result.key, result.written = key, written
            return result
    return value


def plain(value: Any) -> Any:
    """The value without its tag."""
    for base in _TAGGED:
        if isinstance(value, Keyed) and isinstance(value, base):
            return base(value)
    return value


def key_of(value: Any) -> Optional[str]:
    return value.key if isinstance(value, Keyed) else None


def written(value: Any) -> bool:
    return isinstance(value, Keyed) and value.written


def derived(value: Any, *sources: Any) -> Any:
    """`value`, computed from `sources`, tagged with the key of the first source the stack file wrote, else of the
    first tagged one (an image reference: its version, else its name, else its repository)."""
    tagged = [s for s in sources if isinstance(s, Keyed)]
    chosen = next((s for s in tagged if s.written), tagged[0] if tagged else None)
    return keyed(value, chosen.key, chosen.written) if chosen is not None else value


def composed(text: str, **parts: Any) -> str:
    """`text` joined from named parts (an image reference from its repository, name and version): tagged as a whole
    as `derived` tags it, and with the key of each tagged part at `#/<part>` (a finding about the registry of an
    image lands on the key that set the registry)."""
    whole = derived(text, *parts.values())
    inner = {f"/{name}": (part.key, part.written) for name, part in parts.items() if isinstance(part, Keyed)}
    if not inner:
        return whole
    result = KeyedText(text)
    result.key, result.written, result.inner = whole.key, whole.written, inner
    return result


# --- the keys of models --------------------------------------------------------------------------------------

# id(model) -> (a weak reference to it, its key path, whether the stack file wrote it)
_PATHS: dict[int, tuple[weakref.ref, str, bool]] = {}


def _remember(model: BaseModel, path: str, was_written: bool) -> None:
    ident = id(model)
    _PATHS[ident] = (weakref.ref(model, lambda _, ident=ident: _PATHS.pop(ident, None)), path, was_written)


def path_of(model: BaseModel) -> Optional[str]:
    """The key path of a config block (`gpu-stack:nodePools[1]`), or None for a model load_config did not tag."""
    entry = _PATHS.get(id(model))
    return entry[1] if entry is not None and entry[0]() is model else None


def key_of_field(model: BaseModel, field: str) -> Optional[str]:
    """The key path of one field of a tagged block, by its Python name (`key_of_field(cfg.components, "dcgm")`)."""
    path = path_of(model)
    info = type(model).model_fields.get(field)
    if path is None or info is None:
        return None
    return f"{path}.{info.alias or field}"


def block_written(model: BaseModel) -> bool:
    """Whether the stack file wrote this block (a default block it left out is not written)."""
    entry = _PATHS.get(id(model))
    return entry is not None and entry[2]


def field_written(model: BaseModel, field: str) -> bool:
    entry = _PATHS.get(id(model))
    return entry is not None and entry[2] and field in model.model_fields_set


def flag(model: BaseModel, field: str) -> str:
    """A switch as the "true"/"false" an env var takes, tagged with the switch's key (a bool itself cannot be)."""
    text = "true" if getattr(model, field) else "false"
    key = key_of_field(model, field)
    return keyed(text, key, field_written(model, field)) if key is not None else text


def _join(prefix: str, part: str) -> str:
    return f"{prefix}{part}" if part.startswith("[") or prefix.endswith(":") else f"{prefix}.{part}"


def _tag(value: Any, path: str, was_written: bool, seen: set[int]) -> Any:
    if isinstance(value, BaseModel):
        if id(value) in seen:
            # one block in two places (a validator's shared default): each place gets its own copy and key
            value = value.model_copy()
        seen.add(id(value))
        _remember(value, path, was_written)
        for name, info in type(value).model_fields.items():
            current = value.__dict__.get(name)
            if current is None or isinstance(current, SecretStr):
                continue
            value.__dict__[name] = _tag(current, _join(path, info.alias or name), was_written and name in value.model_fields_set, seen)
        return value
    if isinstance(value, (list, tuple)):
        items = [_tag(item, f"{path}[{i}]", was_written, seen) for i, item in enumerate(value)]
        return type(value)(items) if type(value) in (list, tuple) else value
    if isinstance(value, dict) and type(value) is dict:
        return {k: _tag(v, _join(path, str(k)), was_written, seen) for k, v in value.items()}
    return keyed(value, path, was_written)


def tag_config(config: BaseModel) -> BaseModel:
    """Tag every string and number of a validated StackConfig, in place, with its key; returns it."""
    _remember(config, f"{NAMESPACE}:", True)
    seen: set[int] = {id(config)}
    for name, info in type(config).model_fields.items():
        current = config.__dict__.get(name)
        if current is not None and not isinstance(current, SecretStr):
            key = f"{NAMESPACE}:{info.alias or name}"
            config.__dict__[name] = _tag(current, key, name in config.model_fields_set, seen)
    return config


# --- documents rendered to text ------------------------------------------------------------------------------


def _escape(part: Any) -> str:
    return str(part).replace("~", "~0").replace("/", "~1")


def _untagged(value: Any, pointer: str, inner: dict[str, tuple[str, bool]]) -> Any:
    """A document with every tag taken off (a dumper writes plain values only) and noted in `inner`."""
    if isinstance(value, Keyed):
        inner[pointer] = (value.key, value.written)
        return plain(value)
    if isinstance(value, Mapping):
        return {plain(k): _untagged(v, f"{pointer}/{_escape(k)}", inner)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_untagged(v, f"{pointer}/{i}", inner) for i, v in enumerate(value)]
    return value


def text_of(document: Any, render: Callable[[Any], str]) -> str:
    """`render(document)` (yaml.safe_dump, json.dumps, ...) over the document with its tags taken off, tagged with
    where each tagged value sits in it; plain text when nothing in it is tagged."""
    inner: dict[str, tuple[str, bool]] = {}
    text = render(_untagged(document, "", inner))
    if not inner:
        return text
    result = KeyedText(text)
    result.inner = inner
    # the text as a whole: the first key the file wrote, else the first key in it
    result.key, result.written = next(((k, w) for k, w in inner.values() if w), next(iter(inner.values())))
    return result


def yaml_text(document: Any, **options: Any) -> str:
    return text_of(document, lambda plain: yaml.safe_dump(plain, **options))


def json_text(document: Any, **options: Any) -> str:
    return text_of(document, lambda plain: json.dumps(plain, **options))


def inner_keys(value: Any) -> Iterator[tuple[str, str, bool]]:
    """(JSON pointer into the document, key, written) for a text rendered by `text_of`."""
    if isinstance(value, KeyedText):
        for pointer, (key, was_written) in value.inner.items():
            yield pointer, key, was_written
