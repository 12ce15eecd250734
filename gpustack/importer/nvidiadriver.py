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

This module holds the objects (reading, checking, the operator's DaemonSet names, the translation);
nvidiadriver_pools.py the mapping (owners, pools, what each field became).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from components.catalogs import consts
from components.config.drivers import KERNEL_MODULE_TYPES
from gpustack.importer.clusterpolicy import OBJECT_FIELDS as POLICY_OBJECT_FIELDS
from gpustack.importer.common import ImportInputError, objects_of, shown_input
from gpustack.importer.ledger import empty, leaves, under
from gpustack.importer.shapes import (BOOLEAN, MAPPING, STRING, STRING_MAP, TOLERATIONS, Kind, check_input, item_path)
from gpustack.importer.spec_fields import SPEC_FIELDS

API_VERSION = "nvidia.com/v1alpha1"
KIND = "NVIDIADriver"
OWNER_LABEL = "nvidia.com/gpu-operator.driver.owner"
DRIVER_TYPES = ("gpu", "vgpu", "vgpu-host-manager")
VGPU_HOST_MANAGER = "vgpu-host-manager"
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

# What the import reads outside the spec: the ClusterPolicy's, and the UID the operator's DaemonSet names hash.
OBJECT_FIELDS: dict[str, Kind] = {**POLICY_OBJECT_FIELDS, "metadata.uid": STRING, "metadata.deletionTimestamp": STRING, "spec": MAPPING}


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
