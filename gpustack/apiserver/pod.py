"""Pod-level fields of a pod template: restart policy per workload kind, names it refers to, DNS policy,
scheduling (tolerations, node selector, node affinity) and DRA resource claims (pkg/apis/core/validation.ValidatePodSpec
and the apps/batch validators that constrain a template)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from gpustack.apiserver import formats
from gpustack.apiserver.engine import WORKLOAD_KINDS, Obj, Report, containers, mapping, pod_specs, rule

RESTART_POLICIES = {
    # ValidateDaemonSetSpec / ValidatePodTemplateSpecForReplicaSet / StatefulSet: only Always.
    "DaemonSet": ("Always",),
    "Deployment": ("Always",),
    "ReplicaSet": ("Always",),
    "StatefulSet": ("Always",),
    # validateJobSpec: a Job's pods must finish.
    "Job": ("OnFailure", "Never"),
    "CronJob": ("OnFailure", "Never"),
}
POD_RESTART_POLICIES = ("Always", "OnFailure", "Never")
DNS_POLICIES = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")
TOLERATION_OPERATORS = ("Equal", "Exists")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


@rule("restart-policy", "k8s.io/kubernetes/pkg/apis/apps/validation.ValidateDaemonSetSpec, batch/validation.validateJobSpec, "
      "core/validation.validateInitContainers (restartPolicy per workload; only sidecars set one per container)",
      kinds=WORKLOAD_KINDS)
def restart_policy(obj: Obj, report: Report) -> None:
    kind = str(obj.get("kind"))
    for path, pod in pod_specs(obj):
        # The API server defaults an absent restartPolicy to Always before it validates.
        policy = pod.get("restartPolicy") or "Always"
        allowed = RESTART_POLICIES.get(kind, POD_RESTART_POLICIES)
        if policy not in allowed:
            shown = "unset (defaults to Always)" if "restartPolicy" not in pod else repr(policy)
            report(f"{path}.restartPolicy", f"Unsupported value {shown}: supported values for a {kind}: {', '.join(allowed)}")
        if kind in ("DaemonSet", "Deployment", "ReplicaSet", "StatefulSet") and pod.get("activeDeadlineSeconds") is not None:
            report(f"{path}.activeDeadlineSeconds", f"Forbidden: activeDeadlineSeconds in a {kind} is not supported")
        for c_path, container, is_init in containers(pod, path):
            own = container.get("restartPolicy")
            if own is None:
                continue
            if not is_init:
                report(f"{c_path}.restartPolicy", "Forbidden: may not be set for non-init containers")
            elif own != "Always":
                report(f"{c_path}.restartPolicy", f"Unsupported value {own!r}: supported values: Always")


@rule("pod-references", "k8s.io/kubernetes/pkg/apis/core/validation.ValidatePodSpec (serviceAccountName, priorityClassName, "
      "runtimeClassName: DNS-1123 subdomains; hostname, subdomain: DNS-1123 labels)", kinds=WORKLOAD_KINDS)
def pod_references(obj: Obj, report: Report) -> None:
    for path, pod in pod_specs(obj):
        for field in ("serviceAccountName", "priorityClassName", "runtimeClassName", "schedulerName"):
            value = pod.get(field)
            if value:
                for message in formats.is_dns1123_subdomain(value):
                    report(f"{path}.{field}", f"Invalid value {value[:80]!r}: {message}")
        for field in ("hostname", "subdomain"):
            value = pod.get(field)
            if value:
                for message in formats.is_dns1123_label(value):
                    report(f"{path}.{field}", f"Invalid value {value[:80]!r}: {message}")


@rule("dns-policy", "k8s.io/kubernetes/pkg/apis/core/validation.validateDNSPolicy and validatePodDNSConfig", kinds=WORKLOAD_KINDS)
def dns_policy(obj: Obj, report: Report) -> None:
    for path, pod in pod_specs(obj):
        policy = pod.get("dnsPolicy")
        if policy is None:
            continue
        if policy not in DNS_POLICIES:
            report(f"{path}.dnsPolicy", f"Unsupported value {policy!r}: supported values: {', '.join(DNS_POLICIES)}")
        elif policy == "None" and not pod.get("dnsConfig"):
            report(f"{path}.dnsConfig", "Required value: must provide `dnsConfig` when `dnsPolicy` is None")


def validate_tolerations(tolerations: Sequence[Mapping[str, Any]], path: str, report: Report) -> None:
    """ValidateTolerations: key format, operator and value, effect, tolerationSeconds."""
    for i, toleration in enumerate(tolerations):
        here = f"{path}[{i}]"
        key = toleration.get("key") or ""
        operator = toleration.get("operator") or "Equal"
        value = toleration.get("value") or ""
        effect = toleration.get("effect") or ""
        if key:
            for message in formats.is_qualified_name(key):
                report(f"{here}.key", f"Invalid value {key[:80]!r}: {message}")
        elif operator != "Exists":
            report(f"{here}.operator", f"Invalid value {operator!r}: operator must be Exists when `key` is empty, which means "
                                       "\"match all values and all keys\"")
        if toleration.get("tolerationSeconds") is not None and effect != "NoExecute":
            report(f"{here}.effect", f"Invalid value {effect!r}: effect must be 'NoExecute' when `tolerationSeconds` is set")
        if operator == "Equal":
            for message in formats.is_label_value(value):
                report(f"{here}.operator", f"Invalid value {value[:80]!r}: {message}")
        elif operator == "Exists":
            if value:
                report(f"{here}.operator", "Invalid value: value must be empty when `operator` is 'Exists'")
        else:
            report(f"{here}.operator", f"Unsupported value {operator!r}: supported values: {', '.join(TOLERATION_OPERATORS)}")
        if effect and effect not in TAINT_EFFECTS:
            report(f"{here}.effect", f"Unsupported value {effect!r}: supported values: {', '.join(TAINT_EFFECTS)}")


@rule("tolerations", "k8s.io/kubernetes/pkg/apis/core/validation.ValidateTolerations", kinds=WORKLOAD_KINDS)
def tolerations(obj: Obj, report: Report) -> None:
    for path, pod in pod_specs(obj):
        validate_tolerations(pod.get("tolerations") or [], f"{path}.tolerations", report)


def validate_node_selector(selector: Any, path: str, report: Report) -> None:
    """The pod's nodeSelector is validated as labels (ValidateLabels)."""
    for key, value in mapping(selector).items():
        for message in formats.is_qualified_name(str(key)):
            report(path, f"Invalid value {str(key)[:80]!r}: {message}")
        for message in formats.is_label_value(str(value)):
            report(f"{path}[{key}]", f"Invalid value {str(value)[:80]!r}: {message}")


@rule("node-selector", "k8s.io/kubernetes/pkg/apis/core/validation.ValidatePodSpec (nodeSelector: ValidateLabels)", kinds=WORKLOAD_KINDS)
def node_selector(obj: Obj, report: Report) -> None:
    for path, pod in pod_specs(obj):
        validate_node_selector(pod.get("nodeSelector"), f"{path}.nodeSelector", report)


def _requirement(requirement: Mapping[str, Any], here: str, report: Report, *, field: bool) -> None:
    operator, values = requirement.get("operator"), requirement.get("values") or []
    key = requirement.get("key") or ""
    if field:
        if key != "metadata.name":
            report(f"{here}.key", f"Invalid value {key[:80]!r}: not a valid field selector key (metadata.name)")
        if operator not in ("In", "NotIn") or len(values) != 1:
            report(here, "Invalid value: a field requirement takes operator In or NotIn and exactly one value")
        return
    for message in formats.is_qualified_name(key):
        report(f"{here}.key", f"Invalid value {key[:80]!r}: {message}")
    if operator in ("In", "NotIn") and not values:
        report(f"{here}.values", "Required value: must be specified when `operator` is 'In' or 'NotIn'")
    elif operator in ("Exists", "DoesNotExist") and values:
        report(f"{here}.values", "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'")
    elif operator in ("Gt", "Lt") and (len(values) != 1 or not str(values[0]).lstrip("-").isdigit()):
        report(f"{here}.values", "Required value: must be specified single value when `operator` is 'Lt' or 'Gt' (an integer)")
    elif operator not in NODE_SELECTOR_OPERATORS:
        report(f"{here}.operator", f"Unsupported value {operator!r}: supported values: {', '.join(NODE_SELECTOR_OPERATORS)}")
    for j, value in enumerate(values):
        if operator in ("In", "NotIn"):
            for message in formats.is_label_value(str(value)):
                report(f"{here}.values[{j}]", f"Invalid value {str(value)[:80]!r}: {message}")


def _term(term: Mapping[str, Any], here: str, report: Report) -> None:
    for k, requirement in enumerate(term.get("matchExpressions") or []):
        _requirement(requirement, f"{here}.matchExpressions[{k}]", report, field=False)
    for k, requirement in enumerate(term.get("matchFields") or []):
        _requirement(requirement, f"{here}.matchFields[{k}]", report, field=True)


@rule("node-affinity", "k8s.io/kubernetes/pkg/apis/core/validation.validateNodeAffinity (ValidateNodeSelector, "
      "ValidateNodeSelectorRequirement, preferred weights 1..100)", kinds=WORKLOAD_KINDS)
def node_affinity(obj: Obj, report: Report) -> None:
    for path, pod in pod_specs(obj):
        affinity = mapping(mapping(pod.get("affinity")).get("nodeAffinity"))
        here = f"{path}.affinity.nodeAffinity"
        required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        if required is not None:
            terms = required.get("nodeSelectorTerms") or []
            if not terms:
                report(f"{here}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
                       "Required value: must have at least one node selector term")
            for j, term in enumerate(terms):
                _term(term, f"{here}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{j}]", report)
        for j, preferred in enumerate(affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
            where = f"{here}.preferredDuringSchedulingIgnoredDuringExecution[{j}]"
            weight = preferred.get("weight")
            if not formats.is_int(weight) or not 1 <= weight <= 100:
                report(f"{where}.weight", f"Invalid value {weight!r}: must be in the range 1-100")
            _term(mapping(preferred.get("preference")), f"{where}.preference", report)


@rule("pod-resource-claims", "k8s.io/kubernetes/pkg/apis/core/validation.validatePodResourceClaims (names: DNS-1123 labels, "
      "unique; exactly one of resourceClaimName and resourceClaimTemplateName)", kinds=WORKLOAD_KINDS)
def pod_resource_claims(obj: Obj, report: Report) -> None:
    for path, pod in pod_specs(obj):
        seen: set[str] = set()
        for i, claim in enumerate(pod.get("resourceClaims") or []):
            here = f"{path}.resourceClaims[{i}]"
            name = claim.get("name") or ""
            for message in formats.is_dns1123_label(name) if name else ["Required value"]:
                report(f"{here}.name", f"Invalid value {name[:80]!r}: {message}")
            if name in seen:
                report(f"{here}.name", f"Duplicate value: {name!r}")
            seen.add(name)
            sources = [k for k in ("resourceClaimName", "resourceClaimTemplateName") if claim.get(k)]
            if len(sources) != 1:
                report(here, "Invalid value: must specify exactly one of resourceClaimName and resourceClaimTemplateName")
