"""State `gpu-feature-discovery`: labels each GPU node with its GPU model, memory, MIG and sharing facts.

Objects as in GO:assets/gpu-feature-discovery with `TransformGPUDiscoveryPlugin` applied. GFD reads the same
per-pool plugin config as the device plugin (through the same config-manager pair), so the labels it writes
(`nvidia.com/gpu.replicas`, `.sharing-strategy`, `nvidia.com/mps.capable`, MIG labels) match what the plugin
advertises. Labels go through NFD's NodeFeature API (GFD's default), which the bundled NFD is configured to
accept for the `nvidia.com` namespace.
"""

from __future__ import annotations

from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import ContainerArgs

from components.catalogs import consts
from components.kit.builders import (
    NODE_NAME_ENV,
    PRIVILEGED,
    RUN_NVIDIA_VOLUME,
    Operands,
    also_after,
    child_opts,
    env,
    env_from_field,
    host_path,
    mig_env,
    mount,
    operand_daemonset,
    wait_for_validation,
)
from components.kit.config_manager import PLUGIN_CONFIG_FILE, config_manager, plugin_config_mounts, plugin_config_volumes
from components.kit.rbac import SCC_USE, rbac_set, rule

NAME = "gpu-feature-discovery"
SERVICE_ACCOUNT = "nvidia-gpu-feature-discovery"
SELECTOR = {"app": NAME, consts.PART_OF: "nvidia-gpu"}
FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"

ROLE_RULES = (
    SCC_USE,
    rule(["nfd.k8s-sigs.io"], ["nodefeatures"], ["get", "list", "watch", "create", "update"]),
    rule([""], ["pods"], ["get"]),
)
CLUSTER_RULES = (rule([""], ["nodes"], ["get", "list", "watch"]),)


def gfd_env(mig_strategy: str, *, with_config: bool, openshift: bool = False) -> list:
    values = [
        env("GFD_SLEEP_INTERVAL", "60s"),
        env("GFD_FAIL_ON_INIT_ERROR", "true"),
        env_from_field("NAMESPACE", "metadata.namespace"),
        NODE_NAME_ENV,
        env_from_field("POD_NAME", "metadata.name"),
    ]
    if with_config:
        values.append(env("CONFIG_FILE", PLUGIN_CONFIG_FILE))
    if openshift:
        # OpenShift's NFD reads feature files, not NodeFeature objects, so the operator turns the API off there.
        values.append(env("USE_NODE_FEATURE_API", "false"))
    return values + mig_env(None if with_config else mig_strategy)


class GpuFeatureDiscovery(pulumi.ComponentResource):
    daemonset: k8s.apps.v1.DaemonSet

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        mig_strategy: str,
        plugin_configs: Optional[k8s.core.v1.ConfigMap],
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:GpuFeatureDiscovery", name, None, opts)
        child = child_opts(self, depends_on)
        rbac = rbac_set(SERVICE_ACCOUNT, ops.namespace, openshift=ops.openshift, role_rules=ROLE_RULES, cluster_role_rules=CLUSTER_RULES, opts=child)
        with_config = plugin_configs is not None
        image = ops.images.gfd
        discovery = ContainerArgs(
            name=NAME,
            image=image,
            image_pull_policy="IfNotPresent",
            command=["gpu-feature-discovery"],
            env=gfd_env(mig_strategy, with_config=with_config, openshift=ops.openshift),
            security_context=PRIVILEGED,
            volume_mounts=[
                mount("output-dir", FEATURES_DIR),
                mount("host-sys", "/sys", read_only=True),
                *(plugin_config_mounts() if with_config else []),
            ],
        )
        init = [wait_for_validation(ops.images.validator, "toolkit-ready", volume="run-nvidia")]
        containers = [discovery]
        volumes = [host_path("output-dir", FEATURES_DIR), host_path("host-sys", "/sys"), RUN_NVIDIA_VOLUME]
        if with_config:
            # The operator runs config-manager from the device plugin's image in every state that uses it.
            init.append(config_manager(ops.images.device_plugin, sidecar=False, process_to_signal=NAME))
            containers.append(config_manager(ops.images.device_plugin, sidecar=True, process_to_signal=NAME))
            volumes += plugin_config_volumes()
        self.daemonset = operand_daemonset(
            NAME,
            ops,
            operand="gfd",
            deploy_component="gpu-feature-discovery",
            service_account=SERVICE_ACCOUNT,
            selector_labels=SELECTOR,
            runtime_class=True,
            share_process_namespace=True if with_config else None,
            init_containers=init,
            containers=containers,
            volumes=volumes,
            opts=also_after(child, *rbac.resources, *([plugin_configs] if plugin_configs is not None else [])),
        )
        self.register_outputs({"daemonset": NAME})
