"""The import itself: `_Importer` maps one ClusterPolicy (with Helm values, nodes and ConfigMaps) onto stack keys in
stack-file order; each input's part of the mapping is a mixin of its own module."""

from __future__ import annotations

import copy
import re
from typing import Any, Mapping, Optional, Sequence

from components.config import NAMESPACE
from gpustack.importer.clusterpolicy import OBJECT_FIELDS, _Spec, _validate_spec
from gpustack.importer.common import ClusterFacts, ImportInputError, ImportResult, NotCarried, _slug
from gpustack.importer.configmaps import ConfigMapsMixin
from gpustack.importer.driver import DriverMixin
from gpustack.importer.helm import HelmMixin, deep_merge, helm_values_as_spec
from gpustack.importer.images import ImagesMixin
from gpustack.importer.ledger import WITHOUT_EFFECT, Classifier, FieldOutcome, empty, leaves, under
from gpustack.importer.mapping import MappingMixin, table_key
from gpustack.importer.nodes import NodePoolsMixin, _Node
from gpustack.importer.nvidiadriver import REPLACED_REASON, REPLACED_SECTIONS, NvidiaDriver
from gpustack.importer.nvidiadriver_pools import NvidiaDriverMixin
from gpustack.importer.openshift import OpenShiftMixin
from gpustack.importer.operands import OperandsMixin
from gpustack.importer.report import ReportMixin, _same_as_gpu_stack
from gpustack.importer.shapes import check_fields, type_name
from gpustack.importer.spec_fields import validate_helm_values, validate_spec_fields

SECTION_ORDER = ("cluster", "registry", "versions", "hostPaths", "driver", "upgrade", "toolkit", "devicePlugin", "validator",
                 "validation", "nfd", "nodeAgent", "daemonsets", "operands", "dcgmExporter", "migManager", "monitoring",
                 "components", "sandboxWorkloads", "vgpu", "gpudirect", "migLayouts", "nodePools")


class _Importer(ImagesMixin, DriverMixin, OperandsMixin, MappingMixin, HelmMixin, NodePoolsMixin, ConfigMapsMixin, OpenShiftMixin,
                NvidiaDriverMixin, ReportMixin):
    def __init__(self, policy: dict, facts: ClusterFacts, helm_values: Optional[dict], nodes: Optional[list[_Node]],
                 configmaps: Mapping[str, Mapping[str, str]], nvidia_drivers: Sequence[NvidiaDriver] = ()):
        self.policy = policy
        self.facts = facts
        self.helm = helm_values
        self.nodes = nodes
        self.configmaps = dict(configmaps)
        # Every field the mapping reads has its CRD type (and the Helm values theirs) before anything reads it.
        if not isinstance(policy, dict):
            raise ImportInputError(f"the ClusterPolicy: expected a mapping, got {type_name(policy)}")
        check_fields(policy, OBJECT_FIELDS, "ClusterPolicy")
        validate_spec_fields(policy.get("spec"))
        if helm_values is not None:
            validate_helm_values(helm_values)
        effective = deep_merge(helm_values_as_spec(helm_values), policy["spec"]) if helm_values else copy.deepcopy(policy["spec"])
        self.explicit: dict[str, FieldOutcome] = {}  # outcomes a mapping records itself, by path
        self.spec = _Spec(self._nvidia_driver_spec(effective, nvidia_drivers))
        _validate_spec(self.spec)
        self.config: dict[str, Any] = {}
        self.not_carried: list[NotCarried] = []
        self.no_effect: list[NotCarried] = []
        self.notes: list[str] = []
        self.origins: dict[str, str] = {}
        self.used_configmaps: set[str] = set()
        self.used_plugin_keys: set[str] = set()
        self.used_mig_layouts: set[str] = set()
        self.mig_layouts: dict[str, Any] = {}  # name -> {profile: count} or the per-GPU entry list

    # -- output helpers

    def put(self, key: str, value: Any, origin: Optional[str] = None) -> None:
        section, _, rest = key.partition(".")
        if not rest:
            self.config[f"{NAMESPACE}:{section}"] = value
        else:
            target = self.config.setdefault(f"{NAMESPACE}:{section}", {})
            parts = rest.split(".")
            for part in parts[:-1]:
                target = target.setdefault(part, {})
            target[parts[-1]] = value
        if origin:
            self.origins[f"{NAMESPACE}:{key}"] = origin

    def report(self, path: str, value: Any, reason: str) -> None:
        self.not_carried.append(NotCarried(path, value, reason))

    # -- the mapping, in stack-file order

    def run(self) -> ImportResult:
        s = self.spec
        self.sandbox = bool(s.get("sandboxWorkloads.enabled"))
        self.sandbox_mode = s.get("sandboxWorkloads.mode")
        self.default_workload = s.get("sandboxWorkloads.defaultWorkload")
        self.mig_strategy = s.get("mig.strategy")
        self.driver_mode = self._driver_mode()
        self.pools = self._pools()
        self.workloads = {p["workloadType"] if "workloadType" in p else "container" for p in self.pools}
        self._cluster()
        self._openshift()
        self._images()
        self._driver()
        self._upgrade()
        self._toolkit()
        self._device_plugin()
        self._validator()
        self._nfd()
        self.put("nodeAgent.image", self.facts.node_agent_image)
        self._daemonsets()
        self._monitoring()
        self._components()
        self._sandbox()
        self._gpudirect()
        self._nvidia_drivers()
        self._operator_driver_names()
        self._direct()
        self._operand_fields()
        self.put("nodePools", self.pools, origin="--nodes" if self.nodes is not None else "--gpu-model/--os")
        self._no_effect()
        self._unread_configmaps()
        self._leftovers()
        fields = self._ledger()
        self._nvd_report_paths()
        ordered = {f"{NAMESPACE}:{k}": self.config[f"{NAMESPACE}:{k}"] for k in SECTION_ORDER if f"{NAMESPACE}:{k}" in self.config}
        name = (self.policy.get("metadata") or {}).get("name") or "cluster-policy"
        not_carried = sorted(self.not_carried, key=lambda item: item.path)
        no_effect = sorted(self.no_effect, key=lambda item: item.path)
        return ImportResult(ordered, not_carried, self.notes, self.origins, source=str(name), no_effect=no_effect, fields=fields)

    def _ledger(self) -> list[FieldOutcome]:
        """Every non-empty leaf of the inputs' specs, with what became of it: the ClusterPolicy's effective spec
        (in NVIDIADriver mode its own driver sections, which the operator no longer read), then each NVIDIADriver."""
        classifier = Classifier(self.not_carried, self.no_effect, self.spec.is_used, _same_as_gpu_stack, self.origins,
                                table_key, self.explicit)
        fields = []
        for path, value in leaves(self.spec.data, "spec"):
            from_objects = self.crd_mode and any(under(path, f"spec.{section}") for section in REPLACED_SECTIONS)
            if not empty(path, value) and not from_objects:
                fields.append(classifier.outcome(path, value))
        for section, original in self.replaced.items():
            for path, value in leaves(original, f"spec.{section}"):
                if not empty(path, value):
                    fields.append(self.explicit.get(path) or FieldOutcome(path, value, WITHOUT_EFFECT, reason=REPLACED_REASON))
        return fields + self._nvd_ledger(classifier)

    def _cluster(self) -> None:
        facts = self.facts
        status_namespace = (self.policy.get("status") or {}).get("namespace")
        namespace = facts.namespace or status_namespace
        if not namespace:
            namespace = "gpu-operator"
            self.notes.append("the ClusterPolicy status names no namespace and --namespace was not given: using gpu-operator")
        versions = list(facts.kubernetes_versions)
        if not versions and self.nodes is not None:
            minors = sorted({m.group(1) for n in self.nodes if n.kubelet for m in [re.match(r"v?1\.([0-9]{1,4})(?![0-9])", n.kubelet)] if m}, key=int)
            versions = [f"1.{m}" for m in minors]
        if not versions:
            raise ImportInputError("--kubernetes-version is required without --nodes (the ClusterPolicy does not say it)")
        # OpenShift runs cri-o, as the operator assumes there.
        runtime = facts.container_runtime or ("cri-o" if facts.openshift_version else self._runtime_from_nodes())
        if runtime is None:
            runtime = "containerd"
            self.notes.append("container runtime: containerd assumed (no --container-runtime, no node reports one)")
        name = facts.cluster_name or _slug(facts.context)[:63].strip("-") or "cluster"
        if not facts.cluster_name:
            self.notes.append(f"cluster.name {name} comes from the context; it is the Kubernetes provider's "
                              "clusterIdentifier, so give the cluster's own name with --cluster-name if it differs")
        self.put("cluster", {"name": name, "context": facts.context, "kubernetesVersions": versions,
                             "containerRuntime": runtime, "namespace": namespace},
                 origin="status.namespace" if namespace == status_namespace else None)
        self.runtime = runtime


def import_cluster_policy(
    policy: dict,
    facts: ClusterFacts,
    *,
    helm_values: Optional[dict] = None,
    nodes: Optional[list[_Node]] = None,
    configmaps: Optional[Mapping[str, Mapping[str, str]]] = None,
    nvidia_drivers: Sequence[NvidiaDriver] = (),
) -> ImportResult:
    """The stack config and the report for one ClusterPolicy object (and the NVIDIADriver objects it uses)."""
    return _Importer(policy, facts, helm_values, nodes, configmaps or {}, nvidia_drivers).run()
