"""`gpustack diff --format markdown|json`: the same plan as the text format, for a pull-request comment and for
tools. The JSON report holds to docs/diff.schema.json (generated, kept fresh); exit codes are the text format's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import gpustack.__main__ as cli
from gpustack import diff_report
from stacktest import ROOT, per_stack, stack_config, stack_files


def run(capsys, base: Path, head: Path, fmt: str, *extra: str) -> tuple[int, str, str]:
    code = cli.main(["diff", "--stack", str(head), "--base", str(base), "--format", fmt, *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def bumped(stack: str) -> dict[str, Any]:
    config = stack_config(stack)
    config.setdefault("gpu-stack:versions", {})["driver"] = "580.105.08"
    return config


def test_the_schema_file_is_fresh_and_a_valid_schema():
    assert json.loads((ROOT / "docs" / "diff.schema.json").read_text()) == diff_report.SCHEMA
    jsonschema.Draft202012Validator.check_schema(diff_report.SCHEMA)


# prod-managed's waves and kubevirt's VM states here; every other stack in `make test-all`.
@pytest.mark.parametrize("stack", per_stack(keep=("prod-managed", "kubevirt")))
def test_every_stack_reports_a_json_plan_the_schema_accepts(stack, tmp_path, capsys):
    base, head = stack_files(tmp_path, stack, stack_config(stack), bumped(stack))
    code, out, _ = run(capsys, base, head, "json")
    data = json.loads(out)
    jsonschema.validate(data, diff_report.SCHEMA)
    assert code == data["exitCode"] and data["schemaVersion"] == "gpustack.diff/v1"


def test_a_driver_bump_lists_the_driver_pods_it_restarts_wave_by_wave(tmp_path, capsys):
    base, head = stack_files(tmp_path, "prod-managed", stack_config("prod-managed"), bumped("prod-managed"))
    code, out, _ = run(capsys, base, head, "json")
    data = json.loads(out)
    assert code == 0 and data["verdict"] == "safe"
    assert [(r["daemonSet"], r["pools"], r["wave"]) for r in data["driverRollout"]] == [
        ("nvidia-driver-daemonset-canary", ["inference-l4"], 1),
        ("nvidia-driver-daemonset-training", ["training-a100"], 2),
    ]
    driver = next(c for c in data["changes"] if c["name"] == "nvidia-driver-daemonset-canary")
    assert driver["state"] == "state-driver" and driver["action"] == "update" and "spec.template" in driver["fields"]

    code, out, _ = run(capsys, base, head, "markdown")
    assert code == 0
    lines = out.splitlines()
    # a CI job finds its own comment by the first line, and the verdict comes right after it
    assert lines[0] == "<!-- gpustack-diff:prod-managed -->" and lines[1] == "### ✅ `prod-managed`: SAFE"
    assert "| 1 | `nvidia-driver-daemonset-canary` | `inference-l4` | – | update |" in out
    assert "| 2 | `nvidia-driver-daemonset-training` | `training-a100` | – | update |" in out
    assert "Nodes show where each pool declares `nodePools[].expectedNodes`" in out
    assert "```mermaid" in out and "class " in out and " changed" in out
    # and the job that posts it reads the last line to leave an unchanged stack without a new comment
    total = sum(data["counts"].values())
    assert total > 0 and lines[-1] == f"<!-- gpustack-diff-status: changes={total} verdict=safe -->"


def test_a_dangerous_change_says_what_and_the_allow_that_accepts_it(tmp_path, capsys):
    renamed = stack_config("prod-managed")
    renamed["gpu-stack:cluster"]["name"] = "another-cluster"
    base, head = stack_files(tmp_path, "prod-managed", stack_config("prod-managed"), renamed)
    code, out, _ = run(capsys, base, head, "markdown")
    assert code == 1
    assert out.splitlines()[1] == "### ⚠️ `prod-managed`: DANGEROUS"
    assert "**cluster-replaced:**" in out and "--allow cluster-replaced" in out
    # long lists are folded
    assert "<details><summary>" in out.split("```mermaid")[0]
    code, out, _ = run(capsys, base, head, "json", "--allow", "cluster-replaced")
    data = json.loads(out)
    assert [d["allowed"] for d in data["dangers"] if d["rule"] == "cluster-replaced"] == [True]
    assert code == data["exitCode"]


def test_an_unknown_format_or_a_base_that_cannot_be_rendered_exits_2_with_one_line(tmp_path, capsys):
    base, head = stack_files(tmp_path, "dev", stack_config("dev"), stack_config("dev"))
    code, out, err = run(capsys, base, head, "html")
    assert code == 2 and out == "" and err.strip() == "diff: unknown --format 'html'; allowed: text, markdown, json"
    code = cli.main(["diff", "--stack", "dev", "--base", "no-such-ref-anywhere", "--format", "json"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "no-such-ref-anywhere" in err


def test_the_rollout_counts_the_nodes_its_pools_declare(tmp_path, capsys):
    declared = bumped("prod-managed")
    for pool, nodes in zip(declared["gpu-stack:nodePools"], (6, 4), strict=True):
        pool["expectedNodes"] = nodes
    base, head = stack_files(tmp_path, "prod-managed", stack_config("prod-managed"), declared)
    code, out, _ = run(capsys, base, head, "json")
    assert code == 0
    assert [(r["daemonSet"], r["nodes"]) for r in json.loads(out)["driverRollout"]] == [
        ("nvidia-driver-daemonset-canary", 4), ("nvidia-driver-daemonset-training", 6)]


def test_each_change_names_the_stack_keys_whose_new_value_it_comes_from(tmp_path, capsys):
    """The render's source map traces each changed field to its key: a host path added to the driver pods, and
    nothing about the keys whose value stayed."""
    config = stack_config("prod-managed")
    volume = {"name": "vendor-tools", "mountPath": "/opt/vendor", "hostPath": {"path": "/opt/vendor-tools"}}
    edited = {**config, "gpu-stack:driver": {**config["gpu-stack:driver"], "extraVolumes": [volume]}}
    base, head = stack_files(tmp_path, "prod-managed", config, edited)
    code, out, _ = run(capsys, base, head, "json")
    changes = {c["name"]: c["because"] for c in json.loads(out)["changes"]}
    for driver in ("nvidia-driver-daemonset-canary", "nvidia-driver-daemonset-training"):
        assert changes[driver] and all(k.startswith("gpu-stack:driver.extraVolumes[0]") for k in changes[driver])
    assert changes["gpu-stack-node-pools"] == []  # it holds the DaemonSets' template digests: no key sets them
    code, text, _ = run(capsys, base, head, "text")
    assert "nvidia-driver-daemonset-canary (metadata.annotations, spec.template) because gpu-stack" not in text
    assert any("nvidia-driver-daemonset-canary" in line and "because driver.extraVolumes[0]" in line for line in text.splitlines())
