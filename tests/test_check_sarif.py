"""`gpustack check --format sarif`: one SARIF 2.1.0 log that GitHub code scanning accepts, each finding at the line
and column of the stack-file key that causes it; exit codes and the people's summary lines as the text format's."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from sarif import loader as sarif_loader

import gpustack.__main__ as cli
from gpustack import checking, findings, render, sarif
from gpustack.apiserver.engine import RULES as API_RULES, ApiProblem
from gpustack.keylines import KeyLines
from gpustack.policyrun import pack_policies
from gpustack.schema import SchemaProblem
from gpustack.sourcemap import Cause
from stacktest import ROOT, objects, per_stack, render_stack

LEVELS = {"none", "note", "warning", "error"}
# What the log's consumers validate it with: OASIS's schema and the one upload-sarif uses (tests/fixtures/sarif).
SARIF_SCHEMAS = {name: json.loads((ROOT / "tests" / "fixtures" / "sarif" / f"{name}-sarif-schema-2.1.0.json").read_text())
                 for name in ("oasis", "codeql-action")}


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
    """The log valid under both SARIF schemas, what GitHub code scanning requires of an uploaded SARIF file (a full
    region, start and end line and column, on every result; one result per rule and line), then a read through
    sarif-tools."""
    for name, schema in SARIF_SCHEMAS.items():
        errors = list(jsonschema.validators.validator_for(schema)(schema).iter_errors(log))
        assert not errors, f"{name}: {[e.message for e in errors[:3]]}"
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    (run,) = log["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "gpu-stack" and driver["version"] and driver["informationUri"].split(":")[0] in ("https", "file")
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
        region = physical["region"]
        assert physical["artifactLocation"]["uri"] and set(region) == {"startLine", "startColumn", "endLine", "endColumn"}
        assert region["startLine"] >= 1 and (region["endLine"], region["endColumn"]) > (region["startLine"], region["startColumn"])
        assert result["partialFingerprints"][sarif.FINGERPRINT]
    lines = [(r["ruleId"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
              json.dumps(r["locations"][0]["physicalLocation"]["region"], sort_keys=True)) for r in run["results"]]
    assert len(lines) == len(set(lines)), "two results of one rule on one line"
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


def _only(log: dict[str, Any]) -> dict[str, Any]:
    (result,) = log["runs"][0]["results"]
    return result


def test_a_fingerprint_survives_lines_added_above_the_finding():
    text = (ROOT / "stacks" / "Pulumi.prod-managed.yaml").read_text()
    finding = findings.Finding("policy/sharing-sane", "error", "40 replicas, outside 2..8", "prod-managed",
                               cause=Cause("gpu-stack:nodePools[1].sharing.replicas"),
                               object="ConfigMap gpu-operator/nvidia-device-plugin-configs")
    path = ROOT / "stacks" / "Pulumi.prod-managed.yaml"
    before = _only(sarif.log([(finding, path, KeyLines.of_text(text))]))
    after = _only(sarif.log([(finding, path, KeyLines.of_text("# reviewed in PR 123\n# and again\n" + text))]))
    line = before["locations"][0]["physicalLocation"]["region"]["startLine"]
    assert line == line_of(path, "replicas: 4", after="- name: inference-l4")
    assert after["locations"][0]["physicalLocation"]["region"]["startLine"] == line + 2
    assert after["partialFingerprints"] == before["partialFingerprints"]
    # another pool's replicas is another finding
    other = findings.Finding(**{**finding.__dict__, "cause": Cause("gpu-stack:nodePools[0].sharing.replicas")})
    assert _only(sarif.log([(other, path, KeyLines.of_text(text))]))["partialFingerprints"] != before["partialFingerprints"]


def test_findings_of_one_rule_on_one_line_are_one_result_listing_each_object(tmp_path):
    path = ROOT / "stacks" / "Pulumi.prod-managed.yaml"
    lines = KeyLines.of_file(path)
    cause = Cause("gpu-stack:upgrade.maxUnavailable")
    one, two = ("DaemonSet gpu-operator/nvidia-driver-daemonset-canary", "DaemonSet gpu-operator/nvidia-driver-daemonset-training")
    log = sarif.log([(findings.Finding("policy/upgrade-safety", "warning", f"{obj}: too wide", "prod-managed", cause, obj), path, lines)
                     for obj in (one, two)])
    result = _only(log)
    assert result["properties"]["objects"] == [one, two]
    assert result["message"]["text"] == f"{one}: too wide (also on {two})"
    # a third object with another message: each message listed
    third = findings.Finding("policy/upgrade-safety", "error", "the budget: too wide", "prod-managed", cause)
    merged = _only(sarif.log([(findings.Finding("policy/upgrade-safety", "warning", f"{obj}: too wide", "prod-managed", cause, obj), path, lines)
                              for obj in (one, two)] + [(third, path, lines)]))
    assert merged["level"] == "error" and merged["message"]["text"].splitlines()[0] == f"2 objects: {one}, {two}."
    assert_code_scanning_accepts(log, tmp_path)


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
    # the whole line where the parser stopped: code scanning wants start and end line and column
    region = result["locations"][0]["physicalLocation"]["region"]
    line = path.read_text().splitlines()[region["startLine"] - 1]
    assert result["ruleId"] == "stack-file" and region["startLine"] >= 3
    assert region == {"startLine": region["startLine"], "startColumn": 1, "endLine": region["startLine"], "endColumn": len(line) + 1}
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith("Pulumi.broken.yaml")
    assert_code_scanning_accepts(log, tmp_path)


EXTRA_VOLUME = ("    extraVolumes:\n      - name: vendor-tools\n        mountPath: /opt/vendor\n        hostPath:\n"
                "          path: /opt/vendor-tools\n")


@pytest.mark.parametrize("stack, anchor, edit", [
    # prod-managed writes gpu-stack:driver already; dev does not, and gets the block
    ("prod-managed", "    kernelModuleType: open\n", "    kernelModuleType: open\n" + EXTRA_VOLUME),
    ("dev", "  gpu-stack:nodeAgent:\n", "  gpu-stack:driver:\n" + EXTRA_VOLUME + "  gpu-stack:nodeAgent:\n"),
])
def test_a_host_path_added_through_extra_volumes_is_annotated_on_its_own_line(stack, anchor, edit, tmp_path, capsys):
    path = edited(tmp_path, stack, (anchor, edit))
    code, log, err = check(capsys, str(path))
    assert code == cli.EXIT_VIOLATION
    assert_code_scanning_accepts(log, tmp_path)
    (result,) = [r for r in log["runs"][0]["results"] if r["ruleId"] == "policy/privileged-only-where-needed"]
    line = line_of(path, "path: /opt/vendor-tools")
    assert result["locations"][0]["physicalLocation"]["region"] == {"startLine": line, "startColumn": 11, "endLine": line, "endColumn": 15}
    assert result["properties"]["key"] == "gpu-stack:driver.extraVolumes[0].hostPath.path"
    # every driver DaemonSet mounting it, in one result (prod-managed has one per pool)
    drivers = [f"DaemonSet gpu-operator/{d['metadata']['name']}" for d in objects(render_stack(stack), "DaemonSet").values()
               if d["metadata"]["name"].startswith("nvidia-driver-daemonset")]
    assert sorted(result["properties"]["objects"]) == sorted(drivers) and len(drivers) == {"prod-managed": 2, "dev": 1}[stack]


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
    plugin = next(r for r in recording.registrations if r.inputs.get("kind") == "DaemonSet"
                  and r.inputs["metadata"]["name"] == "nvidia-device-plugin-daemonset")
    names = [e["name"] for e in plugin.inputs["spec"]["template"]["spec"]["containers"][0]["env"]]
    at = names.index("FAIL_ON_INIT_ERROR")

    env = findings.api_finding("prod-managed", ApiProblem(
        "DaemonSet", "nvidia-device-plugin-daemonset", "gpu-operator", f"spec.template.spec.containers[0].env[{at}].name",
        "env-var-name", "validation.ValidateEnv", "a valid environment variable name must ..."), index)
    assert env.cause == Cause("gpu-stack:operands.devicePlugin.env[0].name")
    assert lines.locate(env.cause)[0].line == line_of(path, "- name: FAIL_ON_INIT_ERROR")
    # the whole variable: the override's entry
    whole = findings.api_finding("prod-managed", ApiProblem(
        "DaemonSet", "nvidia-device-plugin-daemonset", "gpu-operator", f"spec.template.spec.containers[0].env[{at}]",
        "env-var-name", "validation.ValidateEnv", "..."), index)
    assert whole.cause == Cause("gpu-stack:operands.devicePlugin.env[0]")

    limits = findings.schema_finding("prod-managed", SchemaProblem(
        "1.33", "DaemonSet", "nvidia-dcgm-exporter", "spec.template.spec.containers.0.resources.limits: ...",
        "/spec/template/spec/containers/0/resources/limits"), index)
    assert lines.locate(limits.cause)[0].key == "gpu-stack:operands.dcgmExporter.resources.limits"

    # a driver DaemonSet's field no key sets lands on the pool that decides the DaemonSet, and says so
    driver = findings.schema_finding("prod-managed", SchemaProblem(
        "1.33", "DaemonSet", "nvidia-driver-daemonset-canary", "spec.template.spec.volumes.3: ...", "/spec/template/spec/volumes/3"), index)
    assert driver.cause == Cause("gpu-stack:nodePools[1]", decides=True)
    position, note = lines.locate(driver.cause)
    assert position.line == line_of(path, "- name: inference-l4")
    assert note == "no stack key sets this field; gpu-stack:nodePools[1] decides the object"


def test_a_field_no_key_sets_is_annotated_at_what_decides_its_object_or_the_file(monkeypatch, tmp_path, capsys):
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
    results = {r["ruleId"].split("/")[0]: r for r in log["runs"][0]["results"]}
    # the misspelt field sits in the resources the override sets
    assert results["kubernetes-schema"]["properties"]["key"] == "gpu-stack:operands.devicePlugin.resources"
    # the added variable comes from no key: components.devicePlugin decides the DaemonSet, and prod-managed leaves
    # it (and all of gpu-stack:components) at its default, so the annotation is the file's first line
    refused = results["apiserver"]
    assert "key" not in refused["properties"] and refused["locations"][0]["physicalLocation"]["region"]["startLine"] == 1
    assert refused["message"]["text"].endswith("(no stack key sets this field; gpu-stack:components.devicePlugin decides the "
                                               "object and is not set in this file: its default applies)")


def test_a_key_left_at_its_default_is_reported_where_it_would_be_written():
    lines = KeyLines.of_text("config:\n  gpu-stack:upgrade:\n    waves: []\n  gpu-stack:nodePools:\n    - name: a\n    - name: b\n")
    assert lines.nearest("gpu-stack:upgrade.maxUnavailable").key == "gpu-stack:upgrade"
    position, note = lines.locate(Cause("gpu-stack:upgrade.maxUnavailable"))
    assert position.key == "gpu-stack:upgrade" and note == "gpu-stack:upgrade.maxUnavailable is not set in this file: its default applies"
    assert lines.locate(Cause("gpu-stack:nodePools[1].sharing.replicas"))[0].key == "gpu-stack:nodePools[1]"
    assert lines.locate(Cause("gpu-stack:dra.featureGates")) == (None, "")
    finding = findings.Finding("policy/upgrade-safety", "error", "budget", "s", cause=Cause("gpu-stack:upgrade.maxUnavailable"))
    message = _only(sarif.log([(finding, Path("Pulumi.s.yaml"), lines)]))["message"]["text"]
    assert message.endswith("(gpu-stack:upgrade.maxUnavailable is not set in this file: its default applies)")
    # a key that decides the object, left at its default
    position, note = lines.locate(Cause("gpu-stack:upgrade.waves[0]", decides=True))
    assert position.key == "gpu-stack:upgrade.waves" and note.startswith("no stack key sets this field; gpu-stack:upgrade.waves[0] decides")


def test_every_policy_reports_the_field_it_judges(tmp_path):
    """Violations reach check with the field each policy judged (gpu_stack_policies.fields.report_at), never by
    a reading of the message: no policy module calls the engine's `report` itself."""
    pack = ROOT / "policies" / "gpu_stack_policies"
    direct = [f"{p.name}:{n}" for p in sorted(pack.glob("*.py")) if p.name != "fields.py"
              for n, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"(?<![\w.])report\(f?[\"']", line)]
    assert direct == []
    path = edited(tmp_path, "prod-managed", ("maxUnavailable: 2", "maxUnavailable: 50%"), ("replicas: 4", "replicas: 40"))
    _, _, violations = checking.evaluate(str(path), preview=False)
    assert {(v.policy, v.field) for v in violations} == {
        ("upgrade-safety", "/data/node-pools.json#/removal/maxUnavailable"),
        ("sharing-sane", "/data/inference-l4#/sharing/timeSlicing/resources/0/replicas"),
    }


def test_the_program_and_the_pack_name_the_apply_order_alike():
    from components.kit import sources
    from gpustack.policyrun import _import_pack

    assert sources.DEPENDENCIES == _import_pack().fields.DEPENDENCIES
    assert sources.NODE_BOUND == _import_pack().fields.NODE_BOUND


def test_the_rules_are_every_check_with_the_pack_levels_and_severities():
    rules = {rule["id"]: rule for rule in sarif.rules()}
    assert {f"apiserver/{rule_id}" for rule_id in API_RULES} <= set(rules)
    for policy in pack_policies():
        rule = rules[f"policy/{policy.name}"]
        assert rule["defaultConfiguration"]["level"] == {"mandatory": "error", "advisory": "warning"}[policy.enforcement_level.value]
        severity = policy.description.split("]", 1)[0]
        assert ("security" in rule["properties"]["tags"]) == severity.endswith(": security")
    assert rules["policy/rbac-least-privilege"]["properties"]["security-severity"] == "8.0"
