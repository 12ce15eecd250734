"""Cluster-scoped kinds with rules of their own: RuntimeClass (pkg/apis/node/validation), PriorityClass
(pkg/apis/scheduling/validation) and CustomResourceDefinition (k8s.io/apiextensions-apiserver validation)."""

from __future__ import annotations

from gpustack.apiserver import formats
from gpustack.apiserver.engine import Obj, Report, mapping, rule
from gpustack.apiserver.pod import validate_node_selector, validate_tolerations

# scheduling.HighestUserDefinablePriority, and the two classes the API server itself creates.
HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000
SYSTEM_PRIORITY_CLASSES = {"system-node-critical": 2_000_001_000, "system-cluster-critical": 2_000_000_000}
PREEMPTION_POLICIES = ("Never", "PreemptLowerPriority")
CRD_SCOPES = ("Cluster", "Namespaced")


@rule("runtime-class", "k8s.io/kubernetes/pkg/apis/node/validation.ValidateRuntimeClass (handler: DNS-1123 label; overhead; "
      "scheduling nodeSelector and tolerations)", kinds=("RuntimeClass",))
def runtime_class(obj: Obj, report: Report) -> None:
    handler = obj.get("handler") or ""
    if not handler:
        report("handler", "Required value")
    for message in formats.is_dns1123_label(handler) if handler else []:
        report("handler", f"Invalid value {handler[:80]!r}: {message}")
    for name, value in mapping(mapping(obj.get("overhead")).get("podFixed")).items():
        parsed = formats.quantity(value)
        if parsed is None or parsed < 0:
            report(f"overhead.podFixed[{name}]", f"Invalid value {str(value)[:80]!r}: must be a non-negative quantity")
    scheduling = mapping(obj.get("scheduling"))
    validate_node_selector(scheduling.get("nodeSelector"), "scheduling.nodeSelector", report)
    validate_tolerations(scheduling.get("tolerations") or [], "scheduling.tolerations", report)


@rule("priority-class", "k8s.io/kubernetes/pkg/apis/scheduling/validation.ValidatePriorityClass (system- prefix reserved; "
      "value at most HighestUserDefinablePriority; preemptionPolicy)", kinds=("PriorityClass",))
def priority_class(obj: Obj, report: Report) -> None:
    name = str(mapping(obj.get("metadata")).get("name") or "")
    value = obj.get("value")
    if name.startswith("system-"):
        if SYSTEM_PRIORITY_CLASSES.get(name) != value:
            report("metadata.name", "Forbidden: priority class names with 'system-' prefix are reserved for system use only")
    elif not formats.is_int(value) or value > HIGHEST_USER_DEFINABLE_PRIORITY:
        report("value", f"Forbidden: maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}")
    policy = obj.get("preemptionPolicy")
    if policy is not None and policy not in PREEMPTION_POLICIES:
        report("preemptionPolicy", f"Unsupported value {policy!r}: supported values: {', '.join(PREEMPTION_POLICIES)}")


@rule("crd-names", "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation.ValidateCustomResourceDefinition "
      "(name is <plural>.<group>; names; exactly one storage version)", kinds=("CustomResourceDefinition",))
def crd_names(obj: Obj, report: Report) -> None:
    spec = mapping(obj.get("spec"))
    names = mapping(spec.get("names"))
    group, plural = str(spec.get("group") or ""), str(names.get("plural") or "")
    name = str(mapping(obj.get("metadata")).get("name") or "")
    if name != f"{plural}.{group}":
        report("metadata.name", f"Invalid value {name[:80]!r}: must be spec.names.plural+\".\"+spec.group")
    for message in formats.is_dns1123_subdomain(group):
        report("spec.group", f"Invalid value {group[:80]!r}: {message}")
    if "." not in group:
        report("spec.group", f"Invalid value {group[:80]!r}: should be a domain with at least one dot")
    for field in ("plural", "singular", "kind", "listKind"):
        value = str(names.get(field) or "")
        if not value:
            if field in ("plural", "kind"):
                report(f"spec.names.{field}", "Required value")
            continue
        for message in formats.is_dns1035_label(value.lower()):
            report(f"spec.names.{field}", f"Invalid value {value[:80]!r}: {message}")
    if spec.get("scope") not in CRD_SCOPES:
        report("spec.scope", f"Unsupported value {spec.get('scope')!r}: supported values: {', '.join(CRD_SCOPES)}")
    versions = spec.get("versions") or []
    if not versions:
        report("spec.versions", "Required value: must have at least one version")
    elif sum(1 for v in versions if v.get("storage")) != 1:
        report("spec.versions", "Invalid value: must have exactly one version marked as storage version")
    seen: set[str] = set()
    for i, version in enumerate(versions):
        version_name = str(version.get("name") or "")
        for message in formats.is_dns1035_label(version_name):
            report(f"spec.versions[{i}].name", f"Invalid value {version_name[:80]!r}: {message}")
        if version_name in seen:
            report(f"spec.versions[{i}].name", f"Duplicate value: {version_name!r}")
        seen.add(version_name)
