"""Alerts, recording rules and a Grafana dashboard for a gpu-stack deployment, as plain dicts.

No Pulumi here: the component that creates the PrometheusRule / dashboard ConfigMap puts these dicts in place.

Metric sources:
- the DCGM exporter (DaemonSet `nvidia-dcgm-exporter`, port 9400), whose fields are listed in
  components/catalogs/dcgm_metrics.py; series carry `Hostname` (node name), `gpu`, `UUID`, `modelName`, and
  `GPU_I_PROFILE`/`GPU_I_ID` for MIG instances. On a MIG-enabled GPU, device-wide fields may be repeated for every
  GPU instance, so per-GPU queries first take `max by (Hostname, gpu, UUID, modelName)` to count a GPU once;
  `DCGM_FI_DEV_GPU_UTIL` is not reported for MIG instances (`DCGM_FI_PROF_GR_ENGINE_ACTIVE` is);
- kube-state-metrics: pod readiness of the `nvidia-operator-validator` pods, DaemonSet availability, and the
  node label `gpu-stack/pool` as `kube_node_labels{label_gpu_stack_pool=...}` (needs
  `--metric-labels-allowlist=nodes=[gpu-stack/pool]`);
- NVIDIA's node-status-exporter (`gpu_operator_node_*`, fact sheet §2.10).

The GPU Operator exports `gpu_operator_*` metrics from its controller (§2.2); a gpu-stack deployment has no
operator process, so `recording_groups` derives the equivalent health series from the sources above, plus a
`gpu_stack_info` series naming the deployed stack, release and config digest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable


VALIDATOR = "nvidia-operator-validator"
VALIDATOR_POD_REGEX = f"{VALIDATOR}-.+"
POOL_LABEL = "label_gpu_stack_pool"  # kube-state-metrics' name for the node label gpu-stack/pool
GPU_LABELS = "Hostname, gpu, UUID, modelName"  # one GPU, whatever MIG instances it is split into

# Metrics the rules and dashboard use that the DCGM exporter does not expose.
KUBE_STATE_METRICS = frozenset(
    {
        "kube_node_labels",
        "kube_pod_info",
        "kube_pod_status_ready",
        "kube_daemonset_status_number_unavailable",
        "kube_daemonset_status_desired_number_scheduled",
    }
)
NODE_STATUS_EXPORTER_METRICS = frozenset(
    {
        "gpu_operator_node_metrics_ready_ts_seconds",
        "gpu_operator_node_driver_ready",
        "gpu_operator_node_toolkit_ready",
        "gpu_operator_node_plugin_ready",
        "gpu_operator_node_cuda_ready",
        "gpu_operator_node_driver_validation",
        "gpu_operator_node_driver_validation_last_success_ts_seconds",
        "gpu_operator_node_device_plugin_devices_total",
        "gpu_operator_node_device_plugin_validation_last_success_ts_seconds",
        "gpu_operator_nvidia_pci_devices_total",
    }
)
EXTERNAL_METRICS: frozenset[str] = KUBE_STATE_METRICS | NODE_STATUS_EXPORTER_METRICS

_DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class AlertThresholds:
    temperature_warning_celsius: int = 85
    temperature_critical_celsius: int = 90
    framebuffer_used_percent: int = 95
    utilization_percent: int = 95
    utilization_for: str = "30m"
    validator_not_ready_for: str = "15m"

    def __post_init__(self) -> None:
        if not self.temperature_warning_celsius < self.temperature_critical_celsius:
            raise ValueError("temperature_warning_celsius must be below temperature_critical_celsius")
        for name in ("framebuffer_used_percent", "utilization_percent"):
            if not 0 < getattr(self, name) <= 100:
                raise ValueError(f"{name} must be in (0, 100], got {getattr(self, name)}")
        for name in ("utilization_for", "validator_not_ready_for"):
            if not _DURATION.fullmatch(getattr(self, name)):
                raise ValueError(f"{name} must be a Prometheus duration such as 30m, got {getattr(self, name)!r}")


def _check_namespace(namespace: str) -> None:
    if not _NAMESPACE.fullmatch(namespace) or len(namespace) > 63:
        raise ValueError(f"{namespace!r} is not a Kubernetes namespace name")


def _alert(name: str, expr: str, for_: str, severity: str, summary: str, description: str) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if for_:
        rule["for"] = for_
    rule["labels"] = {"severity": severity}
    rule["annotations"] = {"summary": summary, "description": description}
    return rule


def _validator_ready(namespace: str) -> str:
    return f'kube_pod_status_ready{{namespace="{namespace}", pod=~"{VALIDATOR_POD_REGEX}", condition="true"}}'


def _validator_node(namespace: str) -> str:
    """One series per validator pod with the `node` it runs on (value 1), for `group_left (node)` joins."""
    return f'max by (namespace, pod, node) (kube_pod_info{{namespace="{namespace}", pod=~"{VALIDATOR_POD_REGEX}"}})'


def _validators_not_ready(namespace: str) -> str:
    return (
        f"({_validator_ready(namespace)} == 0) * on (namespace, pod) group_left (node) {_validator_node(namespace)}"
    )


def alert_groups(*, namespace: str, thresholds: AlertThresholds) -> list[dict[str, Any]]:
    """PrometheusRule `spec.groups`: GPU health alerts from DCGM, and the stack's own per-node health."""
    _check_namespace(namespace)
    t = thresholds
    gpu = "GPU {{ $labels.gpu }} ({{ $labels.modelName }}, {{ $labels.UUID }}) on node {{ $labels.Hostname }}"
    temperature = f"max by ({GPU_LABELS}) (DCGM_FI_DEV_GPU_TEMP)"
    framebuffer = (
        "100 * DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE + DCGM_FI_DEV_FB_RESERVED)"
    )
    gpu_alerts = [
        _alert(
            "GpuStackTemperatureWarning",
            f"{temperature} > {t.temperature_warning_celsius}",
            "10m",
            "warning",
            f"GPU temperature above {t.temperature_warning_celsius} °C",
            f"{gpu} has been at {{{{ $value }}}} °C for 10 minutes "
            f"(warning threshold {t.temperature_warning_celsius} °C); check cooling and airflow.",
        ),
        _alert(
            "GpuStackTemperatureCritical",
            f"{temperature} > {t.temperature_critical_celsius}",
            "2m",
            "critical",
            f"GPU temperature above {t.temperature_critical_celsius} °C",
            f"{gpu} is at {{{{ $value }}}} °C (critical threshold {t.temperature_critical_celsius} °C); "
            "the GPU will throttle its clocks and may shut down.",
        ),
        _alert(
            "GpuStackFramebufferNearlyFull",
            f"{framebuffer} > {t.framebuffer_used_percent}",
            "10m",
            "warning",
            f"GPU framebuffer memory above {t.framebuffer_used_percent}% used",
            f"{gpu} (MIG profile '{{{{ $labels.GPU_I_PROFILE }}}}', empty for a whole GPU) has "
            f"{{{{ $value | humanize }}}}% of its framebuffer memory in use (threshold {t.framebuffer_used_percent}%); "
            "workloads on it may fail to allocate memory.",
        ),
        _alert(
            "GpuStackDoubleBitEccError",
            f"max by ({GPU_LABELS}) (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL) > 0",
            "",
            "critical",
            "GPU reported uncorrectable (double-bit) ECC errors",
            f"{gpu} has counted {{{{ $value }}}} double-bit ECC errors since its driver was loaded. "
            "Drain the node and reset the GPU; repeated errors mean the GPU needs service.",
        ),
        _alert(
            "GpuStackUtilizationSaturated",
            f"max by ({GPU_LABELS}) (DCGM_FI_DEV_GPU_UTIL) > {t.utilization_percent}",
            t.utilization_for,
            "info",
            f"GPU busy above {t.utilization_percent}% for {t.utilization_for}",
            f"{gpu} has been more than {t.utilization_percent}% busy for {t.utilization_for} "
            "(now {{ $value }}%); the pool may need more GPUs.",
        ),
        _alert(
            "GpuStackXidError",
            f"max by ({GPU_LABELS}) (DCGM_FI_DEV_XID_ERRORS) != 0",
            "",
            "warning",
            "GPU reported XID error {{ $value }}",
            f"{gpu} reported XID {{{{ $value }}}} (the most recent XID error seen by the driver). "
            "Look the code up in NVIDIA's XID catalogue; codes such as 48, 74, 79 and 95 usually need the node "
            "drained and the GPU reset.",
        ),
    ]
    stack_alerts = [
        _alert(
            "GpuStackValidatorNotReady",
            _validators_not_ready(namespace),
            t.validator_not_ready_for,
            "warning",
            f"GPU node not validated for {t.validator_not_ready_for}",
            f"Validator pod {{{{ $labels.pod }}}} in namespace {namespace} on node {{{{ $labels.node }}}} has not "
            f"been Ready for {t.validator_not_ready_for}: one of the driver, toolkit, CUDA or device-plugin checks "
            "has not passed, so GPU operands on that node are held back. Check the pod's init containers.",
        ),
    ]
    return [
        {"name": "gpu-stack.gpus", "rules": gpu_alerts},
        {"name": "gpu-stack.stack-health", "rules": stack_alerts},
    ]


def recording_groups(*, namespace: str, stack: str, release: str, config_digest: str) -> list[dict[str, Any]]:
    """The stack's stand-in for the GPU Operator's `gpu_operator_*` controller metrics (§2.2)."""
    _check_namespace(namespace)
    ns = f'namespace="{namespace}"'
    node_status = " and on (namespace, pod) ".join(
        f"gpu_operator_node_{check}_ready{{{ns}}} == 1" for check in ("driver", "toolkit", "cuda")
    )
    rules = [
        {
            # Nodes whose DCGM exporter reports at least one GPU (cf. gpu_operator_gpu_nodes_total).
            "record": "gpu_stack:gpu_nodes:count",
            "expr": "count(count by (Hostname) (DCGM_FI_DEV_GPU_TEMP)) or vector(0)",
        },
        {
            "record": "gpu_stack:gpus:count",
            "expr": "count(count by (Hostname, UUID) (DCGM_FI_DEV_GPU_TEMP)) or vector(0)",
        },
        {
            "record": "gpu_stack:mig_devices:count",
            "expr": 'count by (GPU_I_PROFILE) (DCGM_FI_PROF_GR_ENGINE_ACTIVE{GPU_I_PROFILE!=""})',
        },
        {
            # A validator pod is Ready only once every init check (driver, toolkit, cuda, plugin) passed.
            "record": "gpu_stack:validated_nodes:count",
            "expr": f"count({_validator_ready(namespace)} == 1) or vector(0)",
        },
        {
            # The same view from node-status-exporter, when it is deployed.
            "record": "gpu_stack:node_status_validated_nodes:count",
            "expr": f"count({node_status}) or vector(0)",
        },
        {
            "record": "gpu_stack:operand_daemonsets_unavailable:sum",
            "expr": f"sum by (daemonset) (kube_daemonset_status_number_unavailable{{{ns}}})",
        },
        {
            "record": "gpu_stack_info",
            "expr": "vector(1)",
            "labels": {"stack": stack, "release": release, "config_digest": config_digest},
        },
    ]
    return [{"name": "gpu-stack.recording", "rules": rules}]


def recorded_metric_names(groups: Iterable[dict[str, Any]]) -> set[str]:
    return {rule["record"] for group in groups for rule in group["rules"] if "record" in rule}


# --- Grafana ---------------------------------------------------------------------------------------------------

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def _pool_of_node() -> str:
    """One series per node of the selected pools, labelled Hostname and label_gpu_stack_pool (value 1)."""
    return (
        f'label_replace(max by (node, {POOL_LABEL}) (kube_node_labels{{{POOL_LABEL}=~"$pool"}}), '
        '"Hostname", "$1", "node", "(.*)")'
    )


def _in_pool(expr: str) -> str:
    """`expr` (DCGM series) restricted to the selected pools and labelled with the node's pool."""
    return f"{expr} * on (Hostname) group_left ({POOL_LABEL}) {_pool_of_node()}"


def _node(metric: str, extra: str = "") -> str:
    return f'{metric}{{Hostname=~"$node"{extra}}}'


def _per_gpu(metric: str) -> str:
    return f"max by ({GPU_LABELS}) ({_node(metric)})"


def _target(expr: str, legend: str, ref: str = "A", **extra: Any) -> dict[str, Any]:
    return {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "refId": ref, **extra}


def _panel(title: str, targets: list[dict[str, Any]], *, kind: str = "timeseries", unit: str = "short",
           description: str = "", w: int = 12, h: int = 8, **options: Any) -> dict[str, Any]:
    panel: dict[str, Any] = {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": targets,
        "gridPos": {"w": w, "h": h},
    }
    panel.update(options)
    return panel


def _row(title: str) -> dict[str, Any]:
    return {"type": "row", "title": title, "collapsed": False, "datasource": DATASOURCE, "panels": [],
            "gridPos": {"w": 24, "h": 1}}


def _layout(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Assign ids and x/y: rows span the width; panels fill left to right and wrap."""
    x = y = row_height = 0
    for number, panel in enumerate(panels, start=1):
        panel["id"] = number
        pos = panel["gridPos"]
        if panel["type"] == "row" or x + pos["w"] > 24:
            x, y, row_height = 0, y + row_height, 0
        pos["x"], pos["y"] = x, y
        if panel["type"] == "row":
            y += pos["h"]
        else:
            x += pos["w"]
            row_height = max(row_height, pos["h"])
    return panels


def _variables() -> list[dict[str, Any]]:
    node_query = f"query_result(count by (Hostname) ({_in_pool('DCGM_FI_DEV_GPU_TEMP')}))"
    return [
        {
            "name": "datasource",
            "label": "Data source",
            "type": "datasource",
            "query": "prometheus",
            "current": {},
            "hide": 0,
            "refresh": 1,
            "regex": "",
        },
        {
            "name": "pool",
            "label": "GPU pool",
            "type": "query",
            "datasource": DATASOURCE,
            "definition": f"label_values(kube_node_labels, {POOL_LABEL})",
            "query": f"label_values(kube_node_labels, {POOL_LABEL})",
            "includeAll": True,
            "allValue": ".*",
            "multi": True,
            "current": {},
            "hide": 0,
            "refresh": 2,
            "sort": 1,
            "regex": "",
        },
        {
            "name": "node",
            "label": "Node",
            "type": "query",
            "datasource": DATASOURCE,
            "definition": node_query,
            "query": node_query,
            "includeAll": True,
            "multi": True,
            "current": {},
            "hide": 0,
            "refresh": 2,
            "sort": 1,
            "regex": '/Hostname="([^"]+)"/',
        },
    ]


def dashboard(*, namespace: str, title: str = "GPU stack") -> dict[str, Any]:
    """A Grafana dashboard (JSON model) for the stack: GPUs per node and per pool, errors, MIG, stack health."""
    _check_namespace(namespace)
    pool = f"{{{{{POOL_LABEL}}}}}"
    sbe = _node("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL")
    mig_instances = _node("DCGM_FI_PROF_GR_ENGINE_ACTIVE", ', GPU_I_PROFILE!=""')
    fb_total = " + ".join(_node(f"DCGM_FI_DEV_FB_{part}") for part in ("USED", "FREE", "RESERVED"))
    panels = [
        _row("Stack health"),
        _panel("GPU nodes", [_target("gpu_stack:gpu_nodes:count", "GPU nodes")], kind="stat", w=4, h=4,
               description="Nodes whose DCGM exporter reports GPUs (recording rule gpu_stack:gpu_nodes:count)."),
        _panel("Validated nodes", [_target("gpu_stack:validated_nodes:count", "validated")], kind="stat", w=4, h=4,
               description=f"Nodes whose {VALIDATOR} pod is Ready: every driver, toolkit, CUDA and plugin check "
                           "passed."),
        _panel("GPUs", [_target("gpu_stack:gpus:count", "GPUs")], kind="stat", w=4, h=4),
        _panel("Unavailable operand pods",
               [_target("gpu_stack:operand_daemonsets_unavailable:sum", "{{daemonset}}")],
               kind="bargauge", w=12, h=4,
               description=f"Pods of each operand DaemonSet in namespace {namespace} that are not available."),
        _panel("Validator pods not Ready",
               [_target(_validators_not_ready(namespace), "{{node}}", format="table", instant=True)],
               kind="table", w=12, h=6,
               description="Nodes whose GPU operands are held back because a validation has not passed."),
        _panel("Deployed release", [_target("gpu_stack_info", "{{release}} {{config_digest}}",
                                            format="table", instant=True)],
               kind="table", w=12, h=6, description="Stack, release and config digest of the deployed gpu-stack."),
        _row("Utilisation"),
        _panel("GPU utilisation per node", [_target(f"avg by (Hostname) ({_node('DCGM_FI_DEV_GPU_UTIL')})",
                                                    "{{Hostname}}")], unit="percent",
               description="Whole GPUs only: DCGM does not report DCGM_FI_DEV_GPU_UTIL for MIG instances."),
        _panel("GPU utilisation per pool",
               [_target(f"avg by ({POOL_LABEL}) ({_in_pool(_node('DCGM_FI_DEV_GPU_UTIL'))})", pool)],
               unit="percent"),
        _panel("Tensor pipe activity per node",
               [_target(f"100 * avg by (Hostname) ({_node('DCGM_FI_PROF_PIPE_TENSOR_ACTIVE')})", "{{Hostname}}")],
               unit="percent"),
        _panel("Graphics engine activity per pool",
               [_target(f"100 * avg by ({POOL_LABEL}) ({_in_pool(_node('DCGM_FI_PROF_GR_ENGINE_ACTIVE'))})", pool)],
               unit="percent", description="Reported for whole GPUs and MIG instances alike."),
        _row("Framebuffer memory"),
        _panel("Framebuffer used per node",
               [_target(f"1048576 * sum by (Hostname) ({_node('DCGM_FI_DEV_FB_USED')})", "{{Hostname}}")],
               unit="bytes"),
        _panel("Framebuffer used per pool",
               [_target(f"100 * sum by ({POOL_LABEL}) ({_in_pool(_node('DCGM_FI_DEV_FB_USED'))}) / "
                        f"sum by ({POOL_LABEL}) ({_in_pool(f'({fb_total})')})", pool)],
               unit="percent"),
        _row("Temperature and power"),
        _panel("GPU temperature", [_target(_per_gpu("DCGM_FI_DEV_GPU_TEMP"), "{{Hostname}} GPU {{gpu}}")],
               unit="celsius"),
        _panel("Power draw per node",
               [_target(f"sum by (Hostname) ({_per_gpu('DCGM_FI_DEV_POWER_USAGE')})", "{{Hostname}}")],
               unit="watt"),
        _panel("Power draw per pool",
               [_target(f"sum by ({POOL_LABEL}) ({_in_pool(_per_gpu('DCGM_FI_DEV_POWER_USAGE'))})", pool)],
               unit="watt"),
        _row("Errors"),
        _panel("XID errors", [_target(f"{_per_gpu('DCGM_FI_DEV_XID_ERRORS')} != 0", "{{Hostname}} GPU {{gpu}}")],
               description="Code of the most recent XID error per GPU; only GPUs that reported one are shown."),
        _panel("ECC single-bit errors (volatile)",
               [_target(f"max by ({GPU_LABELS}) (increase({sbe}[$__rate_interval]))", "{{Hostname}} GPU {{gpu}}")],
               description="Corrected errors; a rising rate is an early sign of failing memory."),
        _panel("ECC double-bit errors (volatile)",
               [_target(_per_gpu("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"), "{{Hostname}} GPU {{gpu}}")],
               description="Uncorrectable errors since the driver was loaded; any value above 0 alerts."),
        _panel("Retired pages and row-remap failures",
               [_target(_per_gpu("DCGM_FI_DEV_RETIRED_DBE"), "{{Hostname}} GPU {{gpu}} retired (DBE)"),
                _target(_per_gpu("DCGM_FI_DEV_ROW_REMAP_FAILURE"), "{{Hostname}} GPU {{gpu}} remap failed", "B")]),
        _row("MIG"),
        _panel("MIG devices by profile",
               [_target(f"count by (GPU_I_PROFILE) ({mig_instances})",
                        "{{GPU_I_PROFILE}}")],
               kind="bargauge", description="MIG GPU instances by profile, on the selected nodes."),
        _panel("MIG instance activity",
               [_target(f"100 * {mig_instances}",
                        "{{Hostname}} GPU {{gpu}} {{GPU_I_PROFILE}} #{{GPU_I_ID}}")],
               unit="percent",
               description="Graphics engine activity per MIG instance (DCGM_FI_DEV_GPU_UTIL is not reported for MIG "
                           "instances)."),
    ]
    return {
        "uid": "gpu-stack",
        "title": title,
        "description": "GPU nodes, pools and the health of the gpu-stack deployment.",
        "tags": ["gpu-stack", "nvidia", "dcgm"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "timezone": "browser",
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "1m",
        "annotations": {"list": []},
        "links": [],
        "templating": {"list": _variables()},
        "panels": _layout(panels),
    }


def dashboard_targets(model: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for p in model["panels"] for t in p.get("targets", [])]


# --- PromQL helpers ---------------------------------------------------------------------------------------------

# Sample values for Grafana's built-in variables; dashboard variables get a plain sample string.
_GRAFANA_BUILTINS = {
    "__rate_interval": "5m",
    "__interval": "1m",
    "__range": "6h",
    "__interval_ms": "60000",
    "__range_s": "21600",
    "__range_ms": "21600000",
}
_GRAFANA_VARIABLE = re.compile(r"\$\{([A-Za-z_]\w*)(?::[^}]*)?\}|\[\[([A-Za-z_]\w*)(?::[^\]]*)?\]\]|\$([A-Za-z_]\w*)")


def substitute_grafana_variables(expr: str) -> str:
    """`expr` with Grafana variables ($pool, ${node}, $__rate_interval, ...) replaced by sample values.

    `$1`-style regex back-references (label_replace) are no variables and are left alone.
    """

    def value(match: re.Match[str]) -> str:
        name = next(g for g in match.groups() if g)
        if name.startswith("__"):
            if name not in _GRAFANA_BUILTINS:
                raise ValueError(f"unknown Grafana built-in variable ${name}")
            return _GRAFANA_BUILTINS[name]
        return f"sample-{name}"

    return _GRAFANA_VARIABLE.sub(value, expr)
