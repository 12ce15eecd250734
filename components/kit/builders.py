"""Small builders every operator state uses: metadata, host-path volumes, validation gates and the operand
DaemonSet skeleton (RBAC sets are in components/kit/rbac.py). Each mirrors one piece of NVIDIA's `assets/state-*`
files and the operator's common transforms (`preProcessDaemonSet`, fact sheet §1.4), so a component module reads
like its asset folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.apps.v1 import DaemonSetSpecArgs, DaemonSetUpdateStrategyArgs, RollingUpdateDaemonSetArgs
from pulumi_kubernetes.core.v1 import (
    CapabilitiesArgs,
    ConfigMapVolumeSourceArgs,
    ContainerArgs,
    EnvVarArgs,
    EnvVarSourceArgs,
    ExecActionArgs,
    HostPathVolumeSourceArgs,
    KeyToPathArgs,
    LifecycleArgs,
    LifecycleHandlerArgs,
    LocalObjectReferenceArgs,
    ObjectFieldSelectorArgs,
    PodResourceClaimArgs,
    PodSpecArgs,
    PodTemplateSpecArgs,
    SecurityContextArgs,
    SELinuxOptionsArgs,
    ServicePortArgs,
    ServiceSpecArgs,
    TolerationArgs,
    VolumeArgs,
    VolumeMountArgs,
)
from pulumi_kubernetes.meta.v1 import LabelSelectorArgs, ObjectMetaArgs

from components.catalogs import consts
from components.catalogs import operand_overrides as operand_targets
from components.config import DaemonSets, HostPaths, OperandOverride, ServiceMonitorSettings
from components.kit.host_paths import apply_host_paths
from components.config.images import Images
from components.kit.operand_overrides import apply_to_containers, operands_in_pod, pod_tolerations, pull_secrets

# --- the per-stack settings every operand shares --------------------------------------------------------------


@dataclass(frozen=True)
class Operands:
    namespace: str
    images: Images
    pull_secrets: tuple[str, ...]
    daemonsets: DaemonSets
    # None where the operator leaves runtimeClassName unset: CDI off on cri-o (OCI hook mode).
    runtime_class: Optional[str]
    cdi: bool
    toolkit_install_dir: str
    extra_labels: dict[str, str] = field(default_factory=dict)
    # Where the distribution keeps the host root, an outside driver and the kubelet (`hostPaths`).
    host_paths: HostPaths = field(default_factory=HostPaths)
    # `gpu-stack:operands`, by operand key, and the images those overrides resolve to (components/kit/operand_overrides.py).
    overrides: Mapping[str, OperandOverride] = field(default_factory=dict)
    operand_images: Mapping[str, str] = field(default_factory=dict)
    # On OpenShift every operand with an SCC in NVIDIA's assets gets it (kit/rbac.py).
    openshift: bool = False


# --- metadata, env, volumes ---------------------------------------------------------------------------------


def meta(
    name: str,
    namespace: Optional[str] = None,
    labels: Optional[dict[str, str]] = None,
    annotations: Optional[dict[str, str]] = None,
) -> ObjectMetaArgs:
    merged = {consts.MANAGED_BY: consts.STACK_NAME, **(labels or {})}
    return ObjectMetaArgs(name=name, namespace=namespace, labels=merged, annotations=annotations or None)


def env(name: str, value: str) -> EnvVarArgs:
    return EnvVarArgs(name=name, value=value)


def env_from_field(name: str, field_path: str) -> EnvVarArgs:
    return EnvVarArgs(name=name, value_from=EnvVarSourceArgs(field_ref=ObjectFieldSelectorArgs(field_path=field_path)))


NODE_NAME_ENV = env_from_field("NODE_NAME", "spec.nodeName")
OPERATOR_NAMESPACE_ENV = env_from_field("OPERATOR_NAMESPACE", "metadata.namespace")


def host_path(name: str, path: str, type_: Optional[str] = None) -> VolumeArgs:
    return VolumeArgs(name=name, host_path=HostPathVolumeSourceArgs(path=path, type=type_))


def mount(
    name: str,
    path: str,
    *,
    read_only: Optional[bool] = None,
    propagation: Optional[str] = None,
    sub_path: Optional[str] = None,
) -> VolumeMountArgs:
    return VolumeMountArgs(name=name, mount_path=path, read_only=read_only, mount_propagation=propagation, sub_path=sub_path)


@dataclass(frozen=True)
class Volume:
    """A pod volume that makes its own mounts: a container's mount comes from the volume object the pod lists, so
    it cannot name a volume the pod does not have."""

    args: VolumeArgs

    @property
    def name(self) -> str:
        return self.args.name

    def mount(self, path: str, *, read_only: Optional[bool] = None, propagation: Optional[str] = None,
              sub_path: Optional[str] = None) -> VolumeMountArgs:
        return mount(self.name, path, read_only=read_only, propagation=propagation, sub_path=sub_path)


def host_volume(name: str, path: str, type_: Optional[str] = None) -> Volume:
    return Volume(host_path(name, path, type_))


PRIVILEGED = SecurityContextArgs(privileged=True)
PRIVILEGED_S0 = SecurityContextArgs(privileged=True, se_linux_options=SELinuxOptionsArgs(level="s0"))
# transformValidatorSecurityContext forces uid 0 on every validator container.
PRIVILEGED_ROOT = SecurityContextArgs(privileged=True, run_as_user=0)
PRIVILEGED_ROOT_S0 = SecurityContextArgs(privileged=True, run_as_user=0, se_linux_options=SELinuxOptionsArgs(level="s0"))
# For checks that only read /proc (lsmod) and write their file under /run/nvidia/validations.
UNPRIVILEGED_ROOT = SecurityContextArgs(privileged=False, run_as_user=0)
# gpu-stack's node agent (labeller, inventory, wait-for-completion, gates) only talks to the API server and reads
# what every container sees, so it runs as nobody with nothing to escalate to.
AGENT_SECURITY = SecurityContextArgs(
    run_as_non_root=True,
    run_as_user=65532,
    allow_privilege_escalation=False,
    read_only_root_filesystem=True,
    capabilities=CapabilitiesArgs(drop=["ALL"]),
)

VALIDATIONS_VOLUME = host_path("run-nvidia-validations", consts.VALIDATIONS_DIR, "DirectoryOrCreate")


# --- node-level ordering: init containers that wait on /run/nvidia/validations ------------------------------

# Entry points of operands that need the driver wait for the validator's verdict and take its variables
# (IS_HOST_DRIVER, NVIDIA_DRIVER_ROOT, ...) into their environment.
SOURCE_DRIVER_READY = f"""until [ -f {consts.VALIDATIONS_DIR}/driver-ready ]; do
  echo "waiting for the driver validation to write driver-ready"
  sleep 5
done
set -o allexport
cat {consts.VALIDATIONS_DIR}/driver-ready
. {consts.VALIDATIONS_DIR}/driver-ready
"""


RUN_NVIDIA_VOLUME = host_path("run-nvidia", consts.RUN_NVIDIA, "Directory")


def wait_for_validation(
    image: str, ready_file: str, *, name: str = "toolkit-validation", volume: str = "run-nvidia-validations"
) -> ContainerArgs:
    """The shell gate NVIDIA puts in front of every operand that needs a working container stack.

    `volume` is the host-path volume the asset mounts for it: `run-nvidia-validations` (the validations
    directory) or `run-nvidia` (all of /run/nvidia, as the DCGM, GFD and MPS assets do)."""
    path = consts.RUN_NVIDIA if volume == "run-nvidia" else consts.VALIDATIONS_DIR
    return ContainerArgs(
        name=name,
        image=image,
        image_pull_policy="IfNotPresent",
        command=["sh", "-c"],
        args=[
            f"until [ -f {consts.VALIDATIONS_DIR}/{ready_file} ]; do echo waiting for nvidia container stack to be setup; "
            "sleep 5; done"
        ],
        security_context=PRIVILEGED_ROOT,
        volume_mounts=[mount(volume, path, propagation="HostToContainer")],
    )


def validator_container(
    name: str,
    image: str,
    component: str,
    *,
    with_wait: bool,
    extra_env: Sequence[EnvVarArgs] = (),
    mounts: Sequence[VolumeMountArgs],
    security_context: SecurityContextArgs = PRIVILEGED_ROOT,
    through_shell: bool = True,
) -> ContainerArgs:
    """One `nvidia-validator` check (COMPONENT=...), writing its `*-ready` file for the next gate. The validator
    DaemonSets run it through `sh -c`, as NVIDIA's validator manifests do; the DRA kubelet plugin's asset runs the
    binary itself (``through_shell=False``)."""
    return ContainerArgs(
        name=name,
        image=image,
        image_pull_policy="IfNotPresent",
        command=["sh", "-c"] if through_shell else ["nvidia-validator"],
        args=["nvidia-validator"] if through_shell else None,
        env=[env("WITH_WAIT", "true" if with_wait else "false"), env("COMPONENT", component), *extra_env],
        security_context=security_context,
        volume_mounts=list(mounts),
    )


def validator_main(name: str, image: str, *, withdraw: str, mounts: Sequence[VolumeMountArgs]) -> ContainerArgs:
    """A validator DaemonSet's main container: its checks ran as init containers, so it only stays up, and when
    stopped it removes the files `withdraw` matches under /run/nvidia/validations, taking its verdict back."""
    return ContainerArgs(
        name=name,
        image=image,
        image_pull_policy="IfNotPresent",
        command=["sh", "-c"],
        args=["echo all validations are successful; while true; do sleep 86400; done"],
        security_context=PRIVILEGED_ROOT,
        lifecycle=LifecycleArgs(
            pre_stop=LifecycleHandlerArgs(exec_=ExecActionArgs(command=["sh", "-c", f"rm -f {consts.VALIDATIONS_DIR}/{withdraw}"]))
        ),
        volume_mounts=list(mounts),
    )


# --- the operand DaemonSet ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DaemonSetParts:
    """A DaemonSet's metadata and spec as they will be registered, built before anything is: what is derived from
    the pod template (the driver's `gpu-stack/template-digest`) is computed from these, once."""

    metadata: ObjectMetaArgs
    spec: DaemonSetSpecArgs

    def annotated(self, annotations: Mapping[str, str]) -> "DaemonSetParts":
        """The same DaemonSet with more metadata annotations; the pod template stays as it is."""
        m = self.metadata
        merged = {**(m.annotations or {}), **annotations}
        return DaemonSetParts(ObjectMetaArgs(name=m.name, namespace=m.namespace, labels=m.labels, annotations=merged), self.spec)

    def labelled(self, labels: Mapping[str, str]) -> "DaemonSetParts":
        """The same DaemonSet with more metadata labels (ones its pods do not carry); the pod template stays."""
        if not labels:
            return self
        m = self.metadata
        merged = {**(m.labels or {}), **labels}
        return DaemonSetParts(ObjectMetaArgs(name=m.name, namespace=m.namespace, labels=merged, annotations=m.annotations), self.spec)


def operand_daemonset(name: str, ops: Operands, *, opts: pulumi.ResourceOptions, **settings: Any) -> k8s.apps.v1.DaemonSet:
    """An operand DaemonSet with the operator's common transforms applied (`operand_daemonset_parts` takes
    `settings`), registered."""
    return register_daemonset(name, operand_daemonset_parts(name, ops, **settings), opts)


def register_daemonset(name: str, parts: DaemonSetParts, opts: pulumi.ResourceOptions) -> k8s.apps.v1.DaemonSet:
    return k8s.apps.v1.DaemonSet(name, metadata=parts.metadata, spec=parts.spec, opts=opts)


# Every operand is `skipAwait`: ordering between components happens per node through the validation files (fact
# sheet §1.3), and awaiting DaemonSets would hang `pulumi up` on OnDelete updates and sick nodes. Stack health is
# reported by the validation gate instead.
NOT_AWAITED = {consts.SKIP_AWAIT: "true"}


def operand_daemonset_parts(
    name: str,
    ops: Operands,
    *,
    operand: Optional[str],
    deploy_component: Optional[str],
    service_account: str,
    containers: Sequence[ContainerArgs],
    volumes: Sequence[VolumeArgs],
    init_containers: Sequence[ContainerArgs] = (),
    labels: Optional[dict[str, str]] = None,
    annotations: Optional[dict[str, str]] = None,
    selector_labels: Optional[dict[str, str]] = None,
    template_annotations: Optional[dict[str, str]] = None,
    extra_node_selector: Optional[dict[str, str]] = None,
    host_pid: Optional[bool] = None,
    host_ipc: Optional[bool] = None,
    host_network: Optional[bool] = None,
    automount_token: Optional[bool] = None,
    runtime_class: bool = False,
    share_process_namespace: Optional[bool] = None,
    affinity: Optional[k8s.core.v1.AffinityArgs] = None,
    update_strategy: Optional[DaemonSetUpdateStrategyArgs] = None,
    termination_grace_period_seconds: Optional[int] = None,
    resource_claims: Sequence[PodResourceClaimArgs] = (),
    extra_tolerations: Sequence[TolerationArgs] = (),
) -> DaemonSetParts:
    """An operand DaemonSet's metadata and spec, with the operator's common transforms applied; pure.

    `operand` is the `gpu-stack:operands` key whose pod this is, named by the state that renders it (None for the
    DaemonSets gpu-stack adds of its own): every DaemonSet a state renders is that state's operand, whatever it is
    named (per pool, per node image, per RHCOS build), so an override reaches all of them by the one rule. Neither
    the name nor the deploy label would do: names are made per pool and build, and the node inventory and the MPS
    control daemon select by other operands' deploy labels.
    """
    ds = ops.daemonsets
    volumes, init_containers, containers, in_pod = _placed_and_overridden(name, ops, operand, volumes, init_containers, containers)
    override = ops.overrides.get(operand) if operand else None
    node_selector = {**({consts.deploy_label(deploy_component): "true"} if deploy_component else {}), **(extra_node_selector or {})}
    selector = selector_labels or {"app": name}
    pod_labels = {**ds.labels, **(override.labels if override else {}), **selector, **(labels or {})}
    pod_annotations = {**ds.annotations, **(override.annotations if override else {}), **(template_annotations or {})}
    return DaemonSetParts(
        metadata=meta(
            name,
            ops.namespace,
            # The operand's own labels mark the DaemonSet too, as NVIDIA's labels mark the objects they render.
            {**pod_labels, **ops.extra_labels},
            {**NOT_AWAITED, **ds.annotations, **(annotations or {})},
        ),
        spec=DaemonSetSpecArgs(
            selector=LabelSelectorArgs(match_labels=selector),
            update_strategy=update_strategy or _update_strategy(ds),
            template=PodTemplateSpecArgs(
                metadata=ObjectMetaArgs(labels=pod_labels, annotations=pod_annotations or None),
                spec=PodSpecArgs(
                    node_selector=node_selector or None,
                    tolerations=[*pod_tolerations(ds, override), *extra_tolerations],
                    affinity=affinity,
                    priority_class_name=(override.priority_class_name if override else None) or ds.priority_class_name,
                    service_account_name=service_account,
                    host_pid=host_pid,
                    host_ipc=host_ipc,
                    host_network=host_network,
                    # hostNetwork pods keep cluster DNS only with this policy (applyHostNetworkConfig)
                    dns_policy="ClusterFirstWithHostNet" if host_network else None,
                    automount_service_account_token=automount_token,
                    share_process_namespace=share_process_namespace,
                    termination_grace_period_seconds=termination_grace_period_seconds,
                    runtime_class_name=ops.runtime_class if runtime_class else None,
                    resource_claims=list(resource_claims) or None,
                    image_pull_secrets=_pull_secret_refs(ops, in_pod),
                    init_containers=list(init_containers) or None,
                    containers=list(containers),
                    volumes=list(volumes),
                ),
            ),
        ),
    )


def _placed_and_overridden(name: str, ops: Operands, operand: Optional[str], volumes, init_containers, containers):
    """The pod's volumes and containers with the stack's host paths and operand overrides applied, and the operands
    with a container in it."""
    if operand is not None and operand not in operand_targets.OPERANDS:
        raise ValueError(f"DaemonSet {name}: {operand!r} is no gpu-stack:operands key")
    # preProcessDaemonSet's host-path transforms: the states render NVIDIA's defaults, moved here by volume name.
    volumes, init_containers, containers = apply_host_paths(ops.host_paths, volumes, init_containers, containers)
    # `gpu-stack:operands`: pod-level settings of the DaemonSet's own operand; container-level ones of every operand
    # with a container here (the driver's pods also run k8s-driver-manager and the GPUDirect sidecars).
    init_containers = apply_to_containers(init_containers, operand, ops.overrides, ops.operand_images)
    containers = apply_to_containers(containers, operand, ops.overrides, ops.operand_images)
    in_pod = operands_in_pod([*init_containers, *containers], operand, ops.overrides, ops.operand_images)
    _mounts_name_volumes(name, volumes, [*init_containers, *containers])
    return volumes, init_containers, containers, in_pod


def _mounts_name_volumes(name: str, volumes: Sequence[VolumeArgs], containers: Sequence[ContainerArgs]) -> None:
    """Every mount names a volume of its pod, or nothing registers: the API server would refuse the DaemonSet
    (`Not found`) after `pulumi up` had already changed the states before it. The driver room's volumes make their
    own mounts (`Volume`); the other states still pair them by name, and this holds them to it."""
    named = {volume.name for volume in volumes}
    for container in containers:
        for mounted in container.volume_mounts or []:
            if mounted.name not in named:
                raise ValueError(f"DaemonSet {name}: container {container.name} mounts {mounted.name!r}, which is no "
                                 f"volume of its pod ({', '.join(sorted(named))})")


def _pull_secret_refs(ops: Operands, in_pod) -> Optional[list[LocalObjectReferenceArgs]]:
    """The stack's pull secrets and those of every operand with a container in the pod."""
    return [LocalObjectReferenceArgs(name=s) for s in pull_secrets(ops.pull_secrets, (ops.overrides.get(k) for k in in_pod))] or None


def _update_strategy(ds) -> DaemonSetUpdateStrategyArgs:
    """`daemonsets.updateStrategy`, for a DaemonSet whose state does not fix its own."""
    if ds.update_strategy == "OnDelete":
        return DaemonSetUpdateStrategyArgs(type="OnDelete")
    return DaemonSetUpdateStrategyArgs(
        type="RollingUpdate", rolling_update=RollingUpdateDaemonSetArgs(max_unavailable=ds.max_unavailable)
    )


def kept(opts: pulumi.ResourceOptions) -> pulumi.ResourceOptions:
    """For what running pods stand on (the namespace, CRDs, RuntimeClasses, DeviceClasses): an edit that would
    delete or replace it fails `pulumi up` instead (protect, which the policy pack can see and enforce), and should
    someone unprotect it, a removal leaves it in the cluster (retain_on_delete)."""
    return pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(protect=True, retain_on_delete=True))


def child_opts(parent: pulumi.Resource, depends_on: Sequence[pulumi.Resource] = ()) -> pulumi.ResourceOptions:
    """Children are parented to their component and carry the state-order edges themselves: a component's own
    `depends_on` is not inherited by its children."""
    return pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on))


def also_after(opts: pulumi.ResourceOptions, *resources: pulumi.Resource) -> pulumi.ResourceOptions:
    return pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=list(resources)))


def mig_env(strategy: Optional[str]) -> list[EnvVarArgs]:
    """applyMIGConfiguration for the plugin family. `None` when a per-pool config file sets the strategy: the
    plugin, GFD and the MPS daemon let an env var override the file (k8s-device-plugin `updateFromCLIFlag`
    applies any flag that is set, and MIG_STRATEGY sets one), so the env must stay unset for the file to count.
    MIG device health is monitored either way, as the operator does when it leaves the strategy to the plugin."""
    if strategy is None:
        return [env("NVIDIA_MIG_MONITOR_DEVICES", "all")]
    values = [env("MIG_STRATEGY", strategy)]
    if strategy != "none":
        values.append(env("NVIDIA_MIG_MONITOR_DEVICES", "all"))
    return values


def config_map_volume(
    name: str,
    *,
    config_map: Optional[str] = None,
    items: Optional[Sequence[tuple[str, str]]] = None,
    mode: Optional[int] = None,
) -> VolumeArgs:
    """A volume of ConfigMap `config_map` (default: the volume's own name), optionally remapping keys to paths."""
    return VolumeArgs(
        name=name,
        config_map=ConfigMapVolumeSourceArgs(
            name=config_map or name,
            default_mode=mode,
            items=[KeyToPathArgs(key=k, path=p) for k, p in items] if items else None,
        ),
    )


# --- metrics endpoints --------------------------------------------------------------------------------------


def metrics_endpoint(
    name: str,
    namespace: str,
    *,
    port_name: str,
    port: int,
    monitor: Optional[ServiceMonitorSettings],
    internal_traffic_policy: Optional[str] = None,
    opts: pulumi.ResourceOptions,
) -> k8s.core.v1.Service:
    """The ClusterIP Service in front of an exporter DaemonSet (annotated for annotation-based scrapers too)
    and, where the cluster has the Prometheus Operator, its ServiceMonitor; `job` is the Service's app label."""
    service = k8s.core.v1.Service(
        name,
        metadata=meta(name, namespace, {"app": name}, {"prometheus.io/scrape": "true", "prometheus.io/port": str(port)}),
        spec=ServiceSpecArgs(
            selector={"app": name},
            internal_traffic_policy=internal_traffic_policy,
            ports=[ServicePortArgs(name=port_name, port=port, target_port=port, protocol="TCP")],
        ),
        opts=opts,
    )
    if monitor is not None:
        endpoint: dict[str, object] = {"port": port_name, "path": "/metrics", "interval": monitor.interval, "scrapeTimeout": monitor.scrape_timeout}
        # Only when set: the operator's Go Endpoint omits a false honorLabels and empty relabelings (omitempty).
        if monitor.honor_labels:
            endpoint["honorLabels"] = True
        if monitor.relabelings:
            endpoint["relabelings"] = [r.rendered() for r in monitor.relabelings]
        k8s.apiextensions.CustomResource(
            name,
            api_version="monitoring.coreos.com/v1",
            kind="ServiceMonitor",
            metadata=meta(name, namespace, {"app": name, **monitor.additional_labels}),
            spec={
                "jobLabel": "app",
                "endpoints": [endpoint],
                "namespaceSelector": {"matchNames": [namespace]},
                "selector": {"matchLabels": {"app": name}},
            },
            opts=also_after(opts, service),
        )
    return service
