"""Hypothesis support for tests/test_properties.py: settings profiles, strategies that build stack configs from the
stack-file JSON Schema and by mutating the real stacks and the import fixtures, and the checks every outcome must
pass (a clean ConfigError naming a `gpu-stack:` key, or a render the API server would take).

CI runs the "ci" profile: derandomized, a fixed number of examples, no example database, so `make test` sees the
same inputs every time. GPUSTACK_HYPOTHESIS_EXAMPLES=<n> runs the "explore" profile: n random examples a property."""

from __future__ import annotations

import copy
import functools
import json
import math
import os
import re
from typing import Any, Iterator

import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from components.config import ConfigError
from gpustack.stack_schema import stack_file_schema
from stacktest import ROOT, STACKS, stack_config

EXAMPLES_ENV = "GPUSTACK_HYPOTHESIS_EXAMPLES"
CI_EXAMPLES = 50
# The strategies build large nested values; their generation time is not a property of gpu-stack.
_SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]

settings.register_profile("ci", derandomize=True, max_examples=CI_EXAMPLES, deadline=None, database=None,
                          print_blob=False, suppress_health_check=_SLOW)
_explore = int(os.environ.get(EXAMPLES_ENV) or 0)
settings.register_profile("explore", max_examples=max(_explore, 1), deadline=None, database=None,
                          suppress_health_check=_SLOW)
settings.load_profile("explore" if _explore else "ci")


def examples(ci: int) -> int:
    """The examples of a property whose example costs more than a config load (a render, an import): `ci` in CI,
    and a tenth of GPUSTACK_HYPOTHESIS_EXAMPLES (at least `ci`) when exploring."""
    return max(ci, _explore // 10) if _explore else ci


# --- what every outcome must satisfy -----------------------------------------------------------------------------

# An error line's bound: a problem's message quotes values cut to 80 characters, but an unknown-key line quotes
# the cut key twice (path and message) next to the allowed keys, so ~400 characters is what a clean line takes.
MAX_LINE = 500
# A value this long never appears whole in an error: it is cut (to 80 characters and its length) or not shown.
ECHO_LONGEST = 100
PREFIX = "gpu-stack:"
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def strings_in(value: Any) -> Iterator[str]:
    """Every string key and value under a value."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from strings_in(key)
            yield from strings_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)
    elif isinstance(value, str):
        yield value


def assert_clean_error(exc: ConfigError, *secrets: str, inputs: Any = None) -> None:
    """A refusal a user can act on: every problem names a `gpu-stack:` key, no line runs on, no long input value
    is echoed whole, no secret shows."""
    assert exc.problems, "a ConfigError without problems"
    for path, message in exc.problems:
        assert isinstance(path, str) and path.startswith(PREFIX), f"problem not naming a {PREFIX} key: {path!r}"
        assert isinstance(message, str) and message.strip(), f"{path}: empty message"
    text = str(exc)
    for line in text.splitlines():
        assert len(line) <= MAX_LINE, f"error line of {len(line)} characters: {line[:120]}..."
    for value in set(strings_in(inputs)):
        if len(value) > ECHO_LONGEST:
            assert value not in text and repr(value) not in text, f"a {len(value)}-character value echoed whole"
    for secret in secrets:
        assert secret not in text, f"secret marker {secret!r} echoed in: {text[:300]}"


def name_problems(obj: dict[str, Any]) -> list[str]:
    """Object and namespace names as the API server takes them (DNS-1123 subdomain / label, with lengths)."""
    meta = obj.get("metadata") or {}
    where = f"{obj.get('kind')}/{meta.get('name')!r}"
    problems = []
    name = meta.get("name")
    if not isinstance(name, str) or not DNS_SUBDOMAIN.fullmatch(name) or len(name) > 253:
        problems.append(f"{where}: name is not a DNS-1123 subdomain")
    namespace = meta.get("namespace")
    if namespace is not None and (not isinstance(namespace, str) or not DNS_LABEL.fullmatch(namespace) or len(namespace) > 63):
        problems.append(f"{where}: namespace {namespace!r} is not a DNS-1123 label")
    return problems


# --- strategies from the stack-file JSON Schema (generated from the config models) -------------------------------

TEXT_MAX = 24
ITEMS_MAX = 3
INT_SPAN = 10**6


@functools.lru_cache(maxsize=1)
def config_schema() -> dict[str, dict[str, Any]]:
    """The `gpu-stack:<section>` schemas, freshly generated from the models (the committed file may lag)."""
    return stack_file_schema()["properties"]["config"]["properties"]


SECRET_SECTIONS = ("gpu-stack:registryPassword",)


def sections() -> list[str]:
    return [name for name in config_schema() if name.startswith(PREFIX) and name not in SECRET_SECTIONS]


def _string(node: dict[str, Any]) -> st.SearchStrategy[str]:
    low, high = node.get("minLength", 0), node.get("maxLength")
    if "pattern" in node:
        strategy = st.from_regex(node["pattern"], fullmatch=True)
        if low or high is not None:
            strategy = strategy.filter(lambda s: low <= len(s) <= (high if high is not None else len(s)))
    else:
        strategy = st.text(min_size=low, max_size=max(low, min(high or TEXT_MAX, TEXT_MAX)))
    if "not" in node:
        refused = node["not"]
        if "pattern" in refused:
            strategy = strategy.filter(lambda s: not re.search(refused["pattern"], s))
        if "const" in refused:
            strategy = strategy.filter(lambda s: s != refused["const"])
    return strategy


def _number(node: dict[str, Any], integral: bool) -> st.SearchStrategy[Any]:
    low = node.get("minimum", node["exclusiveMinimum"] + 1 if "exclusiveMinimum" in node else None)
    high = node.get("maximum", node["exclusiveMaximum"] - 1 if "exclusiveMaximum" in node else None)
    if low is None:
        low = min(-10, high if high is not None else 0)
    if high is None:
        high = low + INT_SPAN
    if integral:
        return st.integers(math.ceil(low), math.floor(high))
    return st.floats(low, high, allow_nan=False, allow_infinity=False)


def _object(node: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    properties = node.get("properties") or {}
    required = set(node.get("required") or ())
    fixed = st.fixed_dictionaries(
        {k: from_schema(v) for k, v in properties.items() if k in required},
        optional={k: from_schema(v) for k, v in properties.items() if k not in required},
    )
    extra = node.get("additionalProperties")
    if properties or not isinstance(extra, dict):
        return fixed
    names = node.get("propertyNames") or {}
    keys = _string({**names, "type": "string"}) if names else st.text(min_size=1, max_size=TEXT_MAX)
    return st.dictionaries(keys, from_schema(extra), max_size=ITEMS_MAX)


def from_schema(node: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values the JSON Schema node allows (Python's reading of its patterns: `\\d` takes any Unicode digit)."""
    if "const" in node:
        return st.just(node["const"])
    if "enum" in node:
        return st.sampled_from(node["enum"])
    for key in ("anyOf", "oneOf"):
        if key in node:
            rest = {k: v for k, v in node.items() if k not in (key, "default", "description")}
            return st.one_of([from_schema({**rest, **branch}) for branch in node[key]])
    kind = node.get("type")
    if isinstance(kind, list):
        return st.one_of([from_schema({**node, "type": k}) for k in kind])
    if kind == "string" or (kind is None and "pattern" in node):
        return _string(node)
    if kind in ("integer", "number"):
        return _number(node, kind == "integer")
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        low = node.get("minItems", 0)
        high = min(node.get("maxItems", low + ITEMS_MAX), low + ITEMS_MAX)
        return st.lists(from_schema(node.get("items") or {}), min_size=low, max_size=high)
    if kind == "object" or "properties" in node or "additionalProperties" in node:
        return _object(node)
    return json_values()


@functools.lru_cache(maxsize=None)
def section_values(section: str) -> st.SearchStrategy[Any]:
    return from_schema(config_schema()[section])


@st.composite
def section_edits(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """(stack, its config with one to three sections replaced by values generated from their schema, or dropped)."""
    stack = draw(st.sampled_from(STACKS))
    config = stack_config(stack)
    for section in draw(st.lists(st.sampled_from(sections()), min_size=1, max_size=3, unique=True)):
        if draw(st.integers(0, 9)) == 0:
            config.pop(section, None)
        else:
            config[section] = draw(section_values(section))
    return stack, config


def schema_configs() -> st.SearchStrategy[dict[str, Any]]:
    return section_edits().map(lambda edit: edit[1])


@st.composite
def generated_configs(draw: st.DrawFn) -> dict[str, Any]:
    """Every section generated from the schema, each optional one present or not."""
    required = set(stack_file_schema()["properties"]["config"].get("required") or ())
    config = {}
    for section in sections():
        if section in required or draw(st.booleans()):
            config[section] = draw(section_values(section))
    return config


# --- hostile values and mutations --------------------------------------------------------------------------------


def json_values() -> st.SearchStrategy[Any]:
    scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=TEXT_MAX)
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)


def _nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"a": [value]}
    return value


# What a careless or hostile stack file holds where a value belongs (issue 17's list).
HOSTILE = [
    "gpu\n", "name\n", "\nname", "a" * 300, "ü-名前-🚀", "bad\x00nul", "bell\x07", "\u202eevil", "\ud7ff", "",
    " ", "  padded  ", "UPPER", "-leading", "trailing-", "a..b", "1", "0", "-1", "50%", "101%", "0%", "1.5",
    "1e3", "0x1F", "0o17", "yes", "no", "on", "off", "y", "n", "true", "false", "null", "~", "NaN", ".inf",
    "2024-01-01", "12:30:00", "!!binary aGk=", "!!python/object:os.system", "&anchor", "*alias", "{a: 1}",
    "[1, 2]", "key: value", "a,b", 'quote"d', "${HOME}", "$(id)", "../../etc/passwd", "/", "//", "C:\\x",
    "image:latest", "nvcr.io/nvidia/x@sha256:abc", "@sha256:" + "0" * 64, "x" * 10_000,
    10**30, -(10**18), 2**63, -1, 0, 1.5, -0.0, float("nan"), float("inf"), float("-inf"), True, False, None,
    [], {}, [None], {"": None}, ["a"] * 200, _nested(60),
]


def hostile_values() -> st.SearchStrategy[Any]:
    # A copy: a later edit of the same document must not change HOSTILE itself.
    return st.sampled_from(HOSTILE).map(copy.deepcopy) | st.text(max_size=40) | st.integers() | json_values()


def _swap_type(value: Any) -> list[Any]:
    """The same value as other JSON types: what a quoting mistake or a wrong indentation does."""
    if isinstance(value, bool):
        return ["true" if value else "false", int(value), [value]]
    if isinstance(value, (int, float)):
        return [str(value), [value], {"value": value}, bool(value)]
    if isinstance(value, str):
        return [[value], {value: value}, len(value), value == "true"]
    if isinstance(value, list):
        return [{str(i): v for i, v in enumerate(value)}, json.dumps(value), value[0] if value else None]
    if isinstance(value, dict):
        return [list(value.values()), json.dumps(value), list(value)]
    return ["", 0, [], {}]


def positions(node: Any, path: tuple = ()) -> Iterator[tuple]:
    """Paths to every value inside a mapping/list tree (the root excluded)."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        yield (*path, key)
        yield from positions(value, (*path, key))


def parent_of(root: Any, path: tuple) -> Any:
    for key in path[:-1]:
        root = root[key]
    return root


@st.composite
def mutations(draw: st.DrawFn, document: Any, keep: tuple = ()) -> Any:
    """`document` with one to three edits: a key dropped, a value replaced by a hostile one or by itself as
    another type, an unknown key added. Paths starting with one of `keep` are left alone."""
    document = copy.deepcopy(document)
    for _ in range(draw(st.integers(1, 3))):
        editable = [p for p in positions(document) if not any(p[: len(k)] == k for k in keep)]
        if not editable:
            break
        path = draw(st.sampled_from(editable))
        parent, key = parent_of(document, path), path[-1]
        action = draw(st.sampled_from(("drop", "hostile", "hostile", "swap", "unknown")))
        if action == "drop":
            del parent[key]
        elif action == "hostile":
            parent[key] = draw(hostile_values())
        elif action == "swap":
            parent[key] = copy.deepcopy(draw(st.sampled_from(_swap_type(parent[key]))))
        elif isinstance(parent[key], dict):
            parent[key][draw(st.sampled_from(("unknownKey", "Name", "name ", "", "ña", "x" * 300)))] = draw(hostile_values())
        else:
            parent[key] = draw(hostile_values())
    return document


@st.composite
def mutated_configs(draw: st.DrawFn) -> dict[str, Any]:
    """A real stack's `config:` with a few hostile edits (top-level keys stay in the `gpu-stack:` namespace)."""
    config = draw(mutations(stack_config(draw(st.sampled_from(STACKS)))))
    return {k if isinstance(k, str) and k.startswith(PREFIX) else f"{PREFIX}{k}": v for k, v in config.items()}


# --- import inputs -----------------------------------------------------------------------------------------------

FIXTURES = ROOT / "tests" / "fixtures" / "clusterpolicy"


@functools.lru_cache(maxsize=1)
def policy_seeds() -> list[tuple[str, Any]]:
    """The fixture documents that hold a ClusterPolicy (the others are nodes, ConfigMaps, Helm values)."""
    seeds = []
    for path in sorted(FIXTURES.glob("*.yaml")):
        document = yaml.safe_load(path.read_text())
        if isinstance(document, dict) and document.get("kind") == "ClusterPolicy":
            seeds.append((path.name, document))
    return seeds


@st.composite
def policy_documents(draw: st.DrawFn) -> tuple[str, Any]:
    name, document = draw(st.sampled_from(policy_seeds()))
    # Most edits go into the spec, which is what the importer reads field by field.
    keep = () if draw(st.integers(0, 4)) == 0 else (("apiVersion",), ("kind",), ("status",))
    return name, draw(mutations(document, keep=keep))


@functools.lru_cache(maxsize=None)
def _fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text()


def fixture_document(name: str) -> Any:
    """A fresh parse of a fixture: a test may edit it."""
    return yaml.safe_load(_fixture_text(name))


@st.composite
def side_inputs(draw: st.DrawFn) -> dict[str, Any]:
    """The mig-mixed import's nodes, ConfigMaps and (for the minimal policy) Helm values, one or more mutated."""
    inputs = {"nodes": fixture_document("nodes-mig.yaml"), "configmaps": fixture_document("configmaps-mig.yaml"),
              "helm": fixture_document("helm-values.yaml")}
    for name in draw(st.lists(st.sampled_from(sorted(inputs)), min_size=1, max_size=3, unique=True)):
        inputs[name] = draw(mutations(inputs[name]))
    return inputs


def secret_marker() -> st.SearchStrategy[str]:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    return st.text(alphabet, min_size=10, max_size=10).map(lambda s: f"SECRETMARK{s}")
