"""The shapes an import input's fields must have, checked before any mapping reads them: a malformed ClusterPolicy,
Helm values file, ConfigMap or node dump is refused with an ImportInputError naming the input and the field path
(`spec.driver.repository: expected a string, got list`), never met later as an AttributeError or TypeError.

A field is one of the kinds below, after the CRD's Go types (GO:api/nvidia/v1/clusterpolicy_types.go) and the core
API's (ObjectMeta, ConfigMap, Node): what the API server would have refused is what the import refuses. A missing
field or a YAML null is unset, as the operator reads it. The message names the type found, never the value: a
wrong-typed field may hold anything (a credential, a 10 MB blob).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from components.config.base import SHOWN_MAX
from gpustack.importer.common import ImportInputError, shown_input

# An IntOrString budget as intstr.Parse and the operator read it: a count or a percentage (bounded digits, so that
# int() never meets a 10,000-digit string).
INT_OR_PERCENT = re.compile(r"[0-9]{1,9}%?")


def type_name(value: Any) -> str:
    """A value's type as a YAML reader names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, (list, tuple)):
        return "list"
    return type(value).__name__


def _wrong(path: str, expected: str, value: Any) -> ImportInputError:
    return ImportInputError(f"{path}: expected {expected}, got {type_name(value)}")


@dataclass(frozen=True)
class Kind:
    """One field type: `what` for the message, `check` raising ImportInputError naming the path (and the item)."""

    what: str
    check: Callable[[Any, str], None]

    def __call__(self, value: Any, path: str) -> None:
        if value is not None:
            self.check(value, path)


def _scalar(types: tuple[type, ...], what: str) -> Kind:
    def check(value: Any, path: str) -> None:
        # bool is an int in Python, never in YAML's or Go's eyes.
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise _wrong(path, what, value)
    return Kind(what, check)


STRING = _scalar((str,), "a string")
INTEGER = _scalar((int,), "an integer")


def _boolean(value: Any, path: str) -> None:
    if isinstance(value, bool):
        return
    if isinstance(value, (str, int, float)):
        # A scalar such as 'yes' or 1 is the common slip: say which one, as an enum's error does.
        raise ImportInputError(f"{path}: got {shown_input(value)}; allowed values: true, false")
    raise _wrong(path, "true or false", value)


BOOLEAN = Kind("true or false", _boolean)


def _mapping(value: Any, path: str) -> None:
    if not isinstance(value, dict):
        raise _wrong(path, "a mapping", value)
    for key in value:
        if not isinstance(key, str):
            raise ImportInputError(f"{path}: keys must be strings, found a key of type {type_name(key)}")


MAPPING = Kind("a mapping", _mapping)


def _int_or_percent(value: Any, path: str) -> None:
    if isinstance(value, int) and not isinstance(value, bool):
        return
    if not isinstance(value, str):
        raise _wrong(path, "an integer or a percentage such as 25%", value)
    if not INT_OR_PERCENT.fullmatch(value):
        raise ImportInputError(f"{path}: expected an integer or a percentage such as 25%, got {shown_input(value)}")


INT_OR_PERCENT_KIND = Kind("an integer or a percentage", _int_or_percent)


def _string_map(value: Any, path: str) -> None:
    _mapping(value, path)
    for key, inner in value.items():
        if not isinstance(inner, str):
            # A key is input too: cut like any echoed value.
            shown_key = key if len(key) <= SHOWN_MAX else f"{key[: SHOWN_MAX - 1]}\u2026"
            raise _wrong(f"{path}.{shown_key}", "a string", inner)


STRING_MAP = Kind("a mapping of strings to strings", _string_map)


def list_of(item: Kind, what: str) -> Kind:
    def check(value: Any, path: str) -> None:
        if not isinstance(value, list):
            raise _wrong(path, what, value)
        for i, inner in enumerate(value):
            if inner is None:
                raise _wrong(f"{path}[{i}]", item.what, inner)
            item(inner, f"{path}[{i}]")
    return Kind(what, check)


def fields_of(fields: Mapping[str, Kind], what: str, required: tuple[str, ...] = ()) -> Kind:
    """A mapping whose named fields have these kinds (others are left to the report)."""
    def check(value: Any, path: str) -> None:
        _mapping(value, path)
        for name in required:
            if value.get(name) is None:
                raise ImportInputError(f"{path}: {what} without `{name}`")
        for name, kind in fields.items():
            kind(value.get(name), f"{path}.{name}")
    return Kind(what, check)


STRING_LIST = list_of(STRING, "a list of strings")
ANY_LIST = _scalar((list,), "a list")
# The ClusterPolicy's EnvVar is {name, value}, both strings (no valueFrom).
ENV_LIST = list_of(fields_of({"name": STRING, "value": STRING}, "an env entry {name, value}", required=("name",)),
                   "a list of {name, value}")
# prometheus-operator's RelabelConfig, the type of the ClusterPolicy's serviceMonitor.relabelings entries.
RELABEL_FIELDS = {"sourceLabels": STRING_LIST, "separator": STRING, "targetLabel": STRING, "regex": STRING, "modulus": INTEGER,
                  "replacement": STRING, "action": STRING}
RELABELINGS = list_of(fields_of(RELABEL_FIELDS, "a relabel config"), "a list of relabel configs")
TOLERATIONS = list_of(fields_of({"key": STRING, "operator": STRING, "value": STRING, "effect": STRING,
                                 "tolerationSeconds": INTEGER}, "a toleration"), "a list of tolerations")


def check_fields(data: Any, table: Mapping[str, Kind], prefix: str) -> None:
    """Each dotted path of `table` that `data` holds has its kind, and every mapping on the way is a mapping."""
    for path, kind in table.items():
        node: Any = data
        walked = prefix.rstrip(".")
        for part in path.split("."):
            if node is None:
                break
            _mapping(node, walked)
            node = node.get(part)
            walked = f"{walked}.{part}" if walked else part
        else:
            kind(node, walked)


def check_input(data: Any, table: Mapping[str, Kind], where: str, at: str = "") -> None:
    """check_fields on one input object, its errors naming the input (`where`: the file) and the path from `at`
    (`items[3]` for an object of a List)."""
    try:
        check_fields(data, table, at)
    except ImportInputError as exc:
        raise ImportInputError(f"{where}: {exc}") from None


def item_path(obj: Any, document: Any, index: int) -> str:
    """Where an object of a `kubectl get -o yaml` document is: `items[N]` in a List, nothing for the document itself."""
    return "" if obj is document else f"items[{index}]"


def _string_or_strings(value: Any, path: str) -> None:
    if not isinstance(value, str):
        STRING_LIST(value, path)


STRING_OR_STRINGS = Kind("a string or a list of strings", _string_or_strings)
