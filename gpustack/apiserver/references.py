"""Rules between the objects of one stack, as one cluster sees them: an identity held by two objects, and pods
that name a ServiceAccount the stack does not create."""

from __future__ import annotations

from typing import Sequence

from gpustack.apiserver.engine import Obj, StackReport, mapping, pod_specs, stack_rule
from gpustack.apiserver.meta import CLUSTER_SCOPED


def identity(obj: Obj) -> tuple[str, str, str, str]:
    """(API group, kind, namespace, name): what a cluster stores one object under; the version is not part of it."""
    api_version = str(obj.get("apiVersion", ""))
    group = api_version.split("/")[0] if "/" in api_version else ""
    meta = mapping(obj.get("metadata"))
    namespace = "" if obj.get("kind") in CLUSTER_SCOPED else str(meta.get("namespace") or "")
    return group, str(obj.get("kind")), namespace, str(meta.get("name") or "")


@stack_rule("unique-objects", "k8s.io/apiserver/pkg/registry/generic/registry.Store.Create (AlreadyExists: one object per "
            "group, kind, namespace and name)")
def unique_objects(objects: Sequence[Obj], report: StackReport) -> None:
    seen: set[tuple[str, str, str, str]] = set()
    for obj in objects:
        key = identity(obj)
        if key in seen:
            report(obj, "metadata.name", f"Duplicate value: another {key[1]} in this stack is named {key[3]!r}"
                   + (f" in namespace {key[2]!r}" if key[2] else ""))
        seen.add(key)


@stack_rule("service-account-exists", "k8s.io/kubernetes/plugin/pkg/admission/serviceaccount (a pod naming a ServiceAccount "
            "that does not exist is refused, so the workload's controller never creates its pods)")
def service_account_exists(objects: Sequence[Obj], report: StackReport) -> None:
    accounts = {identity(o)[2:] for o in objects if o.get("kind") == "ServiceAccount"}
    for obj in objects:
        namespace = str(mapping(obj.get("metadata")).get("namespace") or "")
        for path, pod in pod_specs(obj):
            name = pod.get("serviceAccountName") or "default"
            if name != "default" and (namespace, name) not in accounts:
                report(obj, f"{path}.serviceAccountName", f"Not found: ServiceAccount {name!r} is not in this stack's "
                       f"namespace {namespace!r}")
