"""The review job of docs/ci.md: the GitHub workflow and the GitLab CI file hold to the schemas check-jsonschema
ships, the workflow to zizmor (offline: every audit that needs no network) and to least privilege (actions pinned
by commit, the job running the pull request's code with a read-only token that is not left behind, the writes in a
job that runs none of it), every script in them passes shellcheck, every gpustack command they run exists,
ci/review.sh records and judges what the steps found, and docs/ci.md's example is what the job posts today."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from sarif import loader as sarif_loader
from sarif.operations import codeclimate_op

import gpustack.__main__ as cli
from gpustack import ci_examples, findings, sarif
from gpustack.keylines import KeyLines
from gpustack.sourcemap import Cause
from stacktest import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "gpu-stack.yml"
GITLAB = ROOT / ".gitlab-ci.yml"
REVIEW = ROOT / "ci" / "review.sh"
SHELLCHECK = Path(sys.executable).parent / "shellcheck"
ZIZMOR = Path(sys.executable).parent / "zizmor"


def jobs() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())["jobs"]


def workflow_scripts() -> list[str]:
    return [step["run"] for job in jobs().values() for step in job["steps"] if "run" in step]


def gitlab_script() -> str:
    return "\n".join(yaml.safe_load(GITLAB.read_text())["gpu-stack-review"]["script"])


@pytest.mark.parametrize("path, schema", [(WORKFLOW, "vendor.github-workflows"), (GITLAB, "vendor.gitlab-ci")])
def test_the_ci_files_hold_to_their_schemas(path, schema):
    result = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, str(path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_schema_violation_would_fail_the_check(tmp_path):
    broken = tmp_path / "gpu-stack.yml"
    broken.write_text(WORKFLOW.read_text().replace("runs-on: ubuntu-24.04", "runs_on: ubuntu-24.04"))
    result = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
                             str(broken)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1


@pytest.mark.parametrize("name, script", [
    ("ci/review.sh", REVIEW.read_text()),
    *[(f"workflow step {i}", "#!/usr/bin/env bash\n" + s) for i, s in enumerate(workflow_scripts())],
    ("gitlab script", "#!/usr/bin/env bash\n" + gitlab_script()),
])
def test_every_script_passes_shellcheck(name, script, tmp_path):
    path = tmp_path / "script.sh"
    path.write_text(script)
    result = subprocess.run([str(SHELLCHECK), "-s", "bash", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{name}:\n{result.stdout}"


def test_zizmor_finds_nothing_in_the_workflow():
    """Every offline audit, pedantic persona (code smells too); no network, no token, no configuration file."""
    environment = {k: v for k, v in os.environ.items() if k not in ("GH_TOKEN", "GITHUB_TOKEN", "ZIZMOR_GITHUB_TOKEN")}
    result = subprocess.run([str(ZIZMOR), "--offline", "--no-config", "--persona", "pedantic", "--format", "json", str(WORKFLOW)],
                            capture_output=True, text=True, timeout=120, env=environment)
    assert result.returncode == 0 and json.loads(result.stdout) == [], result.stdout + result.stderr


def test_zizmor_would_flag_a_tag_pin_and_a_token_left_in_the_checkout(tmp_path):
    broken = tmp_path / "gpu-stack.yml"
    text = WORKFLOW.read_text()
    # a checkout's default leaves the token in .git/config
    broken.write_text(re.sub(r"actions/checkout@[0-9a-f]{40} # (v[0-9.]+)", r"actions/checkout@\1", text)
                      .replace("          persist-credentials: false\n", ""))
    result = subprocess.run([str(ZIZMOR), "--offline", "--no-config", "--format", "json", str(broken)],
                            capture_output=True, text=True, timeout=120)
    found = {finding["ident"] for finding in json.loads(result.stdout)}
    assert {"unpinned-uses", "artipacked"} <= found


def test_every_action_is_pinned_by_commit_with_its_tag_beside():
    uses = re.findall(r"uses: ([\w./-]+)@(\S+)(.*)", WORKFLOW.read_text())
    assert uses and all(re.fullmatch(r"[0-9a-f]{40}", ref) and re.fullmatch(r" # v\d+\.\d+\.\d+", tag) for _, ref, tag in uses), uses
    # the upload's current major, and one commit per action wherever it is used
    assert any(action == "github/codeql-action/upload-sarif" and tag.startswith(" # v4.") for action, _, tag in uses)
    pins: dict[str, set[str]] = {}
    for action, ref, _ in uses:
        pins.setdefault(action.split("/")[0] + "/" + action.split("/")[1], set()).add(ref)
    assert all(len(refs) == 1 for refs in pins.values()), pins


def test_the_job_running_the_pull_requests_code_cannot_write_and_the_one_that_writes_runs_none_of_it():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    assert workflow["permissions"] == {}
    review_job, publish = jobs()["review"], jobs()["publish"]
    assert review_job["permissions"] == {"contents": "read"}
    checkouts = [step for job in (review_job, publish) for step in job["steps"] if str(step.get("uses", "")).startswith("actions/checkout@")]
    assert checkouts and all(step["with"]["persist-credentials"] is False for step in checkouts)
    assert publish["permissions"] == {"actions": "read", "contents": "read", "pull-requests": "write", "security-events": "write"}
    # publish checks out only the base branch's commit, and runs gpustack from there
    (base,) = [step for step in publish["steps"] if str(step.get("uses", "")).startswith("actions/checkout@")]
    assert base["with"]["ref"] == "${{ github.event.pull_request.base.sha }}" and base["with"]["path"] == "base"
    assert all("ci/review.sh" not in step.get("run", "") for step in publish["steps"])
    assert "cd base && .venv/bin/python -m gpustack comment" in "".join(step.get("run", "") for step in publish["steps"])
    # a fork's pull request (or any PR whose repository is not this one) gets no publish job
    assert "github.event.pull_request.head.repo.full_name == github.repository" in publish["if"]
    assert ".fork" not in WORKFLOW.read_text()


def test_both_ci_files_cache_the_virtualenv_by_its_requirements():
    (cache,) = [step for step in jobs()["review"]["steps"] if str(step.get("uses", "")).startswith("actions/cache@")]
    assert cache["with"]["path"] == ".venv" and "hashFiles('requirements.txt', 'requirements-dev.txt', 'requirements-sarif.txt')" in cache["with"]["key"]
    gitlab = yaml.safe_load(GITLAB.read_text())["gpu-stack-review"]["cache"]
    assert {"paths": [".venv/"], "key": {"prefix": "venv-py3.11", "files": ["requirements.txt", "requirements-dev.txt"]}} in gitlab
    # GitLab hashes two files at most: the venv is taken as built only when all three requirement files match
    script = gitlab_script()
    assert "sha256sum --check --status .venv/.requirements.sha256" in script and "requirements-sarif.txt > .venv/.requirements.sha256" in script
    assert any(entry["paths"] == [".sarif-tools/"] for entry in gitlab)


def test_no_script_expands_an_expression_of_the_event_inline():
    # `${{ }}` inside a run block is pasted into the script before bash sees it: a branch or label name could run
    # code. Values reach the scripts through env only.
    assert [s for s in workflow_scripts() if "${{" in s] == []


def _help(*command: str) -> str:
    try:
        cli.main([*command, "--help"])
    except SystemExit:
        pass
    return ""


@pytest.mark.parametrize("path", [REVIEW, WORKFLOW, GITLAB], ids=lambda p: p.name)
def test_every_gpustack_command_and_flag_the_job_runs_exists(path, capsys):
    used = re.findall(r"-m gpustack (\w+)([^\n|>;]*)", path.read_text())
    assert used, "the file runs no gpustack command"
    for command, rest in used:
        _help(command)
        text = capsys.readouterr().out
        assert text.startswith("usage:"), f"no command {command}"
        for flag in re.findall(r"(?<!\S)--[a-z][a-z-]*", rest):
            assert flag in text, f"gpustack {command} has no {flag}"


def _stub(tmp_path: Path, codes: dict[str, int]) -> Path:
    """A `python` for ci/review.sh that logs its arguments and answers like gpustack: a markdown body unless the
    stack's code is 2 (a stack that does not render prints nothing on stdout)."""
    log = tmp_path / "calls.log"
    stub = tmp_path / "python"
    stub.write_text("#!/usr/bin/env bash\n"
                    f"echo \"$*\" >> {log}\n"
                    "stack=''; prev=''\n"
                    "for a in \"$@\"; do [ \"$prev\" = --stack ] && stack=$a; prev=$a; done\n"
                    f"case \"$3\" in check) echo '{{\"version\": \"2.1.0\"}}'; exit {codes.get('check', 0)} ;; esac\n"
                    + "".join(f"[ \"$stack\" = {s} ] && code={c}\n" for s, c in codes.items() if s != "check")
                    + "[ \"${code:-0}\" = 2 ] && exit 2\n"
                    "echo \"<!-- gpustack-diff:$stack -->\"\nexit ${code:-0}\n")
    stub.chmod(0o755)
    return log


def review(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHON": str(tmp_path / "python"), "GPUSTACK_REVIEW_DIR": str(tmp_path / "review"), **env}
    return subprocess.run([str(REVIEW), *args], capture_output=True, text=True, timeout=60, env=environment)


def test_the_review_steps_record_what_they_found_and_the_verdict_judges_it(tmp_path):
    log = _stub(tmp_path, {"check": 0, "dev": 0, "prod-managed": 1, "kubevirt": 2})
    assert review(tmp_path, "check").returncode == 0
    assert "--stack prod-managed" in log.read_text() and "--format sarif" in log.read_text()
    assert json.loads((tmp_path / "review" / "gpustack.sarif").read_text()) == {"version": "2.1.0"}

    stacks = "dev,prod-managed kubevirt"
    labels = "needs-review, gpu-stack-allow:driver-replaced,gpu-stack-allow:node-image-changed"
    assert review(tmp_path, "plan", "origin/main", GPUSTACK_STACKS=stacks, GPUSTACK_LABELS=labels).returncode == 0
    diffs = [line for line in log.read_text().splitlines() if line.startswith("-m gpustack diff")]
    assert len(diffs) == 3 and all("--base origin/main --format markdown --allow driver-replaced --allow node-image-changed" in d
                                   for d in diffs)
    # a stack that did not render leaves no body to post; the others do
    assert sorted(p.name for p in (tmp_path / "review" / "plans").iterdir()) == ["dev.md", "prod-managed.md"]
    assert (tmp_path / "review" / "plan.exit").read_text().strip() == "2"
    verdict = review(tmp_path, "verdict")
    assert verdict.returncode == 1 and "does not render" in verdict.stdout

    (tmp_path / "review" / "plan.exit").write_text("1\n")
    assert "label the PR gpu-stack-allow:<rule>" in review(tmp_path, "verdict").stdout
    (tmp_path / "review" / "plan.exit").write_text("0\n")
    assert review(tmp_path, "verdict").returncode == 0
    (tmp_path / "review" / "check.exit").write_text("1\n")
    failed = review(tmp_path, "verdict")
    assert failed.returncode == 1 and "mandatory policy" in failed.stdout
    assert review(tmp_path, "bogus").returncode == 2


def test_gitlab_reads_the_sarif_log_as_code_quality(tmp_path):
    path = ROOT / "stacks" / "Pulumi.prod-managed.yaml"
    lines = KeyLines.of_file(path)
    finding = findings.Finding("policy/upgrade-safety", "error", "budget too wide", "prod-managed",
                               cause=Cause("gpu-stack:upgrade.maxUnavailable"))
    log_path = tmp_path / "gpustack.sarif"
    log_path.write_text(json.dumps(sarif.log([(finding, path, lines)])))
    out = tmp_path / "gl-code-quality.json"
    codeclimate_op.generate(sarif_loader.load_sarif_files(str(log_path)), str(out), False)
    (issue,) = json.loads(out.read_text())
    # what GitLab's Code Quality report requires of each entry
    assert issue["check_name"] == "policy/upgrade-safety" and issue["severity"] == "major" and issue["fingerprint"]
    assert issue["location"] == {"path": "stacks/Pulumi.prod-managed.yaml",
                                 "lines": {"begin": lines.exact("gpu-stack:upgrade.maxUnavailable").line}}


def test_the_ci_page_shows_what_the_job_posts_today():
    assert not ci_examples.stale(), "docs/ci.md's example is stale: run python -m gpustack docs"
