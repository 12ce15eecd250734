"""Sharing per node pool: the device plugin config each strategy renders (k8s-device-plugin `api/config/v1`),
and the resources a workload on the pool requests (the `gpuResources` stack output)."""

from __future__ import annotations

import copy

import pytest
import yaml

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
    assert sorted(data) == ["a100-mig", "default", "h100-shared"]
    assert yaml.safe_load(data["a100-mig"])["flags"]["migStrategy"] == "mixed"
    assert yaml.safe_load(data["h100-shared"])["sharing"]["timeSlicing"]["resources"][0]["replicas"] == 4


@pytest.mark.parametrize("stack", ["a100-mig", "onprem-host-driver", "prod-managed", "dev"])
def test_every_container_pool_is_in_gpu_resources(stack):
    config = stack_config(stack)
    pools = [p["name"] for p in config["gpu-stack:nodePools"] if p.get("workloadType", "container") == "container"]
    assert sorted(render_stack(stack).outputs["gpuResources"]) == sorted(pools)
