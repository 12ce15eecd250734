"""The ClusterPolicy: picking the one object the operator reconciles, and the effective spec the mapping reads,
with the CRD defaults, the allowed values, and which fields a mapping has read."""

from __future__ import annotations

from typing import Any, Optional

from components.catalogs import consts
from gpustack.importer.common import ImportInputError, objects_of, shown_input
from gpustack.importer.shapes import MAPPING, STRING, Kind, check_input, item_path

# CRD defaults, and the nil value of the operator's IsEnabled() helpers where the CRD has none (fact sheet §11).
CRD_DEFAULTS: dict[str, Any] = {
    "driver.enabled": True,
    "driver.usePrecompiled": False,
    "driver.useNvidiaDriverCRD": False,
    "driver.kernelModuleType": "auto",
    "driver.rdma.enabled": False,
    "driver.rdma.useHostMofed": False,
    "toolkit.enabled": True,
    "toolkit.installDir": "/usr/local/nvidia",
    "devicePlugin.enabled": True,
    "dcgm.enabled": True,
    "dcgmExporter.enabled": True,
    "dcgmExporter.serviceMonitor.enabled": False,
    "gfd.enabled": True,
    "migManager.enabled": True,
    "migManager.config.default": "all-disabled",
    "nodeStatusExporter.enabled": False,
    "cdi.enabled": True,
    "psa.enabled": False,
    "gds.enabled": False,
    "gdrcopy.enabled": False,
    # An empty strategy leaves the device plugin on its own default, none.
    "mig.strategy": "none",
    "sandboxWorkloads.enabled": False,
    "sandboxWorkloads.defaultWorkload": "container",
    "sandboxWorkloads.mode": "kubevirt",
    "vfioManager.enabled": False,
    "sandboxDevicePlugin.enabled": False,
    "kataSandboxDevicePlugin.enabled": False,
    "vgpuManager.enabled": False,
    "vgpuDeviceManager.enabled": False,
    "vgpuDeviceManager.config.default": "default",
    "ccManager.enabled": False,
    "daemonsets.updateStrategy": "RollingUpdate",
    # From the OL upgrade-policy schema, used once `upgradePolicy` is present at all.
    "driver.upgradePolicy.autoUpgrade": False,
    "driver.upgradePolicy.maxParallelUpgrades": 1,
    "driver.upgradePolicy.maxUnavailable": "25%",
    "driver.upgradePolicy.podDeletion.force": False,
    "driver.upgradePolicy.podDeletion.timeoutSeconds": 300,
    "driver.upgradePolicy.podDeletion.deleteEmptyDir": False,
    "driver.upgradePolicy.drain.enable": False,
    "driver.upgradePolicy.drain.force": False,
    "driver.upgradePolicy.drain.podSelector": "",
    "driver.upgradePolicy.drain.timeoutSeconds": 300,
    "driver.upgradePolicy.drain.deleteEmptyDir": False,
}

ENUMS: dict[str, tuple[str, ...]] = {
    "mig.strategy": ("none", "single", "mixed"),
    "driver.kernelModuleType": ("auto", "open", "proprietary"),
    "sandboxWorkloads.defaultWorkload": consts.WORKLOAD_TYPES,
    "sandboxWorkloads.mode": ("kubevirt", "kata"),
    "daemonsets.updateStrategy": ("RollingUpdate", "OnDelete"),
    "migManager.config.default": ("all-disabled", ""),
    "ccManager.defaultMode": ("on", "off", "devtools"),
    "dcgmExporter.service.internalTrafficPolicy": ("Cluster", "Local"),
}
BOOLEANS = tuple(k for k, v in CRD_DEFAULTS.items() if isinstance(v, bool))
# What the import reads outside the spec (whose fields spec_fields types): the name, the status the operator wrote.
OBJECT_FIELDS: dict[str, Kind] = {
    "metadata": MAPPING,
    "metadata.name": STRING,
    "status": MAPPING,
    "status.state": STRING,
    "status.namespace": STRING,
}


def cluster_policy_of(document: Any, path: str) -> dict:
    policies = objects_of(document, ("ClusterPolicy",), path)
    for i, policy in enumerate(policies):
        api = policy.get("apiVersion")
        if api != "nvidia.com/v1":
            raise ImportInputError(f"{path}: ClusterPolicy apiVersion {shown_input(api)} is not nvidia.com/v1")
        check_input(policy, OBJECT_FIELDS, path, item_path(policy, document, i))
    # The operator reconciles one ClusterPolicy and marks any other `ignored` (fact sheet §11, status).
    active = [p for p in policies if (p.get("status") or {}).get("state") != "ignored"]
    if len(active) != 1:
        names = ", ".join(str((p.get("metadata") or {}).get("name")) for p in active) or "none"
        raise ImportInputError(f"{path}: expected one ClusterPolicy the operator reconciles, found {len(active)} ({names})")
    policy = active[0]
    if not isinstance(policy.get("spec"), dict):
        raise ImportInputError(f"{path}: the ClusterPolicy has no `spec` mapping")
    return policy


class _Spec:
    """The effective spec, remembering which fields a mapping carried or compared (`used`), and which subtrees had
    no effect in the operator (`moot`, with the reason): those are listed in the report's without-effect part,
    never dropped silently."""

    def __init__(self, data: dict[str, Any]):
        self.data = data
        self.used: set[str] = set()
        self.moot: dict[str, str] = {}

    def raw(self, path: str) -> Any:
        node: Any = self.data
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node

    def get(self, path: str, default: Any = None) -> Any:
        self.used.add("spec." + path)
        return self.peek(path, default)

    def peek(self, path: str, default: Any = None) -> Any:
        """The value with the CRD default, without marking it read: for a field that may turn out to be moot."""
        value = self.raw(path)
        if value is None or (value == "" and path in ENUMS and "" not in ENUMS[path]):
            return CRD_DEFAULTS.get(path, default)
        return value

    def use(self, *paths: str) -> None:
        self.used.update("spec." + p for p in paths)

    def env(self, path: str) -> dict[str, Any]:
        """A component's env list by name, in order; entries are consumed one by one with use_env."""
        entries = self.raw(path) or []
        if not isinstance(entries, list):
            raise ImportInputError(f"spec.{path}: expected a list of {{name, value}}, got {shown_input(entries)}")
        found: dict[str, Any] = {}
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise ImportInputError(f"spec.{path}[{i}]: expected {{name, value}}, got {shown_input(entry)}")
            if "value" not in entry and set(entry) - {"name"}:
                # Only a valueFrom or the like, which the CRD's EnvVar lacks: the report lists it field by field
                # (ledger.leaves); carrying it as "" would set the variable empty.
                continue
            found[entry["name"]] = entry.get("value", "")
        return found

    def use_env(self, path: str, name: str) -> None:
        self.used.add(f"spec.{path}[{name}]")

    def without_effect(self, path: str, reason: str) -> None:
        """Declare a subtree the operator did not act on (a component it did not deploy, a deprecated no-op)."""
        self.moot.setdefault("spec." + path, reason)

    def is_used(self, path: str) -> bool:
        return any(_under(path, u) for u in self.used)

    def moot_of(self, path: str) -> Optional[str]:
        """The outermost without-effect subtree holding `path`, if any."""
        found = [m for m in self.moot if _under(path, m)]
        return min(found, key=len) if found else None


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + ".") or path.startswith(prefix + "[")


def _validate_spec(spec: _Spec) -> None:
    for path, allowed in ENUMS.items():
        value = spec.raw(path)
        # An empty MIG strategy is how the chart renders "leave it to the device plugin".
        if value is None or (value == "" and path == "mig.strategy"):
            continue
        if value not in allowed:
            shown = ", ".join(repr(a) if a == "" else a for a in allowed)
            raise ImportInputError(f"spec.{path}: got {shown_input(value)}; allowed values: {shown}")
    for path in BOOLEANS:
        value = spec.raw(path)
        if value is not None and not isinstance(value, bool):
            raise ImportInputError(f"spec.{path}: got {shown_input(value)}; allowed values: true, false")
    for section, value in spec.data.items():
        if not isinstance(value, dict):
            raise ImportInputError(f"spec.{section}: expected a mapping, got {shown_input(value)}")
