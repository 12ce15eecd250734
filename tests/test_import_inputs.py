"""`python -m gpustack import` refuses every malformed input (ClusterPolicy, Helm values, ConfigMaps, nodes) with
an ImportInputError naming the input and the field path, before any mapping reads it: never an AttributeError or
TypeError from deep inside the mapping. Config level only: no render."""

from __future__ import annotations

import copy
import functools
from typing import Any, Callable, Optional

import pytest

from gpustack import importer
from gpustack.importer.clusterpolicy import _Spec
from gpustack.importer.shapes import ANY_LIST, BOOLEAN, ENV_LIST, INT_OR_PERCENT_KIND, RELABELINGS, STRING_LIST, TOLERATIONS
from gpustack.importer.spec_fields import HELM_FIELDS, SPEC_FIELDS, validate_helm_values, validate_spec_fields
from gpustack.importer import ClusterFacts, ImportInputError
from stacktest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "clusterpolicy"
AGENT = "harbor.platform.internal/gpu-stack/node-agent:0.10.0"
FACTS = ClusterFacts("prod-admin", AGENT, kubernetes_versions=("1.31",), gpu_models=((None, "L40S"),), os="ubuntu22.04")
# An error is one line a terminal shows whole: the path, what was expected, a bounded value at most.
MAX_MESSAGE = 300


@functools.lru_cache(maxsize=None)
def _read(name: str) -> Any:
    return importer.read_yaml(str(FIXTURES / name), name)


def fixture(name: str) -> Any:
    return copy.deepcopy(_read(name))


def put(document: dict, path: str, value: Any) -> dict:
    """`document` with the dotted `path` set to `value` (mappings created on the way)."""
    node = document
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return document


def import_policy(policy: Any, *, helm: Any = None, nodes: Any = None, configmaps: tuple = (),
                  facts: ClusterFacts = FACTS) -> None:
    importer.import_cluster_policy(
        importer.cluster_policy_of(policy, "cp.yaml"),
        facts,
        helm_values=helm,
        nodes=importer.nodes_of(nodes, "nodes.yaml") if nodes is not None else None,
        configmaps=importer.configmaps_of([("cm.yaml", c) for c in configmaps]),
    )


def policy_with(path: str, value: Any) -> Callable[[], None]:
    return lambda: import_policy(put(fixture("minimal.yaml"), path, value))


def helm_with(path: str, value: Any) -> Callable[[], None]:
    return lambda: import_policy(fixture("minimal.yaml"), helm=put(fixture("helm-values.yaml"), path, value))


def configmap_with(path: str, value: Any) -> Callable[[], None]:
    return lambda: importer.configmaps_of([("cm.yaml", put(fixture("configmap-host.yaml"), path, value))])


def node_with(path: str, value: Any) -> Callable[[], None]:
    def run() -> None:
        nodes = fixture("nodes-default.yaml")
        put(nodes["items"][0], path, value)
        importer.nodes_of(nodes, "nodes.yaml")
    return run


def plugin_config(text: str) -> Callable[[], None]:
    """The host-driver ClusterPolicy with its device-plugin ConfigMap's default config replaced by `text`."""
    def run() -> None:
        facts = ClusterFacts("dc2-admin", AGENT, kubernetes_versions=("1.31",), gpu_models=((None, "L40S"),), os="rhel9")
        import_policy(fixture("host-driver.yaml"), configmaps=(put(fixture("configmap-host.yaml"), "data.default", text),), facts=facts)
    return run


CASES: list[tuple[str, Callable[[], None], str]] = [
    # ClusterPolicy: one per kind of field
    ("string", policy_with("spec.driver.repository", ["x"]), "spec.driver.repository: expected a string, got list"),
    ("string-gds", policy_with("spec.gds", {"enabled": True, "repository": 5}), "spec.gds.repository: expected a string, got integer"),
    ("configmap-name", policy_with("spec.migManager.config.name", ["x"]), "spec.migManager.config.name: expected a string, got list"),
    ("integer", policy_with("spec.driver.upgradePolicy", {"autoUpgrade": True, "maxParallelUpgrades": [1]}),
     "spec.driver.upgradePolicy.maxParallelUpgrades: expected an integer, got list"),
    ("integer-not-bool", policy_with("spec.driver.startupProbe.periodSeconds", True),
     "spec.driver.startupProbe.periodSeconds: expected an integer, got bool"),
    ("int-or-percent", policy_with("spec.daemonsets.rollingUpdate.maxUnavailable", "many"),
     "spec.daemonsets.rollingUpdate.maxUnavailable: expected an integer or a percentage such as 25%, got 'many'"),
    ("mapping", policy_with("spec.dcgmExporter.serviceMonitor", {"enabled": True, "additionalLabels": ["x"]}),
     "spec.dcgmExporter.serviceMonitor.additionalLabels: expected a mapping, got list"),
    ("mapping-on-the-way", policy_with("spec.driver.upgradePolicy", "auto"), "spec.driver.upgradePolicy: expected a mapping, got string"),
    ("string-map-value", policy_with("spec.daemonsets.labels", {"team": 7}), "spec.daemonsets.labels.team: expected a string, got integer"),
    ("list", policy_with("spec.driver.imagePullSecrets", "regcred"), "spec.driver.imagePullSecrets: expected a list of strings, got string"),
    ("list-item", policy_with("spec.toolkit.args", ["--debug", 3]), "spec.toolkit.args[1]: expected a string, got integer"),
    ("env-value", policy_with("spec.driver.env", [{"name": "X", "value": 1}]), "spec.driver.env[0].value: expected a string, got integer"),
    ("env-name", policy_with("spec.toolkit.env", [{"value": "1"}]), "spec.toolkit.env[0]: an env entry {name, value} without `name`"),
    ("toleration", policy_with("spec.daemonsets.tolerations", [{"key": "a", "tolerationSeconds": "60"}]),
     "spec.daemonsets.tolerations[0].tolerationSeconds: expected an integer, got string"),
    ("unicode-digits", policy_with("spec.driver.manager.env", [{"name": "DRAIN_TIMEOUT_SECONDS", "value": "\u09e90s"}]),
     "spec.driver.manager.env[DRAIN_TIMEOUT_SECONDS]: '\u09e90s' is not a duration"),
    ("bool", policy_with("spec.driver.hostNetwork", ["true"]), "spec.driver.hostNetwork: expected true or false, got list"),
    ("bool-scalar", policy_with("spec.gfd.enabled", "yes"), "spec.gfd.enabled: got 'yes'; allowed values: true, false"),
    ("section", policy_with("spec.toolkit", ["enabled"]), "spec.toolkit: expected a mapping, got list"),
    ("spec", policy_with("spec", ["driver"]), "the ClusterPolicy has no `spec` mapping"),
    ("metadata", policy_with("metadata", ["x"]), "cp.yaml: metadata: expected a mapping, got list"),
    ("metadata-name", policy_with("metadata.name", {"a": 1}), "cp.yaml: metadata.name: expected a string, got mapping"),
    ("status", policy_with("status", "ready"), "cp.yaml: status: expected a mapping, got string"),
    ("status-namespace", policy_with("status.namespace", 3), "cp.yaml: status.namespace: expected a string, got integer"),
    ("spec-key", policy_with("spec.driver", {1: "x"}), "spec.driver: keys must be strings, found a key of type integer"),
    # Helm values: their own paths, before they are put in ClusterPolicy shape
    ("helm-string", helm_with("driver.version", 595), "--helm-values: driver.version: expected a string, got integer"),
    ("helm-renamed", helm_with("driver.upgradePolicy.gpuPodDeletion.force", "yes"),
     "--helm-values: driver.upgradePolicy.gpuPodDeletion.force: got 'yes'; allowed values: true, false"),
    ("helm-section", helm_with("nfd", ["enabled"]), "--helm-values: nfd: expected a mapping, got list"),
    ("helm-chart-only", helm_with("gpuCluster.deployCR", "true"), "--helm-values: gpuCluster.deployCR: got 'true'"),
    ("helm-list", helm_with("extraObjects", "x"), "--helm-values: extraObjects: expected a list, got string"),
    ("helm-root", lambda: import_policy(fixture("minimal.yaml"), helm=["x"]), "--helm-values: expected a mapping of Helm values"),
    # ConfigMaps: data string -> string, a name
    ("configmap-data", configmap_with("data", ["x"]), "cm.yaml: ConfigMap device-plugin-config: data: expected a mapping, got list"),
    ("configmap-data-value", configmap_with("data.default", {"version": "v1"}), "cm.yaml: ConfigMap device-plugin-config: data.default: expected a string, got mapping"),
    ("configmap-metadata", configmap_with("metadata", "x"), "cm.yaml: metadata: expected a mapping, got string"),
    ("configmap-name-type", configmap_with("metadata.name", ["x"]), "cm.yaml: metadata.name: expected a string, got list"),
    ("plugin-config-flags", plugin_config("version: v1\nflags: [migStrategy]\n"),
     "configmap device-plugin-config, key default: flags: expected a mapping, got list"),
    ("plugin-config-replicas", plugin_config("sharing:\n  timeSlicing:\n    resources: [{name: nvidia.com/gpu, replicas: two}]\n"),
     "configmap device-plugin-config, key default: sharing.timeSlicing.resources[0].replicas: expected an integer, got string"),
    # Nodes: labels string -> string, bounded as the API server bounds them
    ("node-labels", node_with("metadata.labels", ["x"]), "nodes.yaml: items[0].metadata.labels: expected a mapping, got list"),
    ("node-label-value", node_with("metadata.labels.team", True), "nodes.yaml: items[0].metadata.labels.team: expected a string, got bool"),
    ("node-label-long", node_with("metadata.labels.team", "x" * 5000), "nodes.yaml: items[0].metadata.labels.team: "),
    ("node-label-key", node_with("metadata.labels", {"bad key/": "x"}), "nodes.yaml: items[0].metadata.labels: key "),
    ("node-metadata", node_with("metadata", ["x"]), "nodes.yaml: items[0].metadata: expected a mapping, got list"),
    ("node-kubelet", node_with("status.nodeInfo.kubeletVersion", 1.31), "nodes.yaml: items[0].status.nodeInfo.kubeletVersion: expected a string, got float"),
]


@pytest.mark.parametrize("run, expected", [pytest.param(run, expected, id=name) for name, run, expected in CASES])
def test_a_malformed_input_is_refused_naming_the_field(run, expected):
    with pytest.raises(ImportInputError) as caught:
        run()
    message = str(caught.value)
    assert expected in message
    assert "\n" not in message and len(message) <= MAX_MESSAGE, message


def test_a_huge_or_secret_value_is_never_echoed():
    for value in ("y" * 10_000, "nvapi-" + "k" * 40):
        with pytest.raises(ImportInputError) as caught:
            policy_with("spec.driver.enabled", value)()
        assert len(str(caught.value)) <= MAX_MESSAGE and "k" * 40 not in str(caught.value)
    with pytest.raises(ImportInputError) as caught:
        policy_with("spec.driver.repository", ["z" * 10_000])()
    assert "z" * 100 not in str(caught.value)


def _wrong_value(kind: Any) -> Any:
    """A value of the wrong type for `kind`: a mapping where a list goes, a list anywhere else."""
    return {"x": "y"} if kind in (STRING_LIST, ENV_LIST, TOLERATIONS, RELABELINGS, ANY_LIST) else [["x"]]


@pytest.mark.parametrize("table, validate, prefix", [
    (SPEC_FIELDS, lambda data: validate_spec_fields(data), "spec."),
    (HELM_FIELDS, lambda data: validate_helm_values(data), "--helm-values: "),
])
def test_every_typed_field_refuses_a_wrong_type(table, validate, prefix):
    for path, kind in table.items():
        data = put({}, path, _wrong_value(kind))
        with pytest.raises(ImportInputError) as caught:
            validate(data)
        assert str(caught.value).startswith(f"{prefix}{path}: "), (path, str(caught.value))
    # And the kinds with more than a type to them.
    for path, kind in table.items():
        if kind is INT_OR_PERCENT_KIND:
            with pytest.raises(ImportInputError, match="a percentage"):
                validate(put({}, path, "9" * 20))
        if kind is BOOLEAN:
            with pytest.raises(ImportInputError, match="allowed values: true, false"):
                validate(put({}, path, 1))


ROLE = "virt.platform.internal/gpu-role"
# The scenarios of tests/test_import.py, at config level: every path the mapping reads there must be typed.
SCENARIOS: list[tuple[str, dict[str, Any]]] = [
    ("default-install.yaml", {"nodes": "nodes-default.yaml", "facts": ClusterFacts("prod-admin", AGENT)}),
    ("host-driver.yaml", {"configmaps": ("configmap-host.yaml",), "facts": ClusterFacts(
        "dc2-admin", AGENT, kubernetes_versions=("1.31",), gpu_models=((None, "L40S"),), os="rhel9")}),
    ("mig-mixed.yaml", {"nodes": "nodes-mig.yaml", "configmaps": ("configmaps-mig.yaml",),
                        "facts": ClusterFacts("train-admin", AGENT, pool_labels=("platform.internal/gpu-pool",))}),
    ("differential-base.yaml", {"nodes": "nodes-default.yaml", "configmaps": ("differential-configmaps.yaml",),
                                "facts": ClusterFacts("prod-admin", AGENT)}),
    ("minimal.yaml", {"helm": "helm-values.yaml", "facts": FACTS}),
    ("sandbox-kubevirt.yaml", {"nodes": "nodes-sandbox.yaml", "facts": ClusterFacts(
        "virt-admin", AGENT, pool_labels=(ROLE,), gpu_models=(((ROLE, "vm-passthrough"), "A100-80GB"), ((ROLE, "vm-vgpu"), "A10")))}),
    ("precompiled.yaml", {"nodes": "nodes-precompiled.yaml", "facts": ClusterFacts("dc1-admin", AGENT)}),
]


def _typed(path: str, table: dict[str, Any]) -> bool:
    return path in table or any(typed.startswith(path + ".") for typed in table)


def test_every_field_the_mapping_reads_is_typed(monkeypatch):
    read: set[str] = set()
    raw = _Spec.raw

    def recording(self: _Spec, path: str) -> Any:
        read.add(path)
        return raw(self, path)

    monkeypatch.setattr(_Spec, "raw", recording)
    imported = 0
    for policy, options in SCENARIOS:
        nodes: Optional[Any] = fixture(options["nodes"]) if "nodes" in options else None
        helm = fixture(options["helm"]) if "helm" in options else None
        configmaps = tuple(fixture(c) for c in options.get("configmaps", ()))
        try:
            import_policy(fixture(policy), helm=helm, nodes=nodes, configmaps=configmaps, facts=options["facts"])
            imported += 1
        except ImportInputError:
            pass  # a scenario test_import.py expects to be refused still reads the fields before it
    assert imported == len(SCENARIOS) and read
    untyped = sorted(p for p in read if not _typed(p, SPEC_FIELDS))
    assert not untyped, f"the mapping reads fields spec_fields.SPEC_FIELDS does not type: {untyped}"


def test_an_env_entry_without_a_value_is_reported_not_carried_empty():
    """valueFrom is not in the CRD's EnvVar: the entry is reported field by field, never carried as `value: ""`."""
    policy = put(fixture("minimal.yaml"), "spec.driver.env", [
        {"name": "NGC_KEY_REF", "valueFrom": {"secretKeyRef": {"name": "ngc", "key": "key"}}},
        {"name": "PLAIN", "value": "1"},
    ])
    result = importer.import_cluster_policy(importer.cluster_policy_of(policy, "cp.yaml"), FACTS)
    assert result.config["gpu-stack:operands"]["driver"]["env"] == [{"name": "PLAIN", "value": "1"}]
    reported = {item.path: item.reason for item in result.not_carried}
    assert "driver.secretEnv" in reported["spec.driver.env[NGC_KEY_REF].valueFrom.secretKeyRef.name"]
    assert "spec.driver.env[NGC_KEY_REF]" not in reported


def test_toleration_seconds_is_carried_on_a_no_execute_toleration_and_reported_elsewhere():
    policy = put(fixture("minimal.yaml"), "spec.daemonsets.tolerations", [
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoExecute", "tolerationSeconds": 600},
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 60},
    ])
    result = importer.import_cluster_policy(importer.cluster_policy_of(policy, "cp.yaml"), FACTS)
    assert result.config["gpu-stack:daemonsets"]["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoExecute", "tolerationSeconds": 600},
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    ]
    reported = {item.path: item.reason for item in result.not_carried}
    assert {path: reason for path, reason in reported.items() if "tolerations" in path} == {
        "spec.daemonsets.tolerations[1].tolerationSeconds":
        "tolerationSeconds applies to effect NoExecute only; the API server refused it here"}
