"""monitoring.serviceMonitor.honorLabels and .relabelings: the ClusterPolicy's dcgmExporter.serviceMonitor settings
(fact sheet §10) on both of gpu-stack's ServiceMonitors. A relabeling Prometheus would refuse is refused with its
key; the rendered endpoints pass the strict ServiceMonitor schema; the importer carries both fields."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from stacktest import ROOT, config_problems, objects, render, setter, stack_config

from components.config import limits
from components.config.relabel import RELABEL_TARGET
from gpustack import importer
from gpustack.crd_schemas import crd_validator
from gpustack.importer import ClusterFacts, ImportInputError
from gpustack.importer.stackfile import validate
from components.config import ConfigError

SM = "gpu-stack:monitoring.serviceMonitor"
NODE = {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}


def with_monitor(**settings: Any) -> dict[str, Any]:
    config = stack_config("prod-managed")
    config["gpu-stack:monitoring"]["serviceMonitor"].update(settings)
    return config


def relabel(*entries: dict[str, Any]) -> dict[str, Any]:
    return with_monitor(relabelings=list(entries))


# --- config ---------------------------------------------------------------------------------------------------


BAD = [
    ("honorLabels string", with_monitor(honorLabels="true"), f"{SM}.honorLabels", "allowed values: true, false"),
    ("relabelings not a list", with_monitor(relabelings={"targetLabel": "node"}), f"{SM}.relabelings", "expected a list"),
    ("too many", relabel(*[NODE] * (limits.MAX_RELABELINGS + 1)), f"{SM}.relabelings", f"at most {limits.MAX_RELABELINGS} items"),
    ("unknown field", relabel({**NODE, "target_label": "x"}), f"{SM}.relabelings[0].target_label", "did you mean 'targetLabel'"),
    ("action enum", relabel({**NODE, "action": "rename"}), f"{SM}.relabelings[0].action", "'replace', 'Replace', 'keep'"),
    ("source label grammar", relabel({"sourceLabels": ["pod-name"], "targetLabel": "pod"}), f"{SM}.relabelings[0].sourceLabels", "not a Prometheus label name"),
    ("too many source labels", relabel({"sourceLabels": ["a"] * (limits.MAX_RELABEL_SOURCE_LABELS + 1), "targetLabel": "x"}),
     f"{SM}.relabelings[0].sourceLabels", f"at most {limits.MAX_RELABEL_SOURCE_LABELS} items"),
    ("target label grammar", relabel({"sourceLabels": ["job"], "targetLabel": "my-label"}), f"{SM}.relabelings[0].targetLabel", "not a Prometheus label name"),
    ("replace without target", relabel({"sourceLabels": ["job"]}), f"{SM}.relabelings[0]", "targetLabel is required for action replace"),
    ("lowercase without target", relabel({"sourceLabels": ["job"], "action": "Lowercase"}), f"{SM}.relabelings[0]", "targetLabel is required for action lowercase"),
    ("hashmod template target", relabel({"sourceLabels": ["job"], "action": "hashmod", "modulus": 4, "targetLabel": "$1"}),
     f"{SM}.relabelings[0]", "not a plain label name"),
    ("hashmod without modulus", relabel({"sourceLabels": ["__address__"], "action": "hashmod", "targetLabel": "shard"}),
     f"{SM}.relabelings[0]", "modulus is required for action hashmod"),
    ("hashmod zero modulus", relabel({"sourceLabels": ["__address__"], "action": "hashmod", "targetLabel": "shard", "modulus": 0}),
     f"{SM}.relabelings[0].modulus", "greater than or equal to 1"),
    ("modulus string", relabel({"sourceLabels": ["__address__"], "action": "hashmod", "targetLabel": "shard", "modulus": "4"}),
     f"{SM}.relabelings[0].modulus", "expected a whole number"),
    ("modulus off hashmod", relabel({**NODE, "modulus": 4}), f"{SM}.relabelings[0]", "modulus is for action hashmod only"),
    ("regex syntax", relabel({**NODE, "regex": "(node"}), f"{SM}.relabelings[0].regex", "not a regular expression"),
    ("regex lookahead", relabel({**NODE, "regex": "(?!gpu).*"}), f"{SM}.relabelings[0].regex", "RE2"),
    ("keepequal regex", relabel({"sourceLabels": ["a"], "targetLabel": "b", "action": "keepequal", "regex": "x"}),
     f"{SM}.relabelings[0]", "takes sourceLabels and targetLabel only"),
    ("uppercase replacement", relabel({"sourceLabels": ["a"], "targetLabel": "b", "action": "uppercase", "replacement": "x"}),
     f"{SM}.relabelings[0]", "replacement cannot be set"),
    ("labeldrop source", relabel({"sourceLabels": ["a"], "action": "labeldrop", "regex": "pod"}), f"{SM}.relabelings[0]", "takes regex only"),
    ("labelmap replacement", relabel({"action": "labelmap", "regex": "__meta_(.+)", "replacement": "my-$1"}),
     f"{SM}.relabelings[0]", "is not a label name"),
]


@pytest.mark.parametrize("config, key, message", [pytest.param(c, k, m, id=name) for name, c, k, m in BAD])
def test_bad_values_are_refused_naming_the_key(config, key, message):
    found = config_problems(config)
    assert any(k == key and message in m for k, m in found), found


def test_a_huge_regex_is_refused_without_being_echoed():
    found = config_problems(relabel({**NODE, "regex": "(" * 5000}))
    assert found and all(len(m) < 400 for _, m in found), found


def test_the_target_grammar_does_not_backtrack():
    # Prometheus' own pattern has nested quantifiers; the rewrite answers a long miss at once.
    started = time.monotonic()
    assert not RELABEL_TARGET.fullmatch("a" * 1000 + "-")
    assert not RELABEL_TARGET.fullmatch("$ab" * 300 + "-")
    assert RELABEL_TARGET.fullmatch("${1}_$name") and not RELABEL_TARGET.fullmatch("1abc")
    assert time.monotonic() - started < 1


# --- render ---------------------------------------------------------------------------------------------------

RELABELINGS = [
    NODE,
    {"sourceLabels": ["__meta_kubernetes_pod_label_app", "__meta_kubernetes_namespace"], "separator": "/", "regex": "(.+)/(.+)",
     "replacement": "${2}", "targetLabel": "exporter_$1", "action": "replace"},
    {"sourceLabels": ["__address__"], "action": "HashMod", "modulus": 4, "targetLabel": "__tmp_shard"},
    {"action": "labeldrop", "regex": "container"},
]


def test_both_monitors_render_the_options_and_pass_the_strict_schema():
    config = with_monitor(honorLabels=True, relabelings=RELABELINGS)
    setter("gpu-stack:components", "nodeStatusExporter", value=True)(config)
    monitors = objects(render(config), "ServiceMonitor")
    for name in ("nvidia-dcgm-exporter", "nvidia-node-status-exporter"):
        endpoint = monitors[name]["spec"]["endpoints"][0]
        assert endpoint["honorLabels"] is True
        # Only the fields set, in the CRD's camelCase, entries in order.
        assert endpoint["relabelings"] == RELABELINGS
        errors = [e.message for e in crd_validator("monitoring.coreos.com/v1", "ServiceMonitor").iter_errors(monitors[name])]
        assert errors == [], (name, errors)


def test_unset_options_render_nothing():
    # honorLabels false is what the operator's Go Endpoint leaves out (omitempty); today's renders stay as they are.
    endpoint = objects(render(with_monitor(honorLabels=False, relabelings=[])), "ServiceMonitor")["nvidia-dcgm-exporter"]["spec"]["endpoints"][0]
    assert endpoint == {"port": "gpu-metrics", "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s"}


# --- import ---------------------------------------------------------------------------------------------------

FIXTURES = ROOT / "tests" / "fixtures" / "clusterpolicy"
AGENT = "harbor.platform.internal/gpu-stack/node-agent:0.10.0"


def run_import(monitor: dict[str, Any], **spec: Any) -> importer.ImportResult:
    policy = copy.deepcopy(importer.read_yaml(str(FIXTURES / "default-install.yaml"), "--clusterpolicy"))
    policy["spec"]["dcgmExporter"]["serviceMonitor"].update(monitor)
    for section, values in spec.items():
        policy["spec"].setdefault(section, {}).update(values)
    nodes = importer.nodes_of(importer.read_yaml(str(FIXTURES / "nodes-default.yaml"), "--nodes"), "nodes-default.yaml")
    return importer.import_cluster_policy(importer.cluster_policy_of(policy, "cp"), ClusterFacts("prod-admin", AGENT), nodes=nodes)


def test_the_import_carries_honor_labels_and_relabelings():
    result = run_import({"honorLabels": True, "relabelings": [
        NODE,
        {"sourceLabels": ["__address__"], "action": "hashmod", "modulus": 8, "targetLabel": "shard"},
        {"action": "labeldrop", "regex": "container", "modulus": 0},
    ]})
    monitor = result.config["gpu-stack:monitoring"]["serviceMonitor"]
    assert monitor["honorLabels"] is True
    # modulus 0 is Go's omitempty zero: the operator never wrote it, so neither does the import.
    assert monitor["relabelings"] == [NODE, {"sourceLabels": ["__address__"], "action": "hashmod", "modulus": 8, "targetLabel": "shard"},
                                      {"action": "labeldrop", "regex": "container"}]
    reported = {i.path for i in [*result.not_carried, *result.no_effect]}
    assert not any(p.startswith("spec.dcgmExporter.serviceMonitor") for p in reported), reported
    cfg = validate(result)
    assert cfg.monitoring.service_monitor.honor_labels and len(cfg.monitoring.service_monitor.relabelings) == 3


def test_the_import_leaves_the_defaults_out_and_reports_what_relabel_configs_lack():
    result = run_import({"honorLabels": False, "relabelings": [{**NODE, "metricsPath": "/x"}]})
    monitor = result.config["gpu-stack:monitoring"]["serviceMonitor"]
    assert "honorLabels" not in monitor and monitor["relabelings"] == [NODE]
    item = next(i for i in result.not_carried if i.path == "spec.dcgmExporter.serviceMonitor.relabelings[0].metricsPath")
    assert "RelabelConfig" in item.reason


def test_the_import_notes_that_the_node_status_exporter_gets_them_too():
    result = run_import({"relabelings": [NODE]}, nodeStatusExporter={"enabled": True})
    assert any("node status exporter" in note for note in result.notes), result.notes
    assert not any("node status exporter" in note for note in run_import({"relabelings": [NODE]}).notes)


def test_a_relabeling_prometheus_refuses_stops_the_import_naming_its_source():
    result = run_import({"relabelings": [{"sourceLabels": ["job"], "action": "hashmod", "targetLabel": "shard"}]})
    with pytest.raises(ConfigError) as caught:
        validate(result)
    assert any(key.startswith("gpu-stack:monitoring.serviceMonitor.relabelings[0]") and "spec.dcgmExporter.serviceMonitor" in key
               and "modulus is required" in message for key, message in caught.value.problems), caught.value.problems


def test_a_malformed_relabeling_is_refused_naming_the_field():
    with pytest.raises(ImportInputError, match=r"spec\.dcgmExporter\.serviceMonitor\.relabelings\[0\]\.sourceLabels: expected a list of strings"):
        run_import({"relabelings": [{"sourceLabels": "job", "targetLabel": "x"}]})
