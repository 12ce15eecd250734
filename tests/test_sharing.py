"""Sharing per node pool: the device plugin config each strategy renders (k8s-device-plugin `api/config/v1`),
and the resources a workload on the pool requests (the `gpuResources` stack output)."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from components.catalogs import catalog
from stacktest import objects, render, render_stack, stack_config

BASE = stack_config("prod-managed")  # pool 0: training-a100 (A100-80GB), pool 1: inference-l4 (L4)


def with_sharing(pool: int, sharing: dict, **extra) -> dict:
    config = copy.deepcopy(BASE)
    config["gpu-stack:nodePools"][pool]["sharing"] = sharing
    for key, value in extra.items():
        config[f"gpu-stack:{key}"] = value
    return config


def plugin_config(config: dict, key: str) -> dict:
    data = objects(render(config), "ConfigMap")["nvidia-device-plugin-configs"]["data"]
    return yaml.safe_load(data[key])


def resources(config: dict, pool: str) -> dict:
    return render(config).outputs["gpuResources"][pool]


def test_unshared_pools_use_the_default_key_with_the_stack_mig_strategy():
    assert plugin_config(BASE, "default") == {"version": "v1", "flags": {"migStrategy": "single"}}
    assert resources(BASE, "training-a100") == {"strategy": "none", "gpuModel": "A100-80GB", "perGpu": {"nvidia.com/gpu": 1}}


def test_time_slicing_replicates_the_gpu_resource():
    config = with_sharing(1, {"strategy": "time-slicing", "replicas": 4, "failRequestsGreaterThanOne": True})
    assert plugin_config(config, "inference-l4") == {
        "version": "v1",
        "flags": {"migStrategy": "single"},
        "sharing": {
            "timeSlicing": {
                "renameByDefault": False,
                "failRequestsGreaterThanOne": True,
                "resources": [{"name": "nvidia.com/gpu", "replicas": 4}],
            }
        },
    }
    assert resources(config, "inference-l4")["perGpu"] == {"nvidia.com/gpu": 4}


def test_rename_by_default_advertises_gpu_shared():
    config = with_sharing(1, {"strategy": "time-slicing", "replicas": 3, "renameByDefault": True})
    assert plugin_config(config, "inference-l4")["sharing"]["timeSlicing"]["renameByDefault"] is True
    assert resources(config, "inference-l4")["perGpu"] == {"nvidia.com/gpu.shared": 3}


def test_mps_shares_through_the_mps_section_and_deploys_the_control_daemon():
    config = with_sharing(1, {"strategy": "mps", "replicas": 8})
    assert plugin_config(config, "inference-l4")["sharing"] == {
        "mps": {"renameByDefault": False, "resources": [{"name": "nvidia.com/gpu", "replicas": 8}]}
    }
    assert resources(config, "inference-l4")["perGpu"] == {"nvidia.com/gpu": 8}
    assert "nvidia-device-plugin-mps-control-daemon" in objects(render(config), "DaemonSet")


def test_mig_mixed_sets_the_pool_strategy_and_advertises_one_resource_per_profile():
    config = with_sharing(0, {"strategy": "mig-mixed", "migLayout": "all-balanced"})
    assert plugin_config(config, "training-a100") == {"version": "v1", "flags": {"migStrategy": "mixed"}}
    assert resources(config, "training-a100") == {
        "strategy": "mig-mixed",
        "gpuModel": "A100-80GB",
        "migLayout": "all-balanced",
        "perGpu": {"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-2g.20gb": 1, "nvidia.com/mig-3g.40gb": 1},
    }


def test_mig_single_exposes_mig_devices_as_gpus():
    config = with_sharing(0, {"strategy": "mig-single", "migLayout": "all-1g.10gb"})
    assert plugin_config(config, "training-a100")["flags"] == {"migStrategy": "single"}
    assert resources(config, "training-a100")["perGpu"] == {"nvidia.com/gpu": 7}


def test_custom_layout_resources():
    config = with_sharing(0, {"strategy": "mig-mixed", "migLayout": "two-3g"}, migLayouts={"two-3g": {"3g.40gb": 2}})
    assert resources(config, "training-a100")["perGpu"] == {"nvidia.com/mig-3g.40gb": 2}


def test_pools_with_different_strategies_share_one_configmap():
    data = objects(render_stack("a100-mig"), "ConfigMap")["nvidia-device-plugin-configs"]["data"]
    assert sorted(data) == ["a100-mig", "a100-split", "default", "h100-shared"]
    assert yaml.safe_load(data["a100-mig"])["flags"]["migStrategy"] == "mixed"
    assert yaml.safe_load(data["h100-shared"])["sharing"]["timeSlicing"]["resources"][0]["replicas"] == 4


def test_a_per_gpu_layout_reaches_the_mig_manager_in_mig_parteds_format():
    recording = render_stack("a100-mig")
    parted = objects(recording, "ConfigMap")["gpu-stack-mig-parted-config"]["data"]["config.yaml"]
    forty = ["0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"]
    assert yaml.safe_load(parted)["mig-configs"]["train-and-serve"] == [
        {"device-filter": forty, "devices": [0, 1, 2, 3], "mig-enabled": False},
        {"device-filter": forty, "devices": [4, 5], "mig-enabled": True, "mig-devices": {"3g.20gb": 2}},
        {"device-filter": forty, "devices": [6, 7], "mig-enabled": True, "mig-devices": {"1g.5gb": 7}},
    ]
    by_gpu = recording.outputs["gpuResources"]["a100-split"]["byGpu"]
    assert by_gpu == {
        **{str(i): {"nvidia.com/gpu": 1} for i in range(4)},
        "4": {"nvidia.com/mig-3g.20gb": 2}, "5": {"nvidia.com/mig-3g.20gb": 2},
        "6": {"nvidia.com/mig-1g.5gb": 7}, "7": {"nvidia.com/mig-1g.5gb": 7},
    }


# One render for many MIG cases at once: each pool a GPU family, a strategy and a kind of layout.
MIG_POOLS = [
    ("rtx", "RTX-PRO-6000", "mig-mixed", "all-1g.24gb.me"),
    ("h96", "H100-96GB", "mig-single", "all-1g.12gb.me"),
    ("gb200", "GB200", "mig-mixed", "all-balanced"),
    ("h200", "H200", "mig-mixed", "h200-mixed"),
    ("a30", "A30", "mig-mixed", "a30-split"),
]
MIG_LAYOUTS = {
    "h200-mixed": {"3g.71gb": 1, "1g.18gb": 4},
    "a30-split": [
        {"devices": [0], "migEnabled": True, "migDevices": {"2g.12gb+me": 1, "2g.12gb": 1}},
        {"devices": [1], "migEnabled": False},
        {"devices": "all", "deviceFilter": ["0x1FB010DE"], "migEnabled": False},
    ],
}


def test_mig_layouts_of_every_kind_render_for_their_gpus():
    config = copy.deepcopy(stack_config("a100-mig"))
    config.pop("gpu-stack:upgrade")
    config["gpu-stack:migLayouts"] = MIG_LAYOUTS
    config["gpu-stack:nodePools"] = [
        {"name": name, "nodeSelector": {"gpu": name}, "gpuModel": model, "os": "ubuntu24.04",
         "sharing": {"strategy": strategy, "migLayout": layout}}
        for name, model, strategy, layout in MIG_POOLS
    ]
    recording = render(config)
    maps = objects(recording, "ConfigMap")
    configs = yaml.safe_load(maps["gpu-stack-mig-parted-config"]["data"]["config.yaml"])["mig-configs"]
    plugin = maps["nvidia-device-plugin-configs"]["data"]
    pools = {p["name"]: p["labels"] for p in json.loads(maps["gpu-stack-node-pools"]["data"]["node-pools.json"])["pools"]}
    resources = recording.outputs["gpuResources"]
    for name, model, strategy, layout in MIG_POOLS:
        filters = [f"{pci}10DE" for pci in catalog.GPU_MODELS[model].pci_device_ids]
        assert any(entry.get("device-filter") == filters for entry in configs[layout]), name
        assert pools[name]["nvidia.com/mig.config"] == layout
        assert yaml.safe_load(plugin[name])["flags"]["migStrategy"] == strategy[len("mig-"):]
    assert resources["rtx"]["perGpu"] == {"nvidia.com/mig-1g.24gb.me": 1}
    assert resources["h96"]["perGpu"] == {"nvidia.com/gpu": 1}
    assert resources["gb200"]["perGpu"] == {"nvidia.com/mig-1g.23gb": 2, "nvidia.com/mig-2g.47gb": 1, "nvidia.com/mig-3g.93gb": 1}
    assert resources["h200"]["perGpu"] == {"nvidia.com/mig-1g.18gb": 4, "nvidia.com/mig-3g.71gb": 1}
    assert resources["a30"]["byGpu"] == {"0": {"nvidia.com/mig-2g.12gb": 1, "nvidia.com/mig-2g.12gb.me": 1}, "1": {"nvidia.com/gpu": 1}}
    assert configs["h200-mixed"] == [{"device-filter": ["0x233510DE", "0x233B10DE"], "devices": "all", "mig-enabled": True,
                                      "mig-devices": {"1g.18gb": 4, "3g.71gb": 1}}]
    assert configs["a30-split"] == [
        {"device-filter": ["0x20B710DE"], "devices": [0], "mig-enabled": True, "mig-devices": {"2g.12gb": 1, "2g.12gb+me": 1}},
        {"device-filter": ["0x20B710DE"], "devices": [1], "mig-enabled": False},
        {"device-filter": ["0x1FB010DE"], "devices": "all", "mig-enabled": False},
    ]


@pytest.mark.parametrize("stack", ["a100-mig", "onprem-host-driver", "prod-managed", "dev"])
def test_every_container_pool_is_in_gpu_resources(stack):
    config = stack_config(stack)
    pools = [p["name"] for p in config["gpu-stack:nodePools"] if p.get("workloadType", "container") == "container"]
    assert sorted(render_stack(stack).outputs["gpuResources"]) == sorted(pools)
