"""The JSON Schema of a stack file (`stacks/Pulumi.<stack>.yaml`), generated from the configuration models.

`python -m gpustack stack-schema` writes docs/stack.schema.json; `--check` exits 1 when the committed file differs
from a fresh generation (the test suite runs the same check). An editor with the YAML language server validates a
stack file while it is typed when the file's first line is

    # yaml-language-server: $schema=../docs/stack.schema.json

What the schema holds, and where it comes from:

- the shape, types, enums (`Literal`s), bounds (`ge`/`le`, lengths) and defaults: `StackConfig.model_json_schema
  (by_alias=True)`, with every `$ref` inlined (no model is used twice, and draft-07 readers ignore a description
  next to a `$ref`) and pydantic's generated titles dropped;
- the checks the models make in validators rather than in types: `constraints()` below, built from the same
  patterns and catalogs the validators use (`components.config`'s regexes, the GPU model, node image and vGPU
  config catalogs, the Kubernetes versions kubernetes-validate knows). The schema is never stricter than
  `load_config` on a single key: whatever it refuses, the program refuses too. Rules across keys stay in the
  program;
- descriptions: the model's own (`Field(description=...)`, a model's docstring), else the reference text in
  gpustack/config_descriptions.py (see there);
- secrets (`SECRET_KEYS`): `writeOnly`, `x-secret`, and only the `{secure: ...}` form `pulumi config set --secret`
  writes, which is the only form the program takes.

The stack file around the config: `config:` holds `gpu-stack:<key>` entries, whose names are checked, and
entries of any other namespace (`kubernetes:`, `pulumi:`), which are not.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

from components.catalogs import catalog, vgpu_catalog
from components.config import limits
from components.config import (
    BRANCH,
    DCGM_FIELD,
    DIGEST,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    FULL_DRIVER_VERSION,
    IMAGE_TAG,
    LABEL_KEY,
    LABEL_VALUE,
    MIG_LAYOUT_NAME,
    NAMESPACE,
    OS_TAG,
    PROM_DURATION,
    REGISTRY,
    SECRET_KEYS,
    StackConfig,
    node_images,
)
from components.config.relabel import LABEL_NAME as RELABEL_LABEL_NAME
from components.config.relabel import RELABEL_TARGET
from gpustack import config_descriptions, generated

PROJECT_DIR = Path(__file__).resolve().parent.parent
SCHEMA_PATH = PROJECT_DIR / "docs" / "stack.schema.json"
# The first line of a stack file, for the YAML language server; relative to stacks/.
MODELINE = "# yaml-language-server: $schema=../docs/stack.schema.json"
MODELINE_PREFIX = "# yaml-language-server: $schema="
JSON_SCHEMA_DRAFT = "http://json-schema.org/draft-07/schema#"
PREFIX = NAMESPACE + ":"


def modeline(stack_file: Path, schema: Path = SCHEMA_PATH) -> str:
    """The first line of a stack file written to `stack_file`: the language server resolves the schema relative to
    the file, so one in stacks/ gets MODELINE and one written elsewhere (`import --out`) a path that still finds it."""
    relative = os.path.relpath(schema.resolve(), stack_file.resolve().parent)
    return MODELINE_PREFIX + Path(relative).as_posix()


def _body(pattern: str) -> str:
    """A regex without its ^...$ anchors, to combine with another."""
    return pattern.removeprefix("^").removesuffix("$")


def _either(*patterns: str) -> str:
    return "^(?:" + "|".join(_body(p) for p in patterns) + ")$"


def _kubernetes_minors() -> list[int]:
    from kubernetes_validate.utils import all_versions

    return sorted({int(v.split(".")[1]) for v in all_versions()})


def kubernetes_versions_pattern() -> str:
    # K8S_VERSION (v?1.<minor>(.<patch>)?) with the minors kubernetes-validate holds schemas for.
    return r"^v?1\.(" + "|".join(str(m) for m in _kubernetes_minors()) + r")(\.[0-9]+)?$"


IMAGE_VERSION = {"pattern": _either(IMAGE_TAG.pattern, DIGEST.pattern), "not": {"const": "latest"}}
DRIVER_VERSION = {"pattern": _either(FULL_DRIVER_VERSION.pattern, DIGEST.pattern)}
COUNT_OR_PERCENT = {
    "anyOf": [
        {"type": "integer", "minimum": 1, "maximum": limits.MAX_UNAVAILABLE_COUNT},
        {"type": "string", "pattern": r"^([1-9][0-9]?|100)%$"},
    ]
}
LABEL_MAP = {"propertyNames": {"pattern": LABEL_KEY.pattern}, "additionalProperties": {"pattern": LABEL_VALUE.pattern}}
DURATION = {"pattern": PROM_DURATION.pattern, "minLength": 1}
ABSOLUTE_PATH = {"pattern": "^/"}

def _vgpu_config(builtin: list[str]) -> dict[str, Any]:
    """A vGPU config name: NVIDIA's (offered as completions) or one of the stack's vgpu.configs (a label value)."""
    return {"anyOf": [{"enum": builtin}, {"pattern": LABEL_VALUE.pattern, "minLength": 1, "maxLength": 63}]}


def constraints(paths: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Schema keywords per key path (of `paths`, the models' keys) for what the models check in validators, from the
    validators' own patterns and catalogs. Merged into the generated schema (into the non-null branch of an
    optional key)."""
    node_image_names = list(node_images().names)
    vgpu_configs = list(vgpu_catalog.config_names())
    return {
        "cluster.name": {"pattern": DNS_LABEL.pattern, "maxLength": 63},
        "cluster.namespace": {"pattern": DNS_LABEL.pattern, "maxLength": 63},
        "cluster.kubernetesVersions": {"items": {"pattern": kubernetes_versions_pattern()}},
        "registry.override": {"pattern": REGISTRY.pattern},
        "registry.pullSecrets": {"items": {"pattern": DNS_SUBDOMAIN.pattern}},
        "registry.credentials.server": {"pattern": REGISTRY.pattern, "not": {"pattern": "/"}},
        # Every image version but the driver's is a tag or digest, never `latest` (Versions._tags).
        **{path: IMAGE_VERSION for path in paths if path.startswith("versions.") and path not in ("versions.driver", "versions.nfdChart")},
        # gpu-stack renders this one NFD chart version's objects itself (Versions._nfd_chart_pinned).
        "versions.nfdChart": {"const": catalog.NFD_CHART_VERSION},
        "versions.driver": DRIVER_VERSION,
        "driver.branch": {"pattern": BRANCH.pattern},
        "toolkit.installDir": ABSOLUTE_PATH,
        "toolkit.runtimeConfig": ABSOLUTE_PATH,
        "toolkit.runtimeDropInConfig": ABSOLUTE_PATH,
        "toolkit.runtimeSocket": ABSOLUTE_PATH,
        "daemonsets.priorityClassName": {"pattern": DNS_SUBDOMAIN.pattern},
        "daemonsets.maxUnavailable": COUNT_OR_PERCENT,
        "daemonsets.labels": LABEL_MAP,
        "daemonsets.annotations": {"propertyNames": {"pattern": LABEL_KEY.pattern}},
        "dcgmExporter.extraMetrics[].field": {"pattern": DCGM_FIELD.pattern},
        "dcgmExporter.extraMetrics[].help": {"pattern": r'^[^,"\n]*$'},
        "monitoring.serviceMonitor.interval": DURATION,
        "monitoring.serviceMonitor.scrapeTimeout": DURATION,
        "monitoring.serviceMonitor.additionalLabels": LABEL_MAP,
        "monitoring.serviceMonitor.relabelings[].sourceLabels": {"items": {"pattern": RELABEL_LABEL_NAME.pattern}},
        "monitoring.serviceMonitor.relabelings[].targetLabel": {"pattern": RELABEL_TARGET.pattern},
        "monitoring.alerts.utilizationFor": DURATION,
        "monitoring.alerts.validatorNotReadyFor": DURATION,
        "monitoring.alerts.ruleLabels": LABEL_MAP,
        "monitoring.dashboard.labels": LABEL_MAP,
        "migLayouts": {"propertyNames": {"pattern": MIG_LAYOUT_NAME.pattern, "not": {"pattern": "^all-"}}},
        "nodePools[].name": {"pattern": DNS_LABEL.pattern, "maxLength": 40},
        "nodePools[].nodeSelector": LABEL_MAP,
        "nodePools[].gpuModel": {"enum": list(catalog.GPU_MODELS)},
        "nodePools[].os": {"pattern": OS_TAG.pattern},
        "nodePools[].nodeImage": {"enum": node_image_names},
        "nodePools[].driver.version": DRIVER_VERSION,
        "nodePools[].driver.branch": {"pattern": BRANCH.pattern},
        "nodePools[].driver.daemonSetName": {"pattern": DNS_SUBDOMAIN.pattern, "maxLength": 63},
        "nodePools[].vgpuConfig": _vgpu_config(vgpu_configs),
        "upgrade.maxUnavailable": COUNT_OR_PERCENT,
        "upgrade.waves[].name": {"pattern": DNS_LABEL.pattern, "maxLength": 20},
        "upgrade.waves[].pools": {"items": {"pattern": DNS_LABEL.pattern, "maxLength": 40}},
        "sandboxWorkloads.kubevirt.name": {"pattern": DNS_LABEL.pattern, "maxLength": 63},
        "sandboxWorkloads.kubevirt.namespace": {"pattern": DNS_LABEL.pattern, "maxLength": 63},
        "vgpu.defaultConfig": _vgpu_config(vgpu_configs),
    }


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            target = copy.deepcopy(defs[node["$ref"].rsplit("/", 1)[1]])
            rest = {k: v for k, v in node.items() if k != "$ref"}
            # The use's own keywords (default, a field description) win over the model's.
            return _inline({**target, **rest}, defs)
        return {k: _inline(v, defs) for k, v in node.items() if k != "$defs"}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


def _drop_titles(node: Any) -> Any:
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "title" and isinstance(value, str):
                continue
            if key == "properties":
                out[key] = {name: _drop_titles(v) for name, v in value.items()}
            else:
                out[key] = _drop_titles(value)
        return out
    if isinstance(node, list):
        return [_drop_titles(v) for v in node]
    return node


def _merge(node: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(node.get(key), dict):
            _merge(node[key], value)
        else:
            node[key] = copy.deepcopy(value)


def _value_branch(node: dict[str, Any]) -> dict[str, Any]:
    """The branch a constraint belongs in: the non-null one of `Optional[X]`, else the node itself."""
    branches = node.get("anyOf")
    if branches:
        values = [b for b in branches if b.get("type") != "null"]
        if len(values) == 1 and len(branches) == 2:
            return values[0]
    return node


def walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any], bool]]:
    """(key path, schema node, required) for every key under `node`, parents before children, in model order.
    Paths read as the program's errors write them: `nodePools[].sharing.strategy`."""
    value = _value_branch(node)
    if value.get("type") == "array" and isinstance(value.get("items"), dict):
        value, path = _value_branch(value["items"]), f"{path}[]"
    required = set(value.get("required", []))
    for name, child in value.get("properties", {}).items():
        here = f"{path}.{name}" if path else name
        yield here, child, name in required
        yield from walk(child, here)


def model_description(node: dict[str, Any]) -> Optional[str]:
    """The model's own text for a key: its field description, else the docstring of the model it holds."""
    text = node.get("description") or _value_branch(node).get("description")
    return " ".join(text.split()) if text else None


def model_schema() -> dict[str, Any]:
    """StackConfig's own schema, as pydantic writes it, with every `$ref` inlined and the generated titles dropped."""
    raw = StackConfig.model_json_schema(by_alias=True)
    return _drop_titles(_inline(raw, raw.get("$defs", {})))


def config_schema() -> dict[str, Any]:
    """StackConfig's schema, decorated: one property per `gpu-stack:` key (by its camelCase name), each key with
    its description and the constraints its validators check."""
    schema = model_schema()
    # The model's text first (field description, then the model's docstring); the reference text where it has none.
    nodes = {path: node for path, node, _ in walk(schema)}
    for path, node in nodes.items():
        text = model_description(node) or config_descriptions.DESCRIPTIONS.get(path)
        _value_branch(node).pop("description", None)
        if text:
            node["description"] = " ".join(text.split())
    for path, extra in constraints(nodes).items():
        if path not in nodes:
            continue  # a key the models dropped; tests/test_stack_schema.py names the stale entry
        target = nodes[path]
        if "anyOf" in extra:
            target.pop("anyOf", None)
            target.pop("type", None)
            _merge(target, extra)
        else:
            _merge(_value_branch(target), extra)
    return schema


def _secret(name: str, section: dict[str, Any]) -> dict[str, Any]:
    what = section.get("description", "")
    how = f"Only as a Pulumi secret: `pulumi config set --secret {name} <value>` writes it encrypted (`{{secure: v1:...}}`); a plain value is refused."
    return {
        "description": f"{what} {how}".strip(),
        "type": "object",
        "properties": {"secure": {"type": "string", "minLength": 1, "description": "the value encrypted by the stack's secrets provider"}},
        "required": ["secure"],
        "additionalProperties": False,
        "writeOnly": True,
        "x-secret": True,
    }


def stack_file_schema() -> dict[str, Any]:
    """A whole `Pulumi.<stack>.yaml`: its `config:` holds `gpu-stack:<key>` sections and any other namespace's keys."""
    config = config_schema()
    secret = {key[len(PREFIX):] for key in SECRET_KEYS}
    sections: dict[str, Any] = {}
    for name, node in config["properties"].items():
        sections[PREFIX + name] = _secret(name, node) if name in secret else node
    return {
        "$schema": JSON_SCHEMA_DRAFT,
        "title": "gpu-stack stack file (stacks/Pulumi.<stack>.yaml)",
        "description": (
            "Generated by `python -m gpustack stack-schema` from the configuration models in components/config/; "
            "do not edit. Reference: docs/configuration.md."
        ),
        "type": "object",
        "properties": {
            "config": {
                "description": (
                    f"The stack's configuration: one `{PREFIX}<key>` entry per section (unknown ones are refused), and "
                    "entries of other namespaces (`kubernetes:`, `pulumi:`), which gpu-stack does not read."
                ),
                "type": "object",
                "properties": sections,
                "required": [PREFIX + name for name in config.get("required", [])],
                "propertyNames": {"anyOf": [{"enum": list(sections)}, {"not": {"pattern": "^" + PREFIX}}]},
                "additionalProperties": True,
            },
            "secretsprovider": {"type": "string", "description": "the stack's secrets provider (`pulumi stack change-secrets-provider`)"},
            "encryptedkey": {"type": "string", "description": "the data key, encrypted by a cloud secrets provider"},
            "encryptionsalt": {"type": "string", "description": "the passphrase secrets provider's salt"},
            "environment": {"description": "Pulumi ESC environments the stack imports"},
        },
        "required": ["config"],
        "additionalProperties": False,
    }


def render() -> str:
    return json.dumps(stack_file_schema(), indent=2, ensure_ascii=False) + "\n"


def stale(path: Path = SCHEMA_PATH) -> bool:
    return generated.stale(path, render())


def write(path: Path = SCHEMA_PATH) -> bool:
    """Write the schema; True when the file changed."""
    return generated.write(path, render())


def _shown(path: Path) -> str:
    return str(path.relative_to(PROJECT_DIR)) if path.is_relative_to(PROJECT_DIR) else str(path)


def run(args: argparse.Namespace) -> int:
    if args.check:
        if stale(SCHEMA_PATH):
            print(f"stale: {_shown(SCHEMA_PATH)} (run python -m gpustack stack-schema)")
            return 1
        return 0
    changed = write(SCHEMA_PATH)
    print(f"{'wrote' if changed else 'unchanged'}: {_shown(SCHEMA_PATH)}")
    return 0


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "stack-schema",
        aliases=["schema"],
        help="write docs/stack.schema.json, the JSON Schema of stacks/Pulumi.<stack>.yaml, from the config models",
    )
    parser.add_argument("--check", action="store_true", help="only report a stale schema (exit 1), write nothing")
    parser.set_defaults(run=run)
