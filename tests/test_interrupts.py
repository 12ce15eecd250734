"""Ctrl-C (SIGINT) or SIGTERM at any moment of any command ends it within 2 s with exit 130 or 143 and the one line
`interrupted`: no traceback, no asyncio warning, no output file half written, no child process left
(gpustack/interrupts.py). The moments of a render: the imports, the mock engine's first and a later registration
(when an interrupt used to hang the process in epoll_wait for good), the policy pack, writing the outputs and
renaming them into place; then check, diff (while a git ref's own program runs), import and docs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpustack import __version__, interrupts
from stacktest import ROOT

DRIVER = Path(__file__).with_name("interruptdriver.py")
FIXTURES = ROOT / "tests" / "fixtures" / "clusterpolicy"
OUTPUTS = {"manifests.yaml", "graph.json", "policy.json", "sources.json"}
OLD_RENDER = "an earlier render\n"
EXIT = {"SIGINT": 130, "SIGTERM": 143}
# What a case whose moment comes later takes ready-made instead of making it again (tests/interruptdriver.py).
REUSED = {"policies": "render", "staging": "verdict", "renaming": "verdict", "schema": "verdict"}

# name -> (argv, the moment, the signal)
CASES = {
    "render, 40th registration": (["render", "--stack", "dev", "--out", "{out}"], "registration:40", "SIGINT"),
    "render, policy pack": (["render", "--stack", "dev", "--out", "{out}"], "policies", "SIGINT"),
    "render, writing the outputs": (["render", "--stack", "dev", "--out", "{out}"], "staging:2", "SIGINT"),
    "render, renaming them into place": (["render", "--stack", "dev", "--out", "{out}"], "renaming:1", "SIGTERM"),
    "check, schema validation": (["check", "--stack", "dev"], "schema", "SIGINT"),
    "diff, the base's own program": (["diff", "--stack", "dev", "--base", "HEAD"], "child", "SIGINT"),
    "import, writing the stack": (
        ["import", "--clusterpolicy", "host-driver.yaml", "--context", "dc2-admin", "--gpu-model", "L40S", "--os", "rhel9",
         "--kubernetes-version", "1.31",
         "--node-agent-image", f"registry.dc2.corp:5000/gpu-stack/node-agent:{__version__}", "--stack", "lab",
         "--out", "{out}/new/Pulumi.lab.yaml"],
        "staging:1", "SIGTERM"),
    "docs, generating a page": (["docs", "--check"], "docs", "SIGINT"),
}


def _case(name: str, tmp: Path) -> dict[str, Any]:
    argv, at, signum = CASES[name]
    folder = tmp / name.replace(",", "").replace(" ", "-")
    (folder / "out").mkdir(parents=True)
    (folder / "tmp").mkdir()
    if name.startswith("render"):
        for output in OUTPUTS:
            (folder / "out" / output).write_text(OLD_RENDER)
    return {"name": name, "argv": [a.format(out=folder / "out") for a in argv], "at": at, "signal": signum,
            "tmp": str(folder / "tmp"), "cwd": str(FIXTURES if name.startswith("import") else ROOT),
            "rendered": REUSED.get(at.split(":")[0]) if argv[0] in ("render", "check") else None,
            # the base's program, in the copy of gpustack/mockrun.py that diff runs it with
            "child": "record.py"}


@pytest.fixture(scope="module")
def ended(tmp_path_factory) -> dict[str, dict[str, Any]]:
    """Every case, run by one driver process (tests/interruptdriver.py), by name, with the case's folders."""
    tmp = tmp_path_factory.mktemp("interrupts")
    cases = [_case(name, tmp) for name in CASES]
    done = subprocess.run([sys.executable, str(DRIVER)], input=json.dumps(cases), capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return {r["name"]: {**r, "case": c} for r, c in zip(json.loads(done.stdout), cases, strict=True)}


def files_in(folder: str) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): p.read_text() for p in Path(folder).rglob("*") if p.is_file()}


@pytest.mark.parametrize("name", CASES)
def test_an_interrupt_ends_the_command_at_once_with_one_line(ended, name):
    result = ended[name]
    assert result["seconds"] is not None, f"{name}: the moment never came ({result['stderr'][-300:]})"
    assert (result["code"], result["stdout"], result["stderr"]) == (EXIT[CASES[name][2]], "", "interrupted\n")
    assert result["seconds"] < 2.0
    assert os.listdir(result["case"]["tmp"]) == [], "a temporary directory outlived the command"


def test_an_interrupted_render_leaves_the_earlier_render_whole(ended):
    for name in ("render, 40th registration", "render, policy pack", "render, writing the outputs"):
        out = Path(ended[name]["case"]["argv"][-1])
        assert files_in(str(out)) == {output: OLD_RENDER for output in OUTPUTS}, name


def test_a_render_interrupted_while_renaming_finishes_the_renames_first(ended):
    """Four files renamed one by one are never left half old, half new: the signal waits for the last rename."""
    out = Path(ended["render, renaming them into place"]["case"]["argv"][-1])
    written = files_in(str(out))
    assert set(written) == OUTPUTS and OLD_RENDER not in written.values()
    assert "kind: DaemonSet" in written["manifests.yaml"]


def test_an_interrupted_import_writes_nothing_and_leaves_no_folder_it_made(ended):
    out = Path(ended["import, writing the stack"]["case"]["argv"][-1]).parent.parent
    assert os.listdir(out) == []


def test_an_interrupted_diff_stops_the_bases_own_program(ended):
    started = ended["diff, the base's own program"]["grandchildren"]
    assert started, "the diff was signalled before it started the base's program"
    assert [pid for pid in started if Path(f"/proc/{pid}").exists()] == []


def _handlers_installed(pid: int) -> bool:
    """Whether the process catches SIGTERM yet (/proc's SigCgt mask): `python -m gpustack` does from its first lines."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False


def test_ctrl_c_while_a_real_process_still_imports_the_toolkit(tmp_path):
    process = subprocess.Popen([sys.executable, "-m", "gpustack", "render", "--stack", "dev", "--out", str(tmp_path / "out")],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not _handlers_installed(process.pid):
        assert process.poll() is None
        time.sleep(0.005)
    started = time.monotonic()
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=10)
    assert (process.returncode, out, err) == (130, "", "interrupted\n")
    assert time.monotonic() - started < 2.0
    assert not (tmp_path / "out").exists()


def test_a_write_that_fails_half_way_leaves_the_files_as_they_were_and_no_folder_it_made(tmp_path):
    kept = tmp_path / "kept.yaml"
    kept.write_text("before\n")
    with pytest.raises(TypeError):
        interrupts.write_files({kept: "after\n", tmp_path / "new" / "deeper" / "b.json": 3})  # not text: fails
    assert [p.name for p in tmp_path.iterdir()] == ["kept.yaml"] and kept.read_text() == "before\n"
    assert interrupts._temporary == []


def test_a_file_rewritten_whole_keeps_its_permissions(tmp_path):
    state = tmp_path / "state.json"
    state.write_text("{}\n")
    state.chmod(0o600)
    interrupts.write_text(state, '{"version": 3}\n')
    assert state.read_text() == '{"version": 3}\n' and state.stat().st_mode & 0o777 == 0o600


def test_a_signal_held_back_during_a_step_takes_effect_right_after_it(monkeypatch):
    left: list[int] = []
    monkeypatch.setattr(interrupts, "leave", left.append)
    monkeypatch.setattr(interrupts, "_held", [])  # this test's own, so no signal outlives it
    with interrupts.held():
        interrupts._on_signal(signal.SIGTERM, None)
        assert left == []
    assert left == [signal.SIGTERM]
