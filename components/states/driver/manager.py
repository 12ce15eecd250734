"""k8s-driver-manager, the init container in front of every host driver (the driver's, the vGPU manager's): it
evicts the node's GPU pods as the stack's upgrade policy says and unloads any NVIDIA driver before the new one loads
(fact sheet §5.3). The driver waves' gates read the same env (components/states/waves.py)."""

from __future__ import annotations

from typing import Optional, Sequence

from pulumi_kubernetes.core.v1 import ContainerArgs

from components.catalogs import consts
from components.config import Upgrade
from components.config.keys import derived, flag
from components.kit.builders import NODE_NAME_ENV, OPERATOR_NAMESPACE_ENV, PRIVILEGED, env
from components.states.driver import volumes as v


def manager_evicts(upgrade: Upgrade) -> bool:
    """Whether k8s-driver-manager evicts and drains by itself: only with `manual`. With `rolling` the node agent has
    emptied the node (the coordinator evicting, gpu_stack_agent/drains.py) before it deletes a driver pod, so the
    manager's own eviction is off and the driver's token, on every GPU node, holds no `pods/eviction`. A driver pod
    someone deletes by hand then makes the manager wait, not evict: the new pod reuses a loaded driver of the same
    install at once (DRIVER_CONFIG_DIGEST), and a new install cannot unload the old modules while GPU work holds
    them, so the init container fails and retries until the work ended (or the node is drained: `kubectl drain`)."""
    return upgrade.strategy == "manual"


def driver_manager_env(upgrade: Upgrade, own: Optional[bool] = None) -> tuple[tuple[str, str], ...]:
    """k8s-driver-manager's env, in the asset's order, from the stack's upgrade policy (fact sheet §5.3); `own`:
    whether its own eviction and drain follow the policy (default: `manager_evicts`)."""
    drain = upgrade.drain
    own = manager_evicts(upgrade) if own is None else own
    return (
        ("NVIDIA_VISIBLE_DEVICES", "void"),  # the driver manager must run under runc, not the nvidia runtime
        ("ENABLE_GPU_POD_EVICTION", flag(upgrade, "gpu_pod_eviction") if own else derived("false", upgrade.strategy)),
        ("ENABLE_AUTO_DRAIN", flag(drain, "enabled") if own else derived("false", upgrade.strategy)),
        ("DRAIN_USE_FORCE", flag(drain, "force")),
        ("DRAIN_POD_SELECTOR_LABEL", drain.pod_selector),
        ("DRAIN_TIMEOUT_SECONDS", derived(f"{drain.timeout_seconds}s", drain.timeout_seconds)),
        ("DRAIN_DELETE_EMPTYDIR_DATA", flag(drain, "delete_empty_dir_data")),
    )


def driver_manager(image: str, upgrade: Upgrade, digest: str, gpudirect: Sequence = (),
                   own_eviction: Optional[bool] = None) -> ContainerArgs:
    """k8s-driver-manager in front of a host driver (the driver's, the vGPU manager's): it evicts the node's GPU
    pods as the upgrade policy says (`driver_manager_env`) and unloads any NVIDIA driver before the new one loads."""
    return ContainerArgs(
        name=consts.DRIVER_MANAGER_CONTAINER,
        image=image,
        image_pull_policy="IfNotPresent",
        command=["driver-manager"],
        args=["uninstall_driver"],
        env=[
            NODE_NAME_ENV,
            *(env(k, v) for k, v in driver_manager_env(upgrade, own_eviction)),
            OPERATOR_NAMESPACE_ENV,
            *gpudirect,
            env("DRIVER_CONFIG_DIGEST", digest),
        ],
        security_context=PRIVILEGED,
        volume_mounts=[
            v.RUN_NVIDIA.mount(consts.RUN_NVIDIA, propagation="Bidirectional"),
            v.HOST_ROOT.mount("/host", read_only=True, propagation="HostToContainer"),
            v.HOST_SYS.mount("/sys"),
            v.MELLANOX_DRIVERS.mount("/run/mellanox/drivers", propagation="HostToContainer"),
        ],
    )
