"""`python -m gpustack inventory`: the NVML read against patched NVML, the pool entry, drift against real stacks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pynvml
import pytest

import gpustack.__main__ as cli
from components.catalogs import catalog
from components.catalogs import mig_catalog
from components.config import load_config
from gpustack import inventory
from stacktest import ROOT, bag, stack_config

sys.path.insert(0, str(ROOT / "node_images" / "node-agent" / "tests"))
from fakenvml import DISABLE, ENABLE, FakeGpu, FakeNvml, a100_80gb, h100_80gb, h200, l4  # noqa: E402

from gpustack_agent.inventory import inventory as agent  # noqa: E402

BALANCED = {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}


def stack(name: str):
    return cli.load_stack(name)[2]


def read(monkeypatch, gpus, **kwargs) -> inventory.Inventory:
    FakeNvml(gpus, **kwargs).install(monkeypatch)
    return inventory.read_inventory()


def kinds_and_messages(drifts) -> list[tuple[str, str]]:
    return [(d.kind, d.message) for d in drifts]


# --- the catalog the agent carries ---------------------------------------------------------------------------


def test_agent_model_table_is_the_catalog():
    assert agent.MODELS == inventory.CATALOG_MODELS


def test_every_catalog_architecture_has_an_nvml_architecture():
    assert set(catalog.ARCHITECTURES) <= set(agent.ARCHITECTURES.values())
    assert {m.architecture for m in catalog.GPU_MODELS.values()} <= set(agent.ARCHITECTURES.values())


# --- reading -------------------------------------------------------------------------------------------------


def test_reads_a100_80gb_with_the_balanced_mig_layout(monkeypatch):
    fake = FakeNvml([a100_80gb((ENABLE, ENABLE), BALANCED) for _ in range(8)]).install(monkeypatch)

    found = inventory.read_inventory()

    assert found.driver_version == "595.91.07" and found.cuda_version == "13.0" and found.driver_branch == 595
    assert len(found.gpus) == 8
    assert found.gpus[3] == agent.Gpu(
        index=3, name="NVIDIA A100-SXM4-80GB", pci_device_id="0x20B2", pci_bus_id="00000000:13:00.0",
        memory_mib=81920, architecture="ampere", model="A100-80GB", mig_mode="enabled", mig_pending=None,
        mig_devices={"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
    )
    assert fake.initialised == 0
    assert found.summary() == {"model": "A100-80GB", "count": 8, "memoryMiB": 81920, "migMode": "enabled",
                               "driver": "595.91.07", "migDevices": BALANCED}


def test_reads_a100_with_mig_disabled_and_enabling_pending(monkeypatch):
    fake = FakeNvml([a100_80gb((DISABLE, ENABLE)), a100_80gb((DISABLE, DISABLE))]).install(monkeypatch)

    found = inventory.read_inventory()

    assert [(g.mig_mode, g.mig_pending, dict(g.mig_devices)) for g in found.gpus] == [
        ("disabled", "enabled", {}), ("disabled", None, {})]
    # MIG devices are only asked for on a GPU running MIG.
    assert "nvmlDeviceGetMaxMigDeviceCount" not in fake.calls
    assert found.summary()["migMode"] == "disabled" and "migDevices" not in found.summary()


def test_reads_h100_80gb(monkeypatch):
    found = read(monkeypatch, [h100_80gb() for _ in range(8)], driver="570.172.08", cuda=12080)

    gpu = found.gpus[0]
    assert (gpu.model, gpu.pci_device_id, gpu.memory_mib, gpu.architecture, gpu.mig_mode) == (
        "H100-80GB", "0x2330", 81559, "hopper", "disabled")
    assert (found.driver_version, found.cuda_version) == ("570.172.08", "12.8")


def test_reads_h200_with_seven_1g_18gb_instances(monkeypatch):
    found = read(monkeypatch, [h200((ENABLE, ENABLE), {"1g.18gb": 7})])

    gpu = found.gpus[0]
    assert (gpu.model, gpu.pci_device_id, gpu.memory_mib, gpu.architecture) == ("H200", "0x2335", 143771, "hopper")
    assert gpu.mig_devices == {"1g.18gb": 7}


def test_mig_profiles_with_qualifiers_keep_them(monkeypatch):
    found = read(monkeypatch, [a100_80gb((ENABLE, ENABLE), {"1g.10gb+me": 1, "1g.20gb": 2, "2g.20gb": 1})])

    assert list(found.gpus[0].mig_devices.items()) == [("1g.10gb+me", 1), ("1g.20gb", 2), ("2g.20gb", 1)]


def test_reads_a_gpu_without_mig(monkeypatch):
    found = read(monkeypatch, [l4(), l4()])

    gpu = found.gpus[1]
    assert (gpu.model, gpu.pci_device_id, gpu.architecture, gpu.mig_mode, gpu.mig_pending) == (
        "L4", "0x27B8", "ada-lovelace", None, None)
    assert found.summary() == {"model": "L4", "count": 2, "memoryMiB": 23034, "migMode": "unsupported",
                               "driver": "595.91.07"}
    assert gpu.as_json()["migCapable"] is False


def test_a_pci_id_outside_the_catalog_has_no_model(monkeypatch):
    found = read(monkeypatch, [FakeGpu("NVIDIA Future GPU", 0x3FFF, 196608, pynvml.NVML_DEVICE_ARCH_RUBIN)])

    gpu = found.gpus[0]
    assert (gpu.model, gpu.label, gpu.architecture) == (None, "NVIDIA Future GPU (0x3FFF)", "rubin")


def test_another_vendors_device_id_is_not_matched(monkeypatch):
    gpu = a100_80gb()
    gpu.vendor_id = 0x1234

    assert read(monkeypatch, [gpu]).gpus[0].model is None


def test_architecture_not_supported_reads_as_unknown(monkeypatch):
    gpu = l4()
    gpu.fail["nvmlDeviceGetArchitecture"] = pynvml.NVMLError_NotSupported()

    assert read(monkeypatch, [gpu]).gpus[0].architecture == "unknown"


def test_cuda_version_falls_back_to_the_first_version_of_the_call(monkeypatch):
    fake = FakeNvml([l4()], cuda=12040, fail={"nvmlSystemGetCudaDriverVersion_v2": pynvml.NVMLError_FunctionNotFound()})
    fake.install(monkeypatch)

    assert inventory.read_inventory().cuda_version == "12.4"
    assert "nvmlSystemGetCudaDriverVersion" in fake.calls


@pytest.mark.parametrize(
    ("fail", "message"),
    [
        ({"nvmlInit": pynvml.NVMLError_LibraryNotFound()},
         "NVML (libnvidia-ml.so.1) is not installed: this machine has no NVIDIA driver, or its libraries are not on "
         "the loader path (gpu-stack's containerized driver keeps them under /run/nvidia/driver; point "
         "LD_LIBRARY_PATH at its library directory)"),
        ({"nvmlInit": pynvml.NVMLError_DriverNotLoaded()},
         "the NVIDIA kernel driver is not loaded (NVML: Driver Not Loaded)"),
        ({"nvmlInit": pynvml.NVMLError_NoPermission()},
         "NVML refused nvmlInit (Insufficient Permissions): run as root or as a user that can open /dev/nvidia*"),
    ],
)
def test_no_library_or_driver_is_unavailable_without_shutdown(monkeypatch, fail, message):
    fake = FakeNvml([l4()], fail=fail).install(monkeypatch)

    with pytest.raises(inventory.NvmlUnavailable) as raised:
        inventory.read_inventory()

    assert str(raised.value) == message
    assert "nvmlShutdown" not in fake.calls


@pytest.mark.parametrize(
    ("gpu_fail", "system_fail", "message"),
    [
        ({"nvmlDeviceGetMemoryInfo": pynvml.NVMLError_Unknown()}, {}, "NVML error in reading GPU 1: Unknown Error"),
        ({"nvmlDeviceGetPciInfo": pynvml.NVMLError_GpuIsLost()}, {}, "NVML error in reading GPU 1: GPU is lost"),
        ({"nvmlDeviceGetMigMode": pynvml.NVMLError_Unknown()}, {}, "NVML error in reading GPU 1: Unknown Error"),
        ({}, {"nvmlSystemGetDriverVersion": pynvml.NVMLError_Uninitialized()},
         "NVML error in nvmlSystemGetDriverVersion: Uninitialized"),
        ({}, {"nvmlDeviceGetCount": pynvml.NVMLError_Unknown()}, "NVML error in nvmlDeviceGetCount: Unknown Error"),
    ],
)
def test_nvml_errors_after_init_are_unavailable_and_shut_nvml_down(monkeypatch, gpu_fail, system_fail, message):
    broken = h100_80gb()
    broken.fail.update(gpu_fail)
    fake = FakeNvml([h100_80gb(), broken], fail=system_fail).install(monkeypatch)

    with pytest.raises(inventory.NvmlUnavailable) as raised:
        inventory.read_inventory()

    assert str(raised.value) == message
    assert fake.calls[-1] == "nvmlShutdown" and fake.initialised == 0


def test_mig_device_errors_are_nvml_errors(monkeypatch):
    gpu = a100_80gb((ENABLE, ENABLE), BALANCED)
    gpu.fail["nvmlDeviceGetMigDeviceHandleByIndex"] = pynvml.NVMLError_NoPermission()
    FakeNvml([gpu]).install(monkeypatch)

    with pytest.raises(inventory.NvmlUnavailable) as raised:
        inventory.read_inventory()

    assert str(raised.value) == (
        "NVML refused reading GPU 0 (Insufficient Permissions): run as root or as a user that can open /dev/nvidia*")


def test_compute_instances_smaller_than_their_gpu_instance_are_their_own_profile(monkeypatch):
    found = read(monkeypatch, [a100_80gb((ENABLE, ENABLE), {"1c.3g.40gb": 3, "3g.40gb": 1})])

    assert list(found.gpus[0].mig_devices.items()) == [("3g.40gb", 1), ("1c.3g.40gb", 3)]


@pytest.mark.parametrize(
    ("name", "profile"),
    [("NVIDIA A100-SXM4-80GB MIG 1g.10gb", "1g.10gb"), ("NVIDIA A100-SXM4-80GB MIG 1g.10gb+me", "1g.10gb+me"),
     ("NVIDIA RTX PRO 6000 Blackwell Server Edition MIG 1g.24gb+me.all", "1g.24gb+me.all"),
     ("NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb", "1c.3g.40gb"), ("MIG 7g.80gb", "7g.80gb"),
     ("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB")],
)
def test_profile_from_a_mig_device_name(name, profile):
    assert agent.profile_name(name) == profile


def test_no_gpu_is_unavailable(monkeypatch):
    fake = FakeNvml([]).install(monkeypatch)

    with pytest.raises(inventory.NvmlUnavailable) as raised:
        inventory.read_inventory()

    assert str(raised.value) == "NVML sees no GPU (NVIDIA driver 595.91.07 is loaded)"
    assert fake.initialised == 0


def test_a_failing_shutdown_does_not_hide_the_result(monkeypatch):
    FakeNvml([l4()], fail={"nvmlShutdown": pynvml.NVMLError_Unknown()}).install(monkeypatch)

    assert inventory.read_inventory().gpus[0].model == "L4"


def test_summary_names_mig_devices_only_when_every_gpu_runs_the_same(monkeypatch):
    same = read(monkeypatch, [a100_80gb((ENABLE, ENABLE), BALANCED), a100_80gb((ENABLE, ENABLE), BALANCED)])
    partly = read(monkeypatch, [a100_80gb((ENABLE, ENABLE), BALANCED), a100_80gb()])
    differing = read(monkeypatch, [a100_80gb((ENABLE, ENABLE), BALANCED), a100_80gb((ENABLE, ENABLE), {"7g.80gb": 1})])

    assert same.summary()["migDevices"] == BALANCED
    assert (partly.summary()["migMode"], "migDevices" in partly.summary()) == ("mixed", False)
    assert (differing.summary()["migMode"], "migDevices" in differing.summary()) == ("enabled", False)


# --- the pool entry -------------------------------------------------------------------------------------------


def validates(entry: dict, mig_layouts: dict | None = None):
    """The entry as the only pool of the dev stack, through the real config validation."""
    config = stack_config("dev")
    config["gpu-stack:nodePools"] = [entry]
    if mig_layouts:
        config["gpu-stack:migLayouts"] = mig_layouts
    return load_config(bag(config)).node_pools[0]


def test_pool_entry_for_a100_running_the_balanced_layout(monkeypatch):
    found = read(monkeypatch, [a100_80gb((ENABLE, ENABLE), BALANCED) for _ in range(8)])

    entry = inventory.suggest_pool(found, hostname="GPU-Node-7", os_tag="ubuntu22.04")

    assert entry == {
        "name": "a100-80gb",
        "nodeSelector": {"kubernetes.io/hostname": "gpu-node-7"},
        "gpuModel": "A100-80GB",
        "os": "ubuntu22.04",
        "sharing": {"strategy": "mig-mixed", "migLayout": "all-balanced"},
    }
    assert inventory.suggest_mig_layouts(found) == {}
    assert validates(entry).sharing.mig_layout == "all-balanced"


def test_pool_entry_for_a_layout_no_builtin_creates(monkeypatch):
    found = read(monkeypatch, [a100_80gb((ENABLE, ENABLE), {"2g.20gb": 2, "1g.10gb": 3}) for _ in range(2)])

    entry = inventory.suggest_pool(found, hostname="n1", os_tag="ubuntu24.04")
    layouts = inventory.suggest_mig_layouts(found)

    assert entry["sharing"] == {"strategy": "mig-mixed", "migLayout": "a100-80gb-3x1g.10gb-2x2g.20gb"}
    assert layouts == {"a100-80gb-3x1g.10gb-2x2g.20gb": {"1g.10gb": 3, "2g.20gb": 2}}
    assert validates(entry, layouts).sharing.mig_layout == "a100-80gb-3x1g.10gb-2x2g.20gb"


@pytest.mark.parametrize(
    ("gpus", "model"),
    [
        ([h100_80gb() for _ in range(8)], "H100-80GB"),
        ([h200((DISABLE, ENABLE))], "H200"),
        ([l4() for _ in range(4)], "L4"),
        # MIG on without MIG devices, or different devices per GPU: no layout to declare.
        ([a100_80gb((ENABLE, ENABLE))], "A100-80GB"),
        ([a100_80gb((ENABLE, ENABLE), BALANCED), a100_80gb((ENABLE, ENABLE), {"7g.80gb": 1})], "A100-80GB"),
    ],
)
def test_pool_entry_without_mig_sharing(monkeypatch, gpus, model):
    found = read(monkeypatch, gpus)

    entry = inventory.suggest_pool(found, hostname="n1", os_tag="rhel9")

    assert entry == {"name": model.lower(), "nodeSelector": {"kubernetes.io/hostname": "n1"}, "gpuModel": model,
                     "os": "rhel9"}
    assert validates(entry).gpu_model == model


def test_pool_entry_without_a_known_os_or_a_label_value_hostname(monkeypatch):
    found = read(monkeypatch, [l4()])

    entry = inventory.suggest_pool(found, hostname="h" * 64)

    assert entry == {"name": "l4", "nodeSelector": {}, "gpuModel": "L4"}


def test_no_pool_entry_for_mixed_or_unknown_gpus(monkeypatch):
    mixed = read(monkeypatch, [a100_80gb(), a100_80gb(), h100_80gb()])
    unknown = read(monkeypatch, [FakeGpu("NVIDIA Future GPU", 0x3FFF, 196608, pynvml.NVML_DEVICE_ARCH_RUBIN)])

    with pytest.raises(inventory.NoPoolEntry) as raised:
        inventory.suggest_pool(mixed, hostname="n1")
    assert str(raised.value) == "the node mixes GPU models (2x A100-80GB, 1x H100-80GB); a pool declares one gpuModel"
    with pytest.raises(inventory.NoPoolEntry) as raised:
        inventory.suggest_pool(unknown, hostname="n1")
    assert str(raised.value) == (
        "NVIDIA Future GPU (0x3FFF) is not in gpu-stack's catalog (components/catalogs/catalog.py), so no pool can declare it")


@pytest.mark.parametrize(
    ("text", "tag"),
    [
        ('NAME="Ubuntu"\nID=ubuntu\nVERSION_ID="22.04"\n', "ubuntu22.04"),
        ('ID="rhel"\nVERSION_ID="9.4"\n', "rhel9"),
        ('ID=rocky\nVERSION_ID="9.3"\n', "rocky9"),
        ('ID=arch\nBUILD_ID=rolling\n', None),
    ],
)
def test_local_os_tag_is_nfds_id_and_version(tmp_path, text, tag):
    path = tmp_path / "os-release"
    path.write_text(text)

    assert inventory.local_os_tag(path) == tag


def test_local_os_tag_without_os_release(tmp_path):
    assert inventory.local_os_tag(tmp_path / "missing") is None


# --- drift against the stacks ---------------------------------------------------------------------------------


def test_a100_running_its_layout_fits_the_a100_mig_pool(monkeypatch):
    found = read(monkeypatch, [a100_80gb((ENABLE, ENABLE), BALANCED) for _ in range(8)])

    comparison = inventory.compare(found, stack("a100-mig"))

    assert comparison.fits == ["a100-mig"]
    assert [(v.pool, v.disagreements, v.notes) for v in comparison.pools] == [("a100-mig", [], [])]
    assert comparison.node == []


def test_mig_mode_off_on_a_mig_pool(monkeypatch):
    found = read(monkeypatch, [a100_80gb((DISABLE, ENABLE)) for _ in range(6)] + [a100_80gb() for _ in range(2)])

    comparison = inventory.compare(found, stack("a100-mig"))

    assert comparison.fits == []
    assert kinds_and_messages(comparison.disagreements) == [
        ("mig-mode", "MIG mode is disabled on GPUs 0-5 (enabled after the next GPU reset or reboot), but pool "
                     "a100-mig declares MIG layout all-balanced"),
        ("mig-mode", "MIG mode is disabled on GPUs 6-7, but pool a100-mig declares MIG layout all-balanced"),
    ]


def test_mig_devices_other_than_the_layouts(monkeypatch):
    found = read(monkeypatch, [a100_80gb((ENABLE, ENABLE), {"1g.10gb": 7}) for _ in range(4)]
                 + [a100_80gb((ENABLE, ENABLE), BALANCED) for _ in range(4)])

    comparison = inventory.compare(found, stack("a100-mig"))

    assert kinds_and_messages(comparison.disagreements) == [
        ("mig-layout", "GPUs 0-3 have MIG devices 7x 1g.10gb, but layout all-balanced creates 2x 1g.10gb, "
                       "1x 2g.20gb, 1x 3g.40gb per GPU"),
    ]


def test_mig_enabled_on_a_pool_without_mig(monkeypatch):
    found = read(monkeypatch, [a100_80gb((ENABLE, ENABLE), BALANCED) for _ in range(8)])

    comparison = inventory.compare(found, stack("prod-managed"))

    assert [v.pool for v in comparison.pools] == ["training-a100"]
    assert kinds_and_messages(comparison.disagreements) == [
        ("mig-mode", "MIG mode is enabled on GPUs 0-7, but pool training-a100 does not use MIG "
                     "(nvidia.com/mig.config=all-disabled)"),
    ]


def test_an_older_driver_than_the_managed_plan(monkeypatch):
    found = read(monkeypatch, [a100_80gb() for _ in range(8)], driver="550.127.05")

    comparison = inventory.compare(found, stack("prod-managed"))

    assert kinds_and_messages(comparison.disagreements) == [
        ("driver", "installed driver 550.127.05 is branch 550, older than pool training-a100's managed driver "
                   "595.91.07: gpu-stack's driver container replaces it when its DaemonSet rolls out on this node; "
                   "a driver the host installed stays, as k8s-driver-manager then labels the node "
                   "nvidia.com/gpu.deploy.driver=pre-installed and 595.91.07 never runs"),
    ]


def test_another_release_of_the_planned_branch(monkeypatch):
    found = read(monkeypatch, [FakeGpu("NVIDIA A10", 0x2236, 23028, pynvml.NVML_DEVICE_ARCH_AMPERE)],
                 driver="580.95.05")

    comparison = inventory.compare(found, stack("hybrid"))

    assert [v.pool for v in comparison.pools] == ["a10-legacy"]
    assert comparison.disagreements[0].message.startswith(
        "installed driver 580.95.05 is another release of branch 580 than pool a10-legacy's managed driver "
        "580.126.20: gpu-stack's driver container replaces it")


def test_a_newer_driver_than_the_precompiled_branch(monkeypatch):
    newer = read(monkeypatch, [a100_80gb() for _ in range(8)], driver="595.91.07")
    same_branch = read(monkeypatch, [a100_80gb() for _ in range(8)], driver="580.105.08")

    assert kinds_and_messages(inventory.compare(newer, stack("prod-precompiled")).disagreements) == [
        ("driver", "installed driver 595.91.07 is branch 595, newer than pool train-a100's precompiled driver branch "
                   "580: gpu-stack's driver container replaces it when its DaemonSet rolls out on this node; a driver "
                   "the host installed stays, as k8s-driver-manager then labels the node "
                   "nvidia.com/gpu.deploy.driver=pre-installed and branch 580 never runs"),
    ]
    assert inventory.compare(same_branch, stack("prod-precompiled")).fits == ["train-a100"]


def test_a_host_driver_too_old_for_the_gpu(monkeypatch):
    old = read(monkeypatch, [h100_80gb() for _ in range(8)], driver="520.61.05")
    current = read(monkeypatch, [h100_80gb() for _ in range(8)], driver="535.261.03")

    assert kinds_and_messages(inventory.compare(old, stack("hybrid")).disagreements) == [
        ("driver", "pool dgx-h100 uses the host's driver, and driver 520.61.05 (branch 520) cannot run its GPUs: "
                   "H100-80GB needs driver branch 525 or later"),
    ]
    # Host mode: whatever the host runs is the plan, so a release other than the stack's default is no drift.
    assert inventory.compare(current, stack("hybrid")).fits == ["dgx-h100"]


def test_manual_upgrades_replace_the_driver_when_its_pod_is_deleted(monkeypatch):
    config = stack_config("dev")
    config["gpu-stack:upgrade"] = {"strategy": "manual"}
    found = read(monkeypatch, [FakeGpu("Tesla T4", 0x1EB8, 15360, pynvml.NVML_DEVICE_ARCH_TURING)], driver="580.95.05")

    message = inventory.compare(found, load_config(bag(config))).disagreements[0].message

    assert "replaces it when its driver pod is deleted (upgrade strategy manual);" in message


def test_a_digest_pinned_driver_is_a_note_not_a_disagreement(monkeypatch):
    config = stack_config("dev")
    config["gpu-stack:versions"] = {"driver": "sha256:" + "a" * 64}
    found = read(monkeypatch, [FakeGpu("Tesla T4", 0x1EB8, 15360, pynvml.NVML_DEVICE_ARCH_TURING)])

    comparison = inventory.compare(found, load_config(bag(config)))

    assert comparison.fits == ["dev-gpu"]
    assert comparison.pools[0].notes == [
        "pool dev-gpu pins its managed driver by digest, so the installed 595.91.07 is not compared"]


def test_wrong_model_and_a_layout_that_does_not_fit_it(monkeypatch):
    found = read(monkeypatch, [a100_80gb((ENABLE, ENABLE), {"3g.40gb": 2}) for _ in range(8)])
    _, reasons = mig_catalog.resolve_layout("A100-80GB", "three-2g", {"three-2g": {"2g.10gb": 3}})

    comparison = inventory.compare(found, stack("onprem-host-driver"), pool_name="a100")

    assert reasons[0] == ("custom MIG layout 'three-2g' on A100-80GB: unknown MIG profile '2g.10gb' for A100-80GB; "
                          "A100-80GB profiles: 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb")
    assert kinds_and_messages(comparison.disagreements) == [
        ("model", "GPUs 0-7 are A100-80GB (NVIDIA A100-SXM4-80GB, 0x20B2), but pool a100 declares A100-40GB"),
        ("mig-layout", f"MIG layout three-2g of pool a100 does not fit the A100-80GB: {'; '.join(reasons)}"),
    ]


def test_the_model_of_another_pool(monkeypatch):
    found = read(monkeypatch, [h100_80gb() for _ in range(8)])

    comparison = inventory.compare(found, stack("a100-mig"), pool_name="a100-mig")

    assert kinds_and_messages(comparison.disagreements) == [
        ("model", "GPUs 0-7 are H100-80GB (NVIDIA H100 80GB HBM3, 0x2330), but pool a100-mig declares A100-80GB"),
        ("mig-mode", "MIG mode is disabled on GPUs 0-7, but pool a100-mig declares MIG layout all-balanced"),
    ]
    # Left to itself the node is matched by model, to the time-sliced H100 pool, which it fits.
    assert inventory.compare(found, stack("a100-mig")).fits == ["h100-shared"]


def test_no_pool_declares_the_gpus(monkeypatch):
    found = read(monkeypatch, [h200() for _ in range(8)])

    comparison = inventory.compare(found, stack("prod-managed"))

    assert comparison.pools == []
    assert kinds_and_messages(comparison.node) == [
        ("model", "no pool of the stack declares this node's GPUs (8x H200); pools declare A100-80GB (training-a100), "
                  "L4 (inference-l4)"),
    ]


def test_mixed_models_on_one_node(monkeypatch):
    found = read(monkeypatch, [a100_80gb((ENABLE, ENABLE), BALANCED) for _ in range(4)]
                 + [h100_80gb() for _ in range(4)])

    comparison = inventory.compare(found, stack("a100-mig"))

    assert comparison.fits == []
    assert kinds_and_messages(comparison.node) == [
        ("mixed-models", "the node mixes GPU models: 4x A100-80GB (GPUs 0-3), 4x H100-80GB (GPUs 4-7); a pool "
                         "declares one gpuModel"),
    ]
    assert [(v.pool, kinds_and_messages(v.disagreements)) for v in comparison.pools] == [
        ("a100-mig", [
            ("model", "GPUs 4-7 are H100-80GB (NVIDIA H100 80GB HBM3, 0x2330), but pool a100-mig declares A100-80GB"),
            ("mig-mode", "MIG mode is disabled on GPUs 4-7, but pool a100-mig declares MIG layout all-balanced"),
        ]),
        ("h100-shared", [
            ("model", "GPUs 0-3 are A100-80GB (NVIDIA A100-SXM4-80GB, 0x20B2), but pool h100-shared declares H100-80GB"),
            ("mig-mode", "MIG mode is enabled on GPUs 0-3, but pool h100-shared does not use MIG "
                         "(nvidia.com/mig.config=all-disabled)"),
        ]),
    ]


def test_memory_below_the_catalog_models(monkeypatch):
    short = a100_80gb()
    short.memory_mib = 40960
    found = read(monkeypatch, [a100_80gb(), short, short])

    comparison = inventory.compare(found, stack("prod-managed"))

    assert comparison.fits == []
    assert kinds_and_messages(comparison.node) == [
        ("memory", "GPUs 1-2 have 40960 MiB, below the 80 GB the catalog gives A100-80GB"),
    ]


def test_a_vm_passthrough_pool_whose_gpus_the_driver_holds(monkeypatch):
    found = read(monkeypatch, [a100_80gb() for _ in range(2)])

    comparison = inventory.compare(found, stack("kubevirt"))

    assert kinds_and_messages(comparison.disagreements) == [
        ("workload", "pool vm-a100 passes its GPUs to VMs through vfio-pci, but the NVIDIA driver holds GPUs 0-1"),
    ]


def test_an_unknown_pool_name(monkeypatch):
    found = read(monkeypatch, [l4()])

    with pytest.raises(inventory.UnknownPool, match="the stack has no pool 'gpu'; pools: training-a100, inference-l4"):
        inventory.compare(found, stack("prod-managed"), pool_name="gpu")


# --- the command line -----------------------------------------------------------------------------------------


@pytest.fixture
def this_host(monkeypatch):
    monkeypatch.setattr(inventory, "local_hostname", lambda: "gpu-node-7")
    monkeypatch.setattr(inventory, "local_os_tag", lambda: "ubuntu22.04")


def test_inventory_without_a_stack_prints_the_table_and_the_pool_entry(monkeypatch, capsys, this_host):
    FakeNvml([l4(), l4()]).install(monkeypatch)

    assert cli.main(["inventory"]) == inventory.EXIT_OK

    assert capsys.readouterr().out == (
        "NVIDIA driver 595.91.07, CUDA 13.0: 2 GPUs\n"
        "GPU  MODEL  PCI ID  MEMORY     ARCH          MIG  NAME\n"
        "0    L4     0x27B8  23034 MiB  ada-lovelace  -    NVIDIA L4\n"
        "1    L4     0x27B8  23034 MiB  ada-lovelace  -    NVIDIA L4\n"
        "\n"
        "Pool entry for this node (gpu-stack:nodePools):\n"
        "- name: l4\n"
        "  nodeSelector:\n"
        "    kubernetes.io/hostname: gpu-node-7\n"
        "  gpuModel: L4\n"
        "  os: ubuntu22.04\n"
    )


def test_inventory_with_a_stack_it_fits(monkeypatch, capsys, this_host):
    FakeNvml([a100_80gb((ENABLE, ENABLE), BALANCED)]).install(monkeypatch)

    assert cli.main(["inventory", "--stack", "a100-mig"]) == inventory.EXIT_OK

    out = capsys.readouterr().out
    assert "0    A100-80GB  0x20B2  81920 MiB  ampere  enabled: 2x 1g.10gb, 1x 2g.20gb, 1x 3g.40gb  NVIDIA A100-SXM4-80GB\n" in out
    assert out.endswith(
        "  sharing:\n    strategy: mig-mixed\n    migLayout: all-balanced\n"
        "\n"
        "Stack a100-mig:\n"
        "  pool a100-mig (A100-80GB): fits\n"
        "a100-mig: the node fits pool a100-mig\n"
    )


def test_inventory_with_drift_exits_1_and_lists_it(monkeypatch, capsys, this_host):
    FakeNvml([a100_80gb((ENABLE, ENABLE), {"2g.20gb": 2})], driver="550.127.05").install(monkeypatch)

    assert cli.main(["inventory", "--stack", "prod-managed"]) == inventory.EXIT_DRIFT

    out = capsys.readouterr().out
    assert "MIG layout it needs (gpu-stack:migLayouts):\na100-80gb-2x2g.20gb:\n  2g.20gb: 2\n" in out
    tail = out.split("Stack prod-managed:\n")[1].splitlines()
    assert tail[0] == "  pool training-a100 (A100-80GB): 2 disagreements"
    assert tail[1] == ("    mig-mode: MIG mode is enabled on GPU 0, but pool training-a100 does not use MIG "
                       "(nvidia.com/mig.config=all-disabled)")
    assert tail[2].startswith("    driver: installed driver 550.127.05 is branch 550, older than pool training-a100's")
    assert tail[3:] == ["prod-managed: DRIFT - 2 disagreements; the node fits no pool"]


def test_inventory_json(monkeypatch, capsys, this_host):
    FakeNvml([h200() for _ in range(2)]).install(monkeypatch)

    assert cli.main(["inventory", "--stack", "prod-managed", "--json"]) == inventory.EXIT_DRIFT

    document = json.loads(capsys.readouterr().out)
    assert document["inventory"]["count"] == 2 and document["inventory"]["driverVersion"] == "595.91.07"
    assert document["inventory"]["gpus"][1] == {
        "index": 1, "name": "NVIDIA H200", "model": "H200", "pciDeviceId": "0x2335", "pciBusId": "00000000:11:00.0",
        "memoryMiB": 143771, "architecture": "hopper", "migCapable": True, "migMode": "disabled", "migPending": None,
        "migDevices": {},
    }
    assert document["poolEntry"] == {"name": "h200", "nodeSelector": {"kubernetes.io/hostname": "gpu-node-7"},
                                     "gpuModel": "H200", "os": "ubuntu22.04"}
    assert document["poolEntryProblem"] is None and document["migLayouts"] == {}
    assert document["stack"] == {
        "name": "prod-managed",
        "fits": [],
        "node": [{"kind": "model", "message": "no pool of the stack declares this node's GPUs (2x H200); pools "
                                              "declare A100-80GB (training-a100), L4 (inference-l4)"}],
        "pools": [],
    }


def test_inventory_of_a_mixed_node_has_no_pool_entry(monkeypatch, capsys, this_host):
    FakeNvml([l4(), h100_80gb()]).install(monkeypatch)

    assert cli.main(["inventory"]) == inventory.EXIT_OK

    assert capsys.readouterr().out.endswith(
        "No pool entry for this node: the node mixes GPU models (1x L4, 1x H100-80GB); a pool declares one gpuModel\n")


@pytest.mark.parametrize(
    ("fail", "gpus", "message"),
    [
        ({"nvmlInit": pynvml.NVMLError_DriverNotLoaded()}, [l4()],
         "gpustack inventory: the NVIDIA kernel driver is not loaded (NVML: Driver Not Loaded)\n"),
        ({}, [], "gpustack inventory: NVML sees no GPU (NVIDIA driver 595.91.07 is loaded)\n"),
        ({"nvmlDeviceGetCount": pynvml.NVMLError_Unknown()}, [l4()],
         "gpustack inventory: NVML error in nvmlDeviceGetCount: Unknown Error\n"),
    ],
)
def test_inventory_without_gpus_exits_3_with_a_message(monkeypatch, capsys, this_host, fail, gpus, message):
    FakeNvml(gpus, fail=fail).install(monkeypatch)

    assert cli.main(["inventory", "--stack", "a100-mig"]) == inventory.EXIT_NO_GPU

    captured = capsys.readouterr()
    assert captured.err == message and captured.out == ""


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["inventory", "--pool", "a100-mig"], "--pool needs --stack: it names a pool of that stack\n"),
        (["inventory", "--stack", "a100-mig", "--pool", "a100"],
         "stack a100-mig has no pool 'a100'; pools: a100-mig, h100-shared, a100-split\n"),
    ],
)
def test_inventory_usage_errors_exit_2_before_reading_nvml(monkeypatch, capsys, argv, message):
    fake = FakeNvml([l4()]).install(monkeypatch)

    assert cli.main(argv) == inventory.EXIT_CONFIG

    assert capsys.readouterr().err == message
    assert fake.calls == []


def test_inventory_with_a_missing_stack_exits_2(monkeypatch, capsys):
    FakeNvml([l4()]).install(monkeypatch)

    assert cli.main(["inventory", "--stack", "no-such-stack"]) == cli.EXIT_CONFIG

    assert capsys.readouterr().err == f"stack file {Path(ROOT) / 'stacks' / 'Pulumi.no-such-stack.yaml'} does not exist\n"

