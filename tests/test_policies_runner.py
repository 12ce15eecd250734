"""The pack as a whole: layout, per-stack configs, the analyzer path that `check` and `render` run it through,
config validation, and a broken stack's policy.json."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    PolicyCustomTimeouts,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationPolicy,
)

import gpustack.__main__ as cli
from gpustack.policyrun import PolicyConfigError, config_path, has_mandatory, pack_config, pack_policies, run_policies
from stacktest import ROOT, STACKS, per_stack, render_stack, stack_document

POLICIES = {p.name: p for p in pack_policies()}
LEVELS = ("disabled", "advisory", "mandatory")


def policy_levels(stack: str) -> dict[str, str]:
    """Each policy's effective level for a stack, as the analyzer reports it."""
    levels = {}
    for name, entry in pack_config(stack).items():
        level = entry.get("enforcementLevel") if isinstance(entry, dict) else entry
        if level:
            levels[name] = level
    return {name: levels.get(name, (p.enforcement_level or EnforcementLevel.ADVISORY).value) for name, p in POLICIES.items()}


# --- layout --------------------------------------------------------------------------------------------------


def test_the_pack_has_the_layout_the_pulumi_cli_loads():
    policy_dir = ROOT / "policies"
    assert yaml.safe_load((policy_dir / "PulumiPolicy.yaml").read_text())["runtime"]["name"] == "python"
    main = (policy_dir / "__main__.py").read_text()
    assert "PolicyPack(" in main and "def " not in main  # it only builds the pack
    pins = dict(line.split("==") for line in (ROOT / "requirements.txt").read_text().splitlines() if "==" in line)
    for line in (policy_dir / "requirements.txt").read_text().splitlines():
        if "==" in line:
            package, version = line.split("==")
            assert pins[package] == version, f"policies/requirements.txt pins {package} {version}, the program {pins[package]}"


def test_the_pack_imports_without_pulumi_kubernetes_or_pydantic():
    """Under the CLI the pack has its own virtualenv: pulumi, pulumi-policy and PyYAML only."""
    probe = (
        "import sys, gpu_stack_policies; "
        "print(sorted(m for m in ('pulumi_kubernetes', 'pydantic', 'gpustack', 'components.config') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT / "policies", capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_every_policy_has_a_unique_name_a_level_and_a_schema_with_defaults_that_validate():
    assert len(POLICIES) == len(pack_policies())
    assert {
        "one-workload-type-per-node", "state-order", "mig-layout-fits-gpu", "images-pinned", "privileged-only-where-needed",
        "rbac-least-privilege", "cdi-consistency", "sharing-sane", "gpu-quota",
    } <= set(POLICIES)
    for policy in POLICIES.values():
        assert policy.enforcement_level in (EnforcementLevel.ADVISORY, EnforcementLevel.MANDATORY)
        for key, schema in (policy.config_schema.properties if policy.config_schema else {}).items():
            assert "description" in schema and key != "enforcementLevel"


# --- per-stack configs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", per_stack())
def test_every_stack_has_a_policy_config_and_passes_it(stack):
    assert config_path(stack).is_file(), f"add policies/config/{stack}.json (the stack's --policy-pack-config)"
    found = run_policies(render_stack(stack), pack_policies(), pack_config(stack))
    assert not has_mandatory(found), [v.message for v in found]


def test_prod_is_stricter_than_dev():
    dev, prod = policy_levels("dev"), policy_levels("prod-managed")
    assert all(LEVELS.index(prod[name]) >= LEVELS.index(dev[name]) for name in POLICIES)
    assert {"images-pinned", "sharing-sane"} <= {name for name in POLICIES if prod[name] != dev[name]}
    dev_sharing, prod_sharing = pack_config("dev"), pack_config("prod-managed")["sharing-sane"]
    assert isinstance(dev_sharing["sharing-sane"], str)  # dev keeps the schema's bounds
    schema = POLICIES["sharing-sane"].config_schema.properties
    assert prod_sharing["maxTimeSlicingReplicas"] < schema["maxTimeSlicingReplicas"]["default"]
    assert prod_sharing["maxMpsReplicas"] < schema["maxMpsReplicas"]["default"]


# --- the analyzer path ---------------------------------------------------------------------------------------


def test_policies_run_through_pulumi_policys_analyzer(monkeypatch):
    from pulumi_policy.policy import _PolicyAnalyzerServicer

    calls = {"Configure": 0, "Analyze": 0, "AnalyzeStack": 0}
    for method in calls:
        original = getattr(_PolicyAnalyzerServicer, method)

        def counting(self, request, context, _original=original, _method=method):
            calls[_method] += 1
            return _original(self, request, context)

        monkeypatch.setattr(_PolicyAnalyzerServicer, method, counting)
    recording = render_stack("dev")
    run_policies(recording, pack_policies(), pack_config("dev"))
    assert calls == {"Configure": 1, "Analyze": len(recording.registrations), "AnalyzeStack": 1}


def test_the_analyzer_and_a_direct_call_report_the_same_violation():
    recording = copy.deepcopy(render_stack("dev"))
    labeller = next(r for r in recording.registrations if r.name == "gpu-stack-node-labeler" and r.inputs.get("kind") == "DaemonSet")
    labeller.inputs["spec"]["template"]["spec"]["hostPID"] = True
    policy = POLICIES["privileged-only-where-needed"]
    through_analyzer = [v for v in run_policies(recording, [policy]) if v.urn == labeller.urn]

    direct: list[str] = []
    options = PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [], labeller.parent)
    args = ResourceValidationArgs(labeller.type, labeller.inputs, labeller.urn, labeller.name, options, None, {"gpuNamespace": "gpu-operator"})
    policy.validate(args, lambda message, urn=None: direct.append(message))
    assert [v.message for v in through_analyzer] == direct and len(direct) == 1
    assert through_analyzer[0].enforcement == "mandatory" and not direct[0].startswith(policy.description)


def _reporting(name: str, level: EnforcementLevel, **kwargs) -> ResourceValidationPolicy:
    def validate(args, report):
        if args.resource_type == "kubernetes:core/v1:Namespace":
            report(f"seen with {dict(args.get_config())}")

    return ResourceValidationPolicy(name, "test policy", validate, level, **kwargs)


def test_schema_defaults_reach_the_policy_and_config_overrides_them():
    schema = PolicyConfigSchema({"limit": {"type": "integer", "default": 3}})
    policy = _reporting("configured", EnforcementLevel.ADVISORY, config_schema=schema)
    recording = render_stack("dev")
    assert "{'limit': 3.0}" in run_policies(recording, [policy])[0].message
    assert "{'limit': 5.0}" in run_policies(recording, [policy], {"configured": {"limit": 5}})[0].message


def test_levels_follow_the_engine_all_then_each_policy_and_remediate_reports_as_mandatory():
    recording = render_stack("dev")
    advisory = _reporting("mine", EnforcementLevel.ADVISORY)
    assert run_policies(recording, [advisory])[0].enforcement == "advisory"
    assert run_policies(recording, [advisory], {"all": "mandatory"})[0].enforcement == "mandatory"
    assert run_policies(recording, [advisory], {"all": "disabled", "mine": "advisory"})[0].enforcement == "advisory"
    assert run_policies(recording, [advisory], {"mine": {"enforcementLevel": "disabled"}}) == []
    assert run_policies(recording, [advisory], {"mine": "remediate"})[0].enforcement == "mandatory"


def test_not_applicable_policies_report_nothing():
    def skip(args, report):
        args.not_applicable("nothing to check")
        report("never reached")

    policies = [
        ResourceValidationPolicy("skips", "test", skip, EnforcementLevel.MANDATORY),
        StackValidationPolicy("skips-stack", "test", skip, EnforcementLevel.MANDATORY),
    ]
    assert run_policies(render_stack("dev"), policies) == []


def test_an_unknown_value_during_preview_is_an_advisory_note_not_a_violation():
    recording = copy.deepcopy(render_stack("dev"))
    unknown = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"  # the engine's marker for a value known only after apply
    namespace = next(r for r in recording.registrations if r.inputs.get("kind") == "Namespace")
    namespace.inputs["metadata"]["name"] = unknown

    def reads_name(args, report):
        if args.resource_type == "kubernetes:core/v1:Namespace":
            report(args.props["metadata"]["name"])

    found = run_policies(recording, [ResourceValidationPolicy("reads", "test", reads_name, EnforcementLevel.MANDATORY)])
    assert [(v.enforcement, v.urn) for v in found] == [("advisory", namespace.urn)]
    assert "can't run policy 'reads'" in found[0].message and "during preview" in found[0].message


# --- config validation ---------------------------------------------------------------------------------------

BAD_VALUES = [
    ("one-workload-type-per-node", "workloadAgnosticDaemonSets", "gpu-stack-node-labeler", "is not of type 'array'"),
    ("one-workload-type-per-node", "workloadAgnosticDaemonSets", ["Node_Labeler"], "does not match"),
    ("one-workload-type-per-node", "workloadAgnosticDaemonSets", ["a", "a"], "non-unique"),
    ("images-pinned", "allowedRegistries", [], "should be non-empty"),
    ("images-pinned", "allowedRegistries", ["https://nvcr.io"], "does not match"),
    ("images-pinned", "allowedRegistries", "nvcr.io", "is not of type 'array'"),
    ("privileged-only-where-needed", "gpuNamespace", "GPU_Operator", "does not match"),
    ("privileged-only-where-needed", "gpuNamespace", 5, "is not of type 'string'"),
    ("privileged-only-where-needed", "gpuNamespace", "a" * 64, "is too long"),
    ("privileged-only-where-needed", "additionalHostPaths", {"nvidia-dcgm-exporter": ["etc"]}, "does not match"),
    ("privileged-only-where-needed", "additionalHostPaths", {"gpu-stack-node-labeler": ["/etc"]}, "is not one of"),
    ("privileged-only-where-needed", "additionalHostPaths", {"nvidia-dcgm-exporter": "/etc"}, "is not of type 'array'"),
    ("sharing-sane", "maxTimeSlicingReplicas", 1, "is less than the minimum of 2"),
    ("sharing-sane", "maxTimeSlicingReplicas", 65, "is greater than the maximum of 64"),
    ("sharing-sane", "maxTimeSlicingReplicas", 8.5, "is not of type 'integer'"),
    ("sharing-sane", "maxTimeSlicingReplicas", "8", "is not of type 'integer'"),
    ("sharing-sane", "maxMpsReplicas", 49, "is greater than the maximum of 48"),
    ("sharing-sane", "maxMpsReplicas", True, "is not of type 'integer'"),
    ("gpu-quota", "externallyManagedQuotaNamespaces", "team-a", "is not of type 'array'"),
    ("gpu-quota", "externallyManagedQuotaNamespaces", ["Team-A"], "does not match"),
    ("upgrade-safety", "maxUnavailablePercent", 0, "is less than the minimum of 1"),
    ("upgrade-safety", "maxUnavailablePercent", 101, "is greater than the maximum of 100"),
    ("upgrade-safety", "maxUnavailablePercent", "25%", "is not of type 'integer'"),
    ("upgrade-safety", "maxUnavailableCount", 0, "is less than the minimum of 1"),
    ("upgrade-safety", "maxUnavailableCount", 2.5, "is not of type 'integer'"),
]


@pytest.mark.parametrize("policy, key, value, problem", BAD_VALUES, ids=[f"{p}.{k}={v!r}"[:60] for p, k, v, _ in BAD_VALUES])
def test_bad_config_values_are_refused_with_the_policy_and_key(policy, key, value, problem):
    with pytest.raises(PolicyConfigError) as error:
        run_policies(render_stack("dev"), [POLICIES[policy]], {policy: {key: value}})
    assert f"{policy}.{key}" in str(error.value) or f"{policy}: " in str(error.value)
    assert problem in str(error.value)


def test_unknown_keys_and_levels_are_refused():
    recording = render_stack("dev")
    with pytest.raises(PolicyConfigError, match="images-pinned: unknown key 'allowedRegistry'"):
        run_policies(recording, [POLICIES["images-pinned"]], {"images-pinned": {"allowedRegistry": ["nvcr.io"]}})
    with pytest.raises(PolicyConfigError, match="enforcement level 'strict' is not one of"):
        run_policies(recording, [POLICIES["images-pinned"]], {"images-pinned": "strict"})
    with pytest.raises(PolicyConfigError, match="state-order: unknown key 'depth'"):
        run_policies(recording, [POLICIES["state-order"]], {"state-order": {"depth": 2}})


def test_a_stack_config_naming_a_policy_the_pack_lacks_is_refused(tmp_path):
    path = tmp_path / "dev.json"
    path.write_text(json.dumps({"image-pinned": "mandatory"}))
    with pytest.raises(PolicyConfigError, match="the pack has no policy image-pinned"):
        pack_config("dev", path=path)
    path.write_text("{not json")
    with pytest.raises(PolicyConfigError, match="not valid JSON"):
        pack_config("dev", path=path)


# --- the CLI -------------------------------------------------------------------------------------------------


def write_stack(tmp_path: Path, name: str, config: dict) -> Path:
    path = tmp_path / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return path


def broken_stack(tmp_path: Path) -> Path:
    """dev plus a VM pool that can claim the dev pool's nodes."""
    config = stack_document("dev")["config"]
    config["gpu-stack:nodePools"].append(
        {"name": "vm-pool", "nodeSelector": {"gpu-stack.dev/zone": "a"}, "gpuModel": "T4", "os": "ubuntu24.04", "workloadType": "vm-passthrough"}
    )
    return write_stack(tmp_path, "broken", config)


def test_render_of_a_broken_stack_lists_its_violations_in_policy_json(tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.main(["render", "--stack", str(broken_stack(tmp_path)), "--out", str(out)]) == cli.EXIT_VIOLATION
    violations = json.loads((out / "policy.json").read_text())["violations"]
    overlap = [v for v in violations if v["policy"] == "one-workload-type-per-node"]
    assert len(overlap) == 1 and overlap[0]["enforcement"] == "mandatory"
    assert overlap[0]["urn"].endswith("::gpu-stack-node-pools")
    message = overlap[0]["message"]
    assert "pools 'dev-gpu' (container" in message and "'vm-pool' (vm-passthrough" in message and "Fix:" in message
    assert "policy mandatory one-workload-type-per-node: ConfigMap gpu-operator/gpu-stack-node-pools" in capsys.readouterr().out


def test_check_takes_a_policy_config_and_exits_2_when_it_is_invalid(tmp_path, capsys):
    strict = tmp_path / "strict.json"
    strict.write_text(json.dumps({"images-pinned": {"enforcementLevel": "mandatory", "allowedRegistries": ["nvcr.io"]}}))
    assert cli.main(["check", "--stack", "dev", "--policy-config", str(strict)]) == cli.EXIT_VIOLATION
    assert "policy mandatory images-pinned" in capsys.readouterr().out

    invalid = tmp_path / "invalid.json"
    invalid.write_text(json.dumps({"sharing-sane": {"maxMpsReplicas": 100}}))
    out = tmp_path / "out"
    assert cli.main(["render", "--stack", "dev", "--out", str(out), "--policy-config", str(invalid)]) == cli.EXIT_CONFIG
    assert "sharing-sane.maxMpsReplicas: 100 is greater than the maximum of 48" in capsys.readouterr().err
    assert not out.exists()
    assert cli.main(["check", "--stack", "dev", "--policy-config", str(tmp_path / "missing.json")]) == cli.EXIT_CONFIG
