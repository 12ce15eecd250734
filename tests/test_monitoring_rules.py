"""Alerts, recording rules, dashboard and DCGM metrics list: real PromQL, over metrics that exist.

Every query is parsed by a real PromQL parser, and every metric a query names must come from the DCGM metrics
list the stack renders, from a recording rule the stack defines, or from a declared external exporter
(kube-state-metrics, node-status-exporter). The Prometheus Operator objects carrying them are checked against
the strict CRD schemas.
"""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from components.catalogs import dcgm_metrics
from components.catalogs import monitoring_rules
from components.catalogs.dcgm_metrics import DEFAULT_METRICS, Metric, exported_metric_names, metrics_csv, parse_metrics_csv
from components.catalogs.grafana_dashboard import dashboard, substitute_grafana_variables
from components.catalogs.monitoring_rules import EXTERNAL_METRICS, AlertThresholds, alert_groups, recording_groups
from promqltest import promql_metric_names
from gpustack import schema
from gpustack.crd_schemas import crd_validator

NAMESPACE = "gpu-operator"


def _alerts(thresholds: AlertThresholds = AlertThresholds()) -> list[dict]:
    return [rule for group in alert_groups(namespace=NAMESPACE, thresholds=thresholds) for rule in group["rules"]]


def _alert(name: str, thresholds: AlertThresholds = AlertThresholds()) -> dict:
    (rule,) = [r for r in _alerts(thresholds) if r["alert"] == name]
    return rule


def _records() -> list[dict]:
    groups = recording_groups(namespace=NAMESPACE, stack="prod", release="1.4.0", config_digest="sha256:abc")
    return [rule for group in groups for rule in group["rules"]]


def _dashboard_exprs() -> list[str]:
    model = dashboard(namespace=NAMESPACE)
    return [substitute_grafana_variables(t["expr"]) for p in model["panels"] for t in p.get("targets", [])]


def _all_exprs() -> list[str]:
    return [r["expr"] for r in _alerts()] + [r["expr"] for r in _records()] + _dashboard_exprs()


def _unknown_metrics(metrics) -> dict[str, set[str]]:
    known = exported_metric_names(metrics) | {r["record"] for r in _records()} | EXTERNAL_METRICS
    unknown = {expr: promql_metric_names(expr) - known for expr in _all_exprs()}
    return {expr: names for expr, names in unknown.items() if names}


# --- PromQL ------------------------------------------------------------------------------------------------------


def test_every_alert_and_recording_rule_is_single_line_promql():
    for rule in _alerts() + _records():
        assert "\n" not in rule["expr"]
        assert promql_metric_names(rule["expr"]) or rule.get("record") == "gpu_stack_info", rule


def test_invalid_promql_is_rejected_by_the_parser():
    with pytest.raises(ValueError):
        promql_metric_names("sum(rate(DCGM_FI_DEV_GPU_UTIL[5m])")


def test_metric_names_are_found_in_every_kind_of_selector():
    expr = (
        'sum by (a) (rate(foo{x="y"}[5m])) / on (a) group_left bar offset 5m'
        ' + max_over_time(baz[1h:5m]) * -(qux) + {__name__="quux"} + count_values("v", corge)'
        ' + {__name__=~"regex_.*"}'
    )
    assert promql_metric_names(expr) == {"foo", "bar", "baz", "qux", "quux", "corge"}


def test_grafana_variables_are_substituted_but_regex_backreferences_are_not():
    expr = 'rate(x{Hostname=~"$node", pool=~"${pool}"}[$__rate_interval]) + label_replace(y, "a", "$1", "b", "(.*)")'
    substituted = substitute_grafana_variables(expr)
    assert "$node" not in substituted and "${pool}" not in substituted and "$__rate_interval" not in substituted
    assert '"$1"' in substituted
    assert promql_metric_names(substituted) == {"x", "y"}
    with pytest.raises(ValueError):
        substitute_grafana_variables("x[$__no_such_builtin]")


# --- alerts --------------------------------------------------------------------------------------------------------


def test_every_alert_has_a_severity_a_summary_and_a_description():
    names = [rule["alert"] for rule in _alerts()]
    assert len(names) == len(set(names))
    for rule in _alerts():
        assert re.fullmatch(r"GpuStack[A-Z][A-Za-z]+", rule["alert"])
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_the_expected_alerts_exist():
    assert {rule["alert"] for rule in _alerts()} == {
        "GpuStackTemperatureWarning",
        "GpuStackTemperatureCritical",
        "GpuStackFramebufferNearlyFull",
        "GpuStackDoubleBitEccError",
        "GpuStackUtilizationSaturated",
        "GpuStackXidError",
        "GpuStackValidatorNotReady",
    }


def test_thresholds_drive_the_alert_expressions_and_durations():
    default = AlertThresholds()
    assert _alert("GpuStackTemperatureWarning")["expr"].endswith("> 85")
    assert _alert("GpuStackTemperatureCritical")["expr"].endswith("> 90")
    assert _alert("GpuStackFramebufferNearlyFull")["expr"].endswith("> 95")
    assert _alert("GpuStackUtilizationSaturated")["for"] == "30m"
    assert _alert("GpuStackValidatorNotReady")["for"] == "15m"

    changed = dataclasses.replace(
        default,
        temperature_warning_celsius=80,
        temperature_critical_celsius=88,
        framebuffer_used_percent=90,
        utilization_percent=99,
        utilization_for="2h",
        validator_not_ready_for="45m",
    )
    assert _alert("GpuStackTemperatureWarning", changed)["expr"].endswith("> 80")
    assert _alert("GpuStackTemperatureCritical", changed)["expr"].endswith("> 88")
    assert _alert("GpuStackFramebufferNearlyFull", changed)["expr"].endswith("> 90")
    assert _alert("GpuStackUtilizationSaturated", changed)["expr"].endswith("> 99")
    assert _alert("GpuStackUtilizationSaturated", changed)["for"] == "2h"
    assert _alert("GpuStackValidatorNotReady", changed)["for"] == "45m"
    assert "88" in _alert("GpuStackTemperatureCritical", changed)["annotations"]["summary"]


def test_nonsensical_thresholds_are_refused():
    with pytest.raises(ValueError):
        AlertThresholds(temperature_warning_celsius=95, temperature_critical_celsius=90)
    with pytest.raises(ValueError):
        AlertThresholds(framebuffer_used_percent=120)
    with pytest.raises(ValueError):
        AlertThresholds(utilization_for="half an hour")


def test_framebuffer_alert_compares_used_with_all_framebuffer_memory():
    names = promql_metric_names(_alert("GpuStackFramebufferNearlyFull")["expr"])
    assert names == {"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED"}


def test_xid_alert_reports_the_xid_value():
    rule = _alert("GpuStackXidError")
    assert promql_metric_names(rule["expr"]) == {"DCGM_FI_DEV_XID_ERRORS"}
    assert "!= 0" in rule["expr"]
    assert "{{ $value }}" in rule["annotations"]["description"]
    assert "{{ $labels.Hostname }}" in rule["annotations"]["description"]


def test_validator_alert_is_scoped_to_the_stack_namespace_and_names_the_node():
    rule = _alert("GpuStackValidatorNotReady")
    assert promql_metric_names(rule["expr"]) == {"kube_pod_status_ready", "kube_pod_info"}
    assert rule["expr"].count(f'namespace="{NAMESPACE}"') == 2
    assert "group_left (node)" in rule["expr"]
    other = alert_groups(namespace="gpu-system", thresholds=AlertThresholds())
    assert 'namespace="gpu-system"' in other[-1]["rules"][0]["expr"]


# --- recording rules -----------------------------------------------------------------------------------------------


def test_recording_rules_follow_the_level_metric_operations_convention():
    for rule in _records():
        if rule["record"] != "gpu_stack_info":
            assert re.fullmatch(r"gpu_stack:[a-z_]+:[a-z_]+", rule["record"]), rule["record"]
    records = {r["record"] for r in _records()}
    assert {
        "gpu_stack:gpu_nodes:count",
        "gpu_stack:validated_nodes:count",
        "gpu_stack:operand_daemonsets_unavailable:sum",
        "gpu_stack_info",
    } <= records


def test_info_series_names_the_deployed_stack():
    (info,) = [r for r in _records() if r["record"] == "gpu_stack_info"]
    assert info["expr"] == "vector(1)"
    assert info["labels"] == {"stack": "prod", "release": "1.4.0", "config_digest": "sha256:abc"}


def test_operand_availability_is_per_daemonset_in_the_stack_namespace():
    (rule,) = [r for r in _records() if r["record"] == "gpu_stack:operand_daemonsets_unavailable:sum"]
    assert rule["expr"].startswith("sum by (daemonset) (")
    assert f'namespace="{NAMESPACE}"' in rule["expr"]


# --- every metric comes from somewhere --------------------------------------------------------------------------


def test_every_metric_used_is_exported_recorded_or_external():
    assert _unknown_metrics(DEFAULT_METRICS) == {}


def test_dropping_ecc_from_the_metrics_list_breaks_the_alerts():
    without_ecc = [m for m in DEFAULT_METRICS if "ECC" not in m.field]
    missing = set().union(*_unknown_metrics(without_ecc).values())
    assert missing == {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"}
    ecc_alert = _alert("GpuStackDoubleBitEccError")["expr"]
    assert "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" in promql_metric_names(ecc_alert)


def test_mig_panels_do_not_rely_on_gpu_util():
    model = dashboard(namespace=NAMESPACE)
    for panel in model["panels"]:
        if panel["type"] != "row" and panel["title"].startswith("MIG"):
            for target in panel["targets"]:
                assert "DCGM_FI_DEV_GPU_UTIL" not in target["expr"]
                assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in target["expr"]


# --- dashboard --------------------------------------------------------------------------------------------------


def test_dashboard_is_json_with_unique_placed_panels():
    model = dashboard(namespace=NAMESPACE)
    assert json.loads(json.dumps(model)) == model
    assert model["uid"] == "gpu-stack" and model["title"] == "GPU stack"
    assert dashboard(namespace=NAMESPACE, title="GPUs")["title"] == "GPUs"
    ids = [p["id"] for p in model["panels"]]
    assert len(ids) == len(set(ids))
    for panel in model["panels"]:
        assert {"x", "y", "w", "h"} <= panel["gridPos"].keys(), panel["title"]
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        if panel["type"] != "row":
            assert panel["targets"], panel["title"]
            for target in panel["targets"]:
                assert {"expr", "refId", "legendFormat"} <= target.keys()


def test_dashboard_panels_do_not_overlap():
    cells = set()
    for panel in dashboard(namespace=NAMESPACE)["panels"]:
        pos = panel["gridPos"]
        mine = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not cells & mine, panel["title"]
        cells |= mine


def test_dashboard_queries_parse_after_variable_substitution():
    for expr in _dashboard_exprs():
        assert "$" not in expr.replace('"$1"', "")
        assert promql_metric_names(expr)


def test_dashboard_variables_select_pools_then_nodes():
    variables = {v["name"]: v for v in dashboard(namespace=NAMESPACE)["templating"]["list"]}
    assert set(variables) == {"datasource", "pool", "node"}
    assert variables["datasource"]["query"] == "prometheus"
    assert "label_gpu_stack_pool" in variables["pool"]["query"] and variables["pool"]["includeAll"]
    node_query = variables["node"]["query"]
    assert "$pool" in node_query and variables["node"]["includeAll"]
    inner = re.fullmatch(r"query_result\((.*)\)", node_query).group(1)
    assert promql_metric_names(substitute_grafana_variables(inner)) == {"DCGM_FI_DEV_GPU_TEMP", "kube_node_labels"}


def test_dashboard_covers_per_node_and_per_pool_views():
    titles = {p["title"] for p in dashboard(namespace=NAMESPACE)["panels"]}
    for wanted in (
        "GPU utilisation per node",
        "GPU utilisation per pool",
        "Framebuffer used per node",
        "Framebuffer used per pool",
        "GPU temperature",
        "Power draw per node",
        "XID errors",
        "ECC double-bit errors (volatile)",
        "MIG devices by profile",
        "Validated nodes",
        "Unavailable operand pods",
    ):
        assert wanted in titles
    per_pool = [p for p in dashboard(namespace=NAMESPACE)["panels"] if p["title"].endswith("per pool")]
    for panel in per_pool:
        assert all("kube_node_labels" in promql_metric_names(substitute_grafana_variables(t["expr"]))
                   for t in panel["targets"])


# --- DCGM metrics CSV ----------------------------------------------------------------------------------------------


def test_metrics_csv_round_trips_and_explains_itself():
    text = metrics_csv(DEFAULT_METRICS)
    assert parse_metrics_csv(text) == list(DEFAULT_METRICS)
    assert text.startswith("# ") and "gpu-stack" in text.splitlines()[0]
    assert "ECC" in "".join(line for line in text.splitlines() if line.startswith("#"))


# The fields enabled in the image's built-in etc/dcp-metrics-included.csv, with their types.
BUILTIN = {
    **dict.fromkeys(
        ["DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_GPU_TEMP",
         "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_ENC_UTIL",
         "DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED",
         "DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_VGPU_LICENSE_STATUS", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
         "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
         "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES"],
        "gauge",
    ),
    **dict.fromkeys(
        ["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_RETIRED_SBE",
         "DCGM_FI_DEV_RETIRED_DBE", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
         "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"],
        "counter",
    ),
    "DCGM_FI_DRIVER_VERSION": "label",
}


def test_default_metrics_are_the_builtin_set_plus_volatile_ecc_counters():
    fields = {m.field: m.type for m in DEFAULT_METRICS}
    assert len(fields) == len(DEFAULT_METRICS)
    assert fields == {
        **BUILTIN,
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "counter",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "counter",
    }
    assert "DCGM_FI_DRIVER_VERSION" not in exported_metric_names(DEFAULT_METRICS)


@pytest.mark.parametrize(
    "line",
    [
        "DCGM_FI_DEV_GPU_TEMP, gauge",
        "DCGM_FI_DEV_GPU_TEMP, gauge, too, many",
        "DCGM_FI_DEV_GPU_TEMP, histogram, wrong type",
        "GPU_TEMP, gauge, not a DCGM field",
        "DCGM_FI_DEV_GPU_TEMP, gauge, ",
    ],
)
def test_malformed_metrics_lines_are_refused_with_their_line_number(line):
    with pytest.raises(ValueError, match="line 3"):
        parse_metrics_csv(f"# comment\nDCGM_FI_DEV_SM_CLOCK, gauge, ok\n{line}\n")


def test_help_texts_that_would_break_the_csv_are_refused():
    with pytest.raises(ValueError):
        metrics_csv([Metric("DCGM_FI_DEV_GPU_TEMP", "gauge", "degrees, Celsius")])
    with pytest.raises(ValueError):
        metrics_csv([dcgm_metrics.DEFAULT_METRICS[0]] * 2)


# --- Prometheus Operator CRD schemas -----------------------------------------------------------------------------


def _service_monitor() -> dict:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": "nvidia-dcgm-exporter", "namespace": NAMESPACE, "labels": {"app": "nvidia-dcgm-exporter"}},
        "spec": {
            "jobLabel": "app",
            "selector": {"matchLabels": {"app": "nvidia-dcgm-exporter"}},
            "namespaceSelector": {"matchNames": [NAMESPACE]},
            "endpoints": [
                {
                    "port": "gpu-metrics",
                    "path": "/metrics",
                    "interval": "15s",
                    "scrapeTimeout": "10s",
                    "honorLabels": True,
                    "relabelings": [
                        {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node",
                         "action": "replace"}
                    ],
                }
            ],
        },
    }


def _prometheus_rule() -> dict:
    groups = alert_groups(namespace=NAMESPACE, thresholds=AlertThresholds()) + recording_groups(
        namespace=NAMESPACE, stack="prod", release="1.4.0", config_digest="sha256:abc"
    )
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "gpu-stack", "namespace": NAMESPACE},
        "spec": {"groups": groups},
    }


def _errors(obj: dict) -> list[str]:
    return [e.message for e in crd_validator(obj["apiVersion"], obj["kind"]).iter_errors(obj)]


def test_well_formed_monitoring_objects_are_accepted():
    assert _errors(_service_monitor()) == []
    assert _errors(_prometheus_rule()) == []


def test_schema_module_falls_back_to_the_crd_schemas():
    assert schema.validate(_service_monitor(), "1.30") == []
    assert schema.validate(_prometheus_rule(), "1.30") == []
    assert crd_validator("monitoring.coreos.com/v1", "PodMonitor") is None


def test_unknown_fields_are_rejected_at_every_level():
    sm = _service_monitor()
    sm["spec"]["endpoints"][0]["relabelings"][0]["target_label"] = "node"
    assert _errors(sm)
    sm = _service_monitor()
    sm["spec"]["endpoint"] = sm["spec"].pop("endpoints")
    assert _errors(sm)
    rule = _prometheus_rule()
    rule["spec"]["groups"][0]["rules"][0]["severity"] = "critical"
    assert _errors(rule)


def test_a_rule_needs_exactly_one_of_alert_and_record_and_an_expr():
    both = _prometheus_rule()
    both["spec"]["groups"][0]["rules"][0]["record"] = "gpu_stack:x:y"
    assert _errors(both)
    neither = _prometheus_rule()
    del neither["spec"]["groups"][0]["rules"][0]["alert"]
    assert _errors(neither)
    no_expr = _prometheus_rule()
    del no_expr["spec"]["groups"][0]["rules"][0]["expr"]
    assert _errors(no_expr)


def test_bad_durations_and_relabel_actions_are_rejected():
    sm = _service_monitor()
    sm["spec"]["endpoints"][0]["interval"] = "15 seconds"
    assert _errors(sm)
    sm = _service_monitor()
    sm["spec"]["endpoints"][0]["relabelings"][0]["action"] = "rename"
    assert _errors(sm)
    rule = _prometheus_rule()
    rule["spec"]["groups"][0]["rules"][0]["for"] = "ten minutes"
    assert _errors(rule)


def test_monitoring_rules_module_does_not_import_pulumi():
    for module in (monitoring_rules, dcgm_metrics):
        source = open(module.__file__).read()
        assert not re.search(r"^\s*(import|from)\s+pulumi", source, re.MULTILINE), module.__name__
