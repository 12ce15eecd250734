"""GPUDirect (GDS, GDRCopy, RDMA): the driver sidecars, the validator's module checks, the device plugin's
device injection and NFD's kernel-module labels, switched on stack-wide as ClusterPolicy does."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from components.config import ConfigError, gds_needs_open_modules, load_config
from driverfeatures import driver_daemonsets as planned_drivers
from stacktest import bag, container, env_of, objects, render, render_stack, stack_config

TRAINING = stack_config("gpudirect-training")
NVCR = "nvcr.io/nvidia"


def variant(**gpudirect: Any) -> dict[str, Any]:
    config = copy.deepcopy(TRAINING)
    config["gpu-stack:gpudirect"] = gpudirect
    return config


def problems(config: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as caught:
        load_config(bag(config))
    return caught.value.problems


def driver_daemonsets(recording) -> dict[str, dict[str, Any]]:
    return {name: ds for name, ds in objects(recording, "DaemonSet").items() if name.startswith("nvidia-driver-daemonset")}


def test_every_driver_daemonset_loads_the_three_modules_next_to_the_driver():
    recording = render_stack("gpudirect-training")
    daemonsets = driver_daemonsets(recording)
    assert sorted(daemonsets) == ["nvidia-driver-daemonset-h100", "nvidia-driver-daemonset-h200"]
    for ds in daemonsets.values():
        spec = ds["spec"]["template"]["spec"]
        assert [(c["name"], c["image"]) for c in spec["containers"]] == [
            ("nvidia-driver-ctr", f"{NVCR}/driver:595.91.07-ubuntu22.04"),
            ("nvidia-peermem-ctr", f"{NVCR}/driver:595.91.07-ubuntu22.04"),
            ("nvidia-fs-ctr", f"{NVCR}/cloud-native/nvidia-fs:2.29.4-ubuntu22.04"),
            ("nvidia-gdrcopy-ctr", f"{NVCR}/cloud-native/gdrdrv:v2.6-ubuntu22.04"),
        ]
        driver_env = env_of(container(ds, "nvidia-driver-ctr"))
        assert {k: driver_env[k] for k in ("GDRCOPY_ENABLED", "GDS_ENABLED", "GPU_DIRECT_RDMA_ENABLED", "KERNEL_MODULE_TYPE")} == {
            "GDRCOPY_ENABLED": "true",
            "GDS_ENABLED": "true",
            "GPU_DIRECT_RDMA_ENABLED": "true",
            # kernelModuleType is auto in the stack: nvidia-fs 2.29.4 only loads with the open modules
            "KERNEL_MODULE_TYPE": "open",
        }
        assert "USE_HOST_MOFED" not in driver_env
        manager_env = env_of(container(ds, "k8s-driver-manager"))
        assert manager_env["GPU_DIRECT_RDMA_ENABLED"] == "true" and "USE_HOST_MOFED" not in manager_env


def test_sidecars_wait_for_the_driver_and_are_started_once_their_module_is_loaded():
    ds = driver_daemonsets(render_stack("gpudirect-training"))["nvidia-driver-daemonset-h100"]
    fs = container(ds, "nvidia-fs-ctr")
    assert fs["command"] == ["bash", "-xc"]
    assert fs["args"][0].startswith("until [ -d /run/nvidia/driver/usr/src ] && lsmod | grep -q '^nvidia '")
    assert fs["args"][0].endswith("exec nvidia-gds-driver install")
    assert fs["startupProbe"]["exec"]["command"] == ["sh", "-c", "lsmod | grep -q '^nvidia_fs '"]
    assert {m["mountPath"]: m.get("mountPropagation") for m in fs["volumeMounts"]} == {
        "/run/nvidia": "HostToContainer",
        "/var/log": None,
        "/dev/log": None,
    }
    gdrcopy = container(ds, "nvidia-gdrcopy-ctr")
    assert gdrcopy["args"][0].endswith("exec nvidia-gdrcopy-driver install")
    assert gdrcopy["startupProbe"]["exec"]["command"] == ["sh", "-c", "lsmod | grep -q '^gdrdrv '"]
    peermem = container(ds, "nvidia-peermem-ctr")
    assert (peermem["command"], peermem["args"]) == (["nvidia-driver"], ["reload_nvidia_peermem"])
    assert peermem["livenessProbe"]["exec"]["command"] == ["sh", "-c", "nvidia-driver probe_nvidia_peermem"]
    assert {m["mountPath"]: m.get("mountPropagation") for m in peermem["volumeMounts"]}["/run/mellanox/drivers"] == "HostToContainer"
    for c in (fs, gdrcopy, peermem):
        assert c["securityContext"] == {"privileged": True, "seLinuxOptions": {"level": "s0"}}


def test_host_mofed_points_the_peermem_build_at_the_hosts_sources():
    ds = planned_drivers(variant(rdma={"enabled": True, "useHostMofed": True}))["nvidia-driver-daemonset-h100"]
    volumes = {v["name"]: v["hostPath"]["path"] for v in ds["spec"]["template"]["spec"]["volumes"] if "hostPath" in v}
    assert volumes["mlnx-ofed-usr-src"] == "/usr/src"
    assert volumes["run-mellanox-drivers"] == "/run/mellanox/drivers"
    for name in ("nvidia-driver-ctr", "nvidia-peermem-ctr", "k8s-driver-manager"):
        assert env_of(container(ds, name))["USE_HOST_MOFED"] == "true", name
    assert [c["name"] for c in ds["spec"]["template"]["spec"]["containers"]] == ["nvidia-driver-ctr", "nvidia-peermem-ctr"]


def test_the_validator_checks_each_enabled_module_after_the_driver_and_the_driver_waits_for_it():
    recording = render(variant(gds=True, rdma={"enabled": True}), stack="gpudirect-training")
    validator = objects(recording, "DaemonSet")["nvidia-operator-validator"]
    init = validator["spec"]["template"]["spec"]["initContainers"]
    assert [c["name"] for c in init] == [
        "driver-validation",
        "nvidia-fs-validation",
        "nvidia-peermem-validation",
        "toolkit-validation",
        "cuda-validation",
        "plugin-validation",
    ]
    fs = init[1]
    assert env_of(fs) == {"WITH_WAIT": "true", "COMPONENT": "nvidia-fs"}
    assert fs["securityContext"] == {"privileged": False, "runAsUser": 0}
    readiness = container(driver_daemonsets(recording)["nvidia-driver-daemonset-h100"], "nvidia-driver-ctr")["readinessProbe"]
    assert "test -f /run/nvidia/validations/nvidia-fs-ready && test -f /run/nvidia/validations/nvidia-peermem-ready" in readiness["exec"]["command"][2]
    assert "gdrcopy-ready" not in readiness["exec"]["command"][2]


def test_the_device_plugin_injects_the_gpudirect_devices():
    plugin = objects(render(variant(gds=True), stack="gpudirect-training"), "DaemonSet")["nvidia-device-plugin-daemonset"]
    plugin_env = env_of(container(plugin, "nvidia-device-plugin"))
    assert (plugin_env["GDS_ENABLED"], plugin_env["MOFED_ENABLED"]) == ("true", "true")
    assert "GDRCOPY_ENABLED" not in plugin_env
    only_gdrcopy = objects(render(variant(gdrcopy=True), stack="gpudirect-training"), "DaemonSet")["nvidia-device-plugin-daemonset"]
    assert {k: v for k, v in env_of(container(only_gdrcopy, "nvidia-device-plugin")).items() if k.endswith("_ENABLED") and k != "CDI_ENABLED"} == {
        "GDRCOPY_ENABLED": "true"
    }


def test_nfd_labels_the_nodes_where_the_modules_are_loaded():
    rule = objects(render_stack("gpudirect-training"), "NodeFeatureRule")["nvidia-kernel-modules"]
    labels = {r["matchFeatures"][0]["matchExpressions"].popitem()[0]: r["labels"] for r in rule["spec"]["rules"]}
    assert labels == {
        "gdrdrv": {"nvidia.com/gdrcopy.capable": "true"},
        "nvidia_fs": {"nvidia.com/gds.capable": "true"},
        "nvidia_peermem": {"nvidia.com/peermem.capable": "true"},
    }
    assert all(r["matchFeatures"][0]["feature"] == "kernel.loadedmodule" for r in rule["spec"]["rules"])


def test_without_nfd_in_the_cluster_no_rule_is_rendered():
    config = copy.deepcopy(TRAINING)
    config["gpu-stack:components"] = {"dcgm": True, "nfd": False}
    assert objects(render(config, stack="gpudirect-training"), "NodeFeatureRule") == {}


def test_a_stack_without_gpudirect_renders_none_of_it():
    recording = render_stack("prod-managed")
    assert objects(recording, "NodeFeatureRule") == {}
    for ds in objects(recording, "DaemonSet").values():
        for c in [*ds["spec"]["template"]["spec"].get("initContainers", []), *ds["spec"]["template"]["spec"]["containers"]]:
            assert c["name"] not in ("nvidia-peermem-ctr", "nvidia-fs-ctr", "nvidia-gdrcopy-ctr", "nvidia-fs-validation")
            assert not {"GDS_ENABLED", "GDRCOPY_ENABLED", "GPU_DIRECT_RDMA_ENABLED", "MOFED_ENABLED"} & set(env_of(c))


def test_turning_gpudirect_on_changes_the_driver_config_digest():
    """k8s-driver-manager keeps a loaded driver when the digest is unchanged; peermem needs a rebuild."""
    def digest(config: dict[str, Any]) -> str:
        ds = planned_drivers(config)["nvidia-driver-daemonset-h100"]
        return env_of(container(ds, "nvidia-driver-ctr"))["DRIVER_CONFIG_DIGEST"]

    with_rdma = variant(rdma={"enabled": True})
    without = variant()
    for config in (with_rdma, without):
        config["gpu-stack:driver"] = {"mode": "managed", "kernelModuleType": "open"}
    assert digest(with_rdma) != digest(without)


@pytest.mark.parametrize(
    ("version", "needs_open"),
    [("2.17.4", False), ("2.17.5", True), ("2.29.4", True), ("2.9.10", False), ("sha256:" + "a" * 64, True)],
)
def test_nvidia_fs_needs_the_open_modules_from_2_17_5(version, needs_open):
    assert gds_needs_open_modules(version) is needs_open


def test_an_old_nvidia_fs_leaves_auto_to_the_driver_container():
    config = variant(gds=True)
    config["gpu-stack:versions"] = {"gds": "2.16.1"}
    plan = load_config(bag(config))
    assert {plan.pool_driver(p).kernel_module_type for p in plan.node_pools} == {"auto"}


# --- refusals ---------------------------------------------------------------------------------------------------


def test_gds_and_gdrcopy_cannot_be_built_against_precompiled_drivers():
    config = variant(gds=True, gdrcopy=True, rdma={"enabled": True})
    config["gpu-stack:driver"] = {"mode": "precompiled", "branch": "580"}
    for pool in config["gpu-stack:nodePools"]:
        pool.pop("os")
        pool["nodeImage"] = "ubuntu22.04-5.15.0-139-generic-amd64"
    found = dict(problems(config))
    assert "cannot be built against precompiled drivers (pools dgx-h100, dgx-h200)" in found["gpu-stack:gpudirect.gds"]
    assert "cannot be built against precompiled drivers" in found["gpu-stack:gpudirect.gdrcopy"]
    assert "gpu-stack:gpudirect.rdma.enabled" not in found


def test_gds_refuses_proprietary_kernel_modules():
    config = variant(gds=True)
    config["gpu-stack:driver"] = {"mode": "managed", "kernelModuleType": "proprietary"}
    assert problems(config) == [
        (
            "gpu-stack:gpudirect.gds",
            "nvidia-fs 2.29.4 loads only with the open kernel modules (from 2.17.5), but pools dgx-h100, dgx-h200 set "
            "kernelModuleType 'proprietary'; allowed values with GDS: auto, open",
        )
    ]


def test_gds_on_a_gpu_the_open_modules_do_not_drive_names_gds_as_the_cause():
    config = variant(gds=True)
    config["gpu-stack:nodePools"][0]["gpuModel"] = "V100"
    config["gpu-stack:versions"] = {"driver": "580.95.05"}
    ((key, message),) = problems(config)
    assert key == "gpu-stack:gpudirect.gds"
    assert message.startswith("nvidia-fs 2.29.4 loads only with the open kernel modules, and the V100 (volta)")
    assert "move pool 'dgx-h100' to a stack without GDS" in message


def test_host_mofed_without_rdma_is_refused():
    assert problems(variant(rdma={"useHostMofed": True})) == [
        ("gpu-stack:gpudirect.rdma.useHostMofed", "only used with gpudirect.rdma.enabled: true")
    ]


def test_gpudirect_needs_a_container_pool():
    config = stack_config("kubevirt")
    config["gpu-stack:nodePools"] = [p for p in config["gpu-stack:nodePools"] if p.get("workloadType", "container") != "container"]
    config["gpu-stack:gpudirect"] = {"gdrcopy": True}
    assert ("gpu-stack:gpudirect", "GPUDirect serves container pools, and this stack has none; remove it") in problems(config)


@pytest.mark.parametrize(
    ("gpudirect", "key", "expected"),
    [
        ({"gds": "yes"}, "gpu-stack:gpudirect.gds", "got 'yes'; allowed values: true, false"),
        ({"gdrcopy": 1}, "gpu-stack:gpudirect.gdrcopy", "got 1; allowed values: true, false"),
        ({"rdma": True}, "gpu-stack:gpudirect.rdma", "got bool True; expected a mapping of keys"),
        ({"rdma": {"enabled": "on"}}, "gpu-stack:gpudirect.rdma.enabled", "got 'on'; allowed values: true, false"),
        ({"rdma": {"hostMofed": True}}, "gpu-stack:gpudirect.rdma.hostMofed", "(did you mean 'useHostMofed'?); allowed keys: enabled, useHostMofed"),
        ({"gpudirectStorage": True}, "gpu-stack:gpudirect.gpudirectStorage", "allowed keys: gdrcopy, gds, rdma"),
    ],
)
def test_bad_gpudirect_values_name_the_key_and_the_allowed_values(gpudirect, key, expected):
    found = dict(problems(variant(**gpudirect)))
    assert expected in found[key]


@pytest.mark.parametrize("key", ["gds", "gdrcopy"])
@pytest.mark.parametrize(("value", "expected"), [("latest", "'latest' is not a reviewable version"), ("2.29 .4", "neither an image tag")])
def test_bad_sidecar_versions_are_refused(key, value, expected):
    config = variant(gds=True, gdrcopy=True)
    config["gpu-stack:versions"] = {key: value}
    assert expected in dict(problems(config))[f"gpu-stack:versions.{key}"]
