"""docs/migration.md runs: every command block either is run here and shows what the command prints (each line shown,
`...` standing for lines left out), or is marked as needing a cluster (`<!-- needs a cluster ... -->`)."""

from __future__ import annotations

import re
import shlex

import gpustack.__main__ as cli
from gpustack import importer
from kubefake import FakeApiServer, kubeconfig, operator_cluster
from stacktest import ROOT

DOC = ROOT / "docs" / "migration.md"
FIXTURES = ROOT / "tests" / "fixtures" / "clusterpolicy"
CHECKED = "checked by tests/test_migration_docs.py"
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[a-z]*)\n(?P<body>.*?)^(?P=indent)```$", re.S | re.M)


def blocks() -> list[tuple[str, str, str]]:
    """(the line before the block, its language, its body) for every fenced block, in list items too."""
    text = DOC.read_text()
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        body = "\n".join(line[len(match["indent"]):] for line in match["body"].splitlines())
        found.append((before, match["lang"], body))
    return found


def example(marker: str) -> tuple[list[str], list[str]]:
    """The command (arguments after `python -m gpustack`) and the lines it shows, of the block after `marker`."""
    (body,) = [body for before, _, body in blocks() if before.startswith(f"<!-- {marker}:")]
    lines = body.splitlines()
    command = []
    while True:
        line = lines.pop(0)
        command.append(line.rstrip("\\").strip())
        if not line.endswith("\\"):
            break
    words = shlex.split(" ".join(command))
    assert words[:4] == ["$", "python", "-m", "gpustack"], words
    return words[4:], [line for line in lines if line.strip() != "..."]


def printed_lines(capsys, tmp_path) -> list[str]:
    return capsys.readouterr().out.replace(f"{tmp_path}/", "").splitlines()


def test_every_command_block_is_run_by_a_test_or_marked_as_needing_a_cluster():
    commands = [(before, lang) for before, lang, _ in blocks() if lang in ("sh", "console", "")]
    unmarked = [before for before, _ in commands if not (before.startswith("<!-- needs a cluster") or CHECKED in before)]
    assert commands and not unmarked


def test_the_import_example_shows_what_the_import_prints(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(FIXTURES)
    monkeypatch.setattr(importer, "PROJECT_DIR", tmp_path)
    args, shown = example("import example")
    assert cli.main(args) == cli.EXIT_OK
    printed = printed_lines(capsys, tmp_path)
    assert [line for line in shown if line not in printed] == []


def test_the_from_cluster_example_shows_what_the_import_prints(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(importer, "PROJECT_DIR", tmp_path)
    args, shown = example("from-cluster example")
    with FakeApiServer() as api:
        operator_cluster(api)
        monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path, api.url))
        assert cli.main(args) == cli.EXIT_OK
    printed = printed_lines(capsys, tmp_path)
    assert [line for line in shown if line not in printed] == [], "\n".join(printed[:8])
