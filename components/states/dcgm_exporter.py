"""State `state-dcgm-exporter`: GPU telemetry for Prometheus on port 9400, its Service and ServiceMonitor.

Objects as in GO:assets/state-dcgm-exporter with `TransformDCGMExporter` applied, plus the operator's custom
metrics path (`dcgmExporter.config.name`) always taken: the stack renders its own metrics CSV
(components/catalogs/dcgm_metrics.py) because the image's built-in list leaves the ECC counters out, and the alerts
and dashboard are checked against what this CSV exports. The file is mounted from a ConfigMap, so the pod
needs no API access and keeps `automountServiceAccountToken: false`.
"""

from __future__ import annotations

from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import ContainerArgs, ContainerPortArgs, HTTPGetActionArgs, ProbeArgs

from components.catalogs import dcgm_metrics
from components.kit.builders import (
    NODE_NAME_ENV,
    PRIVILEGED,
    Operands,
    also_after,
    child_opts,
    config_map_volume,
    env,
    host_path,
    meta,
    metrics_endpoint,
    mount,
    operand_daemonset,
    wait_for_validation,
)
from components.kit.rbac import SCC_USE, rbac_set, rule
from components.config import ServiceMonitorSettings

NAME = "nvidia-dcgm-exporter"
PORT = 9400
PORT_NAME = "gpu-metrics"
METRICS_CONFIGMAP = "nvidia-dcgm-exporter-metrics"
METRICS_FILE = "dcgm-metrics.csv"
METRICS_PATH = f"/etc/dcgm-exporter/{METRICS_FILE}"
POD_RESOURCES = "/var/lib/kubelet/pod-resources"


def _health_probe(period: Optional[int] = None) -> ProbeArgs:
    return ProbeArgs(
        http_get=HTTPGetActionArgs(port=PORT, path="/health"), initial_delay_seconds=45, period_seconds=period
    )


def exporter_env(remote_hostengine: Optional[str]) -> list:
    values = [
        env("DCGM_EXPORTER_LISTEN", f":{PORT}"),
        env("DCGM_EXPORTER_KUBERNETES", "true"),
        env("DCGM_EXPORTER_COLLECTORS", METRICS_PATH),
        NODE_NAME_ENV,
    ]
    if remote_hostengine:
        values.append(env("DCGM_REMOTE_HOSTENGINE_INFO", remote_hostengine))
    return values


class DcgmExporter(pulumi.ComponentResource):
    daemonset: k8s.apps.v1.DaemonSet
    service: k8s.core.v1.Service
    metrics: tuple[dcgm_metrics.Metric, ...]

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        metrics: Sequence[dcgm_metrics.Metric],
        remote_hostengine: Optional[str],
        internal_traffic_policy: str,
        service_monitor_settings: Optional[ServiceMonitorSettings],
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:DcgmExporter", name, None, opts)
        child = child_opts(self, depends_on)
        self.metrics = tuple(metrics)
        rbac = rbac_set(NAME, ops.namespace, role_rules=[SCC_USE, rule([""], ["configmaps"], ["get", "list"])], opts=child)
        metrics_config = k8s.core.v1.ConfigMap(
            METRICS_CONFIGMAP,
            metadata=meta(METRICS_CONFIGMAP, ops.namespace, {"app": NAME}),
            data={METRICS_FILE: dcgm_metrics.metrics_csv(self.metrics)},
            opts=child,
        )
        exporter = ContainerArgs(
            name=NAME,
            image=ops.images.dcgm_exporter,
            image_pull_policy="IfNotPresent",
            env=exporter_env(remote_hostengine),
            ports=[ContainerPortArgs(name="metrics", container_port=PORT)],
            liveness_probe=_health_probe(period=5),
            readiness_probe=_health_probe(),
            security_context=PRIVILEGED,
            volume_mounts=[
                mount("pod-gpu-resources", POD_RESOURCES, read_only=True),
                mount("metrics-config", METRICS_PATH, read_only=True, sub_path=METRICS_FILE),
            ],
        )
        self.daemonset = operand_daemonset(
            NAME,
            ops,
            deploy_component="dcgm-exporter",
            service_account=NAME,
            runtime_class=True,
            automount_token=False,
            init_containers=[wait_for_validation(ops.images.validator, "toolkit-ready", volume="run-nvidia")],
            containers=[exporter],
            volumes=[
                host_path("pod-gpu-resources", POD_RESOURCES),
                host_path("run-nvidia", "/run/nvidia"),
                config_map_volume("metrics-config", config_map=METRICS_CONFIGMAP),
            ],
            opts=also_after(child, *rbac.resources, metrics_config),
        )
        self.service = metrics_endpoint(
            NAME,
            ops.namespace,
            port_name=PORT_NAME,
            port=PORT,
            monitor=service_monitor_settings,
            internal_traffic_policy=internal_traffic_policy,
            opts=child,
        )
        self.register_outputs({"daemonset": NAME, "service": NAME, "metrics": [m.field for m in self.metrics]})

