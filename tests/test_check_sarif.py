"""`gpustack check --format sarif`: one SARIF 2.1.0 log that GitHub code scanning accepts, each finding at the line
and column of the stack-file key that causes it; exit codes and the people's summary lines as the text format's."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from sarif import loader as sarif_loader

import gpustack.__main__ as cli
from components.states.order import STATE_NAMES
from gpustack import findings, render, sarif
from gpustack.apiserver.engine import RULES as API_RULES, ApiProblem
from gpustack.keylines import KeyLines
from gpustack.policyrun import pack_policies
from gpustack.schema import SchemaProblem
from stacktest import ROOT, per_stack, render_stack

STACK_SCHEMA = json.loads((ROOT / "docs" / "stack.schema.json").read_text())
LEVELS = {"none", "note", "warning", "error"}


def check(capsys, *stacks: str, extra: tuple[str, ...] = ()) -> tuple[int, dict[str, Any], str]:
    code = cli.main(["check", *[a for s in stacks for a in ("--stack", s)], "--format", "sarif", *extra])
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


def edited(folder: Path, stack: str, *edits: tuple[str, str]) -> Path:
    """The shipped stack file, comments and all, with each (old, new) text replaced once: a reviewer's edit."""
    text = (ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text()
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = folder / f"Pulumi.{stack}.yaml"
    path.write_text(text)
    return path


def line_of(path: Path, text: str, after: str = "") -> int:
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if after in line) if after else 0
    return next(i for i in range(start, len(lines)) if text in lines[i]) + 1


def assert_code_scanning_accepts(log: dict[str, Any], folder: Path) -> Any:
    """What GitHub code scanning requires of an uploaded SARIF file, then a read through sarif-tools."""
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    (run,) = log["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "gpu-stack"
    ids = [rule["id"] for rule in driver["rules"]]
    assert len(ids) == len(set(ids))
    for rule in driver["rules"]:
        assert rule["shortDescription"]["text"] and rule["fullDescription"]["text"] and rule["help"]["text"]
        assert rule["defaultConfiguration"]["level"] in LEVELS
    for result in run["results"]:
        assert result["ruleId"] == ids[result["ruleIndex"]]
        assert result["level"] in LEVELS and result["message"]["text"]
        (location,) = result["locations"]
        physical = location["physicalLocation"]
        assert physical["artifactLocation"]["uri"] and physical["region"]["startLine"] >= 1
        assert result["partialFingerprints"][sarif.FINGERPRINT]
    path = folder / "check.sarif"
    path.write_text(json.dumps(log))
    read = sarif_loader.load_sarif_file(str(path))
    assert read.get_distinct_tool_names() == ["gpu-stack"]
    assert read.get_result_count() == len(run["results"])
    return read


# prod-managed here; every other shipped stack in `make test-all`.
@pytest.mark.parametrize("stack", per_stack(keep=("prod-managed",)))
def test_every_shipped_stack_gives_a_clean_log_code_scanning_accepts(stack, tmp_path, capsys):
    code, log, err = check(capsys, stack)
    assert code == cli.EXIT_OK and log["runs"][0]["results"] == []
    assert_code_scanning_accepts(log, tmp_path)
    assert f"{stack}: PASS" in err


def test_a_policy_violation_is_annotated_on_the_key_its_fix_names(tmp_path, capsys):
    path = edited(tmp_path, "prod-managed", ("maxUnavailable: 2", "maxUnavailable: 50%"), ("replicas: 4", "replicas: 40"))
    code, log, err = check(capsys, str(path))
    assert code == cli.EXIT_VIOLATION and "prod-managed: FAIL" in err
    read = assert_code_scanning_accepts(log, tmp_path)
    found = {r["ruleId"]: r for r in log["runs"][0]["results"]}
    budget, sharing = found["policy/upgrade-safety"], found["policy/sharing-sane"]
    assert budget["level"] == "error"  # mandatory in policies/config/prod-managed.json
    assert budget["locations"][0]["physicalLocation"]["region"] == {
        "startLine": line_of(path, "maxUnavailable: 50%"), "startColumn": 5, "endLine": line_of(path, "maxUnavailable: 50%"),
        "endColumn": 5 + len("maxUnavailable")}
    assert budget["properties"]["key"] == "gpu-stack:upgrade.maxUnavailable"
    # the message says `nodePools[]`; the location is the pool the ConfigMap entry is for
    assert sharing["properties"]["key"] == "gpu-stack:nodePools[1].sharing.replicas"
    assert sharing["locations"][0]["physicalLocation"]["region"]["startLine"] == line_of(path, "replicas: 40", after="- name: inference-l4")
    assert sorted(r["Line"] for r in read.get_records()) == sorted(
        [line_of(path, "maxUnavailable: 50%"), line_of(path, "replicas: 40")])


def test_a_fingerprint_survives_lines_added_above_the_finding():
    text = (ROOT / "stacks" / "Pulumi.prod-managed.yaml").read_text()
    finding = findings.Finding("policy/sharing-sane", "error", "40 replicas, outside 2..8", "prod-managed",
                               keys=("gpu-stack:nodePools[].sharing.replicas",), pools=("inference-l4",),
                               subject="ConfigMap::nvidia-device-plugin-configs")
    index = {rule["id"]: i for i, rule in enumerate(sarif.rules())}
    path = ROOT / "stacks" / "Pulumi.prod-managed.yaml"
    before = sarif.result(finding, path, KeyLines.of_text(text), index)
    after = sarif.result(finding, path, KeyLines.of_text("# reviewed in PR 123\n# and again\n" + text), index)
    line = before["locations"][0]["physicalLocation"]["region"]["startLine"]
    assert line == line_of(path, "replicas: 4", after="- name: inference-l4")
    assert after["locations"][0]["physicalLocation"]["region"]["startLine"] == line + 2
    assert after["partialFingerprints"] == before["partialFingerprints"]
    # another pool's replicas is another finding
    other = sarif.result(findings.Finding(**{**finding.__dict__, "pools": ("training-a100",)}), path, KeyLines.of_text(text), index)
    assert other["partialFingerprints"] != before["partialFingerprints"]


def test_an_invalid_stack_is_annotated_at_its_keys_and_the_other_stacks_are_still_checked(tmp_path, capsys):
    path = edited(tmp_path, "prod-managed", ("replicas: 4", "replicas: 400"))
    code, log, err = check(capsys, str(path), "dev")
    assert code == cli.EXIT_CONFIG
    assert "gpu-stack:nodePools[1].sharing.replicas: got 400" in err and "dev: PASS" in err
    (result,) = log["runs"][0]["results"]
    assert result["ruleId"] == "stack-config" and result["level"] == "error"
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == line_of(path, "replicas: 400")
    assert_code_scanning_accepts(log, tmp_path)


def test_a_stack_file_that_does_not_parse_is_annotated_where_the_parser_stopped(tmp_path, capsys):
    path = tmp_path / "Pulumi.broken.yaml"
    path.write_text("config:\n  gpu-stack:cluster:\n    name: x\n   kubernetesVersions: [1.33\n")
    code, log, err = check(capsys, str(path))
    (result,) = log["runs"][0]["results"]
    assert code == cli.EXIT_CONFIG and len(err.strip().splitlines()) == 1
    assert result["ruleId"] == "stack-file" and result["locations"][0]["physicalLocation"]["region"]["startLine"] >= 3
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith("Pulumi.broken.yaml")


@pytest.mark.parametrize("argv, expected", [
    (["check", "--stack", "dev", "--format", "xml"], "check: unknown --format 'xml'; allowed: text, sarif"),
    (["check", "--stack", "no-such-stack", "--format", "sarif"], "Pulumi.no-such-stack.yaml does not exist"),
    (["check", "--stack", "dev", "--format", "sarif", "--policy-config", "no-such.json"], "no-such.json does not exist"),
    (["check", "--stack", "dev", "--format", "x" * 10_000], "unknown --format 'xxxxxxxx"),
])
def test_bad_input_exits_2_with_one_line_and_no_log(argv, expected, capsys):
    assert cli.main(argv) == cli.EXIT_CONFIG
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1 and expected in captured.err
    assert len(captured.err) < 300


def test_a_problem_in_an_operand_pod_traces_to_the_override_that_sets_the_field():
    recording = render_stack("prod-managed")
    lines = KeyLines.of_file(ROOT / "stacks" / "Pulumi.prod-managed.yaml")
    index = findings.ObjectIndex(recording)
    path = ROOT / "stacks" / "Pulumi.prod-managed.yaml"

    env = findings.api_finding("prod-managed", ApiProblem(
        "DaemonSet", "nvidia-device-plugin-daemonset", "gpu-operator", "spec.template.spec.containers[0].env[1].name",
        "env-var-name", "validation.ValidateEnv", "a valid environment variable name must ..."), index)
    assert env.context[0] == "gpu-stack:operands.devicePlugin.env"
    assert lines.locate(env.keys, env.context, env.pools).line == line_of(path, "env:", after="    devicePlugin:")

    limits = findings.schema_finding("prod-managed", SchemaProblem(
        "1.33", "DaemonSet", "nvidia-dcgm-exporter", "spec.template.spec.containers.0.resources.limits: ..."), index)
    assert lines.locate(limits.keys, limits.context, []).key == "gpu-stack:operands.dcgmExporter.resources"

    # a driver DaemonSet's problem with no override behind it lands on its pool's driver block
    driver = findings.schema_finding("prod-managed", SchemaProblem(
        "1.33", "DaemonSet", "nvidia-driver-daemonset-canary", "spec.template.spec.volumes.3: ..."), index)
    assert driver.pools == ("inference-l4",)
    assert lines.locate(driver.keys, driver.context, driver.pools).key == "gpu-stack:nodePools[1].driver"


def test_an_object_the_api_server_or_schema_refuses_is_annotated_at_the_override_that_sets_the_field(monkeypatch, tmp_path, capsys):
    real = render.objects_in_order

    def with_a_bad_env_name_and_a_misspelt_field(recording):
        for registration, obj in real(recording):
            if obj["kind"] == "DaemonSet" and obj["metadata"]["name"] == "nvidia-device-plugin-daemonset":
                obj = copy.deepcopy(obj)
                container = obj["spec"]["template"]["spec"]["containers"][0]
                container["env"].append({"name": "1-NOT-A-NAME", "value": "x"})
                container["resources"]["limit"] = {"memory": "1Gi"}
            yield registration, obj

    monkeypatch.setattr(render, "objects_in_order", with_a_bad_env_name_and_a_misspelt_field)
    code, log, err = check(capsys, "prod-managed")
    assert code == cli.EXIT_VIOLATION and "prod-managed: FAIL" in err
    assert_code_scanning_accepts(log, tmp_path)
    path = ROOT / "stacks" / "Pulumi.prod-managed.yaml"
    located = {(r["ruleId"].split("/")[0], r["properties"].get("key")) for r in log["runs"][0]["results"]}
    assert ("apiserver", "gpu-stack:operands.devicePlugin.env") in located
    assert ("kubernetes-schema", "gpu-stack:operands.devicePlugin.resources") in located
    env_line = line_of(path, "env:", after="    devicePlugin:")
    assert {r["locations"][0]["physicalLocation"]["region"]["startLine"] for r in log["runs"][0]["results"]
            if r["properties"].get("key") == "gpu-stack:operands.devicePlugin.env"} == {env_line}


def test_a_key_left_at_its_default_is_reported_where_it_would_be_written():
    lines = KeyLines.of_text("config:\n  gpu-stack:upgrade:\n    waves: []\n  gpu-stack:nodePools:\n    - name: a\n    - name: b\n")
    assert lines.nearest("gpu-stack:upgrade.maxUnavailable").key == "gpu-stack:upgrade"
    assert lines.locate(["gpu-stack:nodePools[].sharing.replicas"], [], ["b"]).key == "gpu-stack:nodePools[1]"
    assert lines.locate(["gpu-stack:nodePools[].sharing.replicas"], [], ["no-such-pool"]) is None
    # the key a finding says to change beats a written key that only decides it: the annotation goes where the
    # reviewer adds the missing key, with the message saying its default applies
    assert lines.locate(["gpu-stack:upgrade.maxUnavailable"], ["gpu-stack:upgrade.waves"], []).key == "gpu-stack:upgrade"
    assert lines.locate([], ["gpu-stack:upgrade.maxUnavailable", "gpu-stack:upgrade.waves"], []).key == "gpu-stack:upgrade.waves"
    finding = findings.Finding("policy/upgrade-safety", "error", "budget", "s", keys=("gpu-stack:upgrade.maxUnavailable",))
    index = {rule["id"]: i for i, rule in enumerate(sarif.rules())}
    message = sarif.result(finding, Path("Pulumi.s.yaml"), lines, index)["message"]["text"]
    assert message.endswith("(gpu-stack:upgrade.maxUnavailable is not set in this file: its default applies)")
    assert lines.nearest("gpu-stack:dra.featureGates") is None


def _schema_has(key: str) -> bool:
    """Whether the stack file's JSON schema (docs/stack.schema.json) has the key path."""
    top, _, rest = key.partition(".")
    nodes = [STACK_SCHEMA["properties"]["config"]["properties"].get(top.replace("[]", ""))]
    parts = (["[]"] if top.endswith("[]") else []) + [p for p in rest.replace("[]", ".[]").split(".") if p]
    for part in parts:
        expanded = []
        for node in nodes:
            if node is None:
                continue
            expanded += [node] + [alt for k in ("anyOf", "oneOf") for alt in node.get(k, [])]
        nodes = [n.get("items") if part == "[]" else (n.get("properties") or {}).get(part) for n in expanded]
    return any(n is not None for n in nodes)


def test_every_policy_and_state_names_keys_the_stack_file_has():
    assert set(findings.POLICY_KEYS) == {p.name for p in pack_policies()}
    assert set(findings.STATE_KEYS) == set(STATE_NAMES)
    keys = {k for ks in [*findings.POLICY_KEYS.values(), *findings.STATE_KEYS.values()] for k in ks}
    assert [k for k in sorted(keys) if not _schema_has(k)] == []
    assert not _schema_has("gpu-stack:upgrade.noSuchKey") and not _schema_has("gpu-stack:nodePools[].noSuchKey")


def test_the_rules_are_every_check_with_the_pack_levels_and_severities():
    rules = {rule["id"]: rule for rule in sarif.rules()}
    assert {f"apiserver/{rule_id}" for rule_id in API_RULES} <= set(rules)
    for policy in pack_policies():
        rule = rules[f"policy/{policy.name}"]
        assert rule["defaultConfiguration"]["level"] == {"mandatory": "error", "advisory": "warning"}[policy.enforcement_level.value]
        severity = policy.description.split("]", 1)[0]
        assert ("security" in rule["properties"]["tags"]) == severity.endswith(": security")
    assert rules["policy/rbac-least-privilege"]["properties"]["security-severity"] == "8.0"
