"""Checking one stack without a cluster, shared by `python -m gpustack check` (text and SARIF) and by docs/ci.md's
example: the stack file found and loaded, the program run under mocks, the policy pack, strict schemas per
Kubernetes version and the API server's own rules."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from components.config import StackConfig, load_config, stack_file_config, stack_file_secret_keys
from gpustack import apiserver, render, schema
from gpustack.apiserver.engine import ApiProblem
from gpustack.mockrun import PROJECT_DIR, Recording, run_program
from gpustack.policyrun import PolicyConfigError, Violation, has_mandatory, pack_config, pack_policies, run_policies
from gpustack.schema import SchemaProblem
from node_images.inputfiles import load_stack_file


class StackFileError(Exception):
    pass


def resolve_stack(ref: str) -> tuple[str, Path]:
    """A stack is named (`prod-managed` → stacks/Pulumi.prod-managed.yaml) or given as a path."""
    path = Path(ref)
    if not (path.suffix in (".yaml", ".yml") or "/" in ref):
        path = PROJECT_DIR / "stacks" / f"Pulumi.{ref}.yaml"
    if not path.is_file():
        raise StackFileError(f"stack file {path} does not exist")
    name = path.name
    if not (name.startswith("Pulumi.") and name.count(".") >= 2):
        raise StackFileError(f"{path}: a stack file is named Pulumi.<stack>.yaml")
    return name[len("Pulumi.") : name.rindex(".")], path


def read_stack(ref: str) -> tuple[str, dict[str, Any]]:
    name, path = resolve_stack(ref)
    return name, load_stack_file(path)


def load_stack(ref: str) -> tuple[str, dict[str, str], StackConfig]:
    name, document = read_stack(ref)
    bag = stack_file_config(document)
    return name, bag, load_config(bag, stack_file_secret_keys(document))


def evaluate(ref: str, preview: bool, policy_config: Optional[str] = None) -> tuple[StackConfig, Recording, list[Violation]]:
    name, bag, cfg = load_stack(ref)
    if policy_config is not None and not Path(policy_config).is_file():
        raise PolicyConfigError(f"policy pack config {policy_config} does not exist")
    settings = pack_config(name, path=Path(policy_config) if policy_config else None)
    recording = run_program(name, bag, secret_keys=stack_file_secret_keys(read_stack(ref)[1]), preview=preview)
    violations = run_policies(recording, pack_policies(), settings)
    return cfg, recording, violations


@dataclass
class Checked:
    """What `check` found in one stack."""

    stack: str
    path: Path
    rows: list[tuple[str, ...]]
    versions: tuple[str, ...]
    problems: list[SchemaProblem]
    refused: list[ApiProblem]
    violations: list[Violation]
    recording: Recording

    @property
    def failed(self) -> bool:
        return bool(self.problems) or bool(self.refused) or has_mandatory(self.violations)


def check_one(stack: str, args: argparse.Namespace) -> Checked:
    cfg, recording, violations = evaluate(stack, args.preview, args.policy_config)
    versions = tuple(cfg.cluster.kubernetes_versions)
    objects = [obj for _, obj in render.objects_in_order(recording)]
    # What the API server would refuse that no schema can say; judged once, its rules hold on every version.
    refused = apiserver.validate_all(objects)
    refused_objects = {(p.kind, p.namespace, p.name) for p in refused}
    rows, problems = [], []
    for obj in objects:
        cells = []
        for version in versions:
            found = schema.validate(obj, version)
            problems += found
            cells.append("ok" if not found else "FAIL")
        meta = obj.get("metadata", {})
        api_cell = "FAIL" if (obj["kind"], meta.get("namespace"), meta.get("name", "?")) in refused_objects else "ok"
        rows.append((obj["kind"], meta.get("namespace", "-"), meta.get("name", "?"), *cells, api_cell))
    return Checked(recording.stack, resolve_stack(stack)[1], rows, versions, problems, refused, violations, recording)


def summary(checked: Checked) -> str:
    return (
        f"{checked.stack}: {'FAIL' if checked.failed else 'PASS'} - {len(checked.rows)} objects x {len(checked.versions)} "
        f"Kubernetes version(s), {len(checked.problems)} schema problem(s), {len(checked.refused)} API-server problem(s), "
        f"{len(checked.violations)} policy violation(s)"
    )
