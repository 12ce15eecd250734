"""The whole stack configuration: one pydantic model, validated once, before anything is registered.

Stack files (`stacks/Pulumi.<stack>.yaml`) keep every setting under the `gpu-stack:` namespace, one top-level
key per section (`gpu-stack:cluster`, `gpu-stack:driver`, ...). The Pulumi CLI hands the program each value as
a string (objects as JSON), which is exactly what `load_config` takes, so the real CLI and the offline render go
through the same door.

Errors are collected, not raised one at a time: a user fixing a stack sees every problem with its key path and
the values that would have been accepted.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from dataclasses import dataclass
from typing import Any, Collection, Literal, Mapping, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, SecretStr, StrictBool, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel
from pulumi.errors import RunError
from pulumi.runtime.config import CONFIG, get_config_env, get_config_secret_keys_env, is_config_secret

from components.catalogs import catalog
from components.catalogs import dcgm_metrics
from components.catalogs import mig_catalog
from components.kit import naming
from components.catalogs import vgpu_catalog
from node_images import catalog as node_image_catalog

NAMESPACE = "gpu-stack"

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
IMAGE_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")
K8S_VERSION = re.compile(r"^v?1\.(\d+)(\.\d+)?$")
# NFD reports the OS as ID + VERSION_ID; the driver image tag is their concatenation (fact sheet §4.1).
OS_TAG = re.compile(r"^(ubuntu\d{2}\.\d{2}|rhel\d+|rocky\d+|ol\d+|rhcos\d+\.\d+|sles\d+(\.\d+)?|sl-micro\d+\.\d+|debian\d+)$")
BRANCH = re.compile(r"^\d{3}$")
FULL_DRIVER_VERSION = re.compile(r"^\d{3}\.\d+(\.\d+)?$")
REGISTRY = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?(:\d+)?(/[a-z0-9._-]+)*$")
LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


class ConfigError(RunError):
    """Invalid stack configuration; `problems` holds (key path, message) pairs, all of them.

    A RunError, so the Pulumi CLI prints the message alone and stops before any resource is registered."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = problems
        super().__init__(self.render())

    def render(self) -> str:
        lines = [f"invalid stack configuration ({len(self.problems)} problem(s)):"]
        lines += [f"  {path}: {message}" for path, message in self.problems]
        return "\n".join(lines)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=False, frozen=True)


def _supported_kubernetes_minors() -> list[int]:
    from kubernetes_validate.utils import all_versions

    return sorted({int(v.split(".")[1]) for v in all_versions()})


def _dns_label(value: str) -> str:
    if not DNS_LABEL.match(value) or len(value) > 63:
        raise ValueError(f"{value!r} is not a DNS-1123 label (lower-case letters, digits and '-', at most 63)")
    return value


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


def _image_version(value: str) -> str:
    if not (IMAGE_TAG.match(value) or DIGEST.match(value)):
        raise ValueError(f"{value!r} is neither an image tag nor a sha256:<64 hex> digest")
    if value == "latest":
        raise ValueError("'latest' is not a reviewable version; pin a tag or a digest")
    return value


def _driver_branch(value: Optional[str]) -> Optional[str]:
    if value is not None and not BRANCH.match(value):
        raise ValueError(f"{value!r} is not a driver branch such as 580 or 595")
    return value


def _full_driver_version(value: Optional[str]) -> Optional[str]:
    if value is None or DIGEST.match(value) or FULL_DRIVER_VERSION.match(value):
        return value
    raise ValueError(f"{value!r} is not a driver version such as 595.91.07 (or a sha256 digest)")


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


DRIVER_MODES = ("managed", "host", "precompiled")
KERNEL_MODULE_TYPES = ("auto", "open", "proprietary")


class Driver(_Model):
    mode: Literal["managed", "host", "precompiled"] = "managed"
    # Precompiled images are tagged by branch, not full version (fact sheet §4.3).
    branch: str = catalog.IMAGES["driver"][1].split(".")[0]
    kernel_module_type: Literal["auto", "open", "proprietary"] = "auto"

    _branch = field_validator("branch")(_driver_branch)


class PoolDriver(_Model):
    """A pool's own driver where it differs from `gpu-stack:driver` / `gpu-stack:versions.driver`."""

    mode: Optional[Literal["managed", "host", "precompiled"]] = None
    # Full version (managed) or branch (precompiled), as the stack-wide keys.
    version: Optional[str] = None
    branch: Optional[str] = None
    kernel_module_type: Optional[Literal["auto", "open", "proprietary"]] = None
    # The driver DaemonSet's name when it is not `nvidia-driver-daemonset-<pool>`: the name it already runs under
    # (after a pool rename, or from a stack deployed before names were stable), so that `pulumi up` updates it in
    # place. Pools that name the same DaemonSet share it.
    daemon_set_name: Optional[str] = None

    _version = field_validator("version")(_full_driver_version)
    _branch = field_validator("branch")(_driver_branch)

    @field_validator("daemon_set_name")
    @classmethod
    def _daemonset_name(cls, value: Optional[str]) -> Optional[str]:
        # The name is also the pods' `app` label value: a DNS subdomain of at most 63 characters.
        if value is not None and (not DNS_SUBDOMAIN.match(value) or len(value) > 63):
            raise ValueError(f"{value!r} is not a DaemonSet name usable as a label value (DNS-1123 subdomain, at most 63)")
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


DCGM_FIELD = re.compile(r"^DCGM_FI_[A-Z0-9_]+$")


class DcgmMetric(_Model):
    field: str
    type: Literal["gauge", "counter", "label"]
    help: str = Field(min_length=1)

    @field_validator("field")
    @classmethod
    def _field(cls, value: str) -> str:
        if not DCGM_FIELD.match(value):
            raise ValueError(f"{value!r} is not a DCGM field name such as DCGM_FI_DEV_POWER_VIOLATION")
        return value

    @field_validator("help")
    @classmethod
    def _one_line(cls, value: str) -> str:
        if any(c in value for c in ',"\n'):
            raise ValueError("help text must be one line without commas or quotes (it is a CSV column)")
        return value


class DcgmExporter(_Model):
    # Fields added to gpu-stack's metrics CSV (components/catalogs/dcgm_metrics.py), which already holds what the
    # alerts and the dashboard read.
    extra_metrics: list[DcgmMetric] = []
    internal_traffic_policy: Literal["Cluster", "Local"] = "Cluster"


class MigManager(_Model):
    # Lets the MIG manager reboot a node when a MIG mode change needs it (WITH_REBOOT).
    with_reboot: StrictBool = False


# Prometheus' own duration grammar: units from largest to smallest, each at most once.
PROM_DURATION = re.compile(r"^(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?$")
_DURATION_UNITS_MS = (365 * 86_400_000, 7 * 86_400_000, 86_400_000, 3_600_000, 60_000, 1_000, 1)


def duration_ms(value: str) -> int:
    match = PROM_DURATION.match(value)
    if not value or not match:
        raise ValueError(f"{value!r} is not a Prometheus duration such as 30s, 15m or 1h30m")
    return sum(int(n) * unit for n, unit in zip(match.groups(), _DURATION_UNITS_MS, strict=True) if n)


def _duration(value: str) -> str:
    if duration_ms(value) == 0:
        raise ValueError(f"{value!r} is zero; give a positive duration such as 30s")
    return value


def _label_map(labels: dict[str, str]) -> dict[str, str]:
    for key, value in labels.items():
        if not LABEL_KEY.match(key) or not LABEL_VALUE.match(value):
            raise ValueError(f"{key}={value!r} is not a valid Kubernetes label")
    return labels


class ServiceMonitorSettings(_Model):
    interval: str = "15s"
    scrape_timeout: str = "10s"
    # Labels a Prometheus `serviceMonitorSelector` matches, e.g. release: kube-prometheus-stack.
    additional_labels: dict[str, str] = {}

    _durations = field_validator("interval", "scrape_timeout")(_duration)
    _labels = field_validator("additional_labels")(_label_map)

    @model_validator(mode="after")
    def _timeout_within_interval(self) -> "ServiceMonitorSettings":
        if duration_ms(self.scrape_timeout) > duration_ms(self.interval):
            raise ValueError(f"scrapeTimeout {self.scrape_timeout} is longer than interval {self.interval}; Prometheus refuses that")
        return self


class Alerts(_Model):
    enabled: StrictBool = True
    gpu_temperature_warning_celsius: int = Field(default=85, ge=40, le=120)
    gpu_temperature_critical_celsius: int = Field(default=90, ge=40, le=120)
    framebuffer_used_percent: int = Field(default=95, ge=50, le=100)
    utilization_percent: int = Field(default=95, ge=50, le=100)
    utilization_for: str = "30m"
    validator_not_ready_for: str = "15m"
    # Labels a Prometheus `ruleSelector` matches.
    rule_labels: dict[str, str] = {}

    _durations = field_validator("utilization_for", "validator_not_ready_for")(_duration)
    _labels = field_validator("rule_labels")(_label_map)


class Dashboard(_Model):
    enabled: StrictBool = True
    # The Grafana sidecar's default discovery label.
    labels: dict[str, str] = {"grafana_dashboard": "1"}
    folder: Optional[str] = Field(default=None, min_length=1, max_length=120)

    _labels = field_validator("labels")(_label_map)


class Monitoring(_Model):
    # True when the cluster serves the Prometheus Operator CRDs (monitoring.coreos.com/v1): only then are
    # ServiceMonitors and the PrometheusRule rendered. Declared, not probed, so a preview is the same offline.
    prometheus_operator: StrictBool = False
    service_monitor: ServiceMonitorSettings = ServiceMonitorSettings()
    alerts: Alerts = Alerts()
    dashboard: Dashboard = Dashboard()

    def alerts_on(self, dcgm_exporter: bool) -> bool:
        return self.prometheus_operator and self.alerts.enabled and dcgm_exporter

    def dashboard_on(self, dcgm_exporter: bool) -> bool:
        return self.dashboard.enabled and dcgm_exporter


class KubeVirt(_Model):
    """The cluster's existing KubeVirt CR, whose permittedHostDevices gpu-stack patches."""

    name: str = "kubevirt"
    namespace: str = "kubevirt"
    # false leaves permittedHostDevices to whoever owns the CR (then list the README's entries there yourself).
    permit_host_devices: StrictBool = True

    _names = field_validator("name", "namespace")(_dns_label)


class CcManager(_Model):
    """NVIDIA's confidential-computing manager, deployed in kata mode (`ccManager`, Helm defaults)."""

    enabled: StrictBool = True
    # DEFAULT_CC_MODE for CC-capable GPUs whose node sets no nvidia.com/cc.mode label.
    default_mode: Literal["on", "off", "devtools"] = "on"


class SandboxWorkloads(_Model):
    """How VM pools (`workloadType: vm-passthrough | vm-vgpu`) hand their GPUs over (fact sheet §7)."""

    # kubevirt: the KubeVirt GPU device plugin advertises the GPUs to virt-launcher pods; kata: NVIDIA's sandbox
    # device plugin serves Kata Containers, with the confidential-computing manager beside it.
    mode: Literal["kubevirt", "kata"] = "kubevirt"
    cc_manager: CcManager = CcManager()
    # What the sandbox validator assumes for a node whose nvidia.com/gpu.workload.config label is missing.
    default_workload: Literal["container", "vm-passthrough", "vm-vgpu"] = "container"
    kubevirt: KubeVirt = KubeVirt()


class Validator(_Model):
    # plugin-validation spawns a vectorAdd pod requesting a GPU when true; NVIDIA's asset ships it off.
    plugin_workload: StrictBool = False


class Validation(_Model):
    mode: Literal["strict", "advisory", "off"] = "strict"
    timeout_seconds: int = Field(default=900, ge=60, le=7200)


class Nfd(_Model):
    mode: Literal["deploy", "existing"] = "deploy"
    chart_repository: str = catalog.NFD_CHART_REPOSITORY

    @field_validator("chart_repository")
    @classmethod
    def _repository(cls, value: str) -> str:
        if not re.fullmatch(r"(oci|https)://[A-Za-z0-9.-]+(:\d+)?(/[A-Za-z0-9._-]+)*/?", value):
            raise ValueError(f"{value!r} is not an oci:// or https:// chart repository URL")
        return value


def _pinned_image(value: Optional[str]) -> Optional[str]:
    if value is None or "@sha256:" in value:
        return value
    name, _, tag = value.rpartition(":")
    if not name or "/" in tag or not tag:
        raise ValueError(f"{value!r} has no tag; pin it, e.g. harbor.platform.internal/gpu-stack/node-agent:0.2.0")
    _image_version(tag)
    return value


class NodeAgent(_Model):
    image: Optional[str] = None
    resync_seconds: int = Field(default=60, ge=10, le=3600)

    _pinned = field_validator("image")(_pinned_image)


class Vgpu(_Model):
    """vm-vgpu pools: NVIDIA's vGPU host driver and the vGPU devices each GPU is split into."""

    # The vGPU manager image the team built from NVIDIA's licensed vGPU software (NVIDIA publishes none), with its
    # `-<osTag>` suffix, e.g. harbor.platform.internal/gpu-stack/vgpu-manager:580.95.02-ubuntu22.04.
    manager_image: Optional[str] = None
    # DEFAULT_VGPU_CONFIG: the vgpu-configs entry of a node whose pool names none.
    default_config: str = vgpu_catalog.DEFAULT_CONFIG

    _pinned = field_validator("manager_image")(_pinned_image)

    @field_validator("default_config")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in vgpu_catalog.config_names():
            raise ValueError(f"no vGPU config named {value!r} in default-vgpu-devices-config (e.g. default, A10-12Q)")
        return value


def _count_or_percent(value: Union[int, str]) -> Union[int, str]:
    """An IntOrString budget as the API server takes it: a whole number, or a string only as a percentage. A string
    of digits ("1") is refused there (ValidatePositiveIntOrPercent), so it is refused here, before anything renders."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if isinstance(value, str) and re.fullmatch(r"([1-9][0-9]?|100)%", value):
        return value
    if isinstance(value, str) and re.fullmatch(r"[0-9]+", value):
        raise ValueError(
            f"got the string {value!r}: Kubernetes takes a count as a number ({int(value)}, unquoted) and a string only "
            "as a percentage such as '25%'"
        )
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
    raise ValueError(f"{shown} is not a positive count or a percentage from 1% to 100% such as '25%'")


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


# A label selector as `kubectl drain --pod-selector` parses it: comma-separated equality or set-based terms.
_SELECTOR_TERM = re.compile(
    r"^\s*(?:(?P<exists>!?)(?P<bare>[^\s=!(),]+)|(?P<key>[^\s=!(),]+)\s*(?P<op>==|!=|=)\s*(?P<value>[^\s=!(),]*)"
    r"|(?P<skey>[^\s=!(),]+)\s+(?P<sop>in|notin)\s+\((?P<values>[^()]*)\))\s*$"
)


def label_selector_problem(selector: str) -> Optional[str]:
    """Why `selector` is not a label selector Kubernetes would parse; None when it is."""
    terms, depth, current = [], 0, ""
    for char in selector:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    for term in terms:
        match = _SELECTOR_TERM.match(term)
        if not match:
            return f"{term.strip()!r} is not a selector term (key, !key, key=value, key!=value, key in (a,b), key notin (a,b))"
        key = match.group("bare") or match.group("key") or match.group("skey")
        values = [match.group("value")] if match.group("op") else []
        if match.group("sop"):
            values = [v.strip() for v in match.group("values").split(",")]
        if not LABEL_KEY.match(key):
            return f"{key!r} is not a label key"
        for value in values:
            if not LABEL_VALUE.match(value):
                return f"{value!r} is not a label value"
    return None


class Drain(_Model):
    """k8s-driver-manager's drain settings (fact sheet §5.3); force, timeout and emptyDir deletion also govern the
    GPU-pod eviction that runs before any drain."""

    enabled: StrictBool = False
    force: StrictBool = False
    pod_selector: str = ""
    # 0 waits forever; the operator's upgrade policy defaults to 300.
    timeout_seconds: int = Field(default=300, ge=0, le=86_400)
    delete_empty_dir_data: StrictBool = False

    @field_validator("pod_selector")
    @classmethod
    def _selector(cls, value: str) -> str:
        problem = label_selector_problem(value) if value else None
        if problem:
            raise ValueError(f"{problem}; e.g. 'app=batch,tier!=critical'")
        return value


class Wave(_Model):
    name: str
    pools: list[str] = Field(min_length=1)
    # How long the gate after this wave waits for its nodes' drivers to roll out and validate.
    timeout_seconds: int = Field(default=3600, ge=300, le=86_400)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not DNS_LABEL.match(value) or len(value) > 20:
            raise ValueError(f"{value!r} is not a DNS-1123 label of at most 20 characters")
        return value


class Upgrade(_Model):
    """How a driver change reaches the nodes. `rolling`: the driver DaemonSets roll, at most maxUnavailable nodes
    at a time, each new driver pod's k8s-driver-manager evicting GPU pods (and draining, if enabled) before it
    swaps the driver. `manual`: OnDelete, nothing changes on a node until someone deletes its driver pod."""

    strategy: Literal["rolling", "manual"] = "rolling"
    max_unavailable: Union[int, str] = 1
    gpu_pod_eviction: StrictBool = True
    drain: Drain = Drain()
    # Ordered: each wave's driver DaemonSets change only after the previous wave's nodes validated.
    waves: list[Wave] = []

    _max_unavailable = field_validator("max_unavailable")(_count_or_percent)


SHARING_STRATEGIES = ("none", "time-slicing", "mps", "mig-single", "mig-mixed")
# CUDA MPS serves at most 48 client processes per GPU on Volta and later.
MPS_MAX_REPLICAS = 48
MIG_LAYOUT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$")


class Sharing(_Model):
    strategy: Literal["none", "time-slicing", "mps", "mig-single", "mig-mixed"] = "none"
    replicas: Optional[int] = Field(default=None, ge=2, le=64)
    rename_by_default: Optional[StrictBool] = None
    fail_requests_greater_than_one: Optional[StrictBool] = None
    mig_layout: Optional[str] = None

    @property
    def is_mig(self) -> bool:
        return self.strategy.startswith("mig-")

    @property
    def mig_strategy(self) -> Optional[str]:
        return self.strategy[len("mig-"):] if self.is_mig else None


@functools.lru_cache(maxsize=1)
def node_images() -> node_image_catalog.Catalog:
    """node_images/catalog.yaml, read once per process."""
    return node_image_catalog.load_catalog()


class NodePool(_Model):
    name: str
    node_selector: dict[str, str]
    gpu_model: str
    # Required unless nodeImage names a catalog entry, which carries the OS.
    os: Optional[str] = None
    # An entry of node_images/catalog.yaml: the OS, kernel and architecture the pool's nodes boot.
    node_image: Optional[str] = None
    workload_type: Literal["container", "vm-passthrough", "vm-vgpu"] = "container"
    driver: PoolDriver = PoolDriver()
    sharing: Sharing = Sharing()
    # vm-vgpu pools: the vgpu-configs entry their GPUs are split by (label nvidia.com/vgpu.config).
    vgpu_config: Optional[str] = None
    # Container pools: who hands out the GPUs, the device plugin (nvidia.com/gpu) or NVIDIA's DRA driver
    # (ResourceClaims).
    allocation: Literal["device-plugin", "dra"] = "device-plugin"
    # How many nodes the pool has: the validation gates fail while fewer are validated, and a wave's timeout is
    # checked against how long its nodes take to roll at the upgrade's maxUnavailable.
    expected_nodes: Optional[int] = Field(default=None, ge=0, le=100_000)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not DNS_LABEL.match(value) or len(value) > 40:
            raise ValueError(f"{value!r} is not a DNS-1123 label of at most 40 characters")
        return value

    @field_validator("node_selector")
    @classmethod
    def _selector(cls, selector: dict[str, str]) -> dict[str, str]:
        for key, value in selector.items():
            if not LABEL_KEY.match(key) or not LABEL_VALUE.match(value):
                raise ValueError(f"{key}={value!r} is not a valid label selector term")
        return selector

    @field_validator("gpu_model")
    @classmethod
    def _model(cls, value: str) -> str:
        if value not in catalog.GPU_MODELS:
            raise ValueError(f"unknown GPU model {value!r}; allowed values: {', '.join(catalog.GPU_MODELS)}")
        return value

    @field_validator("os")
    @classmethod
    def _os(cls, value: str) -> str:
        if not OS_TAG.match(value):
            raise ValueError(
                f"{value!r} is not an OS tag as NFD reports it (ID + VERSION_ID), e.g. ubuntu22.04, ubuntu24.04, rhel9"
            )
        return value

    @field_validator("node_image")
    @classmethod
    def _node_image(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and value not in node_images().names:
            known = ", ".join(node_images().names)
            raise ValueError(f"unknown node image {value!r}; entries of node_images/catalog.yaml: {known}")
        return value

    @property
    def model(self) -> catalog.GpuModel:
        return catalog.GPU_MODELS[self.gpu_model]

    @property
    def image(self) -> Optional[node_image_catalog.NodeImage]:
        return node_images().get(self.node_image) if self.node_image else None

    @property
    def os_tag(self) -> str:
        image = self.image
        # Empty only while load_config is rejecting a pool that has neither.
        return image.os_tag if image is not None else self.os or ""


@dataclass(frozen=True)
class PoolDriverPlan:
    """The driver a pool's nodes run once stack defaults and the pool's own `driver` keys are combined."""

    mode: str
    version: str  # managed: full version or digest
    branch: str  # precompiled
    kernel_module_type: str
    os_tag: str
    node_image: Optional[node_image_catalog.NodeImage]
    # The driver DaemonSet that serves the pool (components/kit/naming.py).
    daemonset: str

    @property
    def kernel(self) -> Optional[str]:
        return self.node_image.kernel if self.mode == "precompiled" and self.node_image else None


class Rdma(_Model):
    """GPUDirect RDMA: the driver pods build and keep loaded nvidia-peermem against the node's MOFED."""

    enabled: StrictBool = False
    # MOFED installed on the host (peermem builds against /usr/src) rather than by NVIDIA's Network Operator
    # (/run/mellanox/drivers).
    use_host_mofed: StrictBool = False


class GpuDirect(_Model):
    """Stack-wide, as ClusterPolicy's `gds`, `gdrcopy` and `driver.rdma` are: every driver gpu-stack deploys gets
    the sidecars, and the validator checks the modules on every container node (host-driver nodes must have them
    loaded by the host)."""

    gds: StrictBool = False
    gdrcopy: StrictBool = False
    rdma: Rdma = Rdma()

    @property
    def validated_components(self) -> tuple[str, ...]:
        """The validator components (COMPONENT=...) that check the modules, in the operator's order."""
        wanted = (("nvidia-fs", self.gds), ("gdrcopy", self.gdrcopy), ("nvidia-peermem", self.rdma.enabled))
        return tuple(component for component, on in wanted if on)


def gds_needs_open_modules(gds_version: str) -> bool:
    """A digest hides the release; every nvidia-fs NVIDIA still publishes needs the open modules, so assume so."""
    numbers = re.findall(r"\d+", gds_version.split("-")[0])
    if gds_version.startswith("sha256:") or len(numbers) < 3:
        return True
    return tuple(int(n) for n in numbers[:3]) >= catalog.GDS_MIN_VERSION_FOR_OPEN_MODULES


class Dra(_Model):
    """NVIDIA's DRA driver for GPUs, on the pools with `allocation: dra`."""

    # Multi-node NVLink (IMEX) ComputeDomains: the controller, CRDs and the kubelet plugin's second container.
    compute_domains: StrictBool = False


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


class StackConfig(_Model):
    cluster: Cluster
    registry: Registry = Registry()
    versions: Versions = Versions()
    driver: Driver = Driver()
    toolkit: Toolkit = Toolkit()
    device_plugin: DevicePlugin = DevicePlugin()
    validator: Validator = Validator()
    validation: Validation = Validation()
    nfd: Nfd = Nfd()
    node_agent: NodeAgent = NodeAgent()
    daemonsets: DaemonSets = DaemonSets()
    dcgm_exporter: DcgmExporter = DcgmExporter()
    mig_manager: MigManager = MigManager()
    monitoring: Monitoring = Monitoring()
    # Custom MIG layouts (name -> MIG profile -> instances per GPU), usable as nodePools[].sharing.migLayout.
    mig_layouts: dict[str, dict[str, int]] = {}
    node_pools: list[NodePool] = Field(min_length=1)
    components: Components = Components()
    upgrade: Upgrade = Upgrade()
    sandbox_workloads: SandboxWorkloads = SandboxWorkloads()
    vgpu: Vgpu = Vgpu()
    gpudirect: GpuDirect = GpuDirect()
    dra: Dra = Dra()
    # Only ever a Pulumi secret (`pulumi config set --secret`); load_config refuses a plain value.
    registry_password: Optional[SecretStr] = None

    @field_validator("mig_layouts")
    @classmethod
    def _layout_names(cls, layouts: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
        for name in layouts:
            if not MIG_LAYOUT_NAME.match(name):
                raise ValueError(f"{name!r} is not a usable layout name (a node label value: a-z, 0-9, '-', '.')")
        return layouts

    def pools_of(self, *workload_types: str) -> list[NodePool]:
        return [p for p in self.node_pools if p.workload_type in workload_types]

    @property
    def container_pools(self) -> list[NodePool]:
        return [p for p in self.node_pools if p.workload_type == "container"]

    @property
    def dra_pools(self) -> list[NodePool]:
        return [p for p in self.container_pools if p.allocation == "dra"]

    @property
    def gds_forces_open_modules(self) -> bool:
        return self.gpudirect.gds and gds_needs_open_modules(self.versions.gds)

    def pool_driver(self, pool: NodePool) -> PoolDriverPlan:
        own = pool.driver
        module_type = own.kernel_module_type or self.driver.kernel_module_type
        if module_type == "auto" and self.gds_forces_open_modules:
            # The operator resolves `auto` the same way for NVIDIADriver (IsOpenKernelModulesRequired).
            module_type = "open"
        return PoolDriverPlan(
            mode=own.mode or self.driver.mode,
            version=own.version or self.versions.driver,
            branch=own.branch or self.driver.branch,
            kernel_module_type=module_type,
            os_tag=pool.os_tag,
            node_image=pool.image,
            daemonset=naming.driver_daemonset(pool.name, own.daemon_set_name, per_pool=self.components.node_labeler),
        )

    @property
    def driver_pools(self) -> list[NodePool]:
        """Container pools whose driver gpu-stack deploys (managed or precompiled)."""
        return [p for p in self.container_pools if self.pool_driver(p).mode != "host"]

    @property
    def shared_pools(self) -> list[NodePool]:
        """Pools whose device plugin needs a config of its own (any sharing, MIG included). DRA pools keep theirs:
        GFD reads the same config for its MIG strategy."""
        return [p for p in self.node_pools if p.sharing.strategy != "none"]

    def pools_sharing_by(self, *strategies: str) -> list[NodePool]:
        return [p for p in self.node_pools if p.sharing.strategy in strategies]


# --- loading ------------------------------------------------------------------------------------------------


def _parse_value(raw: str) -> Any:
    """The CLI passes objects and lists as JSON text and scalars as plain text."""
    try:
        return json.loads(raw)
    except (TypeError, json.JSONDecodeError):
        return raw


def _fields_by_alias(model: type[BaseModel]) -> dict[str, Any]:
    return {(f.alias or name): f for name, f in model.model_fields.items()}


def _model_at(loc: tuple) -> Optional[type[BaseModel]]:
    """Walk StackConfig's fields along a pydantic error location to the model that owns the last key."""
    model: Any = StackConfig
    for part in loc:
        if isinstance(part, int):
            continue
        fields = _fields_by_alias(model) if isinstance(model, type) and issubclass(model, BaseModel) else {}
        if part not in fields:
            return None
        annotation = fields[part].annotation
        model = _unwrap(annotation)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    args = getattr(annotation, "__args__", None)
    if not args:
        return annotation
    for arg in args:
        inner = _unwrap(arg)
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            return inner
    return annotation


def _path(loc: tuple) -> str:
    text = NAMESPACE + ":"
    for i, part in enumerate(loc):
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += part if i == 0 else f".{part}"
    return text


def _unknown_key_message(key: str, allowed: list[str]) -> str:
    suggestion = difflib.get_close_matches(key, allowed, n=1)
    hint = f" (did you mean '{suggestion[0]}'?)" if suggestion else ""
    return f"unknown key '{key}'{hint}; allowed keys: {', '.join(allowed)}"


def _describe(error: dict) -> str:
    kind = error["type"]
    value = error.get("input")
    if kind == "literal_error":
        allowed = error["ctx"]["expected"].replace(" or ", ", ")
        return f"got {value!r}; allowed values: {allowed}"
    if kind == "missing":
        return "required key is missing"
    if kind == "value_error":
        return str(error["ctx"]["error"])
    if kind in ("bool_type", "bool_parsing"):
        return f"got {value!r}; allowed values: true, false"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"got {value!r}; expected a whole number"
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        return f"got {value!r}; {error['msg'].lower()}"
    if kind in ("too_short", "too_long"):
        return f"{error['msg'].lower()}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"got {type(value).__name__} {value!r}; expected a mapping of keys"
    if kind == "list_type":
        return f"got {type(value).__name__} {value!r}; expected a list"
    if kind == "string_type":
        return f"got {type(value).__name__} {value!r}; expected a string"
    return f"{error['msg']} (got {value!r})"


def _translate(error: dict) -> tuple[str, str]:
    loc = tuple(part for part in error["loc"] if not (isinstance(part, str) and ("[" in part or part.startswith("function-"))))
    if error["type"] == "extra_forbidden":
        owner = _model_at(loc[:-1])
        allowed = sorted(_fields_by_alias(owner)) if owner else []
        return _path(loc), _unknown_key_message(str(loc[-1]), allowed)
    return _path(loc), _describe(error)


def _sharing_checks(cfg: StackConfig, pool: NodePool, here: str) -> list[tuple[str, str]]:
    """One pool's sharing block: which keys each strategy takes, and what it needs deployed."""
    sharing = pool.sharing
    strategy = sharing.strategy
    where = f"{here}.sharing"
    problems: list[tuple[str, str]] = []
    if strategy == "none":
        return [(f"{where}.{key}", "only allowed with a sharing.strategy other than 'none'") for key in _set_keys(sharing)]
    if pool.workload_type != "container":
        return [(f"{where}.strategy", f"sharing applies to container pools only, not {pool.workload_type!r}")]
    if not cfg.components.device_plugin:
        problems.append((f"{where}.strategy", f"{strategy} needs gpu-stack:components.devicePlugin: true"))
    takes = {
        "time-slicing": {"replicas", "renameByDefault", "failRequestsGreaterThanOne"},
        "mps": {"replicas", "renameByDefault"},
        "mig-single": {"migLayout"},
        "mig-mixed": {"migLayout"},
    }[strategy]
    for key in sorted(_set_keys(sharing) - takes):
        problems.append((f"{where}.{key}", f"not used by strategy {strategy!r}; it takes: {', '.join(sorted(takes))}"))
    if strategy in ("time-slicing", "mps"):
        limit = MPS_MAX_REPLICAS if strategy == "mps" else 64
        if sharing.replicas is None:
            problems.append((f"{where}.replicas", f"required when sharing.strategy is {strategy!r} (2..{limit})"))
        elif sharing.replicas > limit:
            problems.append((f"{where}.replicas", f"got {sharing.replicas}; MPS serves at most {limit} clients per GPU"))
    if strategy == "mps" and not cfg.components.gfd:
        problems.append(
            (f"{where}.strategy", "mps needs gpu-stack:components.gfd: true (GFD labels nodes nvidia.com/mps.capable=true)")
        )
    if sharing.is_mig:
        problems += _mig_checks(cfg, pool, here)
    return problems


def _set_keys(sharing: Sharing) -> set[str]:
    return _set_aliases(sharing) - {"strategy"}


def _mig_checks(cfg: StackConfig, pool: NodePool, here: str) -> list[tuple[str, str]]:
    where = f"{here}.sharing"
    if not pool.model.mig_capable:
        capable = [name for name, m in catalog.GPU_MODELS.items() if m.mig_capable]
        return [(f"{where}.strategy", f"{pool.gpu_model} has no MIG support; MIG-capable models: {', '.join(capable)}")]
    problems: list[tuple[str, str]] = []
    if not cfg.components.mig_manager:
        problems.append((f"{where}.strategy", "MIG layouts are applied by the MIG manager: set gpu-stack:components.migManager: true"))
    name = pool.sharing.mig_layout
    if name is None:
        usable = _usable_layouts(pool, cfg.mig_layouts)
        return problems + [(f"{where}.migLayout", f"required with {pool.sharing.strategy!r}; usable layouts for {pool.gpu_model}: {', '.join(usable)}")]
    layout, reasons = mig_catalog.resolve_layout(pool.gpu_model, name, cfg.mig_layouts)
    problems += [(f"{where}.migLayout", reason) for reason in reasons]
    if layout is None:
        return problems
    if not layout.devices:
        problems.append(
            (
                f"{where}.migLayout",
                f"{name!r} creates no MIG devices, so the pool would offer nothing to request; pick a layout with MIG "
                f"devices ({', '.join(_usable_layouts(pool, cfg.mig_layouts))}) or sharing.strategy 'none' for whole GPUs",
            )
        )
    elif pool.sharing.mig_strategy == "single":
        reason = mig_catalog.single_strategy_problem(layout)
        if reason:
            problems.append((f"{where}.migLayout", reason))
    return problems


def _usable_layouts(pool: NodePool, custom: dict[str, dict[str, int]]) -> list[str]:
    """Layouts that fit the pool's GPU, create MIG devices, and suit the pool's MIG strategy."""
    usable = []
    for name in mig_catalog.fitting_layouts(pool.gpu_model, custom):
        layout, _ = mig_catalog.resolve_layout(pool.gpu_model, name, custom)
        if layout is None or not layout.devices:
            continue
        if pool.sharing.mig_strategy == "single" and mig_catalog.single_strategy_problem(layout):
            continue
        usable.append(name)
    return usable


def _monitoring_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    monitoring = cfg.monitoring
    problems: list[tuple[str, str]] = []
    here = f"{NAMESPACE}:monitoring"
    alerts = monitoring.alerts
    if alerts.gpu_temperature_warning_celsius >= alerts.gpu_temperature_critical_celsius:
        problems.append(
            (
                f"{here}.alerts.gpuTemperatureWarningCelsius",
                f"{alerts.gpu_temperature_warning_celsius} must be below gpuTemperatureCriticalCelsius "
                f"({alerts.gpu_temperature_critical_celsius})",
            )
        )
    # Defaults follow what the cluster has; only an explicit `enabled: true` that cannot be honoured is an error.
    asked_alerts = "enabled" in alerts.model_fields_set and alerts.enabled
    asked_dashboard = "enabled" in monitoring.dashboard.model_fields_set and monitoring.dashboard.enabled
    if asked_alerts and not monitoring.prometheus_operator:
        problems.append(
            (f"{here}.alerts.enabled", "alerts are a PrometheusRule: set monitoring.prometheusOperator: true, or alerts.enabled: false")
        )
    if not cfg.components.dcgm_exporter:
        for key, asked in (("alerts.enabled", asked_alerts), ("dashboard.enabled", asked_dashboard)):
            if asked:
                problems.append((f"{here}.{key}", "reads DCGM exporter metrics: set gpu-stack:components.dcgmExporter: true, or turn this off"))
    builtin = {m.field for m in dcgm_metrics.DEFAULT_METRICS}
    seen: set[str] = set()
    for i, metric in enumerate(cfg.dcgm_exporter.extra_metrics):
        where = f"{NAMESPACE}:dcgmExporter.extraMetrics[{i}].field"
        if metric.field in builtin:
            problems.append((where, f"{metric.field} is already exported by default"))
        elif metric.field in seen:
            problems.append((where, f"{metric.field} is listed twice"))
        seen.add(metric.field)
    return problems


def _mig_layout_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    used = {p.sharing.mig_layout for p in cfg.node_pools if p.sharing.is_mig}
    problems = []
    for name in cfg.mig_layouts:
        if name.startswith("all-"):
            problems.append((f"{NAMESPACE}:migLayouts.{name}", "names starting 'all-' belong to the built-in layouts; rename it"))
        elif name not in used:
            problems.append((f"{NAMESPACE}:migLayouts.{name}", "used by no nodePools[].sharing.migLayout; remove it or use it"))
    return problems


def _gpudirect_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    gpudirect = cfg.gpudirect
    problems: list[tuple[str, str]] = []
    if gpudirect.rdma.use_host_mofed and not gpudirect.rdma.enabled:
        problems.append((f"{NAMESPACE}:gpudirect.rdma.useHostMofed", "only used with gpudirect.rdma.enabled: true"))
    precompiled = [p.name for p in cfg.driver_pools if cfg.pool_driver(p).mode == "precompiled"]
    # NVIDIA builds nvidia-fs and gdrdrv on the node against the driver's sources, which precompiled images lack
    # (the operator refuses the same combination).
    for key, on in (("gds", gpudirect.gds), ("gdrcopy", gpudirect.gdrcopy)):
        if on and precompiled:
            problems.append(
                (
                    f"{NAMESPACE}:gpudirect.{key}",
                    f"cannot be built against precompiled drivers (pools {', '.join(precompiled)}); use driver mode "
                    "'managed' for these pools or turn it off",
                )
            )
    if cfg.gds_forces_open_modules:
        proprietary = [p.name for p in cfg.driver_pools if cfg.pool_driver(p).kernel_module_type == "proprietary"]
        if proprietary:
            problems.append(
                (
                    f"{NAMESPACE}:gpudirect.gds",
                    f"nvidia-fs {cfg.versions.gds} loads only with the open kernel modules (from 2.17.5), but pools "
                    f"{', '.join(proprietary)} set kernelModuleType 'proprietary'; allowed values with GDS: auto, open",
                )
            )
    if gpudirect.validated_components and not cfg.container_pools:
        problems.append((f"{NAMESPACE}:gpudirect", "GPUDirect serves container pools, and this stack has none; remove it"))
    return problems


# resource.k8s.io/v1 and adminAccess (which the DRA validator's claim needs) are on by default from 1.34.
DRA_MIN_KUBERNETES_MINOR = 34


def _dra_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    for i, pool in enumerate(cfg.node_pools):
        here = f"{NAMESPACE}:nodePools[{i}]"
        if pool.allocation != "dra":
            continue
        if pool.workload_type != "container":
            problems.append((f"{here}.allocation", f"only container pools allocate GPUs to pods, not {pool.workload_type!r}; remove it"))
        elif pool.sharing.strategy in ("time-slicing", "mps"):
            problems.append(
                (
                    f"{here}.sharing.strategy",
                    f"{pool.sharing.strategy!r} configures the device plugin, which DRA pools do not run; with DRA a "
                    "claim asks for sharing in its GpuConfig; allowed values here: none, mig-single, mig-mixed",
                )
            )
    if not cfg.dra_pools:
        if "compute_domains" in cfg.dra.model_fields_set:
            problems.append((f"{NAMESPACE}:dra", "no pool has allocation: dra; remove this block"))
        return problems
    old = [v for v in cfg.cluster.kubernetes_versions if int(v.split(".")[1]) < DRA_MIN_KUBERNETES_MINOR]
    if old:
        problems.append(
            (
                f"{NAMESPACE}:cluster.kubernetesVersions",
                f"DRA pools need Kubernetes 1.{DRA_MIN_KUBERNETES_MINOR} or later (got {', '.join(old)}): before it "
                "resource.k8s.io is served only as a beta API behind the DynamicResourceAllocation feature gate, and "
                "the DRA validator's adminAccess claim is off by default",
            )
        )
    if not cfg.components.node_labeler:
        problems.append(
            (f"{NAMESPACE}:components.nodeLabeler", "DRA pools take the dra-driver deploy label from the node labeller: set it to true")
        )
    return problems


def _pool_driver_checks(cfg: StackConfig, pool: NodePool, here: str) -> list[tuple[str, str]]:
    """A pool's OS, node image and driver keys against its effective driver mode."""
    problems: list[tuple[str, str]] = []
    image = pool.image
    if image is None and pool.os is None:
        problems.append((f"{here}.os", "required unless nodeImage names an entry of node_images/catalog.yaml"))
    elif image is not None and pool.os is not None and pool.os != image.os_tag:
        problems.append((f"{here}.os", f"{pool.os!r} contradicts nodeImage {image.name!r} ({image.os_tag}); remove os"))
    own = pool.driver
    problems += _vgpu_checks(cfg, pool, here)
    if pool.workload_type == "vm-passthrough" and not any(
        catalog.kubevirt_resource_name(pci_id) for pci_id in pool.model.pci_device_ids
    ):
        named = sorted({m for m, model in catalog.GPU_MODELS.items() if any(catalog.kubevirt_resource_name(i) for i in model.pci_device_ids)})
        problems.append(
            (
                f"{here}.gpuModel",
                f"gpu-stack knows no KubeVirt resource name for the {pool.gpu_model}'s PCI ids, so it cannot permit "
                f"it to VMs; vm-passthrough models: {', '.join(named)}",
            )
        )
    if pool.workload_type != "container":
        if own.model_fields_set:
            problems.append((f"{here}.driver", f"{pool.workload_type} pools take no container driver; remove this block"))
        return problems
    plan = cfg.pool_driver(pool)
    takes = {
        "managed": {"mode", "version", "kernelModuleType", "daemonSetName"},
        "precompiled": {"mode", "branch", "kernelModuleType", "daemonSetName"},
        "host": {"mode"},
    }[plan.mode]
    for key in sorted(_set_aliases(own) - takes):
        problems.append((f"{here}.driver.{key}", f"not used by driver mode {plan.mode!r}; it takes: {', '.join(sorted(takes))}"))
    if plan.mode == "host":
        return problems
    support = pool.model.driver
    module_problem = support.module_problem(plan.kernel_module_type)
    chosen_type = own.kernel_module_type or cfg.driver.kernel_module_type
    if module_problem and chosen_type == "auto" and cfg.gds_forces_open_modules:
        problems.append(
            (
                f"{NAMESPACE}:gpudirect.gds",
                f"nvidia-fs {cfg.versions.gds} loads only with the open kernel modules, and the {pool.gpu_model} "
                f"({pool.model.architecture}) {module_problem}; move pool {pool.name!r} to a stack without GDS",
            )
        )
    elif module_problem:
        key = f"{here}.driver.kernelModuleType" if own.kernel_module_type else f"{NAMESPACE}:driver.kernelModuleType"
        problems.append((key, f"{pool.gpu_model} ({pool.model.architecture}) {module_problem}"))
    branch = plan.branch if plan.mode == "precompiled" else plan.version.split(".")[0]
    branch_problem = support.branch_problem(int(branch)) if branch.isdigit() else None
    if branch_problem:
        if plan.mode == "precompiled":
            key = f"{here}.driver.branch" if own.branch else f"{NAMESPACE}:driver.branch"
        else:
            key = f"{here}.driver.version" if own.version else f"{NAMESPACE}:versions.driver"
        problems.append((key, f"{pool.gpu_model} {branch_problem}; this pool's driver is branch {branch}"))
    if plan.mode == "precompiled":
        if image is None:
            problems.append(
                (f"{here}.nodeImage", f"required with driver mode 'precompiled' (one image per kernel); entries: {', '.join(node_images().names)}")
            )
        else:
            reason = node_image_catalog.unpublished_reason(image, plan.branch)
            if reason is not None and image.private_image is None:
                tag = node_image_catalog.precompiled_tag(image, plan.branch)
                problems.append(
                    (
                        f"{here}.nodeImage",
                        f"NVIDIA publishes no precompiled driver {tag} ({reason}); build it with "
                        f"node_images/driver-precompiled/build.sh and set privateImage on {image.name!r} in "
                        "node_images/catalog.yaml, or use driver mode 'managed'",
                    )
                )
    return problems


def _vgpu_checks(cfg: StackConfig, pool: NodePool, here: str) -> list[tuple[str, str]]:
    if pool.workload_type != "vm-vgpu":
        if pool.vgpu_config is not None:
            return [(f"{here}.vgpuConfig", f"only vm-vgpu pools split GPUs into vGPUs, not {pool.workload_type!r}; remove it")]
        return []
    problems: list[tuple[str, str]] = []
    if cfg.vgpu.manager_image is None:
        problems.append(
            (f"{NAMESPACE}:vgpu.managerImage", "required with a vm-vgpu pool: NVIDIA publishes no vGPU manager image; build one and pin it")
        )
    if cfg.sandbox_workloads.mode != "kubevirt":
        problems.append((f"{here}.workloadType", "vGPUs are served to KubeVirt VMs: set gpu-stack:sandboxWorkloads.mode: kubevirt"))
    config = pool.vgpu_config or cfg.vgpu.default_config
    problem = vgpu_catalog.config_problem(config, pool.gpu_model)
    if problem:
        key = f"{here}.vgpuConfig" if pool.vgpu_config else f"{here}.gpuModel"
        problems.append((key, problem))
    return problems


def _set_aliases(model: BaseModel) -> set[str]:
    fields = type(model).model_fields
    return {fields[name].alias or name for name in model.model_fields_set}


def _upgrade_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    upgrade = cfg.upgrade
    here = f"{NAMESPACE}:upgrade"
    problems: list[tuple[str, str]] = []
    if not upgrade.waves:
        return _gate_timeout_checks(cfg)
    if upgrade.strategy != "rolling":
        problems.append((f"{here}.waves", "waves gate a rolling update; with strategy 'manual' nothing rolls: use 'rolling'"))
    if not cfg.components.node_labeler:
        problems.append((f"{here}.waves", "waves select nodes by the gpu-stack/pool label: set gpu-stack:components.nodeLabeler: true"))
    if cfg.validation.mode == "off":
        problems.append((f"{here}.waves", "a wave is done when its nodes validated: gpu-stack:validation.mode cannot be 'off'"))
    driver_pools = [p.name for p in cfg.driver_pools]
    all_pools = [p.name for p in cfg.node_pools]
    seen_waves: set[str] = set()
    wave_of: dict[str, str] = {}
    for i, wave in enumerate(upgrade.waves):
        where = f"{here}.waves[{i}]"
        if wave.name in seen_waves:
            problems.append((f"{where}.name", f"duplicate wave name {wave.name!r}"))
        seen_waves.add(wave.name)
        for j, name in enumerate(wave.pools):
            if name not in all_pools:
                problems.append((f"{where}.pools[{j}]", f"unknown pool {name!r}; pools with a deployed driver: {', '.join(driver_pools)}"))
            elif name not in driver_pools:
                problems.append((f"{where}.pools[{j}]", f"pool {name!r} gets no driver DaemonSet (host driver or VM pool); remove it"))
            elif name in wave_of:
                problems.append((f"{where}.pools[{j}]", f"pool {name!r} is already in wave {wave_of[name]!r}; a pool upgrades once"))
            else:
                wave_of[name] = wave.name
    missing = [name for name in driver_pools if name not in wave_of]
    if missing:
        problems.append((f"{here}.waves", f"pools in no wave: {', '.join(missing)}; every pool with a deployed driver needs one"))
    wave_of_daemonset: dict[str, tuple[str, str]] = {}
    for pool in cfg.driver_pools:
        daemonset, wave = cfg.pool_driver(pool).daemonset, wave_of.get(pool.name)
        if wave is None:
            continue
        seen = wave_of_daemonset.setdefault(daemonset, (wave, pool.name))
        if seen[0] != wave:
            problems.append(
                (
                    f"{here}.waves",
                    f"pools {seen[1]!r} (wave {seen[0]!r}) and {pool.name!r} (wave {wave!r}) share driver DaemonSet "
                    f"{daemonset!r}, which rolls in one wave: put them in the same wave",
                )
            )
    if not problems:
        problems += _gate_timeout_checks(cfg)
    return problems


def _driver_flavour(cfg: StackConfig, pool: NodePool) -> tuple:
    """What one driver DaemonSet can serve: one image and module type per OS and kernel, one readiness rule."""
    plan = cfg.pool_driver(pool)
    version = plan.branch if plan.mode == "precompiled" else plan.version
    return plan.mode, version, plan.kernel_module_type, plan.os_tag, plan.kernel, pool.allocation


def _driver_daemonset_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    """Pools that name one driver DaemonSet must be able to share it; without the node labeller one serves all."""
    problems: list[tuple[str, str]] = []
    index = {p.name: i for i, p in enumerate(cfg.node_pools)}
    by_daemonset: dict[str, list[NodePool]] = {}
    for pool in cfg.driver_pools:
        by_daemonset.setdefault(cfg.pool_driver(pool).daemonset, []).append(pool)
    if len(by_daemonset) > 1 and not cfg.components.node_labeler:
        problems.append(
            (
                f"{NAMESPACE}:components.nodeLabeler",
                f"the driver pools need {len(by_daemonset)} driver DaemonSets ({', '.join(sorted(by_daemonset))}), each "
                "selecting its nodes by the gpu-stack/pool label the node labeller writes: set it to true",
            )
        )
    for name, pools in by_daemonset.items():
        first = pools[0]
        for other in pools[1:]:
            if _driver_flavour(cfg, other) != _driver_flavour(cfg, first):
                problems.append(
                    (
                        f"{NAMESPACE}:nodePools[{index[other.name]}].driver.daemonSetName",
                        f"pools {first.name!r} and {other.name!r} share driver DaemonSet {name!r} but run different drivers "
                        "(mode, version, module type, OS, kernel or allocation): one DaemonSet runs one image; give one "
                        "of them a daemonSetName of its own",
                    )
                )
    return problems


# The least time one node's driver swap takes before its gate can count it, the driver build itself not counted:
# k8s-driver-manager waits for the operands to stop and unloads the modules (§5.3), the driver container's startup
# probe starts after its initial delay (60 s managed, 5 s precompiled, GO:internal/state/driver.go), then the
# validator's driver, toolkit, cuda and plugin checks run (§3.2).
MIN_NODE_SWAP_SECONDS = {"managed": 30 + 10 + 60 + 60, "precompiled": 30 + 10 + 5 + 60}


def _budget_nodes(max_unavailable: Union[int, str], nodes: int) -> int:
    if isinstance(max_unavailable, int):
        return max_unavailable
    return max(1, -(-nodes * int(max_unavailable[:-1]) // 100))


def rollout_floor_seconds(cfg: StackConfig, pools: list[NodePool]) -> Optional[tuple[int, str]]:
    """The least time the driver DaemonSets of `pools` take to roll over their declared nodes at the upgrade's
    maxUnavailable (each DaemonSet rolls its own pools, all of them at once), and the slowest pool; None when no
    pool declares expectedNodes."""
    slowest: Optional[tuple[int, str]] = None
    for pool in pools:
        if pool.expected_nodes is None or cfg.upgrade.strategy != "rolling":
            continue
        plan = cfg.pool_driver(pool)
        if plan.mode == "host":
            continue
        batches = -(-pool.expected_nodes // _budget_nodes(cfg.upgrade.max_unavailable, pool.expected_nodes))
        seconds = batches * MIN_NODE_SWAP_SECONDS[plan.mode]
        if slowest is None or seconds > slowest[0]:
            slowest = (seconds, pool.name)
    return slowest


def _gate_timeout_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    """A gate whose timeout is shorter than its wave's rollout can only fail, halfway through the rollout."""
    problems: list[tuple[str, str]] = []
    pools = {p.name: p for p in cfg.node_pools}
    waves = cfg.upgrade.waves
    budget = cfg.upgrade.max_unavailable
    for i, wave in enumerate(waves[:-1]):
        floor = rollout_floor_seconds(cfg, [pools[n] for n in wave.pools if n in pools])
        if floor is not None and wave.timeout_seconds < floor[0]:
            problems.append(
                (
                    f"{NAMESPACE}:upgrade.waves[{i}].timeoutSeconds",
                    f"got {wave.timeout_seconds}; pool {floor[1]!r} ({pools[floor[1]].expected_nodes} expected nodes, "
                    f"maxUnavailable {budget}) needs at least {floor[0]} s to roll and validate: raise the timeout or "
                    "maxUnavailable",
                )
            )
    # The stack gate judges the last wave (every pool, without waves) as it rolls.
    last = [pools[n] for n in waves[-1].pools if n in pools] if waves else cfg.driver_pools
    floor = rollout_floor_seconds(cfg, last)
    if cfg.validation.mode != "off" and floor is not None and cfg.validation.timeout_seconds < floor[0]:
        problems.append(
            (
                f"{NAMESPACE}:validation.timeoutSeconds",
                f"got {cfg.validation.timeout_seconds}; pool {floor[1]!r} ({pools[floor[1]].expected_nodes} expected "
                f"nodes, maxUnavailable {budget}) rolls last and needs at least {floor[0]} s to roll and validate: "
                "raise the timeout or maxUnavailable",
            )
        )
    return problems


def _cross_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    """Rules that span several keys; each names the key a user has to change."""
    problems: list[tuple[str, str]] = []
    seen_names: dict[str, int] = {}
    seen_selectors: dict[tuple, int] = {}
    for i, pool in enumerate(cfg.node_pools):
        here = f"{NAMESPACE}:nodePools[{i}]"
        if pool.name in seen_names:
            problems.append((f"{here}.name", f"duplicate pool name {pool.name!r} (also nodePools[{seen_names[pool.name]}])"))
        seen_names.setdefault(pool.name, i)
        selector = tuple(sorted(pool.node_selector.items()))
        if selector in seen_selectors:
            problems.append(
                (f"{here}.nodeSelector", f"same selector as nodePools[{seen_selectors[selector]}]: this pool could never match a node")
            )
        seen_selectors.setdefault(selector, i)
        if not pool.node_selector and i != len(cfg.node_pools) - 1:
            problems.append(
                (f"{here}.nodeSelector", "an empty selector matches every GPU node, so it must be the last pool")
            )
        problems += _sharing_checks(cfg, pool, here)
        problems += _pool_driver_checks(cfg, pool, here)
    problems += _upgrade_checks(cfg)
    problems += _gpudirect_checks(cfg)
    problems += _dra_checks(cfg)
    problems += _monitoring_checks(cfg)
    problems += _mig_layout_checks(cfg)
    if cfg.driver.mode == "precompiled" and DIGEST.match(cfg.versions.driver):
        problems.append((f"{NAMESPACE}:versions.driver", "a digest cannot be combined with precompiled drivers"))
    if "node_inventory" in cfg.components.model_fields_set and cfg.components.node_inventory and not cfg.components.node_labeler:
        problems.append(
            (
                f"{NAMESPACE}:components.nodeInventory",
                "the inventory compares each node with the pool the node labeller matched it to: set "
                "components.nodeLabeler: true, or nodeInventory: false",
            )
        )
    problems += _driver_daemonset_checks(cfg)
    if cfg.cluster.container_runtime == "cri-o" and cfg.toolkit.runtime_socket is not None:
        problems.append((f"{NAMESPACE}:toolkit.runtimeSocket", "cri-o is configured without a socket; remove this key"))
    needs_agent = cfg.components.node_labeler or cfg.validation.mode != "off"
    if needs_agent and cfg.node_agent.image is None:
        problems.append(
            (
                f"{NAMESPACE}:nodeAgent.image",
                "required: the node labeller and the validation gate run it; build node_images/node-agent and push it",
            )
        )
    if cfg.validation.mode != "off" and not cfg.components.toolkit:
        problems.append(
            (f"{NAMESPACE}:validation.mode", "the validator cannot pass without the container toolkit; use 'off' or enable it")
        )
    return problems


SECRET_KEYS = (f"{NAMESPACE}:registryPassword",)


def _secret_checks(cfg: StackConfig, raw: Mapping[str, str], secret_keys: Collection[str]) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    for key in SECRET_KEYS:
        if key in raw and key not in secret_keys:
            name = key.split(":", 1)[1]
            problems.append(
                (
                    key,
                    "a plain value would be stored unencrypted in the stack file and in state; set it with "
                    f"`pulumi config set --secret {name} <value>`",
                )
            )
    if (cfg.registry.credentials is None) != (cfg.registry_password is None):
        missing = f"{NAMESPACE}:registryPassword" if cfg.registry_password is None else f"{NAMESPACE}:registry.credentials"
        problems.append((missing, "registry.credentials and the secret registryPassword are set together"))
    return problems


def load_config(raw: Mapping[str, str], secret_keys: Collection[str] = ()) -> StackConfig:
    """Validate the `gpu-stack:*` entries of a Pulumi config bag (values as the CLI passes them: strings).

    `secret_keys` are the keys the CLI marks secret; the keys in SECRET_KEYS must be among them."""
    prefix = NAMESPACE + ":"
    data: dict[str, Any] = {}
    problems: list[tuple[str, str]] = []
    known = sorted(_fields_by_alias(StackConfig))
    for key, value in raw.items():
        if not key.startswith(prefix):
            continue
        name = key[len(prefix):]
        if name not in known:
            problems.append((key, _unknown_key_message(name, known)))
            continue
        data[name] = _parse_value(value)
    try:
        cfg = StackConfig.model_validate(data)
    except ValidationError as exc:
        problems += [_translate(e) for e in exc.errors(include_url=False)]
        raise ConfigError(problems) from None
    problems += _cross_checks(cfg)
    problems += _secret_checks(cfg, raw, secret_keys)
    if problems:
        raise ConfigError(problems)
    return cfg


def program_config() -> dict[str, str]:
    """The config bag of the running program: the CLI passes it as PULUMI_CONFIG, tests via set_all_config."""
    return {**get_config_env(), **CONFIG.get()}


def program_secret_keys() -> set[str]:
    """The keys the CLI marks secret: the language host passes them with the config, or as
    PULUMI_CONFIG_SECRET_KEYS next to PULUMI_CONFIG."""
    return set(get_config_secret_keys_env()) | {key for key in program_config() if is_config_secret(key)}


# What an offline render puts where the stack file holds ciphertext: without the stack's secrets provider
# nothing can decrypt it, and the value only ever reaches Secret data, which renders masked.
UNDECRYPTED = "[secret]"


def stack_file_secret_keys(document: Mapping[str, Any]) -> set[str]:
    """Keys whose value the stack file holds encrypted (`{secure: v1:...}`), as `pulumi config set --secret`
    writes them."""
    config = document.get("config") or {}
    return {key for key, value in config.items() if isinstance(value, dict) and set(value) == {"secure"}}


def stack_file_config(document: Mapping[str, Any]) -> dict[str, str]:
    """Turn a parsed `Pulumi.<stack>.yaml` into the string bag the CLI would hand the program."""
    config = document.get("config") or {}
    bag: dict[str, str] = {}
    secret = stack_file_secret_keys(document)
    for key, value in config.items():
        if key in secret:
            bag[key] = UNDECRYPTED
        elif isinstance(value, str):
            bag[key] = value
        elif isinstance(value, bool):
            bag[key] = "true" if value else "false"
        else:
            bag[key] = json.dumps(value)
    return bag
