"""`python -m gpustack render|check`: files, exit codes, apply order, policy wiring, strict schemas."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from pulumi_policy import EnforcementLevel, ResourceValidationPolicy, StackValidationPolicy

import gpustack.__main__ as cli
from gpustack import checking, schema
from gpustack.policyrun import run_policies
from gpustack.render import apply_order, effective_dependencies, kubernetes_object
from stacktest import ROOT, STACKS, per_stack, render_stack, stack_document


def write_stack(tmp_path: Path, name: str, config: dict) -> Path:
    path = tmp_path / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return path


# `.ci/run` also runs `check` on every stack (make check-stacks); here two stacks exercise the plumbing.
# One stack through the CLI in `make test` (CI's check-stacks runs the CLI on every stack); dev too in test-all.
CLI_STACKS = ("prod-precompiled",)


@pytest.mark.parametrize("stack", per_stack(keep=CLI_STACKS))
def test_render_writes_manifests_graph_and_policy_report(stack, tmp_path, capsys):
    assert cli.main(["render", "--stack", stack, "--out", str(tmp_path)]) == cli.EXIT_OK
    documents = list(yaml.safe_load_all((tmp_path / "manifests.yaml").read_text()))
    assert documents and all({"apiVersion", "kind", "metadata"} <= set(d) for d in documents)
    graph = json.loads((tmp_path / "graph.json").read_text())
    assert set(graph) == {"resources"}
    for resource in graph["resources"]:
        assert set(resource) == {"urn", "type", "name", "parent", "dependencies", "custom", "awaited"}
    awaited = {r["name"]: r["awaited"] for r in graph["resources"] if r["type"] == "kubernetes:apps/v1:DaemonSet"}
    assert awaited and not any(awaited.values())
    jobs = [r for r in graph["resources"] if r["type"] == "kubernetes:batch/v1:Job"]
    assert all(j["awaited"] for j in jobs)  # the validation gate is the one thing `up` waits for
    assert json.loads((tmp_path / "policy.json").read_text()) == {"violations": []}


def test_manifests_list_each_object_after_everything_it_depends_on():
    recording = render_stack("prod-managed")
    order = [r.urn for r in apply_order(recording)]
    position = {urn: i for i, urn in enumerate(order)}
    deps = effective_dependencies(recording)
    for urn in order:
        for dep in deps[urn]:
            if dep in position:
                assert position[dep] < position[urn]
    kinds = [kubernetes_object(r)["kind"] for r in apply_order(recording)]
    assert kinds.index("Namespace") < kinds.index("DaemonSet")


def test_invalid_config_exits_2_names_the_key_and_writes_nothing(tmp_path, capsys):
    config = stack_document("dev")["config"]
    config["gpu-stack:driver"] = {"mode": "operator"}
    out = tmp_path / "out"
    code = cli.main(["render", "--stack", str(write_stack(tmp_path, "broken", config)), "--out", str(out)])
    assert code == cli.EXIT_CONFIG
    assert "gpu-stack:driver.mode" in capsys.readouterr().err
    assert not out.exists()


def test_check_exits_2_on_a_missing_stack(capsys):
    assert cli.main(["check", "--stack", "no-such-stack"]) == cli.EXIT_CONFIG
    assert "does not exist" in capsys.readouterr().err


def test_check_exits_2_on_yaml_that_is_not_a_stack(tmp_path, capsys):
    path = tmp_path / "Pulumi.bad.yaml"
    path.write_text("config: [unclosed")
    assert cli.main(["check", "--stack", str(path)]) == cli.EXIT_CONFIG
    assert "not valid YAML" in capsys.readouterr().err


@pytest.mark.parametrize("stack", per_stack(keep=CLI_STACKS))
def test_check_passes_every_stack(stack, capsys):
    assert cli.main(["check", "--stack", stack]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert f"{stack}: PASS" in out and "DaemonSet" in out


def test_check_takes_several_stacks_and_fails_if_any_fails(monkeypatch, capsys):
    assert cli.main(["check", "--stack", "dev", "--stack", "dev"]) == cli.EXIT_OK
    assert capsys.readouterr().out.count("dev: PASS") == 2
    verdicts = {"dev": cli.EXIT_OK, "prod-managed": cli.EXIT_VIOLATION}
    monkeypatch.setattr(cli, "check_one", lambda stack, args: stack)
    monkeypatch.setattr(cli, "_print_checked", verdicts.get)
    assert cli.main(["check", "--stack", "prod-managed", "--stack", "dev"]) == cli.EXIT_VIOLATION


def _no_latest_images(args, report):
    if args.resource_type == "kubernetes:apps/v1:DaemonSet":
        for c in args.props["spec"]["template"]["spec"]["containers"]:
            if c["image"].endswith(":v0.20.0"):
                report(f"{c['name']} uses v0.20.0")


def test_a_mandatory_violation_exits_1_and_lands_in_policy_json(tmp_path, monkeypatch):
    policy = ResourceValidationPolicy("no-v0-20", "test policy", _no_latest_images, EnforcementLevel.MANDATORY)
    monkeypatch.setattr(checking, "pack_policies", lambda: [policy])
    assert cli.main(["render", "--stack", "dev", "--out", str(tmp_path)]) == cli.EXIT_VIOLATION
    violations = json.loads((tmp_path / "policy.json").read_text())["violations"]
    assert violations and violations[0]["policy"] == "no-v0-20" and violations[0]["enforcement"] == "mandatory"
    assert "nvidia-device-plugin-daemonset" in violations[0]["urn"]


def test_advisory_violations_are_reported_but_do_not_fail(tmp_path, monkeypatch):
    policy = ResourceValidationPolicy("no-v0-20", "test policy", _no_latest_images, EnforcementLevel.ADVISORY)
    monkeypatch.setattr(checking, "pack_policies", lambda: [policy])
    assert cli.main(["check", "--stack", "dev"]) == cli.EXIT_OK


def test_stack_config_overrides_a_policys_level_and_can_disable_it():
    policy = ResourceValidationPolicy("no-v0-20", "test policy", _no_latest_images, EnforcementLevel.ADVISORY)
    recording = render_stack("dev")
    assert run_policies(recording, [policy], {"no-v0-20": "mandatory"})[0].enforcement == "mandatory"
    assert run_policies(recording, [policy], {"all": {"enforcementLevel": "disabled"}}) == []


def test_stack_policies_see_parents_and_dependencies():
    seen = {}

    def validate(args, report):
        ds = next(r for r in args.resources if r.name == "nvidia-device-plugin-daemonset")
        seen["parent"] = ds.parent.name
        seen["deps"] = {d.name for d in ds.dependencies}
        report("checked", ds.urn)

    policy = StackValidationPolicy("look", "test stack policy", validate, EnforcementLevel.ADVISORY)
    violations = run_policies(render_stack("prod-managed"), [policy])
    assert seen["parent"] == "state-device-plugin" and "nvidia-operator-validator" in seen["deps"]
    assert violations[0].urn.endswith("nvidia-device-plugin-daemonset")


def test_the_shipped_pack_loads_without_starting_a_server():
    assert isinstance(checking.pack_policies(), list)
    assert (ROOT / "policies" / "PulumiPolicy.yaml").is_file()


def test_strict_schema_rejects_an_unknown_field():
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "nmespace": "y"}, "data": {}}
    problems = schema.validate(obj, "1.33")
    assert problems and "nmespace" in problems[0].message


def test_strict_schema_rejects_a_wrong_type():
    obj = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "x"}, "handler": 3}
    assert schema.validate(obj, "1.25")


def test_validators_are_compiled_once_per_kind_and_version():
    schema.validator.cache_clear()
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {}}
    for _ in range(5):
        schema.validate(obj, "1.33")
    assert schema.validator.cache_info().misses == 1
