"""Metrics, ServiceMonitors, alerts and the dashboard, Prometheus durations, and the checks that what is asked
for can be served."""

from __future__ import annotations

import re
from typing import Literal, Optional

from pydantic import Field, StrictBool, field_validator, model_validator

from components.config import limits
from components.config.base import _label_map, _Model, shown
from components.config.relabel import RelabelConfig, re2_problem


DCGM_FIELD = re.compile(r"^DCGM_FI_[A-Z0-9_]+$")
DEFAULT_EXPORTER_PORT = 9400
# GO:api/nvidia/v1/clusterpolicy_types.go DefaultDCGMJobMappingDir
DEFAULT_JOB_MAPPING_DIR = "/var/lib/dcgm-exporter/job-mapping"


class DcgmMetric(_Model):
    field: str
    type: Literal["gauge", "counter", "label"]
    help: str = Field(min_length=1)

    @field_validator("field")
    @classmethod
    def _field(cls, value: str) -> str:
        if not DCGM_FIELD.fullmatch(value):
            raise ValueError(f"{shown(value)} is not a DCGM field name such as DCGM_FI_DEV_POWER_VIOLATION")
        return value

    @field_validator("help")
    @classmethod
    def _one_line(cls, value: str) -> str:
        if any(c in value for c in ',"\n'):
            raise ValueError("help text must be one line without commas or quotes (it is a CSV column)")
        return value


# The exporter's own listen address: any address of the pod (empty, 0.0.0.0 or [::]) and a port. A host part that
# names one interface would leave the kubelet's probes and the Service, which reach the pod IP, without an answer.
LISTEN_ADDRESS = re.compile(r"^(?:0\.0\.0\.0|\[::\])?:(?P<port>[1-9][0-9]{0,4})$")
# A DCGM host engine: DNS name, IPv4 address or bracketed IPv6 address, and a port (DCGM_REMOTE_HOSTENGINE_INFO).
HOSTENGINE = re.compile(
    r"^(?P<host>[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*|\[[0-9A-Fa-f:.]+\]):(?P<port>[1-9][0-9]{0,4})$"
)
# An absolute, normalised path of plain characters (no `.` or `..` segment): a file in the image or a host directory.
PLAIN_PATH = re.compile(r"^(/[A-Za-z0-9_@+-][A-Za-z0-9_.@+-]*)+$")
MAX_ALLOWLIST_REGEXES = 32
MAX_REGEX_LENGTH = 256


def _port_in_range(value: str, pattern: re.Pattern[str], example: str) -> str:
    match = pattern.fullmatch(value)
    if not match or not 1 <= int(match["port"]) <= 65535:
        raise ValueError(f"{shown(value)} is not {example}")
    return value


def _plain_path(value: Optional[str]) -> Optional[str]:
    if value is not None and (not PLAIN_PATH.fullmatch(value) or any(part in (".", "..") for part in value.split("/"))):
        raise ValueError(f"{shown(value)} is not an absolute, normalised path such as /etc/dcgm-exporter/default-counters.csv")
    return value


class HpcJobMapping(_Model):
    """Per-GPU HPC job ids for metrics: a workload manager (Slurm prolog/epilog) writes one file per GPU, named by
    its index, holding the ids of the jobs using it; the exporter adds them as the `hpc_job` label."""

    enabled: StrictBool = Field(default=False, description="Mount the job-mapping directory and point the exporter at it (DCGM_HPC_JOB_MAPPING_DIR).")
    directory: str = Field(
        default=DEFAULT_JOB_MAPPING_DIR,
        max_length=255,
        description=(
            "Host directory the workload manager writes the job files to, mounted read-only at the same path (created if "
            "missing). Another directory than the default also goes into the policy pack's additionalHostPaths of "
            "nvidia-dcgm-exporter (docs/policies.md)."
        ),
    )

    _directory = field_validator("directory")(_plain_path)


class DcgmExporter(_Model):
    # Fields added to gpu-stack's metrics CSV (components/catalogs/dcgm_metrics.py), which already holds what the
    # alerts and the dashboard read.
    extra_metrics: list[DcgmMetric] = Field(default=[], max_length=limits.MAX_EXTRA_METRICS)
    internal_traffic_policy: Literal["Cluster", "Local"] = "Cluster"
    enable_pod_labels: StrictBool = Field(
        default=False,
        description=(
            "Add the labels of the pod using a GPU to its metrics (DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS). The "
            "exporter then reads pods through the API: gpu-stack binds it the ClusterRole nvidia-dcgm-exporter-read-pods "
            "and mounts its ServiceAccount token."
        ),
    )
    enable_pod_uid: StrictBool = Field(
        default=False,
        description="Add the UID of the pod using a GPU to its metrics (DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID); reads pods like enablePodLabels.",
    )
    pod_label_allowlist_regex: list[str] = Field(
        default=[],
        max_length=MAX_ALLOWLIST_REGEXES,
        description=(
            "Only pod labels whose key matches one of these regular expressions become metric labels (comma-joined into "
            "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX); empty: every label. Needs enablePodLabels."
        ),
    )
    listen_address: str = Field(
        default=f":{DEFAULT_EXPORTER_PORT}",
        description=(
            "DCGM_EXPORTER_LISTEN: `:<port>` (or `0.0.0.0:<port>`, `[::]:<port>`). The container port, the probes and the "
            "Service follow the port."
        ),
    )
    collectors_file: Optional[str] = Field(
        default=None,
        max_length=255,
        description=(
            "A metrics CSV built into the exporter image (e.g. /etc/dcgm-exporter/dcp-metrics-included.csv) used instead of "
            "gpu-stack's metrics ConfigMap. The alerts and the dashboard read metrics from gpu-stack's CSV, so they must be "
            "off, and extraMetrics empty."
        ),
    )
    remote_hostengine: Optional[str] = Field(
        default=None,
        max_length=260,
        description=(
            "`host:port` of a DCGM host engine the exporter connects to (DCGM_REMOTE_HOSTENGINE_INFO), e.g. "
            "localhost:5555 for the host's own nv-hostengine (DGX OS), which also puts the exporter on the host network. "
            "Unset: the exporter embeds its host engine, or uses nvidia-dcgm:5555 when components.dcgm is true."
        ),
    )
    host_network: StrictBool = Field(default=False, description="Run the exporter in the host's network namespace (hostNetwork, dnsPolicy ClusterFirstWithHostNet).")
    host_pid: StrictBool = Field(default=False, description="Run the exporter in the host's PID namespace (hostPID), so it can map GPU processes to host PIDs.")
    hpc_job_mapping: HpcJobMapping = HpcJobMapping()

    _collectors = field_validator("collectors_file")(_plain_path)

    @field_validator("listen_address")
    @classmethod
    def _listen(cls, value: str) -> str:
        return _port_in_range(value, LISTEN_ADDRESS, "a listen address such as :9400 (any address of the pod and a port 1-65535)")

    @field_validator("remote_hostengine")
    @classmethod
    def _hostengine(cls, value: Optional[str]) -> Optional[str]:
        if value is None:
            return value
        return _port_in_range(value, HOSTENGINE, "a host engine address host:port such as localhost:5555 or nvidia-dcgm:5555")

    @field_validator("pod_label_allowlist_regex")
    @classmethod
    def _regexes(cls, values: list[str]) -> list[str]:
        for i, value in enumerate(values):
            shown = value if len(value) <= 60 else value[:57] + "..."
            if not 0 < len(value) <= MAX_REGEX_LENGTH:
                raise ValueError(f"entry {i} must be 1 to {MAX_REGEX_LENGTH} characters long")
            if "," in value:
                # the exporter splits the joined variable on commas, so a{1,3} would arrive as two broken patterns
                raise ValueError(f"entry {i} ({shown!r}) contains a comma; the exporter splits the list on commas")
            problem = re2_problem(value)
            if problem:
                raise ValueError(f"entry {i} ({shown!r}) {problem}")
        if len(set(values)) != len(values):
            raise ValueError("lists a regular expression twice")
        return values

    @property
    def port(self) -> int:
        match = LISTEN_ADDRESS.fullmatch(self.listen_address)
        assert match is not None  # validated
        return int(match["port"])

    @property
    def reads_pods(self) -> bool:
        """Pod metadata in the metrics: the exporter reads pods from the API (NVIDIA's IsKubernetesPodMetadataEnabled)."""
        return self.enable_pod_labels or self.enable_pod_uid


# Prometheus' own duration grammar: units from largest to smallest, each at most once.
# At most 9 digits a unit, so no number grows past what Prometheus' int64 milliseconds hold.
PROM_DURATION = re.compile(r"^(?:([0-9]{1,9})y)?(?:([0-9]{1,9})w)?(?:([0-9]{1,9})d)?(?:([0-9]{1,9})h)?(?:([0-9]{1,9})m)?(?:([0-9]{1,9})s)?(?:([0-9]{1,9})ms)?$")
_DURATION_UNITS_MS = (365 * 86_400_000, 7 * 86_400_000, 86_400_000, 3_600_000, 60_000, 1_000, 1)


def duration_ms(value: str) -> int:
    match = PROM_DURATION.fullmatch(value)
    if not value or not match:
        raise ValueError(f"{shown(value)} is not a Prometheus duration such as 30s, 15m or 1h30m")
    return sum(int(n) * unit for n, unit in zip(match.groups(), _DURATION_UNITS_MS, strict=True) if n)


def _bounded_duration(limit_ms: int, limit_name: str):
    """A validator: a positive Prometheus duration of at most `limit_ms`."""

    def check(value: str) -> str:
        ms = duration_ms(value)
        if ms == 0:
            raise ValueError(f"{shown(value)} is zero; give a positive duration such as 30s")
        if ms > limit_ms:
            raise ValueError(f"{shown(value)} is longer than {_format_ms(limit_ms)} (limits.{limit_name})")
        return value

    return check


def _format_ms(ms: int) -> str:
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


_duration = _bounded_duration(limits.MAX_ALERT_DURATION_MS, "MAX_ALERT_DURATION_MS")
_scrape_duration = _bounded_duration(limits.MAX_SCRAPE_DURATION_MS, "MAX_SCRAPE_DURATION_MS")


class ServiceMonitorSettings(_Model):
    interval: str = "15s"
    scrape_timeout: str = "10s"
    # Labels a Prometheus `serviceMonitorSelector` matches, e.g. release: kube-prometheus-stack.
    additional_labels: dict[str, str] = {}
    honor_labels: StrictBool = Field(
        default=False,
        description=(
            "`honorLabels` of both ServiceMonitors' endpoints: on a clash, keep the scraped metric's label (e.g. its own `namespace` or "
            "`pod`) instead of renaming it `exported_<label>` beside the target's."
        ),
    )
    relabelings: list[RelabelConfig] = Field(
        default=[],
        max_length=limits.MAX_RELABELINGS,
        description=(
            "`relabelings` of both ServiceMonitors' endpoints: Prometheus relabel configs applied to each target before the scrape, e.g. "
            "`{sourceLabels: [__meta_kubernetes_pod_node_name], targetLabel: node}`. Checked as Prometheus checks them."
        ),
    )

    _durations = field_validator("interval", "scrape_timeout")(_scrape_duration)
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
