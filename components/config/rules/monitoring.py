"""Cross-key rules of `gpu-stack:monitoring` and the DCGM exporter: alerts and dashboards against the components and the
Prometheus Operator."""

from __future__ import annotations

from components.catalogs import dcgm_metrics
from components.config.base import _set_aliases, NAMESPACE
from components.config.stack import StackConfig


def monitoring_checks(cfg: StackConfig) -> list[tuple[str, str]]:
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
    problems += _exporter_checks(cfg, asked_alerts=asked_alerts, asked_dashboard=asked_dashboard)
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


def _exporter_checks(cfg: StackConfig, *, asked_alerts: bool, asked_dashboard: bool) -> list[tuple[str, str]]:
    """The exporter options against each other and against the DCGM and monitoring keys."""
    exporter = cfg.dcgm_exporter
    here = f"{NAMESPACE}:dcgmExporter"
    problems: list[tuple[str, str]] = []
    options = sorted(_set_aliases(exporter) - {"extraMetrics", "internalTrafficPolicy"})
    if options and not cfg.components.dcgm_exporter:
        problems.append(
            (here, f"{', '.join(options)} configure the exporter, which components.dcgmExporter: false leaves out; remove them")
        )
    if exporter.pod_label_allowlist_regex and not exporter.enable_pod_labels:
        problems.append((f"{here}.podLabelAllowlistRegex", "filters the pod labels enablePodLabels adds: set enablePodLabels: true, or remove it"))
    if exporter.remote_hostengine is not None and cfg.components.dcgm:
        problems.append(
            (
                f"{here}.remoteHostengine",
                "components.dcgm: true already points the exporter at the nvidia-dcgm host engine; remove one of the two",
            )
        )
    if exporter.collectors_file is not None:
        where = f"{here}.collectorsFile"
        if exporter.extra_metrics:
            problems.append((where, "extraMetrics are added to gpu-stack's metrics ConfigMap, which a collectorsFile replaces; remove one of the two"))
        monitoring = cfg.monitoring
        readers = [
            key
            for key, on in (
                ("monitoring.alerts.enabled", monitoring.alerts_on(True) or asked_alerts),
                ("monitoring.dashboard.enabled", monitoring.dashboard_on(True) or asked_dashboard),
            )
            if on
        ]
        if readers:
            problems.append(
                (
                    where,
                    f"{' and '.join(readers)} read metrics that gpu-stack's own CSV guarantees and a file in the image may "
                    f"lack; set {': false, '.join(readers)}: false, or remove collectorsFile",
                )
            )
    return problems
