"""NVIDIADriver objects (`kubectl get nvidiadrivers -o yaml`): the operator's per-node-group drivers when the
ClusterPolicy sets `driver.useNvidiaDriverCRD` (fact sheet §4.4, GO:api/nvidia/v1alpha1/nvidiadriver_types.go).

Each object owns the GPU nodes its nodeSelector selects (the `default: true` one those no other selects, as the
operator's AssignOwners decides; two owners for one node are refused, as the operator refuses them) and becomes
the driver of the pools those nodes form: per pool the driver's mode (precompiled or not), version or branch and
kernel module type, and the DaemonSet name the operator gave it, so adopting the cluster takes over the running
driver pods. A `vgpu-host-manager` object becomes the vm-vgpu pools' vGPU manager.

What gpu-stack sets once for every driver (image, env, args, resources, licensing, kernel module, repository and
certificate configs, GDS/GDRCopy/RDMA, the upgrade policy, ...) is read as the ClusterPolicy's own driver section
would be (`TRANSLATED` maps NVIDIADriver paths to ClusterPolicy ones), so both imports carry such a field the same
way; the objects of one kind must then agree on it, and an import where they do not stops naming the objects and
the field. The pod settings the NVIDIADriver template applies to its DaemonSet alone (labels, annotations,
tolerations, priorityClassName) land on `operands.driver` (`operands.vgpuManager`). The report names each
object's fields as `nvidiadriver:NAME/spec.<field>`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from components.catalogs import consts
from gpustack.importer.common import ImportInputError, NotCarried, _slug, objects_of, shown_input
from gpustack.importer.ledger import CARRIED, RENDERED_ANYWAY, REPORTED, WITHOUT_EFFECT, FieldOutcome, empty, leaves, under
from gpustack.importer.nodes import _Group
from gpustack.importer.shapes import (BOOLEAN, MAPPING, STRING, STRING_MAP, TOLERATIONS, Kind, check_input, item_path)
from gpustack.importer.spec_fields import SPEC_FIELDS

API_VERSION = "nvidia.com/v1alpha1"
KIND = "NVIDIADriver"
OWNER_LABEL = "nvidia.com/gpu-operator.driver.owner"
DRIVER_TYPES = ("gpu", "vgpu", "vgpu-host-manager")
VGPU_HOST_MANAGER = "vgpu-host-manager"
KERNEL_MODULE_TYPES = ("auto", "open", "proprietary")
# The DaemonSet template's own toleration and priority class (GO:manifests/state-driver/0500_daemonset.yaml).
TEMPLATE_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
TEMPLATE_PRIORITY_CLASS = "system-node-critical"
# Labels the operator drops from spec.labels: the DaemonSet selector and its bookkeeping depend on them.
RESERVED_LABEL = "app"
RESERVED_LABEL_PREFIX = "app.kubernetes.io/"

# NVIDIADriver spec path -> the ClusterPolicy path the import reads it as (a gpu or vgpu driver: the driver section
# and the GPUDirect sidecars' sections; the vGPU host manager: the vgpuManager section).
_DRIVER_FIELDS = ("repository", "image", "version", "imagePullPolicy", "imagePullSecrets", "manager", "resources", "args",
                  "env", "secretEnv", "upgradePolicy", "kernelModuleType", "usePrecompiled", "useOpenKernelModules",
                  "startupProbe", "livenessProbe", "readinessProbe", "rdma", "hostNetwork", "certConfig",
                  "kernelModuleConfig", "licensingConfig.secretName", "licensingConfig.nlsEnabled")
TRANSLATED: tuple[tuple[str, str], ...] = (
    ("repoConfig.name", "driver.repoConfig.configMapName"),
    ("licensingConfig.name", "driver.licensingConfig.configMapName"),
    ("virtualTopologyConfig.name", "driver.virtualTopology.config"),
    ("gds", "gds"),
    ("gdrcopy", "gdrcopy"),
    *((field, f"driver.{field}") for field in _DRIVER_FIELDS),
)
VGPU_TRANSLATED: tuple[tuple[str, str], ...] = (
    ("manager", "vgpuManager.driverManager"),
    ("kernelModuleConfig", "vgpuManager.kernelModuleConfig"),
    *((field, f"vgpuManager.{field}") for field in ("repository", "image", "version", "imagePullPolicy", "imagePullSecrets",
                                                    "resources", "args", "env")),
)
# The ClusterPolicy sections the operator no longer reads once NVIDIADriver objects deploy the drivers.
REPLACED_SECTIONS = ("driver", "gds", "gdrcopy", "vgpuManager")
REPLACED_REASON = "driver.useNvidiaDriverCRD is true: the operator takes the drivers from the NVIDIADriver objects"
# The driver section's fields that still count in NVIDIADriver mode.
KEPT_DRIVER_FIELDS = ("useNvidiaDriverCRD",)
CRD_MODE = "driver.useNvidiaDriverCRD"
# Fields each object decides for its own nodes (the pools it owns), never compared across objects.
PER_POOL = ("default", "driverType", "nodeSelector", "version", "usePrecompiled", "kernelModuleType", "useOpenKernelModules")
# Pod settings the template applies to the object's DaemonSet alone.
POD_FIELDS = ("labels", "annotations", "tolerations", "priorityClassName")

WITHOUT_EFFECT_FIELDS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("nodeAffinity", "the operator's driver DaemonSet template renders no node affinity from it", DRIVER_TYPES),
    ("livenessProbe", "the operator's NVIDIADriver template renders no liveness probe (only the startup probe)", DRIVER_TYPES),
    ("readinessProbe", "the operator's NVIDIADriver template renders no readiness probe (only the startup probe)", DRIVER_TYPES),
    ("useOpenKernelModules", "deprecated no-op in the operator (kernelModuleType replaced it)", DRIVER_TYPES),
    ("startupProbe", "the operator renders no startup probe for a vgpu-host-manager", (VGPU_HOST_MANAGER,)),
    ("usePrecompiled", "a vgpu-host-manager has no precompiled form; the operator builds it from the image", (VGPU_HOST_MANAGER,)),
)
REPORTED_FIELDS: tuple[tuple[str, str], ...] = (
    ("podSecurityContext", "gpu-stack has no key for a pod security context; the driver pod keeps NVIDIA's asset's"),
)
VGPU_UNCARRIED = "gpu-stack's vGPU manager has no key for this (it is the vm-vgpu pools' one vGPU manager, vgpu.managerImage and operands.vgpuManager)"

OBJECT_FIELDS: dict[str, Kind] = {
    "metadata": MAPPING,
    "metadata.name": STRING,
    "metadata.uid": STRING,
    "metadata.deletionTimestamp": STRING,
    "spec": MAPPING,
    "status": MAPPING,
    "status.state": STRING,
}


def _spec_fields() -> dict[str, Kind]:
    """Each NVIDIADriver field's type: the ClusterPolicy field it is read as, and the object's own fields."""
    fields: dict[str, Kind] = {}
    for ours, theirs in (*TRANSLATED, *VGPU_TRANSLATED):
        for path, kind in SPEC_FIELDS.items():
            if under(path, theirs):
                fields[f"spec.{ours}{path[len(theirs):]}"] = kind
    fields.update({
        "spec.default": BOOLEAN,
        "spec.driverType": STRING,
        "spec.nodeSelector": STRING_MAP,
        "spec.nodeAffinity": MAPPING,
        "spec.labels": STRING_MAP,
        "spec.annotations": STRING_MAP,
        "spec.tolerations": TOLERATIONS,
        "spec.priorityClassName": STRING,
        "spec.podSecurityContext": MAPPING,
        "spec.licensingConfig.name": STRING,
        "spec.repoConfig.name": STRING,
        "spec.virtualTopologyConfig.name": STRING,
    })
    return fields


SPEC_FIELD_KINDS: dict[str, Kind] = _spec_fields()


@dataclass(frozen=True)
class NvidiaDriver:
    name: str
    uid: Optional[str]
    spec: dict[str, Any]

    @property
    def where(self) -> str:
        return f"nvidiadriver:{self.name}"

    @property
    def driver_type(self) -> str:
        return self.spec.get("driverType") or "gpu"

    @property
    def default(self) -> bool:
        return bool(self.spec.get("default"))

    @property
    def precompiled(self) -> bool:
        return bool(self.spec.get("usePrecompiled"))

    @property
    def host_manager(self) -> bool:
        return self.driver_type == VGPU_HOST_MANAGER

    def selector(self) -> dict[str, str]:
        """GetNodeSelector: an absent (or, as kubectl prints it, empty) selector selects the GPU nodes."""
        return dict(self.spec.get("nodeSelector") or {consts.GPU_PRESENT: "true"})

    def selects(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.selector().items())


def nvidia_drivers_of(documents: Sequence[tuple[str, Any]]) -> list[NvidiaDriver]:
    """The NVIDIADriver objects of `kubectl get nvidiadrivers -o yaml` documents (one object or a List each),
    checked as the API server and the operator check them; objects being deleted are left out, as the operator
    leaves them out."""
    found: dict[str, NvidiaDriver] = {}
    for path, document in documents:
        for i, obj in enumerate(objects_of(document, (KIND,), path)):
            at = item_path(obj, document, i)
            where = f"{path}: {at + ': ' if at else ''}"
            api = obj.get("apiVersion")
            if api != API_VERSION:
                raise ImportInputError(f"{where}NVIDIADriver apiVersion {shown_input(api)} is not {API_VERSION}")
            check_input(obj, OBJECT_FIELDS, path, at)
            name = (obj.get("metadata") or {}).get("name")
            if not name:
                raise ImportInputError(f"{where}metadata.name: an NVIDIADriver has a name")
            check_input(obj, SPEC_FIELD_KINDS, f"{path}: NVIDIADriver {name}")
            if (obj.get("metadata") or {}).get("deletionTimestamp"):
                continue
            driver = NvidiaDriver(name, (obj.get("metadata") or {}).get("uid"), copy.deepcopy(obj.get("spec") or {}))
            _check_spec(driver)
            if name in found and found[name].spec != driver.spec:
                raise ImportInputError(f"NVIDIADriver {name} is given twice, with different specs")
            found[name] = driver
    drivers = sorted(found.values(), key=lambda d: d.name)
    defaults = [d.name for d in drivers if d.default]
    if len(defaults) > 1:
        raise ImportInputError(f"NVIDIADrivers {', '.join(defaults)} are each `default: true`; the operator takes one "
                               "default (it refuses to assign owners otherwise): keep one")
    return drivers


def _check_spec(driver: NvidiaDriver) -> None:
    spec, where = driver.spec, f"NVIDIADriver {driver.name}"
    for field, allowed in (("driverType", DRIVER_TYPES), ("kernelModuleType", KERNEL_MODULE_TYPES)):
        value = spec.get(field)
        if value is not None and value not in allowed:
            raise ImportInputError(f"{where}: spec.{field}: got {shown_input(value)}; allowed values: {', '.join(allowed)}")
    selector = spec.get("nodeSelector") or {}
    if driver.default and selector:
        raise ImportInputError(f"{where}: spec.nodeSelector: a default NVIDIADriver must not use nodeSelector (the API server refuses it)")
    if OWNER_LABEL in selector:
        raise ImportInputError(f"{where}: spec.nodeSelector: {OWNER_LABEL} is the operator's own owner label, which a "
                               "selector may not use")


def operator_daemonset_name(driver: NvidiaDriver, os_tag: str, kernel: Optional[str]) -> Optional[str]:
    """The driver DaemonSet's name as the operator made it (getDriverAppName): nvidia-<driverType>-driver-<osTag>-
    <hash>, the hash an FNV-1a of the object's UID (and `-<kernel>` for precompiled drivers), cut to 63."""
    if not driver.uid:
        return None
    material = driver.uid + (f"-{kernel}" if kernel else "")
    value = 0x811C9DC5
    for byte in material.encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    alphabet = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery rand.SafeEncodeString's
    digest = "".join(alphabet[ord(c) % len(alphabet)] for c in str(value))
    prefix = f"nvidia-{driver.driver_type}-driver-{os_tag}"
    return f"{prefix[: 63 - len(digest) - 1]}-{digest}"


def translated_path(path: str, host_manager: bool) -> Optional[str]:
    """The ClusterPolicy path an NVIDIADriver spec path (without `spec.`) is read as, if any."""
    for ours, theirs in VGPU_TRANSLATED if host_manager else TRANSLATED:
        if under(path, ours):
            return theirs + path[len(ours):]
    return None


def _translate(spec: Mapping[str, Any], host_manager: bool) -> dict[str, Any]:
    """The ClusterPolicy sections an object's spec reads as, with the API server's NVIDIADriver defaults that
    differ from the ClusterPolicy's: autoUpgrade true in a given upgradePolicy, NLS on with a licence."""
    sections: dict[str, Any] = {}
    for ours, theirs in VGPU_TRANSLATED if host_manager else TRANSLATED:
        value = _get(spec, ours)
        if value is not None:
            _put(sections, theirs, copy.deepcopy(value))
    resources = spec.get("resources")
    # The template runs `nvidia-driver init` and appends spec.args; gpu-stack's args replace the container's.
    if spec.get("args"):
        _put(sections, "vgpuManager.args" if host_manager else "driver.args", ["init", *spec["args"]])
    if host_manager:
        vgpu = sections.setdefault("vgpuManager", {})
        vgpu["enabled"] = True
        if isinstance(resources, dict):
            vgpu.setdefault("driverManager", {})["resources"] = copy.deepcopy(resources)
        return sections
    driver = sections.setdefault("driver", {})
    policy = driver.get("upgradePolicy")
    if isinstance(policy, dict) and "autoUpgrade" not in policy:
        policy["autoUpgrade"] = True
    licensing = driver.get("licensingConfig")
    if isinstance(licensing, dict) and "nlsEnabled" not in licensing:
        licensing["nlsEnabled"] = True
    # NVIDIADriver's resources apply to every container of the driver pod (its init container and sidecars too).
    if isinstance(resources, dict):
        driver.setdefault("manager", {})["resources"] = copy.deepcopy(resources)
        for sidecar in ("gds", "gdrcopy"):
            if isinstance(sections.get(sidecar), dict):
                sections[sidecar]["resources"] = copy.deepcopy(resources)
    return sections


def _nvd_path(cp_path: str, host_manager: bool) -> str:
    """The NVIDIADriver path (without `spec.`) a ClusterPolicy path was read from; "" for a whole section."""
    for ours, theirs in VGPU_TRANSLATED if host_manager else TRANSLATED:
        if under(cp_path, theirs):
            return ours + cp_path[len(theirs):]
    return ""


def _get(data: Mapping[str, Any], path: str) -> Any:
    node: Any = data
    for part in path.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _put(data: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    for part in parts[:-1]:
        data = data.setdefault(part, {})
    data[parts[-1]] = value


def _compared(driver: NvidiaDriver) -> dict[str, Any]:
    """The fields gpu-stack sets once for every driver of the object's kind, by path."""
    return {path: value for path, value in leaves(driver.spec, "spec")
            if not empty(path, value) and not any(under(path[len("spec."):], f) for f in PER_POOL)}


def _agree(drivers: Sequence[NvidiaDriver], what: str) -> None:
    """Objects of one kind set what gpu-stack holds once for all of them alike, or the import stops."""
    if len(drivers) < 2:
        return
    first = drivers[0]
    ours = _compared(first)
    for other in drivers[1:]:
        theirs = _compared(other)
        for path in sorted(set(ours) | set(theirs)):
            if ours.get(path) != theirs.get(path):
                raise ImportInputError(
                    f"NVIDIADrivers {first.name} and {other.name} set {path} differently ({shown_input(ours.get(path))} "
                    f"and {shown_input(theirs.get(path))}): gpu-stack sets it once for every {what}, per pool only the "
                    "driver's version, precompiled mode and kernel module type. Make them agree, or import the node "
                    "groups into separate stacks")


class NvidiaDriverMixin:
    """Mixed into build._Importer: the NVIDIADriver objects, their nodes and what each carries."""

    def _nvidia_driver_spec(self, effective: dict[str, Any], drivers: Sequence[NvidiaDriver]) -> dict[str, Any]:
        """The effective spec the mapping reads: in NVIDIADriver mode the driver sections come from the objects."""
        self.nvidia_drivers = list(drivers)
        self.replaced: dict[str, Any] = {}
        self.replaced_no_effect: list[NotCarried] = []
        self._nvd_owned: dict[str, list[dict[str, Any]]] = {}  # object name -> the pools it drives (their dicts)
        self.nvd_primary: Optional[NvidiaDriver] = None
        crd = (effective.get("driver") or {}).get("useNvidiaDriverCRD") is True
        self.crd_mode = crd
        if not crd:
            return effective
        if not drivers:
            raise ImportInputError(
                "spec.driver.useNvidiaDriverCRD is true: the operator deploys the drivers from NVIDIADriver objects, "
                "so the ClusterPolicy's driver section says nothing of them. Pass them with --nvidiadriver FILE "
                "(kubectl get nvidiadrivers -o yaml), or import with --from-cluster")
        gpu = [d for d in drivers if not d.host_manager]
        managers = [d for d in drivers if d.host_manager]
        _agree(gpu, "driver (gpu and vgpu NVIDIADrivers)")
        _agree(managers, "vGPU manager (vgpu-host-manager NVIDIADrivers)")
        for driver in managers:
            if driver.spec.get("version") != managers[0].spec.get("version"):
                raise ImportInputError(
                    f"NVIDIADrivers {managers[0].name} and {driver.name} run vGPU manager versions "
                    f"{shown_input(managers[0].spec.get('version'))} and {shown_input(driver.spec.get('version'))}: "
                    "gpu-stack runs one vGPU manager image (vgpu.managerImage) on every vm-vgpu pool")
        spec = copy.deepcopy(effective)
        for section in REPLACED_SECTIONS:
            if section in spec:
                self.replaced[section] = spec.pop(section)
        kept = {k: v for k, v in (self.replaced.get("driver") or {}).items() if k in KEPT_DRIVER_FIELDS}
        primary = self.nvd_primary = self._primary(gpu)
        sections = _translate(primary.spec, host_manager=False) if primary else {}
        if managers:
            sections.update(_translate(managers[0].spec, host_manager=True))
        sections.setdefault("driver", {}).update(kept)
        spec.update(sections)
        return spec

    def _primary(self, gpu: Sequence[NvidiaDriver]) -> Optional[NvidiaDriver]:
        """The gpu/vgpu object whose version and mode become the stack's own (the others' differ per pool): the one
        owning the most nodes, else the default, else the first by name."""
        if not gpu:
            return None
        owned = {d.name: 0 for d in gpu}
        for node in self.nodes or ():
            owner = self._owner(node)
            if owner is not None and owner.name in owned:
                owned[owner.name] += 1
        return max(gpu, key=lambda d: (owned[d.name], d.default, [-ord(c) for c in d.name]))

    # -- owners

    def _owner(self, node: Any) -> Optional[NvidiaDriver]:
        """AssignOwners: the one non-default object whose selector matches the node, else the default one."""
        if not getattr(self, "crd_mode", False) or not node.is_gpu:
            return None
        matching = [d for d in self.nvidia_drivers if not d.default and d.selects(node.labels)]
        if len(matching) > 1:
            raise ImportInputError(
                f"--nodes: node {node.name} is selected by NVIDIADrivers {', '.join(d.name for d in matching)}: their "
                "nodeSelectors overlap, which the operator refuses too (it assigns no owner). Make the selectors "
                "disjoint and import again")
        if matching:
            return matching[0]
        return next((d for d in self.nvidia_drivers if d.default), None)

    def _nvd_driver_mode(self) -> str:
        primary = getattr(self, "nvd_primary", None)
        self.spec.use("driver.enabled")
        if primary is None:
            return "host"
        return "precompiled" if primary.precompiled else "managed"

    def _nvd_candidates(self) -> list[str]:
        """Node labels the NVIDIADrivers select by: the first candidates to tell their pools apart."""
        keys = sorted({k for d in self.nvidia_drivers for k in (d.spec.get("nodeSelector") or {})})
        return [k for k in keys if k != consts.GPU_PRESENT]

    # -- pools

    def _nvd_pools_without_nodes(self) -> list[dict[str, Any]]:
        """Without --nodes: one pool per object, named after it and selecting what it selects."""
        if self.facts.os is None:
            raise ImportInputError("--os is required without --nodes (the driver image tag carries the OS, e.g. ubuntu22.04)")
        drivers = self.nvidia_drivers
        if len(drivers) > 1 and any(d.default for d in drivers):
            raise ImportInputError(
                "a default NVIDIADriver owns the GPU nodes no other one selects: pass --nodes, so the import sees which "
                "nodes those are (a pool cannot select 'every other node')")
        for i, first in enumerate(drivers):
            for other in drivers[i + 1:]:
                a, b = first.selector(), other.selector()
                if all(a[k] == b[k] for k in set(a) & set(b)):
                    raise ImportInputError(
                        f"NVIDIADrivers {first.name} and {other.name} may select the same nodes (their nodeSelectors "
                        "do not exclude each other): pass --nodes, so the import sees which nodes each owns")
        pools = []
        for driver in drivers:
            if driver.precompiled:
                raise ImportInputError(f"NVIDIADriver {driver.name}: spec.usePrecompiled is true: precompiled drivers are "
                                       "chosen per kernel, so pass --nodes (their kernel-version.full labels pick "
                                       "node_images/catalog.yaml entries)")
            model = self._model_for_selector(driver)
            workload = "vm-vgpu" if driver.host_manager else "container"
            self._refuse_mig_without_nodes(model, workload)
            selector = dict(driver.spec.get("nodeSelector") or {})
            plugin_key = self.spec.peek("devicePlugin.config.default") or None if workload == "container" else None
            signature = (model, self.facts.os, workload, None, plugin_key, None, None, None, driver.name)
            pool = self._pool(_Group(signature, selector, []))
            pool["name"] = _slug(driver.name)[:40].strip("-") or pool["name"]
            pools.append(pool)
        self.notes.append("without --nodes: one pool per NVIDIADriver, selecting what its nodeSelector selects; node "
                          "labels (nvidia.com/mig.config, nvidia.com/device-plugin.config, nvidia.com/gpu.workload.config) were not read")
        return pools

    def _model_for_selector(self, driver: NvidiaDriver) -> str:
        selector = driver.selector()
        for chosen, model in self.facts.gpu_models:
            if chosen is not None and selector.get(chosen[0]) == chosen[1]:
                return model
        default = [model for chosen, model in self.facts.gpu_models if chosen is None]
        if not default:
            raise ImportInputError(f"NVIDIADriver {driver.name}: --gpu-model MODEL (or KEY=VALUE:MODEL naming one of its "
                                   "nodeSelector labels) is required without --nodes")
        return default[0]

    def _nvd_pool_driver(self, pool: dict[str, Any], owner: Optional[NvidiaDriver], os_tag: str, kernel: Optional[str]) -> None:
        """The pool's driver from the object owning its nodes: mode, version or branch, kernel module type where they
        differ from the stack's, and the DaemonSet name the operator runs it under."""
        workload = pool.get("workloadType", "container")
        if workload != "container":
            if workload == "vm-vgpu" and owner is not None and owner.host_manager:
                pool["nodeSelector"].update({k: v for k, v in (owner.spec.get("nodeSelector") or {}).items() if k != consts.GPU_PRESENT})
                self._nvd_owned.setdefault(owner.name, []).append(pool)
            elif workload == "vm-vgpu":
                self.notes.append(f"pool {pool['name']}: no vgpu-host-manager NVIDIADriver owns its nodes, so the operator "
                                  "ran no vGPU manager there; gpu-stack's vm-vgpu pools run one (vgpu.managerImage)")
            return
        if owner is None or owner.host_manager:
            why = "no NVIDIADriver owns its nodes" if owner is None else f"NVIDIADriver {owner.name} is a vgpu-host-manager"
            if self.driver_mode != "host":
                pool.setdefault("driver", {})["mode"] = "host"
            self.notes.append(f"pool {pool['name']}: {why}, so the operator deployed no driver there: driver mode host")
            return
        # The operator's DaemonSet selects the object's nodeSelector (and the OS, kernel): so does the pool.
        pool["nodeSelector"].update({k: v for k, v in (owner.spec.get("nodeSelector") or {}).items() if k != consts.GPU_PRESENT})
        driver: dict[str, Any] = {}
        mode = "precompiled" if owner.precompiled else "managed"
        if mode != self.driver_mode:
            driver["mode"] = mode
        version = owner.spec.get("version")
        primary = self.nvd_primary
        if version and (version != primary.spec.get("version") or mode != self.driver_mode):
            driver["branch" if mode == "precompiled" else "version"] = str(version)
        kernel_module_type = owner.spec.get("kernelModuleType") or "auto"
        if kernel_module_type != (primary.spec.get("kernelModuleType") or "auto"):
            driver["kernelModuleType"] = kernel_module_type
        if not self.facts.openshift_version or mode == "precompiled":
            # (The Driver Toolkit's DaemonSets are one per RHCOS build, named by gpu-stack.)
            name = operator_daemonset_name(owner, os_tag, kernel)
            if name:
                driver["daemonSetName"] = name
        if driver:
            pool["driver"] = {**pool.get("driver", {}), **driver}
        self._nvd_owned.setdefault(owner.name, []).append(pool)

    # -- what each object carries

    def _nvidia_drivers(self) -> None:
        """Per object: the per-pool fields and the pod settings, each recorded in the ledger; the rest were read
        as the ClusterPolicy's driver sections."""
        if not self.nvidia_drivers:
            return
        if not self.crd_mode:
            for driver in self.nvidia_drivers:
                self.no_effect.append(NotCarried(f"{driver.where}/spec", sorted(driver.spec),
                                                 "spec.driver.useNvidiaDriverCRD is not true: the operator disables every NVIDIADriver"))
            return
        for section, original in self.replaced.items():
            fields = {k: v for k, v in original.items() if not (section == "driver" and k in (*KEPT_DRIVER_FIELDS, "enabled"))}
            moot = [p[len(section) + 1:] for p, v in leaves(fields, section) if not empty(p, v)]
            if moot:
                self.replaced_no_effect.append(NotCarried(f"spec.{section}", moot, REPLACED_REASON))
        if "enabled" in (self.replaced.get("driver") or {}):
            self.explicit["spec.driver.enabled"] = FieldOutcome(
                "spec.driver.enabled", self.replaced["driver"]["enabled"], WITHOUT_EFFECT,
                reason="driver.useNvidiaDriverCRD is true: the NVIDIADriver objects deploy the drivers whatever it says")
        self.explicit["spec.driver.useNvidiaDriverCRD"] = FieldOutcome(
            "spec.driver.useNvidiaDriverCRD", True, CARRIED, key="nodePools[].driver (from the NVIDIADriver objects)")
        for driver in self.nvidia_drivers:
            if self._nvd_owned.get(driver.name):
                self._nvd_pod_settings(driver)
            self._nvd_own_fields(driver)
        primary = self.nvd_primary
        if primary is not None and self._nvd_owned.get(primary.name) and (primary.spec.get("rdma") or {}).get("enabled") \
                and isinstance(primary.spec.get("resources"), dict):
            self.put("operands.peermem.resources", copy.deepcopy(primary.spec["resources"]), origin=f"{primary.where}/spec.resources")
        self._nvd_differences()

    def _nvd_own_fields(self, driver: NvidiaDriver) -> None:
        pools = [pool["name"] for pool in self._nvd_owned.get(driver.name, [])]
        where = driver.where
        pools_key = f"nodePools[{', '.join(pools)}]" if pools else None

        def record(field: str, status: str, key: Optional[str] = None, reason: Optional[str] = None) -> None:
            for path, value in leaves(driver.spec.get(field), f"spec.{field}") if field in driver.spec else ():
                if not empty(path, value):
                    self.explicit[f"{where}/{path}"] = FieldOutcome(f"{where}/{path}", value, status, key=key, reason=reason)

        if not pools:
            reason = ("it owns no node of the imported pools, so the operator rendered no DaemonSet for it"
                      if self.nodes is not None else "it owns no imported pool")
            for path, value in leaves(driver.spec, "spec"):
                if not empty(path, value):
                    self.explicit[f"{where}/{path}"] = FieldOutcome(f"{where}/{path}", value, WITHOUT_EFFECT, reason=reason)
            self.no_effect.append(NotCarried(f"{where}/spec", sorted(driver.spec), reason))
            return
        record("default", CARRIED, key=f"{pools_key}.nodeSelector (the nodes no other NVIDIADriver selects)")
        record("nodeSelector", CARRIED, key=f"{pools_key}.nodeSelector")
        record("driverType", CARRIED, key=f"{pools_key}.workloadType")
        for field, reason, types in WITHOUT_EFFECT_FIELDS:
            if driver.driver_type in types:
                record(field, WITHOUT_EFFECT, reason=reason)
        for field, reason in REPORTED_FIELDS:
            if field in driver.spec and not empty(f"spec.{field}", driver.spec[field]):
                self.report(f"{where}/spec.{field}", driver.spec[field], reason)
        if driver.host_manager:
            # The vGPU manager image picks its kernel modules itself (gpu-stack sets no KERNEL_MODULE_TYPE there).
            if (driver.spec.get("kernelModuleType") or "auto") == "auto":
                record("kernelModuleType", CARRIED, key=RENDERED_ANYWAY)
            else:
                record("kernelModuleType", REPORTED, reason=VGPU_UNCARRIED)
                self.report(f"{where}/spec.kernelModuleType", driver.spec["kernelModuleType"], VGPU_UNCARRIED)
            for path, value in leaves(driver.spec, "spec"):
                field = path[len("spec."):]
                if empty(path, value) or f"{where}/{path}" in self.explicit or any(under(field, f) for f in (*PER_POOL, *POD_FIELDS)):
                    continue
                if translated_path(field.split("[", 1)[0], host_manager=True) is None:
                    self.report(f"{where}/{path}", value, VGPU_UNCARRIED)
            record("version", CARRIED, key="vgpu.managerImage")
            return
        stack = "driver.branch" if self.driver_mode == "precompiled" else "versions.driver"
        pool_key = "nodePools[].driver.branch" if driver.precompiled else "nodePools[].driver.version"
        differs = driver is not self.nvd_primary and (driver.spec.get("version") != self.nvd_primary.spec.get("version")
                                                       or driver.precompiled != self.nvd_primary.precompiled)
        record("version", CARRIED, key=f"{pools_key}.driver.{pool_key.rsplit('.', 1)[-1]}" if differs else stack)
        record("usePrecompiled", CARRIED, key=f"{pools_key}.driver.mode" if driver.precompiled != self.nvd_primary.precompiled
               else "driver.mode")
        record("kernelModuleType", CARRIED, key=f"{pools_key}.driver.kernelModuleType"
               if (driver.spec.get("kernelModuleType") or "auto") != (self.nvd_primary.spec.get("kernelModuleType") or "auto")
               else "driver.kernelModuleType")

    def _nvd_pod_settings(self, driver: NvidiaDriver) -> None:
        """labels, annotations, tolerations and priorityClassName of the object's DaemonSet, onto the operand's
        overrides (what the stack's daemonsets settings already give is left out)."""
        operand = "vgpuManager" if driver.host_manager else "driver"
        where = driver.where
        spec = driver.spec
        labels = dict(spec.get("labels") or {})
        for key in sorted(labels):
            if key == RESERVED_LABEL or key.startswith(RESERVED_LABEL_PREFIX):
                path = f"{where}/spec.labels.{key}"
                self.explicit[path] = FieldOutcome(path, labels.pop(key), WITHOUT_EFFECT,
                                                   reason="the operator drops app and app.kubernetes.io/ labels from spec.labels")
        self._nvd_put(driver, "labels", f"operands.{operand}.labels", {k: str(v) for k, v in labels.items()} or None)
        annotations = spec.get("annotations") or {}
        self._nvd_put(driver, "annotations", f"operands.{operand}.annotations",
                      {k: str(v) for k, v in annotations.items()} or None)
        stack = [dict(t) for t in (self.config.get("gpu-stack:daemonsets", {}).get("tolerations") or [TEMPLATE_TOLERATION])]
        extra = []
        for i, toleration in enumerate(spec.get("tolerations") or []):
            entry = {k: toleration[k] for k in ("key", "operator", "value", "effect", "tolerationSeconds") if toleration.get(k) not in (None, "")}
            for field in sorted(set(toleration) - set(entry) - {"key", "operator", "value", "effect", "tolerationSeconds"}):
                self.report(f"{where}/spec.tolerations[{i}].{field}", toleration[field],
                            "gpu-stack tolerations take key, operator, value, effect and tolerationSeconds only")
            if entry not in stack and entry != TEMPLATE_TOLERATION and entry not in extra:
                extra.append(entry)
        self._nvd_put(driver, "tolerations", f"operands.{operand}.tolerations", extra or None,
                      covered="daemonsets.tolerations")
        priority = spec.get("priorityClassName") or TEMPLATE_PRIORITY_CLASS
        stack_priority = self.config.get("gpu-stack:daemonsets", {}).get("priorityClassName") or TEMPLATE_PRIORITY_CLASS
        self._nvd_put(driver, "priorityClassName", f"operands.{operand}.priorityClassName",
                      priority if priority != stack_priority else None, covered="daemonsets.priorityClassName")

    def _nvd_put(self, driver: NvidiaDriver, field: str, key: str, value: Any, covered: Optional[str] = None) -> None:
        """Put one pod setting (all objects of a kind agree on it) and record the object's fields as carried."""
        if value is not None:
            self.put(key, value, origin=f"{driver.where}/spec.{field}")
        target = key if value is not None else (covered or key)
        for path, leaf in leaves(driver.spec.get(field), f"spec.{field}") if field in driver.spec else ():
            full = f"{driver.where}/{path}"
            if not empty(path, leaf) and full not in self.explicit:
                self.explicit[full] = FieldOutcome(full, leaf, CARRIED, key=target.split(":", 1)[-1])

    def _nvd_differences(self) -> None:
        """What the stack's DaemonSet settings add to every driver DaemonSet that an NVIDIADriver's did not have."""
        daemonsets = self.config.get("gpu-stack:daemonsets", {})
        extra_tolerations = [t for t in daemonsets.get("tolerations") or [] if t != TEMPLATE_TOLERATION]
        if extra_tolerations or daemonsets.get("labels") or daemonsets.get("annotations"):
            self.notes.append("the driver DaemonSets also get daemonsets.tolerations, labels and annotations (from the "
                              "ClusterPolicy's daemonsets section), which the operator did not put on NVIDIADriver DaemonSets")

    def _nvd_report_paths(self) -> None:
        """The report names an NVIDIADriver field by the object, not by the ClusterPolicy path it was read as."""
        if not getattr(self, "crd_mode", False):
            return
        self.not_carried = self._rewritten(self.not_carried)
        self.no_effect = self._rewritten(self.no_effect) + self.replaced_no_effect

    def _rewritten(self, items: list[NotCarried]) -> list[NotCarried]:
        """Report items about a field read from the objects, named by each object that sets it (the first of its
        kind when none does, as for a section naming no image)."""
        result: dict[tuple[str, str], NotCarried] = {}
        for item in items:
            cp_path = item.path[len("spec."):] if item.path.startswith("spec.") else ""
            section = cp_path.split(".", 1)[0].split("[", 1)[0]
            if section not in REPLACED_SECTIONS:
                result[(item.path, item.reason)] = item
                continue
            kind = [d for d in self.nvidia_drivers if d.host_manager == (section == "vgpuManager")]
            named = [(d, path) for d in kind for path in [_nvd_path(cp_path, d.host_manager)]
                     if path == "" or _get(d.spec, path.split("[", 1)[0]) is not None]
            if not named and kind:
                named = [(kind[0], _nvd_path(cp_path, kind[0].host_manager))]
            if not named:
                result[(item.path, item.reason)] = item
            for driver, path in named:
                full = f"{driver.where}/spec" + (f".{path}" if path else "")
                result[(full, item.reason)] = NotCarried(full, item.value, item.reason)
        return list(result.values())

    def _nvd_ledger(self, classifier: Any) -> list[FieldOutcome]:
        """Every non-empty leaf of each object's spec."""
        outcomes = []
        for driver in self.nvidia_drivers:
            for path, value in leaves(driver.spec, "spec"):
                if empty(path, value):
                    continue
                full = f"{driver.where}/{path}"
                field = path[len("spec."):]
                translated = translated_path(field, driver.host_manager) if self.crd_mode else None
                outcomes.append(classifier.outcome(full, value, spec_path=f"spec.{translated}" if translated else None))
        return outcomes
