"""`python -m gpustack diff --stack S --base REF|FILE`: what `pulumi up` would do to a live stack, without a cluster.

Renders the stack twice and plans the change the way the engine would (gpustack/changes.py): every resource
created, updated, replaced (a gate Job: re-run) or deleted, what would make `pulumi up` fail (a protected object
deleted or replaced, two resources for one object), and what would hurt a running GPU cluster. `--base` is a
stack file (the same program, another configuration) or a git ref (that commit's stack file rendered by that
commit's program, in a process of its own, so a PR that changes the program is judged as it will land).

Exit codes: 0 nothing dangerous (or only what `--allow` names); 1 a dangerous change, or one `pulumi up` would
fail on; 2 bad input (no such stack or ref, a configuration the program refuses, a base that cannot render).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any, Callable, Optional

from gpustack import causes, changes, diff_report, interrupts
from gpustack.paths import shown
from gpustack.mockrun import PROJECT_DIR, Recording, recording_from_json, run_program, stack_file_bag
from node_images.inputfiles import load_stack_file

DANGER_RULES = ("driver-replaced", "driver-deleted", "referenced-deleted", "helm-release-deleted", "cluster-replaced",
                "node-image-changed")
BASE_RENDER_SECONDS = 300


class DiffInputError(Exception):
    """The base or the stack cannot be rendered; the message says which and why."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stack", required=True, help="stack name (stacks/Pulumi.<name>.yaml) or path: the new side")
    parser.add_argument("--base", required=True, metavar="REF|FILE",
                        help="the live side: a git ref of this repository (its stack file and program) or a stack file")
    parser.add_argument("--allow", action="append", default=[], choices=DANGER_RULES, metavar="RULE",
                        help=f"accept a dangerous change of this kind (repeatable): {', '.join(DANGER_RULES)}")
    parser.add_argument("--urns", action="store_true", help="print each resource's URN next to its object")
    parser.add_argument("--format", default="text", metavar="|".join(FORMATS),
                        help="text (default), markdown (a pull-request comment body) or json (docs/diff.schema.json)")


FORMATS = ("text", "markdown", "json")


def _render_file(stack: str, path: Path) -> tuple[Recording, dict[str, Any]]:
    """The stack file's render and its `config:` mapping."""
    document = load_stack_file(path)
    bag, secret = stack_file_bag(document)
    return run_program(stack, bag, secret_keys=secret), dict(document.get("config") or {})


def _git(*args: str) -> bytes:
    result = interrupts.run(["git", "-C", str(PROJECT_DIR), *args])
    if result.returncode != 0:
        raise DiffInputError(f"git {' '.join(args)}: {result.stderr.decode(errors='replace').strip()[:300]}")
    return result.stdout


def _commit(ref: str) -> str:
    """The commit `ref` names. A ref this checkout lacks (`origin/main` in a fresh clone or a CI checkout of one
    branch) is the usual case, and git says nothing about it under --quiet: say what is missing and the two ways out."""
    result = interrupts.run(["git", "-C", str(PROJECT_DIR), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"])
    if result.returncode == 0:
        return result.stdout.decode().strip()
    named = ref if len(ref) <= 80 else ref[:80] + "..."
    reason = " ".join(result.stderr.decode(errors="replace").split())[:300]
    if reason:  # not a repository at all, or git itself failing: its own words
        raise DiffInputError(f"--base {named}: {reason}")
    if Path(ref).suffix in (".yaml", ".yml"):
        raise DiffInputError(f"no such file: {named} (nor a commit of this repository)")
    raise DiffInputError(f"no such commit: {named}; fetch it or pass a file")


def render_at_ref(stack: str, ref: str) -> Optional[tuple[Recording, dict[str, Any]]]:
    """The stack as the program at `ref` renders it, and its stack file's `config:` there; None when the stack did
    not exist there."""
    commit = _commit(ref)
    with interrupts.temporary_directory("gpustack-diff-") as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir()
        archive = Path(tmp) / "tree.tar"
        archive.write_bytes(_git("archive", "--format=tar", commit))
        with tarfile.open(archive) as tar:
            tar.extractall(tree, filter="data")
        stack_file = tree / "stacks" / f"Pulumi.{stack}.yaml"
        if not stack_file.is_file():
            return None
        # The stack file is read here, through today's guarded loader; the runner gets the config bag as JSON.
        document = load_stack_file(stack_file, source=f"{ref}:stacks/{stack_file.name}")
        bag, secret = stack_file_bag(document)
        bag_file = Path(tmp) / "bag.json"
        bag_file.write_text(json.dumps({"config": bag, "secretKeys": secret}))
        # The runner imports nothing of the project; copied out of it, it cannot pick today's modules up.
        runner = Path(tmp) / "record.py"
        shutil.copy(Path(__file__).with_name("mockrun.py"), runner)
        out = Path(tmp) / "recording.json"
        try:
            result = interrupts.run(
                [sys.executable, str(runner), "--program-dir", str(tree), "--stack", stack, "--bag", str(bag_file),
                 "--out", str(out)],
                cwd=tmp, timeout=BASE_RENDER_SECONDS,
            )
        except subprocess.TimeoutExpired:
            raise DiffInputError(f"rendering {stack} at {ref} took longer than {BASE_RENDER_SECONDS} s") from None
        if result.returncode != 0:
            tail = result.stderr.decode(errors="replace").strip().splitlines()[-5:]
            raise DiffInputError(f"the program at {ref} ({commit[:12]}) does not render {stack}: " + " | ".join(tail)[:600])
        return recording_from_json(json.loads(out.read_text())), dict(document.get("config") or {})


def _empty(stack: str) -> Recording:
    return Recording(stack=stack, preview=False, registrations=[], outputs={})


def run(args: argparse.Namespace, resolve_stack: Callable[[str], tuple[str, Path]], out: Callable[[str], None] = print) -> int:
    if args.format not in FORMATS:
        raise DiffInputError(f"diff: unknown --format {args.format[:40]!r}; allowed: {', '.join(FORMATS)}")
    name, path = resolve_stack(args.stack)
    base_path = Path(args.base)
    note = ""
    if base_path.is_file():
        base, base_config = _render_file(name, base_path)
        what = str(base_path)
    else:
        found = render_at_ref(name, args.base)
        base, base_config = found if found is not None else (_empty(name), {})
        what = args.base
        note = "" if found is not None else f" (stack {name} does not exist at {args.base}: everything is created)"
    after, after_config = _render_file(name, path)
    plan = changes.plan(base, after)
    keys = causes.because(plan, base, after, base_config, after_config)
    if args.format != "text":
        data = diff_report.report(name, what, shown(path), plan, base, after, args.allow, because=keys)
        out(json.dumps(data, indent=2) if args.format == "json" else diff_report.markdown(data, after).rstrip("\n"))
        return data["exitCode"]
    counts = ", ".join(f"{n} {action}" for action, n in changes.summary(plan).items() if n) or "no changes"
    out(f"diff {name}: {what} -> {shown(path)}{note}: {counts}")
    for line in changes.render_plan(plan, verbose=args.urns, because=keys):
        out(line)
    refused = [(rule, message) for rule, message in plan.dangers if rule == "blocked" or rule not in args.allow]
    if refused:
        rules = sorted({rule for rule, _ in refused if rule != "blocked"})
        hint = f"; accept with --allow {' --allow '.join(rules)}" if rules else ""
        out(f"{name}: DANGEROUS - {len(refused)} change(s) need a second look{hint}")
        return 1
    out(f"{name}: SAFE - nothing dangerous" + (f" (allowed: {', '.join(args.allow)})" if args.allow else ""))
    return 0
