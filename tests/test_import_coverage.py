"""How much of a real ClusterPolicy `gpustack import` carries, measured field by field on a corpus of ClusterPolicies as
clusters run them: NVIDIA's sample and the OLM bundle's example (fixtures/clusterpolicy/nvidia-examples.yaml), the Helm
chart's default (default-install.yaml), that default after the patches NVIDIA's e2e scripts apply
(GO:tests/scripts/update-clusterpolicy.sh), a KubeVirt cluster with the chart's knobs turned (CHART_KNOBS), and the
base with every carried field set (differential-base.yaml).

Every leaf field of those specs has one status in the import's ledger (gpustack/importer/ledger.py): carried (the
stack holds it, on a named key, or it is what gpu-stack renders anyway), reported as not carried with its reason,
or reported as without effect in the operator (a component it did not deploy, a deprecated no-op). None is silent.
The measure is carried / (carried + not carried): the fields that changed what the operator ran."""

from __future__ import annotations

import copy
import functools
from typing import Any, Optional

from gpustack import importer
from gpustack.importer import ClusterFacts
from gpustack.importer.ledger import CARRIED, REPORTED, SILENT, WITHOUT_EFFECT
from stacktest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "clusterpolicy"
AGENT = "harbor.platform.internal/gpu-stack/node-agent:0.10.0"
ROLE = "virt.platform.internal/gpu-role"
SANDBOX_FACTS = ClusterFacts("virt-admin", AGENT, pool_labels=(ROLE,),
                             gpu_models=(((ROLE, "vm-passthrough"), "A100-80GB"), ((ROLE, "vm-vgpu"), "A10")))
# NVIDIA's e2e scripts patch a Helm-installed ClusterPolicy with these (GO:tests/scripts/update-clusterpolicy.sh).
E2E_PATCHES = {
    "driver.version": "580.105.08",
    "devicePlugin.env": [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}],
    "mig.strategy": "mixed",
    "dcgm.enabled": True,
    "devicePlugin.config": {"name": "plugin-config", "default": "plugin-config.yaml"},
    "gfd.enabled": False,
    "toolkit.installDir": "/opt/nvidia",
    "daemonsets.labels": {"cloudprovider": "aws", "platform": "kubernetes"},
}
# Chart values a team turns on a KubeVirt cluster (GO:deployments/gpu-operator/values.yaml): a runtime class and MPS
# root of its own, the VM managers' driver-manager pinned apart, the vGPU manager's module parameters and a vGPU
# devices ConfigMap of its own, and the deprecated switches charts still render.
CHART_KNOBS = {
    "operator.runtimeClass": "nvidia-gpu",
    "devicePlugin.mps.root": "/var/lib/nvidia-mps",
    "vfioManager.driverManager.version": "v0.12.1",
    "vfioManager.driverManager.imagePullPolicy": "Always",
    "vgpuManager.driverManager.imagePullPolicy": "Always",
    "vgpuManager.kernelModuleConfig.name": "vgpu-modules",
    "vgpuDeviceManager.config.name": "custom-vgpu-devices",
    "driver.licensingConfig.nlsEnabled": True,
    "psp.enabled": False,
    "kataManager.enabled": False,
    "kataManager.config.artifactsDir": "/opt/nvidia-gpu-operator/artifacts/runtimeclasses",
    "kataManager.imagePullPolicy": "IfNotPresent",
}


def document(name: str) -> Any:
    return importer.read_yaml(str(FIXTURES / name), name)


def patched(policy: dict, patches: dict[str, Any]) -> dict:
    policy = copy.deepcopy(policy)
    for path, value in patches.items():
        node = policy["spec"]
        keys = path.split(".")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    return policy


@functools.lru_cache(maxsize=None)
def corpus() -> tuple[tuple[str, dict, ClusterFacts, str, tuple[str, ...]], ...]:
    """(name, ClusterPolicy, facts, nodes fixture, ConfigMap fixtures)."""
    facts = ClusterFacts("prod-admin", AGENT)
    examples = [(f"nvidia-example-{i}", p, facts, "nodes-default.yaml", ()) for i, p in enumerate(document("nvidia-examples.yaml")["items"])]
    default = document("default-install.yaml")
    return (
        *examples,
        ("helm-default", default, facts, "nodes-default.yaml", ()),
        ("e2e-patched", patched(default, E2E_PATCHES), facts, "nodes-default.yaml", ("configmap-plugin-e2e.yaml",)),
        ("chart-knobs", patched(document("sandbox-kubevirt.yaml"), CHART_KNOBS), SANDBOX_FACTS, "nodes-sandbox.yaml", ("configmaps-vgpu.yaml",)),
        ("every-field", document("differential-base.yaml"), facts, "nodes-default.yaml", ("differential-configmaps.yaml",)),
    )


def ledger(policy: dict, facts: ClusterFacts, nodes: str, configmaps: tuple[str, ...]) -> dict[str, tuple[str, Optional[str]]]:
    """Leaf path (under spec) -> (status, key or reason), from the import's own ledger."""
    result = importer.import_cluster_policy(
        importer.cluster_policy_of(policy, "coverage"),
        facts,
        nodes=importer.nodes_of(document(nodes), nodes),
        configmaps=importer.configmaps_of([(c, document(c)) for c in configmaps]),
    )
    return {f.path[len("spec."):]: (f.status, f.key or f.reason) for f in result.fields if f.path.startswith("spec.")}


@functools.lru_cache(maxsize=None)
def union() -> dict[str, str]:
    """Each leaf of any ClusterPolicy of the corpus, at its worst status among them."""
    rank = {SILENT: 0, REPORTED: 1, CARRIED: 2, WITHOUT_EFFECT: 3}
    merged: dict[str, str] = {}
    for _, policy, facts, nodes, configmaps in corpus():
        for leaf, (status, _) in ledger(policy, facts, nodes, configmaps).items():
            if leaf not in merged or rank[status] < rank[merged[leaf]]:
                merged[leaf] = status
    return merged


def test_no_field_of_the_corpus_is_silent():
    for name, policy, facts, nodes, configmaps in corpus():
        silent = sorted(leaf for leaf, (status, _) in ledger(policy, facts, nodes, configmaps).items() if status == SILENT)
        assert not silent, (name, silent)


def test_at_least_nine_in_ten_fields_that_changed_what_the_operator_ran_are_carried(capsys):
    found = union()
    carried = sum(s == CARRIED for s in found.values())
    reported = sum(s == REPORTED for s in found.values())
    share = carried / (carried + reported)
    with capsys.disabled():
        print(f"\nimport coverage: {len(found)} leaf fields; {carried} carried, {reported} reported as not carried "
              f"({share:.1%} carried), {sum(s == WITHOUT_EFFECT for s in found.values())} without effect in the operator, "
              f"{sum(s == SILENT for s in found.values())} silent")
    assert len(found) >= 200
    assert share >= 0.90, sorted(leaf for leaf, s in found.items() if s == REPORTED)


def test_what_is_not_carried_is_what_gpu_stack_has_no_meaning_for():
    """Each remaining field has a reason of its own in the report (gpustack/importer/report.py REASONS)."""
    assert sorted(leaf for leaf, s in union().items() if s == REPORTED) == [
        "daemonsets.labels.app.kubernetes.io/managed-by",  # the Helm chart's own marks
        "daemonsets.labels.helm.sh/chart",
        "daemonsets.podSecurityContext.runAsUser",  # each operand keeps its asset's security context
        "driver.livenessProbe.periodSeconds",  # NVIDIA's driver container has no liveness probe to tune
        "driver.upgradePolicy.autoUpgrade",  # failed nodes and the budget are counted differently
        "driver.upgradePolicy.maxUnavailable",
        "operator.initContainer.image",  # no operator Deployment
        "operator.initContainer.repository",
        "operator.initContainer.version",
        "operator.labels.team",
        "operator.use_ocp_driver_toolkit",  # true off OpenShift: carried only with --openshift-version
        "psa.enabled",
        "validator.cuda.env[CUDA_VALIDATOR_EXTRA]",
    ]


def test_the_chart_knobs_land_on_their_keys():
    _, policy, facts, nodes, configmaps = next(c for c in corpus() if c[0] == "chart-knobs")
    found = ledger(policy, facts, nodes, configmaps)
    assert found["operator.runtimeClass"] == (CARRIED, "toolkit.runtimeClass")
    assert found["devicePlugin.mps.root"] == (CARRIED, "devicePlugin.mpsRoot")
    assert found["vfioManager.driverManager.version"] == (CARRIED, "operands.vfioManagerDriverManager.version")
    assert found["vgpuManager.driverManager.imagePullPolicy"] == (CARRIED, "operands.vgpuManagerDriverManager.imagePullPolicy")
    assert found["vgpuManager.kernelModuleConfig.name"] == (CARRIED, "vgpu.kernelModuleConfig")
    assert found["vgpuDeviceManager.config.name"][0] == CARRIED
    assert found["kataManager.enabled"][0] == found["psp.enabled"][0] == WITHOUT_EFFECT
