"""The stack's Grafana dashboard (a JSON model): GPUs per node and per pool, framebuffer, temperature and power,
errors, MIG instances and the stack's own health, one function per dashboard row. Its queries use the recording
rules and metric names of :mod:`.monitoring_rules`.

Standard library only, relative imports only (like every catalog module).
"""

from __future__ import annotations

import re
from typing import Any

from .monitoring_rules import GPU_LABELS, POOL_LABEL, VALIDATOR, check_namespace, validators_not_ready

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


def _health_panels(namespace: str) -> list[dict[str, Any]]:
    """The dashboard's "Stack health" row."""
    return [
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
               [_target(validators_not_ready(namespace), "{{node}}", format="table", instant=True)],
               kind="table", w=12, h=6,
               description="Nodes whose GPU operands are held back because a validation has not passed."),
        _panel("Deployed release", [_target("gpu_stack_info", "{{release}} {{config_digest}}",
                                            format="table", instant=True)],
               kind="table", w=12, h=6, description="Stack, release and config digest of the deployed gpu-stack."),
    ]


def _utilisation_panels(pool: str) -> list[dict[str, Any]]:
    """The dashboard's "Utilisation" row."""
    return [
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
    ]


def _memory_panels(pool: str, fb_total: str) -> list[dict[str, Any]]:
    """The dashboard's "Framebuffer memory" row."""
    return [
        _row("Framebuffer memory"),
        _panel("Framebuffer used per node",
               [_target(f"1048576 * sum by (Hostname) ({_node('DCGM_FI_DEV_FB_USED')})", "{{Hostname}}")],
               unit="bytes"),
        _panel("Framebuffer used per pool",
               [_target(f"100 * sum by ({POOL_LABEL}) ({_in_pool(_node('DCGM_FI_DEV_FB_USED'))}) / "
                        f"sum by ({POOL_LABEL}) ({_in_pool(f'({fb_total})')})", pool)],
               unit="percent"),
    ]


def _power_panels(pool: str) -> list[dict[str, Any]]:
    """The dashboard's "Temperature and power" row."""
    return [
        _row("Temperature and power"),
        _panel("GPU temperature", [_target(_per_gpu("DCGM_FI_DEV_GPU_TEMP"), "{{Hostname}} GPU {{gpu}}")],
               unit="celsius"),
        _panel("Power draw per node",
               [_target(f"sum by (Hostname) ({_per_gpu('DCGM_FI_DEV_POWER_USAGE')})", "{{Hostname}}")],
               unit="watt"),
        _panel("Power draw per pool",
               [_target(f"sum by ({POOL_LABEL}) ({_in_pool(_per_gpu('DCGM_FI_DEV_POWER_USAGE'))})", pool)],
               unit="watt"),
    ]


def _error_panels(sbe: str) -> list[dict[str, Any]]:
    """The dashboard's "Errors" row."""
    return [
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
    ]


def _mig_panels(mig_instances: str) -> list[dict[str, Any]]:
    """The dashboard's "MIG" row."""
    return [
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


def dashboard(*, namespace: str, title: str = "GPU stack") -> dict[str, Any]:
    """A Grafana dashboard (JSON model) for the stack: GPUs per node and per pool, errors, MIG, stack health."""
    check_namespace(namespace)
    pool = f"{{{{{POOL_LABEL}}}}}"
    sbe = _node("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL")
    mig_instances = _node("DCGM_FI_PROF_GR_ENGINE_ACTIVE", ', GPU_I_PROFILE!=""')
    fb_total = " + ".join(_node(f"DCGM_FI_DEV_FB_{part}") for part in ("USED", "FREE", "RESERVED"))
    panels = [
        *_health_panels(namespace),
        *_utilisation_panels(pool),
        *_memory_panels(pool, fb_total),
        *_power_panels(pool),
        *_error_panels(sbe),
        *_mig_panels(mig_instances),
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
