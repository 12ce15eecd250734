"""Command line contract (__main__.py): env parsing, exit codes, SIGTERM, config file."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from kubernetes.client.exceptions import ApiException

from agenttest import clients_of, fake_api, model
from gpustack_agent import __main__ as cli
from gpustack_agent.gate import gate
from gpustack_agent.model import labels

AGENT_DIR = Path(__file__).resolve().parents[1]
GATE_ENV = {"NAMESPACE": "gpu-operator", "TIMEOUT_SECONDS": "0", "MODE": "strict", "JOB_NAME": "gpu-stack-validation"}


def last_json_line(text: str) -> dict[str, Any]:
    return json.loads(text.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("command", "env", "message"),
    [
        ("label", {}, "NODE_NAME must be set"),
        ("label", {"NODE_NAME": "n", "RESYNC_SECONDS": "soon"}, "RESYNC_SECONDS must be an integer"),
        ("label", {"NODE_NAME": "n", "RESYNC_SECONDS": "0"}, "RESYNC_SECONDS must be from 1 to 604800"),
        ("label", {"NODE_NAME": "n", "RESYNC_SECONDS": "9" * 5000}, "RESYNC_SECONDS must be from 1 to 604800, got 99"),
        ("wait-validated", {**GATE_ENV, "MODE": "lenient"}, "MODE must be one of strict, advisory"),
        ("wait-validated", {k: v for k, v in GATE_ENV.items() if k != "TIMEOUT_SECONDS"}, "TIMEOUT_SECONDS must be set"),
        ("wait-validated", {k: v for k, v in GATE_ENV.items() if k != "JOB_NAME"}, "JOB_NAME must be set"),
        ("wait-validated", {**GATE_ENV, "POLL_SECONDS": "0"}, "POLL_SECONDS must be from 1 to 604800"),
    ],
)
def test_bad_settings_exit_2_before_touching_the_api(capsys, command, env, message):
    clients = mock.Mock()

    assert cli.main([command], env, clients=clients) == 2

    clients.assert_not_called()
    assert message in last_json_line(capsys.readouterr().err)["error"]


def test_unknown_subcommand_is_a_usage_error():
    with pytest.raises(SystemExit) as exited:
        cli.main(["relabel"], {})
    assert exited.value.code == 2


def _gate_clients(load_fixture) -> tuple[Any, Any]:
    core = fake_api()
    core.list_node.return_value = model({"items": [load_fixture("node-h100-mig-paused")]}, "V1NodeList")
    core.list_namespaced_pod.return_value = model(load_fixture("pods-validators"), "V1PodList")
    return core, fake_api()


@pytest.mark.parametrize(("mode", "code"), [("strict", 1), ("advisory", 0)])
def test_wait_validated_exit_code_and_result_line(load_fixture, capsys, mode, code):
    core, batch = _gate_clients(load_fixture)

    exit_code = cli.main(["wait-validated"], {**GATE_ENV, "MODE": mode},
                         clients=clients_of(core, batch, fake_api()), own_namespace=lambda: "gpu-stack")

    assert exit_code == code
    result = last_json_line(capsys.readouterr().out)
    assert result["status"] == "not-validated" and result["gpuNodes"] == 1
    assert batch.patch_namespaced_job.call_args.kwargs["namespace"] == "gpu-stack"
    assert batch.patch_namespaced_job.call_args.kwargs["name"] == "gpu-stack-validation"


def test_job_namespace_env_overrides_own_namespace(load_fixture):
    core, batch = _gate_clients(load_fixture)

    cli.main(["wait-validated"], {**GATE_ENV, "MODE": "advisory", "JOB_NAMESPACE": "ci"},
             clients=clients_of(core, batch, fake_api()), own_namespace=lambda: "gpu-stack")

    assert batch.patch_namespaced_job.call_args.kwargs["namespace"] == "ci"


def test_sigterm_stops_the_label_loop_cleanly(load_fixture, tmp_path, pool_config, capsys):
    config_file = tmp_path / "node-pools.json"
    config_file.write_text(json.dumps(pool_config))
    core = fake_api()
    # The signal arrives while the agent is blocked in an API call.
    core.read_node.side_effect = lambda *a, **k: os.kill(os.getpid(), signal.SIGTERM)
    before = signal.getsignal(signal.SIGTERM)

    code = cli.main(["label"], {"NODE_NAME": "n1", "CONFIG_FILE": str(config_file)}, clients=clients_of(core))

    assert code == 0
    assert last_json_line(capsys.readouterr().out)["event"] == "stopping"
    assert signal.getsignal(signal.SIGTERM) is before
    core.patch_node.assert_not_called()


def test_label_exits_1_on_errors_retrying_cannot_fix(tmp_path, pool_config, capsys):
    config_file = tmp_path / "node-pools.json"
    config_file.write_text(json.dumps(pool_config))
    core = fake_api()
    core.read_node.side_effect = ApiException(status=403, reason="Forbidden")

    code = cli.main(["label"], {"NODE_NAME": "n1", "CONFIG_FILE": str(config_file)}, clients=clients_of(core))

    assert code == 1
    assert last_json_line(capsys.readouterr().err)["event"] == "fatal"


def test_read_config_accepts_the_pulumi_output(tmp_path, pool_config):
    path = tmp_path / "node-pools.json"
    path.write_text(json.dumps(pool_config))

    config = cli.read_config(str(path))

    assert [pool.name for pool in config.pools] == ["a100", "h100", "passthrough"]


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "cannot read node-pools config"), ("{not json", "cannot read node-pools config"),
     ('{"version": 5}', "unsupported node-pools config version 5")],
)
def test_read_config_failures_are_config_errors(tmp_path, content, message):
    path = tmp_path / "node-pools.json"
    if content is not None:
        path.write_text(content)

    with pytest.raises(labels.ConfigError, match=message):
        cli.read_config(str(path))


def test_dockerfile_matches_the_runtime_contract():
    # Plain text checks; the Dockerfile is only parsed by docker itself.
    dockerfile = (AGENT_DIR / "Dockerfile").read_text()
    requirements = (AGENT_DIR / "requirements.txt").read_text()

    base = re.search(r"^FROM\s+(\S+)", dockerfile, re.MULTILINE).group(1)
    assert re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?", base), base
    pin = re.search(r"^kubernetes==(\S+)$", requirements, re.MULTILINE).group(1)
    assert f"kubernetes=={pin}" in dockerfile
    assert re.search(r"^USER 65532(:65532)?$", dockerfile, re.MULTILINE)
    assert 'ENTRYPOINT ["python", "-m", "gpustack_agent"]' in dockerfile


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"POOLS": "a100,,h100"}, "POOLS has an empty entry: 'a100,,h100'"),
        ({"POOLS": "a100,"}, "POOLS has an empty entry: 'a100,'"),
        ({"POOLS": "a100,h100!"}, "POOLS entry 'h100!' is not a valid label value"),
        ({"POOLS": "p" * 64}, f"POOLS entry {'p' * 64!r} is not a valid label value"),
        ({"POOLS": "h100,a100, h100"}, "POOLS names h100 more than once"),
        ({"DRIVER_DAEMONSETS": "nvidia-driver-daemonset-a100,"}, "DRIVER_DAEMONSETS has an empty entry"),
        ({"DRIVER_DAEMONSETS": "Nvidia-Driver"}, "DRIVER_DAEMONSETS entry 'Nvidia-Driver' is not a valid DaemonSet name"),
        ({"DRIVER_DAEMONSETS": "gpu-operator/nvidia-driver"},
         "DRIVER_DAEMONSETS entry 'gpu-operator/nvidia-driver' is not a valid DaemonSet name"),
        ({"DRIVER_DAEMONSETS": "d" * 254}, "is not a valid DaemonSet name"),
        ({"DRIVER_DAEMONSETS": "ds-a,ds-b,ds-a"}, "DRIVER_DAEMONSETS names ds-a more than once"),
    ],
)
def test_bad_wave_settings_exit_2_before_touching_the_api(capsys, env, message):
    clients = mock.Mock()

    assert cli.main(["wait-validated"], {**GATE_ENV, **env}, clients=clients) == 2

    clients.assert_not_called()
    assert message in last_json_line(capsys.readouterr().err)["error"]


def test_wave_settings_are_trimmed_lists_and_optional():
    wave = cli.GateSettings.from_env(
        {**GATE_ENV, "POOLS": " a100 , h100 ",
         "DRIVER_DAEMONSETS": "nvidia-driver-daemonset-5.15.0-1057-aws-ubuntu22.04,nvidia-driver-daemonset-h100"},
        lambda: "gpu-stack",
    )
    fleet = cli.GateSettings.from_env({**GATE_ENV, "POOLS": "  ", "DRIVER_DAEMONSETS": ""}, lambda: "gpu-stack")

    assert wave.pools == ("a100", "h100")
    assert wave.driver_daemonsets == ("nvidia-driver-daemonset-5.15.0-1057-aws-ubuntu22.04",
                                      "nvidia-driver-daemonset-h100")
    assert fleet.pools == () and fleet.driver_daemonsets == ()
    assert fleet == cli.GateSettings.from_env(GATE_ENV, lambda: "gpu-stack")


def test_wait_validated_for_one_wave(load_fixture, capsys):
    core, batch = _gate_clients(load_fixture)
    apps = fake_api()
    daemonsets = {ds["metadata"]["name"]: ds for ds in load_fixture("daemonsets-driver")["items"]}
    apps.read_namespaced_daemon_set.side_effect = lambda name, namespace, _request_timeout: model(
        daemonsets[name], "V1DaemonSet")

    exit_code = cli.main(["wait-validated"],
                         {**GATE_ENV, "POOLS": "h100", "DRIVER_DAEMONSETS": "nvidia-driver-daemonset-h100"},
                         clients=clients_of(core, batch, apps), own_namespace=lambda: "gpu-stack")

    assert exit_code == 1
    assert core.list_node.call_args.kwargs["label_selector"].endswith(",gpu-stack/pool in (h100)")
    assert apps.read_namespaced_daemon_set.call_args.kwargs["namespace"] == "gpu-operator"
    result = last_json_line(capsys.readouterr().out)
    assert result["pools"] == ["h100"]
    assert result["driverRollout"] == [
        {"daemonset": "nvidia-driver-daemonset-h100", "desired": 3, "updated": 1, "available": 2, "done": False,
         "reason": "updated 1/3, available 2/3"},
    ]


def test_empty_wave_settings_keep_the_fleet_wide_gate(load_fixture, capsys):
    core, batch = _gate_clients(load_fixture)
    apps = fake_api()

    cli.main(["wait-validated"], {**GATE_ENV, "MODE": "advisory", "POOLS": "", "DRIVER_DAEMONSETS": " "},
             clients=clients_of(core, batch, apps), own_namespace=lambda: "gpu-stack")

    apps.read_namespaced_daemon_set.assert_not_called()
    assert core.list_node.call_args.kwargs["label_selector"] == gate.GPU_NODE_SELECTOR
    assert list(last_json_line(capsys.readouterr().out)) == ["status", "gpuNodes", "validatedNodes", "notValidated"]


# --- SANDBOX_VALIDATOR: judge VM nodes too -----------------------------------


@pytest.mark.parametrize("value", ["yes", "True", "TRUE", "1", "on", "false,true"])
def test_bad_sandbox_validator_setting_exits_2_before_touching_the_api(capsys, value):
    clients = mock.Mock()

    assert cli.main(["wait-validated"], {**GATE_ENV, "SANDBOX_VALIDATOR": value}, clients=clients) == 2

    clients.assert_not_called()
    assert last_json_line(capsys.readouterr().err)["error"] == (
        f"SANDBOX_VALIDATOR must be true or false, got {value!r}"
    )


@pytest.mark.parametrize(("value", "expected"), [("true", True), (" true ", True), ("false", False), ("", False),
                                                 (None, False)])
def test_sandbox_validator_setting_is_a_boolean_defaulting_to_false(value, expected):
    env = dict(GATE_ENV) if value is None else {**GATE_ENV, "SANDBOX_VALIDATOR": value}

    assert cli.GateSettings.from_env(env, lambda: "gpu-stack").sandbox_validator is expected


def _selector_clients(load_fixture) -> tuple[Any, Any]:
    """A cluster with one container node (validator stuck) and one VM node (sandbox validator Ready)."""
    core = fake_api()
    nodes = {gate.GPU_NODE_SELECTOR: [load_fixture("node-h100-mig-paused")],
             gate.SANDBOX_NODE_SELECTOR: [load_fixture("node-passthrough-vm")]}
    pods = {gate.VALIDATOR_POD_SELECTOR: load_fixture("pods-validators")["items"],
            gate.SANDBOX_VALIDATOR_POD_SELECTOR: load_fixture("pods-sandbox-validators")["items"]}
    core.list_node.side_effect = lambda label_selector, _request_timeout: model(
        {"items": nodes[label_selector]}, "V1NodeList")
    core.list_namespaced_pod.side_effect = lambda namespace, label_selector, _request_timeout: model(
        {"items": pods[label_selector]}, "V1PodList")
    return core, fake_api()


def test_wait_validated_with_sandbox_validator_judges_vm_nodes(load_fixture, capsys):
    core, batch = _selector_clients(load_fixture)

    exit_code = cli.main(["wait-validated"], {**GATE_ENV, "SANDBOX_VALIDATOR": "true"},
                         clients=clients_of(core, batch, fake_api()), own_namespace=lambda: "gpu-stack")

    assert exit_code == 1
    assert [c.kwargs["label_selector"] for c in core.list_node.call_args_list] == [
        gate.GPU_NODE_SELECTOR, gate.SANDBOX_NODE_SELECTOR]
    assert {c.kwargs["namespace"] for c in core.list_namespaced_pod.call_args_list} == {"gpu-operator"}
    assert last_json_line(capsys.readouterr().out) == {
        "status": "not-validated", "gpuNodes": 2, "validatedNodes": 1,
        "notValidated": [{"node": "ip-10-0-40-7.ec2.internal", "reason": "validator not ready: toolkit-validation"}],
        "sandboxNodes": 1,
    }


def test_sandbox_validator_false_is_byte_for_byte_the_gate_without_it(load_fixture, capsys):
    lines = []
    for extra in ({}, {"SANDBOX_VALIDATOR": "false"}):
        core, batch = _selector_clients(load_fixture)
        cli.main(["wait-validated"], {**GATE_ENV, "MODE": "advisory", **extra},
                 clients=clients_of(core, batch, fake_api()), own_namespace=lambda: "gpu-stack")
        assert [c.kwargs["label_selector"] for c in core.list_node.call_args_list] == [gate.GPU_NODE_SELECTOR]
        assert [c.kwargs["label_selector"] for c in core.list_namespaced_pod.call_args_list] == [
            gate.VALIDATOR_POD_SELECTOR]
        lines.append(capsys.readouterr().out.strip().splitlines()[-1])

    assert lines[0] == lines[1] == (
        '{"status":"not-validated","gpuNodes":1,"validatedNodes":0,"notValidated":[{"node":'
        '"ip-10-0-40-7.ec2.internal","reason":"validator not ready: toolkit-validation"}]}'
    )


# --- EXPECTED_NODES and the termination message ------------------------------------------------------------


def test_expected_nodes_is_a_list_of_pool_counts():
    settings = cli.GateSettings.from_env({**GATE_ENV, "EXPECTED_NODES": " a100=3, h100 = 0 "}, lambda: "gpu-stack")

    assert settings.expected_nodes == (("a100", 3), ("h100", 0))
    assert cli.GateSettings.from_env(GATE_ENV, lambda: "gpu-stack").expected_nodes == ()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"EXPECTED_NODES": "a100"}, "EXPECTED_NODES entry 'a100' is not pool=count"),
        ({"EXPECTED_NODES": "a100=3,,h100=1"}, "EXPECTED_NODES has an empty entry"),
        ({"EXPECTED_NODES": "a100=3,"}, "EXPECTED_NODES has an empty entry"),
        ({"EXPECTED_NODES": "a100="}, "the count must be an integer from 0 to 1000000"),
        ({"EXPECTED_NODES": "a100=-1"}, "the count must be an integer from 0 to 1000000"),
        ({"EXPECTED_NODES": "a100=two"}, "the count must be an integer from 0 to 1000000"),
        ({"EXPECTED_NODES": "a100=1.5"}, "the count must be an integer from 0 to 1000000"),
        ({"EXPECTED_NODES": "a100=" + "9" * 5000}, "the count must be an integer from 0 to 1000000"),
        ({"EXPECTED_NODES": "=3"}, "'' is not a valid pool name"),
        ({"EXPECTED_NODES": "a100!=3"}, "'a100!' is not a valid pool name"),
        ({"EXPECTED_NODES": "a100=1,a100=2"}, "EXPECTED_NODES names a100 more than once"),
        ({"POOLS": "h100", "EXPECTED_NODES": "a100=1"},
         "EXPECTED_NODES names pool a100, which POOLS (h100) leaves out"),
    ],
)
def test_bad_expected_nodes_exit_2_before_touching_the_api(capsys, env, message):
    clients = mock.Mock()

    assert cli.main(["wait-validated"], {**GATE_ENV, **env}, clients=clients) == 2

    clients.assert_not_called()
    assert message in last_json_line(capsys.readouterr().err)["error"]


def test_termination_message_path_defaults_to_the_kubelets_file(monkeypatch):
    from gpustack_agent.api import kube

    monkeypatch.setattr(kube, "DEFAULT_TERMINATION_MESSAGE_PATH", "/dev/termination-log")

    assert cli.GateSettings.from_env(GATE_ENV, lambda: None).termination_message_path == "/dev/termination-log"
    assert cli.GateSettings.from_env({**GATE_ENV, "TERMINATION_MESSAGE_PATH": "/tmp/verdict"},
                                     lambda: None).termination_message_path == "/tmp/verdict"


def test_wait_validated_leaves_its_verdict_as_the_termination_message(load_fixture, capsys, termination_log):
    core, batch = _gate_clients(load_fixture)

    cli.main(["wait-validated"], {**GATE_ENV, "EXPECTED_NODES": "h100=1"}, clients=clients_of(core, batch, fake_api()),
             own_namespace=lambda: "gpu-stack")

    result = last_json_line(capsys.readouterr().out)
    assert json.loads(termination_log.read_text()) == result
    assert result["missingNodes"] == [{"pool": "h100", "expected": 1, "validated": 0}]


def test_label_asks_for_a_slot_and_stops_on_a_permission_it_lacks(tmp_path, paced_config, load_fixture, capsys):
    from simcluster import NODES, Api, Hub, Server

    config_file = tmp_path / "node-pools.json"
    paced_config["pools"][0]["deployLabels"].remove("nvidia.com/gpu.deploy.dcgm")
    config_file.write_text(json.dumps(paced_config))
    node = load_fixture("node-a100-labelled")
    server = Server(Hub())
    server.put(NODES, node)
    api = Api(server, "agent")
    # A ClusterRole without patch on nodes for the request: the agent must say so and stop, not retry for ever.
    server.fail("patch_node", None)
    server.fail("patch_node", ApiException(status=403, reason="Forbidden"))

    code = cli.main(["label"], {"NODE_NAME": node["metadata"]["name"], "CONFIG_FILE": str(config_file)},
                    clients=clients_of(api, None, api, None))

    assert code == 1
    assert last_json_line(capsys.readouterr().err)["event"] == "fatal"
    node_labels = server.get(NODES, "", node["metadata"]["name"])["metadata"]["labels"]
    assert node_labels["nvidia.com/gpu.deploy.dcgm"] == "true"
    # What needed no slot was applied before.
    assert node_labels["gpu-stack/driver"] == "nvidia-driver-daemonset-a100"
