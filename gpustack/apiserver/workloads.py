"""DaemonSets, Deployments and Jobs (pkg/apis/apps/validation, pkg/apis/batch/validation): selectors against
template labels, rolling-update budgets as IntOrString, Job bounds and the labels a Job's name becomes."""

from __future__ import annotations

import re
from typing import Any, Mapping

from gpustack.apiserver import formats
from gpustack.apiserver.engine import Obj, Report, mapping, rule

SELECTED_WORKLOADS = ("DaemonSet", "Deployment", "ReplicaSet", "StatefulSet")
UPDATE_STRATEGIES = {"DaemonSet": ("RollingUpdate", "OnDelete"), "Deployment": ("RollingUpdate", "Recreate")}


def _template_labels(obj: Obj) -> Mapping[str, Any]:
    return mapping(mapping(mapping(obj.get("spec")).get("template")).get("metadata")).get("labels")


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    """metav1.LabelSelectorAsSelector(selector).Matches(labels)."""
    if any(labels.get(k) != v for k, v in mapping(selector.get("matchLabels")).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present or operator == "DoesNotExist" and present:
            return False
    return True


@rule("workload-selector", "k8s.io/kubernetes/pkg/apis/apps/validation.ValidateDaemonSetSpec/ValidateDeploymentSpec "
      "(selector required and non-empty; it must match the template's labels)", kinds=SELECTED_WORKLOADS)
def workload_selector(obj: Obj, report: Report) -> None:
    selector = mapping(obj.get("spec")).get("selector")
    if selector is None:
        report("spec.selector", "Required value")
        return
    if not selector.get("matchLabels") and not selector.get("matchExpressions"):
        report("spec.selector", f"Invalid value: empty selector is invalid for {str(obj.get('kind')).lower()}")
        return
    if not selector_matches(selector, _template_labels(obj)):
        report("spec.template.metadata.labels", "Invalid value: `selector` does not match template `labels`")


def _int_or_percent_value(value: Any) -> int:
    """getIntOrPercentValue: a percentage's number, else IntOrString.IntValue (strconv.Atoi of a string, 0 when
    that fails): "1" counts as 1 here, though ValidatePositiveIntOrPercent refuses it."""
    if isinstance(value, str):
        if not formats.is_percent(value):
            return int(value[:-1])
        return int(value) if re.fullmatch(r"[+-]?[0-9]+", value) else 0
    return int(value) if formats.is_int(value) else 0


def validate_int_or_percent(value: Any, path: str, report: Report) -> None:
    """ValidatePositiveIntOrPercent + IsNotMoreThan100Percent: an integer >= 0, or a string 'N%' of at most 100%.
    A string of digits such as "1" is neither: the API server refuses it."""
    if value is None:
        return
    if isinstance(value, str):
        for message in formats.is_percent(value):
            report(path, f"Invalid value {value[:80]!r}: {message}")
        if not formats.is_percent(value) and int(value[:-1]) > 100:
            report(path, f"Invalid value {value!r}: must not be greater than 100%")
    elif formats.is_int(value):
        if value < 0:
            report(path, f"Invalid value {value!r}: must be greater than or equal to 0")
    else:
        report(path, f"Invalid value {value!r}: must be an integer or percentage (e.g '5%')")


@rule("int-or-percent", "k8s.io/kubernetes/pkg/apis/apps/validation.ValidatePositiveIntOrPercent and IsNotMoreThan100Percent "
      "(maxUnavailable, maxSurge)", kinds=("DaemonSet", "Deployment"))
def int_or_percent(obj: Obj, report: Report) -> None:
    strategy = mapping(mapping(obj.get("spec")).get(_strategy_key(obj)))
    rolling = mapping(strategy.get("rollingUpdate"))
    for field in ("maxUnavailable", "maxSurge"):
        validate_int_or_percent(rolling.get(field), f"spec.{_strategy_key(obj)}.rollingUpdate.{field}", report)


def _strategy_key(obj: Obj) -> str:
    return "updateStrategy" if obj.get("kind") == "DaemonSet" else "strategy"


@rule("update-strategy", "k8s.io/kubernetes/pkg/apis/apps/validation.ValidateDaemonSetUpdateStrategy, ValidateRollingUpdateDaemonSet, "
      "ValidateDeploymentStrategy (strategy type; a budget that lets the rollout move)", kinds=("DaemonSet", "Deployment"))
def update_strategy(obj: Obj, report: Report) -> None:
    kind = str(obj.get("kind"))
    key = _strategy_key(obj)
    strategy = mapping(obj.get("spec")).get(key)
    if strategy is None:
        return
    type_ = strategy.get("type", "RollingUpdate")
    if type_ not in UPDATE_STRATEGIES[kind]:
        report(f"spec.{key}.type", f"Unsupported value {type_!r}: supported values: {', '.join(UPDATE_STRATEGIES[kind])}")
        return
    rolling = strategy.get("rollingUpdate")
    if type_ == "Recreate" and rolling is not None:
        report(f"spec.{key}.rollingUpdate", "Forbidden: may not be specified when strategy `type` is 'Recreate'")
    if type_ != "RollingUpdate" or rolling is None:
        return
    # The defaults the API server fills in before it validates: 1/0 for a DaemonSet, 25%/25% for a Deployment.
    default_unavailable, default_surge = (1, 0) if kind == "DaemonSet" else ("25%", "25%")
    unavailable = _int_or_percent_value(rolling.get("maxUnavailable", default_unavailable))
    surge = _int_or_percent_value(rolling.get("maxSurge", default_surge))
    here = f"spec.{key}.rollingUpdate"
    if unavailable == 0 and surge == 0:
        report(f"{here}.maxUnavailable", "Required value: cannot be 0 when maxSurge is 0")
    elif kind == "DaemonSet" and unavailable and surge:
        report(f"{here}.maxSurge", "Invalid value: may not be set when maxUnavailable is non-zero")


@rule("workload-counts", "k8s.io/kubernetes/pkg/apis/apps/validation.ValidateDaemonSetSpec/ValidateDeploymentSpec (replicas, "
      "minReadySeconds, revisionHistoryLimit >= 0; progressDeadlineSeconds > minReadySeconds)", kinds=SELECTED_WORKLOADS)
def workload_counts(obj: Obj, report: Report) -> None:
    spec = mapping(obj.get("spec"))
    for field in ("replicas", "minReadySeconds", "revisionHistoryLimit"):
        value = spec.get(field)
        if value is not None and (not formats.is_int(value) or value < 0):
            report(f"spec.{field}", f"Invalid value {value!r}: must be greater than or equal to 0")
    deadline = spec.get("progressDeadlineSeconds")
    if deadline is not None and deadline <= (spec.get("minReadySeconds") or 0):
        report("spec.progressDeadlineSeconds", "Invalid value: must be greater than minReadySeconds")


@rule("job-spec", "k8s.io/kubernetes/pkg/apis/batch/validation.validateJobSpec and ValidateGeneratedSelector (bounds; "
      "no selector unless manualSelector)", kinds=("Job",))
def job_spec(obj: Obj, report: Report) -> None:
    spec = mapping(obj.get("spec"))
    for field in ("parallelism", "completions", "activeDeadlineSeconds", "backoffLimit", "ttlSecondsAfterFinished"):
        value = spec.get(field)
        if value is not None and (not formats.is_int(value) or value < 0):
            report(f"spec.{field}", f"Invalid value {value!r}: must be greater than or equal to 0")
    if spec.get("selector") is not None and not spec.get("manualSelector"):
        report("spec.selector", "Invalid value: `selector` will be auto-generated (set manualSelector to choose one)")
    if spec.get("completionMode") not in (None, "NonIndexed", "Indexed"):
        report("spec.completionMode", f"Unsupported value {spec['completionMode']!r}: supported values: NonIndexed, Indexed")


@rule("job-name-label", "k8s.io/kubernetes/pkg/registry/batch/job.generateSelector + core/validation.ValidatePodTemplateSpec "
      "(the Job's name becomes the batch.kubernetes.io/job-name label value, at most 63 characters)", kinds=("Job",))
def job_name_label(obj: Obj, report: Report) -> None:
    name = str(mapping(obj.get("metadata")).get("name") or "")
    for message in formats.is_label_value(name):
        report("spec.template.metadata.labels[batch.kubernetes.io/job-name]", f"Invalid value {name[:80]!r}: {message}")
