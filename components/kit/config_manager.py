"""Device plugin config selection, shared by the device plugin, GFD and the MPS control daemon: NVIDIA's
config-manager copies the config a node's `nvidia.com/device-plugin.config` label names out of the stack's
ConfigMap (components/kit/sharing.py writes its documents)."""

from __future__ import annotations

from pulumi_kubernetes.core.v1 import (
    ConfigMapVolumeSourceArgs,
    ContainerArgs,
    EmptyDirVolumeSourceArgs,
    VolumeArgs,
    VolumeMountArgs,
)

from components.catalogs import consts
from components.kit.builders import NODE_NAME_ENV, PRIVILEGED, env, mount

PLUGIN_CONFIGS_CONFIGMAP = "nvidia-device-plugin-configs"
PLUGIN_CONFIG_FILE = "/config/config.yaml"
AVAILABLE_CONFIGS_DIR = "/available-configs"
DEFAULT_PLUGIN_CONFIG_KEY = "default"


def config_manager(image: str, *, sidecar: bool, process_to_signal: str) -> ContainerArgs:
    """NVIDIA's config-manager: copies the key named by the node's `nvidia.com/device-plugin.config` label to
    /config/config.yaml (init) and, as a sidecar, SIGHUPs `process_to_signal` when the label changes."""
    return ContainerArgs(
        name="config-manager" if sidecar else "config-manager-init",
        image=image,
        image_pull_policy="IfNotPresent",
        command=["config-manager"],
        env=[
            env("ONESHOT", "false" if sidecar else "true"),
            env("KUBECONFIG", ""),
            NODE_NAME_ENV,
            env("NODE_LABEL", consts.DEVICE_PLUGIN_CONFIG),
            env("CONFIG_FILE_SRCDIR", AVAILABLE_CONFIGS_DIR),
            env("CONFIG_FILE_DST", PLUGIN_CONFIG_FILE),
            env("DEFAULT_CONFIG", DEFAULT_PLUGIN_CONFIG_KEY),
            env("SEND_SIGNAL", "true" if sidecar else "false"),
            env("SIGNAL", "1" if sidecar else ""),  # SIGHUP: reload the config
            env("PROCESS_TO_SIGNAL", process_to_signal if sidecar else ""),
            env("FALLBACK_STRATEGIES", "empty"),
        ],
        security_context=PRIVILEGED if sidecar else None,
        volume_mounts=plugin_config_mounts(),
    )


def plugin_config_mounts() -> list[VolumeMountArgs]:
    return [mount("config", "/config"), mount(PLUGIN_CONFIGS_CONFIGMAP, AVAILABLE_CONFIGS_DIR)]


def plugin_config_volumes() -> list[VolumeArgs]:
    return [
        VolumeArgs(name=PLUGIN_CONFIGS_CONFIGMAP, config_map=ConfigMapVolumeSourceArgs(name=PLUGIN_CONFIGS_CONFIGMAP)),
        VolumeArgs(name="config", empty_dir=EmptyDirVolumeSourceArgs()),
    ]
