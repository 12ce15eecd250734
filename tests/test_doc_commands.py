"""The documentation runs: every command block of README.md and docs/*.md is run here offline and shows what the
command prints, is written by `python -m gpustack docs`, is run by a test of its own, or is marked as needing a
cluster, the Pulumi CLI, a GPU or docker, and then names only stacks, files, flags and objects the project has.
The marks are described in tests/docblocks.py."""

from __future__ import annotations

import functools
import json
import re
import subprocess
from contextlib import redirect_stderr, redirect_stdout
from io import StringIO
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

import gpustack.__main__ as cli
from gpustack import __version__
from docblocks import Block, blocks, commands, logical_lines, message_mismatch, mismatch, words
from stacktest import ROOT, STACKS, render_stack, stack_config

ALL = blocks()
RUN = [b for b in ALL if b.kind == "run"]
NEEDS = [b for b in ALL if b.kind == "needs"]
CHECKED = [b for b in ALL if b.kind == "checked"]
AGENT_TESTS = ROOT / "node_images" / "node-agent" / "tests"
# Commands whose --stack names a stack to read (import's names the one it writes).
READS_A_STACK = {"render", "check", "diff", "graph", "inventory"}
TOP_LEVEL = {p.name for p in ROOT.iterdir() if not p.name.startswith(".")}
GPU_RESOURCES_EXAMPLE = "gpuResources example"


def ids(found: list[Block]) -> list[str]:
    return [b.id for b in found]


def test_every_command_block_is_run_generated_checked_or_marked_as_needing_what_it_needs():
    unmarked = [f"{b.id}: {b.body.splitlines()[0][:60]}" for b in ALL if b.is_command and not b.kind]
    assert unmarked == [], "mark each block (tests/docblocks.py says how):\n" + "\n".join(unmarked)


def test_the_blocks_are_found_where_they_are():
    """The parser sees blocks in list items and tells commands from listings and diagrams."""
    def found(page: str, first_line: str) -> Block:
        (block,) = [b for b in ALL if b.page.name == page and b.body.lstrip("$ ").startswith(first_line)]
        return block

    assert found("README.md", "make render").kind == "run"
    assert found("README.md", "docker build").kind == "needs"  # inside a list item
    assert not found("layout.md", "Pulumi.yaml").is_command and not found("policies.md", "policies/PulumiPolicy.yaml").is_command
    assert found("concepts.md", "flowchart").kind == "generated"


@pytest.mark.parametrize("block", CHECKED, ids=ids(CHECKED))
def test_a_block_checked_elsewhere_is_named_by_its_test(block):
    test, name = block.checked_by
    assert test.is_file() and f'"{name}"' in test.read_text(), f"{test.relative_to(ROOT)} does not check {name!r}"


# --- blocks the suite runs ----------------------------------------------------------------------------------------


def _shown(text: str) -> list[str]:
    """Printed lines as a page shows them: the checkout's own path is wherever the reader's is."""
    return text.replace(f"{ROOT}/", "").replace(str(ROOT), ".").splitlines()


def _gpustack(argv: list[str], capsys) -> tuple[int, str]:
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _python_c(code: str) -> str:
    printed = StringIO()
    with redirect_stdout(printed):
        exec(compile(code, "<docs>", "exec"), {"__name__": "__main__"})  # noqa: S102 - the page's own one-liner
    return printed.getvalue()


def _make(argv: list[str], tmp_path: Path, capsys) -> str:
    """`make TARGET`: its recipe (`make -n`, the output folder moved here), each gpustack line of it run in-process;
    the line that runs pytest is this suite itself."""
    recipe = subprocess.run(["make", "-n", "--no-print-directory", *argv, f"OUT={tmp_path}/out"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    printed = ""
    for line in recipe.splitlines():
        found = words(line)
        if "-m" in found and found[found.index("-m") + 1] == "gpustack":
            code, text = _gpustack(found[found.index("-m") + 2:], capsys)
            assert code == 0, f"make {' '.join(argv)}: {line}\n{text}"
            printed += text
    assert printed or "pytest" in recipe, f"make {' '.join(argv)}: no command of its recipe was run"
    return printed


def execute(command: str, tmp_path: Path, capsys) -> tuple[int, str]:
    """(exit code, what it printed): the toolkit in this process, as `python -m gpustack` runs it; anything else
    (a script) in a process of its own."""
    found = words(command)
    program, rest = found[0], found[1:]
    if program.endswith(("python", "python3")) and rest[:2] == ["-m", "gpustack"]:
        return _gpustack(rest[2:], capsys)
    if program.endswith(("python", "python3")) and rest[:1] == ["-c"]:
        return 0, _python_c(rest[1])
    if program == "make":
        return 0, _make(rest, tmp_path, capsys)
    done = subprocess.run(found, cwd=ROOT, capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout + done.stderr


def recorded_h100(monkeypatch, tmp_path) -> None:
    """The machine docs/inventory.md was run on: one H100 80GB HBM3 (its NVML answers, recorded), Ubuntu 24.04,
    hostname `vm`."""
    from gpustack import inventory

    monkeypatch.syspath_prepend(str(AGENT_TESTS))
    from fakenvml import FakeNvml

    FakeNvml.from_recording(AGENT_TESTS / "fixtures" / "nvml" / "h100-80gb-hbm3-driver-580.json").install(monkeypatch)
    release = tmp_path / "os-release"
    release.write_text('ID=ubuntu\nVERSION_ID="24.04"\n')
    monkeypatch.setattr(inventory, "local_hostname", lambda: "vm")
    monkeypatch.setattr(inventory, "local_os_tag", functools.partial(inventory.local_os_tag, release))


def single_strategy_on_a_mixed_layout(monkeypatch, tmp_path) -> str:
    """docs/sharing.md: `a100-mig`'s first pool switched to `mig-single`, keeping its `all-balanced` layout."""
    from components.config import ConfigError, load_config
    from stacktest import bag

    config = stack_config("a100-mig")
    config["gpu-stack:nodePools"][0]["sharing"]["strategy"] = "mig-single"
    with pytest.raises(ConfigError) as refused:
        load_config(bag(config))
    ((key, message),) = refused.value.problems
    return f"{key}: {message}"


def string_budget_on_the_device_plugin(monkeypatch, tmp_path) -> str:
    """docs/toolkit.md: `dev`'s device plugin DaemonSet with `maxUnavailable: "1"`, a string, as check prints it."""
    from apiservertest import changed
    from gpustack import apiserver
    from gpustack.render import objects_in_order

    (plugin,) = [o for _, o in objects_in_order(render_stack("dev"))
                 if o["kind"] == "DaemonSet" and o["metadata"]["name"] == "nvidia-device-plugin-daemonset"]
    (problem,) = apiserver.validate(changed(plugin, "spec.updateStrategy.rollingUpdate.maxUnavailable", "1"))
    return f"apiserver {problem}"


SETUPS: dict[str, Callable[..., Optional[str]]] = {
    "the recorded H100": recorded_h100,
    "a100-mig on mig-single": single_strategy_on_a_mixed_layout,
    "a string budget on the device plugin": string_budget_on_the_device_plugin,
}


def _has_commit(ref: str) -> bool:
    return subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{ref}^{{commit}}"], capture_output=True).returncode == 0


@pytest.mark.parametrize("block", RUN, ids=ids(RUN))
def test_the_block_shows_what_the_command_prints(block, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    produced = SETUPS[block.setup](monkeypatch, tmp_path) if block.setup else None
    if not commands(block):
        assert produced is not None, f"{block.id}: a block without a command needs a setup that produces its text"
        assert message_mismatch(block.body, produced) is None, f"{block.id}: {message_mismatch(block.body, produced)}\n{produced}"
        return
    for command, shown in commands(block):
        base = next((w.split("=", 1)[-1] for w in words(command) if w.startswith("--base")), None)
        if base and re.fullmatch(r"[0-9a-f]{7,40}", base) and not _has_commit(base):
            pytest.skip(f"needs the repository's history: this checkout has no commit {base} (a shallow clone?)")
        code, text = execute(command, tmp_path, capsys)
        printed = _shown(text)
        if shown is None:  # the page shows no output: the command must simply work
            assert code == 0, f"{block.id}: {command}\nexit {code}:\n{text[-2000:]}"
            continue
        assert mismatch(shown, printed) is None, f"{block.id}: $ {command}\n{mismatch(shown, printed)}\nit prints:\n" + "\n".join(printed)


def test_the_gpu_resources_example_is_the_output_the_stack_exports():
    """docs/sharing.md's JSON is `pulumi stack output gpuResources -s a100-mig`, as the offline render exports it."""
    text = (ROOT / "docs" / "sharing.md").read_text()
    shown = text.split(f"<!-- {GPU_RESOURCES_EXAMPLE}: checked by tests/test_doc_commands.py -->", 1)[1]
    shown = shown.split("```json\n", 1)[1].split("```", 1)[0]
    assert json.loads(shown) == render_stack("a100-mig").outputs["gpuResources"]


# --- blocks that need a cluster, the Pulumi CLI, a GPU or docker --------------------------------------------------


@pytest.fixture(scope="module")
def project_text() -> str:
    """What names gpu-stack's objects, labels, annotations, log events: the program, the agent, the pack, the renders."""
    files = [p for folder in ("components", "gpustack", "node_images", "policies", "stacks") for p in (ROOT / folder).rglob("*")
             if p.suffix in (".py", ".yaml", ".json") and "tests" not in p.parts]
    files += list((ROOT / "tests" / "golden").rglob("manifests.yaml"))
    return "\n".join(p.read_text(errors="replace") for p in files)


PLACEHOLDER = re.compile(r"<([^<>]+)>")
# A name of gpu-stack's or NVIDIA's in the cluster: a label, an annotation, an object, a container, an image; a
# placeholder (`gpu-stack-gate-<pool>`, written `@pool@` here) stands for any name.
PART = r"(?:[\w.-]|@[\w.-]+@)"
PROJECT_NAME = re.compile(rf"(?:gpu-stack|nvidia){PART}*(?:/{PART}+)?")
OPERATORS = {"|", "||", "&&", ";", "&"}
REDIRECTS = {">", ">>", "<", "2>"}


def _commands_of(line: str) -> list[list[str]]:
    """The simple commands of a shell line, redirection targets left out; a placeholder `<x y>` is one word `@x_y@`."""
    line = PLACEHOLDER.sub(lambda m: "@" + m[1].replace(" ", "_") + "@", line.removeprefix("$ "))
    found: list[list[str]] = [[]]
    skip = False
    for word in re.findall(r"'[^']*'|\"[^\"]*\"|\S+", line.split(" # ", 1)[0]):
        if skip:
            skip = False
        elif word in OPERATORS:
            found.append([])
        elif word in REDIRECTS:
            skip = True
        else:
            found[-1].append(word.strip("'\""))
    return [c for c in found if c]


def _names(command: list[str]) -> list[str]:
    """The project-side names a command uses: gpu-stack's and NVIDIA's names anywhere; with kubectl also the
    container (`-c`) and the label selector's keys and values (`-l`); with grep each alternative it looks for (the
    agents' log events)."""
    found = [n.rstrip("-.") for word in command for n in PROJECT_NAME.findall(word)]
    for flag, value in zip(command, command[1:]):
        if command[0] in ("kubectl", "oc") and flag == "-c":
            found.append(value)
        elif command[0] in ("kubectl", "oc") and flag == "-l":
            found += [part for term in value.split(",") for part in re.split(r"!?=", term) if part]
        elif command[0] == "grep" and flag == "-E":
            found += [alternative for alternative in value.split("|") if re.fullmatch(r"[\w-]+", alternative)]
    return found


def _named_problems(command: list[str], project_text: str) -> list[str]:
    problems = []
    for name in dict.fromkeys(_names(command)):
        pattern = r"[\w.-]+".join(re.escape(part) for part in re.split(r"@[\w.-]+@", name))
        if not re.search(pattern, project_text):
            problems.append(f"no such name in the project: {name.replace('@', '')}")
    return problems


def _gpustack_problems(argv: list[str]) -> list[str]:
    stderr = StringIO()
    try:
        with redirect_stderr(stderr):
            args = cli.build_parser().parse_args(argv)
    except SystemExit:
        return [f"python -m gpustack {' '.join(argv)}: {stderr.getvalue().strip().splitlines()[-1]}"]
    stacks = getattr(args, "stack", None) or []
    stacks = [stacks] if isinstance(stacks, str) else stacks
    if argv[0] not in READS_A_STACK:
        return []
    return [f"no stack {s}" for s in stacks if "@" not in s and "/" not in s and s not in STACKS]


def _pulumi_problems(command: list[str], cwd: Path) -> list[str]:
    problems = []
    for flag, value in zip(command, command[1:]):
        if flag in ("-s", "--stack") or (flag in ("select", "--create") and "stack" in command):
            problems += [] if "@" in value or value.startswith("-") or value in STACKS else [f"no stack {value}"]
        elif flag == "--policy-pack" and not (cwd / value / "PulumiPolicy.yaml").is_file():
            problems.append(f"no policy pack in {value}")
        elif flag in ("--policy-pack-config", "--config") and "@" not in value and not (cwd / value).is_file():
            problems.append(f"no file {value}")
    if command[1:3] == ["stack", "output"] and len(command) > 3 and f'pulumi.export("{command[3]}"' not in (ROOT / "__main__.py").read_text():
        problems.append(f"the program exports no {command[3]}")
    return problems


def _other_problems(command: list[str], cwd: Path) -> list[str]:
    program, problems = command[0], []
    if program == "make":
        targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
        problems += [f"no make target {t}" for t in command[1:] if "=" not in t and t not in targets]
    if program == "docker" and "build" in command:
        tags = [v for f, v in zip(command, command[1:]) if f in ("-t", "--tag") and "node-agent:" in v]
        problems += [f"{t}: the node agent is {__version__}" for t in tags if not t.endswith(":" + __version__)]
    for word in command:
        head = word.split("/", 1)[0]
        if "/" in word and head in TOP_LEVEL and "@" not in word and not (cwd / word).exists():
            problems.append(f"no such file: {word}")
    return problems


@pytest.mark.parametrize("block", NEEDS, ids=ids(NEEDS))
def test_a_block_that_needs_a_cluster_names_only_what_the_project_has(block, project_text):
    cwd, problems = ROOT, []
    for line in logical_lines(block.body):
        for command in _commands_of(line):
            if command[0] == "cd":
                cwd = cwd / command[1]
                problems += [] if cwd.is_dir() else [f"no folder {command[1]}"]
            elif command[0].endswith(("python", "python3")) and command[1:3] == ["-m", "gpustack"]:
                problems += _gpustack_problems(command[3:])
            elif command[0] == "pulumi":
                problems += _pulumi_problems(command, cwd)
            problems += _other_problems(command, cwd) + _named_problems(command, project_text)
    assert problems == [], f"{block.id}: {problems}"


def test_the_checks_of_a_cluster_block_can_fail(project_text):
    """The checks above find what a stale block would name."""
    assert _gpustack_problems(["render", "--stack", "no-such-stack", "--out", "x"]) == ["no stack no-such-stack"]
    assert _gpustack_problems(["check", "--stack", "dev", "--colour"])[0].endswith("unrecognized arguments: --colour")
    assert _pulumi_problems(["pulumi", "up", "-s", "prod-eu9", "--policy-pack", "policy"], ROOT) == [
        "no stack prod-eu9", "no policy pack in policy"]
    assert _named_problems(_commands_of("kubectl get cm gpu-stack-upgrade-quota -o yaml")[0], project_text) == [
        "no such name in the project: gpu-stack-upgrade-quota"]
    assert _named_problems(_commands_of("kubectl describe job gpu-stack-gate-<pool>")[0], project_text) == []
    assert _named_problems(_commands_of("kubectl logs <pod> -c wait-for-it -l app=gpu-stack-node-labeler")[0],
                           project_text) == ["no such name in the project: wait-for-it"]
    assert _named_problems(["grep", "-E", "slot-granted|slot-stolen"], project_text) == [
        "no such name in the project: slot-stolen"]
    assert _pulumi_problems(["pulumi", "stack", "output", "gpuResource", "-s", "dev"], ROOT) == [
        "the program exports no gpuResource"]
    assert _other_problems(["docker", "build", "-t", "r/gpu-stack-node-agent:0.1.0", "node_images/agent"], ROOT) == [
        f"r/gpu-stack-node-agent:0.1.0: the node agent is {__version__}", "no such file: node_images/agent"]
