"""State `state-driver`: NVIDIA's driver container, as DaemonSets planned per pool group.

Objects as in GO:assets/state-driver: SA/Role/RoleBinding/ClusterRole/ClusterRoleBinding `nvidia-driver`,
ConfigMap `nvidia-driver-startup-probe`, and driver DaemonSets with the `k8s-driver-manager` init container.

Which DaemonSets (one per pool, or per name that pools pin) is planned in components/states/driver/targets.py
(`plan_targets`). Every driver DaemonSet is a child of `state-driver`, whichever upgrade wave its pools are in:
waves only decide what it waits for, so moving a pool between waves, renaming or reordering waves never changes a
DaemonSet's identity.

A driver DaemonSet is deleted with orphan propagation: when a pool is renamed or removed its driver pods stay
(drivers loaded, GPU work running) and the node agent hands each node over to its new DaemonSet, or retires it,
at the upgrade's pace. Because DRIVER_CONFIG_DIGEST is the same when the image is, the new pod's
k8s-driver-manager keeps the loaded driver (fast path, fact sheet §4.1) instead of reinstalling it.

Updates (`gpu-stack:upgrade`): every driver DaemonSet is OnDelete, whatever the strategy, so the DaemonSet
controller never replaces a driver pod by itself. With `rolling` the node agent (the labeller's DaemonSet,
node_images/node-agent) performs the upgrade: it replaces its own node's outdated driver pod only while it holds a
slot of the fleet's one disruption budget (`upgrade.maxUnavailable`, capped by `maxParallelUpgrades`, shared by
every pool, driver DaemonSet and wave through the `gpu-stack-upgrade-budget` ConfigMap the agents create at run
time), cordoning the node until the new driver is Ready, and has its GPU work evicted first (by the upgrade
coordinator, the one token of the stack that evicts); k8s-driver-manager's own eviction and drain are off, and the
driver's ServiceAccount, on every GPU node, holds no `pods/eviction` (`manager_evicts`). With `manual` nothing
changes on a node until someone deletes its driver pod, and then its k8s-driver-manager evicts GPU pods (and drains,
if enabled) before it swaps the driver, after the node agent's `wait-for-completion` init container let the node's
jobs finish when `upgrade.waitForCompletion` is set. The driver container is Ready only once the node's validator wrote all its files
(a readinessProbe, which the operator lets `driver.readinessProbe` configure): the agent frees the node's slot when
it can run GPU work again, not when its modules are merely loaded, so the budget bounds the nodes out of service,
validation included.

The agent tells an outdated pod by the DaemonSet's `gpu-stack/template-digest` annotation, which the node-pools
document also names (components/kit/digest.py): a digest of the pod template as rendered, on the DaemonSet's
metadata, never on the template, so adding it restarts no driver pod. The agent sets
`nvidia.com/gpu-driver-upgrade-enabled=true` on the node it cordons for an upgrade, which makes a manager that
would evict leave it to the upgrade, as the operator's upgrade controller does (fact sheet §5.3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import (
    AffinityArgs,
    ConfigMapVolumeSourceArgs,
    ContainerArgs,
    ExecActionArgs,
    LifecycleArgs,
    LifecycleHandlerArgs,
    NodeAffinityArgs,
    NodeSelectorArgs,
    NodeSelectorRequirementArgs,
    NodeSelectorTermArgs,
    PodAffinityTermArgs,
    PodAntiAffinityArgs,
    ProbeArgs,
    VolumeArgs,
)
from pulumi_kubernetes.meta.v1 import LabelSelectorArgs, LabelSelectorRequirementArgs

from components.catalogs import consts
from components.catalogs.openshift import DTK_DRIVER_VERB, DTK_ENTRYPOINT, NFD_OSTREE_VERSION
from components.kit import naming, sources
from components.kit.builders import (
    NODE_NAME_ENV,
    PRIVILEGED_S0,
    DaemonSetParts,
    Operands,
    Volume,
    also_after,
    child_opts,
    env,
    env_from_field,
    meta,
    operand_daemonset_parts,
    register_daemonset,
)
from components.kit.rbac import SCC_USE, rbac_set, rule
from components.config import Driver as DriverSettings
from components.config import NodePool, Upgrade
from components.states.driver import volumes as v
from components.states.driver.manager import driver_manager, manager_evicts
from components.states.driver.extensions import (
    pod_extensions,
    tuned,
    wait_for_completion_containers,
    wait_for_completion_tolerations,
)
from components.states.driver import openshift
from components.states.driver.rolled import UPDATE_STRATEGY, agent_rolled
from components.states.driver.sidecars import RUNC_ONLY, gpudirect_pod
from components.states.driver.targets import DriverTarget, ValidatedFiles, config_digest

NAME = "nvidia-driver"
DAEMONSET = "nvidia-driver-daemonset"
COMPONENT_LABEL = "app.kubernetes.io/component"
PRECOMPILED_LABEL = "nvidia.com/precompiled"
STARTUP_PROBE_CONFIGMAP = "nvidia-driver-startup-probe"
STARTUP_PROBE_SCRIPT = "startup-probe.sh"
DRIVER_READY_FILE = ".driver-ctr-ready"
DAEMONS_STATUS_FILE = ".driver-daemons-status"

# The same probe contract as NVIDIA's asset: the pod is started once the module is loaded, any driver daemons
# report Ready and nvidia-smi answers; only then is .driver-ctr-ready written for the validators.
STARTUP_PROBE = f"""#!/bin/sh
set -eu
dir="{consts.VALIDATIONS_DIR}"
ready="$dir/{DRIVER_READY_FILE}"
daemons="$dir/{DAEMONS_STATUS_FILE}"
mkdir -p "$dir"

[ -f /sys/module/nvidia/refcnt ] || {{ echo "nvidia kernel module is not loaded yet"; exit 1; }}
if [ -f "$daemons" ] && [ "$(cat "$daemons")" != "Ready" ]; then
  echo "driver daemons report: $(cat "$daemons")"
  exit 1
fi
nvidia-smi || {{ echo "nvidia-smi does not answer yet"; exit 1; }}

# Written atomically: validators parse this file as soon as it exists.
{{
  echo "GDRCOPY_ENABLED: ${{GDRCOPY_ENABLED:-false}}"
  echo "GDS_ENABLED: ${{GDS_ENABLED:-false}}"
  echo "GPU_DIRECT_RDMA_ENABLED: ${{GPU_DIRECT_RDMA_ENABLED:-false}}"
}} > "$ready.tmp"
mv "$ready.tmp" "$ready"
"""


def _flag(value: bool) -> str:
    return "true" if value else "false"


CLUSTER_RULES = (
    rule(["config.openshift.io"], ["clusterversions"], ["get", "list"]),
    rule([""], ["nodes"], ["get", "list", "patch", "update", "watch"]),
    rule([""], ["pods"], ["get", "list", "watch"]),
    rule(["resource.k8s.io"], ["resourceclaims"], ["get", "list"]),
    rule(["apps"], ["daemonsets"], ["get"]),
)
EVICTION_RULE = rule([""], ["pods/eviction"], ["create"])


def cluster_rules(upgrade: Upgrade) -> tuple:
    """The asset's ClusterRole, with `pods/eviction` only where the manager evicts (`manual`, `manager_evicts`)."""
    return (*CLUSTER_RULES, EVICTION_RULE) if manager_evicts(upgrade) else CLUSTER_RULES


# The startup probe's script, from the ConfigMap `Driver` registers beside the DaemonSets.
STARTUP_PROBE_VOLUME = Volume(VolumeArgs(
    name="driver-startup-probe-script",
    config_map=ConfigMapVolumeSourceArgs(name=STARTUP_PROBE_CONFIGMAP, default_mode=0o755),
))


def driver_volumes(host_mofed: bool) -> list[Volume]:
    """The driver pod's volumes: the asset's, with the host's MOFED sources where rdma.useHostMofed says so."""
    swapped = {v.MOFED_SOURCES: v.HOST_MOFED_SOURCES} if host_mofed else {}
    return [swapped.get(volume, volume) for volume in v.DRIVER_VOLUMES] + [STARTUP_PROBE_VOLUME]


@dataclass(frozen=True)
class DriverDaemonSet:
    """One driver DaemonSet as `Driver` registers it, and its template digest (its `gpu-stack/template-digest`
    annotation, which the node-pools document also carries): planned once, before any state is created, because
    `node-labeling` comes before `state-driver` in the state order."""

    target: DriverTarget
    parts: DaemonSetParts
    digest: str


def plan_driver_daemonsets(
    ops: Operands,
    targets: Sequence[DriverTarget],
    upgrade: Upgrade,
    validated_files: ValidatedFiles,
    settings: DriverSettings = DriverSettings(),
) -> list[DriverDaemonSet]:
    plans = []
    for target in targets:
        parts = driver_daemonset_parts(ops, target, upgrade, validated_files, settings)
        rolled = agent_rolled(parts)
        plans.append(DriverDaemonSet(target, rolled.parts, rolled.digest))
    return plans


def driver_daemonset_parts(
    ops: Operands,
    target: DriverTarget,
    upgrade: Upgrade,
    validated_files: ValidatedFiles,
    settings: DriverSettings = DriverSettings(),
) -> DaemonSetParts:
    """One driver DaemonSet's metadata and spec, pure; its ServiceAccount and startup-probe ConfigMap come from
    `Driver`, its extensions (licence, repositories, CAs, module parameters, secretEnv, extra volumes, probe
    timings, host network) from `settings`."""
    ext = pod_extensions(settings, target.os_tag, precompiled=target.precompiled)
    digest = config_digest(target)
    gpudirect = gpudirect_pod(target, ext)
    # With the Driver Toolkit the driver container prepares the sources and the DTK container builds them.
    on_openshift = openshift.pod_additions(target.openshift, digest, target.sidecars)
    dtk = on_openshift.toolkit
    driver = _driver_container(target, ext, settings, validated_files, _driver_env(target, gpudirect, digest, on_openshift), on_openshift)
    manager = driver_manager(ops.images.driver_manager, upgrade, digest, gpudirect.manager_env)
    labels = {COMPONENT_LABEL: NAME, PRECOMPILED_LABEL: _flag(target.precompiled), **on_openshift.pod_labels}
    built_for = _built_for(target)
    parts = operand_daemonset_parts(
        target.daemonset,
        ops,
        operand="driver",
        deploy_component="driver",
        service_account=NAME,
        labels=labels,
        # Removing a driver DaemonSet must not pull every node's driver at once: its pods stay, and the node agent
        # hands each node to its new DaemonSet (or retires it) at the upgrade's pace.
        annotations={consts.DELETION_PROPAGATION: "orphan"},
        template_annotations={"kubectl.kubernetes.io/default-container": consts.DRIVER_CONTAINER},
        extra_node_selector=built_for or None,
        host_pid=True,
        host_network=settings.host_network or None,
        affinity=AffinityArgs(node_affinity=_pool_affinity(target, built_for), pod_anti_affinity=ONE_DRIVER_POD_PER_NODE),
        update_strategy=UPDATE_STRATEGY,
        # upgrade.waitForCompletion's wait comes first: k8s-driver-manager evicts GPU pods as soon as it runs.
        init_containers=[*wait_for_completion_containers(ops.images.node_agent, upgrade), manager],
        extra_tolerations=wait_for_completion_tolerations(upgrade),
        containers=[driver, *gpudirect.containers, *([dtk] if dtk else [])],
        volumes=[*(volume.args for volume in driver_volumes(target.sidecars.host_mofed)), *ext.volumes,
                 *on_openshift.volumes],
    )
    # The RHCOS build labels the DaemonSet only, as the operator's: its pods are told apart by the node selector.
    return parts.labelled(on_openshift.daemonset_labels)


def _driver_env(target: DriverTarget, gpudirect, digest: str, on_openshift) -> list:
    return [
        RUNC_ONLY,
        NODE_NAME_ENV,
        env_from_field("NODE_IP", "status.hostIP"),
        env("KERNEL_MODULE_TYPE", target.kernel_module_type),
        *([env("OPEN_KERNEL_MODULES_ENABLED", "true")] if target.kernel_module_type == "open" else []),
        *gpudirect.driver_env,
        env("DRIVER_CONFIG_DIGEST", digest),
        *on_openshift.env,
    ]


def _startup_probe(target: DriverTarget) -> ProbeArgs:
    return ProbeArgs(
        exec_=ExecActionArgs(command=["sh", f"/usr/local/bin/{STARTUP_PROBE_SCRIPT}"]),
        # precompiled images only load modules, so they are probed sooner (GO:internal/state/driver.go)
        initial_delay_seconds=5 if target.precompiled else 60,
        failure_threshold=120,
        success_threshold=1,
        period_seconds=10,
        timeout_seconds=60,
    )


# Before the pod stops, the node's validations of this driver go: nothing on the node trusts a driver being removed.
DRIVER_PRE_STOP = LifecycleArgs(
    pre_stop=LifecycleHandlerArgs(
        exec_=ExecActionArgs(
            command=[
                "/bin/sh",
                "-c",
                f"rm -f {consts.VALIDATIONS_DIR}/{DRIVER_READY_FILE} {consts.VALIDATIONS_DIR}/{DAEMONS_STATUS_FILE}",
            ]
        )
    )
)


def _driver_container(target: DriverTarget, ext, settings: DriverSettings, validated_files: ValidatedFiles,
                      driver_env: list, on_openshift) -> ContainerArgs:
    startup = _startup_probe(target)
    dtk = on_openshift.toolkit
    node_validated = " && ".join(f"test -f {consts.VALIDATIONS_DIR}/{name}" for name in target.validated_files(validated_files))
    return ContainerArgs(
        name=consts.DRIVER_CONTAINER,
        image=target.image,
        image_pull_policy="IfNotPresent",
        command=[DTK_ENTRYPOINT] if dtk else ["nvidia-driver"],
        args=[DTK_DRIVER_VERB] if dtk else ["init"],
        env_from=ext.env_from,
        env=driver_env,
        security_context=PRIVILEGED_S0,
        volume_mounts=[*DRIVER_MOUNTS, *ext.driver_mounts, *on_openshift.mounts],
        startup_probe=tuned(startup, settings.startup_probe),
        # NVIDIA's driver container has no liveness probe for driver.livenessProbe to tune (the operator's
        # setContainerProbe would dereference a missing one), so gpu-stack adds one only when asked: the startup
        # check again, since it is what "the driver works" means here, and rewriting .driver-ctr-ready is idempotent.
        liveness_probe=None if settings.liveness_probe is None else tuned(startup, settings.liveness_probe),
        readiness_probe=tuned(ProbeArgs(
            exec_=ExecActionArgs(command=["sh", "-c", node_validated]),
            period_seconds=10,
            timeout_seconds=5,
            success_threshold=1,
            failure_threshold=1,
        ), settings.readiness_probe),
        lifecycle=DRIVER_PRE_STOP,
    )


DRIVER_MOUNTS = (
    *v.HOST_DRIVER_MOUNTS,
    v.MOFED_SOURCES.mount("/run/mellanox/drivers/usr/src", propagation="HostToContainer"),
    v.MELLANOX_DRIVERS.mount("/run/mellanox/drivers", propagation="HostToContainer"),
    v.SYS_DEVICES_SYSTEM.mount("/sys/devices/system"),
    v.FIRMWARE_SEARCH_PATH.mount("/sys/module/firmware_class/parameters/path"),
    v.NV_FIRMWARE.mount("/lib/firmware"),
    STARTUP_PROBE_VOLUME.mount(f"/usr/local/bin/{STARTUP_PROBE_SCRIPT}", sub_path=STARTUP_PROBE_SCRIPT),
)

# Two driver pods on one node would unload each other's modules.
ONE_DRIVER_POD_PER_NODE = PodAntiAffinityArgs(
    required_during_scheduling_ignored_during_execution=[
        PodAffinityTermArgs(
            label_selector=LabelSelectorArgs(
                match_expressions=[LabelSelectorRequirementArgs(key=COMPONENT_LABEL, operator="In", values=[NAME])]
            ),
            topology_key="kubernetes.io/hostname",
        )
    ]
)


def _built_for(target: DriverTarget) -> dict[str, str]:
    """A driver built for one kernel (precompiled) or RHCOS build (Driver Toolkit) never runs on another, whichever
    DaemonSet the agent assigned the node to: a node that reboots into another leaves at once."""
    built_for = {
        key: value for key, value in target.node_labels if key in (consts.NFD_KERNEL_FULL, NFD_OSTREE_VERSION)
    }
    if target.kernel:
        built_for[consts.NFD_KERNEL_FULL] = target.kernel
    if target.openshift is not None and target.openshift.rhcos:
        built_for[NFD_OSTREE_VERSION] = target.openshift.rhcos
    return built_for


def _pool_affinity(target: DriverTarget, built_for: Mapping[str, str]) -> Optional[NodeAffinityArgs]:
    """Its nodes: those the agent assigned to this DaemonSet, or (nodes not yet labelled by a node agent that writes
    gpu-stack/driver) those of its pools that run its OS. Terms are ORed, so a node never drops out of the selection
    while its labels catch up, and moving it to another DaemonSet is one label the agent changes: at the upgrade's
    pace, or at once when the node itself moved to another node image."""
    if not target.selects_pools:
        return None
    assigned = NodeSelectorTermArgs(
        match_expressions=[NodeSelectorRequirementArgs(key=consts.DRIVER_DAEMONSET_LABEL, operator="In", values=[target.daemonset])]
    )
    unassigned = NodeSelectorTermArgs(
        match_expressions=[
            NodeSelectorRequirementArgs(key=consts.DRIVER_DAEMONSET_LABEL, operator="DoesNotExist"),
            NodeSelectorRequirementArgs(key=consts.POOL_LABEL, operator="In", values=list(target.pools)),
            # Only nodes running the OS (and kernel) it is built for: the DaemonSets of one pool's node images never
            # select the same unassigned node.
            *(
                NodeSelectorRequirementArgs(key=key, operator="In", values=[value])
                for key, value in target.node_labels
                if key not in built_for  # the node selector holds it for every node
            ),
        ]
    )
    return NodeAffinityArgs(
        required_during_scheduling_ignored_during_execution=NodeSelectorArgs(node_selector_terms=[assigned, unassigned])
    )


class Driver(pulumi.ComponentResource):
    """`state-driver`: RBAC and startup probe for every driver DaemonSet, and every driver DaemonSet (planned by
    `plan_driver_daemonsets`).

    A DaemonSet of a later upgrade wave also waits for the gates of the wave before it (`waits_for`, resources the
    `driver-waves` state creates further on). `ordering` is what the next state waits for: everything but those."""

    daemonsets: dict[str, k8s.apps.v1.DaemonSet]
    ordering: list[pulumi.Resource]

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        planned: Sequence[DriverDaemonSet],
        waits_for: Optional[dict[str, Sequence[pulumi.Input[pulumi.Resource]]]] = None,
        pools: Mapping[str, NodePool] = {},
        upgrade: Upgrade = Upgrade(),
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:Driver", name, None, opts)
        wave_of = {pool: (wave, "pools") for wave in upgrade.waves for pool in wave.pools}
        child = child_opts(self, depends_on)
        rbac = rbac_set(NAME, ops.namespace, openshift=ops.openshift, role_rules=[SCC_USE], cluster_role_rules=cluster_rules(upgrade), opts=child)
        probe = k8s.core.v1.ConfigMap(
            STARTUP_PROBE_CONFIGMAP,
            metadata=meta(STARTUP_PROBE_CONFIGMAP, ops.namespace, {"app": DAEMONSET, COMPONENT_LABEL: NAME}),
            data={STARTUP_PROBE_SCRIPT: STARTUP_PROBE},
            opts=child,
        )
        trusted_ca = [openshift.trusted_ca_configmap(ops.namespace, child)] if any(
            p.target.openshift is not None and p.target.openshift.trusted_ca for p in planned
        ) else []
        ds_opts = also_after(child, *rbac.resources, probe, *trusted_ca)
        waits_for = waits_for or {}
        self.daemonsets = {}
        self.ordering = [*rbac.resources, probe, *trusted_ca]
        for plan in planned:
            name_ = plan.target.daemonset
            gates = list(waits_for.get(name_, ()))
            opts_ = pulumi.ResourceOptions.merge(
                ds_opts, pulumi.ResourceOptions(depends_on=gates, aliases=[naming.former_wave_parent()])
            )
            # the first pool it serves decides it, its upgrade wave when it rolls (components/kit/sources.py)
            pool = plan.target.pools[0]
            with sources.deciding(pools.get(pool)), sources.noting(sources.DEPENDENCIES, *wave_of.get(pool, (upgrade, "waves"))):
                daemonset = register_daemonset(name_, plan.parts, opts_)
            self.daemonsets[name_] = daemonset
            if not gates:
                self.ordering.append(daemonset)
        self.register_outputs(
            {"daemonsets": [p.target.daemonset for p in planned], "images": [p.target.image for p in planned]}
        )
