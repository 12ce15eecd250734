"""The DRA driver's cluster-scoped API objects: which resource.k8s.io version they are written in, the DeviceClasses
and the example claims a workload copies, the ComputeDomain CRDs, and the admission policy on ResourceSlices. The
DraDriver state (components/states/dra_driver.py) registers them next to its kubelet plugin DaemonSet and
compute-domain controller; the DRA validator's claims use the same version and classes.

GO = NVIDIA/gpu-operator at a22dbf6 (tag v26.7.0), DRA = NVIDIA/k8s-dra-driver-gpu at 2240711, as in
components/states/dra_driver.py.

* DeviceClasses (GO:manifests/state-dra-driver/04*_deviceclass-*.yaml, DRA:templates/deviceclass-*.yaml):
  `gpu.nvidia.com` and `mig.nvidia.com` always, `compute-domain-daemon.nvidia.com` and
  `compute-domain-default-channel.nvidia.com` with compute domains. `vfio.gpu.nvidia.com` always, as the operator
  renders it, though the driver publishes its devices only with the PassthroughSupport feature gate
  (`dra.featureGates`); gpu-stack's VM pools take the sandbox operands instead. The chart's `extendedResourceName: nvidia.com/gpu` on v1 is left out as the operator leaves
  it out: it needs DRAExtendedResource (KEP 5004) and would let `nvidia.com/gpu` requests land on DRA pools.
* CRDs `computedomains.resource.nvidia.com` and `computedomaincliques.resource.nvidia.com` (v1beta1,
  DRA:deployments/helm/dra-driver-nvidia-gpu/crds/; the operator chart's copy still requires `numNodes`, which
  the driver made optional in v0.4.0).
* The RBAC rules of the kubelet plugin, the compute-domain controller and its daemons (components/states/
  dra_driver.py says where each comes from).
* The adminAccess ResourceClaimTemplate of DCGM and its exporter on DRA nodes.
* ValidatingAdmissionPolicy `resourceslices-policy-nvidia-dra-driver` + binding (GO:manifests/state-dra-driver/
  0700_resourceslices-policy.yaml): the kubelet plugin's ServiceAccount may write only its own node's slices.

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

from components.kit.node_claim import REQUEST_NODE
from components.kit.builders import also_after, meta
from components.kit.rbac import SCC_USE, rule

ADMISSION_POLICY = "resourceslices-policy-nvidia-dra-driver"

APP_NAME = "nvidia-dra-driver"
NAME_LABEL = "app.kubernetes.io/name"

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
_KUBERNETES_VERSION = re.compile(r"^v?1\.([0-9]+)(\.[0-9]+)?$")


def _minors(kubernetes_versions: Sequence[str]) -> dict[str, int]:
    if not kubernetes_versions:
        raise ValueError("no Kubernetes version declared: the resource.k8s.io version is chosen from them")
    minors = {}
    for version in kubernetes_versions:
        match = _KUBERNETES_VERSION.fullmatch(version)
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


def resource_module(api_version: str) -> Any:
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
VFIO_CLASS = "vfio.gpu.nvidia.com"
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
    """DeviceClass name -> CEL selector. The vfio class is rendered always, as NVIDIA's asset renders it
    (GO:manifests/state-dra-driver/0430_deviceclass-vfio-gpu.yaml): it selects nothing until the
    PassthroughSupport gate makes the driver publish vfio-pci-bound GPUs."""
    return {
        **GPU_DEVICE_CLASSES,
        VFIO_CLASS: _cel(GPU_DRIVER, type="vfio"),
        **(COMPUTE_DOMAIN_DEVICE_CLASSES if compute_domains else {}),
    }


_MIG_PROFILE = re.compile(r"^[1-9][0-9]*g\.[1-9][0-9]*gb([-+][a-z.]+)?$")
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
    resource_module(api_version)
    if not _MIG_PROFILE.fullmatch(mig_profile):
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


# --- RBAC rules of the driver's components (components/states/dra_driver.py binds them) ---------------------------

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
# MPSSupport: the plugin runs an MPS control daemon Deployment per shared claim (GO:manifests/state-dra-driver/0140_*)
PLUGIN_MPS_ROLE_RULES = (rule(["apps"], ["deployments"], ["get", "list", "watch", "create", "update", "patch", "delete"]),)

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


# --- adminAccess claims on every GPU of a node: on by default from Kubernetes 1.34 (DRAAdminAccess beta) --------


def admin_claim_template(
    name: str, namespace: str, request: str, *, labels: dict[str, str], opts: pulumi.ResourceOptions
) -> k8s.resource.v1.ResourceClaimTemplate:
    """A ResourceClaimTemplate for every `gpu.nvidia.com` device of the pod's node with adminAccess (allocationMode
    All), as NVIDIA's DRA-flavoured DCGM and DCGM exporter claim them (GO:manifests/state-dcgm/0400_*,
    GO:manifests/state-dcgm-exporter/0400_*): monitoring access that reserves nothing, so it never competes with a
    workload's claim. Accepted only in a namespace labelled `resource.kubernetes.io/admin-access: "true"`."""
    return k8s.resource.v1.ResourceClaimTemplate(
        name,
        metadata=meta(name, namespace, labels),
        spec=k8s.resource.v1.ResourceClaimTemplateSpecArgs(
            spec=k8s.resource.v1.ResourceClaimSpecArgs(
                devices=k8s.resource.v1.DeviceClaimArgs(
                    requests=[
                        k8s.resource.v1.DeviceRequestArgs(
                            name=request,
                            exactly=k8s.resource.v1.ExactDeviceRequestArgs(
                                device_class_name=GPU_CLASS, allocation_mode="All", admin_access=True
                            ),
                        )
                    ]
                )
            )
        ),
        opts=opts,
    )


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


def crd(kind: str, plural: str, schema: dict[str, Any], *, status: bool, opts: pulumi.ResourceOptions) -> Any:
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


# --- the admission policy on ResourceSlices -----------------------------------------------------------------------


def slice_policy(namespace: str, service_account: str, opts: pulumi.ResourceOptions) -> list[pulumi.Resource]:
    """Each kubelet plugin (ServiceAccount `service_account` in `namespace`) may write the ResourceSlices of its own
    node (or node-independent ones) only, so a compromised node cannot advertise or withdraw another node's GPUs."""
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
                    expression=f"request.userInfo.username == 'system:serviceaccount:{namespace}:{service_account}'",
                )
            ],
            variables=[
                REQUEST_NODE,
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
