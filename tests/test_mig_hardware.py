"""`python -m gpustack inventory --mig-profiles`: the driver's MIG profile table against the MIG catalog, on the
NVML answers of a real H100 80GB HBM3 and a real H200 (driver 580.159.04) recorded on lent GPU machines."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pynvml
import pytest

import gpustack.__main__ as cli
from components.catalogs import mig_profiles
from gpustack import inventory, mig_hardware
from stacktest import ROOT

AGENT_TESTS = Path(ROOT) / "node_images" / "node-agent" / "tests"
H100_RECORDING = AGENT_TESTS / "fixtures" / "nvml" / "h100-80gb-hbm3-driver-580.json"
H200_RECORDING = AGENT_TESTS / "fixtures" / "nvml" / "h200-driver-580.json"
sys.path.insert(0, str(AGENT_TESTS))

from fakenvml import FakeNvml, l4  # noqa: E402


@pytest.fixture
def recording() -> dict:
    return json.loads(H100_RECORDING.read_text())


def replay(monkeypatch, tmp_path, recording: dict, extra: tuple = ()) -> FakeNvml:
    path = tmp_path / "nvml.json"
    path.write_text(json.dumps(recording))
    fake = FakeNvml.from_recording(path)
    fake.gpus.extend(extra)
    return fake.install(monkeypatch)


def profile(recording: dict, name: str) -> dict:
    return next(p for p in recording["gpus"][0]["gpuInstanceProfiles"] if p.get("name") == f"MIG {name}")


def test_the_catalog_agrees_with_a_real_h100(monkeypatch, tmp_path, capsys, recording):
    replay(monkeypatch, tmp_path, recording)

    assert cli.main(["inventory", "--mig-profiles"]) == inventory.EXIT_OK

    assert capsys.readouterr().out == (
        "NVIDIA driver 580.159.04, CUDA 13.0: 1 GPU\n"
        "\n"
        "H100-80GB (GPU 0): 7 GPU instance profiles\n"
        "PROFILE     NVML ID  COMPUTE  MEMORY  PER GPU  MEMORY MiB  CATALOG\n"
        "1g.10gb     19       1/7      1/8     7        9984        ok\n"
        "1g.10gb+me  20       1/7      1/8     1        9984        ok\n"
        "1g.20gb     15       1/7      2/8     4        20096       ok\n"
        "2g.20gb     14       2/7      2/8     3        20096       ok\n"
        "3g.40gb     9        3/7      4/8     2        40448       ok\n"
        "4g.40gb     5        4/7      4/8     1        40448       ok\n"
        "7g.80gb     0        7/7      8/8     1        81152       ok\n"
        "H100-80GB: the catalog agrees with the driver\n"
    )


def test_the_catalog_agrees_with_a_real_h200(monkeypatch, capsys):
    FakeNvml.from_recording(H200_RECORDING).install(monkeypatch)

    assert cli.main(["inventory", "--mig-profiles"]) == inventory.EXIT_OK

    out = capsys.readouterr().out
    assert "7g.141gb    0        7/7      8/8     1        143360      ok\n" in out
    assert out.endswith("H200: the catalog agrees with the driver\n")


def test_every_way_the_catalog_can_differ_is_named(monkeypatch, tmp_path, capsys, recording):
    changed = copy.deepcopy(recording)
    profile(changed, "1g.20gb")["instanceCount"] = 3
    profile(changed, "3g.40gb")["placements"] = [[0, 3], [4, 3]]
    profile(changed, "4g.40gb")["sliceCount"] = 3
    table = changed["gpus"][0]["gpuInstanceProfiles"]
    table[pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX] = {
        **profile(changed, "1g.10gb"), "profile": pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX, "id": 30,
        "name": "MIG 1g.10gb+gfx"}
    table.remove(profile(changed, "1g.10gb+me"))
    replay(monkeypatch, tmp_path, changed)

    assert cli.main(["inventory", "--mig-profiles"]) == inventory.EXIT_DRIFT

    out = capsys.readouterr().out
    assert "1g.10gb+gfx  30       1/7      1/8     7        9984        missing\n" in out
    assert "1g.20gb      15       1/7      2/8     3        20096       differs\n" in out
    assert out.endswith(
        "H100-80GB: the catalog differs from the driver:\n"
        "  1g.10gb+gfx: driver 580.159.04 offers it (7 per GPU) but the catalog lacks it, so gpu-stack refuses a "
        "layout that uses it\n"
        "  1g.20gb: 3 per GPU by the driver, 4 in the catalog\n"
        "  3g.40gb: 3 memory slices by the driver, 4 in the catalog\n"
        "  4g.40gb: 3 compute slices by the driver, 4 in the catalog\n"
        "  1g.10gb+me: in the catalog, but driver 580.159.04 does not offer it on this GPU, so a layout that uses it "
        "passes gpu-stack and fails in the MIG manager\n"
    )


def test_a_mig_gpu_the_catalog_does_not_know(monkeypatch, tmp_path, capsys, recording):
    foreign = copy.deepcopy(recording)
    foreign["gpus"][0]["pciDeviceId"] = (0x2399 << 16) | 0x10DE
    foreign["gpus"][0]["name"] = "NVIDIA H100 Future"
    replay(monkeypatch, tmp_path, foreign)

    assert cli.main(["inventory", "--mig-profiles"]) == inventory.EXIT_DRIFT

    assert capsys.readouterr().out.endswith(
        "NVIDIA H100 Future (0x2399): the catalog differs from the driver:\n"
        "  gpu-stack's MIG catalog has no NVIDIA H100 Future (0x2399), so every MIG layout for it is refused; the "
        "driver offers 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb\n"
    )


def test_gpus_without_mig_are_listed_and_judged_by_nothing(monkeypatch, tmp_path, capsys, recording):
    fake = replay(monkeypatch, tmp_path, recording, extra=(l4(), l4()))

    assert cli.main(["inventory", "--mig-profiles"]) == inventory.EXIT_OK

    assert capsys.readouterr().out.endswith("\nL4 (GPUs 1-2): no MIG\n")
    # The GPU instance profile calls go to the MIG-capable GPU only.
    assert fake.calls.count("nvmlDeviceGetGpuInstanceProfileInfoV") == 18


def test_the_json_document(monkeypatch, tmp_path, capsys, recording):
    replay(monkeypatch, tmp_path, recording, extra=(l4(),))

    assert cli.main(["inventory", "--mig-profiles", "--json"]) == inventory.EXIT_OK

    document = json.loads(capsys.readouterr().out)
    (table,) = document["tables"]
    assert document["driverVersion"] == "580.159.04"
    assert (table["model"], table["gpus"], table["catalogAgrees"], table["problems"]) == ("H100-80GB", [0], True, [])
    assert [p["name"] for p in table["profiles"]] == list(mig_profiles.GEOMETRY["H100-80GB"].profiles)
    assert document["withoutMig"] == [{"index": 1, "label": "L4"}]


def test_without_nvml_it_exits_3(monkeypatch, capsys):
    FakeNvml([], fail={"nvmlInit": pynvml.NVMLError_DriverNotLoaded()}).install(monkeypatch)

    assert cli.main(["inventory", "--mig-profiles"]) == inventory.EXIT_NO_GPU

    assert capsys.readouterr().err == "gpustack inventory: the NVIDIA kernel driver is not loaded (NVML: Driver Not Loaded)\n"


@pytest.mark.parametrize("extra", [["--stack", "a100-mig"], ["--pool", "a100-mig"]])
def test_mig_profiles_with_a_stack_is_a_usage_error(monkeypatch, capsys, extra):
    fake = FakeNvml([l4()]).install(monkeypatch)

    assert cli.main(["inventory", "--mig-profiles", *extra]) == cli.EXIT_CONFIG

    assert "--mig-profiles compares the GPUs with gpu-stack's MIG catalog, not with a stack" in capsys.readouterr().err
    assert fake.calls == []

