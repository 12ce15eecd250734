"""The inventory loop: NVML read (patched NVML), drift from the node's pool, the node annotations it writes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from unittest import mock

import pynvml
import pytest
from kubernetes.client.exceptions import ApiException

from fakenvml import DISABLE, ENABLE, FakeNvml, a100_40gb, a100_80gb, h100_80gb, l4, t4
from agenttest import Recorder, clients_of, fake_api, model, stop_after
from gpustack_agent import __main__ as cli
from gpustack_agent.api import kube
from gpustack_agent.inventory import drift, inventory
from gpustack_agent.model import labels
from gpustack_agent.inventory import loop

NODE_NAME = "ip-10-0-12-35.ec2.internal"






@pytest.fixture
def config(pool_config) -> labels.Config:
    return labels.parse_config(pool_config)


def node_labels(load_fixture, name: str) -> dict[str, str]:
    return load_fixture(name)["metadata"]["labels"]


def departures(found: inventory.Inventory, node: dict[str, str], config: labels.Config) -> list[tuple[str, str]]:
    return [(d.kind, d.message) for d in drift.node_drift(found, node, config)]


def test_the_pulumi_output_declares_each_pools_gpu_model(config):
    assert [(p.name, p.gpu_model) for p in config.pools] == [
        ("a100", "A100-40GB"), ("h100", "H100-80GB"), ("passthrough", "T4")]


@pytest.mark.parametrize("value", [7, "", ["A100-40GB"]])
def test_a_malformed_gpu_model_is_a_config_error(pool_config, value):
    pool_config["pools"][0]["gpuModel"] = value

    with pytest.raises(labels.ConfigError, match=r"pools\[0\]\.gpuModel must be a non-empty string"):
        labels.parse_config(pool_config)


def test_a_config_without_gpu_models_still_parses(pool_config):
    for pool in pool_config["pools"]:
        del pool["gpuModel"]

    assert {p.gpu_model for p in labels.parse_config(pool_config).pools} == {None}


def test_read_with_the_agents_own_model_table(monkeypatch):
    FakeNvml([h100_80gb() for _ in range(8)]).install(monkeypatch)

    found = inventory.read_inventory()

    assert [g.model for g in found.gpus] == ["H100-80GB"] * 8
    assert found.summary() == {"model": "H100-80GB", "count": 8, "memoryMiB": 81559, "migMode": "disabled",
                               "driver": "595.91.07"}


def test_the_node_matches_its_pool(monkeypatch, load_fixture, config):
    FakeNvml([a100_40gb() for _ in range(8)]).install(monkeypatch)

    assert departures(inventory.read_inventory(), node_labels(load_fixture, "node-a100-labelled"), config) == []


def test_gpus_of_another_model_than_the_pool_declares(monkeypatch, load_fixture, config):
    FakeNvml([a100_80gb() for _ in range(8)]).install(monkeypatch)

    assert departures(inventory.read_inventory(), node_labels(load_fixture, "node-a100-labelled"), config) == [
        ("model", "GPUs 0-7 are A100-80GB (NVIDIA A100-SXM4-80GB, 0x20B2), but pool a100 declares A100-40GB"),
    ]


def test_mig_left_on_for_a_pool_without_mig_with_the_mig_managers_state(monkeypatch, load_fixture, config):
    FakeNvml([h100_80gb((ENABLE, ENABLE), {"1g.10gb": 7}) for _ in range(8)]).install(monkeypatch)

    assert departures(inventory.read_inventory(), node_labels(load_fixture, "node-h100-mig-paused"), config) == [
        ("mig-mode", "MIG mode is enabled on GPUs 0-7, but pool h100 does not use MIG "
                     "(nvidia.com/mig.config=all-disabled) (nvidia.com/mig.config.state=pending)"),
    ]


def test_a_single_profile_layout_checks_the_profile(monkeypatch, load_fixture, pool_config):
    pool_config["pools"][1]["labels"]["nvidia.com/mig.config"] = "all-1g.10gb.me"
    config = labels.parse_config(pool_config)
    FakeNvml([h100_80gb((ENABLE, ENABLE), {"1g.10gb+me": 1}) for _ in range(4)]
             + [h100_80gb((ENABLE, ENABLE), {"1g.10gb": 7}) for _ in range(2)]
             + [h100_80gb((DISABLE, ENABLE)) for _ in range(2)]).install(monkeypatch)

    assert departures(inventory.read_inventory(), node_labels(load_fixture, "node-h100-mig-paused"), config) == [
        ("mig-mode", "MIG mode is disabled on GPUs 6-7 (enabled after the next GPU reset or reboot), but pool h100 "
                     "declares MIG layout all-1g.10gb.me (nvidia.com/mig.config.state=pending)"),
        ("mig-layout", "GPUs 4-5 have MIG devices 7x 1g.10gb, but layout all-1g.10gb.me creates 1g.10gb+me devices "
                       "only (nvidia.com/mig.config.state=pending)"),
    ]


@pytest.mark.parametrize(
    ("layout", "profile"),
    [("all-1g.10gb", "1g.10gb"), ("all-1g.10gb.me", "1g.10gb+me"), ("all-1g.24gb.me.all", "1g.24gb+me.all"),
     ("all-1g.24gb-me", "1g.24gb-me"), ("all-balanced", None), ("all-enabled", None), ("three-2g", None)],
)
def test_single_profile_of_a_layout_name(layout, profile):
    assert drift.single_profile(layout) == profile


def test_a_passthrough_node_whose_gpus_the_driver_holds(monkeypatch, load_fixture, config):
    FakeNvml([t4() for _ in range(8)]).install(monkeypatch)

    assert departures(inventory.read_inventory(), node_labels(load_fixture, "node-passthrough-vm"), config) == [
        ("workload", "pool passthrough passes its GPUs to VMs through vfio-pci, but the NVIDIA driver holds GPUs 0-7"),
    ]


def test_a_node_in_no_pool_and_a_pool_the_config_lost(monkeypatch, load_fixture, config):
    FakeNvml([l4()]).install(monkeypatch)
    found = inventory.read_inventory()

    assert departures(found, node_labels(load_fixture, "node-a100-fresh"), config) == [
        ("pool", "the node has no gpu-stack/pool label: it matches no pool's nodeSelector"),
    ]
    assert departures(found, node_labels(load_fixture, "node-g5-unpooled"), config) == [
        ("pool", "pool l4 (gpu-stack/pool) is not in the node-pools config"),
    ]


def test_mixed_models_and_short_memory_are_drift_in_any_pool(monkeypatch, load_fixture, config):
    short = a100_40gb()
    short.memory_mib = 20480
    FakeNvml([a100_40gb(), short, l4()]).install(monkeypatch)

    assert departures(inventory.read_inventory(), node_labels(load_fixture, "node-a100-labelled"), config) == [
        ("mixed-models", "the node mixes GPU models: 2x A100-40GB (GPUs 0-1), 1x L4 (GPU 2); a pool declares one "
                         "gpuModel"),
        ("memory", "GPU 1 has 20480 MiB, below the 40 GB the catalog gives A100-40GB"),
        ("model", "GPU 2 is L4 (NVIDIA L4, 0x27B8), but pool a100 declares A100-40GB"),
    ]


def test_annotations_record_inventory_and_drift(monkeypatch, load_fixture, pool_config):
    FakeNvml([a100_80gb((ENABLE, ENABLE), {"3g.40gb": 2}) for _ in range(2)]).install(monkeypatch)

    wanted, found = drift.wanted_annotations(
        inventory.read_inventory(), node_labels(load_fixture, "node-a100-labelled"), pool_config)

    assert wanted == {
        "gpu-stack/inventory": '{"count":2,"driver":"595.91.07","memoryMiB":81920,"migDevices":{"3g.40gb":2},'
                               '"migMode":"enabled","model":"A100-80GB"}',
        "gpu-stack/drift": '[{"kind":"model","message":"GPUs 0-1 are A100-80GB (NVIDIA A100-SXM4-80GB, 0x20B2), but '
                           'pool a100 declares A100-40GB"},{"kind":"mig-mode","message":"MIG mode is enabled on GPUs '
                           '0-1, but pool a100 does not use MIG"}]',
    }
    assert [d.kind for d in found] == ["model", "mig-mode"]


def test_annotations_without_nvml_record_the_error_and_drop_the_drift(load_fixture, config):
    wanted, found = drift.wanted_annotations(
        inventory.NvmlUnavailable("the NVIDIA kernel driver is not loaded (NVML: Driver Not Loaded)"),
        node_labels(load_fixture, "node-a100-labelled"), config)

    assert wanted == {
        "gpu-stack/inventory": '{"error":"the NVIDIA kernel driver is not loaded (NVML: Driver Not Loaded)"}',
        "gpu-stack/drift": None,
    }
    assert found == []


def test_annotation_patch_holds_only_changes(load_fixture):
    node = load_fixture("node-a100-labelled")
    node["metadata"]["annotations"]["gpu-stack/drift"] = "[]"

    assert drift.annotation_patch(node, {"gpu-stack/drift": "[]", "gpu-stack/inventory": "{}"}) == {
        "metadata": {"annotations": {"gpu-stack/inventory": "{}"}}}
    assert drift.annotation_patch(node, {"gpu-stack/drift": "[]"}) is None
    assert drift.annotation_patch(node, {"gpu-stack/drift": None}) == {
        "metadata": {"annotations": {"gpu-stack/drift": None}}}
    assert drift.annotation_patch(load_fixture("node-a100-fresh"), {"gpu-stack/drift": None}) is None


# --- the loop --------------------------------------------------------------


def test_inventory_loop_annotates_the_node_and_logs_the_drift(monkeypatch, load_fixture, pool_config, apply_patch):
    FakeNvml([h100_80gb() for _ in range(8)]).install(monkeypatch)
    node = load_fixture("node-a100-labelled")
    core = fake_api()
    core.read_node.side_effect = lambda *a, **k: model(node, "V1Node")
    sleep = mock.Mock()
    log = Recorder()

    loop.run_inventory_loop(
        core, node_name=NODE_NAME, load_config=lambda: pool_config, read_inventory=inventory.read_inventory,
        resync_seconds=60, log=log, stop=stop_after(1), sleep=sleep,
    )

    core.patch_node.assert_called_once_with(
        name=NODE_NAME,
        body={"metadata": {"annotations": {
            "gpu-stack/inventory": '{"count":8,"driver":"595.91.07","memoryMiB":81559,"migMode":"disabled",'
                                   '"model":"H100-80GB"}',
            "gpu-stack/drift": '[{"kind":"model","message":"GPUs 0-7 are H100-80GB (NVIDIA H100 80GB HBM3, 0x2330), '
                               'but pool a100 declares A100-40GB"}]',
        }}},
        _content_type="application/merge-patch+json",
        _request_timeout=kube.REQUEST_TIMEOUT_SECONDS,
    )
    sleep.assert_called_once_with(60)
    assert log.records == [{
        "level": "warning", "event": "inventory", "node": NODE_NAME,
        "inventory": {"model": "H100-80GB", "count": 8, "memoryMiB": 81559, "migMode": "disabled",
                      "driver": "595.91.07"},
        "drift": [{"kind": "model", "message": "GPUs 0-7 are H100-80GB (NVIDIA H100 80GB HBM3, 0x2330), but pool "
                                               "a100 declares A100-40GB"}],
    }]


def test_inventory_loop_writes_nothing_when_the_annotations_are_current(monkeypatch, load_fixture, pool_config,
                                                                        apply_patch):
    FakeNvml([a100_40gb() for _ in range(8)]).install(monkeypatch)
    node = load_fixture("node-a100-labelled")
    core = fake_api()

    def read_node(*args: Any, **kwargs: Any) -> Any:
        return model(node, "V1Node")

    def patch_node(name: str, body: dict[str, Any], **kwargs: Any) -> None:
        nonlocal node
        node = apply_patch(node, body)

    core.read_node.side_effect = read_node
    core.patch_node.side_effect = patch_node
    log = Recorder()

    loop.run_inventory_loop(
        core, node_name=NODE_NAME, load_config=lambda: pool_config, read_inventory=inventory.read_inventory,
        resync_seconds=60, log=log, stop=stop_after(3), sleep=mock.Mock(),
    )

    assert core.read_node.call_count == 3 and core.patch_node.call_count == 1
    assert node["metadata"]["annotations"]["gpu-stack/drift"] == "[]"
    assert [(r["level"], r["event"], r["drift"]) for r in log.records] == [("info", "inventory", [])]


def test_inventory_loop_without_nvml_records_the_error(monkeypatch, load_fixture, pool_config):
    FakeNvml([], fail={"nvmlInit": pynvml.NVMLError_DriverNotLoaded()}).install(monkeypatch)
    node = load_fixture("node-a100-labelled")
    node["metadata"]["annotations"]["gpu-stack/drift"] = "[]"
    core = fake_api()
    core.read_node.return_value = model(node, "V1Node")
    log = Recorder()

    loop.run_inventory_loop(
        core, node_name=NODE_NAME, load_config=lambda: pool_config, read_inventory=inventory.read_inventory,
        resync_seconds=60, log=log, stop=stop_after(1), sleep=mock.Mock(),
    )

    assert core.patch_node.call_args.kwargs["body"] == {"metadata": {"annotations": {
        "gpu-stack/inventory": '{"error":"the NVIDIA kernel driver is not loaded (NVML: Driver Not Loaded)"}',
        "gpu-stack/drift": None,
    }}}
    assert log.records == [{"level": "warning", "event": "inventory-unavailable", "node": NODE_NAME,
                            "error": "the NVIDIA kernel driver is not loaded (NVML: Driver Not Loaded)"}]


def test_inventory_loop_keeps_the_annotations_with_an_invalid_config(monkeypatch, load_fixture, pool_config):
    FakeNvml([a100_40gb()]).install(monkeypatch)
    core = fake_api()
    core.read_node.return_value = model(load_fixture("node-a100-labelled"), "V1Node")
    sleep = mock.Mock()
    log = Recorder()

    loop.run_inventory_loop(
        core, node_name=NODE_NAME, load_config=lambda: dict(pool_config, version=5),
        read_inventory=inventory.read_inventory, resync_seconds=45, log=log, stop=stop_after(1), sleep=sleep,
    )

    core.patch_node.assert_not_called()
    sleep.assert_called_once_with(45)
    assert log.records[0]["event"] == "config-invalid"
    assert "unsupported node-pools config version 5" in log.records[0]["error"]


def test_inventory_loop_retries_server_errors_and_gives_up_on_forbidden(monkeypatch, load_fixture, pool_config):
    FakeNvml([a100_40gb()]).install(monkeypatch)
    core = fake_api()
    core.read_node.side_effect = [ApiException(status=503), model(load_fixture("node-a100-labelled"), "V1Node")]
    sleep = mock.Mock()
    log = Recorder()

    loop.run_inventory_loop(
        core, node_name=NODE_NAME, load_config=lambda: pool_config, read_inventory=inventory.read_inventory,
        resync_seconds=60, log=log, stop=stop_after(2), sleep=sleep, rng=lambda: 1.0,
    )

    assert [c.args[0] for c in sleep.call_args_list] == [1.0, 60]
    assert [r["event"] for r in log.records] == ["retry", "inventory"]

    core.read_node.side_effect = ApiException(status=403, reason="Forbidden")
    with pytest.raises(ApiException):
        loop.run_inventory_loop(
            core, node_name=NODE_NAME, load_config=lambda: pool_config, read_inventory=inventory.read_inventory,
            resync_seconds=60, log=Recorder(), stop=stop_after(5), sleep=mock.Mock(),
        )


# --- command line ----------------------------------------------------------


def test_inventory_command_runs_the_loop_and_exits_1_on_errors_retrying_cannot_fix(monkeypatch, tmp_path,
                                                                                     pool_config, capsys):
    fake = FakeNvml([a100_40gb()]).install(monkeypatch)
    config_file = tmp_path / "node-pools.json"
    config_file.write_text(json.dumps(pool_config))
    core = fake_api()
    core.read_node.side_effect = ApiException(status=403, reason="Forbidden")

    code = cli.main(["inventory"], {"NODE_NAME": "n1", "CONFIG_FILE": str(config_file)},
                    clients=clients_of(core))

    assert code == 1
    assert "nvmlInit" in fake.calls
    out, err = capsys.readouterr()
    assert json.loads(out.splitlines()[0])["command"] == "inventory"
    assert json.loads(err.strip().splitlines()[-1])["event"] == "fatal"


def test_inventory_command_needs_a_node_name(capsys):
    clients = mock.Mock()

    assert cli.main(["inventory"], {}, clients=clients) == 2

    clients.assert_not_called()
    assert json.loads(capsys.readouterr().err.strip())["error"] == "NODE_NAME must be set"


def test_dockerfile_installs_the_nvml_bindings_of_requirements():
    # The image, the agent's requirements and gpu-stack's (which import this package for the CLI) share one pin.
    agent_dir = Path(__file__).resolve().parents[1]
    requirements = (agent_dir / "requirements.txt").read_text().splitlines()
    pin = next(line for line in requirements if line.startswith("nvidia-ml-py=="))

    assert re.search(rf"^RUN pip install .*{re.escape(pin)}", (agent_dir / "Dockerfile").read_text(), re.MULTILINE)
    assert pin in (agent_dir.parents[1] / "requirements.txt").read_text().splitlines()
