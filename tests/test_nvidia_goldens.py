"""NVIDIA's golden renders (the GPU Operator's internal/state/testdata/golden/, a22dbf6), each from a gpu-stack
stack config: one row per scenario, the stack config that expresses it, and the facts of NVIDIA's render it pins
(containers and their entrypoints, the env each sets, the extra mounts and the node selection).

What still differs from each render is docs/differences.md's list; this module pins what is the same. The
OpenShift scenarios are also pinned field by field in tests/test_openshift.py, the vGPU manager in
tests/test_vgpu_operands.py, the DRA driver in tests/test_dra*.py and the driver pod's configs in
tests/test_driver_extensions.py."""

from __future__ import annotations

from typing import Any, Callable, Optional

import pytest

from stacktest import container, env_of, objects, render, stack_config

D = "gpu-stack:driver"
MANAGER_ENV = [
    "NODE_NAME", "NVIDIA_VISIBLE_DEVICES", "ENABLE_GPU_POD_EVICTION", "ENABLE_AUTO_DRAIN", "DRAIN_USE_FORCE",
    "DRAIN_POD_SELECTOR_LABEL", "DRAIN_TIMEOUT_SECONDS", "DRAIN_DELETE_EMPTYDIR_DATA", "OPERATOR_NAMESPACE",
]
# NVIDIA's additional-configs sample (getSampleAdditionalConfigs): a ConfigMap key and two host paths.
SAMPLE_VOLUMES = [
    {"name": "test-cm", "mountPath": "/opt/config/test-file", "subPath": "test-file", "configMap": {"name": "test-cm"}},
    {"name": "test-host-path", "mountPath": "/opt/config/test-host-path", "readOnly": False,
     "hostPath": {"path": "/opt/config/test-host-path", "type": "DirectoryOrCreate"}},
    {"name": "test-host-path-ro", "mountPath": "/opt/config/test-host-path-ro",
     "hostPath": {"path": "/opt/config/test-host-path-ro", "type": "DirectoryOrCreate"}},
]
SAMPLE_MOUNTS = ["/opt/config/test-file", "/opt/config/test-host-path", "/opt/config/test-host-path-ro"]


def edit(stack: str, change: Optional[Callable[[dict], None]] = None) -> tuple[str, dict]:
    config = stack_config(stack)
    if change is not None:
        change(config)
    return stack, config


def with_driver(**keys: Any) -> Callable[[dict], None]:
    return lambda config: config.setdefault(D, {}).update(keys)


def with_gpudirect(**keys: Any) -> Callable[[dict], None]:
    def change(config: dict) -> None:
        gpudirect = config.setdefault("gpu-stack:gpudirect", {})
        for key, value in keys.items():
            if isinstance(value, dict):
                gpudirect.setdefault(key, {}).update(value)
            else:
                gpudirect[key] = value
    return change


def both(*changes: Callable[[dict], None]) -> Callable[[dict], None]:
    def change(config: dict) -> None:
        for one in changes:
            one(config)
    return change


FULL_SPEC = {
    "env": [{"name": "FOO", "value": "foo"}, {"name": "BAR", "value": "bar"}],
    "labels": {"example.com/team": "gpu"},
    "annotations": {"example.com/owner": "platform"},
    "resources": {"requests": {"cpu": "200m", "memory": "100Mi"}, "limits": {"cpu": "500m", "memory": "300Mi"}},
}

# The additional-configs, GDS, GDRCopy and RDMA scenarios differ only by what they switch on: one stack config with
# all of them on renders each one's facts (each row checks its own), in one render.
GPUDIRECT_AND_CONFIGS = edit("prod-managed", both(
    with_gpudirect(gds=True, gdrcopy=True, rdma={"enabled": True, "useHostMofed": True}), with_driver(extraVolumes=SAMPLE_VOLUMES),
))
# Scenarios whose facts other modules pin field by field (module docstring): run in `make test-all`.
PINNED_ELSEWHERE = {
    "driver-full-spec", "driver-secret-env", "driver-hostnetwork", "driver-vgpu-licensing", "driver-vgpu-licensing-secret",
    "driver-vgpu-host-manager", "driver-openshift-drivertoolkit", "driver-gdrcopy-openshift", "gpucluster-dcgm",
    "gpucluster-dcgm-exporter-embedded", "gpucluster-dra-driver-full-spec", "gpucluster-dra-validation",
}

# scenario -> (stack, config, driver DaemonSet, {container: (command[0] or None, env names it must set in order,
# extra mount paths)}, node selector keys beyond the deploy label)
Scenario = tuple[tuple[str, dict], str, dict[str, tuple[Optional[str], list[str], list[str]]], set[str]]
SCENARIOS: dict[str, Scenario] = {
    "driver-minimal": (
        edit("prod-managed"), "nvidia-driver-daemonset-training",
        {"k8s-driver-manager": ("driver-manager", MANAGER_ENV + ["DRIVER_CONFIG_DIGEST"], []),
         "nvidia-driver-ctr": ("nvidia-driver", ["NVIDIA_VISIBLE_DEVICES", "NODE_NAME", "NODE_IP"], [])},
        set(),
    ),
    "driver-full-spec": (
        edit("prod-managed", lambda c: c["gpu-stack:operands"].update(driver=FULL_SPEC)), "nvidia-driver-daemonset-training",
        {"nvidia-driver-ctr": ("nvidia-driver", ["NVIDIA_VISIBLE_DEVICES", "NODE_NAME", "NODE_IP", "KERNEL_MODULE_TYPE",
                                                 "OPEN_KERNEL_MODULES_ENABLED", "DRIVER_CONFIG_DIGEST", "FOO", "BAR"], [])},
        set(),
    ),
    "driver-additional-configs": (
        GPUDIRECT_AND_CONFIGS, "nvidia-driver-daemonset-training",
        {"nvidia-driver-ctr": ("nvidia-driver", ["NVIDIA_VISIBLE_DEVICES", "NODE_NAME", "NODE_IP"], SAMPLE_MOUNTS)},
        set(),
    ),
    "driver-gds": (
        GPUDIRECT_AND_CONFIGS, "nvidia-driver-daemonset-training",
        {"nvidia-driver-ctr": ("nvidia-driver", ["GDS_ENABLED"], SAMPLE_MOUNTS),
         "nvidia-fs-ctr": ("bash", [], SAMPLE_MOUNTS)},
        set(),
    ),
    "driver-gdrcopy": (
        GPUDIRECT_AND_CONFIGS, "nvidia-driver-daemonset-training",
        {"nvidia-driver-ctr": ("nvidia-driver", ["GDRCOPY_ENABLED"], SAMPLE_MOUNTS),
         "nvidia-gdrcopy-ctr": ("bash", [], SAMPLE_MOUNTS)},
        set(),
    ),
    "driver-rdma": (
        GPUDIRECT_AND_CONFIGS, "nvidia-driver-daemonset-training",
        {"k8s-driver-manager": ("driver-manager", MANAGER_ENV + ["GPU_DIRECT_RDMA_ENABLED"], []),
         "nvidia-driver-ctr": ("nvidia-driver", ["GPU_DIRECT_RDMA_ENABLED"], SAMPLE_MOUNTS),
         "nvidia-peermem-ctr": ("nvidia-driver", ["NVIDIA_VISIBLE_DEVICES"], SAMPLE_MOUNTS)},
        set(),
    ),
    "driver-rdma-hostmofed": (
        GPUDIRECT_AND_CONFIGS, "nvidia-driver-daemonset-training",
        {"k8s-driver-manager": ("driver-manager", ["GPU_DIRECT_RDMA_ENABLED", "USE_HOST_MOFED"], []),
         "nvidia-driver-ctr": ("nvidia-driver", ["GPU_DIRECT_RDMA_ENABLED", "USE_HOST_MOFED"], SAMPLE_MOUNTS),
         "nvidia-peermem-ctr": ("nvidia-driver", ["NVIDIA_VISIBLE_DEVICES", "USE_HOST_MOFED"], SAMPLE_MOUNTS)},
        set(),
    ),
    "driver-secret-env": (
        edit("prod-managed", both(with_gpudirect(gds=True, gdrcopy=True), with_driver(secretEnv="driver-secret-env"))),
        "nvidia-driver-daemonset-training",
        {"nvidia-driver-ctr": ("nvidia-driver", ["GDRCOPY_ENABLED", "GDS_ENABLED"], []),
         "nvidia-fs-ctr": ("bash", [], []), "nvidia-gdrcopy-ctr": ("bash", [], [])},
        set(),
    ),
    "driver-hostnetwork": (
        edit("prod-managed", with_driver(hostNetwork=True)), "nvidia-driver-daemonset-training",
        {"nvidia-driver-ctr": ("nvidia-driver", ["NODE_IP"], [])},
        set(),
    ),
    "driver-precompiled": (
        edit("prod-precompiled"), "nvidia-driver-daemonset-canary-5.15.0-139-generic-ubuntu22.04",
        {"nvidia-driver-ctr": ("nvidia-driver", ["NVIDIA_VISIBLE_DEVICES", "NODE_NAME", "NODE_IP"], [])},
        {"feature.node.kubernetes.io/kernel-version.full"},
    ),
    "driver-vgpu-licensing": (
        edit("vgpu-guest", with_driver(licensingConfig={"configMapName": "licensing-config", "nlsEnabled": True})),
        "nvidia-driver-daemonset-vgpu-l40s",
        {"nvidia-driver-ctr": ("nvidia-driver", [], ["/drivers/gridd.conf", "/drivers/ClientConfigToken/client_configuration_token.tok"])},
        set(),
    ),
    "driver-vgpu-licensing-secret": (
        edit("vgpu-guest"), "nvidia-driver-daemonset-vgpu-l40s",
        {"nvidia-driver-ctr": ("nvidia-driver", [], ["/drivers/gridd.conf", "/drivers/ClientConfigToken/client_configuration_token.tok"])},
        set(),
    ),
    "driver-vgpu-host-manager": (
        edit("kubevirt"), "nvidia-vgpu-manager-daemonset",
        {"k8s-driver-manager": ("driver-manager", MANAGER_ENV + ["DRIVER_CONFIG_DIGEST"], []),
         "nvidia-driver-ctr": ("nvidia-driver", ["NVIDIA_VISIBLE_DEVICES", "NODE_NAME", "NODE_IP", "DRIVER_CONFIG_DIGEST"],
                               ["/sys/fs/cgroup", "/dev/vfio"])},
        set(),
    ),
    "driver-openshift-drivertoolkit": (
        edit("openshift", lambda c: c.pop("gpu-stack:gpudirect")), "nvidia-driver-daemonset-training-416.94.202411261619-0",
        {"nvidia-driver-ctr": ("ocp_dtk_entrypoint", ["OPENSHIFT_VERSION", "HTTP_PROXY", "http_proxy", "HTTPS_PROXY",
                                                      "https_proxy", "NO_PROXY", "no_proxy"],
                               ["/mnt/shared-nvidia-driver-toolkit", "/etc/pki/ca-trust/extracted/pem"]),
         "openshift-driver-toolkit-ctr": ("bash", ["RHCOS_VERSION", "NVIDIA_VISIBLE_DEVICES", "DRIVER_CONFIG_DIGEST"],
                                          ["/mnt/shared-nvidia-driver-toolkit"])},
        {"feature.node.kubernetes.io/system-os_release.OSTREE_VERSION"},
    ),
    "driver-gdrcopy-openshift": (
        edit("openshift"), "nvidia-driver-daemonset-training-416.94.202411261619-0",
        {"nvidia-gdrcopy-ctr": ("ocp_dtk_entrypoint", [], ["/mnt/shared-nvidia-driver-toolkit"]),
         "openshift-driver-toolkit-ctr": ("bash", ["RHCOS_VERSION", "NVIDIA_VISIBLE_DEVICES", "DRIVER_CONFIG_DIGEST", "GDRCOPY_ENABLED"], [])},
        {"feature.node.kubernetes.io/system-os_release.OSTREE_VERSION"},
    ),
    # (driver-vgpu-host-manager-openshift: tests/test_openshift.py renders a vm-vgpu pool on the openshift stack)
    "gpucluster-dcgm": (
        edit("dra"), "nvidia-dcgm-dra", {"nvidia-dcgm-ctr": (None, [], [])}, set(),
    ),
    "gpucluster-dcgm-exporter-embedded": (
        edit("dra"), "nvidia-dcgm-exporter-dra",
        {"nvidia-dcgm-exporter-dra": (None, ["DCGM_EXPORTER_LISTEN", "DCGM_EXPORTER_KUBERNETES", "DCGM_EXPORTER_COLLECTORS", "NODE_NAME"], [])},
        set(),
    ),
    "gpucluster-dra-driver-full-spec": (
        edit("dra"), "nvidia-dra-driver-kubelet-plugin",
        # (NVIDIA writes COMPONENT before WITH_WAIT; gpu-stack's validator builder the other way round)
        {"driver-validation": ("nvidia-validator", ["DRIVER_VALIDATION_SKIP_GPU_INIT", "DISABLE_DEV_CHAR_SYMLINK_CREATION",
                                                    "OPERATOR_NAMESPACE", "HOST_ROOT"], []),
         "gpus": ("bash", ["HTTP_ENDPOINT", "METRICS_PATH", "LOG_VERBOSITY"], []),
         "compute-domains": ("bash", ["HTTP_ENDPOINT", "METRICS_PATH", "LOG_VERBOSITY"], [])},
        set(),
    ),
    "gpucluster-dra-validation": (
        edit("dra"), "nvidia-dra-validator",
        {"gpu-validation": ("sh", [], []), "nvidia-dra-validator": ("sh", [], [])},
        set(),
    ),
}


def _in_order(names: list[str], wanted: list[str]) -> bool:
    """`wanted` appear in `names` in this order (other names may come between)."""
    position = 0
    for name in names:
        if position < len(wanted) and name == wanted[position]:
            position += 1
    return position == len(wanted)


@pytest.mark.parametrize(
    "scenario", [pytest.param(s, marks=pytest.mark.matrix) if s in PINNED_ELSEWHERE else s for s in sorted(SCENARIOS)]
)
def test_each_nvidia_golden_scenario_renders_from_a_stack_config(scenario):
    (stack, config), daemonset, containers, selector_keys = SCENARIOS[scenario]
    ds = objects(render(config, stack=stack), "DaemonSet")[daemonset]
    spec = ds["spec"]["template"]["spec"]
    for name, (command, env_names, mounts) in containers.items():
        found = container(ds, name)
        if command is not None:
            assert (found.get("command") or [None])[0] == command, (scenario, name)
        assert _in_order([e["name"] for e in found.get("env", [])], env_names), (scenario, name, [e["name"] for e in found.get("env", [])])
        paths = [m["mountPath"] for m in found.get("volumeMounts", [])]
        assert _in_order(paths, mounts), (scenario, name, paths)
    assert selector_keys <= set(spec.get("nodeSelector") or {}), scenario
    if scenario == "driver-hostnetwork":
        assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    if scenario == "driver-full-spec":
        driver = container(ds, "nvidia-driver-ctr")
        assert env_of(driver)["FOO"] == "foo" and driver["resources"]["limits"] == {"cpu": "500m", "memory": "300Mi"}
        assert ds["spec"]["template"]["metadata"]["labels"]["example.com/team"] == "gpu"
    if scenario.endswith("secret-env"):
        assert all(container(ds, n)["envFrom"] == [{"secretRef": {"name": "driver-secret-env"}}] for n in containers)


def test_every_golden_scenario_of_nvidias_repository_is_covered():
    """The 24 goldens at a22dbf6: each is a row here or pinned where the module docstring says."""
    elsewhere = {
        "driver-vgpu-host-manager-openshift",  # tests/test_openshift.py
        "gpucluster-dcgm-exporter-pod-metadata", "gpucluster-dcgm-exporter-remote-engine",  # tests/test_dcgm_exporter_options.py
        "gpucluster-dra-driver-gpus-only", "gpucluster-dra-driver-passthrough-support",  # tests/test_dra*.py
    }
    assert len(set(SCENARIOS) | elsewhere) == 24
