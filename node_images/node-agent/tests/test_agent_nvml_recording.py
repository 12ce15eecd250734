"""The NVML read against what real GPUs answered: an H100 80GB HBM3 and an H200 under driver 580.159.04,
recorded by record_nvml.py on lent GPU machines (fixtures/nvml/), and the GPU instance profile table read
beside it."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pynvml
import pytest

import record_nvml
from fakenvml import FakeNvml, h100_80gb, h200, l4
from gpustack_agent.inventory import inventory

RECORDINGS = Path(__file__).resolve().parent / "fixtures" / "nvml"
H100_RECORDING = RECORDINGS / "h100-80gb-hbm3-driver-580.json"
H200_RECORDING = RECORDINGS / "h200-driver-580.json"


@pytest.fixture
def recording() -> dict:
    return json.loads(H100_RECORDING.read_text())


def replay(monkeypatch, recording: dict, tmp_path: Path) -> FakeNvml:
    path = tmp_path / "nvml.json"
    path.write_text(json.dumps(recording))
    return FakeNvml.from_recording(path).install(monkeypatch)


def test_the_recorded_h100_reads_as_the_catalogs_h100(monkeypatch, recording, tmp_path):
    replay(monkeypatch, recording, tmp_path)

    found = inventory.read_inventory()

    (gpu,) = found.gpus
    assert (gpu.model, gpu.pci_device_id, gpu.memory_mib, gpu.architecture) == ("H100-80GB", "0x2330", 81559, "hopper")
    assert (gpu.mig_mode, gpu.mig_pending, dict(gpu.mig_devices)) == ("disabled", None, {})
    assert (found.driver_version, found.cuda_version, found.driver_branch) == ("580.159.04", "13.0", 580)
    # The agent's stand-in H100 says what the real one says.
    assert (gpu.name, gpu.memory_mib) == (h100_80gb().name, h100_80gb().memory_mib)


def test_the_recorded_h200_reads_as_the_catalogs_h200(monkeypatch):
    FakeNvml.from_recording(H200_RECORDING).install(monkeypatch)

    (gpu,) = inventory.read_inventory(mig_profiles=True).gpus

    assert (gpu.model, gpu.pci_device_id, gpu.memory_mib, gpu.architecture) == ("H200", "0x2335", 143771, "hopper")
    assert (gpu.name, gpu.memory_mib) == (h200().name, h200().memory_mib)
    assert [(p.name, p.memory_slices, p.instances) for p in gpu.mig_profiles] == [
        ("1g.18gb", 1, 7), ("1g.18gb+me", 1, 1), ("1g.35gb", 2, 4), ("2g.35gb", 2, 3), ("3g.71gb", 4, 2),
        ("4g.71gb", 4, 1), ("7g.141gb", 8, 1),
    ]


def test_profiles_are_read_only_when_asked_for(monkeypatch, recording, tmp_path):
    nvml = replay(monkeypatch, recording, tmp_path)

    assert inventory.read_inventory().gpus[0].mig_profiles == ()
    assert "nvmlDeviceGetGpuInstanceProfileInfoV" not in nvml.calls


def test_the_h100s_profile_table_as_the_driver_offers_it_with_mig_off(monkeypatch, recording, tmp_path):
    replay(monkeypatch, recording, tmp_path)

    (gpu,) = inventory.read_inventory(mig_profiles=True).gpus

    # Profile ids the driver does not offer (NotSupported) or does not know (InvalidArgument) are left out.
    assert [(p.name, p.compute_slices, p.memory_slices, p.instances) for p in gpu.mig_profiles] == [
        ("1g.10gb", 1, 1, 7), ("1g.10gb+me", 1, 1, 1), ("1g.20gb", 1, 2, 4), ("2g.20gb", 2, 2, 3),
        ("3g.40gb", 3, 4, 2), ("4g.40gb", 4, 4, 1), ("7g.80gb", 7, 8, 1),
    ]
    assert {p.name: p.nvml_id for p in gpu.mig_profiles}["1g.10gb+me"] == 20  # nvidia-smi mig -lgip's ID column
    assert gpu.as_json()["migProfiles"][0] == {"name": "1g.10gb", "nvmlId": 19, "computeSlices": 1,
                                               "memorySlices": 1, "instances": 7, "memoryMiB": 9984}


def test_a_gpu_without_mig_has_no_profile_table(monkeypatch):
    nvml = FakeNvml([l4()]).install(monkeypatch)

    assert inventory.read_inventory(mig_profiles=True).gpus[0].mig_profiles == ()
    assert "nvmlDeviceGetGpuInstanceProfileInfoV" not in nvml.calls


def test_a_refused_profile_read_is_nvml_unavailable_naming_the_gpu(monkeypatch, recording, tmp_path):
    broken = copy.deepcopy(recording)
    broken["gpus"][0]["gpuInstanceProfiles"][0] = {"profile": 0, "error": "NVMLError_NoPermission"}
    replay(monkeypatch, broken, tmp_path)

    with pytest.raises(inventory.NvmlUnavailable, match=r"NVML refused reading GPU 0 \(Insufficient Permissions\)"):
        inventory.read_inventory(mig_profiles=True)


def test_a_profile_without_one_placement_size_has_no_memory_slices(monkeypatch, recording, tmp_path):
    changed = copy.deepcopy(recording)
    changed["gpus"][0]["gpuInstanceProfiles"][4]["placements"] = {"error": "NVMLError_NotSupported"}
    replay(monkeypatch, changed, tmp_path)

    profiles = {p.name: p for p in inventory.read_inventory(mig_profiles=True).gpus[0].mig_profiles}

    assert profiles["7g.80gb"].memory_slices is None


@pytest.mark.parametrize("path", [H100_RECORDING, H200_RECORDING], ids=lambda p: p.stem)
def test_the_recorder_replayed_gives_back_its_recording(monkeypatch, path):
    recording = json.loads(path.read_text())
    FakeNvml.from_recording(path).install(monkeypatch)
    monkeypatch.setattr(record_nvml.metadata, "version", lambda name: recording["recordedWith"].split()[-1])

    assert record_nvml.record() == recording


def test_the_recorder_says_why_when_there_is_no_nvml(monkeypatch, capsys):
    FakeNvml([], fail={"nvmlInit": pynvml.NVMLError_LibraryNotFound()}).install(monkeypatch)

    with pytest.raises(SystemExit, match="NVML cannot be read here \\(NVMLError_LibraryNotFound"):
        record_nvml.main()
