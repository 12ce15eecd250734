"""The pack as `pulumi policy publish` ships it: policies/ alone, with nothing but its own requirements.

A copy of policies/ in an empty directory answers the engine's analyzer requests exactly as the pack in this
checkout does, while every import of the project's own packages (or of what only the program installs) fails.
The facts the pack judges by are its own copies, kept equal to their sources."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import empty_pb2

from gpustack import packfacts
from gpustack.policyrun import (
    PACK_VERSION,
    POLICY_DIR,
    _import_pack,
    analyzer_requests,
    pack_config,
    pack_policies,
    responses_to_violations,
    run_policies,
)
from pulumi.runtime import proto
from pulumi_policy.policy import _PolicyAnalyzerServicer
from stacktest import render_stack

# Top-level modules the pack must never need: the project's own, and what only the program's virtualenv has.
FORBIDDEN = ("components", "gpustack", "node_images", "pydantic", "pulumi_kubernetes", "kubernetes", "kubernetes_validate")

# Runs in the copy: refuses FORBIDDEN imports, answers length-prefixed requests from stdin on stdout.
SERVE = """
import sys
FORBIDDEN = {forbidden!r}

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in FORBIDDEN:
            raise ImportError(f"the published pack cannot import {{name}}")
        return None

sys.meta_path.insert(0, Refuse())
sys.path = [p for p in sys.path if p not in ("", {root!r})]
sys.path.insert(0, ".")
from google.protobuf import empty_pb2
from pulumi.runtime import proto
from pulumi_policy.policy import _PolicyAnalyzerServicer
import gpu_stack_policies as pack

data = sys.stdin.buffer.read()
chunks, at = [], 0
while at < len(data):
    size = int.from_bytes(data[at:at + 8], "big"); at += 8
    chunks.append(data[at:at + size]); at += size
servicer = _PolicyAnalyzerServicer(pack.PACK_NAME, {version!r}, list(pack.POLICIES), pack.PACK_ENFORCEMENT)
servicer.Configure(proto.ConfigureAnalyzerRequest.FromString(chunks[0]), None)
out = []
for chunk in chunks[1:-1]:
    out.append(servicer.Analyze(proto.AnalyzeRequest.FromString(chunk), None).SerializeToString())
out.append(servicer.AnalyzeStack(proto.AnalyzeStackRequest.FromString(chunks[-1]), None).SerializeToString())
sys.stdout.buffer.write(b"".join(len(c).to_bytes(8, "big") + c for c in out))
"""


def _framed(messages) -> bytes:
    return b"".join(len(m).to_bytes(8, "big") + m for m in (message.SerializeToString() for message in messages))


def _unframed(data: bytes) -> list[bytes]:
    chunks, at = [], 0
    while at < len(data):
        size = int.from_bytes(data[at : at + 8], "big")
        chunks.append(data[at + 8 : at + 8 + size])
        at += 8 + size
    return chunks


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> Path:
    """policies/ copied alone, as `pulumi policy publish` uploads it (its virtualenv and caches left behind)."""
    target = tmp_path_factory.mktemp("published") / "policies"
    shutil.copytree(POLICY_DIR, target, ignore=shutil.ignore_patterns("venv", "__pycache__"))
    return target


def _run_copy(published: Path, stack: str, recording=None) -> tuple[list, list]:
    pack = _import_pack()
    info = _PolicyAnalyzerServicer(pack.PACK_NAME, PACK_VERSION, pack_policies(), pack.PACK_ENFORCEMENT).GetAnalyzerInfo(
        empty_pb2.Empty(), None
    )
    recording = recording or render_stack(stack)
    requests = analyzer_requests(recording, info, pack_config(stack))
    script = SERVE.format(forbidden=FORBIDDEN, root=str(POLICY_DIR.parent), version=PACK_VERSION)
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=published,
        input=_framed([requests.configure, *requests.resources, requests.stack]),
        capture_output=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    answers = _unframed(result.stdout)
    copy = responses_to_violations(
        requests,
        [proto.AnalyzeResponse.FromString(a) for a in answers[:-1]],
        proto.AnalyzeResponse.FromString(answers[-1]),
    )
    # The engine's diagnostics carry no field; only the offline run hears which field each policy reported.
    here = [dataclasses.replace(v, field="") for v in run_policies(recording, pack_policies(), pack_config(stack))]
    return copy, here


@pytest.mark.parametrize("stack", ["prod-precompiled", pytest.param("a100-mig", marks=pytest.mark.matrix)])
def test_the_pack_copied_alone_judges_a_stack_as_the_checkout_does(published, stack):
    copy, here = _run_copy(published, stack)
    assert copy == here


def test_the_copy_still_finds_violations(published):
    """So the equality above is not two empty lists: an unprotected namespace is refused by the copy too."""
    rendered = render_stack("prod-managed")  # shared with other tests: changed on a copy
    recording = dataclasses.replace(
        rendered,
        registrations=[
            dataclasses.replace(r, protect=False) if r.type == "kubernetes:core/v1:Namespace" else r
            for r in rendered.registrations
        ],
    )
    copy, here = _run_copy(published, "prod-managed", recording)
    assert copy == here
    assert [v.policy for v in copy] == ["protected-objects"]


def test_the_copy_refuses_to_import_the_project(published):
    probe = SERVE.split("from google.protobuf")[0] + "import components\n"
    result = subprocess.run(
        [sys.executable, "-c", probe.format(forbidden=FORBIDDEN, root=str(POLICY_DIR.parent), version=PACK_VERSION)],
        cwd=published,
        capture_output=True,
        text=True,
        check=False,
    )
    assert "the published pack cannot import components" in result.stderr


def test_the_packs_facts_are_fresh_copies_of_their_sources():
    assert packfacts.stale() == [], "run `python -m gpustack pack-facts` after editing a fact module"


def test_a_stale_fact_copy_is_noticed(tmp_path):
    packfacts.write(tmp_path)
    (tmp_path / "consts.py").write_text((tmp_path / "consts.py").read_text() + "EXTRA = 1\n")
    (tmp_path / "leftover.py").write_text("")
    assert packfacts.stale(tmp_path) == ["consts.py", "leftover.py"]
    packfacts.write(tmp_path)
    assert packfacts.stale(tmp_path) == []


def test_the_packs_requirements_name_only_what_the_pack_imports():
    requirements = (POLICY_DIR / "requirements.txt").read_text().split()
    names = sorted(line.split("==")[0] for line in requirements if "==" in line)
    assert names == ["PyYAML", "pulumi", "pulumi-policy"]


def test_every_policy_says_how_bad_its_violation_is():
    """A reviewer reading `pulumi preview` sees the stakes first: [critical|high|medium|low: what breaks]."""
    for policy in pack_policies():
        severity, _, rest = policy.description.partition("] ")
        assert severity.split(":")[0] in ("[critical", "[high", "[medium", "[low"), policy.name
        assert rest and ":" in severity, policy.name


def test_the_enforcement_table_in_the_docs_is_the_packs_and_the_stacks():
    from gpustack import docs

    assert not docs.policy_page_stale(), "run `python -m gpustack docs` after changing a policy or policies/config"


def test_a_policy_level_changed_in_a_stack_config_makes_the_table_stale(tmp_path):
    from gpustack import docs

    page = tmp_path / "policies.md"
    page.write_text(docs.POLICY_PAGE.read_text().replace("| `gpu-quota` | low: capacity hygiene | advisory |", "| `gpu-quota` | low | advisory |"))
    assert docs.policy_page_stale(page)
    docs.write_policy_page(page)
    assert not docs.policy_page_stale(page)


def test_the_per_stack_settings_in_the_docs_are_the_config_files(tmp_path):
    """The list of where stacks differ is generated too: a stack moved from one bound to another shows up."""
    from gpustack import docs, policyrun

    config = tmp_path / "config"
    shutil.copytree(policyrun.CONFIG_DIR, config)
    settings = json.loads((config / "k0s.json").read_text())
    settings["upgrade-safety"] = {"enforcementLevel": "mandatory", "maxUnavailablePercent": 10, "maxUnavailableCount": 5}
    (config / "k0s.json").write_text(json.dumps(settings))
    summary = policyrun.settings_summary(config)
    assert "`dra`, `k0s`, `kata-cc`" in summary and summary not in docs.POLICY_PAGE.read_text()
    assert policyrun.settings_summary() in docs.POLICY_PAGE.read_text()
