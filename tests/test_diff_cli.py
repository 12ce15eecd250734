"""`python -m gpustack diff`: the change-safety engine as a command for PR review, against a stack file or a git
ref of the repository (rendered by that commit's own program, in a process of its own)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

import gpustack.__main__ as cli
from gpustack import diff
from stacktest import ROOT, stack_document


def write_stack(path: Path, document: dict) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def edited_stack(tmp_path: Path, stack: str, edit) -> Path:
    document = stack_document(stack)
    edit(document["config"])
    return write_stack(tmp_path / f"Pulumi.{stack}.yaml", document)


def run(capsys, *args: str) -> tuple[int, str]:
    code = cli.main(["diff", *args])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_the_same_stack_changes_nothing(capsys):
    code, out = run(capsys, "--stack", "prod-managed", "--base", str(ROOT / "stacks" / "Pulumi.prod-managed.yaml"))
    assert code == 0 and "no changes" in out and "SAFE" in out


def test_renaming_a_wave_re_runs_the_stack_gate_and_is_safe(tmp_path, capsys):
    renamed = edited_stack(tmp_path, "prod-managed", lambda c: c["gpu-stack:upgrade"]["waves"][0].update(name="first"))
    code, out = run(capsys, "--stack", str(renamed), "--base", str(ROOT / "stacks" / "Pulumi.prod-managed.yaml"))
    assert code == 0
    assert "rerun   Job/gpu-operator/gpu-stack-validation" in out and "DaemonSet" not in out


def test_driver_daemonsets_rolling_in_one_wave_are_safe_under_the_one_budget(tmp_path, capsys):
    """Two driver DaemonSets of one wave change at once: the node agents replace their pods within the one fleet
    budget, so nothing adds up and nothing is dangerous."""
    switched = edited_stack(tmp_path, "prod-precompiled", lambda c: c["gpu-stack:driver"].update(kernelModuleType="auto"))
    code, out = run(capsys, "--stack", str(switched), "--base", str(ROOT / "stacks" / "Pulumi.prod-precompiled.yaml"))
    assert code == 0, out
    assert sum("update  DaemonSet/gpu-operator/nvidia-driver-daemonset" in line for line in out.splitlines()) >= 2
    assert "SAFE" in out and "!! dangerous" not in out


def test_a_new_cluster_name_replaces_every_object_and_is_refused_unless_allowed(tmp_path, capsys):
    renamed = edited_stack(tmp_path, "prod-managed", lambda c: c["gpu-stack:cluster"].update(name="prod-eu2"))
    base = str(ROOT / "stacks" / "Pulumi.prod-managed.yaml")
    code, out = run(capsys, "--stack", str(renamed), "--base", base)
    assert code == 1, out
    assert "dangerous [cluster-replaced]: the Kubernetes provider is replaced (clusterIdentifier prod-eu1 -> prod-eu2" in out
    assert "every object of the stack is replaced (deleted and re-created)" in out and "--allow cluster-replaced" in out
    code, out = run(capsys, "--stack", str(renamed), "--base", base, "--allow", "cluster-replaced")
    assert code == 0 and "allowed: cluster-replaced" in out


def test_a_renamed_pool_hands_its_nodes_to_a_new_daemonset_and_prints_urns(tmp_path, capsys):
    def rename(config: dict) -> None:
        pool = config["gpu-stack:nodePools"][0]
        pool["name"] = "train-a100"
        del pool["driver"]
        config["gpu-stack:upgrade"]["waves"][1]["pools"] = ["train-a100"]

    renamed = edited_stack(tmp_path, "prod-managed", rename)
    code, out = run(capsys, "--stack", str(renamed), "--base", str(ROOT / "stacks" / "Pulumi.prod-managed.yaml"), "--urns")
    assert code == 0, out
    assert "+ create  DaemonSet/gpu-operator/nvidia-driver-daemonset-train-a100 urn:pulumi:" in out
    assert "- delete  DaemonSet/gpu-operator/nvidia-driver-daemonset-training" in out


def test_a_stack_the_program_refuses_exits_2_naming_the_key(tmp_path, capsys):
    broken = edited_stack(tmp_path, "dev", lambda c: c["gpu-stack:daemonsets"].update(maxUnavailable="1") if "gpu-stack:daemonsets" in c else c.update({"gpu-stack:daemonsets": {"maxUnavailable": "1"}}))
    code, out = run(capsys, "--stack", str(broken), "--base", str(ROOT / "stacks" / "Pulumi.dev.yaml"))
    assert code == cli.EXIT_CONFIG and "gpu-stack:daemonsets.maxUnavailable" in out


def test_an_unknown_ref_exits_2_naming_it_and_the_way_out(capsys):
    """A fresh clone or a CI checkout of one branch has no origin/main: one line that says so and what to do."""
    code, out = run(capsys, "--stack", "dev", "--base", "origin/no-such-branch")
    assert (code, out) == (cli.EXIT_CONFIG, "no such commit: origin/no-such-branch; fetch it or pass a file\n")


def test_a_missing_base_file_is_named_as_a_file(capsys):
    code, out = run(capsys, "--stack", "dev", "--base", "stacks/Pulumi.no-such-stack.yaml")
    assert (code, out) == (cli.EXIT_CONFIG, "no such file: stacks/Pulumi.no-such-stack.yaml (nor a commit of this repository)\n")


def test_a_base_outside_any_repository_says_what_git_says(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(diff, "PROJECT_DIR", tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    code, out = run(capsys, "--stack", "dev", "--base", "main")
    assert code == cli.EXIT_CONFIG and out.startswith("--base main: fatal: not a git repository") and out.count("\n") == 1


@pytest.fixture(scope="module")
def repository_copy(tmp_path_factory) -> Path:
    """This working tree committed into a repository of its own, so a git ref holds today's program whatever the
    test machine's history is."""
    repo = tmp_path_factory.mktemp("repo")
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        source = ROOT / name
        if source.is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, repo / name)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "base"], check=True)
    return repo


def test_a_git_ref_is_rendered_by_that_commits_own_program(repository_copy, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(diff, "PROJECT_DIR", repository_copy)
    code, out = run(capsys, "--stack", "dev", "--base", "HEAD")
    assert code == 0 and "diff dev: HEAD" in out and "no changes" in out
    bumped = edited_stack(tmp_path, "dev", lambda c: c.setdefault("gpu-stack:versions", {}).update(driver="595.200.01"))
    code, out = run(capsys, "--stack", str(bumped), "--base", "HEAD")
    # The template changes, and with it the DaemonSet's template digest, which the node agents upgrade nodes to.
    assert code == 0 and "~ update  DaemonSet/gpu-operator/nvidia-driver-daemonset (metadata.annotations, spec.template)" in out


def test_a_stack_new_at_the_ref_is_created_whole(repository_copy, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(diff, "PROJECT_DIR", repository_copy)
    fresh = write_stack(tmp_path / "Pulumi.brand-new.yaml", stack_document("dev"))
    code, out = run(capsys, "--stack", str(fresh), "--base", "HEAD")
    assert code == 0 and "does not exist at HEAD: everything is created" in out and " - delete" not in out
