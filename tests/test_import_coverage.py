"""How much of a real ClusterPolicy `gpustack import` carries, measured on the ClusterPolicies NVIDIA ships or
renders (the repository's sample and the OLM bundle's example, fixtures/clusterpolicy/nvidia-examples.yaml; the Helm
chart's default, default-install.yaml) and on the base with every carried field set (differential-base.yaml).

Every leaf field of those specs is one of: carried (the stack holds it, or what gpu-stack renders anyway), reported
as not carried with its reason, or reported as without effect in the operator (a component it did not deploy, a
deprecated no-op). The measure is carried / (carried + not carried): the fields that changed what the operator ran."""

from __future__ import annotations

import functools
from typing import Any, Iterator

from gpustack import importer
from gpustack.importer import ClusterFacts
from stacktest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "clusterpolicy"
AGENT = "harbor.platform.internal/gpu-stack/node-agent:0.8.0"
CARRIED, NOT_CARRIED, NO_EFFECT = "carried", "not carried", "without effect"


def leaves(value: Any, path: str = "") -> Iterator[str]:
    """Dotted leaf paths; env lists by name, as the report writes them (`validator.env[WITH_WORKLOAD]`)."""
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from leaves(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list) and value and path.endswith("env") and all(isinstance(e, dict) and "name" in e for e in value):
        for entry in value:
            yield f"{path}[{entry['name']}]"
    else:
        yield path


def _under(leaf: str, reported: str) -> bool:
    return leaf == reported or leaf.startswith((f"{reported}.", f"{reported}["))


def statuses(policy: dict, configmaps: tuple[str, ...] = ()) -> dict[str, str]:
    result = importer.import_cluster_policy(
        importer.cluster_policy_of(policy, "coverage"),
        ClusterFacts("prod-admin", AGENT),
        nodes=importer.nodes_of(importer.read_yaml(str(FIXTURES / "nodes-default.yaml"), "--nodes"), "--nodes"),
        configmaps=importer.configmaps_of([(c, importer.read_yaml(str(FIXTURES / c), "--configmap")) for c in configmaps]),
    )
    # A report about a field the spec lacks (a section naming no image) says nothing about the leaves it holds.
    not_carried = [i.path[len("spec."):] for i in result.not_carried if i.path.startswith("spec.") and i.value is not None]
    no_effect = [i.path[len("spec."):] for i in result.no_effect if i.path.startswith("spec.")]
    found = {}
    for leaf in leaves(policy["spec"]):
        if any(_under(leaf, r) for r in no_effect):
            found[leaf] = NO_EFFECT
        elif any(_under(leaf, r) for r in not_carried):
            found[leaf] = NOT_CARRIED
        else:
            found[leaf] = CARRIED
    return found


@functools.lru_cache(maxsize=None)
def union() -> dict[str, str]:
    """Each leaf of any of the ClusterPolicies, at its worst status among them."""
    rank = {NOT_CARRIED: 0, CARRIED: 1, NO_EFFECT: 2}
    examples = importer.read_yaml(str(FIXTURES / "nvidia-examples.yaml"), "--clusterpolicy")["items"]
    policies = [(p, ()) for p in examples] + [
        (importer.read_yaml(str(FIXTURES / "default-install.yaml"), "--clusterpolicy"), ()),
        (importer.read_yaml(str(FIXTURES / "differential-base.yaml"), "--clusterpolicy"), ("differential-configmaps.yaml",)),
    ]
    merged: dict[str, str] = {}
    for policy, configmaps in policies:
        for leaf, status in statuses(policy, configmaps).items():
            if leaf not in merged or rank[status] < rank[merged[leaf]]:
                merged[leaf] = status
    return merged


def test_at_least_nine_in_ten_fields_that_changed_what_the_operator_ran_are_carried(capsys):
    found = union()
    carried = sum(s == CARRIED for s in found.values())
    not_carried = sorted(leaf for leaf, s in found.items() if s == NOT_CARRIED)
    share = carried / (carried + len(not_carried))
    with capsys.disabled():
        print(f"\nimport coverage: {len(found)} leaf fields; {carried} carried, {len(not_carried)} reported as not "
              f"carried ({share:.1%} carried), {len(found) - carried - len(not_carried)} without effect in the operator")
    assert len(found) >= 200  # the four ClusterPolicies together
    assert share >= 0.90, not_carried


def test_what_is_not_carried_is_what_gpu_stack_has_no_meaning_for():
    """Each remaining field has a reason of its own in the report (gpustack/importer/report.py REASONS)."""
    assert sorted(leaf for leaf, s in union().items() if s == NOT_CARRIED) == [
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
