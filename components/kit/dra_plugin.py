"""The DRA driver's containers and compute-domain controller, as components/states/dra_driver.py deploys them.

Kept apart from the DraDriver component (which registers the DaemonSet, RBAC, DeviceClasses and CRDs) so that the
state module stays readable; components/kit/dra_api.py holds the DRA API objects. The sources each builder follows
(GO = NVIDIA/gpu-operator, DRA = NVIDIA/k8s-dra-driver-gpu) are in dra_driver.py's docstring. Other states import
`pool_affinity` to reach the DRA pools' nodes alike.
"""

from __future__ import annotations

from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.apps.v1 import DeploymentSpecArgs
from pulumi_kubernetes.core.v1 import (
    AffinityArgs,
    ContainerArgs,
    GRPCActionArgs,
    LocalObjectReferenceArgs,
    NodeAffinityArgs,
    NodeSelectorArgs,
    NodeSelectorRequirementArgs,
    NodeSelectorTermArgs,
    PodAffinityTermArgs,
    PodAntiAffinityArgs,
    PodSpecArgs,
    PodTemplateSpecArgs,
    PreferredSchedulingTermArgs,
    ProbeArgs,
    ResourceRequirementsArgs,
    TolerationArgs,
    WeightedPodAffinityTermArgs,
)
from pulumi_kubernetes.meta.v1 import LabelSelectorArgs, ObjectMetaArgs

from components.catalogs import consts
from components.config.overrides import Resources
from components.kit.builders import (
    NODE_NAME_ENV,
    PRIVILEGED,
    SOURCE_DRIVER_READY,
    VALIDATIONS_VOLUME,
    Operands,
    env,
    env_from_field,
    host_path,
    meta,
    mount,
    validator_container,
)
from components.kit.dra_api import APP_NAME, NAME_LABEL
from components.kit.operand_overrides import apply_to_containers, pod_tolerations, pull_secrets

CONTROLLER = "nvidia-dra-driver-controller"
OPERAND = "draDriver"  # its `gpu-stack:operands` key

COMPONENT_LABEL = "app.kubernetes.io/component"

KUBELET_ROOT = "/var/lib/kubelet"
PLUGINS_REGISTRY = f"{KUBELET_ROOT}/plugins_registry"
PLUGINS_DIR = f"{KUBELET_ROOT}/plugins"
DRIVER_ROOT_CTR_PATH = "/driver-root"
FEATURE_GATES_ENV = "FEATURE_GATES"
GPUS_HEALTH_PORT = 51516
COMPUTE_DOMAINS_HEALTH_PORT = 51515
LOG_VERBOSITY = "4"

# --- the kubelet plugin -------------------------------------------------------------------------------------------


def _plugin_script(binary: str) -> str:
    # driver-ready says where the driver lives (host or driver container) and how that path looks in here.
    return f'{SOURCE_DRIVER_READY}exec {binary} -v "$LOG_VERBOSITY"\n'


def _health_probes(port: int, liveness_period: int) -> dict[str, ProbeArgs]:
    grpc = GRPCActionArgs(port=port, service="liveness")
    return {
        # generous: the plugin may wait a long time for the driver before it serves
        "startup_probe": ProbeArgs(grpc=grpc, failure_threshold=600, period_seconds=1, timeout_seconds=10),
        "liveness_probe": ProbeArgs(grpc=grpc, failure_threshold=3, period_seconds=liveness_period, timeout_seconds=10),
    }


PLUGIN_MOUNTS = (
    mount("plugins-registry", PLUGINS_REGISTRY),
    mount("plugins", PLUGINS_DIR, propagation="Bidirectional"),
    mount("cdi-root", consts.CDI_SPEC_DIR),
    mount(VALIDATIONS_VOLUME.name, consts.VALIDATIONS_DIR, read_only=True),
    mount("host-root", "/host", read_only=True, propagation="HostToContainer"),
    mount("driver-install-dir", DRIVER_ROOT_CTR_PATH, propagation="HostToContainer"),
)


def _common_plugin_env(http_endpoint: str) -> list:
    return [
        env("HTTP_ENDPOINT", http_endpoint),
        env("METRICS_PATH", "/metrics"),
        env("LOG_VERBOSITY", LOG_VERBOSITY),
        # the plugins reach GPUs through the driver root, never through a runtime's injection
        env("NVIDIA_VISIBLE_DEVICES", "void"),
        env("CDI_ROOT", consts.CDI_SPEC_DIR),
    ]


def _kubelet_env(port: int) -> list:
    return [
        env("KUBELET_REGISTRAR_DIRECTORY_PATH", PLUGINS_REGISTRY),
        env("KUBELET_PLUGINS_DIRECTORY_PATH", PLUGINS_DIR),
        env("HEALTHCHECK_PORT", str(port)),
    ]


def _gates_env(feature_gates: str) -> list:
    return [env(FEATURE_GATES_ENV, feature_gates)] if feature_gates else []


# PassthroughSupport: go-nvlib's nvpassthrough reads the modules and sysfs to pick the vfio-pci variant and bind it.
PASSTHROUGH_MOUNTS = (
    mount("lib-modules", "/lib/modules", read_only=True, propagation="HostToContainer"),
    mount("sysfs", "/sys", propagation="Bidirectional"),
    mount("procfs", "/proc", propagation="Bidirectional"),
)
PASSTHROUGH_VOLUMES = (
    host_path("lib-modules", "/lib/modules", "Directory"),
    host_path("sysfs", "/sys", "Directory"),
    host_path("procfs", "/proc", "Directory"),
)


def _requirements(resources: Optional[Resources]) -> Optional[ResourceRequirementsArgs]:
    if resources is None:
        return None  # as NVIDIA's asset: none unless the stack sets them
    return ResourceRequirementsArgs(requests=dict(resources.requests) or None, limits=dict(resources.limits) or None)


def gpus_container(image: str, feature_gates: str = "", passthrough: bool = False, *,
                   health_port: int = GPUS_HEALTH_PORT, resources: Optional[Resources] = None) -> ContainerArgs:
    """`feature_gates`: the FEATURE_GATES value (empty: the driver's defaults)."""
    return ContainerArgs(
        name="gpus",
        image=image,
        image_pull_policy="IfNotPresent",
        command=["bash", "-c"],
        args=[_plugin_script("gpu-kubelet-plugin")],
        security_context=PRIVILEGED,
        env=[
            *_common_plugin_env(":8080"),
            env("HOST_ROOT", "/host"),
            env("NVIDIA_MIG_CONFIG_DEVICES", "all"),
            NODE_NAME_ENV,
            env_from_field("NAMESPACE", "metadata.namespace"),
            env("IMAGE_NAME", image),
            *_kubelet_env(health_port),
            *_gates_env(feature_gates),
        ],
        **_health_probes(health_port, 30),
        resources=_requirements(resources),
        volume_mounts=[*PLUGIN_MOUNTS, *(PASSTHROUGH_MOUNTS if passthrough else ())],
    )


def compute_domains_container(image: str, feature_gates: str = "", *, health_port: int = COMPUTE_DOMAINS_HEALTH_PORT,
                              resources: Optional[Resources] = None) -> ContainerArgs:
    return ContainerArgs(
        name="compute-domains",
        image=image,
        image_pull_policy="IfNotPresent",
        command=["bash", "-c"],
        args=[_plugin_script("compute-domain-kubelet-plugin")],
        security_context=PRIVILEGED,
        env=[
            *_common_plugin_env(":8081"),
            env("NVIDIA_MIG_CONFIG_DEVICES", "all"),
            NODE_NAME_ENV,
            env_from_field("NAMESPACE", "metadata.namespace"),
            *_kubelet_env(health_port),
            # v0.5.0: the plugin labels its node's NVLink clique itself (GO commit c5656b834)
            env("GPU_CLIQUE_LABEL_ENABLED", "true"),
            *_gates_env(feature_gates),
        ],
        **_health_probes(health_port, 10),
        resources=_requirements(resources),
        volume_mounts=list(PLUGIN_MOUNTS),
    )


def driver_validation(validator_image: str) -> ContainerArgs:
    """Validates the node's driver itself, so the plugin needs no other operand on its node, and writes the
    driver-ready file the plugin containers source."""
    return validator_container(
        "driver-validation",
        validator_image,
        "driver",
        with_wait=True,
        through_shell=False,  # as manifests/state-dra-driver/0500_daemonset.yaml runs it
        extra_env=[
            # `nvidia-smi --version` only: a GPU bound to vfio-pci must not fail the check
            env("DRIVER_VALIDATION_SKIP_GPU_INIT", "true"),
            # the kubelet plugin creates the device nodes it hands out
            env("DISABLE_DEV_CHAR_SYMLINK_CREATION", "true"),
            env_from_field("OPERATOR_NAMESPACE", "metadata.namespace"),
            env("HOST_ROOT", "/"),
            env("DRIVER_INSTALL_DIR", consts.DRIVER_INSTALL_DIR),
            env("DRIVER_INSTALL_DIR_CTR_PATH", DRIVER_ROOT_CTR_PATH),
        ],
        mounts=[
            mount("host-root", "/host", read_only=True, propagation="HostToContainer"),
            mount("driver-install-dir", DRIVER_ROOT_CTR_PATH, propagation="HostToContainer"),
            mount(VALIDATIONS_VOLUME.name, consts.VALIDATIONS_DIR),
        ],
    )


def pool_affinity(pools: Sequence[str]) -> AffinityArgs:
    """Required node affinity `gpu-stack/pool In pools`: only the DRA pools' nodes, whatever labels they carry."""
    if not pools:
        raise ValueError("DRA mode needs at least one pool (nodePools[].allocation: dra)")
    if len(set(pools)) != len(pools):
        raise ValueError(f"pools named twice: {sorted(p for p in set(pools) if list(pools).count(p) > 1)}")
    return AffinityArgs(
        node_affinity=NodeAffinityArgs(
            required_during_scheduling_ignored_during_execution=NodeSelectorArgs(
                node_selector_terms=[
                    NodeSelectorTermArgs(
                        match_expressions=[NodeSelectorRequirementArgs(key=consts.POOL_LABEL, operator="In", values=list(pools))]
                    )
                ]
            )
        )
    )


# --- the compute-domain controller ---------------------------------------------------------------------------------

CONTROL_PLANE = "node-role.kubernetes.io/control-plane"
CONTROLLER_TOLERATIONS = (
    TolerationArgs(key=CONTROL_PLANE, operator="Exists", effect="NoSchedule"),
    TolerationArgs(key="node-role.kubernetes.io/master", operator="Exists", effect="NoSchedule"),
    TolerationArgs(key="CriticalAddonsOnly", operator="Exists"),
)


def controller_container(ops: Operands, image: str, feature_gates: str = "") -> ContainerArgs:
    secrets = pull_secrets(ops.pull_secrets, [ops.overrides.get(OPERAND)])
    daemon_secrets = [env("CD_DAEMON_IMAGE_PULL_SECRET_NAMES", ",".join(secrets))] if secrets else []
    return ContainerArgs(
        name="compute-domain",
        image=image,
        image_pull_policy="IfNotPresent",
        command=["compute-domain-controller", "-v", "$(LOG_VERBOSITY)"],
        env=[
            env("HTTP_ENDPOINT", ":8080"),
            env("METRICS_PATH", "/metrics"),
            env("LOG_VERBOSITY", LOG_VERBOSITY),
            env("LOG_VERBOSITY_CD_DAEMON", LOG_VERBOSITY),
            env_from_field("POD_NAME", "metadata.name"),
            env_from_field("NAMESPACE", "metadata.namespace"),
            # the daemon DaemonSets the controller creates run this image too
            env("IMAGE_NAME", image),
            *daemon_secrets,
            env("NVIDIA_VISIBLE_DEVICES", "void"),
            env("LEADER_ELECTION_ENABLED", "false"),
            env("LEADER_ELECTION_LEASE_LOCK_NAME", CONTROLLER),
            env("LEADER_ELECTION_LEASE_LOCK_NAMESPACE", ops.namespace),
            env("LEADER_ELECTION_LEASE_DURATION", "15s"),
            env("LEADER_ELECTION_RENEW_DEADLINE", "10s"),
            env("LEADER_ELECTION_RETRY_PERIOD", "2s"),
            *_gates_env(feature_gates),
        ],
    )


def controller_deployment(ops: Operands, image: str, feature_gates: str, opts: pulumi.ResourceOptions) -> k8s.apps.v1.Deployment:
    ds = ops.daemonsets
    # The controller is part of the `draDriver` operand: its overrides apply here as on the kubelet plugin.
    override = ops.overrides.get(OPERAND)
    selector = {"app": CONTROLLER}
    labels = {NAME_LABEL: APP_NAME, COMPONENT_LABEL: CONTROLLER, **selector}
    pod_labels = {**ds.labels, **(override.labels if override else {}), **labels}
    pod_annotations = {**ds.annotations, **(override.annotations if override else {})}
    return k8s.apps.v1.Deployment(
        CONTROLLER,
        metadata=meta(CONTROLLER, ops.namespace, {**ds.labels, **labels, **ops.extra_labels}, ds.annotations or None),
        spec=DeploymentSpecArgs(
            replicas=1,
            selector=LabelSelectorArgs(match_labels=selector),
            template=PodTemplateSpecArgs(
                metadata=ObjectMetaArgs(labels=pod_labels, annotations=pod_annotations or None),
                spec=PodSpecArgs(
                    priority_class_name=(override.priority_class_name if override else None) or ds.priority_class_name,
                    service_account_name=CONTROLLER,
                    image_pull_secrets=[LocalObjectReferenceArgs(name=s) for s in pull_secrets(ops.pull_secrets, [override])] or None,
                    affinity=AffinityArgs(
                        node_affinity=NodeAffinityArgs(
                            preferred_during_scheduling_ignored_during_execution=[
                                PreferredSchedulingTermArgs(
                                    weight=100,
                                    preference=NodeSelectorTermArgs(
                                        match_expressions=[NodeSelectorRequirementArgs(key=CONTROL_PLANE, operator="Exists")]
                                    ),
                                )
                            ]
                        ),
                        pod_anti_affinity=PodAntiAffinityArgs(
                            preferred_during_scheduling_ignored_during_execution=[
                                WeightedPodAffinityTermArgs(
                                    weight=100,
                                    pod_affinity_term=PodAffinityTermArgs(
                                        label_selector=LabelSelectorArgs(match_labels=selector),
                                        topology_key="kubernetes.io/hostname",
                                    ),
                                )
                            ]
                        ),
                    ),
                    tolerations=[*CONTROLLER_TOLERATIONS, *pod_tolerations(ds, override)],
                    containers=apply_to_containers([controller_container(ops, image, feature_gates)], OPERAND, ops.overrides, ops.operand_images),
                ),
            ),
        ),
        opts=opts,
    )
