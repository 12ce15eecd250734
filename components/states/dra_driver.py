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

The plugin's containers, the pool affinity and the controller Deployment are built in
components/kit/dra_plugin.py.

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
from typing import Any, Mapping, Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.apps.v1 import DaemonSetUpdateStrategyArgs, RollingUpdateDaemonSetArgs
from pulumi_kubernetes.core.v1 import VolumeArgs

from components.catalogs import consts
from components.config.dra import KubeletPlugin
from components.kit.builders import (
    VALIDATIONS_VOLUME,
    Operands,
    also_after,
    child_opts,
    host_path,
    kept,
    meta,
    operand_daemonset,
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
from components.kit.dra_plugin import (
    COMPONENT_LABEL,
    CONTROLLER,
    PASSTHROUGH_VOLUMES,
    PLUGINS_DIR,
    PLUGINS_REGISTRY,
    compute_domains_container,
    controller_deployment,
    driver_validation,
    gpus_container,
    pool_affinity,
)
from components.kit.rbac import SCC_USE, rbac_set

DAEMONSET = "nvidia-dra-driver-kubelet-plugin"
KUBELET_PLUGIN_SA = "nvidia-dra-driver-kubeletplugin"
CD_DAEMON_SA = "compute-domain-daemon-service-account"
DEPLOY_COMPONENT = "dra-driver"

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
        plugin: KubeletPlugin = KubeletPlugin(),
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
        # The compute-domain daemons, which the controller starts on the domain's GPU nodes, run as this account: the
        # node-bound admission policies name it beside the stack's DaemonSets (components/states/node_write_policy.py).
        self.node_accounts = [CD_DAEMON_SA] if compute_domains else []
        cd_rbac = self._compute_domain_kinds(ops, child) if compute_domains else []

        plugin_rbac = _plugin_rbac(ops, compute_domains, mps, plugin_labels, child)
        self.device_classes = registered_device_classes(resource, compute_domains, child)
        policy = slice_policy(ops.namespace, KUBELET_PLUGIN_SA, child)

        containers = [
            gpus_container(image, gates, passthrough, health_port=plugin.health_port("gpus"), resources=plugin.gpus.resources),
            *([compute_domains_container(image, gates, health_port=plugin.health_port("computeDomains"),
                                         resources=plugin.compute_domains.resources)] if compute_domains else []),
        ]
        self.daemonset = operand_daemonset(
            DAEMONSET,
            ops,
            operand="draDriver",
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
            volumes=plugin_volumes(passthrough),
            # the slice policy must be in force before any plugin publishes
            opts=also_after(child, *plugin_rbac.resources, *self.crds, *policy),
        )

        self.controller = self._controller(ops, image, gates, child, cd_rbac) if compute_domains else None

        self.register_outputs(
            {
                "daemonset": DAEMONSET,
                "resourceApiVersion": resource_api_version,
                "deviceClasses": list(device_classes(compute_domains)),
                "computeDomains": compute_domains,
                "pools": list(pools),
            }
        )

    def _compute_domain_kinds(self, ops: Operands, child: pulumi.ResourceOptions) -> list[pulumi.Resource]:
        """The ComputeDomain CRDs (into `self.crds`) and the compute-domain daemon's RBAC, which this returns."""
        self.crds = [
            # deleting a CRD deletes every ComputeDomain a workload created
            crd("ComputeDomain", "computedomains", COMPUTE_DOMAIN_SCHEMA, status=True, opts=kept(child)),
            crd("ComputeDomainClique", "computedomaincliques", COMPUTE_DOMAIN_CLIQUE_SCHEMA, status=False, opts=kept(child)),
        ]
        return rbac_set(
            CD_DAEMON_SA,
            ops.namespace,
            openshift=ops.openshift,
            role_rules=[SCC_USE],
            cluster_role_rules=CD_DAEMON_CLUSTER_RULES,
            labels={NAME_LABEL: APP_NAME, COMPONENT_LABEL: "compute-domain-daemon"},
            opts=child,
        ).resources

    def _controller(self, ops: Operands, image: str, gates: str, child: pulumi.ResourceOptions,
                    cd_rbac: Sequence[pulumi.Resource]) -> k8s.apps.v1.Deployment:
        """The compute-domain controller Deployment and its RBAC."""
        controller_rbac = rbac_set(
            CONTROLLER,
            ops.namespace,
            openshift=ops.openshift,
            role_rules=CONTROLLER_ROLE_RULES,
            cluster_role_rules=CONTROLLER_CLUSTER_RULES,
            labels={NAME_LABEL: APP_NAME, COMPONENT_LABEL: CONTROLLER},
            opts=child,
        )
        return controller_deployment(ops, image, gates, also_after(child, *controller_rbac.resources, *cd_rbac, *self.crds))


def plugin_volumes(passthrough: bool) -> list[VolumeArgs]:
    return [
        host_path("plugins-registry", PLUGINS_REGISTRY),
        host_path("plugins", PLUGINS_DIR),
        host_path("cdi-root", consts.CDI_SPEC_DIR),  # no type, as NVIDIA's asset: the toolkit creates it
        host_path("host-root", "/"),
        host_path("driver-install-dir", consts.DRIVER_INSTALL_DIR, "DirectoryOrCreate"),
        VALIDATIONS_VOLUME,
        *(PASSTHROUGH_VOLUMES if passthrough else ()),
    ]


def registered_device_classes(resource: Any, compute_domains: bool, child: pulumi.ResourceOptions) -> list[pulumi.Resource]:
    """The DeviceClasses workloads' ResourceClaims name (kept: deleting one strands those claims)."""
    return [
        resource.DeviceClass(
            class_name,
            metadata=meta(class_name, labels={NAME_LABEL: APP_NAME}),
            spec=resource.DeviceClassSpecArgs(selectors=[resource.DeviceSelectorArgs(cel=resource.CELDeviceSelectorArgs(expression=cel))]),
            opts=kept(child),
        )
        for class_name, cel in device_classes(compute_domains).items()
    ]


def _plugin_rbac(ops: Operands, compute_domains: bool, mps: bool, labels: Mapping[str, str],
                 opts: pulumi.ResourceOptions):
    """The kubelet plugin's account: its rules, those of compute domains and of the MPS control daemons it starts."""
    return rbac_set(
        KUBELET_PLUGIN_SA,
        ops.namespace,
        openshift=ops.openshift,
        role_rules=[
            *PLUGIN_ROLE_RULES,
            *(PLUGIN_CD_ROLE_RULES if compute_domains else ()),
            *(PLUGIN_MPS_ROLE_RULES if mps else ()),
        ],
        cluster_role_rules=PLUGIN_CLUSTER_RULES,
        labels=dict(labels),
        opts=opts,
    )
