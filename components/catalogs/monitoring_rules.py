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
from typing import Any


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


def check_namespace(namespace: str) -> None:
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


def validators_not_ready(namespace: str) -> str:
    return (
        f"({_validator_ready(namespace)} == 0) * on (namespace, pod) group_left (node) {_validator_node(namespace)}"
    )


def alert_groups(*, namespace: str, thresholds: AlertThresholds) -> list[dict[str, Any]]:
    """PrometheusRule `spec.groups`: GPU health alerts from DCGM, and the stack's own per-node health."""
    check_namespace(namespace)
    return [
        {"name": "gpu-stack.gpus", "rules": _gpu_alerts(thresholds)},
        {"name": "gpu-stack.stack-health", "rules": _stack_alerts(namespace, thresholds)},
    ]


def _gpu_alerts(t: AlertThresholds) -> list[dict[str, Any]]:
    gpu = "GPU {{ $labels.gpu }} ({{ $labels.modelName }}, {{ $labels.UUID }}) on node {{ $labels.Hostname }}"
    temperature = f"max by ({GPU_LABELS}) (DCGM_FI_DEV_GPU_TEMP)"
    framebuffer = (
        "100 * DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE + DCGM_FI_DEV_FB_RESERVED)"
    )
    return [
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


def _stack_alerts(namespace: str, t: AlertThresholds) -> list[dict[str, Any]]:
    return [
        _alert(
            "GpuStackValidatorNotReady",
            validators_not_ready(namespace),
            t.validator_not_ready_for,
            "warning",
            f"GPU node not validated for {t.validator_not_ready_for}",
            f"Validator pod {{{{ $labels.pod }}}} in namespace {namespace} on node {{{{ $labels.node }}}} has not "
            f"been Ready for {t.validator_not_ready_for}: one of the driver, toolkit, CUDA or device-plugin checks "
            "has not passed, so GPU operands on that node are held back. Check the pod's init containers.",
        ),
    ]


def recording_groups(*, namespace: str, stack: str, release: str, config_digest: str) -> list[dict[str, Any]]:
    """The stack's stand-in for the GPU Operator's `gpu_operator_*` controller metrics (§2.2)."""
    check_namespace(namespace)
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


# --- Grafana ---------------------------------------------------------------------------------------------------
