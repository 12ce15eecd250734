"""DRA mode: NVIDIA's DRA driver for GPUs in place of the device plugin, on the pools that ask for it.

What it renders follows the GPU Operator's GPUCluster state `state-dra-driver` (GO = NVIDIA/gpu-operator at a22dbf6,
tag v26.7.0; DRA = NVIDIA/k8s-dra-driver-gpu at 2240711, whose Helm chart equals tag v0.4.0 but for its version):

* kubelet plugin DaemonSet `nvidia-dra-driver-kubelet-plugin` (GO:manifests/state-dra-driver/0500_daemonset.yaml):
  a `driver-validation` init container running the validator image's `nvidia-validator` (COMPONENT=driver,
  WITH_WAIT=true, DRIVER_VALIDATION_SKIP_GPU_INIT and DISABLE_DEV_CHAR_SYMLINK_CREATION true, HOST_ROOT=/,
  DRIVER_INSTALL_DIR=/run/nvidia/driver, DRIVER_INSTALL_DIR_CTR_PATH=/driver-root; image from VALIDATOR_IMAGE,
  GO:internal/state/dra_driver.go), then the `gpus` container (`gpu-kubelet-plugin`) and, with compute domains,
  the `compute-domains` container (`compute-domain-kubelet-plugin`), both privileged, both sourcing
  /run/nvidia/validations/driver-ready (NVIDIA_DRIVER_ROOT, DRIVER_ROOT_CTR_PATH) before they start. Mounts:
  /var/lib/kubelet/plugins_registry, /var/lib/kubelet/plugins (Bidirectional), /var/run/cdi, the validations
  directory read-only, host / at /host and /run/nvidia/driver at /driver-root (HostToContainer). Env, metrics
  endpoints (:8080 gpus, :8081 compute domains) and gRPC health ports (51516 gpus, 51515 compute domains, service
  `liveness`; GO:internal/state/dra_driver.go defaultGPUsHealthcheckPort) as in the asset; RollingUpdate with
  maxUnavailable 100% as in the asset and DRA:deployments/helm/dra-driver-nvidia-gpu/values.yaml.
* RBAC (GO:manifests/state-dra-driver/0100-0300, DRA:templates/rbac-*.yaml; rule tables in components/kit/
  dra_api.py): the kubelet plugin's ClusterRole
  (computedomains read, resourceclaims read, resourceslices read/write, nodes get/list/watch/update/patch, pods read)
  and Role (daemonsets list for the driver validation, computedomaincliques get with compute domains); the
  compute-domain controller's and the compute-domain daemon's (`compute-domain-daemon-service-account`: the
  controller creates the daemon DaemonSets with that name, DRA:templates/compute-domain-daemon.tmpl.yaml).
  gpu-stack names each SA, role and binding alike (components/kit/rbac.py rbac_set) and merges the operator's
  separate kubelet plugin Roles into one, including the MPS Role (Deployments, for the MPS control daemons the
  plugin starts) with the MPSSupport feature gate.
* Feature gates (`dra.featureGates`, GO:api/nvidia/v1alpha1/gpucluster_types.go `FeatureGates`): FEATURE_GATES
  (`Name=true|false`, sorted, comma-joined) on the gpus, compute-domains and controller containers. With
  PassthroughSupport the gpus container also mounts /lib/modules (read-only), /sys and /proc (Bidirectional) to
  find and bind the vfio-pci driver, as the asset does.
* DeviceClasses, with compute domains the ComputeDomain CRDs, and the ResourceSlice admission policy:
  components/kit/dra_api.py.
* compute-domain controller Deployment `nvidia-dra-driver-controller` (GO:manifests/state-dra-driver/
  0600_controller-deployment.yaml): `compute-domain-controller -v $(LOG_VERBOSITY)`, preferring control-plane
  nodes, leader election off with one replica; CD_DAEMON_IMAGE_PULL_SECRET_NAMES passes the pull secrets on to
  the daemon DaemonSets it creates (DRA:templates/controller.yaml).

Image: nvcr.io/nvidia/dra-driver-nvidia-gpu:v0.5.0 (GO:deployments/gpu-operator/values.yaml `draDriver`).

The pod label `app: nvidia-dra-driver-kubelet-plugin` is fixed: k8s-driver-manager v0.12.0 drains the plugin last,
after every claim holder, by pausing `nvidia.com/gpu.deploy.dra-driver` and waiting for pods with that label
(DM:cmd/driver-manager/main.go `evictKubeletPlugin`).

gpu-stack differences: the DaemonSet is scheduled by the deploy label `nvidia.com/gpu.deploy.dra-driver` and a
required `gpu-stack/pool In [...]` affinity naming the DRA pools, instead of the operator's NFD affinity; the
operator's MASK_NVIDIA_DRIVER_PARAMS branch (for nvkind) is not rendered.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping, Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.apps.v1 import DaemonSetUpdateStrategyArgs, DeploymentSpecArgs, RollingUpdateDaemonSetArgs
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
    TolerationArgs,
    WeightedPodAffinityTermArgs,
)
from pulumi_kubernetes.meta.v1 import LabelSelectorArgs, ObjectMetaArgs

from components.catalogs import consts
from components.kit.builders import (
    NODE_NAME_ENV,
    PRIVILEGED,
    SOURCE_DRIVER_READY,
    VALIDATIONS_VOLUME,
    Operands,
    also_after,
    child_opts,
    env,
    env_from_field,
    host_path,
    kept,
    meta,
    mount,
    operand_daemonset,
    validator_container,
)
from components.kit.dra_api import (
    APP_NAME,
    CD_DAEMON_CLUSTER_RULES,
    COMPUTE_DOMAIN_CLIQUE_SCHEMA,
    COMPUTE_DOMAIN_SCHEMA,
    CONTROLLER_CLUSTER_RULES,
    CONTROLLER_ROLE_RULES,
    NAME_LABEL,
    PLUGIN_CD_ROLE_RULES,
    PLUGIN_CLUSTER_RULES,
    PLUGIN_MPS_ROLE_RULES,
    PLUGIN_ROLE_RULES,
    crd,
    device_classes,
    resource_module,
    slice_policy,
)
from components.kit.operand_overrides import apply_to_containers, pod_tolerations, pull_secrets
from components.kit.rbac import SCC_USE, rbac_set

DAEMONSET = "nvidia-dra-driver-kubelet-plugin"
KUBELET_PLUGIN_SA = "nvidia-dra-driver-kubeletplugin"
CONTROLLER = "nvidia-dra-driver-controller"
CD_DAEMON_SA = "compute-domain-daemon-service-account"
DEPLOY_COMPONENT = "dra-driver"
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


def gpus_container(image: str, feature_gates: str = "", passthrough: bool = False) -> ContainerArgs:
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
            *_kubelet_env(GPUS_HEALTH_PORT),
            *_gates_env(feature_gates),
        ],
        **_health_probes(GPUS_HEALTH_PORT, 30),
        volume_mounts=[*PLUGIN_MOUNTS, *(PASSTHROUGH_MOUNTS if passthrough else ())],
    )


def compute_domains_container(image: str, feature_gates: str = "") -> ContainerArgs:
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
            *_kubelet_env(COMPUTE_DOMAINS_HEALTH_PORT),
            # v0.5.0: the plugin labels its node's NVLink clique itself (GO commit c5656b834)
            env("GPU_CLIQUE_LABEL_ENABLED", "true"),
            *_gates_env(feature_gates),
        ],
        **_health_probes(COMPUTE_DOMAINS_HEALTH_PORT, 10),
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


def _controller(ops: Operands, image: str, feature_gates: str, opts: pulumi.ResourceOptions) -> k8s.apps.v1.Deployment:
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


# --- the component --------------------------------------------------------------------------------------------------


class DraDriver(pulumi.ComponentResource):
    """NVIDIA's DRA driver for GPUs on the DRA pools: kubelet plugin, DeviceClasses and, with `compute_domains`,
    ComputeDomain support for multi-node NVLink (CRDs, controller, compute-domain kubelet plugin)."""

    daemonset: k8s.apps.v1.DaemonSet
    controller: Optional[k8s.apps.v1.Deployment]
    device_classes: list[pulumi.Resource]
    crds: list[pulumi.Resource]

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        image: str,
        resource_api_version: str,
        pools: Sequence[str],
        compute_domains: bool,
        feature_gates: Mapping[str, bool] = MappingProxyType({}),
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        """`feature_gates`: the stack's `dra.featureGates`, the gates it sets (the rest keep the driver's defaults)."""
        resource = resource_module(resource_api_version)
        # as the operator renders FEATURE_GATES (GO:internal/render/render.go convertStringMapToCommaSeparatedString)
        gates = ",".join(f"{name}={str(on).lower()}" for name, on in sorted(feature_gates.items()))
        passthrough = feature_gates.get("PassthroughSupport", False)
        mps = feature_gates.get("MPSSupport", False)
        affinity = pool_affinity(pools)
        super().__init__("gpu-stack:index:DraDriver", name, None, opts)
        child = child_opts(self, depends_on)
        plugin_labels = {NAME_LABEL: APP_NAME, COMPONENT_LABEL: DAEMONSET}

        self.crds = []
        cd_rbac: list[pulumi.Resource] = []
        if compute_domains:
            self.crds = [
                # deleting a CRD deletes every ComputeDomain a workload created
                crd("ComputeDomain", "computedomains", COMPUTE_DOMAIN_SCHEMA, status=True, opts=kept(child)),
                crd("ComputeDomainClique", "computedomaincliques", COMPUTE_DOMAIN_CLIQUE_SCHEMA, status=False, opts=kept(child)),
            ]
            cd_rbac = rbac_set(
                CD_DAEMON_SA,
                ops.namespace,
                role_rules=[SCC_USE],
                cluster_role_rules=CD_DAEMON_CLUSTER_RULES,
                labels={NAME_LABEL: APP_NAME, COMPONENT_LABEL: "compute-domain-daemon"},
                opts=child,
            ).resources

        plugin_rbac = rbac_set(
            KUBELET_PLUGIN_SA,
            ops.namespace,
            role_rules=[
                *PLUGIN_ROLE_RULES,
                *(PLUGIN_CD_ROLE_RULES if compute_domains else ()),
                *(PLUGIN_MPS_ROLE_RULES if mps else ()),
            ],
            cluster_role_rules=PLUGIN_CLUSTER_RULES,
            labels=plugin_labels,
            opts=child,
        )
        self.device_classes = [
            resource.DeviceClass(
                class_name,
                metadata=meta(class_name, labels={NAME_LABEL: APP_NAME}),
                spec=resource.DeviceClassSpecArgs(selectors=[resource.DeviceSelectorArgs(cel=resource.CELDeviceSelectorArgs(expression=cel))]),
                # workloads' ResourceClaims name these classes
                opts=kept(child),
            )
            for class_name, cel in device_classes(compute_domains, passthrough).items()
        ]
        policy = slice_policy(ops.namespace, KUBELET_PLUGIN_SA, child)

        containers = [
            gpus_container(image, gates, passthrough),
            *([compute_domains_container(image, gates)] if compute_domains else []),
        ]
        self.daemonset = operand_daemonset(
            DAEMONSET,
            ops,
            deploy_component=DEPLOY_COMPONENT,
            service_account=KUBELET_PLUGIN_SA,
            labels=plugin_labels,
            affinity=affinity,
            # a restarting plugin leaves prepared claims and running pods alone, so every node may update at once
            update_strategy=DaemonSetUpdateStrategyArgs(
                type="RollingUpdate", rolling_update=RollingUpdateDaemonSetArgs(max_unavailable="100%")
            ),
            init_containers=[driver_validation(ops.images.validator)],
            containers=containers,
            volumes=[
                host_path("plugins-registry", PLUGINS_REGISTRY),
                host_path("plugins", PLUGINS_DIR),
                host_path("cdi-root", consts.CDI_SPEC_DIR, "DirectoryOrCreate"),
                host_path("host-root", "/"),
                host_path("driver-install-dir", consts.DRIVER_INSTALL_DIR, "DirectoryOrCreate"),
                VALIDATIONS_VOLUME,
                *(PASSTHROUGH_VOLUMES if passthrough else ()),
            ],
            # the slice policy must be in force before any plugin publishes
            opts=also_after(child, *plugin_rbac.resources, *self.crds, *policy),
        )

        self.controller = None
        if compute_domains:
            controller_rbac = rbac_set(
                CONTROLLER,
                ops.namespace,
                role_rules=CONTROLLER_ROLE_RULES,
                cluster_role_rules=CONTROLLER_CLUSTER_RULES,
                labels={NAME_LABEL: APP_NAME, COMPONENT_LABEL: CONTROLLER},
                opts=child,
            )
            self.controller = _controller(ops, image, gates, also_after(child, *controller_rbac.resources, *cd_rbac, *self.crds))

        self.register_outputs(
            {
                "daemonset": DAEMONSET,
                "resourceApiVersion": resource_api_version,
                "deviceClasses": list(device_classes(compute_domains, passthrough)),
                "computeDomains": compute_domains,
                "pools": list(pools),
            }
        )
