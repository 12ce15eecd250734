"""The render's record of which stack key set each field of each Kubernetes object: the source map.

While GpuStack builds the stack, `record` (a resource transformation on GpuStack, so on every resource below it)
reads each object's inputs as they are about to be registered and notes, for every field whose value carries a key
(components/config/keys.py), the field's JSON pointer and the key: a value copied from the config keeps its tag,
and a builder that derives a value tags it (`derived`, `yaml_text`, `json_text`), so nothing here is a table kept
in step with the builders. A document rendered to text (a ConfigMap's YAML or JSON) records the keys of the values
inside it too, after a `#` (`/data/node-pools.json#/pools/1/nodeSelector`).

Whatever builds objects for one pool, component or state says which key decides them (`deciding`): a field no key
sets is traced to that key instead. Recording changes nothing the engine sees: the transformation returns no
change, and tagged values serialise as the plain ones they are.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Optional

import pulumi
from pulumi import _types as pulumi_types
from pydantic import BaseModel

from components.config.keys import Keyed, block_written, field_written, inner_keys, key_of_field, path_of

# A field's source: (key, whether the stack file wrote it).
Source = tuple[str, bool]
# Not a field: what decides an object's place in the apply order (its upgrade wave). The policy pack reports a
# violation about the order at this name (policies/gpu_stack_policies/fields.py DEPENDENCIES, a test holds them equal).
DEPENDENCIES = "@dependencies"
# Not a field either: whether a pod's token is kept to its node by admission, which the declared Kubernetes versions
# decide (components/states/node_write_policy.py; policies/gpu_stack_policies/fields.py NODE_BOUND, held equal too).
NODE_BOUND = "@node-bound"


def escape(part: Any) -> str:
    return str(part).replace("~", "~0").replace("/", "~1")


def object_id(kind: Any, namespace: Any, name: Any) -> str:
    """How the source map names an object: `DaemonSet/gpu-operator/nvidia-driver-daemonset` (`ClusterRole//x`)."""
    return f"{kind}/{namespace or ''}/{name}"


@dataclass
class SourceMap:
    """object id -> {JSON pointer of a field -> its source}, and object id -> the key that decides the object."""

    fields: dict[str, dict[str, Source]] = field(default_factory=dict)
    deciders: dict[str, Source] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "objects": {
                ident: {
                    **({"decidedBy": {"key": self.deciders[ident][0], "written": self.deciders[ident][1]}}
                       if ident in self.deciders else {}),
                    "fields": {pointer: {"key": key, "written": was} for pointer, (key, was) in sorted(fields.items())},
                }
                for ident, fields in sorted(self.fields.items())
            }
        }


_current: Optional[SourceMap] = None
# The keys deciding what is being built, innermost last; a scope whose builder has not said yet holds None.
_deciding: list[Optional[Source]] = []
# What decides more than the fields of the objects being built (DEPENDENCIES), innermost last.
_noted: list[tuple[str, Source]] = []


def start() -> SourceMap:
    """A fresh source map for the stack about to be built; `current()` returns it until the next start."""
    global _current
    _current = SourceMap()
    _deciding.clear()
    _noted.clear()
    return _current


def current() -> Optional[SourceMap]:
    return _current


def _source(model: Optional[BaseModel], field_name: Optional[str]) -> Optional[Source]:
    if model is None:
        return None
    key = key_of_field(model, field_name) if field_name else path_of(model)
    if key is None:
        return None
    return key, field_written(model, field_name) if field_name else block_written(model)


@contextlib.contextmanager
def scope() -> Iterator[None]:
    """What is built inside is decided by whatever its builder names with `decided_by` (nothing, until it does)."""
    _deciding.append(None)
    try:
        yield
    finally:
        _deciding.pop()


def decided_by(model: BaseModel, field_name: Optional[str] = None) -> None:
    """The innermost scope's objects are decided by this block (a pool) or this field of it (a component switch);
    the first one named wins."""
    if _deciding and _deciding[-1] is None:
        _deciding[-1] = _source(model, field_name)


def decides(model: BaseModel, field_name: str) -> Any:
    """A switch read as `decided_by` names it: `if not decides(cfg.components, "dcgm"): return None`."""
    decided_by(model, field_name)
    return getattr(model, field_name)


@contextlib.contextmanager
def deciding(model: Optional[BaseModel], field_name: Optional[str] = None) -> Iterator[None]:
    """Objects built inside are decided by this block (a pool) or this field of it (nothing new for None)."""
    _deciding.append(_source(model, field_name))
    try:
        yield
    finally:
        _deciding.pop()


@contextlib.contextmanager
def noting(name: str, model: Optional[BaseModel], field_name: Optional[str] = None) -> Iterator[None]:
    """Objects built inside have `name` (DEPENDENCIES) decided by this block or field (nothing for None)."""
    source = _source(model, field_name)
    if source is not None:
        _noted.append((name, source))
    try:
        yield
    finally:
        if source is not None:
            _noted.pop()


def _decider() -> Optional[Source]:
    return next((source for source in reversed(_deciding) if source is not None), None)


_CAMEL = re.compile(r"_([a-z])")


def _camel(name: str) -> str:
    return _CAMEL.sub(lambda m: m.group(1).upper(), name)


def _walk(value: Any, pointer: str, into: dict[str, Source]) -> None:
    if isinstance(value, Keyed):
        into[pointer] = (value.key, value.written)
        for inner, key, was in inner_keys(value):
            into[f"{pointer}#{inner}"] = (key, was)
        return
    if isinstance(value, (pulumi.Output, pulumi.Resource)) or value is None:
        return
    if pulumi_types.is_input_type(type(value)):
        value = pulumi_types.input_type_to_dict(value)
    if isinstance(value, Mapping):
        for key, item in value.items():
            _walk(item, f"{pointer}/{escape(key)}", into)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _walk(item, f"{pointer}/{index}", into)


def noting_on(kind: str, name: str, model: BaseModel, field_name: str) -> Callable[[pulumi.ResourceTransformationArgs], None]:
    """A transformation that notes `name` on every object of `kind` as decided by this field; after `record`."""
    source = _source(model, field_name)

    def note(args: pulumi.ResourceTransformationArgs) -> None:
        if _current is None or source is None or args.type_.rsplit(":", 1)[-1] != kind or not isinstance(args.props, Mapping):
            return None
        metadata = args.props.get("metadata")
        if pulumi_types.is_input_type(type(metadata)):
            metadata = pulumi_types.input_type_to_dict(metadata)
        metadata = metadata if isinstance(metadata, Mapping) else {}
        ident = object_id(kind, metadata.get("namespace"), metadata.get("name") or args.name)
        _current.fields.setdefault(ident, {})[name] = source
        return None

    return note


def record(args: pulumi.ResourceTransformationArgs) -> None:
    """The transformation: note the sources of a Kubernetes object's fields; the resource itself is left as it is."""
    if _current is None or not args.type_.startswith("kubernetes:") or not isinstance(args.props, Mapping):
        return None
    props = args.props
    metadata = props.get("metadata")
    if pulumi_types.is_input_type(type(metadata)):
        metadata = pulumi_types.input_type_to_dict(metadata)
    metadata = metadata if isinstance(metadata, Mapping) else {}
    kind = props.get("kind") or args.type_.rsplit(":", 1)[-1]
    ident = object_id(kind, metadata.get("namespace"), metadata.get("name") or args.name)
    fields: dict[str, Source] = {}
    for name, value in props.items():
        _walk(value, f"/{escape(_camel(name))}", fields)
    fields.update(dict(_noted))
    _current.fields[ident] = fields
    decider = _decider()
    if decider is not None:
        _current.deciders[ident] = decider
    return None
