"""Interrupts gpustack commands at chosen moments and reports how each one ended (tests/test_interrupts.py).

One process imports the toolkit once and forks a child per case, so a case costs only the command's own work up
to its moment, not the seconds of imports again (the moment during the imports has a real `python -m gpustack` of
its own in the test). A child installs the handlers as `python -m gpustack` does, then runs `main(argv)`; the
signal comes from the child itself at an instrumented point (`registration:N`, `policies`, `schema`, `staging`,
`renaming`, `docs`) or from here once the child has started a child process of its own (`child`). A case whose
moment comes after the render gets what comes before it made once here, before the fork, instead of again:
`rendered: render` the stack's render (its moment is in the policy pack), `rendered: verdict` the policy verdict
too (writing the outputs, checking the objects).

stdin: a JSON list of cases {name, argv, cwd, at, signal, tmp, rendered, child (the command line of the process
to wait for, with `at: child`)}; stdout: a JSON list of results {name,
code, stdout, stderr, seconds (signal to exit), grandchildren (pids the child had started; which of them are still
alive is for the test to ask)}.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import gpustack.__main__ as cli  # noqa: E402
from gpustack import checking, docs, interrupts, mockrun, schema  # noqa: E402

# A child that is never signalled, or survives its signal, is stopped here and reported as hanging.
DEADLINE_SECONDS = 20.0


def _signal_on(owner: Any, name: str, signum: int, stamp: Path, nth: int,
               counts: Callable[..., bool] = lambda *args: True) -> None:
    """Replace owner.name by a function that signals this process on its nth call (of those `counts` takes), then
    does what it did."""
    original = getattr(owner, name)
    calls = [0]

    def instrumented(*args: Any, **kwargs: Any) -> Any:
        calls[0] += counts(*args)
        if calls[0] == nth and counts(*args):
            stamp.write_text(repr(time.monotonic()))
            os.kill(os.getpid(), signum)
        return original(*args, **kwargs)

    setattr(owner, name, instrumented)


def _arm(at: str, signum: int, stamp: Path) -> None:
    point, _, count = at.partition(":")
    targets: dict[str, tuple[Any, str, Callable[..., bool]]] = {
        # the mock engine's RPC, which the SDK runs on a worker thread while the main thread waits in the event loop
        "registration": (mockrun.RecordingMonitor, "RegisterResource", lambda *args: True),
        "policies": (checking, "run_policies", lambda *args: True),
        "schema": (schema, "validate", lambda *args: True),
        # an output file about to be written beside its target (the renames into place come after all of them)
        "staging": (interrupts, "_stage", lambda *args: True),
        # an output's temporary renamed into place
        "renaming": (os, "replace", lambda source, *rest: str(source).endswith(".partial")),
        "docs": (docs, "render", lambda *args: True),
    }
    if point in targets:
        owner, name, counts = targets[point]
        _signal_on(owner, name, signum, stamp, int(count or 1), counts)


def _made(stack: str, made: dict[str, Any]) -> tuple[Any, Any]:
    """The stack's render and its `evaluate` answer (config, render, policy verdict), made once for every case."""
    if stack not in made:
        original, recorded = checking.run_program, []
        checking.run_program = lambda *args, **options: recorded.append(original(*args, **options)) or recorded[-1]
        try:
            verdict = checking.evaluate(stack, False, None)
        finally:
            checking.run_program = original
        made[stack] = (recorded[0], verdict)
    return made[stack]


def _reuse(stage: str, made: tuple[Any, Any]) -> None:
    """In the child: skip what the parent already made, up to `stage` (`render`, or `verdict`: the policies too)."""
    recording, verdict = made
    if stage == "render":
        checking.run_program = lambda *args, **options: recording
    elif stage == "verdict":
        cli.evaluate = checking.evaluate = lambda *args: verdict


def _child(case: dict[str, Any], folder: Path, made: Any) -> None:
    out = os.open(folder / "stdout", os.O_WRONLY | os.O_CREAT)
    err = os.open(folder / "stderr", os.O_WRONLY | os.O_CREAT)
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.chdir(case["cwd"])
    tempfile.tempdir = case["tmp"]
    interrupts.install()
    if made is not None:
        _reuse(case["rendered"], made)
    _arm(case["at"], signal.Signals[case["signal"]], folder / "signalled")
    code = cli.main(case["argv"])
    sys.stdout.flush()
    os._exit(code)


def _children_of(pid: int) -> list[int]:
    listed = Path(f"/proc/{pid}/task/{pid}/children")
    if listed.exists():  # the kernel's own list (CONFIG_PROC_CHILDREN): no scan of every process every 10 ms
        return [int(child) for child in listed.read_text().split()]
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except OSError:
        return ""


def _wait(pid: int, until: Callable[[], bool]) -> tuple[int, float]:
    """Poll the child until it exits; `until` is asked meanwhile and may signal it. (exit status, monotonic time)"""
    started = time.monotonic()
    while time.monotonic() - started < DEADLINE_SECONDS:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status, time.monotonic()
        until()
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return -1, time.monotonic()


def run_case(case: dict[str, Any], made: dict[str, Any]) -> dict[str, Any]:
    # The child's stdout, stderr and signal stamp, beside the case's own folders (the test's tmp_path).
    folder = Path(case["tmp"]).parent / "driver"
    folder.mkdir()
    argv = case["argv"]
    reused = _made(argv[argv.index("--stack") + 1], made) if case.get("rendered") else None
    pid = os.fork()
    if pid == 0:
        _child(case, folder, reused)
    grandchildren: list[int] = []

    def from_outside() -> bool:
        if case["at"] != "child" or (folder / "signalled").exists():
            return False
        grandchildren[:] = _children_of(pid)
        if any(case["child"] in _command_line(child) for child in grandchildren):
            (folder / "signalled").write_text(repr(time.monotonic()))
            os.kill(pid, signal.Signals[case["signal"]])
        return True

    status, ended = _wait(pid, from_outside)
    stamp = folder / "signalled"
    signalled = float(stamp.read_text()) if stamp.exists() else None
    return {
        "name": case["name"],
        "code": os.waitstatus_to_exitcode(status) if status != -1 else None,
        "stdout": (folder / "stdout").read_text(),
        "stderr": (folder / "stderr").read_text(),
        "seconds": None if signalled is None else ended - signalled,
        "grandchildren": grandchildren,
    }


if __name__ == "__main__":
    made: dict[str, Any] = {}
    print(json.dumps([run_case(case, made) for case in json.load(sys.stdin)]))
