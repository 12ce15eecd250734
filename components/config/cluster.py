"""The cluster, the registry, image versions, and the per-component settings that are no area of their own."""

from __future__ import annotations

import re
from typing import Literal, Optional, Union

from pydantic import Field, StrictBool, field_validator

from components.catalogs import catalog
from components.config.base import (
    DNS_SUBDOMAIN,
    K8S_VERSION,
    LABEL_KEY,
    REGISTRY,
    _count_or_percent,
    _dns_label,
    _full_driver_version,
    _image_version,
    _label_map,
    _Model,
    _pinned_image,
)


def _supported_kubernetes_minors() -> list[int]:
    from kubernetes_validate.utils import all_versions

    return sorted({int(v.split(".")[1]) for v in all_versions()})


class Cluster(_Model):
    name: str
    context: str = Field(min_length=1)
    kubeconfig: Optional[str] = None
    kubernetes_versions: list[str] = Field(min_length=1)
    container_runtime: Literal["containerd", "cri-o"] = "containerd"
    namespace: str = "gpu-operator"

    _names = field_validator("name", "namespace")(_dns_label)

    @field_validator("kubernetes_versions")
    @classmethod
    def _known_versions(cls, versions: list[str]) -> list[str]:
        minors = _supported_kubernetes_minors()
        allowed = ", ".join(f"1.{m}" for m in minors)
        normalised = []
        for version in versions:
            match = K8S_VERSION.match(version)
            if not match or int(match.group(1)) not in minors:
                raise ValueError(f"{version!r} cannot be validated against; allowed values: {allowed}")
            normalised.append(f"1.{match.group(1)}")
        return sorted(set(normalised), key=lambda v: int(v.split(".")[1]))


class RegistryCredentials(_Model):
    """A login gpu-stack turns into the pull Secret `gpu-stack-registry-credentials` (type dockerconfigjson), for
    registries that need one: NVIDIA AI Enterprise on nvcr.io (user `$oauthtoken`, an NGC API key), or the
    private registry a vGPU manager image must live in. The password is the secret key `registryPassword`."""

    server: str
    username: str = Field(min_length=1)

    @field_validator("server")
    @classmethod
    def _server(cls, value: str) -> str:
        if not REGISTRY.match(value) or "/" in value:
            raise ValueError(f"{value!r} is not a registry host[:port], e.g. nvcr.io or harbor.internal:8443")
        return value


class Registry(_Model):
    override: Optional[str] = None
    pull_secrets: list[str] = []
    credentials: Optional[RegistryCredentials] = None

    @field_validator("override")
    @classmethod
    def _registry(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not REGISTRY.match(value):
            raise ValueError(f"{value!r} is not a registry host[:port][/path], e.g. registry.internal:5000/mirror")
        return value

    @field_validator("pull_secrets")
    @classmethod
    def _secret_names(cls, names: list[str]) -> list[str]:
        for name in names:
            if not DNS_SUBDOMAIN.match(name):
                raise ValueError(f"{name!r} is not a valid Secret name (DNS-1123 subdomain)")
        return names


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
    if value is not None and (not value.startswith("/") or "//" in value or value.endswith("/") and value != "/"):
        raise ValueError(f"{value!r} is not an absolute, normalised host path")
    return value


class Toolkit(_Model):
    install_dir: str = "/usr/local/nvidia"
    cdi: StrictBool = True
    # Overrides for distributions that move the runtime's files (k3s/RKE2: /run/k3s/containerd/containerd.sock).
    runtime_config: Optional[str] = None
    runtime_drop_in_config: Optional[str] = None
    runtime_socket: Optional[str] = None

    _paths = field_validator("install_dir", "runtime_config", "runtime_drop_in_config", "runtime_socket")(_absolute_path)


class DevicePlugin(_Model):
    # The strategy of pools that do not partition their GPUs; a MIG pool's sharing.strategy sets its own.
    mig_strategy: Literal["none", "single", "mixed"] = "single"


class MigManager(_Model):
    # Lets the MIG manager reboot a node when a MIG mode change needs it (WITH_REBOOT).
    with_reboot: StrictBool = False


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


# The node-pools document this program writes is version 2 (components/kit/node_labeler.py); 0.4.0 is the first
# agent that reads it. An older agent refuses it and changes no label, so a stack would apply cleanly and then never
# label a node: refused here, where the tag says so (a digest cannot be judged and is taken on trust).
MIN_NODE_AGENT_VERSION = (0, 4, 0)
_SEMVER_TAG = re.compile(r"v?(\d+)\.(\d+)\.(\d+)(?:[-+].*)?")


def _agent_version(value: Optional[str]) -> Optional[str]:
    if value is None or "@" in value:
        return value
    found = _SEMVER_TAG.fullmatch(value.rpartition(":")[2])
    if found and tuple(int(part) for part in found.groups()) < MIN_NODE_AGENT_VERSION:
        minimum = ".".join(map(str, MIN_NODE_AGENT_VERSION))
        raise ValueError(
            f"node agent {found.group(0)} cannot read the version-2 node-pools document this program writes; "
            f"use {minimum} or later (node_images/node-agent)"
        )
    return value


class NodeAgent(_Model):
    image: Optional[str] = None
    resync_seconds: int = Field(default=60, ge=10, le=3600)

    _pinned = field_validator("image")(_pinned_image)
    _new_enough = field_validator("image")(_agent_version)


class Toleration(_Model):
    key: Optional[str] = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: Optional[str] = None
    effect: Optional[Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]] = None


class DaemonSets(_Model):
    priority_class_name: str = "system-node-critical"
    tolerations: list[Toleration] = [Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")]
    update_strategy: Literal["RollingUpdate", "OnDelete"] = "RollingUpdate"
    max_unavailable: Union[int, str] = 1
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}

    _max_unavailable = field_validator("max_unavailable")(_count_or_percent)

    @field_validator("priority_class_name")
    @classmethod
    def _priority_class(cls, value: str) -> str:
        if not DNS_SUBDOMAIN.match(value):
            raise ValueError(f"{value!r} is not a PriorityClass name (DNS-1123 subdomain)")
        return value

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, annotations: dict[str, str]) -> dict[str, str]:
        for key in annotations:
            if not LABEL_KEY.match(key):
                raise ValueError(f"{key!r} is not a valid annotation key")
        return annotations

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
