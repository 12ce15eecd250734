"""The one guarded door for every file gpu-stack reads: stack files, node_images/catalog.yaml, import inputs
(ClusterPolicy, Helm values, nodes, ConfigMaps and the YAML inside their data), policy pack configs.

Bytes first: a size limit per kind of file (named in the error), UTF-8 (a leading byte-order mark, which editors on
Windows write, is dropped) and no control characters. Then YAML through `GuardedLoader`, a SafeLoader that resolves
plain scalars by the YAML 1.2 core schema, as the Pulumi CLI's own parser does for untyped values (so `on`, `yes`,
`1:30` and unquoted dates mean to the offline render what they mean to `pulumi up`: a date stays the string it was
written as, never a datetime the JSON step cannot encode), and refuses what would silently change the meaning or
blow up later: duplicate keys, keys that are not strings, merge keys, tags (custom, `!!binary`, `!!timestamp`,
`!!set`, ...), NaN and infinities, integers with a leading zero (octal to YAML 1.1 parsers, decimal to YAML 1.2),
nesting deeper than MAX_DEPTH and aliases that expand a document by more than MAX_ALIAS_EXPANSION nodes or refer
to themselves. JSON goes through
`load_json` with the same depth rule, duplicate keys and non-finite numbers refused. Every refusal is one
`InputFileError` line: `<file>:<line>: <key path>: <what is wrong>`.

Why here: node_images/catalog.py reads catalog.yaml through this module and is copied, with it, into the
self-contained policy pack (gpustack/packfacts.py), where only relative imports of standard-library-and-PyYAML
modules work; components/config imports node_images.catalog, and gpustack imports both. A module in components/
would make the pack import the program, one in gpustack/ would make the program import the toolkit.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Optional, Union

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MIB = 1024 * 1024
# File-size limits, by kind of file (README "Exit codes and limits"). A stack file or policy config is written by
# hand; an import dump is what kubectl prints for a whole cluster (filter nodes by label to stay below it).
STACK_FILE_MAX_BYTES = 1 * MIB
CATALOG_MAX_BYTES = 1 * MIB
POLICY_CONFIG_MAX_BYTES = 1 * MIB
IMPORT_INPUT_MAX_BYTES = 64 * MIB
# Nesting of mappings and sequences; real inputs stay below 20, Python's recursion limit is far above 64 levels.
MAX_DEPTH = 64
# How many nodes aliases may add to a document beyond those written in it (a "billion laughs" stays small).
MAX_ALIAS_EXPANSION = 100_000

_STR, _INT, _FLOAT, _BOOL, _NULL = (f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null"))
_SEQ, _MAP, _MERGE = "tag:yaml.org,2002:seq", "tag:yaml.org,2002:map", "tag:yaml.org,2002:merge"
_PLAIN_TAGS = {_STR, _INT, _FLOAT, _BOOL, _NULL, _SEQ, _MAP}
# The YAML 1.2 core schema (yaml.org/spec/1.2.2 §10.3.2), what the Pulumi CLI's YAML parser resolves plain scalars by.
_CORE = (
    (_NULL, re.compile(r"~|null|Null|NULL|")),
    (_BOOL, re.compile(r"true|True|TRUE|false|False|FALSE")),
    (_INT, re.compile(r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+")),
    (_FLOAT, re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)")),
)
_OCTAL_LOOKING = re.compile(r"[-+]?0[0-9]+")
# Tab, line feed and carriage return are text; every other C0 control character (and DEL) means a binary file.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class InputFileError(ValueError):
    """One line naming the file, the line and the key: `<file>:<line>: <key path>: <problem>`."""

    def __init__(self, source: str, problem: str, line: Optional[int] = None, key: str = ""):
        self.source, self.problem, self.line, self.key = source, problem, line, key
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {key + ': ' if key else ''}{problem}")


def _key_path(path: list[str]) -> str:
    text = "".join(part if part.startswith("[") or not index else "." + part for index, part in enumerate(path))
    # A deep path keeps its top (the key a user looks for) and its end (where the problem is).
    return text if len(text) <= 100 else text[:60] + "..." + text[-37:]


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class GuardedLoader(yaml.SafeLoader):
    """A SafeLoader for untrusted input; `source` names the file in errors. Use `load_yaml_text`."""

    source = "<input>"

    def __init__(self, stream: str):
        super().__init__(stream)
        self._path: list[str] = []
        self._aliased: list[Node] = []

    def _fail(self, node_or_mark: Any, problem: str) -> None:
        mark = getattr(node_or_mark, "start_mark", node_or_mark)
        line = mark.line + 1 if mark is not None else None
        raise InputFileError(self.source, problem, line, _key_path(self._path))

    # Resolution: the YAML 1.2 core schema for plain scalars; anything tagged other than the plain types is refused.
    def resolve(self, kind: type, value: Any, implicit: Any) -> str:
        if kind is ScalarNode and implicit[0]:
            for tag, pattern in _CORE:
                if pattern.fullmatch(value):
                    return tag
            return _STR
        return {ScalarNode: _STR, SequenceNode: _SEQ, MappingNode: _MAP}[kind]

    def compose_node(self, parent: Optional[Node], index: Any) -> Node:
        if self.check_event(yaml.AliasEvent):
            node = super().compose_node(parent, index)
            self._aliased.append(node)
            return node
        if len(self._path) >= MAX_DEPTH:
            self._fail(self.peek_event(), f"nested deeper than {MAX_DEPTH} levels (MAX_DEPTH)")
        node = super().compose_node(parent, index)
        if node.tag not in _PLAIN_TAGS:
            self._fail(node, f"tag {_short(node.tag)} is not accepted: write a plain string, number, boolean, list or mapping")
        if node.tag == _FLOAT and not math.isfinite(_float(node.value)):
            self._fail(node, f"{node.value} is not a finite number")
        if node.tag == _INT and node.style is None and _OCTAL_LOOKING.fullmatch(node.value):
            # YAML 1.1 (and the Pulumi CLI's parser) read 0755 as octal 493, YAML 1.2 as 755: refuse the guess.
            self._fail(node, f"{node.value} is ambiguous (a leading 0 reads as octal to the Pulumi CLI, as decimal to "
                             "YAML 1.2): drop the 0, write 0o... for octal, or quote it for a string")
        return node

    def compose_sequence_node(self, anchor: Optional[str]) -> Node:
        start = self.get_event()
        node = SequenceNode(self.resolve(SequenceNode, None, start.implicit), [], start.start_mark, None,
                            flow_style=start.flow_style)
        if anchor is not None:
            self.anchors[anchor] = node
        while not self.check_event(yaml.SequenceEndEvent):
            self._path.append(f"[{len(node.value)}]")
            node.value.append(self.compose_node(node, len(node.value)))
            self._path.pop()
        node.end_mark = self.get_event().end_mark
        return node

    def compose_mapping_node(self, anchor: Optional[str]) -> Node:
        start = self.get_event()
        node = MappingNode(self.resolve(MappingNode, None, start.implicit), [], start.start_mark, None,
                           flow_style=start.flow_style)
        if anchor is not None:
            self.anchors[anchor] = node
        seen: dict[str, int] = {}
        while not self.check_event(yaml.MappingEndEvent):
            self._path.append("<key>")
            key = self.compose_node(node, None)
            self._path.pop()
            if key.tag == _MERGE or (isinstance(key, ScalarNode) and key.tag == _STR and key.value == "<<" and key.style is None):
                self._fail(key, "merge keys (<<) are not accepted: write the keys out")
            if not isinstance(key, ScalarNode) or key.tag != _STR:
                shown = _short(key.value) if isinstance(key, ScalarNode) else ("a list" if isinstance(key, SequenceNode) else "a mapping")
                kind = {_INT: "an integer", _FLOAT: "a number", _BOOL: "a boolean", _NULL: "null"}.get(key.tag, "not a string")
                self._fail(key, f"key {shown!r} is {kind}; keys must be strings (quote it)")
            if key.value in seen:
                self._path.append(_short(key.value))
                self._fail(key, f"duplicate key {_short(key.value)!r} (first at line {seen[key.value]}): remove one")
            seen[key.value] = key.start_mark.line + 1
            self._path.append(_short(key.value))
            value = self.compose_node(node, key)
            self._path.pop()
            node.value.append((key, value))
        node.end_mark = self.get_event().end_mark
        return node

    def check_aliases(self, root: Node) -> None:
        """Refuse recursive aliases and documents whose aliases expand them beyond the limits."""
        if not self._aliased:
            return
        sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, expanded depth)
        on_path: set[int] = set()

        def measure(node: Node, depth: int) -> tuple[int, int]:
            if id(node) in sizes:
                size, height = sizes[id(node)]
                if depth + height > MAX_DEPTH:
                    self._fail(node, f"aliases nest the document deeper than {MAX_DEPTH} levels (MAX_DEPTH)")
                return size, height
            if id(node) in on_path:
                self._fail(node, "an alias refers to the node that contains it")
            if depth > MAX_DEPTH:
                self._fail(node, f"aliases nest the document deeper than {MAX_DEPTH} levels (MAX_DEPTH)")
            children: list[Node] = []
            if isinstance(node, SequenceNode):
                children = node.value
            elif isinstance(node, MappingNode):
                children = [n for pair in node.value for n in pair]
            on_path.add(id(node))
            size, height = 1, 0
            for child in children:
                child_size, child_height = measure(child, depth + 1)
                size, height = size + child_size, max(height, child_height + 1)
                if size > MAX_ALIAS_EXPANSION + written:
                    self._fail(node, f"aliases expand the document by more than {MAX_ALIAS_EXPANSION} nodes (MAX_ALIAS_EXPANSION)")
            on_path.discard(id(node))
            sizes[id(node)] = (size, height)
            return size, height

        written = _count_written(root)
        self._path = []
        measure(root, 0)

    def construct_document(self, node: Node) -> Any:
        self.check_aliases(node)
        return super().construct_document(node)


def _count_written(root: Node) -> int:
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, MappingNode):
            stack.extend(n for pair in node.value for n in pair)
    return len(seen)


def _construct_int(loader: GuardedLoader, node: ScalarNode) -> int:
    text = node.value
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    return int(text, 10)


def _float(text: str) -> float:
    """A core-schema float; `.inf` and `.nan` read as Python's (compose_node refuses them before construction)."""
    return float(text.replace(".", "", 1) if text.lstrip("+-").lower() in (".inf", ".nan") else text)


GuardedLoader.add_constructor(_INT, _construct_int)
GuardedLoader.add_constructor(_FLOAT, lambda loader, node: _float(node.value))
GuardedLoader.add_constructor(_BOOL, lambda loader, node: node.value.lower() == "true")


def decode(data: bytes, source: str, max_bytes: int, limit_name: str) -> str:
    """Bytes to text: within `max_bytes`, UTF-8 (a leading BOM dropped), no control characters."""
    if len(data) > max_bytes:
        raise InputFileError(source, f"is {_size(len(data))}; the limit is {_size(max_bytes)} ({limit_name})")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise InputFileError(source, f"not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start})", line) from None
    found = _CONTROL.search(text)
    if found:
        line = text.count("\n", 0, found.start()) + 1
        raise InputFileError(source, f"control character {found.group()!r} (a binary file?); expected UTF-8 text", line)
    return text


def read_text(path: Union[str, Path], max_bytes: int, limit_name: str, source: Optional[str] = None) -> str:
    """A file's text, guarded as `decode` says; a missing or unreadable file is an InputFileError too."""
    source = source or str(path)
    file = Path(path)
    try:
        size = file.stat().st_size
        if size > max_bytes:
            raise InputFileError(source, f"is {_size(size)}; the limit is {_size(max_bytes)} ({limit_name})")
        with file.open("rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as error:
        raise InputFileError(source, f"cannot be read: {error.strerror or error}") from None
    return decode(data, source, max_bytes, limit_name)


def load_yaml_text(text: str, source: str, multi: bool = False) -> Any:
    """Parse YAML text with GuardedLoader: one document (None when empty), or with `multi` the list of documents."""
    try:
        # The Reader refuses control characters already in the constructor: inside the try, like every other refusal.
        loader = type("Loader", (GuardedLoader,), {"source": source})(text)
    except yaml.YAMLError as error:
        raise InputFileError(source, f"not valid YAML: {_one_line(str(error))}") from None
    try:
        if multi:
            documents = []
            while loader.check_data():
                documents.append(loader.get_data())
            return documents
        return loader.get_single_data()
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        problem = " ".join(str(part) for part in (error.context, error.problem) if part)
        raise InputFileError(source, f"not valid YAML: {_one_line(problem)}", mark.line + 1 if mark else None,
                             _key_path(loader._path)) from None
    except yaml.YAMLError as error:
        raise InputFileError(source, f"not valid YAML: {_one_line(str(error))}") from None
    finally:
        loader.dispose()


def load_yaml(path: Union[str, Path], max_bytes: int, limit_name: str, source: Optional[str] = None, multi: bool = False) -> Any:
    """A YAML file read through the guarded door (see the module docstring)."""
    source = source or str(path)
    return load_yaml_text(read_text(path, max_bytes, limit_name, source), source, multi=multi)


def load_stack_file(path: Union[str, Path], source: Optional[str] = None) -> dict[str, Any]:
    """A `Pulumi.<stack>.yaml` through the guarded door, its shape checked: a mapping (empty when the file is) whose
    `config:`, when present, is a mapping; every key of it a string by the loader's rule."""
    source = source or str(path)
    document = load_yaml(path, STACK_FILE_MAX_BYTES, "STACK_FILE_MAX_BYTES", source)
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise InputFileError(source, f"expected a mapping with a `config:` key, got {_kind(document)}", 1)
    config = document.get("config")
    if config is not None and not isinstance(config, dict):
        raise InputFileError(source, f"expected a mapping of `gpu-stack:<key>: value`, got {_kind(config)}", key="config")
    return document


def _kind(value: Any) -> str:
    names = {list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)


def load_json_text(text: str, source: str) -> Any:
    """JSON with duplicate keys, NaN/Infinity and nesting deeper than MAX_DEPTH refused."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in items:
            if key in result:
                raise InputFileError(source, f"duplicate key {_short(key)!r}: remove one")
            result[key] = value
        return result

    def constant(name: str) -> Any:
        raise InputFileError(source, f"{name} is not a finite number")

    depth = _json_depth(text)
    if depth > MAX_DEPTH:
        raise InputFileError(source, f"nested deeper than {MAX_DEPTH} levels (MAX_DEPTH)")
    try:
        return json.loads(text, object_pairs_hook=pairs, parse_constant=constant)
    except json.JSONDecodeError as error:
        raise InputFileError(source, f"not valid JSON: {error.msg} (column {error.colno})", error.lineno) from None


def load_json(path: Union[str, Path], max_bytes: int, limit_name: str, source: Optional[str] = None) -> Any:
    source = source or str(path)
    return load_json_text(read_text(path, max_bytes, limit_name, source), source)


def _json_depth(text: str) -> int:
    """The deepest bracket nesting outside strings, found without recursion (json.loads recurses per level)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def json_value_problem(text: Any) -> Optional[str]:
    """Why a config value the Pulumi CLI hands the program as JSON text (objects and lists) cannot be read safely:
    nested deeper than MAX_DEPTH (json.loads would stop with a RecursionError), NaN or Infinity, a duplicate key.
    None when it reads, or is a plain scalar (which the program takes as text)."""
    if not isinstance(text, str) or not text.lstrip().startswith(("[", "{")):
        return None
    try:
        load_json_text(text, "value")
    except InputFileError as error:
        return error.problem
    return None


def _size(count: int) -> str:
    return f"{count / MIB:.1f} MiB" if count >= MIB else f"{count} bytes"


def _one_line(text: str) -> str:
    return " ".join(text.split())

