"""State `state-mps-control-daemon`: the CUDA MPS control daemon behind the device plugin's `mps` sharing.

Objects as in GO:assets/state-mps-control-daemon with `TransformMPSControlDaemon` applied. The daemon only
lands on nodes GFD labelled `nvidia.com/mps.capable=true`, which GFD does when the node's selected plugin
config shares by MPS. gpu-stack renders the state only when some pool shares by MPS: without such a pool
no config key could ever make a node MPS-capable.

One deliberate difference: NVIDIA's DaemonSet runs as the device plugin's ServiceAccount although the state
creates its own; here it runs as its own, with the node read access its config-manager needs, so the two
states can be reviewed and removed independently (fact sheet Appendix G).
"""

from __future__ import annotations

from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import ContainerArgs

from components.kit.builders import (
    NODE_NAME_ENV,
    PRIVILEGED,
    RUN_NVIDIA_VOLUME,
    Operands,
    also_after,
    child_opts,
    env,
    mig_env,
    mount,
    operand_daemonset,
    wait_for_validation,
)
from components.kit.config_manager import PLUGIN_CONFIG_FILE, config_manager, plugin_config_mounts, plugin_config_volumes
from components.kit.rbac import SCC_USE, rbac_set, rule
from components.states.device_plugin import MPS_ROOT, mps_volumes

NAME = "nvidia-device-plugin-mps-control-daemon"
CONTAINER = "mps-control-daemon-ctr"
MPS_CAPABLE = "nvidia.com/mps.capable"
# config-manager signals by executable path here, as NVIDIA's asset does.
PROCESS = "/usr/bin/mps-control-daemon"


class MpsControlDaemon(pulumi.ComponentResource):
    daemonset: k8s.apps.v1.DaemonSet

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        plugin_configs: k8s.core.v1.ConfigMap,
        mps_root: str = MPS_ROOT,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:MpsControlDaemon", name, None, opts)
        child = child_opts(self, depends_on)
        rbac = rbac_set(NAME, ops.namespace, openshift=ops.openshift, role_rules=[SCC_USE], cluster_role_rules=[rule([""], ["nodes"], ["get", "list", "watch"])], opts=child)
        image = ops.images.device_plugin
        mounts_shm = ContainerArgs(
            name="mps-control-daemon-mounts",
            image=image,
            image_pull_policy="IfNotPresent",
            command=["mps-control-daemon", "mount-shm"],
            security_context=PRIVILEGED,
            volume_mounts=[mount("mps-root", "/mps", propagation="Bidirectional")],
        )
        daemon = ContainerArgs(
            name=CONTAINER,
            image=image,
            image_pull_policy="IfNotPresent",
            command=["mps-control-daemon"],
            env=[
                NODE_NAME_ENV,
                env("NVIDIA_VISIBLE_DEVICES", "all"),
                env("NVIDIA_DRIVER_CAPABILITIES", "compute,utility"),
                env("CONFIG_FILE", PLUGIN_CONFIG_FILE),
                # the per-pool config file always carries the strategy here
                *mig_env(None),
            ],
            security_context=PRIVILEGED,
            volume_mounts=[mount("mps-shm", "/dev/shm"), mount("mps-root", "/mps"), *plugin_config_mounts()],
        )
        self.daemonset = operand_daemonset(
            NAME,
            ops,
            operand="mpsControlDaemon",
            deploy_component="device-plugin",
            extra_node_selector={MPS_CAPABLE: "true"},
            service_account=NAME,
            runtime_class=True,
            # hostPID already lets the sidecar see the daemon, so no shareProcessNamespace
            host_pid=True,
            init_containers=[
                wait_for_validation(ops.images.validator, "toolkit-ready", volume="run-nvidia"),
                mounts_shm,
                config_manager(image, sidecar=False, process_to_signal=PROCESS),
            ],
            containers=[daemon, config_manager(image, sidecar=True, process_to_signal=PROCESS)],
            volumes=[
                RUN_NVIDIA_VOLUME,
                *mps_volumes(mps_root),
                *plugin_config_volumes(),
            ],
            opts=also_after(child, *rbac.resources, plugin_configs),
        )
        self.register_outputs({"daemonset": NAME})
