"""The cluster, the registry, image versions, and the per-component settings that are no area of their own."""

from __future__ import annotations

import re
from typing import Literal, Optional, Union

from pydantic import Field, StrictBool, field_validator

from components.catalogs import catalog, consts
from components.config import limits
from components.config.hostpaths import _host_path, _not_root_or_system
from components.config.openshift import OpenShift
from components.config.base import (
    K8S_VERSION,
    REGISTRY,
    Toleration,
    _annotation_map,
    _count_or_percent,
    _dns_label,
    _full_driver_version,
    _image_version,
    _label_map,
    _Model,
    _pinned_image,
    dns_subdomain_problem,
    parse_image,
    secret_names,
    shown,
)


# kubeconfig context names are free text; this bounds them to what any real one needs.
MAX_CONTEXT_LENGTH = 1024
CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f]")


def _supported_kubernetes_minors() -> list[int]:
    from kubernetes_validate.utils import all_versions

    return sorted({int(v.split(".")[1]) for v in all_versions()})


class Cluster(_Model):
    name: str
    context: str = Field(min_length=1, max_length=MAX_CONTEXT_LENGTH)
    kubeconfig: Optional[str] = None
    kubernetes_versions: list[str] = Field(min_length=1, max_length=limits.MAX_KUBERNETES_VERSIONS)
    container_runtime: Literal["containerd", "cri-o"] = "containerd"
    namespace: str = "gpu-operator"
    # The distribution, where it changes what the operator renders (the operator detects OpenShift itself).
    platform: Literal["kubernetes", "openshift"] = Field(
        default="kubernetes",
        description="The distribution: openshift renders NVIDIA's OpenShift objects (SCCs, Driver Toolkit builds, proxy); see docs/openshift.md.",
    )
    openshift: Optional[OpenShift] = Field(default=None, description="What the operator reads from an OpenShift cluster (platform openshift only).")

    _names = field_validator("name", "namespace")(_dns_label)

    @field_validator("context")
    @classmethod
    def _printable_context(cls, value: str) -> str:
        # kubectl and the Kubernetes provider take any name a kubeconfig holds (an EKS ARN, user@cluster), but a
        # control character is never one: it is a paste or templating error, and it would garble every log line.
        if CONTROL_CHARACTER.search(value):
            raise ValueError("contains a control character (a newline, tab or escape); a kubeconfig context name is printable text")
        return value

    @field_validator("kubernetes_versions")
    @classmethod
    def _known_versions(cls, versions: list[str]) -> list[str]:
        minors = _supported_kubernetes_minors()
        allowed = ", ".join(f"1.{m}" for m in minors)
        normalised = []
        for version in versions:
            match = K8S_VERSION.fullmatch(version)
            if not match or int(match.group(1)) not in minors:
                raise ValueError(f"{shown(version)} cannot be validated against; allowed values: {allowed}")
            normalised.append(f"1.{match.group(1)}")
        return sorted(set(normalised), key=lambda v: int(v.split(".")[1]))


def registry_problem(value: str) -> Optional[str]:
    """Why `value` is not a registry host[:port][/path] images can be pulled from, or None: the pattern, then the
    reference grammar on an image below it (lower-case, lengths), as the kubelet would parse it."""
    if not REGISTRY.fullmatch(value):
        return f"{shown(value)} is not a registry host[:port][/path]"
    try:
        parse_image(f"{value}/image:tag")
    except ValueError:
        return f"{shown(value)} is not a registry host[:port][/path] an image reference can start with"
    return None


class RegistryCredentials(_Model):
    """A login gpu-stack turns into the pull Secret `gpu-stack-registry-credentials` (type dockerconfigjson), for
    registries that need one: NVIDIA AI Enterprise on nvcr.io (user `$oauthtoken`, an NGC API key), or the
    private registry a vGPU manager image must live in. The password is the secret key `registryPassword`."""

    server: str
    username: str = Field(min_length=1)

    @field_validator("server")
    @classmethod
    def _server(cls, value: str) -> str:
        if "/" in value or registry_problem(value):
            raise ValueError(f"{shown(value)} is not a registry host[:port], e.g. nvcr.io or harbor.internal:8443")
        return value


class Registry(_Model):
    override: Optional[str] = None
    pull_secrets: list[str] = Field(default=[], max_length=limits.MAX_PULL_SECRETS)
    credentials: Optional[RegistryCredentials] = None

    @field_validator("override")
    @classmethod
    def _registry(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and registry_problem(value):
            raise ValueError(f"{registry_problem(value)}, e.g. registry.internal:5000/mirror")
        return value

    _secret_names = field_validator("pull_secrets")(secret_names)


class Versions(_Model):
    """Image tags (or digests) per component; defaults are the GPU Operator v26.7.0 release."""

    driver: str = catalog.IMAGES["driver"][1]
    driver_manager: str = catalog.IMAGES["driverManager"][1]
    toolkit: str = catalog.IMAGES["toolkit"][1]
    device_plugin: str = catalog.IMAGES["devicePlugin"][1]
    gfd: str = catalog.IMAGES["gfd"][1]
    validator: str = catalog.IMAGES["validator"][1]
    dcgm: str = catalog.IMAGES["dcgm"][1]
    dcgm_exporter: str = catalog.IMAGES["dcgmExporter"][1]
    mig_manager: str = catalog.IMAGES["migManager"][1]
    sandbox_device_plugin: str = catalog.IMAGES["sandboxDevicePlugin"][1]
    kata_device_plugin: str = catalog.IMAGES["kataDevicePlugin"][1]
    cc_manager: str = catalog.IMAGES["ccManager"][1]
    vgpu_device_manager: str = catalog.IMAGES["vgpuDeviceManager"][1]
    gds: str = catalog.IMAGES["gds"][1]
    gdrcopy: str = catalog.IMAGES["gdrcopy"][1]
    dra_driver: str = catalog.IMAGES["draDriver"][1]
    nfd_chart: str = catalog.NFD_CHART_VERSION

    _tags = field_validator(
        "driver_manager",
        "toolkit",
        "device_plugin",
        "gfd",
        "validator",
        "dcgm",
        "dcgm_exporter",
        "mig_manager",
        "sandbox_device_plugin",
        "kata_device_plugin",
        "cc_manager",
        "vgpu_device_manager",
        "gds",
        "gdrcopy",
        "dra_driver",
        "nfd_chart",
    )(_image_version)

    _driver_version = field_validator("driver")(_full_driver_version)

    @field_validator("nfd_chart")
    @classmethod
    def _nfd_chart_pinned(cls, value: str) -> str:
        # gpu-stack renders NFD's objects itself, from this one chart version's templates (components/states/nfd.py).
        if value != catalog.NFD_CHART_VERSION:
            raise ValueError(
                f"gpu-stack renders the objects of NFD chart {catalog.NFD_CHART_VERSION} itself, so no other chart "
                "version can be chosen: remove the key"
            )
        return value


def _absolute_path(value: Optional[str]) -> Optional[str]:
    if value is not None and (
        not value.startswith("/")
        or "//" in value
        or value.endswith("/") and value != "/"
        or len(value) > 4096
        or any(c.isspace() or not c.isprintable() for c in value)
    ):
        raise ValueError(f"{shown(value)} is not an absolute, normalised host path (no whitespace, at most 4096)")
    return value


class Toolkit(_Model):
    install_dir: str = "/usr/local/nvidia"
    cdi: StrictBool = True
    runtime_class: str = Field(
        default=consts.DEFAULT_RUNTIME_CLASS,
        description="Name and handler of the RuntimeClass the operand pods (and GPU workloads) run under, and the "
        "runtime the toolkit adds to containerd (`CONTAINERD_RUNTIME_CLASS`): ClusterPolicy's `operator.runtimeClass`. "
        "A DNS label other than `nvidia-cdi` and `nvidia-legacy`, which gpu-stack renders too; another name than "
        "`nvidia` needs containerd (the toolkit names cri-o's runtime `nvidia`).",
        json_schema_extra={"pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63},
    )
    # Overrides for distributions that move the runtime's files (k3s/RKE2: /run/k3s/containerd/containerd.sock).
    runtime_config: Optional[str] = None
    runtime_drop_in_config: Optional[str] = None
    runtime_socket: Optional[str] = None

    _paths = field_validator("install_dir", "runtime_config", "runtime_drop_in_config", "runtime_socket")(_absolute_path)

    @field_validator("runtime_class")
    @classmethod
    def _runtime_class(cls, value: str) -> str:
        # The API server takes a RuntimeClass handler as a DNS-1123 label.
        _dns_label(value)
        if value in consts.CDI_RUNTIME_CLASSES:
            raise ValueError(f"{value!r} is one of the CDI RuntimeClasses gpu-stack renders besides this one "
                             f"({', '.join(consts.CDI_RUNTIME_CLASSES)}); pick another name")
        return value


class DevicePlugin(_Model):
    # The strategy of pools that do not partition their GPUs; a MIG pool's sharing.strategy sets its own.
    mig_strategy: Literal["none", "single", "mixed"] = "single"
    mps_root: str = Field(
        default=consts.DEFAULT_MPS_ROOT,
        description="Host directory of the MPS control daemons (its `shm` below it): mounted by the MPS daemon and "
        "the device plugin, which hands it to MPS clients (`MPS_ROOT`); ClusterPolicy's `devicePlugin.mps.root`. An "
        "absolute, normalised path outside the system directories.",
    )

    @field_validator("mps_root")
    @classmethod
    def _mps_root(cls, value: str) -> str:
        return _not_root_or_system(_host_path(value))


class GpuClientsConfig(_Model):
    name: str = Field(
        description="The ConfigMap (in the stack's namespace) whose `clients.yaml` lists the host GPU clients the "
        "MIG manager stops around a reconfiguration. gpu-stack mounts it at /gpu-clients and no longer renders "
        "`default-gpu-clients`; the ConfigMap is yours to create."
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        problem = dns_subdomain_problem(value)
        if problem:
            raise ValueError(f"{problem}: not a ConfigMap name")
        if value == consts.MIG_DEFAULT_GPU_CLIENTS:
            # gpu-stack owns an object of that name: it would overwrite the user's, or fail to create its own.
            raise ValueError(f"{value!r} is the ConfigMap gpu-stack renders itself; leave gpuClientsConfig unset for it")
        return value


class MigManager(_Model):
    # Lets the MIG manager reboot a node when a MIG mode change needs it (WITH_REBOOT).
    with_reboot: StrictBool = False
    gpu_clients_config: Optional[GpuClientsConfig] = Field(
        default=None,
        description="A ConfigMap of your own in place of NVIDIA's `default-gpu-clients` (the operator's "
        "`migManager.gpuClientsConfig`); unset, gpu-stack renders and mounts the default.",
    )


class Validator(_Model):
    # plugin-validation spawns a vectorAdd pod requesting a GPU when true; NVIDIA's asset ships it off.
    plugin_workload: StrictBool = False


class Validation(_Model):
    mode: Literal["strict", "advisory", "off"] = "strict"
    timeout_seconds: int = Field(default=900, ge=60, le=7200)


class Nfd(_Model):
    mode: Literal["deploy", "existing"] = "deploy"
    # Gone: gpu-stack renders NFD's objects itself (components/states/nfd.py) and pulls no chart. Declared only so
    # an old stack file that sets it is refused by name; never part of the dumped configuration.
    chart_repository: Optional[str] = Field(default=None, exclude=True)

    @field_validator("chart_repository", mode="before")
    @classmethod
    def _repository_gone(cls, value: object) -> None:
        raise ValueError(
            "this key is gone: gpu-stack renders Node Feature Discovery's objects itself (chart "
            f"{catalog.NFD_CHART_VERSION}, pinned) and pulls no chart; remove it (an air-gapped cluster mirrors "
            f"{catalog.NFD_REGISTRY}/{catalog.NFD_IMAGE[0]} under registry.override instead)"
        )


# The node-pools document this program writes is version 4 (components/states/node_labeler.py), and the program runs
# the upgrade coordinator (`coordinate`, components/kit/upgrade_coordinator.py), which grants the budget's slots,
# also for the VM pools' vGPU and VFIO managers, and carries out the drains the agents ask for: the agents' token no
# longer evicts (it runs where tenants' code runs). 0.10.0 is the first agent image that does both. With 0.9.0 or
# 0.8.0 the agents' evictions are refused and their coordinator drains nothing, so a drain would never end (and 0.8.0
# never rolls the managers); older images have no coordinator at all, or refuse the document (before 0.7.0). A stack would apply and then
# never upgrade: refused here, where the tag says so (a digest cannot be judged and
# is taken on trust).
MIN_NODE_AGENT_VERSION = (0, 10, 0)
_SEMVER_TAG = re.compile(r"v?([0-9]+)\.([0-9]+)\.([0-9]+)(?:[-+].*)?")


def image_semver(image: str) -> Optional[tuple[tuple[int, int, int], str]]:
    """The semantic version an image's tag names, and the tag; None for a digest-pinned image or another tag."""
    ref = parse_image(image)
    found = _SEMVER_TAG.fullmatch(ref.tag) if ref.tag and ref.digest is None else None
    if found is None:
        return None
    major, minor, patch = (int(part) for part in found.groups())
    return (major, minor, patch), found.group(0)


def _agent_version(value: Optional[str]) -> Optional[str]:
    if value is None:
        return value
    found = image_semver(value)
    if found and found[0] < MIN_NODE_AGENT_VERSION:
        minimum = ".".join(map(str, MIN_NODE_AGENT_VERSION))
        raise ValueError(
            f"node agent {found[1]} cannot drain a node under this program: its agents evict themselves, which the "
            f"agents' RBAC no longer allows, and older ones have no upgrade coordinator; use {minimum} or later, whose "
            "upgrade coordinator grants the fleet's disruption budget in the order nodes need it and carries out the "
            "drains the agents ask for on their own Node (node_images/node-agent)"
        )
    return value


class NodeAgent(_Model):
    image: Optional[str] = None
    resync_seconds: int = Field(
        default=900,
        ge=10,
        le=3600,
        description=(
            "How often the node agent re-establishes its watch on its own Node and re-reads everything (labels, "
            "annotations, the budget), whether or not anything changed. Node events (kubelet status updates, label "
            "changes) pick up configuration changes sooner, so this is a safety net, not the pace of a change; 900 "
            "keeps a 10,000-node fleet's watch re-establishments near 11 requests/s on the API server."
        ),
    )

    _pinned = field_validator("image")(_pinned_image)
    _new_enough = field_validator("image")(_agent_version)


class DaemonSets(_Model):
    priority_class_name: str = "system-node-critical"
    tolerations: list[Toleration] = Field(
        default=[Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")], max_length=limits.MAX_TOLERATIONS
    )
    update_strategy: Literal["RollingUpdate", "OnDelete"] = "RollingUpdate"
    max_unavailable: Union[int, str] = 1
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}

    # Before pydantic coerces: YAML's true would become the count 1, and 2.0 the count 2.
    _max_unavailable = field_validator("max_unavailable", mode="before")(_count_or_percent)

    @field_validator("priority_class_name")
    @classmethod
    def _priority_class(cls, value: str) -> str:
        if dns_subdomain_problem(value):
            raise ValueError(f"{shown(value)} is not a PriorityClass name (DNS-1123 subdomain, at most 253)")
        return value

    _annotations = field_validator("annotations")(_annotation_map)
    _labels = field_validator("labels")(_label_map)


class Components(_Model):
    """Per-component switches, defaulting as the operator's Helm chart does. The operator validator cannot be
    switched off (it is the node-level gate); the driver follows `driver.mode`; the MPS control daemon is
    deployed exactly when a pool shares by MPS."""

    nfd: StrictBool = True
    node_labeler: StrictBool = True
    toolkit: StrictBool = True
    device_plugin: StrictBool = True
    # Standalone nv-hostengine; off means the exporter runs an embedded one.
    dcgm: StrictBool = False
    dcgm_exporter: StrictBool = True
    gfd: StrictBool = True
    mig_manager: StrictBool = True
    node_status_exporter: StrictBool = False
    # The node agent's NVML drift report; it reads the labeller's pools document, so it follows the labeller.
    node_inventory: StrictBool = True
