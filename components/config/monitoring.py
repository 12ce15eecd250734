"""Metrics, ServiceMonitors, alerts and the dashboard, Prometheus durations, and the checks that what is asked
for can be served."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal, Optional

from pydantic import Field, StrictBool, field_validator, model_validator

from components.catalogs import dcgm_metrics
from components.config.base import NAMESPACE, _label_map, _Model

if TYPE_CHECKING:
    from components.config.stack import StackConfig


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
