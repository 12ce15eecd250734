"""`gpu-stack:hostPaths` and the toolkit's paths: the config's bounds, the operator's host-path transforms
(components/kit/host_paths.py, fact sheet §1.4) on builder inputs, and one render that moves every path at once."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pulumi_kubernetes.core.v1 import ContainerArgs, EnvVarArgs, VolumeArgs

from components.config import ConfigError, HostPaths, load_config
from components.kit.builders import host_path, mount
from components.kit.host_paths import apply_host_paths
from stacktest import bag, container, env_of, objects, render, stack_config

H = "gpu-stack:hostPaths"
T = "gpu-stack:toolkit"
K0S_KUBELET = "/var/lib/k0s/kubelet"


def moved_config() -> dict[str, Any]:
    """The dra stack on nodes that bring their own driver, with every movable path moved: the toolkit, validator,
    device plugin, DCGM exporter, MIG manager and DRA kubelet plugin all carry one."""
    config = stack_config("dra")
    config["gpu-stack:driver"] = {"mode": "host"}
    config.pop("gpu-stack:upgrade")
    for pool in config["gpu-stack:nodePools"]:
        pool.pop("driver", None)
    config[H] = {"rootFS": "/host-fs", "driverInstallDir": "/home/kubernetes/bin/nvidia", "kubeletRootDir": K0S_KUBELET}
    config[T] = {
        "installDir": "/opt/nvidia",
        "runtimeConfig": "/etc/k0s/containerd.d/nvidia.toml",
        "runtimeDropInConfig": "/etc/k0s/containerd.d/99-nvidia.toml",
        "runtimeSocket": "/run/k0s/containerd.sock",
    }
    return config


def problems(config: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as caught:
        load_config(bag(config))
    return caught.value.problems


# --- configuration ----------------------------------------------------------------------------------------------


def test_defaults_are_nvidias_and_k0s_loads():
    assert HostPaths().model_dump(by_alias=True) == {
        "rootFS": "/",
        "driverInstallDir": "/run/nvidia/driver",
        "kubeletRootDir": "/var/lib/kubelet",
    }
    k0s = load_config(bag(stack_config("k0s")))
    assert k0s.host_paths.kubelet_root_dir == K0S_KUBELET and k0s.host_paths.root_fs == "/"
    assert load_config(bag(moved_config())).host_paths.dev_char == "/host-fs/dev/char"


BAD = [
    ({H: {"rootFS": "host-fs"}}, f"{H}.rootFS", "not an absolute, normalised host path"),
    ({H: {"rootFS": "/proc/1/root"}}, f"{H}.rootFS", "inside /proc"),
    ({H: {"rootFs": "/host-fs"}}, f"{H}.rootFs", "rootFS"),
    ({H: {"driverInstallDir": "/"}}, f"{H}.driverInstallDir", "whole host"),
    ({H: {"kubeletRootDir": "/var/lib/../kubelet"}}, f"{H}.kubeletRootDir", "no '..'"),
    ({H: {"kubeletRootDir": "/var/lib/kubelet/"}}, f"{H}.kubeletRootDir", "no trailing '/'"),
    ({H: {"kubeletRootDir": "/" + "k" * 300}}, f"{H}.kubeletRootDir", "longer than 255"),
    ({H: {"kubeletRootDir": "/etc/kubelet"}}, f"{H}.kubeletRootDir", "inside /etc"),
    ({H: {"kubeletRoot": "/var/lib/k0s/kubelet"}}, f"{H}.kubeletRoot", "kubeletRootDir"),
    # prod-managed deploys its drivers, which install into /run/nvidia/driver whatever the operands are told
    ({H: {"driverInstallDir": "/home/kubernetes/bin/nvidia"}}, f"{H}.driverInstallDir", "driver.mode: host"),
    ({T: {"runtimeConfig": "/config.toml"}}, f"{T}.runtimeConfig", "directly under /"),
    ({T: {"runtimeDropInConfig": "/etc/containerd/conf.d/99-nvidia.conf"}}, f"{T}.runtimeDropInConfig", ".toml"),
    ({T: {"runtimeSocket": "/run/k0s/../containerd.sock"}}, f"{T}.runtimeSocket", "no '..'"),
    ({T: {"runtimeConfig": "/etc/k0s/a.toml", "runtimeDropInConfig": "/etc/k0s/a.toml"}}, f"{T}.runtimeDropInConfig", "into itself"),
    ({T: {"installDir": "/etc/nvidia"}}, f"{T}.installDir", "inside /etc"),
]


@pytest.mark.parametrize("sections, key, fragment", BAD, ids=[f"{b[1]}:{b[2]}" for b in BAD])
def test_bad_paths_name_the_key_and_what_is_allowed(sections, key, fragment):
    config = stack_config("prod-managed")
    config.update(sections)
    found = problems(config)
    assert any(path == key and fragment in message for path, message in found), found
    # a long value is cut, never echoed whole
    assert all(len(message) < 400 for _, message in found), found


# --- the transforms on builder inputs -----------------------------------------------------------------------------


def _env(c: ContainerArgs) -> dict[str, str]:
    return {e.name: e.value for e in c.env or []}


def _paths(volumes: list[VolumeArgs]) -> dict[str, str]:
    return {v.name: v.host_path.path for v in volumes}


VOLUMES = [
    host_path("host-root", "/"),
    host_path("host-dev-char", "/dev/char"),
    host_path("driver-install-dir", "/run/nvidia/driver", "DirectoryOrCreate"),
    host_path("device-plugin", "/var/lib/kubelet/device-plugins"),
    host_path("plugins", "/var/lib/kubelet/plugins"),
]
VALIDATION = ContainerArgs(
    name="driver-validation",
    env=[EnvVarArgs(name="HOST_ROOT", value="/")],
    volume_mounts=[mount("driver-install-dir", "/run/nvidia/driver", propagation="HostToContainer")],
)
VFIO = ContainerArgs(name="vfio", env=[EnvVarArgs(name="HOST_ROOT", value="/host")])
PLUGIN = ContainerArgs(
    name="plugin",
    env=[EnvVarArgs(name="KUBELET_PLUGINS_DIRECTORY_PATH", value="/var/lib/kubelet/plugins")],
    volume_mounts=[mount("device-plugin", "/var/lib/kubelet/device-plugins"), mount("plugins", "/var/lib/kubelet/plugins")],
)


def test_default_paths_change_nothing():
    volumes, inits, mains = apply_host_paths(HostPaths(), VOLUMES, [VALIDATION], [VFIO, PLUGIN])
    assert volumes == VOLUMES and inits == [VALIDATION] and mains == [VFIO, PLUGIN]


def test_moved_paths_follow_the_operators_transforms_without_touching_shared_inputs():
    before = copy.deepcopy((VOLUMES,))
    paths = HostPaths.model_validate({"rootFS": "/host-fs", "driverInstallDir": "/opt/drv", "kubeletRootDir": K0S_KUBELET})
    volumes, (validation,), (vfio, plugin) = apply_host_paths(paths, VOLUMES, [VALIDATION], [VFIO, PLUGIN])
    assert _paths(volumes) == {
        "host-root": "/host-fs",
        "host-dev-char": "/host-fs/dev/char",
        "driver-install-dir": "/opt/drv",
        "device-plugin": f"{K0S_KUBELET}/device-plugins",
        "plugins": f"{K0S_KUBELET}/plugins",
    }
    assert volumes[2].host_path.type == "DirectoryOrCreate"
    # transformForHostRoot: HOST_ROOT everywhere, but an in-container /host stays what the binary reads
    assert _env(validation)["HOST_ROOT"] == "/host-fs" and _env(plugin)["HOST_ROOT"] == "/host-fs"
    assert _env(vfio) == {"HOST_ROOT": "/host"}
    # transformForDriverInstallDir: the driver validation is told, and looks where it is told
    assert _env(validation)["DRIVER_INSTALL_DIR"] == _env(validation)["DRIVER_INSTALL_DIR_CTR_PATH"] == "/opt/drv"
    assert validation.volume_mounts[0].mount_path == "/opt/drv"
    assert validation.volume_mounts[0].mount_propagation == "HostToContainer"
    # the device plugin API sits at a fixed path in the container; the DRA plugin's paths are the kubelet's own
    mounts = {m.name: m.mount_path for m in plugin.volume_mounts}
    assert mounts == {"device-plugin": "/var/lib/kubelet/device-plugins", "plugins": f"{K0S_KUBELET}/plugins"}
    assert _env(plugin)["KUBELET_PLUGINS_DIRECTORY_PATH"] == f"{K0S_KUBELET}/plugins"
    # the inputs are module constants shared by every DaemonSet and render: untouched
    assert [v.host_path.path for v in VOLUMES] == [v.host_path.path for v in before[0]]
    assert _env(VALIDATION) == {"HOST_ROOT": "/"} and VALIDATION.volume_mounts[0].mount_path == "/run/nvidia/driver"
    assert _env(PLUGIN) == {"KUBELET_PLUGINS_DIRECTORY_PATH": "/var/lib/kubelet/plugins"}
    assert [m.mount_path for m in PLUGIN.volume_mounts] == ["/var/lib/kubelet/device-plugins", "/var/lib/kubelet/plugins"]


# --- one render, every path moved -----------------------------------------------------------------------------------


def _host_paths(obj: dict[str, Any]) -> dict[str, str]:
    return {v["name"]: v["hostPath"]["path"] for v in obj["spec"]["template"]["spec"]["volumes"] if "hostPath" in v}


def _mounts(c: dict[str, Any]) -> dict[str, str]:
    return {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}


def test_a_render_moves_every_path_where_the_operator_does():
    ds = objects(render(moved_config()), "DaemonSet")
    toolkit = ds["nvidia-container-toolkit-daemonset"]
    expected = {
        "host-root": "/host-fs",
        "host-dev-char": "/host-fs/dev/char",
        "driver-install-dir": "/home/kubernetes/bin/nvidia",
        "toolkit-install-dir": "/opt/nvidia",
        "containerd-config": "/etc/k0s/containerd.d",
        "containerd-drop-in-config": "/etc/k0s/containerd.d",
        "containerd-socket": "/run/k0s",
    }
    assert expected.items() <= _host_paths(toolkit).items()
    ctk = env_of(container(toolkit, "nvidia-container-toolkit-ctr"))
    assert ctk["ROOT"] == "/opt/nvidia" and ctk["HOST_ROOT"] == "/host-fs"
    assert ctk["RUNTIME_DROP_IN_CONFIG_HOST_PATH"] == "/etc/k0s/containerd.d/99-nvidia.toml"
    assert ctk["RUNTIME_CONFIG"] == "/runtime/config-dir/nvidia.toml" and ctk["RUNTIME_SOCKET"] == "/runtime/sock-dir/containerd.sock"
    for name in ("nvidia-container-toolkit-daemonset", "nvidia-operator-validator", "nvidia-dra-driver-kubelet-plugin"):
        validation = container(ds[name], "driver-validation")
        assert env_of(validation)["DRIVER_INSTALL_DIR"] == "/home/kubernetes/bin/nvidia", name
        assert env_of(validation)["DRIVER_INSTALL_DIR_CTR_PATH"] == _mounts(validation)["driver-install-dir"] == "/home/kubernetes/bin/nvidia"
        assert env_of(validation)["HOST_ROOT"] == "/host-fs", name
    # the other operands keep /driver-root and learn the host path from driver-ready
    plugin = ds["nvidia-device-plugin-daemonset"]
    assert _mounts(container(plugin, "nvidia-device-plugin"))["driver-install-dir"] == "/driver-root"
    assert env_of(container(plugin, "nvidia-device-plugin"))["NVIDIA_CDI_HOOK_PATH"] == "/opt/nvidia/toolkit/nvidia-cdi-hook"
    assert env_of(container(ds["nvidia-mig-manager"], "nvidia-mig-manager"))["NVIDIA_CDI_HOOK_PATH"] == "/opt/nvidia/toolkit/nvidia-cdi-hook"
    # kubelet: the device plugin and pod-resources move on the host only; the DRA plugin's paths everywhere
    assert _host_paths(plugin)["device-plugin"] == f"{K0S_KUBELET}/device-plugins"
    assert _mounts(container(plugin, "nvidia-device-plugin"))["device-plugin"] == "/var/lib/kubelet/device-plugins"
    assert _host_paths(ds["nvidia-dcgm-exporter"])["pod-gpu-resources"] == f"{K0S_KUBELET}/pod-resources"
    dra = ds["nvidia-dra-driver-kubelet-plugin"]
    assert _host_paths(dra)["plugins"] == _mounts(container(dra, "gpus"))["plugins"] == f"{K0S_KUBELET}/plugins"
    gpus = env_of(container(dra, "gpus"))
    assert gpus["KUBELET_REGISTRAR_DIRECTORY_PATH"] == f"{K0S_KUBELET}/plugins_registry"
    assert gpus["HOST_ROOT"] == "/host"  # the plugin's in-container path, not the host's
    # pods without NVIDIA's host-root volume get no HOST_ROOT
    assert "HOST_ROOT" not in env_of(container(ds["gpu-feature-discovery"], "gpu-feature-discovery"))
