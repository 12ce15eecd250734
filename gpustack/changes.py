"""What `pulumi up` would do to a live stack when the program renders `after` where it rendered `before`.

The engine matches resources by URN, or by an alias of the new resource naming the old URN; an unmatched new
resource is created, an unmatched old one deleted, a matched one updated when its inputs differ, or replaced
when a field the provider cannot change in place differs (pulumi-kubernetes' immutable fields, the resource's
`replaceOnChanges`). A Kubernetes object that must be replaced under the same name is deleted before its
replacement is created (the provider cannot hold two objects of one name), so it is gone for a while; a
protected resource refuses both delete and replace, which fails the update. On top of the engine's view this
module judges what a change does to a running GPU cluster (`dangers`), which is what `gpustack diff` and the
change-safety suite report.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence

from gpustack import image_changes
from gpustack.mockrun import Recording, Registration
from gpustack.render import integral

CREATE, UPDATE, REPLACE, DELETE = "create", "update", "replace", "delete"
# components/states/driver/rolled.py and components/states/node_labeler.py; gpustack reads renders, not the program's
# modules, for its rules.
TEMPLATE_DIGEST_ANNOTATION = "gpu-stack/template-digest"
NODE_POOLS_CONFIGMAP, NODE_POOLS_KEY = "gpu-stack-node-pools", "node-pools.json"
# A gate Job replaced is a gate run again: the point of rendering it with a digest of what it judges.
RERUN = "rerun"
ACTIONS = (CREATE, UPDATE, REPLACE, RERUN, DELETE)

PROVIDER_TYPE = "pulumi:providers:kubernetes"
JOB_TYPE = "kubernetes:batch/v1:Job"
DAEMONSET_TYPE = "kubernetes:apps/v1:DaemonSet"
HELM_RELEASE_TYPE = "kubernetes:helm.sh/v3:Release"
DELETION_PROPAGATION = "pulumi.com/deletionPropagationPolicy"
DRIVER_COMPONENT = "nvidia-driver"
COMPONENT_LABEL = "app.kubernetes.io/component"

# Fields Kubernetes (and so pulumi-kubernetes' diff) cannot change in place, by kind; metadata.name and
# metadata.namespace for every kind. ConfigMap and Secret data count only when the provider is not told to
# update them in place (enableConfigMapMutable / enableSecretMutable).
IMMUTABLE: dict[str, tuple[str, ...]] = {
    "DaemonSet": ("spec.selector",),
    "Deployment": ("spec.selector",),
    "ReplicaSet": ("spec.selector",),
    "StatefulSet": ("spec.selector", "spec.serviceName", "spec.podManagementPolicy", "spec.volumeClaimTemplates"),
    "Job": ("spec.selector", "spec.template", "spec.completions", "spec.completionMode", "spec.backoffLimitPerIndex"),
    "Service": ("spec.clusterIP", "spec.clusterIPs"),
    "RoleBinding": ("roleRef",),
    "ClusterRoleBinding": ("roleRef",),
    "RuntimeClass": ("handler",),
    "PriorityClass": ("value",),
    "Secret": ("type",),
    "CustomResourceDefinition": ("spec.group", "spec.names.plural", "spec.scope"),
    "PersistentVolumeClaim": ("spec.storageClassName", "spec.accessModes", "spec.volumeName"),
}
MUTABLE_WHEN = {"ConfigMap": ("enableConfigMapMutable", ("data", "binaryData")), "Secret": ("enableSecretMutable", ("data", "stringData"))}
# What running workloads (not only the stack's own operands) stand on: deleting it breaks them.
WORKLOAD_REFERENCED = ("Namespace", "CustomResourceDefinition", "RuntimeClass", "DeviceClass", "PriorityClass")


@dataclass(frozen=True)
class Change:
    action: str
    urn: str  # the new URN (the old one for a delete)
    type: str
    kind: Optional[str]
    identity: Optional[str]  # Kind/namespace/name of the Kubernetes object, as it is after the change
    fields: tuple[str, ...] = ()  # top-level input paths that differ
    reasons: tuple[str, ...] = ()  # why a replace is one; what makes it dangerous
    old_identity: Optional[str] = None
    aliased: bool = False  # matched through an alias: same resource, new URN

    @property
    def label(self) -> str:
        return self.identity or self.urn.rsplit("::", 1)[-1]


@dataclass
class Plan:
    changes: list[Change]
    # Failures the engine would hit: a protected resource deleted or replaced, two resources for one object.
    blocked: list[str] = field(default_factory=list)
    dangers: list[tuple[str, str]] = field(default_factory=list)  # (rule, message)
    # What a reviewer should check that the render cannot: (topic, message), printed, never failing the diff.
    notes: list[tuple[str, str]] = field(default_factory=list)

    def by_action(self) -> dict[str, list[Change]]:
        grouped: dict[str, list[Change]] = {a: [] for a in ACTIONS}
        for change in self.changes:
            grouped[change.action].append(change)
        return grouped

    def labels(self, action: str) -> set[str]:
        return {c.label for c in self.changes if c.action == action}


def _kind(registration: Registration) -> Optional[str]:
    return registration.inputs.get("kind") if registration.is_kubernetes_object else None


def identity(registration: Registration) -> Optional[str]:
    if not registration.is_kubernetes_object:
        return None
    meta = registration.inputs.get("metadata") or {}
    namespace = meta.get("namespace")
    name = meta.get("name") or registration.name
    return f"{_kind(registration)}/{namespace}/{name}" if namespace else f"{_kind(registration)}/{name}"


def _get(value: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _inputs(registration: Registration) -> dict[str, Any]:
    return integral(registration.inputs)


def _changed_fields(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[str, ...]:
    """Top-level keys that differ, and for metadata and spec their keys one level down."""
    found = []
    for key in sorted(set(old) | set(new)):
        if old.get(key) == new.get(key):
            continue
        if key in ("metadata", "spec") and isinstance(old.get(key), Mapping) and isinstance(new.get(key), Mapping):
            inner_old, inner_new = old[key], new[key]
            found += [f"{key}.{k}" for k in sorted(set(inner_old) | set(inner_new)) if inner_old.get(k) != inner_new.get(k)]
        else:
            found.append(key)
    return tuple(found)


def _provider_flags(recording: Recording) -> dict[str, bool]:
    for r in recording.registrations:
        if r.type == PROVIDER_TYPE:
            return {k: bool(v) and str(v).lower() == "true" for k, v in r.inputs.items() if isinstance(v, (bool, str))}
    return {}


def _replace_reasons(old: Registration, new: Registration, flags: Mapping[str, bool]) -> list[str]:
    if old.type != new.type:
        return [f"type {old.type} -> {new.type}"]
    if new.type == PROVIDER_TYPE:
        before, after = _inputs(old).get("clusterIdentifier"), _inputs(new).get("clusterIdentifier")
        return [f"clusterIdentifier {before} -> {after}: every object of the stack is replaced"] if before != after else []
    old_in, new_in = _inputs(old), _inputs(new)
    reasons = []
    if "*" in new.replace_on_changes and old_in != new_in:
        reasons.append("replaceOnChanges: *")
    reasons += [f"replaceOnChanges: {p}" for p in new.replace_on_changes if p != "*" and _get(old_in, p) != _get(new_in, p)]
    if not new.is_kubernetes_object:
        return reasons
    kind = _kind(new) or ""
    for path in ("metadata.name", "metadata.namespace", *IMMUTABLE.get(kind, ())):
        if _get(old_in, path) != _get(new_in, path):
            reasons.append(f"{path} is immutable")
    flag, paths = MUTABLE_WHEN.get(kind, ("", ()))
    if paths and not flags.get(flag):
        reasons += [f"{p} changes replace a {kind} (provider {flag} is off)" for p in paths if _get(old_in, p) != _get(new_in, p)]
    return reasons


def plan(before: Recording, after: Recording) -> Plan:
    old_by_urn = before.by_urn()
    flags = _provider_flags(after)
    matched: dict[str, str] = {}  # new urn -> old urn
    for r in after.registrations:
        if r.urn in old_by_urn:
            matched[r.urn] = r.urn
            continue
        for alias in r.aliases:
            if alias in old_by_urn and alias not in matched.values():
                matched[r.urn] = alias
                break
    taken = set(matched.values())
    changes: list[Change] = []
    blocked: list[str] = []
    for new in after.registrations:
        old_urn = matched.get(new.urn)
        if old_urn is None:
            changes.append(Change(CREATE, new.urn, new.type, _kind(new), identity(new)))
            continue
        old = old_by_urn[old_urn]
        aliased = old_urn != new.urn
        if _inputs(old) == _inputs(new) and old.type == new.type:
            if aliased:
                changes.append(Change(UPDATE, new.urn, new.type, _kind(new), identity(new), ("urn",), aliased=True))
            continue
        fields = _changed_fields(_inputs(old), _inputs(new))
        reasons = _replace_reasons(old, new, flags)
        if reasons:
            action = RERUN if new.type == JOB_TYPE else REPLACE
            if old.protect:
                blocked.append(f"{identity(old) or old.urn} is protected and would be replaced ({'; '.join(reasons)})")
            changes.append(Change(action, new.urn, new.type, _kind(new), identity(new), fields, tuple(reasons), identity(old), aliased))
        else:
            changes.append(Change(UPDATE, new.urn, new.type, _kind(new), identity(new), fields, aliased=aliased))
    for old in before.registrations:
        if old.urn not in taken:
            changes.append(Change(DELETE, old.urn, old.type, _kind(old), identity(old)))
            if old.protect:
                blocked.append(f"{identity(old) or old.urn} is protected and would be deleted")
    # A new resource for an object that an old one (of another URN) still holds: the create runs first and the
    # API server answers AlreadyExists.
    deleted = {c.identity: c for c in changes if c.action == DELETE and c.identity}
    for change in changes:
        if change.action == CREATE and change.identity in deleted:
            blocked.append(
                f"{change.identity} is created under a new URN while its old resource still holds it: AlreadyExists "
                "(give the new resource an alias to the old URN)"
            )
    result = Plan(changes, blocked)
    result.dangers = dangers(result, before, after)
    result.notes = notes(result, before, after)
    return result


# --- what a change does to a running GPU cluster -----------------------------------------------------------------


def _is_driver(registration: Registration) -> bool:
    if registration.type != DAEMONSET_TYPE:
        return False
    labels = (((registration.inputs.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(COMPONENT_LABEL) == DRIVER_COMPONENT


def _orphans_pods(registration: Registration) -> bool:
    annotations = (registration.inputs.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(DELETION_PROPAGATION, "")).lower() == "orphan"


def dangers(result: Plan, before: Recording, after: Recording) -> list[tuple[str, str]]:
    """(rule, message) for every change a platform engineer must look at twice; `gpustack diff` fails on them
    unless `--allow RULE` names the rule."""
    found: list[tuple[str, str]] = [("blocked", message) for message in result.blocked]
    old_by_urn, new_by_urn = before.by_urn(), after.by_urn()
    matched_old = {}
    for change in result.changes:
        if change.action in (UPDATE, REPLACE, RERUN):
            new = new_by_urn[change.urn]
            old_urn = next((a for a in [change.urn, *new.aliases] if a in old_by_urn), change.urn)
            matched_old[change.urn] = old_by_urn.get(old_urn)
    for change in result.changes:
        if change.action == REPLACE and change.type == DAEMONSET_TYPE and _is_driver(new_by_urn[change.urn]):
            old = matched_old.get(change.urn)
            if change.identity == change.old_identity:
                found.append(("driver-replaced", f"{change.label} is replaced in place ({'; '.join(change.reasons)}): it is "
                              "deleted before its replacement exists, so the driver leaves every node at once"))
            elif old is not None and not _orphans_pods(old):
                found.append(("driver-replaced", f"{change.old_identity} is replaced by {change.label} and deleted without "
                              "orphan propagation: its driver pods leave every node at once"))
        if change.action == DELETE:
            old = old_by_urn[change.urn]
            if _is_driver(old) and not _orphans_pods(old):
                found.append(("driver-deleted", f"{change.label} is deleted and takes its driver pods with it on every node "
                              "at once (it was deployed without orphan propagation)"))
            if change.kind in WORKLOAD_REFERENCED and not old.retain_on_delete:
                found.append(("referenced-deleted", f"{change.label} is deleted, and running workloads stand on it"))
            if change.type == HELM_RELEASE_TYPE and not old.retain_on_delete:
                release = old.inputs.get("name") or old.name
                found.append(("helm-release-deleted", f"Helm release {release} is deleted: `pulumi up` runs helm uninstall, which "
                              "deletes every object of the release (objects the program now declares under the same names "
                              "among them) and runs the chart's delete hooks (NFD's prunes its labels from every node); mark "
                              "it retained in the state first (for NFD: `python -m gpustack.nfd_migration`, see "
                              "components/states/nfd.py)"))
        if change.action == UPDATE and _is_driver(new_by_urn[change.urn]):
            old = matched_old.get(change.urn)
            if old is not None and image_changes.moved_in_place(old, new_by_urn[change.urn]):
                found.append(("node-image-changed", image_changes.moved_message(change.label, old, new_by_urn[change.urn])))
        if change.action == REPLACE and change.kind in WORKLOAD_REFERENCED:
            found.append(("referenced-deleted", f"{change.label} is replaced (deleted, then created), and running "
                          "workloads stand on it"))
    found += _cluster_dangers(result)
    return found


def notes(result: Plan, before: Recording, after: Recording) -> list[tuple[str, str]]:
    old_by_urn, new_by_urn = before.by_urn(), after.by_urn()
    found = []
    for change in result.changes:
        if change.action == DELETE and _is_driver(old_by_urn[change.urn]) and image_changes.is_image_daemonset(old_by_urn[change.urn]):
            found.append(("node-image-removed", image_changes.removed_note(change.label, old_by_urn[change.urn])))
        elif change.action == UPDATE and change.kind == "DaemonSet" and "spec.template" in change.fields and (
            _is_vm_manager(new_by_urn[change.urn])
        ):
            found.append(("vm-manager-rolled", _vm_manager_note(change.label, _driver_upgrade(after))))
    return found


def _is_vm_manager(registration: Registration) -> bool:
    """A driver-like DaemonSet of VM nodes (a vGPU manager, per RHCOS build too, or the VFIO manager): rolled by the
    node agents as drivers are (it carries a template digest), but not a driver."""
    annotations = (registration.inputs.get("metadata") or {}).get("annotations") or {}
    return TEMPLATE_DIGEST_ANNOTATION in annotations and not _is_driver(registration)


def _vm_manager_note(label: str, driver_upgrade: Optional[str]) -> str:
    if driver_upgrade == "rolling":
        return (f"{label} changes its pods; the node agents roll it node by node within upgrade.maxUnavailable: each "
                "node is cordoned, its VMs evicted (KubeVirt live-migrates those whose evictionStrategy is LiveMigrate; "
                "the others follow upgrade.gpuPodEviction and upgrade.drain, or are waited for), its pod replaced, and "
                "it is uncordoned once the sandbox validator passed again")
    return (f"{label} changes its pods, which reach a node only when its pod is deleted (OnDelete: a restart takes the "
            "GPUs from every VM of the node) and upgrade.strategy is not 'rolling', so no agent rolls it: move each "
            "node's VMs, then delete its pod")


def _driver_upgrade(recording: Recording) -> Optional[str]:
    """`removal.driverUpgrade` of the node-pools document the render gives the agents, None without one."""
    for registration in recording.registrations:
        if registration.type == "kubernetes:core/v1:ConfigMap" and registration.name == NODE_POOLS_CONFIGMAP:
            text = (registration.inputs.get("data") or {}).get(NODE_POOLS_KEY)
            try:
                return ((json.loads(text) if isinstance(text, str) else {}).get("removal") or {}).get("driverUpgrade")
            except ValueError:
                return None
    return None


def _cluster_dangers(result: Plan) -> list[tuple[str, str]]:
    """A Kubernetes provider replaced (its clusterIdentifier, the stack's cluster.name, changed): the engine replaces
    every object the provider manages, which the per-object view above cannot see."""
    found = []
    for change in result.changes:
        if change.action == REPLACE and change.type == PROVIDER_TYPE:
            found.append(("cluster-replaced", f"the Kubernetes provider is replaced ({'; '.join(change.reasons)}): every "
                          "object of the stack is replaced (deleted and re-created), so the drivers leave every node at "
                          "once and every operand restarts, and protected objects refuse it partway; a rotated kubeconfig "
                          "needs no new cluster.name, and another cluster needs a stack of its own"))
    return found


def summary(result: Plan) -> dict[str, int]:
    grouped = result.by_action()
    return {action: len(grouped[action]) for action in ACTIONS}


def because_text(keys: Sequence[str], limit: int = 3) -> str:
    """`driver.extraVolumes[0].hostPath.path changed` for the keys a change comes from (gpustack/causes.py)."""
    shown = [key.split(":", 1)[-1] for key in keys[:limit]]
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return f"{', '.join(shown)}{more} changed" if keys else ""


def render_plan(result: Plan, *, verbose: bool = False, because: Optional[Mapping[str, Sequence[str]]] = None) -> Iterable[str]:
    """The lines `gpustack diff` prints: one per change (with the stack keys it comes from, where `because` says),
    then what would fail and what is dangerous."""
    symbols = {CREATE: "+", UPDATE: "~", REPLACE: "+-", RERUN: "+-", DELETE: "-"}
    for action in ACTIONS:
        for change in sorted(result.by_action()[action], key=lambda c: c.label):
            detail = ""
            if change.action in (REPLACE, RERUN):
                detail = f" ({'; '.join(change.reasons)})"
            elif change.action == UPDATE and change.fields:
                detail = f" ({', '.join(change.fields[:6])}{', ...' if len(change.fields) > 6 else ''})"
            if change.aliased:
                detail += " [same resource, new URN]"
            if because and because.get(change.urn):
                detail += f" because {because_text(because[change.urn])}"
            what = change.label if not verbose else f"{change.label} {change.urn}"
            yield f"{symbols[action]:>2} {action:<7} {what}{detail}"
    for message in result.blocked:
        yield f"!! pulumi up would fail: {message}"
    for rule, message in result.dangers:
        if rule != "blocked":
            yield f"!! dangerous [{rule}]: {message}"
    for topic, message in result.notes:
        yield f"-- note [{topic}]: {message}"
