"""Ctrl-C and SIGTERM end any gpustack command at once, with one line, exit 130 or 143, and nothing half done.

Why not let SIGINT raise KeyboardInterrupt: a render runs the program inside the Pulumi SDK's asyncio tasks, and an
exception raised there by a signal either lands in a task that swallows it, or unwinds through the SDK's
`run_pulumi_func`, whose `finally` waits for every outstanding RPC, including the ones the interrupt cut short, so
the process sits in epoll_wait for good; what does unwind leaves pending tasks that asyncio reports as destroyed.
Nothing of ours needs unwinding beyond what this module tracks, so the handler cleans that up and leaves with
`os._exit`, never re-entering the SDK:

- output files are written whole or not at all (`write_files`: temporaries beside the targets, renamed together
  with signals held back), and an interrupt removes the temporaries and the directories made for them;
- child processes (`run`: git, a git ref's own program) are terminated and reaped;
- temporary directories (`temporary_directory`) are removed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Sequence

# What a shell reports for a process a signal ended: 128 + the signal's number.
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
MESSAGE = b"interrupted\n"
# A child gets this long to go after SIGTERM before it is killed: the whole exit stays well inside 2 s.
CHILD_GRACE_SECONDS = 0.5

_children: set[subprocess.Popen] = set()
# Files and directories that exist only while a command runs, removed on an interrupt (latest first, so a file goes
# before the directory made for it); a scratch directory goes with everything in it.
_temporary: list[Path] = []
_scratch: set[Path] = set()
# While a critical step runs (a child being registered, outputs being renamed) a signal waits here.
_held: list[int] = []
_holding = False


def install() -> None:
    """Handle SIGINT and SIGTERM from here on (`python -m gpustack` calls this before its heavy imports)."""
    for signum in EXIT_CODES:
        signal.signal(signum, _on_signal)


def _on_signal(signum: int, _frame: Any) -> None:
    if _holding:
        _held.append(signum)
        return
    leave(signum)


def leave(signum: int) -> None:
    """Clean up what this module tracks and exit as the signal's shell status, printing one line."""
    for other in EXIT_CODES:
        # A second Ctrl-C must not cut the clean-up short.
        signal.signal(other, signal.SIG_IGN)
    _stop_children()
    _remove_temporary()
    with contextlib.suppress(OSError):  # stderr closed: the exit status still says it
        os.write(2, MESSAGE)
    os._exit(EXIT_CODES[signal.Signals(signum)])


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Run a step that must not be cut in two; a signal that arrives meanwhile takes effect right after it."""
    global _holding
    outer = _holding
    _holding = True
    try:
        yield
    finally:
        _holding = outer
        if not outer and _held:
            leave(_held[0])


def _stop_children() -> None:
    for child in list(_children):
        with contextlib.suppress(OSError):
            child.terminate()
    for child in list(_children):
        try:
            child.wait(timeout=CHILD_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                child.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=CHILD_GRACE_SECONDS)


def _remove_temporary() -> None:
    for path in reversed(_temporary):
        _remove(path)


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        if path in _scratch:
            shutil.rmtree(path)
        elif path.is_dir() and not path.is_symlink():
            path.rmdir()
        else:
            path.unlink(missing_ok=True)


def run(args: Sequence[str], *, timeout: Optional[float] = None, **options: Any) -> subprocess.CompletedProcess:
    """`subprocess.run(args, capture_output=True)`, with the child stopped if this process is interrupted."""
    with held():
        process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **options)
        _children.add(process)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    finally:
        _children.discard(process)
    return subprocess.CompletedProcess(list(args), process.returncode, out, err)


@contextlib.contextmanager
def temporary_directory(prefix: str) -> Iterator[Path]:
    """`tempfile.TemporaryDirectory`, removed on an interrupt as well."""
    with held():
        path = Path(tempfile.mkdtemp(prefix=prefix))
        _scratch.add(path)
        _temporary.append(path)
    try:
        yield path
    finally:
        _remove(path)
        _forget(path)


def _forget(path: Path) -> None:
    with contextlib.suppress(ValueError):
        _temporary.remove(path)
    _scratch.discard(path)


def write_text(path: Path, text: str) -> None:
    write_files({path: text})


def write_files(files: Mapping[Path, str]) -> None:
    """Write every file or none: each to a temporary beside it, then all renamed into place in one held step. A
    failure or an interrupt leaves the targets as they were, and no directory made for them."""
    made = [_make_directory(d) for d in sorted({Path(p).parent for p in files}, key=lambda d: len(d.parts))]
    made = [d for created in made for d in created]
    staged: dict[Path, Path] = {}
    try:
        for path, text in files.items():
            staged[Path(path)] = _stage(Path(path), text)
        with held():
            for path, temporary in staged.items():
                os.replace(temporary, path)
                _forget(temporary)
            for directory in made:
                _forget(directory)
    finally:
        # Only what an error left: after the renames nothing here is tracked any more.
        for path in [*staged.values(), *reversed(made)]:
            if path in _temporary:
                _remove(path)
                _forget(path)


def _make_directory(directory: Path) -> list[Path]:
    """Create `directory` and its missing parents; the ones created, outermost first, tracked until kept."""
    missing = [d for d in [directory, *directory.parents] if not d.exists()][::-1]
    for each in missing:
        with held():
            each.mkdir(exist_ok=True)
            _temporary.append(each)
    return missing


def _stage(path: Path, text: str) -> Path:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.partial")
    with held():
        _temporary.append(temporary)
    try:
        temporary.write_text(text, encoding="utf-8")
        if path.exists():
            # A file rewritten in place keeps its permissions (a state export edited by nfd_migration may be 0600).
            shutil.copymode(path, temporary)
    except BaseException:
        _remove(temporary)
        _forget(temporary)
        raise
    return temporary
