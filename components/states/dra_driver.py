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
* RBAC (GO:manifests/state-dra-driver/0100-0300, DRA:templates/rbac-*.yaml): the kubelet plugin's ClusterRole
  (computedomains read, resourceclaims read, resourceslices read/write, nodes get/list/watch/update/patch, pods read)
  and Role (daemonsets list for the driver validation, computedomaincliques get with compute domains); the
  compute-domain controller's and the compute-domain daemon's (`compute-domain-daemon-service-account`: the
  controller creates the daemon DaemonSets with that name, DRA:templates/compute-domain-daemon.tmpl.yaml).
  gpu-stack names each SA, role and binding alike (components/kit/builders.py rbac_set) and merges the operator's
  separate kubelet plugin Roles into one; the MPS Role exists only with the MPSSupport feature gate, which
  gpu-stack does not set.
* DeviceClasses (GO:manifests/state-dra-driver/04*_deviceclass-*.yaml, DRA:templates/deviceclass-*.yaml):
  `gpu.nvidia.com` and `mig.nvidia.com` always, `compute-domain-daemon.nvidia.com` and
  `compute-domain-default-channel.nvidia.com` with compute domains. `vfio.gpu.nvidia.com` is left out: its
  devices are published only with the PassthroughSupport feature gate, and gpu-stack's VM pools take the sandbox
  operands instead. The chart's `extendedResourceName: nvidia.com/gpu` on v1 is left out as the operator leaves
  it out: it needs DRAExtendedResource (KEP 5004) and would let `nvidia.com/gpu` requests land on DRA pools.
* compute-domain controller Deployment `nvidia-dra-driver-controller` (GO:manifests/state-dra-driver/
  0600_controller-deployment.yaml): `compute-domain-controller -v $(LOG_VERBOSITY)`, preferring control-plane
  nodes, leader election off with one replica; CD_DAEMON_IMAGE_PULL_SECRET_NAMES passes the pull secrets on to
  the daemon DaemonSets it creates (DRA:templates/controller.yaml).
* CRDs `computedomains.resource.nvidia.com` and `computedomaincliques.resource.nvidia.com` (v1beta1,
  DRA:deployments/helm/dra-driver-nvidia-gpu/crds/; the operator chart's copy still requires `numNodes`, which
  the driver made optional in v0.4.0).
* ValidatingAdmissionPolicy `resourceslices-policy-nvidia-dra-driver` + binding (GO:manifests/state-dra-driver/
  0700_resourceslices-policy.yaml): the kubelet plugin's ServiceAccount may write only its own node's slices.

Image: nvcr.io/nvidia/dra-driver-nvidia-gpu:v0.5.0 (GO:deployments/gpu-operator/values.yaml `draDriver`).

The pod label `app: nvidia-dra-driver-kubelet-plugin` is fixed: k8s-driver-manager v0.12.0 drains the plugin last,
after every claim holder, by pausing `nvidia.com/gpu.deploy.dra-driver` and waiting for pods with that label
(DM:cmd/driver-manager/main.go `evictKubeletPlugin`).

gpu-stack differences: the DaemonSet is scheduled by the deploy label `nvidia.com/gpu.deploy.dra-driver` and a
required `gpu-stack/pool In [...]` affinity naming the DRA pools, instead of the operator's NFD affinity; the
operator's MASK_NVIDIA_DRIVER_PARAMS branch (for nvkind) is not rendered.

Which resource.k8s.io version (see `resource_api_version`): the driver needs Kubernetes 1.32 or later (DRA:
chart `kubeVersion: ">=1.32.0-0"`, DRA:docs/prerequisites.md). v1beta1 is served from 1.32, v1beta2 from 1.33,
v1 from 1.34 (kubernetes-validate 1.37.0 schemas; the chart and GO:controllers/clusterinfo/clusterinfo.go prefer
v1 > v1beta2 > v1beta1). Only v1 is served by default: beta APIs are off by default (KEP-3136) and the
DynamicResourceAllocation gate is beta but off on 1.32 and 1.33, so those need the gate and
`--runtime-config=resource.k8s.io/<version>=true` (DRA:docs/prerequisites.md).
"""

from __future__ import annotations

import re
from typing import Any, Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.admissionregistration.v1 import (
    MatchConditionArgs,
    MatchResourcesArgs,
    NamedRuleWithOperationsArgs,
    ValidatingAdmissionPolicyBindingSpecArgs,
    ValidatingAdmissionPolicySpecArgs,
    ValidationArgs,
    VariableArgs,
)
from pulumi_kubernetes.apiextensions.v1 import (
    CustomResourceDefinitionNamesArgs,
    CustomResourceDefinitionSpecArgs,
    CustomResourceDefinitionVersionArgs,
    CustomResourceValidationArgs,
)
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
    SCC_USE,
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
    rbac_set,
    rule,
    validator_container,
)

DAEMONSET = "nvidia-dra-driver-kubelet-plugin"
KUBELET_PLUGIN_SA = "nvidia-dra-driver-kubeletplugin"
CONTROLLER = "nvidia-dra-driver-controller"
CD_DAEMON_SA = "compute-domain-daemon-service-account"
ADMISSION_POLICY = "resourceslices-policy-nvidia-dra-driver"
DEPLOY_COMPONENT = "dra-driver"

APP_NAME = "nvidia-dra-driver"
NAME_LABEL = "app.kubernetes.io/name"
COMPONENT_LABEL = "app.kubernetes.io/component"

KUBELET_ROOT = "/var/lib/kubelet"
PLUGINS_REGISTRY = f"{KUBELET_ROOT}/plugins_registry"
PLUGINS_DIR = f"{KUBELET_ROOT}/plugins"
DRIVER_ROOT_CTR_PATH = "/driver-root"
GPUS_HEALTH_PORT = 51516
COMPUTE_DOMAINS_HEALTH_PORT = 51515
LOG_VERBOSITY = "4"

GPU_DRIVER = "gpu.nvidia.com"
COMPUTE_DOMAIN_DRIVER = "compute-domain.nvidia.com"
CRD_GROUP = "resource.nvidia.com"
CRD_VERSION = "v1beta1"
COMPUTE_DOMAIN_API_VERSION = f"{CRD_GROUP}/{CRD_VERSION}"

# --- which resource.k8s.io version ---------------------------------------------------------------------------

RESOURCE_GROUP = "resource.k8s.io"
MIN_KUBERNETES_MINOR = 32
# version -> first minor serving it; newest first, the order the chart and the operator prefer.
SERVED_FROM: dict[str, int] = {"v1": 34, "v1beta2": 33, "v1beta1": 32}
# Beta API versions are never on by default, so v1 is the only one a cluster serves without opting in.
DEFAULT_ON_FROM: dict[str, int] = {"v1": 34}
_KUBERNETES_VERSION = re.compile(r"^v?1\.(\d+)(\.\d+)?$")


def _minors(kubernetes_versions: Sequence[str]) -> dict[str, int]:
    if not kubernetes_versions:
        raise ValueError("no Kubernetes version declared: the resource.k8s.io version is chosen from them")
    minors = {}
    for version in kubernetes_versions:
        match = _KUBERNETES_VERSION.match(version)
        if not match:
            raise ValueError(f"{version!r} is not a Kubernetes version (1.<minor>)")
        minors[version] = int(match.group(1))
    return minors


def resource_api_version(kubernetes_versions: Sequence[str]) -> str:
    """The newest resource.k8s.io version every declared Kubernetes version serves, e.g. `resource.k8s.io/v1`.

    Objects are rendered once for all declared versions, so the oldest one decides. ValueError before 1.32,
    which the DRA driver does not support and which serves no DRA API it could use."""
    minors = _minors(kubernetes_versions)
    too_old = sorted((v for v, m in minors.items() if m < MIN_KUBERNETES_MINOR), key=minors.__getitem__)
    if too_old:
        raise ValueError(
            f"DRA mode needs Kubernetes 1.{MIN_KUBERNETES_MINOR} or later (NVIDIA's DRA driver supports "
            f">=1.{MIN_KUBERNETES_MINOR}, the first release serving {RESOURCE_GROUP}/v1beta1); declared: "
            f"{', '.join(too_old)}"
        )
    oldest = min(minors.values())
    version = next(v for v, first in SERVED_FROM.items() if first <= oldest)
    return f"{RESOURCE_GROUP}/{version}"


def opt_in_required(kubernetes_versions: Sequence[str]) -> list[str]:
    """The declared versions that do not serve `resource_api_version(...)` out of the box: their API server needs
    `--runtime-config=resource.k8s.io/<version>=true` and, before 1.34, the DynamicResourceAllocation feature gate
    on every control-plane component and kubelet."""
    minors = _minors(kubernetes_versions)
    version = resource_api_version(kubernetes_versions).split("/", 1)[1]
    first = DEFAULT_ON_FROM.get(version)
    return [v for v, m in minors.items() if first is None or m < first]


def _resource_module(api_version: str) -> Any:
    group, _, version = api_version.partition("/")
    if group != RESOURCE_GROUP or version not in SERVED_FROM:
        raise ValueError(f"{api_version!r} is not one of {', '.join(f'{RESOURCE_GROUP}/{v}' for v in SERVED_FROM)}")
    return getattr(k8s.resource, version)


# --- DeviceClasses and example claims ---------------------------------------------------------------------


def _cel(driver: str, **attributes: Any) -> str:
    terms = [f"device.driver == '{driver}'"]
    terms += [f"device.attributes['{driver}'].{key} == {value!r}" for key, value in attributes.items()]
    return " && ".join(terms)


GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
CD_DAEMON_CLASS = "compute-domain-daemon.nvidia.com"
CD_CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
GPU_DEVICE_CLASSES: dict[str, str] = {
    GPU_CLASS: _cel(GPU_DRIVER, type="gpu"),
    MIG_CLASS: _cel(GPU_DRIVER, type="mig"),
}
COMPUTE_DOMAIN_DEVICE_CLASSES: dict[str, str] = {
    CD_DAEMON_CLASS: _cel(COMPUTE_DOMAIN_DRIVER, type="daemon"),
    # channel 0 is the one every workload of a domain shares
    CD_CHANNEL_CLASS: _cel(COMPUTE_DOMAIN_DRIVER, type="channel", id=0),
}


def device_classes(compute_domains: bool) -> dict[str, str]:
    """DeviceClass name -> CEL selector."""
    return {**GPU_DEVICE_CLASSES, **(COMPUTE_DOMAIN_DEVICE_CLASSES if compute_domains else {})}


_MIG_PROFILE = re.compile(r"^[1-9]\d*g\.[1-9]\d*gb([-+][a-z.]+)?$")
EXAMPLE_GPU = "single-gpu"
EXAMPLE_MIG = "mig-{profile}"
EXAMPLE_COMPUTE_DOMAIN = "nvlink-domain"
EXAMPLE_CHANNEL_TEMPLATE = "nvlink-domain-channel"


def _request(api_version: str, name: str, device_class: str, selector: Optional[str] = None) -> dict[str, Any]:
    exact: dict[str, Any] = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": 1}
    if selector:
        exact["selectors"] = [{"cel": {"expression": selector}}]
    # v1beta1 puts the request's fields on the request itself; v1beta2 and v1 nest them under `exactly`.
    return {"name": name, **exact} if api_version.endswith("/v1beta1") else {"name": name, "exactly": exact}


def _claim_template(api_version: str, name: str, request: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def example_claim_templates(api_version: str, compute_domains: bool, *, mig_profile: str = "1g.10gb") -> list[dict[str, Any]]:
    """What a workload in a DRA pool asks for, as manifests to apply in its own namespace (no namespace set):
    a ResourceClaimTemplate for one whole GPU, one for one MIG device of `mig_profile` and, with compute
    domains, a ComputeDomain. A channel claim is never written by hand: it must carry the domain's id, so the
    controller generates the channel's ResourceClaimTemplate, named by the ComputeDomain, for pods to use."""
    _resource_module(api_version)
    if not _MIG_PROFILE.match(mig_profile):
        raise ValueError(f"{mig_profile!r} is not a MIG profile name such as 1g.10gb")
    examples = [
        _claim_template(api_version, EXAMPLE_GPU, _request(api_version, "gpu", GPU_CLASS)),
        _claim_template(
            api_version,
            EXAMPLE_MIG.format(profile=mig_profile.replace(".", "-").replace("+", "-")),
            _request(api_version, "mig", MIG_CLASS, f"device.attributes['{GPU_DRIVER}'].profile == '{mig_profile}'"),
        ),
    ]
    if compute_domains:
        examples.append(
            {
                "apiVersion": COMPUTE_DOMAIN_API_VERSION,
                "kind": "ComputeDomain",
                "metadata": {"name": EXAMPLE_COMPUTE_DOMAIN},
                # numNodes 0 is what the driver recommends (IMEX daemons with DNS names) and is accepted by the
                # CRD versions that still require the field.
                "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": EXAMPLE_CHANNEL_TEMPLATE}}},
            }
        )
    return examples


# --- CRDs ----------------------------------------------------------------------------------------------------

_STRING = {"type": "string"}
_READINESS = {"type": "string", "enum": ["Ready", "NotReady"], "default": "NotReady"}


def _member(name_key: str) -> dict[str, Any]:
    """A node of a domain or a daemon of a clique, keyed by `name_key` in its list."""
    return {
        "type": "object",
        "required": ["cliqueID", "ipAddress", name_key],
        "properties": {
            "cliqueID": _STRING,
            # fixes the node's IMEX DNS name within its NVLink partition
            "index": {"type": "integer"},
            "ipAddress": _STRING,
            name_key: _STRING,
            "status": _READINESS,
        },
    }


def _members(name_key: str) -> dict[str, Any]:
    return {
        "type": "array",
        "items": _member(name_key),
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": [name_key],
    }


_TYPE_META = {"apiVersion": _STRING, "kind": _STRING, "metadata": {"type": "object"}}

COMPUTE_DOMAIN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "A set of nodes joined into one multi-node NVLink (IMEX) domain for the workload using it.",
    "properties": {
        **_TYPE_META,
        "spec": {
            "type": "object",
            "required": ["channel"],
            "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "a ComputeDomain's spec cannot change"}],
            "properties": {
                "channel": {
                    "type": "object",
                    "required": ["resourceClaimTemplate"],
                    "properties": {
                        "allocationMode": {"type": "string", "enum": ["All", "Single"], "default": "Single"},
                        "resourceClaimTemplate": {
                            "type": "object",
                            "required": ["name"],
                            "properties": {"name": _STRING},
                        },
                    },
                },
                # deprecated by the driver; 0 lets IMEX daemons start without waiting for their peers
                "numNodes": {"type": "integer", "minimum": 0, "default": 0},
            },
        },
        "status": {
            "type": "object",
            "required": ["status"],
            "properties": {"nodes": _members("name"), "status": _READINESS},
        },
    },
}

COMPUTE_DOMAIN_CLIQUE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "The IMEX daemons of one NVLink clique of a ComputeDomain, in the driver's namespace.",
    "properties": {**_TYPE_META, "daemons": _members("nodeName")},
}


def _crd(kind: str, plural: str, schema: dict[str, Any], *, status: bool, opts: pulumi.ResourceOptions) -> Any:
    name = f"{plural}.{CRD_GROUP}"
    return k8s.apiextensions.v1.CustomResourceDefinition(
        name,
        metadata=meta(name, labels={NAME_LABEL: APP_NAME}),
        spec=CustomResourceDefinitionSpecArgs(
            group=CRD_GROUP,
            scope="Namespaced",
            names=CustomResourceDefinitionNamesArgs(kind=kind, list_kind=f"{kind}List", plural=plural, singular=kind.lower()),
            versions=[
                CustomResourceDefinitionVersionArgs(
                    name=CRD_VERSION,
                    served=True,
                    storage=True,
                    subresources={"status": {}} if status else None,
                    # plain wire-form data: the API's field names (openAPIV3Schema, x-kubernetes-*) pass through as is
                    schema=CustomResourceValidationArgs(open_apiv3_schema=schema),
                )
            ],
        ),
        opts=opts,
    )


# --- RBAC ------------------------------------------------------------------------------------------------------

PLUGIN_CLUSTER_RULES = (
    rule([CRD_GROUP], ["computedomains"], ["get", "list", "watch"]),
    rule([RESOURCE_GROUP], ["resourceclaims"], ["get", "list", "watch"]),
    rule([RESOURCE_GROUP], ["resourceslices"], ["get", "list", "watch", "create", "update", "delete"]),
    rule([""], ["nodes"], ["get", "list", "watch", "update", "patch"]),
    rule([""], ["pods"], ["get", "list", "watch"]),
)
# the driver validation lists DaemonSets to tell an operator-managed driver from a host one
PLUGIN_ROLE_RULES = (SCC_USE, rule(["apps"], ["daemonsets"], ["list"]))
PLUGIN_CD_ROLE_RULES = (rule([CRD_GROUP], ["computedomaincliques"], ["get"]),)

CONTROLLER_CLUSTER_RULES = (
    rule([CRD_GROUP], ["computedomains"], ["get", "list", "watch", "update"]),
    rule([CRD_GROUP], ["computedomains/status"], ["update"]),
    rule([RESOURCE_GROUP], ["resourceclaimtemplates"], ["get", "list", "watch", "create", "update", "delete"]),
    rule(["coordination.k8s.io"], ["leases"], ["get", "create", "update"]),
    rule([""], ["nodes"], ["get", "list", "watch", "update"]),
    rule([""], ["pods"], ["get", "list", "watch"]),
)
CONTROLLER_ROLE_RULES = (
    rule(["apps"], ["daemonsets"], ["get", "list", "watch", "create", "update", "patch", "delete"]),
    rule([CRD_GROUP], ["computedomaincliques"], ["get", "list", "watch", "update"]),
)

CD_DAEMON_CLUSTER_RULES = (
    rule([CRD_GROUP], ["computedomains", "computedomains/status"], ["get", "list", "watch", "update", "patch"]),
    rule([CRD_GROUP], ["computedomaincliques"], ["get", "list", "watch", "create", "update", "patch"]),
    rule([""], ["pods"], ["get", "list", "watch", "patch"]),
)


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


def gpus_container(image: str) -> ContainerArgs:
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
        ],
        **_health_probes(GPUS_HEALTH_PORT, 30),
        volume_mounts=list(PLUGIN_MOUNTS),
    )


def compute_domains_container(image: str) -> ContainerArgs:
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


def controller_container(ops: Operands, image: str) -> ContainerArgs:
    pull_secrets = [env("CD_DAEMON_IMAGE_PULL_SECRET_NAMES", ",".join(ops.pull_secrets))] if ops.pull_secrets else []
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
            *pull_secrets,
            env("NVIDIA_VISIBLE_DEVICES", "void"),
            env("LEADER_ELECTION_ENABLED", "false"),
            env("LEADER_ELECTION_LEASE_LOCK_NAME", CONTROLLER),
            env("LEADER_ELECTION_LEASE_LOCK_NAMESPACE", ops.namespace),
            env("LEADER_ELECTION_LEASE_DURATION", "15s"),
            env("LEADER_ELECTION_RENEW_DEADLINE", "10s"),
            env("LEADER_ELECTION_RETRY_PERIOD", "2s"),
        ],
    )


def _controller(ops: Operands, image: str, opts: pulumi.ResourceOptions) -> k8s.apps.v1.Deployment:
    ds = ops.daemonsets
    selector = {"app": CONTROLLER}
    labels = {NAME_LABEL: APP_NAME, COMPONENT_LABEL: CONTROLLER, **selector}
    return k8s.apps.v1.Deployment(
        CONTROLLER,
        metadata=meta(CONTROLLER, ops.namespace, {**ds.labels, **labels, **ops.extra_labels}, ds.annotations or None),
        spec=DeploymentSpecArgs(
            replicas=1,
            selector=LabelSelectorArgs(match_labels=selector),
            template=PodTemplateSpecArgs(
                metadata=ObjectMetaArgs(labels={**ds.labels, **labels}, annotations=ds.annotations or None),
                spec=PodSpecArgs(
                    priority_class_name=ds.priority_class_name,
                    service_account_name=CONTROLLER,
                    image_pull_secrets=[LocalObjectReferenceArgs(name=s) for s in ops.pull_secrets] or None,
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
                    tolerations=[
                        *CONTROLLER_TOLERATIONS,
                        *(TolerationArgs(key=t.key, operator=t.operator, value=t.value, effect=t.effect) for t in ds.tolerations),
                    ],
                    containers=[controller_container(ops, image)],
                ),
            ),
        ),
        opts=opts,
    )


# --- the admission policy on ResourceSlices -----------------------------------------------------------------------


def _slice_policy(namespace: str, opts: pulumi.ResourceOptions) -> list[pulumi.Resource]:
    """Each kubelet plugin may write the ResourceSlices of its own node (or node-independent ones) only, so a
    compromised node cannot advertise or withdraw another node's GPUs."""
    labels = {NAME_LABEL: APP_NAME}
    policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
        ADMISSION_POLICY,
        metadata=meta(ADMISSION_POLICY, labels=labels),
        spec=ValidatingAdmissionPolicySpecArgs(
            failure_policy="Fail",
            match_constraints=MatchResourcesArgs(
                resource_rules=[
                    NamedRuleWithOperationsArgs(
                        api_groups=[RESOURCE_GROUP],
                        # every version a client may write through, whichever one gpu-stack renders
                        api_versions=list(SERVED_FROM),
                        operations=["CREATE", "UPDATE", "DELETE"],
                        resources=["resourceslices"],
                    )
                ]
            ),
            match_conditions=[
                MatchConditionArgs(
                    name="from-the-kubelet-plugin",
                    expression=f"request.userInfo.username == 'system:serviceaccount:{namespace}:{KUBELET_PLUGIN_SA}'",
                )
            ],
            variables=[
                # the node a pod-bound ServiceAccount token was issued on
                VariableArgs(
                    name="requestNode",
                    expression="request.userInfo.extra[?'authentication.kubernetes.io/node-name'][0].orValue('')",
                ),
                VariableArgs(name="slice", expression="request.operation == 'DELETE' ? oldObject : object"),
            ],
            validations=[
                ValidationArgs(
                    expression="variables.requestNode != ''",
                    message="the request carries no node: the DRA kubelet plugin must run in a pod with a node-bound token",
                ),
                ValidationArgs(
                    expression=(
                        "variables.slice.spec.?nodeName.orValue('') == variables.requestNode"
                        " || variables.slice.spec.?allNodes.orValue(false)"
                        " || variables.slice.spec.?nodeSelector.hasValue()"
                    ),
                    message_expression="'the DRA kubelet plugin on ' + variables.requestNode + ' may change only its own node\\'s ResourceSlices'",
                ),
            ],
        ),
        opts=opts,
    )
    binding = k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
        ADMISSION_POLICY,
        metadata=meta(ADMISSION_POLICY, labels=labels),
        spec=ValidatingAdmissionPolicyBindingSpecArgs(policy_name=ADMISSION_POLICY, validation_actions=["Deny"]),
        opts=also_after(opts, policy),
    )
    return [policy, binding]


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
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        resource = _resource_module(resource_api_version)
        affinity = pool_affinity(pools)
        super().__init__("gpu-stack:index:DraDriver", name, None, opts)
        child = child_opts(self, depends_on)
        plugin_labels = {NAME_LABEL: APP_NAME, COMPONENT_LABEL: DAEMONSET}

        self.crds = []
        cd_rbac: list[pulumi.Resource] = []
        if compute_domains:
            self.crds = [
                # deleting a CRD deletes every ComputeDomain a workload created
                _crd("ComputeDomain", "computedomains", COMPUTE_DOMAIN_SCHEMA, status=True, opts=kept(child)),
                _crd("ComputeDomainClique", "computedomaincliques", COMPUTE_DOMAIN_CLIQUE_SCHEMA, status=False, opts=kept(child)),
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
            role_rules=[*PLUGIN_ROLE_RULES, *(PLUGIN_CD_ROLE_RULES if compute_domains else ())],
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
            for class_name, cel in device_classes(compute_domains).items()
        ]
        policy = _slice_policy(ops.namespace, child)

        containers = [gpus_container(image), *([compute_domains_container(image)] if compute_domains else [])]
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
            self.controller = _controller(ops, image, also_after(child, *controller_rbac.resources, *cd_rbac, *self.crds))

        self.register_outputs(
            {
                "daemonset": DAEMONSET,
                "resourceApiVersion": resource_api_version,
                "deviceClasses": list(device_classes(compute_domains)),
                "computeDomains": compute_domains,
                "pools": list(pools),
            }
        )
