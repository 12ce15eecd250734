"""ObjectMeta: names per kind, namespaces, labels, label selectors and annotations
(k8s.io/apimachinery/pkg/api/validation/objectmeta.go and pkg/apis/meta/v1/validation)."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from gpustack.apiserver import formats
from gpustack.apiserver.engine import Obj, Report, mapping, pod_template_metadata, rule

# Kinds without a namespace; every other kind gpu-stack renders is namespaced.
CLUSTER_SCOPED = frozenset(
    {
        "Namespace", "Node", "PersistentVolume", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
        "RuntimeClass", "PriorityClass", "StorageClass", "CSIDriver", "DeviceClass", "ResourceSlice",
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration", "APIService", "IngressClass", "NodeFeatureRule", "SecurityContextConstraints",
    }
)
NAMESPACED = frozenset(
    {
        "Pod", "PodTemplate", "ConfigMap", "Secret", "Service", "ServiceAccount", "Endpoints", "Role", "RoleBinding",
        "DaemonSet", "Deployment", "ReplicaSet", "StatefulSet", "Job", "CronJob", "PersistentVolumeClaim",
        "NetworkPolicy", "PodDisruptionBudget", "Lease", "ResourceClaim", "ResourceClaimTemplate", "ServiceMonitor",
        "PodMonitor", "PrometheusRule", "KubeVirt", "ComputeDomain", "NodeFeature",
    }
)

# The name function each kind's Validate* passes to ValidateObjectMeta; NameIsDNSSubdomain for the rest.
_NAME_FORMATS: dict[str, tuple[str, Callable[[str], list[str]]]] = {
    "Namespace": ("DNS-1123 label (ValidateNamespaceName)", formats.is_dns1123_label),
    "Service": ("DNS-1035 label (ValidateServiceName)", formats.is_dns1035_label),
    "Role": ("path segment (ValidateRBACName)", formats.is_path_segment_name),
    "ClusterRole": ("path segment (ValidateRBACName)", formats.is_path_segment_name),
    "RoleBinding": ("path segment (ValidateRBACName)", formats.is_path_segment_name),
    "ClusterRoleBinding": ("path segment (ValidateRBACName)", formats.is_path_segment_name),
}
_SUBDOMAIN = ("DNS-1123 subdomain (NameIsDNSSubdomain)", formats.is_dns1123_subdomain)

# TotalAnnotationSizeLimitB: the sum of every annotation key and value.
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024


def name_format(kind: str) -> tuple[str, Callable[[str], list[str]]]:
    return _NAME_FORMATS.get(kind, _SUBDOMAIN)


@rule("object-name", "k8s.io/apimachinery/pkg/api/validation.ValidateObjectMeta (name, with the kind's name function)")
def object_name(obj: Obj, report: Report) -> None:
    name = mapping(obj.get("metadata")).get("name")
    if not isinstance(name, str) or not name:
        report("metadata.name", "Required value: name or generateName is required")
        return
    label, check = name_format(str(obj.get("kind")))
    for message in check(name):
        report("metadata.name", f"Invalid value {name[:80]!r}: a {label}: {message}")


@rule("object-namespace", "k8s.io/apimachinery/pkg/api/validation.ValidateObjectMeta (namespace: ValidateNamespaceName)")
def object_namespace(obj: Obj, report: Report) -> None:
    kind = obj.get("kind")
    namespace = mapping(obj.get("metadata")).get("namespace")
    if kind in CLUSTER_SCOPED and namespace:
        report("metadata.namespace", f"Forbidden: not allowed on this type ({kind} is cluster-scoped)")
    elif kind in NAMESPACED:
        if not namespace:
            report("metadata.namespace", f"Required value: {kind} is namespaced")
        else:
            for message in formats.is_dns1123_label(str(namespace)):
                report("metadata.namespace", f"Invalid value {str(namespace)[:80]!r}: {message}")


def _labels(labels: Any, path: str, report: Report) -> None:
    """ValidateLabels: every key a qualified name, every value a label value."""
    for key, value in mapping(labels).items():
        for message in formats.is_qualified_name(str(key)):
            report(f"{path}", f"Invalid value {str(key)[:80]!r}: label key {message}")
        if not isinstance(value, str):
            report(f"{path}[{key}]", f"Invalid value: label values are strings, got {type(value).__name__}")
            continue
        for message in formats.is_label_value(value):
            report(f"{path}[{key}]", f"Invalid value {value[:80]!r}: {message}")


def label_selector(selector: Mapping[str, Any], path: str, report: Report) -> None:
    """ValidateLabelSelector: matchLabels as labels, matchExpressions by operator."""
    _labels(selector.get("matchLabels"), f"{path}.matchLabels", report)
    for i, expression in enumerate(selector.get("matchExpressions") or []):
        here = f"{path}.matchExpressions[{i}]"
        key, operator, values = expression.get("key", ""), expression.get("operator"), expression.get("values") or []
        for message in formats.is_qualified_name(str(key)):
            report(f"{here}.key", f"Invalid value {str(key)[:80]!r}: {message}")
        if operator in ("In", "NotIn") and not values:
            report(f"{here}.values", "Required value: must be specified when `operator` is 'In' or 'NotIn'")
        elif operator in ("Exists", "DoesNotExist") and values:
            report(f"{here}.values", "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'")
        elif operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            report(f"{here}.operator", f"Unsupported value {operator!r}: supported values: In, NotIn, Exists, DoesNotExist")


@rule("labels", "k8s.io/apimachinery/pkg/apis/meta/v1/validation.ValidateLabels and ValidateLabelSelector")
def labels(obj: Obj, report: Report) -> None:
    _labels(mapping(obj.get("metadata")).get("labels"), "metadata.labels", report)
    for path, template_meta in pod_template_metadata(obj):
        _labels(template_meta.get("labels"), f"{path}.labels", report)
    selector = mapping(obj.get("spec")).get("selector")
    if obj.get("kind") != "Service" and isinstance(selector, Mapping):
        label_selector(selector, "spec.selector", report)


def _annotations(annotations: Any, path: str, report: Report) -> None:
    total = 0
    for key, value in mapping(annotations).items():
        for message in formats.is_qualified_name(str(key).lower()):
            report(path, f"Invalid value {str(key)[:80]!r}: annotation key {message}")
        total += len(str(key)) + len(str(value))
    if total > TOTAL_ANNOTATION_SIZE_LIMIT:
        report(path, f"Too long: must have at most {TOTAL_ANNOTATION_SIZE_LIMIT} bytes (has {total})")


@rule("annotations", "k8s.io/apimachinery/pkg/api/validation.ValidateAnnotations (keys and TotalAnnotationSizeLimitB)")
def annotations(obj: Obj, report: Report) -> None:
    _annotations(mapping(obj.get("metadata")).get("annotations"), "metadata.annotations", report)
    for path, template_meta in pod_template_metadata(obj):
        _annotations(template_meta.get("annotations"), f"{path}.annotations", report)
