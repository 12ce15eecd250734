"""Stack monitoring: what `state-operator-metrics` gives an operator install, for a stack with no operator.

The operator exports `gpu_operator_*` metrics from its own process and (on OpenShift) alert rules. gpu-stack
has no process to scrape, so its health is computed where it is read: a PrometheusRule whose recording rules
aggregate the operands' own signals (DCGM exporter series, validator pod readiness, node status exporter,
DaemonSet availability) into `gpu_stack:*` series, plus the GPU alerts platform teams ask for, and a Grafana
dashboard ConfigMap for the sidecar to discover. Rules and dashboard content live in
components/catalogs/monitoring_rules.py; this module only places them in the cluster.

The state is applied last (before the validation gate): the PrometheusRule needs the Prometheus Operator's
CRDs, and a cluster without them must not be able to hold up the GPU operands.
"""

from __future__ import annotations

import json
from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s

from components.catalogs import catalog
from components.catalogs import grafana_dashboard, monitoring_rules
from components.kit.builders import child_opts, meta
from components.config import Monitoring

RULE_NAME = "gpu-stack"
DASHBOARD_CONFIGMAP = "gpu-stack-dashboard"
DASHBOARD_FILE = "gpu-stack.json"
# The Grafana sidecar reads the target folder from this annotation.
FOLDER_ANNOTATION = "grafana_folder"


def thresholds(settings: Monitoring) -> monitoring_rules.AlertThresholds:
    alerts = settings.alerts
    return monitoring_rules.AlertThresholds(
        temperature_warning_celsius=alerts.gpu_temperature_warning_celsius,
        temperature_critical_celsius=alerts.gpu_temperature_critical_celsius,
        framebuffer_used_percent=alerts.framebuffer_used_percent,
        utilization_percent=alerts.utilization_percent,
        utilization_for=alerts.utilization_for,
        validator_not_ready_for=alerts.validator_not_ready_for,
    )


def rule_groups(settings: Monitoring, *, namespace: str, stack: str, config_digest: str, alerts: bool) -> list[dict]:
    groups = monitoring_rules.recording_groups(
        namespace=namespace, stack=stack, release=catalog.OPERATOR_RELEASE, config_digest=config_digest
    )
    if alerts:
        groups += monitoring_rules.alert_groups(namespace=namespace, thresholds=thresholds(settings))
    return groups


class StackMonitoring(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        *,
        namespace: str,
        settings: Monitoring,
        alerts: bool,
        dashboard: bool,
        stack: str,
        config_digest: str,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:StackMonitoring", name, None, opts)
        child = child_opts(self, depends_on)
        rendered: list[str] = []
        if settings.prometheus_operator:
            k8s.apiextensions.CustomResource(
                RULE_NAME,
                api_version="monitoring.coreos.com/v1",
                kind="PrometheusRule",
                metadata=meta(RULE_NAME, namespace, settings.alerts.rule_labels),
                spec={"groups": rule_groups(settings, namespace=namespace, stack=stack, config_digest=config_digest, alerts=alerts)},
                opts=child,
            )
            rendered.append("PrometheusRule/" + RULE_NAME)
        if dashboard:
            board = settings.dashboard
            annotations = {FOLDER_ANNOTATION: board.folder} if board.folder else None
            k8s.core.v1.ConfigMap(
                DASHBOARD_CONFIGMAP,
                metadata=meta(DASHBOARD_CONFIGMAP, namespace, board.labels, annotations),
                data={DASHBOARD_FILE: json.dumps(grafana_dashboard.dashboard(namespace=namespace), indent=2, sort_keys=True)},
                opts=child,
            )
            rendered.append("ConfigMap/" + DASHBOARD_CONFIGMAP)
        self.register_outputs({"objects": rendered})
