"""Garbage in what the agent reads: node labels it cannot make sense of are a warning naming node, label and why,
logged once per change; a node-pools config out of bounds is a ConfigError naming the limit, exit 2 at startup and
the last good config while the agent runs."""

from __future__ import annotations

import copy
import json
from typing import Any
from unittest import mock

import pytest

import gpustack_agent.__main__ as cli
from agenttest import Recorder, fake_api, model, stop_after
from fakenvml import FakeNvml, a100_40gb
from gpustack_agent.inventory import inventory
from gpustack_agent.label import labelloop
from gpustack_agent.model import configfile, labelcheck, labels
from gpustack_agent.inventory import loop

GARBAGE = {
    "feature.node.kubernetes.io/pci-10de.present": "yes",
    "nvidia.com/gpu.deploy.operands": "False",
    "nvidia.com/gpu.deploy.dcgm": "True",
    "gpu-stack/driver": "Driver_A100",
}


def garbage_node(node: dict[str, Any], **annotations: str) -> dict[str, Any]:
    node["metadata"]["labels"].update(GARBAGE)
    node["metadata"]["annotations"].update(annotations)
    return node


def run_label(node_of: Any, config: Any, passes: int, log: Recorder) -> None:
    """The Node read once, then each watch shows it as ``node_of`` has it then."""
    core = fake_api()
    core.read_node.side_effect = lambda *a, **k: model(node_of(), "V1Node")
    labelloop.run_label_loop(core, node_name="n1", load_config=lambda: config, resync_seconds=60, log=log,
                        stop=stop_after(passes), sleep=lambda s: None,
                        watch_events=lambda *a: iter([{"type": "MODIFIED", "object": copy.deepcopy(node_of())}]),
                        rng=lambda: 0.0)


def test_garbage_labels_each_get_a_warning_naming_node_label_and_why(load_fixture, pool_config):
    node = garbage_node(load_fixture("node-a100-labelled"), **{"gpu-stack/applied-labels": "{not json"})
    problems = {p.key: p for p in labelcheck.label_problems(node, labels.parse_config(pool_config))}

    assert sorted(problems) == sorted([*GARBAGE, "gpu-stack/applied-labels"])
    assert "not treated as a GPU node" in problems["feature.node.kubernetes.io/pci-10de.present"].why
    assert "operands stay deployed" in problems["nvidia.com/gpu.deploy.operands"].why
    assert "never overwrites it" in problems["nvidia.com/gpu.deploy.dcgm"].why
    assert "not a DaemonSet name" in problems["gpu-stack/driver"].why
    assert problems["gpu-stack/applied-labels"].as_json() == {
        "annotation": "gpu-stack/applied-labels", "value": "{not json",
        "problem": "not JSON: read as empty, so labels it recorded are not removed"}


def test_values_the_agent_understands_are_no_problem(load_fixture, pool_config):
    node = load_fixture("node-a100-labelled")
    node["metadata"]["labels"].update({"nvidia.com/gpu.deploy.operands": "true", "gpu-stack/driver": "nvidia-driver-a100",
                                       "nvidia.com/gpu.deploy.driver": "pre-installed",
                                       "nvidia.com/gpu.deploy.dcgm": "paused-for-driver-upgrade",
                                       "nvidia.com/gpu.deploy.device-plugin": "false"})

    assert labelcheck.label_problems(node, labels.parse_config(pool_config)) == []


def test_the_label_loop_warns_once_per_change_not_on_every_pass(load_fixture, pool_config):
    node = garbage_node(load_fixture("node-a100-labelled"))
    log = Recorder()
    seen: list[dict[str, Any]] = []

    def node_of() -> dict[str, Any]:
        if len(seen) == 3:
            node["metadata"]["labels"]["nvidia.com/gpu.deploy.operands"] = "x" * 200  # changed: warned again
        seen.append(node)
        return node

    run_label(node_of, pool_config, 12, log)

    warnings = [r for r in log.records if r["event"] == "label-invalid"]
    assert [w["label"] for w in warnings] == sorted(GARBAGE) + ["nvidia.com/gpu.deploy.operands"]
    assert all(w["level"] == "warning" and w["node"] == "n1" for w in warnings)
    last = warnings[-1]["value"]
    assert last.startswith("x" * 80) and last.endswith("(200 characters)") and len(last) < 120


def test_the_inventory_loop_warns_once_about_an_unknown_mig_state(monkeypatch, load_fixture, pool_config):
    FakeNvml([a100_40gb() for _ in range(8)]).install(monkeypatch)
    node = load_fixture("node-a100-labelled")
    node["metadata"]["labels"]["nvidia.com/mig.config.state"] = "half-done"
    core = fake_api()
    core.read_node.side_effect = lambda *a, **k: model(node, "V1Node")
    log = Recorder()

    loop.run_inventory_loop(core, node_name="n1", load_config=lambda: pool_config,
                            read_inventory=inventory.read_inventory, resync_seconds=60, log=log, stop=stop_after(3),
                            sleep=lambda s: None)

    assert [r for r in log.records if r["event"] == "label-invalid"] == [{
        "level": "warning", "event": "label-invalid", "node": "n1", "label": "nvidia.com/mig.config.state",
        "value": "half-done", "problem": "not one of failed, pending, rebooting, success: quoted in the drift as it is"}]


# --- the node-pools config -------------------------------------------------


def _pools(count: int) -> list[dict[str, Any]]:
    return [{"name": f"p{i}", "nodeSelector": {"pool": f"p{i}"}} for i in range(count)]


@pytest.mark.parametrize(("content", "message"), [
    (b"{" + b" " * configfile.MAX_CONFIG_BYTES + b"}", f"more than the limit of {configfile.MAX_CONFIG_BYTES}"),
    (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 8 levels"),
    (json.dumps({"version": 1, "x": [[[[[[[[1]]]]]]]]}).encode(), "nested deeper than 8 levels"),
    (b'{"version": 1, "version": 2}', "duplicate key 'version'"),
    (b'{"version": NaN}', "NaN is not a JSON number"),
    (b'{"version": 1, "name": "\xff"}', "is not UTF-8"),
])
def test_config_files_out_of_bounds_are_config_errors(tmp_path, content, message):
    path = tmp_path / "node-pools.json"
    path.write_bytes(content)

    with pytest.raises(labels.ConfigError, match=message):
        configfile.read_config(str(path))


@pytest.mark.parametrize(("change", "message"), [
    (lambda c: c.update(pools=_pools(labels.MAX_POOLS + 1)), f"more than the limit of {labels.MAX_POOLS}"),
    (lambda c: c["pools"][0]["nodeSelector"].update({f"k{i}": "v" for i in range(labels.MAX_ENTRIES)}),
     f"more than the limit of {labels.MAX_ENTRIES}"),
    (lambda c: c["pools"][0].update(name="a100\n"), "is not a valid Kubernetes label value"),
    (lambda c: c["pools"][0]["nodeSelector"].update({"bad key!": "x"}), "is not a valid Kubernetes label key"),
    (lambda c: c["pools"][0]["nodeSelector"].update({"k": "v" * 64}), "is not a valid Kubernetes label value"),
    (lambda c: c["gpuNodeLabels"].append("a/b/c"), "is not a valid Kubernetes label key"),
    (lambda c: c["pools"][0]["labels"].update({"gpu-stack/driver": "Driver_A100"}), "is not a DaemonSet name"),
    (lambda c: c["pools"][0].update(name="p" * 10_000), "characters\\) is not a valid"),
])
def test_documents_out_of_bounds_are_refused_naming_the_key_and_the_limit(pool_config, change, message):
    change(pool_config)

    with pytest.raises(labels.ConfigError, match=message) as raised:
        labels.parse_config(pool_config)
    assert len(str(raised.value)) < 300  # a huge value is never echoed whole


def test_a_config_that_turns_bad_at_runtime_keeps_the_last_good_one(tmp_path, pool_config):
    path = tmp_path / "node-pools.json"
    path.write_text(json.dumps(pool_config))
    log = Recorder()
    source = configfile.ConfigSource(str(path), node_name="n1", log=log)
    good = source.load()

    path.write_text("{not json")
    assert [source.load(), source.load()] == [good, good]
    path.write_text(json.dumps(dict(pool_config, version=3)))
    assert source.load() is good
    path.write_text(json.dumps(pool_config))
    source.load()

    # Once per distinct error, not on every pass; and when it is fixed.
    assert log.events() == ["config-invalid", "config-invalid", "config-valid"]
    assert log.records[0]["using"] == "the last good config" and "cannot read" in log.records[0]["error"]


@pytest.mark.parametrize("command", ["label", "inventory"])
def test_a_bad_config_at_startup_exits_2_before_touching_the_api(tmp_path, capsys, command):
    path = tmp_path / "node-pools.json"
    path.write_text('{"version": 1, "gpuNodeLabels": ["a"], "pools": [{"name": "bad name"}]}')
    clients = mock.Mock()

    assert cli.main([command], {"NODE_NAME": "n1", "CONFIG_FILE": str(path)}, clients=clients) == 2

    clients.assert_not_called()
    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert line["event"] == "config-invalid" and "pools[0].name 'bad name'" in line["error"]


@pytest.mark.parametrize(("record", "why"), [
    ("[" * 100_000, "not JSON"),
    ('["gpu-stack/pool", 7]', "not a JSON list of label keys"),
    (json.dumps([f"k{i}" for i in range(labels.MAX_ENTRIES + 2)]), f"names more than {labels.MAX_ENTRIES + 1} labels"),
])
def test_an_unreadable_applied_labels_record_counts_as_empty_and_says_why(record, why):
    annotations = {labels.APPLIED_LABELS_ANNOTATION: record}

    assert labels.applied_labels(annotations) == frozenset()
    assert labelcheck.applied_record_problem(annotations).why.startswith(why)


def test_a_bug_is_one_json_log_line_and_exit_1_not_a_bare_traceback(tmp_path, pool_config, capsys):
    path = tmp_path / "node-pools.json"
    path.write_text(json.dumps(pool_config))

    def clients() -> Any:
        raise TypeError("unexpected")

    assert cli.main(["label"], {"NODE_NAME": "n1", "CONFIG_FILE": str(path)}, clients=clients) == 1

    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert line["event"] == "crashed" and line["error"] == "TypeError: unexpected"
    assert "Traceback" in line["traceback"]
