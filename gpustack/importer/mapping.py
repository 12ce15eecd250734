"""The mapping table: which ClusterPolicy fields the import carries, and onto which gpu-stack keys.

`DIRECT` fields are copied as they are (a value equal to what gpu-stack renders without the key is left out);
`OPERAND_FIELDS` are the per-component fields every operand section has, carried onto `operands.<operand>`;
`BY_CODE` names the fields whose mapping needs more than a copy (images, the upgrade policy, toolkit runtime env,
node pools, ...) and the module doing it. `carried()` lists them all, one row per ClusterPolicy path: the
differential test changes each and expects the stack to change, and docs/migration.md prints the table.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from components.catalogs.operand_overrides import owned_env
from gpustack.importer.common import looks_like_credential
from gpustack.importer.images import OPERAND_OF
from gpustack.importer.ledger import under
from gpustack.importer.report import _same_as_gpu_stack

DEFAULT_PULL_POLICY = "IfNotPresent"
DCGM_HOSTENGINE = "nvidia-dcgm:5555"  # the standalone DCGM's Service, which the exporter uses with dcgm.enabled  # what gpu-stack renders for every operand without a key


@dataclass(frozen=True)
class Carried:
    path: str  # ClusterPolicy path under spec (env entries as `env[NAME]`)
    key: str  # the gpu-stack key it lands on (under gpu-stack:)
    default: Any = None  # what gpu-stack renders without the key; an equal value is not written
    by: str = ""  # the module whose code maps it, for the rows that are not a plain copy


DIRECT: tuple[Carried, ...] = (
    Carried("hostPaths.rootFS", "hostPaths.rootFS", "/"),
    Carried("hostPaths.driverInstallDir", "hostPaths.driverInstallDir", "/run/nvidia/driver"),
    Carried("hostPaths.kubeletRootDir", "hostPaths.kubeletRootDir", "/var/lib/kubelet"),
    Carried("driver.licensingConfig.secretName", "driver.licensingConfig.secretName"),
    Carried("driver.licensingConfig.configMapName", "driver.licensingConfig.configMapName"),
    Carried("driver.secretEnv", "driver.secretEnv"),
    Carried("driver.virtualTopology.config", "driver.virtualTopologyConfig"),
    Carried("driver.hostNetwork", "driver.hostNetwork", False),
    Carried("dcgmExporter.enablePodLabels", "dcgmExporter.enablePodLabels", False),
    Carried("dcgmExporter.enablePodUID", "dcgmExporter.enablePodUid", False),
    Carried("dcgmExporter.podLabelAllowlistRegex", "dcgmExporter.podLabelAllowlistRegex", []),
    Carried("dcgmExporter.hostPID", "dcgmExporter.hostPid", False),
    Carried("dcgmExporter.hostNetwork", "dcgmExporter.hostNetwork", False),
    Carried("dcgmExporter.hpcJobMapping.enabled", "dcgmExporter.hpcJobMapping.enabled", False),
    Carried("dcgmExporter.hpcJobMapping.directory", "dcgmExporter.hpcJobMapping.directory", "/var/lib/dcgm-exporter/job-mapping"),
    Carried("migManager.gpuClientsConfig.name", "migManager.gpuClientsConfig.name", "default-gpu-clients"),
    Carried("operator.runtimeClass", "toolkit.runtimeClass", "nvidia"),
    Carried("devicePlugin.mps.root", "devicePlugin.mpsRoot", "/run/nvidia/mps"),
)

PROBE_FIELDS = ("initialDelaySeconds", "periodSeconds", "timeoutSeconds", "failureThreshold", "successThreshold")

# ConfigMaps the driver mounts key by key: ClusterPolicy path -> (gpu-stack key, its name field).
DRIVER_CONFIGMAPS = (
    ("driver.repoConfig.configMapName", "driver.repoConfig", "configMapName"),
    ("driver.certConfig.name", "driver.certConfig", "name"),
    ("driver.kernelModuleConfig.name", "driver.kernelModuleConfig", "name"),
    ("vgpuManager.kernelModuleConfig.name", "vgpu.kernelModuleConfig", "name"),
)

# Env vars of an operand that land on a key of their own rather than operands.<operand>.env.
ENV_KEYS: tuple[Carried, ...] = (
    Carried("toolkit.env[CONTAINERD_CONFIG]", "toolkit.runtimeConfig", by="operands"),
    Carried("toolkit.env[RUNTIME_CONFIG]", "toolkit.runtimeConfig", by="operands"),
    Carried("toolkit.env[CRIO_CONFIG]", "toolkit.runtimeConfig", by="operands"),
    Carried("toolkit.env[RUNTIME_DROP_IN_CONFIG]", "toolkit.runtimeDropInConfig", by="operands"),
    Carried("toolkit.env[CONTAINERD_SOCKET]", "toolkit.runtimeSocket", by="operands"),
    Carried("toolkit.env[RUNTIME_SOCKET]", "toolkit.runtimeSocket", by="operands"),
    Carried("validator.plugin.env[WITH_WORKLOAD]", "validator.pluginWorkload", by="operands"),
    Carried("migManager.env[WITH_REBOOT]", "migManager.withReboot", by="operands"),
    Carried("dcgmExporter.env[DCGM_EXPORTER_LISTEN]", "dcgmExporter.listenAddress", by="mapping"),
    Carried("dcgmExporter.env[DCGM_EXPORTER_COLLECTORS]", "dcgmExporter.collectorsFile", by="mapping"),
    Carried("dcgmExporter.env[DCGM_REMOTE_HOSTENGINE_INFO]", "dcgmExporter.remoteHostengine", by="mapping"),
    Carried("driver.manager.env[ENABLE_GPU_POD_EVICTION]", "upgrade.gpuPodEviction", by="driver"),
    Carried("driver.manager.env[ENABLE_AUTO_DRAIN]", "upgrade.drain.enabled", by="driver"),
    Carried("driver.manager.env[DRAIN_USE_FORCE]", "upgrade.drain.force", by="driver"),
    Carried("driver.manager.env[DRAIN_POD_SELECTOR_LABEL]", "upgrade.drain.podSelector", by="driver"),
    Carried("driver.manager.env[DRAIN_TIMEOUT_SECONDS]", "upgrade.drain.timeoutSeconds", by="driver"),
    Carried("driver.manager.env[DRAIN_DELETE_EMPTYDIR_DATA]", "upgrade.drain.deleteEmptyDirData", by="driver"),
)
EXPORTER_ENV = {c.path[len("dcgmExporter.env["):-1]: c for c in ENV_KEYS if c.path.startswith("dcgmExporter.env[")}

BY_CODE: tuple[Carried, ...] = (
    Carried("driver.enabled", "driver.mode", by="driver"),
    Carried("driver.useNvidiaDriverCRD", "nodePools[].driver (from the NVIDIADriver objects, --nvidiadriver)", by="nvidiadriver"),
    Carried("driver.usePrecompiled", "driver.mode", by="driver"),
    Carried("driver.kernelModuleType", "driver.kernelModuleType", by="driver"),
    Carried("driver.version", "versions.driver / driver.branch", by="images"),
    Carried("driver.licensingConfig.nlsEnabled", "driver.licensingConfig.nlsEnabled", by="mapping"),
    Carried("driver.repoConfig.configMapName", "driver.repoConfig (files from --configmap)", by="mapping"),
    Carried("driver.certConfig.name", "driver.certConfig (files from --configmap)", by="mapping"),
    Carried("driver.kernelModuleConfig.name", "driver.kernelModuleConfig (files from --configmap)", by="mapping"),
    Carried("vgpuManager.kernelModuleConfig.name", "vgpu.kernelModuleConfig (files from --configmap)", by="mapping"),
    Carried("driver.readinessProbe.initialDelaySeconds", "driver.readinessProbe.initialDelaySeconds", by="mapping"),
    Carried("driver.readinessProbe.periodSeconds", "driver.readinessProbe.periodSeconds", by="mapping"),
    Carried("driver.readinessProbe.timeoutSeconds", "driver.readinessProbe.timeoutSeconds", by="mapping"),
    Carried("driver.readinessProbe.failureThreshold", "driver.readinessProbe.failureThreshold", by="mapping"),
    Carried("driver.readinessProbe.successThreshold", "driver.readinessProbe.successThreshold", by="mapping"),
    Carried("driver.startupProbe.initialDelaySeconds", "driver.startupProbe.initialDelaySeconds", by="driver"),
    Carried("driver.startupProbe.periodSeconds", "driver.startupProbe.periodSeconds", by="driver"),
    Carried("driver.startupProbe.timeoutSeconds", "driver.startupProbe.timeoutSeconds", by="driver"),
    Carried("driver.startupProbe.failureThreshold", "driver.startupProbe.failureThreshold", by="driver"),
    Carried("driver.rdma.enabled", "gpudirect.rdma.enabled", by="operands"),
    Carried("driver.rdma.useHostMofed", "gpudirect.rdma.useHostMofed", by="operands"),
    Carried("driver.upgradePolicy.autoUpgrade", "upgrade.strategy", by="driver"),
    Carried("driver.upgradePolicy.maxParallelUpgrades", "upgrade.maxParallelUpgrades", by="driver"),
    Carried("driver.upgradePolicy.maxUnavailable", "upgrade.maxUnavailable", by="driver"),
    Carried("driver.upgradePolicy.waitForCompletion.podSelector", "upgrade.waitForCompletion.podSelector", by="driver"),
    Carried("driver.upgradePolicy.waitForCompletion.timeoutSeconds", "upgrade.waitForCompletion.timeoutSeconds", by="driver"),
    Carried("driver.upgradePolicy.podDeletion", "upgrade.gpuPodEviction", by="driver"),
    Carried("driver.upgradePolicy.podDeletion.force", "upgrade.drain.force", by="driver"),
    Carried("driver.upgradePolicy.podDeletion.timeoutSeconds", "upgrade.drain.timeoutSeconds", by="driver"),
    Carried("driver.upgradePolicy.podDeletion.deleteEmptyDir", "upgrade.drain.deleteEmptyDirData", by="driver"),
    Carried("driver.upgradePolicy.drain.enable", "upgrade.drain.enabled", by="driver"),
    Carried("driver.upgradePolicy.drain.force", "upgrade.drain.force", by="driver"),
    Carried("driver.upgradePolicy.drain.podSelector", "upgrade.drain.podSelector", by="driver"),
    Carried("driver.upgradePolicy.drain.timeoutSeconds", "upgrade.drain.timeoutSeconds", by="driver"),
    Carried("driver.upgradePolicy.drain.deleteEmptyDir", "upgrade.drain.deleteEmptyDirData", by="driver"),
    Carried("toolkit.enabled", "components.toolkit", by="operands"),
    Carried("toolkit.installDir", "toolkit.installDir", by="operands"),
    Carried("cdi.enabled", "toolkit.cdi", by="operands"),
    Carried("mig.strategy", "devicePlugin.migStrategy / nodePools[].sharing.strategy", by="operands"),
    Carried("devicePlugin.enabled", "components.devicePlugin", by="operands"),
    Carried("devicePlugin.config.name", "nodePools[].sharing (with --configmap)", by="configmaps"),
    Carried("devicePlugin.config.default", "nodePools[].sharing (with --configmap)", by="configmaps"),
    Carried("dcgm.enabled", "components.dcgm", by="operands"),
    Carried("dcgmExporter.enabled", "components.dcgmExporter", by="operands"),
    Carried("dcgmExporter.config.name", "dcgmExporter.extraMetrics (with --configmap)", by="configmaps"),
    Carried("dcgmExporter.service.internalTrafficPolicy", "dcgmExporter.internalTrafficPolicy", by="operands"),
    Carried("dcgmExporter.serviceMonitor.enabled", "monitoring.prometheusOperator", by="operands"),
    Carried("dcgmExporter.serviceMonitor.interval", "monitoring.serviceMonitor.interval", by="operands"),
    Carried("dcgmExporter.serviceMonitor.scrapeTimeout", "monitoring.serviceMonitor.scrapeTimeout", by="operands"),
    Carried("dcgmExporter.serviceMonitor.additionalLabels", "monitoring.serviceMonitor.additionalLabels", by="operands"),
    Carried("dcgmExporter.serviceMonitor.honorLabels", "monitoring.serviceMonitor.honorLabels", by="operands"),
    Carried("dcgmExporter.serviceMonitor.relabelings", "monitoring.serviceMonitor.relabelings", by="operands"),
    Carried("gfd.enabled", "components.gfd", by="operands"),
    Carried("migManager.enabled", "components.migManager", by="operands"),
    Carried("migManager.config.name", "migLayouts (with --nodes and --configmap)", by="configmaps"),
    Carried("migManager.config.default", "nodePools[].sharing (refused when empty and a MIG pool has no layout)", by="nodes"),
    Carried("nodeStatusExporter.enabled", "components.nodeStatusExporter", by="operands"),
    Carried("daemonsets.priorityClassName", "daemonsets.priorityClassName", by="operands"),
    Carried("daemonsets.tolerations", "daemonsets.tolerations", by="operands"),
    Carried("daemonsets.updateStrategy", "daemonsets.updateStrategy", by="operands"),
    Carried("daemonsets.rollingUpdate.maxUnavailable", "daemonsets.maxUnavailable", by="operands"),
    Carried("daemonsets.labels", "daemonsets.labels", by="operands"),
    Carried("daemonsets.annotations", "daemonsets.annotations", by="operands"),
    Carried("sandboxWorkloads.enabled", "nodePools[].workloadType", by="nodes"),
    Carried("sandboxWorkloads.mode", "sandboxWorkloads.mode", by="operands"),
    Carried("sandboxWorkloads.defaultWorkload", "sandboxWorkloads.defaultWorkload", by="operands"),
    Carried("ccManager.enabled", "sandboxWorkloads.ccManager.enabled", by="operands"),
    Carried("ccManager.defaultMode", "sandboxWorkloads.ccManager.defaultMode", by="operands"),
    Carried("vgpuManager.repository", "vgpu.managerImage", by="operands"),
    Carried("vgpuManager.image", "vgpu.managerImage", by="operands"),
    Carried("vgpuManager.version", "vgpu.managerImage", by="operands"),
    Carried("vgpuDeviceManager.config.default", "vgpu.defaultConfig", by="operands"),
    Carried("vgpuDeviceManager.config.name", "vgpu.configs (with --configmap)", by="configmaps"),
    Carried("gds.enabled", "gpudirect.gds", by="operands"),
    Carried("gdrcopy.enabled", "gpudirect.gdrcopy", by="operands"),
)

# Fields every operand section has, carried onto operands.<operand>.<field>.
OPERAND_FIELDS = ("env", "args", "resources", "imagePullPolicy")


def carried() -> Iterator[Carried]:
    """Every ClusterPolicy path the import carries, with its key: the table the tests and the docs read."""
    yield from DIRECT
    yield from ENV_KEYS
    yield from BY_CODE
    by_code = {row.path for row in BY_CODE}
    for section, operand in OPERAND_OF.items():
        if section == "vgpuManager":
            continue  # vgpu.managerImage (BY_CODE); its other fields below
        for key in ("repository", "image", "version"):
            if f"{section}.{key}" not in by_code:
                yield Carried(f"{section}.{key}", f"versions.* / registry.override / operands.{operand}.{key}", by="images")
        yield Carried(f"{section}.imagePullSecrets", f"registry.pullSecrets / operands.{operand}.imagePullSecrets", by="images")
    for section, operand in OPERAND_OF.items():
        for field in OPERAND_FIELDS:
            yield Carried(f"{section}.{field}", f"operands.{operand}.{field}",
                          DEFAULT_PULL_POLICY if field == "imagePullPolicy" else None, by="mapping")


def table_key(path: str) -> Optional[str]:
    """The key the mapping table carries the ClusterPolicy field `path` (`spec.` included) onto, from the most
    specific row covering it; None when no row does."""
    rows = _table()
    field = path[len("spec."):] if path.startswith("spec.") else path
    best = max((p for p in rows if under(field, p)), key=len, default=None)
    return rows[best] if best is not None else None


@functools.lru_cache(maxsize=None)
def _table() -> dict[str, str]:
    rows: dict[str, str] = {}
    for row in carried():
        rows.setdefault(row.path, row.key)
    return rows


class MappingMixin:
    """Mixed into build._Importer: the plain copies of the table and the per-operand fields."""

    def _direct(self) -> None:
        s = self.spec
        # Settings that only act with another one on (the exporter's TransformDCGMExporter reads them that way).
        if not s.raw("dcgmExporter.enablePodLabels"):
            s.without_effect("dcgmExporter.podLabelAllowlistRegex", "enablePodLabels is false: no pod labels to filter")
        if not s.raw("dcgmExporter.hpcJobMapping.enabled"):
            s.without_effect("dcgmExporter.hpcJobMapping.directory", "hpcJobMapping.enabled is false: no job files are read")
        for row in DIRECT:
            if s.moot_of("spec." + row.path) is not None:
                continue
            value = s.raw(row.path)
            s.use(row.path)
            if value is None or value == "" or (value == row.default and type(value) is type(row.default)):
                continue
            if row.path == "hostPaths.driverInstallDir" and self.driver_mode != "host":
                self.report(f"spec.{row.path}", value, "the driver gpu-stack deploys keeps its files under /run/nvidia/driver; "
                                                       "hostPaths.driverInstallDir moves a host-installed driver (driver.mode host) only")
                continue
            self.put(row.key, value, origin=f"spec.{row.path}")
        self._licensing()
        for path, key, field in DRIVER_CONFIGMAPS:
            self._driver_configmap(path, key, field)
        self._probe_timings("readinessProbe", PROBE_FIELDS)

    def _driver_configmap(self, path: str, key: str, field: str) -> None:
        """A ConfigMap the driver mounts key by key: gpu-stack renders offline, so its keys come from --configmap."""
        s = self.spec
        if s.moot_of(f"spec.{path}") is not None:
            return
        name = s.raw(path)
        s.use(path)
        if not name:
            return
        data = self.configmaps.get(str(name))
        if data is None:
            self.report(f"spec.{path}", name, f"gpu-stack mounts the ConfigMap's keys one by one and renders offline: pass "
                                              f"it with --configmap to carry it as {key} (its keys become `files`)")
            return
        self.used_configmaps.add(str(name))
        self.put(key, {field: str(name), "files": sorted(data)}, origin=f"spec.{path}")

    def _probe_timings(self, name: str, fields: tuple[str, ...]) -> None:
        s = self.spec
        probe = s.raw(f"driver.{name}")
        if s.moot_of(f"spec.driver.{name}") is not None or not isinstance(probe, dict):
            return
        present = [k for k in fields if probe.get(k) is not None]
        s.use(*(f"driver.{name}.{k}" for k in present))
        carried_probe = {k: probe[k] for k in present}
        if carried_probe:
            self.put(f"driver.{name}", carried_probe, origin=f"spec.driver.{name}")

    def _licensing(self) -> None:
        s = self.spec
        if s.moot_of("spec.driver.licensingConfig") is not None:
            return
        licensing = s.raw("driver.licensingConfig") or {}
        if not (licensing.get("secretName") or licensing.get("configMapName")):
            s.without_effect("driver.licensingConfig.nlsEnabled", "no licensing Secret or ConfigMap is mounted, so the driver reads no NLS setting")
            return
        # The operator's nil is false (NLS off); gpu-stack's default is true, so the import always says it.
        s.use("driver.licensingConfig.nlsEnabled")
        self.put("driver.licensingConfig.nlsEnabled", bool(licensing.get("nlsEnabled", False)),
                 origin="spec.driver.licensingConfig.nlsEnabled")

    def _operand_fields(self) -> None:
        """env, args, resources and imagePullPolicy of each rendered operand section onto operands.<operand>."""
        s = self.spec
        on = self._rendered()
        for section, operand in OPERAND_OF.items():
            if not on[section]:
                for field in OPERAND_FIELDS:
                    s.without_effect(f"{section}.{field}", "no node of the imported pools runs this operand")
                continue
            self._operand_env(section, operand)
            for field in ("args", "resources"):
                value = s.raw(f"{section}.{field}")
                s.use(f"{section}.{field}")
                if value:
                    self.put(f"operands.{operand}.{field}", value, origin=f"spec.{section}.{field}")
            policy = s.raw(f"{section}.imagePullPolicy")
            s.use(f"{section}.imagePullPolicy")
            if policy not in (None, "", DEFAULT_PULL_POLICY):
                self.put(f"operands.{operand}.imagePullPolicy", policy, origin=f"spec.{section}.imagePullPolicy")

    def _operand_env(self, section: str, operand: str) -> None:
        s = self.spec
        env = s.env(f"{section}.env")
        owned = owned_env(operand, openshift=self.facts.openshift_version is not None)
        carried_env = []
        for name, value in env.items():
            where = f"spec.{section}.env[{name}]"
            if s.is_used(where):
                continue  # consumed onto a key of its own (toolkit runtime paths, WITH_REBOOT, drain settings)
            if section == "dcgmExporter" and name in EXPORTER_ENV:
                s.use_env(f"{section}.env", name)
                self._exporter_env(EXPORTER_ENV[name], str(value))
                continue
            if _same_as_gpu_stack(where, value):
                s.use_env(f"{section}.env", name)
                continue
            if name in owned:
                s.use_env(f"{section}.env", name)
                self.report(where, value, f"gpu-stack sets {name} for this operand from {owned[name]}; set that instead")
                continue
            s.use_env(f"{section}.env", name)
            if looks_like_credential(name, value):
                # A stack file is kept in git and operands.<operand>.env renders literal values: a credential
                # belongs in a Secret the operand reads (driver.secretEnv for the driver).
                self.report(where, value, "looks like a credential, so it is not copied into the stack file; keep it in "
                                          "a Kubernetes Secret (the driver reads one with driver.secretEnv)")
                continue
            carried_env.append({"name": name, "value": str(value)})
        if carried_env:
            self.put(f"operands.{operand}.env", carried_env, origin=f"spec.{section}.env")

    def _exporter_env(self, row: Carried, value: str) -> None:
        where = f"spec.{row.path}"
        if row.key == "dcgmExporter.collectorsFile":
            if self.spec.raw("dcgmExporter.config.name"):
                # With a metrics ConfigMap the operator points DCGM_EXPORTER_COLLECTORS at it: carried as extraMetrics.
                self.report(where, value, "dcgmExporter.config.name names a metrics ConfigMap, which the import carries "
                                          "as extraMetrics; gpu-stack takes one of the two")
                return
            # gpu-stack's alerts and dashboard read metrics its own CSV guarantees; the operator had neither.
            self.put("monitoring.alerts.enabled", False, origin=where)
            self.put("monitoring.dashboard.enabled", False, origin=where)
            self.notes.append("monitoring.alerts and monitoring.dashboard off: the exporter reads the collectors file "
                              f"{value} from its image, which may lack the metrics they read (the operator had neither)")
        if row.key == "dcgmExporter.remoteHostengine" and self.spec.get("dcgm.enabled"):
            if value != DCGM_HOSTENGINE:
                self.report(where, value, f"components.dcgm points the exporter at the nvidia-dcgm host engine "
                                          f"({DCGM_HOSTENGINE}), as the operator did with dcgm.enabled; gpu-stack takes that")
            return
        self.put(row.key, value, origin=where)


def table_rows() -> list[tuple[str, str]]:
    """(ClusterPolicy path, gpu-stack key) for docs/migration.md, operand fields folded into one row each."""
    rows: dict[str, str] = {}
    for row in carried():
        section, _, field = row.path.rpartition(".")
        if row not in BY_CODE and row.by in ("images", "mapping") and section in OPERAND_OF and field in (*OPERAND_FIELDS, "repository", "image", "version", "imagePullSecrets"):
            rows.setdefault(f"<operand>.{field}", row.key.replace(OPERAND_OF[section], "<operand>"))
            continue
        rows.setdefault(row.path, row.key)
    return sorted(rows.items())

