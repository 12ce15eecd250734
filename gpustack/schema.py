"""Strict schema validation of rendered objects with the `kubernetes-validate` package's schemas.

`kubernetes_validate.validate` re-reads and re-compiles the schema on every call (~6 ms); a stack renders a
few dozen objects per declared Kubernetes version and the tests validate every stack, so validators are built
once per (version, apiVersion, kind) and reused.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Optional

import jsonschema
from kubernetes_validate import utils as kv
from referencing import Registry, Resource

from gpustack.crd_schemas import crd_validator
from gpustack.sourcemap import pointer_of_path


@dataclass(frozen=True)
class SchemaProblem:
    kubernetes_version: str
    kind: str
    name: str
    message: str
    # the JSON pointer of the field the schema refuses ("" for the object as a whole)
    pointer: str = ""


def _schema_version(desired: str) -> str:
    minor = int(desired.split(".")[1])
    candidates = [v for v in kv.all_versions() if int(v.split(".")[1]) <= minor]
    if not candidates:
        raise kv.VersionNotSupportedError(version=desired)
    return candidates[-1]


@functools.lru_cache(maxsize=None)
def _definitions(schema_dir: str, desired: str) -> Resource:
    return Resource.from_contents(kv.schema_contents(f"kubernetes-json-schema/{schema_dir}/_definitions.json", desired))


@functools.lru_cache(maxsize=None)
def validator(desired: str, api_version: str, kind: str) -> Optional[jsonschema.protocols.Validator]:
    """A compiled strict validator; for a CRD's kind gpu-stack's own schema (gpustack.crd_schemas), or None."""
    version = _schema_version(desired)
    schema_dir = f"v{version}-local-strict"
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = kv.schema_contents(f"kubernetes-json-schema/{schema_dir}/{kind.lower()}-{group_version}.json", desired)
    except FileNotFoundError:
        return crd_validator(api_version, kind)
    registry = Resource.from_contents(schema) @ Registry()
    registry = _definitions(schema_dir, desired) @ registry
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def validate(obj: dict[str, Any], kubernetes_version: str) -> list[SchemaProblem]:
    kind, name = obj["kind"], obj.get("metadata", {}).get("name", "?")
    compiled = validator(kubernetes_version, obj["apiVersion"], kind)
    if compiled is None:
        return [SchemaProblem(kubernetes_version, kind, name, f"no schema for {obj['apiVersion']} {kind} in Kubernetes {kubernetes_version}")]
    problems = []
    for error in sorted(compiled.iter_errors(obj), key=lambda e: list(e.absolute_path)):
        where = ".".join(str(p) for p in error.absolute_path) or "(object)"
        problems.append(SchemaProblem(kubernetes_version, kind, name, f"{where}: {error.message}", pointer_of_path(error.absolute_path)))
    return problems
