"""Every file gpu-stack reads goes through one guarded door (node_images/inputfiles.py): each class of bad input is
refused by the CLI with exit 2 and one line naming the file, the line and the key, never a traceback; an internal
error is one line asking for a report (the traceback with --debug); a closed pipe ends the command quietly.

Cheap on purpose: every refusal happens before a render."""

from __future__ import annotations

import glob
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from components.config import ConfigError
from gpustack import __main__ as cli
from gpustack import packfacts
from gpustack.importer import common as import_common
from node_images import inputfiles
from node_images.catalog import CatalogError, load_catalog
from node_images.inputfiles import MAX_ALIAS_EXPANSION, MAX_DEPTH, InputFileError, load_stack_file, load_yaml_text

PROJECT = Path(__file__).resolve().parent.parent
FIXTURES = PROJECT / "tests" / "fixtures" / "clusterpolicy"
GOOD_HEAD = "config:\n  gpu-stack:cluster:\n    name: lab\n"

BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n" for p, n in zip("abcdef", "bcdefg")
)

# name -> (file bytes, what stderr must contain: file line prefix, key and problem)
STACK_FILES = {
    "not-utf8": (b"config:\n  gpu-stack:cluster: caf\xe9\n", [":2: ", "not UTF-8"]),
    "binary": (b"\x7fELF\x02\x01\x01\x00\x00", [":1: ", "control character", "binary"]),
    "utf16-bom": ("config: {}\n".encode("utf-16"), [":1: ", "not UTF-8"]),
    "duplicate-key": ((GOOD_HEAD + "    name: other\n").encode(), [":4: ", "config.gpu-stack:cluster.name", "duplicate key 'name' (first at line 3)"]),
    "non-string-key": ((GOOD_HEAD + "    8: x\n").encode(), [":4: ", "config.gpu-stack:cluster", "key '8' is an integer"]),
    "null-key": ((GOOD_HEAD + "    ~: x\n").encode(), [":4: ", "is null; keys must be strings"]),
    "custom-tag": ((GOOD_HEAD + "    context: !vault prod/admin\n").encode(), [":4: ", "gpu-stack:cluster.context", "tag !vault is not accepted"]),
    "binary-tag": ((GOOD_HEAD + "    context: !!binary aGVsbG8=\n").encode(), [":4: ", "gpu-stack:cluster.context", "binary is not accepted"]),
    "timestamp-tag": ((GOOD_HEAD + "    context: !!timestamp 2026-01-01\n").encode(), [":4: ", "timestamp is not accepted"]),
    "octal-looking": ((GOOD_HEAD + "    port: 0755\n").encode(), [":4: ", "gpu-stack:cluster.port", "0755 is ambiguous"]),
    "not-a-number": ((GOOD_HEAD + "    weight: .nan\n").encode(), [":4: ", "gpu-stack:cluster.weight", "not a finite number"]),
    "merge-key": ((GOOD_HEAD + "    <<: {context: a}\n").encode(), [":4: ", "merge keys (<<) are not accepted"]),
    "alias-bomb": (BOMB.encode(), [f"more than {MAX_ALIAS_EXPANSION} nodes (MAX_ALIAS_EXPANSION)"]),
    "recursive-alias": (b"config: &loop\n  gpu-stack:cluster: *loop\n", [":1: ", "refers to the node that contains it"]),
    "deep-flow": (("config: {gpu-stack:x: " + "[" * 500 + "]" * 500 + "}\n").encode(), [":1: ", "config.gpu-stack:x[0][0]", f"deeper than {MAX_DEPTH} levels"]),
    "deep-block": ("".join("  " * i + f"k{i}:\n" for i in range(200)).encode(), [f":{MAX_DEPTH}: ", f"deeper than {MAX_DEPTH} levels"]),
    "not-yaml": (b"config: [unclosed\n", [":2: ", "config", "not valid YAML: while parsing a flow sequence"]),
    "two-documents": (b"config: {}\n---\nconfig: {}\n", [":2: ", "expected a single document"]),
    "config-not-a-mapping": (b"config:\n  - gpu-stack:cluster\n", ["config: expected a mapping of `gpu-stack:<key>: value`, got a list"]),
    "config-a-string": (b"config: gpu-stack\n", ["config: expected a mapping", "got a string"]),
    "top-level-not-a-mapping": (b"- config\n", [":1: ", "expected a mapping with a `config:` key, got a list"]),
    "top-level-a-string": (b"just words\n", ["got a string"]),
}


def _refused(capsys, argv: list[str], *expected: str) -> str:
    assert cli.main(argv) == cli.EXIT_CONFIG
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for text in expected:
        assert text in err, err
    return err


@pytest.mark.parametrize("case", sorted(STACK_FILES))
def test_a_bad_stack_file_is_refused_with_file_line_and_key(case, tmp_path, capsys):
    data, expected = STACK_FILES[case]
    path = tmp_path / "Pulumi.bad.yaml"
    path.write_bytes(data)
    err = _refused(capsys, ["check", "--stack", str(path)], str(path), *expected)
    assert len(err.strip().splitlines()) == 1, err


def test_a_stack_file_over_the_size_limit_names_the_limit(tmp_path, capsys):
    path = tmp_path / "Pulumi.big.yaml"
    path.write_bytes(GOOD_HEAD.encode() + b"# padding\n" * (inputfiles.STACK_FILE_MAX_BYTES // 10))
    _refused(capsys, ["render", "--stack", str(path), "--out", str(tmp_path / "out")], str(path),
             "the limit is 1.0 MiB (STACK_FILE_MAX_BYTES)")
    assert not (tmp_path / "out").exists()


def test_a_utf8_bom_is_accepted_and_dates_and_yes_stay_strings():
    text = (PROJECT / "stacks" / "Pulumi.dev.yaml").read_text()
    assert load_yaml_text("\ufeff" + text, "bom") == load_yaml_text(text, "plain")
    # The YAML 1.2 core schema, as the Pulumi CLI reads stack files: no silent datetime, bool or sexagesimal int.
    assert load_yaml_text("a: 2026-01-01\nb: yes\nc: on\nd: 1:30\ne: 0o17\nf: 0x1F\ng: 1e3\nh: ~\n", "s") == {
        "a": "2026-01-01", "b": "yes", "c": "on", "d": "1:30", "e": 15, "f": 31, "g": 1000.0, "h": None,
    }


def test_every_file_in_the_repository_reads_as_pyyaml_reads_it():
    files = [*glob.glob(str(PROJECT / "stacks" / "*.yaml")), str(PROJECT / "node_images" / "catalog.yaml"),
             *glob.glob(str(FIXTURES / "*.yaml"))]
    assert len(files) > 20
    for name in files:
        text = Path(name).read_text()
        assert load_yaml_text(text, name, multi=True) == list(yaml.safe_load_all(text)), name


def test_the_program_turns_an_unreadable_config_value_into_a_config_error():
    from gpustack.mockrun import run_program

    with pytest.raises(ConfigError, match=r"gpu-stack:cluster: cannot be read: nested deeper than 64 levels"):
        run_program("deep", {"gpu-stack:cluster": "[" * 3000 + "]" * 3000})
    assert inputfiles.json_value_problem('{"name": "a", "name": "b"}') == "duplicate key 'name': remove one"
    assert inputfiles.json_value_problem('{"replicas": NaN}') == "NaN is not a finite number"
    assert inputfiles.json_value_problem("plain text [") is None


def test_the_catalog_goes_through_the_same_door(tmp_path):
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text("version: 1\nversion: 2\n")
    with pytest.raises(CatalogError, match=r"catalog.yaml:2: version: duplicate key 'version'"):
        load_catalog(catalog)


def test_import_inputs_are_refused_with_file_line_and_key(tmp_path, capsys, monkeypatch):
    args = ["import", "--context", "lab", "--node-agent-image", "registry.example/agent:1.0", "--stack", "lab",
            "--gpu-model", "L40S", "--os", "rhel9", "--out", str(tmp_path / "Pulumi.lab.yaml")]
    policy = tmp_path / "cp.yaml"
    policy.write_text("apiVersion: nvidia.com/v1\nkind: ClusterPolicy\nspec:\n  driver: {enabled: true}\n  driver: {enabled: false}\n")
    _refused(capsys, [*args, "--clusterpolicy", str(policy)], f"import: {policy}:5: spec.driver: duplicate key 'driver'")
    # The YAML inside a ConfigMap's data: lines counted within the value, the ConfigMap and key named.
    configmap = tmp_path / "cm.yaml"
    configmap.write_text((FIXTURES / "configmap-host.yaml").read_text().replace("    version: v1\n    flags:", "    version: v1\n    version: v2\n    flags:", 1))
    _refused(capsys, [*args, "--clusterpolicy", str(FIXTURES / "host-driver.yaml"), "--configmap", str(configmap)],
             "configmap device-plugin-config, key default:2: version: duplicate key 'version'")
    configmap.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata:\n  default: {version: v1}\n")
    _refused(capsys, [*args, "--clusterpolicy", str(FIXTURES / "host-driver.yaml"), "--configmap", str(configmap)],
             "ConfigMap x: data.default: expected a string, got mapping")
    monkeypatch.setattr(import_common, "IMPORT_INPUT_MAX_BYTES", 64)
    _refused(capsys, [*args, "--clusterpolicy", str(FIXTURES / "host-driver.yaml")], "the limit is 64 bytes (IMPORT_INPUT_MAX_BYTES)")


def test_a_bad_policy_config_is_refused(tmp_path, capsys):
    config = tmp_path / "dev.json"
    config.write_text('{"all": "advisory",\n "all": "mandatory"}')
    _refused(capsys, ["check", "--stack", "dev", "--policy-config", str(config)], f"{config}: duplicate key 'all'")
    config.write_text("[" * 10_000 + "]" * 10_000)
    _refused(capsys, ["check", "--stack", "dev", "--policy-config", str(config)], f"deeper than {MAX_DEPTH} levels")


def test_diff_refuses_a_bad_base_file_before_rendering(tmp_path, capsys):
    base = tmp_path / "Pulumi.dev.yaml"
    base.write_bytes(b"config:\n  a: 1\n  a: 2\n")
    _refused(capsys, ["diff", "--stack", "dev", "--base", str(base)], f"{base}:3: config.a: duplicate key 'a'")


def test_load_stack_file_is_the_one_reader_of_stack_files():
    for module in ("gpustack/__main__.py", "gpustack/diff.py", "gpustack/mockrun.py"):
        assert "safe_load" not in (PROJECT / module).read_text(), module
    with pytest.raises(InputFileError, match="cannot be read"):
        load_stack_file(PROJECT / "stacks" / "Pulumi.missing.yaml")


def _boom() -> list[str]:
    raise RuntimeError("boom\nsecond line")


def test_an_internal_error_is_one_line_with_a_hint_and_the_traceback_only_with_debug(monkeypatch, capsys):
    monkeypatch.setattr(packfacts, "stale", _boom)
    assert cli.main(["pack-facts", "--check"]) == cli.EXIT_INTERNAL
    err = capsys.readouterr().err
    assert err.strip() == err.strip().splitlines()[0] and "Traceback" not in err
    assert "internal error: RuntimeError: boom second line" in err and "--debug" in err and "report" in err
    assert cli.main(["--debug", "pack-facts", "--check"]) == cli.EXIT_INTERNAL
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "RuntimeError: boom" in err


class _ClosedPipe:
    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    def fileno(self) -> int:
        raise OSError("not a real stream")


def test_a_closed_pipe_ends_the_command_quietly(monkeypatch, capsys):
    monkeypatch.setattr(packfacts, "stale", lambda: ["x.py"] * 100)
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    assert cli.main(["pack-facts", "--check"]) == cli.EXIT_BROKEN_PIPE
    assert capsys.readouterr().err == ""


def test_a_closed_pipe_in_a_real_process_prints_nothing():
    # `python -m gpustack ... | head -1`, with a command that prints many lines and renders nothing.
    code = ("import sys; from gpustack import __main__ as cli, packfacts; "
            "packfacts.stale = lambda: ['x.py'] * 100000; sys.exit(cli.main(['pack-facts', '--check']))")
    process = subprocess.Popen([sys.executable, "-c", code], cwd=PROJECT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout.readline().startswith(b"stale: ")
    process.stdout.close()
    err = process.stderr.read().decode()
    assert process.wait(timeout=60) == cli.EXIT_BROKEN_PIPE
    assert err == ""
