"""`python -m gpustack import`: a running GPU Operator's ClusterPolicy as a gpu-stack stack file.

Inputs are what kubectl and helm print: the ClusterPolicy (`kubectl get clusterpolicy -o yaml`, one object or a
List), optionally the operator's Helm values (`helm get values --all`), the nodes (`kubectl get nodes -o yaml`)
and ConfigMaps the ClusterPolicy names (`kubectl get cm -n gpu-operator NAME -o yaml`). A field the ClusterPolicy
lacks takes the Helm value when values are given and the CRD default otherwise: the two differ (fact sheet §11,
e.g. `dcgm.enabled`, `mig.strategy`, `driver.upgradePolicy.autoUpgrade`).

Every field of the effective spec ends up in exactly one place: mapped onto a gpu-stack key, equal to what
gpu-stack renders anyway, without effect in the operator (settings of a component it does not deploy, deprecated
no-ops), or in the not-carried report with the reason. `import_cluster_policy` is pure; `run` does the files.
"""

from __future__ import annotations

import argparse
import copy
import fnmatch
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Sequence

import yaml

from components.catalogs import catalog
from components.catalogs import consts
from components.catalogs import dcgm_metrics
from components.catalogs import mig_catalog
from components.kit import naming
from components.states.driver import sanitize_kernel
from components.config import (
    NAMESPACE,
    OS_TAG,
    ConfigError,
    StackConfig,
    load_config,
    node_images,
    stack_file_config,
)
from node_images import catalog as node_image_catalog

EXIT_OK, EXIT_BAD_INPUT = 0, 2
PROJECT_DIR = Path(__file__).resolve().parent.parent
STACK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ARCH_LABEL = "kubernetes.io/arch"
GPU_PRODUCT = "nvidia.com/gpu.product"
GPU_MEMORY = "nvidia.com/gpu.memory"
NFD_OS_VERSION_MAJOR = "feature.node.kubernetes.io/system-os_release.VERSION_ID.major"
# Labels the gpu-stack node agent writes; a pool selecting on one would never settle (node-agent labels.py).
AGENT_WRITTEN = (consts.POOL_LABEL, consts.GPU_PRESENT, consts.WORKLOAD_CONFIG, consts.DEVICE_PLUGIN_CONFIG,
                 consts.MIG_CONFIG, consts.VGPU_CONFIG)
# The chart stamps these on every operand to mark it as its own (gpu-operator.operand-labels helper).
HELM_OPERAND_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by")
DRIVER_MANAGER_ENV_DEFAULTS = {  # the state-driver asset's values (fact sheet §2.3)
    "ENABLE_GPU_POD_EVICTION": "true",
    "ENABLE_AUTO_DRAIN": "false",
    "DRAIN_USE_FORCE": "false",
    "DRAIN_POD_SELECTOR_LABEL": "",
    "DRAIN_TIMEOUT_SECONDS": "0s",
    "DRAIN_DELETE_EMPTYDIR_DATA": "false",
}

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

# Values equal to what gpu-stack renders anyway: such fields are carried without a key.
SAME_AS_GPU_STACK: tuple[tuple[str, Any], ...] = (
    ("spec.*.imagePullPolicy", "IfNotPresent"),
    ("spec.*.hostNetwork", False),
    ("spec.hostPaths.rootFS", "/"),
    ("spec.hostPaths.driverInstallDir", "/run/nvidia/driver"),
    ("spec.hostPaths.kubeletRootDir", "/var/lib/kubelet"),
    ("spec.operator.runtimeClass", "nvidia"),
    ("spec.operator.use_ocp_driver_toolkit", False),
    ("spec.devicePlugin.mps.root", "/run/nvidia/mps"),
    ("spec.cdi.nriPluginEnabled", False),
    ("spec.dcgmExporter.hostPID", False),
    ("spec.dcgmExporter.enablePodLabels", False),
    ("spec.dcgmExporter.enablePodUID", False),
    ("spec.dcgmExporter.hpcJobMapping.enabled", False),
    ("spec.dcgmExporter.serviceMonitor.honorLabels", False),
    ("spec.dcgmExporter.service.type", "ClusterIP"),
    ("spec.toolkit.env[CONTAINERD_RUNTIME_CLASS]", "nvidia"),
    ("spec.driver.licensingConfig.nlsEnabled", True),
    ("spec.driver.licensingConfig.nlsEnabled", False),
)
# Deprecated no-ops in the operator, or components it never deploys: nothing to carry.
NO_EFFECT = ("spec.cdi.default", "spec.psp", "spec.operator.defaultRuntime", "spec.operator.initContainer",
             "spec.driver.useOpenKernelModules", "spec.kataManager", "spec.dcgm.hostPort")

REASONS: tuple[tuple[str, str], ...] = (
    ("spec.hostPaths.*", "gpu-stack mounts the operator's default host paths (/, /run/nvidia/driver, /var/lib/kubelet) and has no key for another"),
    ("spec.operator.use_ocp_driver_toolkit", "OpenShift's Driver Toolkit: gpu-stack does not target OpenShift"),
    ("spec.operator.runtimeClass", "gpu-stack names the runtime class `nvidia` (components/states/prerequisites.py) and has no key to rename it"),
    ("spec.operator.*", "gpu-stack runs no operator controller, so there is no operator Deployment or metrics endpoint to configure"),
    ("spec.driver.licensingConfig*", "vGPU guest licensing: gpu-stack mounts no licensing Secret or ConfigMap into the driver container"),
    ("spec.driver.repoConfig*", "gpu-stack mounts no package-repository ConfigMap into the driver container"),
    ("spec.driver.certConfig*", "gpu-stack mounts no certificate ConfigMap into the driver container"),
    ("spec.driver.kernelModuleConfig*", "gpu-stack mounts no kernel-module parameter ConfigMap into the driver container"),
    ("spec.vgpuManager.kernelModuleConfig*", "gpu-stack mounts no kernel-module parameter ConfigMap into the vGPU manager"),
    ("spec.driver.virtualTopology*", "gpu-stack has no key for the vGPU topology daemon config"),
    ("spec.driver.secretEnv", "gpu-stack injects no Secret as environment into the driver container"),
    ("spec.driver.*Probe*", "gpu-stack renders its own driver probes: startup 60/10/60/120 (5 s initial delay when precompiled), readiness on the node's validation files"),
    ("spec.*.resources*", "gpu-stack has no key for operand resources; it renders the resources of NVIDIA's asset"),
    ("spec.*.args", "gpu-stack has no key for extra container arguments"),
    ("spec.*.imagePullPolicy", "gpu-stack renders imagePullPolicy IfNotPresent for every operand and has no key to change it"),
    ("spec.*.hostNetwork", "gpu-stack has no hostNetwork switch for this operand"),
    ("spec.daemonsets.podSecurityContext*", "gpu-stack has no key for a pod security context; each operand keeps its asset's"),
    ("spec.daemonsets.labels.*", "set by the operator's Helm chart to mark the operands it manages; gpu-stack's objects are not the chart's"),
    ("spec.daemonsets.tolerations*", "gpu-stack tolerations take key, operator, value and effect only"),
    ("spec.dcgmExporter.serviceMonitor.*", "gpu-stack's ServiceMonitor settings are interval, scrapeTimeout and additionalLabels only"),
    ("spec.dcgmExporter.service.type", "gpu-stack renders the DCGM exporter Service as ClusterIP"),
    ("spec.dcgmExporter.*", "gpu-stack's DCGM exporter has no key for this (it exports no pod labels/UIDs, no HPC job mapping, runs without hostPID)"),
    ("spec.migManager.gpuClientsConfig*", "gpu-stack mounts NVIDIA's default-gpu-clients ConfigMap and has no key for another"),
    ("spec.vgpuDeviceManager.config.name", "a custom vGPU devices ConfigMap is not read; gpu-stack renders default-vgpu-devices-config"),
    ("spec.cdi.nriPluginEnabled", "gpu-stack has no NRI plugin mode (fact sheet §8.2): CDI goes through the runtime's config"),
    ("spec.*.env[*]", "gpu-stack does not expose this variable for this operand"),
)

SECTION_ORDER = ("cluster", "registry", "versions", "driver", "upgrade", "toolkit", "devicePlugin", "validator",
                 "validation", "nfd", "nodeAgent", "daemonsets", "dcgmExporter", "migManager", "monitoring",
                 "components", "sandboxWorkloads", "vgpu", "gpudirect", "migLayouts", "nodePools")


class ImportInputError(Exception):
    """Input gpu-stack cannot import; the message names the file or field."""


@dataclass(frozen=True)
class NotCarried:
    """One field of the operator's configuration the stack file does not hold, and why.

    `path` is the ClusterPolicy path (`spec.driver.licensingConfig.secretName`, env entries as `env[NAME]`), a
    Helm values key (`helm:nfd.nodefeaturerules`), a ConfigMap key (`configmap:NAME/KEY`) or a node label
    (`node:NAME/LABEL`)."""

    path: str
    value: Any
    reason: str

    def render(self) -> str:
        return f"{self.path} = {_show(self.value)}: {self.reason}"


def _show(value: Any) -> str:
    """A value as YAML writes it inline: what a reader of the stack file and of the ClusterPolicy sees."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text[:-3].strip() if text.endswith("...") else text


@dataclass(frozen=True)
class ClusterFacts:
    """What a ClusterPolicy does not say about its cluster."""

    context: str
    node_agent_image: str
    cluster_name: Optional[str] = None
    kubernetes_versions: tuple[str, ...] = ()
    namespace: Optional[str] = None
    container_runtime: Optional[str] = None
    # (label selector, model); a None selector names the model of GPU nodes whose labels do not say it.
    gpu_models: tuple[tuple[Optional[tuple[str, str]], str], ...] = ()
    os: Optional[str] = None
    pool_labels: tuple[str, ...] = ()


@dataclass
class ImportResult:
    config: dict[str, Any]
    not_carried: list[NotCarried]
    notes: list[str]
    # gpu-stack key -> the input it came from, to name the source when load_config refuses a value.
    origins: dict[str, str]
    source: str = "cluster-policy"

    def document(self) -> dict[str, Any]:
        return {"config": self.config}


# --- reading ---------------------------------------------------------------------------------------------------


def read_yaml(path: str, what: str) -> Any:
    file = Path(path)
    if not file.is_file():
        raise ImportInputError(f"{what} file {path} does not exist")
    try:
        documents = [d for d in yaml.safe_load_all(file.read_text()) if d is not None]
    except yaml.YAMLError as exc:
        raise ImportInputError(f"{path}: not valid YAML: {exc}") from None
    if len(documents) != 1:
        raise ImportInputError(f"{path}: expected one YAML document, found {len(documents)}")
    return documents[0]


def objects_of(document: Any, kinds: Sequence[str], path: str) -> list[dict]:
    """The objects of a `kubectl get -o yaml` document: one object, or the items of a List."""
    if not isinstance(document, dict):
        raise ImportInputError(f"{path}: expected a Kubernetes object or a List, got {type(document).__name__}")
    kind = document.get("kind")
    if kind == "List" or (isinstance(kind, str) and kind.endswith("List") and "items" in document):
        items = document.get("items") or []
        if not isinstance(items, list):
            raise ImportInputError(f"{path}: `items` must be a list")
        found = []
        for i, item in enumerate(items):
            item_kind = item.get("kind") if isinstance(item, dict) else None
            if item_kind not in kinds:
                raise ImportInputError(f"{path}: items[{i}] is kind {item_kind!r}; expected {' or '.join(kinds)}")
            found.append(item)
        return found
    if kind not in kinds:
        raise ImportInputError(f"{path}: kind {kind!r} is not {' or '.join(kinds)} (nor a List of them)")
    return [document]


def cluster_policy_of(document: Any, path: str) -> dict:
    policies = objects_of(document, ("ClusterPolicy",), path)
    for policy in policies:
        api = policy.get("apiVersion")
        if api != "nvidia.com/v1":
            raise ImportInputError(f"{path}: ClusterPolicy apiVersion {api!r} is not nvidia.com/v1")
    # The operator reconciles one ClusterPolicy and marks any other `ignored` (fact sheet §11, status).
    active = [p for p in policies if (p.get("status") or {}).get("state") != "ignored"]
    if len(active) != 1:
        names = ", ".join(str((p.get("metadata") or {}).get("name")) for p in active) or "none"
        raise ImportInputError(f"{path}: expected one ClusterPolicy the operator reconciles, found {len(active)} ({names})")
    policy = active[0]
    if not isinstance(policy.get("spec"), dict):
        raise ImportInputError(f"{path}: the ClusterPolicy has no `spec` mapping")
    return policy


# --- the effective spec ----------------------------------------------------------------------------------------

# Helm values that configure the chart itself or the operator Deployment, not the ClusterPolicy.
HELM_ONLY = ("platform", "nfd", "clusterPolicy", "gpuCluster", "draDriver", "extraObjects", "node-feature-discovery",
             "nameOverride", "fullnameOverride")


def helm_values_as_spec(values: Mapping[str, Any]) -> dict[str, Any]:
    """Helm values in ClusterPolicy shape, as the chart's clusterpolicy template maps them."""
    spec: dict[str, Any] = {}
    for key, value in values.items():
        if key in HELM_ONLY or key == "operator":
            continue
        spec[key] = copy.deepcopy(value)
    operator = values.get("operator") or {}
    spec["operator"] = {k: copy.deepcopy(operator[k]) for k in ("runtimeClass", "use_ocp_driver_toolkit", "metrics") if k in operator}
    driver = spec.get("driver")
    if isinstance(driver, dict):
        crd = driver.pop("nvidiaDriverCRD", None)
        if isinstance(crd, dict) and "enabled" in crd:
            driver["useNvidiaDriverCRD"] = crd["enabled"]
        policy = driver.get("upgradePolicy")
        if isinstance(policy, dict) and "gpuPodDeletion" in policy:
            policy["podDeletion"] = policy.pop("gpuPodDeletion")
    for section in ("devicePlugin", "migManager", "dcgmExporter", "vgpuDeviceManager"):
        config = (spec.get(section) or {}).get("config")
        if isinstance(config, dict):
            config.pop("create", None)
            config.pop("data", None)
            if section in ("devicePlugin", "dcgmExporter") and not config.get("name"):
                # The template renders these blocks only with a ConfigMap name.
                spec[section].pop("config")
    return spec


def deep_merge(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        merged = dict(base)
        for key, value in over.items():
            merged[key] = deep_merge(base.get(key), value) if key in base else copy.deepcopy(value)
        return merged
    return copy.deepcopy(over)


class _Spec:
    """The effective spec, remembering which fields a mapping read (or declared without effect)."""

    def __init__(self, data: dict[str, Any]):
        self.data = data
        self.used: set[str] = set()

    def raw(self, path: str) -> Any:
        node: Any = self.data
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node

    def get(self, path: str, default: Any = None) -> Any:
        self.used.add("spec." + path)
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
            raise ImportInputError(f"spec.{path}: expected a list of {{name, value}}, got {entries!r}")
        found: dict[str, Any] = {}
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise ImportInputError(f"spec.{path}[{i}]: expected {{name, value}}, got {entry!r}")
            found[entry["name"]] = entry.get("value", "")
        return found

    def use_env(self, path: str, name: str) -> None:
        self.used.add(f"spec.{path}[{name}]")

    def is_used(self, path: str) -> bool:
        return any(path == u or path.startswith(u + ".") or path.startswith(u + "[") for u in self.used)


def _leaves(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _leaves(inner, f"{path}.{key}")
    elif isinstance(value, list) and path.endswith(".env"):
        for entry in value:
            if isinstance(entry, dict):
                yield f"{path}[{entry.get('name')}]", entry.get("value", entry.get("valueFrom", ""))
    else:
        yield path, value


def _empty(value: Any) -> bool:
    return value is None or value == "" or value == [] or value == {}


def _matches(path: str, pattern: str) -> bool:
    # `[` starts a character class in fnmatch; in these patterns it is the env entry's bracket.
    return fnmatch.fnmatchcase(path, pattern.replace("[", "[[]"))


def _same_as_gpu_stack(path: str, value: Any) -> bool:
    return any(_matches(path, pattern) and value == same and type(value) is type(same) for pattern, same in SAME_AS_GPU_STACK)


def _reason(path: str) -> str:
    for pattern, reason in REASONS:
        if _matches(path, pattern):
            return reason
    return "gpu-stack has no key for this field"


def _validate_spec(spec: _Spec) -> None:
    for path, allowed in ENUMS.items():
        value = spec.raw(path)
        # An empty MIG strategy is how the chart renders "leave it to the device plugin".
        if value is None or (value == "" and path == "mig.strategy"):
            continue
        if value not in allowed:
            shown = ", ".join(repr(a) if a == "" else a for a in allowed)
            raise ImportInputError(f"spec.{path}: got {value!r}; allowed values: {shown}")
    for path in BOOLEANS:
        value = spec.raw(path)
        if value is not None and not isinstance(value, bool):
            raise ImportInputError(f"spec.{path}: got {value!r}; allowed values: true, false")
    for section, value in spec.data.items():
        if not isinstance(value, dict):
            raise ImportInputError(f"spec.{section}: expected a mapping, got {value!r}")


# --- images ----------------------------------------------------------------------------------------------------

# ClusterPolicy section -> (catalog.IMAGES component, versions key gpu-stack pins it under).
IMAGE_SECTIONS: tuple[tuple[str, str, Optional[str]], ...] = (
    ("driver", "driver", None),
    ("driver.manager", "driverManager", "driverManager"),
    ("toolkit", "toolkit", "toolkit"),
    ("devicePlugin", "devicePlugin", "devicePlugin"),
    ("gfd", "gfd", "gfd"),
    ("validator", "validator", "validator"),
    ("nodeStatusExporter", "validator", None),
    ("dcgm", "dcgm", "dcgm"),
    ("dcgmExporter", "dcgmExporter", "dcgmExporter"),
    ("migManager", "migManager", "migManager"),
    ("sandboxDevicePlugin", "sandboxDevicePlugin", "sandboxDevicePlugin"),
    ("kataSandboxDevicePlugin", "kataDevicePlugin", "kataDevicePlugin"),
    ("ccManager", "ccManager", "ccManager"),
    ("vgpuDeviceManager", "vgpuDeviceManager", "vgpuDeviceManager"),
    ("vfioManager", "driverManager", None),
    ("vfioManager.driverManager", "driverManager", None),
    ("vgpuManager.driverManager", "driverManager", None),
    ("gds", "gds", "gds"),
    ("gdrcopy", "gdrcopy", "gdrcopy"),
)
# The env var the operator falls back to when a section names no image at all (fact sheet §1.4).
FALLBACK_ENV = {"driver": "DRIVER_IMAGE", "driver.manager": "DRIVER_MANAGER_IMAGE", "toolkit": "CONTAINER_TOOLKIT_IMAGE",
                "devicePlugin": "DEVICE_PLUGIN_IMAGE", "gfd": "GFD_IMAGE", "validator": "VALIDATOR_IMAGE",
                "nodeStatusExporter": "VALIDATOR_IMAGE", "dcgm": "DCGM_IMAGE", "dcgmExporter": "DCGM_EXPORTER_IMAGE",
                "migManager": "MIG_MANAGER_IMAGE", "sandboxDevicePlugin": "SANDBOX_DEVICE_PLUGIN_IMAGE",
                "kataSandboxDevicePlugin": "KATA_SANDBOX_DEVICE_PLUGIN_IMAGE", "ccManager": "CC_MANAGER_IMAGE",
                "vgpuDeviceManager": "VGPU_DEVICE_MANAGER_IMAGE", "vfioManager": "VFIO_MANAGER_IMAGE",
                "vfioManager.driverManager": "DRIVER_MANAGER_IMAGE", "vgpuManager.driverManager": "DRIVER_MANAGER_IMAGE",
                "gds": "GDS_IMAGE", "gdrcopy": "GDRCOPY_IMAGE"}


@dataclass(frozen=True)
class _Image:
    section: str
    name: str  # registry/path, without tag
    version: str
    field: str  # the spec field that carries the name, for the report


def _image_of(spec: _Spec, section: str) -> Optional[_Image]:
    repository = spec.get(f"{section}.repository") or ""
    image = spec.get(f"{section}.image") or ""
    version = spec.get(f"{section}.version")
    version = "" if version is None else str(version)
    if repository:
        return _Image(section, f"{repository.rstrip('/')}/{image}", version, f"spec.{section}.repository")
    if image and not version:
        # The operator uses `image` verbatim when repository and version are empty.
        if "@" in image:
            name, _, digest = image.partition("@")
            return _Image(section, name, digest, f"spec.{section}.image")
        name, sep, tag = image.rpartition(":")
        if sep and "/" not in tag:
            return _Image(section, name, tag, f"spec.{section}.image")
        return _Image(section, image, "", f"spec.{section}.image")
    if image or version:
        return _Image(section, image, version, f"spec.{section}.image")
    return None


# --- node pools ------------------------------------------------------------------------------------------------


def model_from_product(product: str, memory_mib: Optional[str] = None) -> Optional[str]:
    """The catalog model of a GFD `nvidia.com/gpu.product` value, e.g. NVIDIA-A100-SXM4-80GB -> A100-80GB."""
    base = re.sub(r"-(SHARED|MIG-.*)$", "", product, flags=re.IGNORECASE)
    tokens = {t.upper() for t in re.split(r"[-_ ]+", base)}
    gib = None
    for token in tokens:
        if re.fullmatch(r"\d+GB", token):
            gib = int(token[:-2])
    if gib is None and memory_mib and memory_mib.isdigit():
        gib = round(int(memory_mib) / 1024)
    for name in ("GB300", "GB200", "B300", "B200", "GH200", "H200", "L40S", "L4", "A30", "A10", "T4", "V100"):
        if name in tokens:
            return name
    if "H100" in tokens:
        if "NVL" in tokens:
            return "H100-NVL"
        return "H100-96GB" if gib is not None and gib >= 90 else "H100-80GB"
    if "A100" in tokens and gib is not None:
        return "A100-80GB" if gib >= 60 else "A100-40GB"
    if {"RTX", "PRO", "6000"} <= tokens:
        return "RTX-PRO-6000"
    return None


def os_of(labels: Mapping[str, str]) -> Optional[str]:
    os_id = labels.get(consts.NFD_OS_ID)
    version = labels.get(consts.NFD_OS_VERSION_ID)
    if not os_id or not version:
        return None
    if os_id in node_image_catalog.MAJOR_ONLY_OS:
        version = labels.get(NFD_OS_VERSION_MAJOR) or version.split(".")[0]
    return f"{os_id}{version}"


@dataclass(frozen=True)
class _Node:
    name: str
    labels: dict[str, str]
    runtime: Optional[str]
    kubelet: Optional[str]

    @property
    def is_gpu(self) -> bool:
        return self.labels.get(consts.GPU_PRESENT) == "true" or any(self.labels.get(l) == "true" for l in consts.NFD_GPU_LABELS)


def nodes_of(document: Any, path: str) -> list[_Node]:
    nodes = []
    for obj in objects_of(document, ("Node",), path):
        meta = obj.get("metadata") or {}
        info = (obj.get("status") or {}).get("nodeInfo") or {}
        labels = meta.get("labels") or {}
        nodes.append(_Node(str(meta.get("name")), {str(k): str(v) for k, v in labels.items()},
                           info.get("containerRuntimeVersion"), info.get("kubeletVersion")))
    return nodes


def _slug(value: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9]+", "-", value.lower())).strip("-")


@dataclass
class _Group:
    signature: tuple
    selector: dict[str, str]
    nodes: list[_Node] = field(default_factory=list)


def configmaps_of(documents: Sequence[tuple[str, Any]]) -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    for path, document in documents:
        for obj in objects_of(document, ("ConfigMap",), path):
            name = (obj.get("metadata") or {}).get("name")
            data = obj.get("data") or {}
            if not isinstance(data, dict):
                raise ImportInputError(f"{path}: ConfigMap {name} has no `data` mapping")
            found[str(name)] = {str(k): str(v) for k, v in data.items()}
    return found


# --- the import ------------------------------------------------------------------------------------------------


class _Importer:
    def __init__(self, policy: dict, facts: ClusterFacts, helm_values: Optional[dict], nodes: Optional[list[_Node]],
                 configmaps: Mapping[str, Mapping[str, str]]):
        self.policy = policy
        self.facts = facts
        self.helm = helm_values
        self.nodes = nodes
        self.configmaps = dict(configmaps)
        effective = deep_merge(helm_values_as_spec(helm_values), policy["spec"]) if helm_values else copy.deepcopy(policy["spec"])
        self.spec = _Spec(effective)
        _validate_spec(self.spec)
        self.config: dict[str, Any] = {}
        self.not_carried: list[NotCarried] = []
        self.notes: list[str] = []
        self.origins: dict[str, str] = {}
        self.used_configmaps: set[str] = set()
        self.used_plugin_keys: set[str] = set()
        self.used_mig_layouts: set[str] = set()
        self.mig_layouts: dict[str, dict[str, int]] = {}

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
        self._operator_driver_names()
        self.put("nodePools", self.pools, origin="--nodes" if self.nodes is not None else "--gpu-model/--os")
        self._no_effect()
        self._unread_configmaps()
        self._leftovers()
        ordered = {f"{NAMESPACE}:{k}": self.config[f"{NAMESPACE}:{k}"] for k in SECTION_ORDER if f"{NAMESPACE}:{k}" in self.config}
        name = (self.policy.get("metadata") or {}).get("name") or "cluster-policy"
        not_carried = sorted(self.not_carried, key=lambda item: item.path)
        return ImportResult(ordered, not_carried, self.notes, self.origins, source=str(name))

    def _operator_driver_names(self) -> None:
        """Pin each container pool's driver DaemonSet to the name the operator gave it (ClusterPolicy's one
        `nvidia-driver-daemonset`, or one per kernel for precompiled drivers), so that adopting the running cluster
        takes over the driver pods already on the nodes instead of starting a second driver beside each."""
        driver_pools = [p for p in self.pools if p.get("workloadType", "container") == "container"]
        if self.driver_mode == "host" or not driver_pools:
            return
        if self.driver_mode == "managed":
            if len({p.get("os") for p in driver_pools}) > 1:
                self.notes.append("the container pools boot different OS images, which one ClusterPolicy driver DaemonSet "
                                  "cannot serve: each pool gets a driver DaemonSet of its own name")
                return
            names = {p["name"]: naming.DRIVER_DAEMONSET for p in driver_pools}
        else:
            images = {image.name: image for image in node_images()}
            names = {}
            for pool in driver_pools:
                image = images[pool["nodeImage"]]
                names[pool["name"]] = f"{naming.DRIVER_DAEMONSET}-{sanitize_kernel(image.kernel)}-{image.os_tag}"
        for pool in driver_pools:
            pool.setdefault("driver", {})["daemonSetName"] = names[pool["name"]]
            where = f"{NAMESPACE}:nodePools[{self.pools.index(pool)}].driver.daemonSetName"
            self.origins[where] = "the operator's driver DaemonSet name"

    def _driver_mode(self) -> str:
        s = self.spec
        if not s.get("driver.enabled"):
            return "host"
        if s.get("driver.useNvidiaDriverCRD"):
            self.report("spec.driver.useNvidiaDriverCRD", True,
                        "the drivers are NVIDIADriver objects, which this importer does not read: the driver keys below come "
                        "from the ClusterPolicy's driver section, which the operator ignores in this mode; set "
                        "gpu-stack:driver and nodePools[].driver from the NVIDIADriver objects by hand")
        return "precompiled" if s.get("driver.usePrecompiled") else "managed"

    def _cluster(self) -> None:
        facts = self.facts
        status_namespace = (self.policy.get("status") or {}).get("namespace")
        namespace = facts.namespace or status_namespace
        if not namespace:
            namespace = "gpu-operator"
            self.notes.append("the ClusterPolicy status names no namespace and --namespace was not given: using gpu-operator")
        versions = list(facts.kubernetes_versions)
        if not versions and self.nodes is not None:
            minors = sorted({m.group(1) for n in self.nodes if n.kubelet for m in [re.match(r"^v?1\.(\d+)", n.kubelet)] if m}, key=int)
            versions = [f"1.{m}" for m in minors]
        if not versions:
            raise ImportInputError("--kubernetes-version is required without --nodes (the ClusterPolicy does not say it)")
        runtime = facts.container_runtime or self._runtime_from_nodes()
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

    def _runtime_from_nodes(self) -> Optional[str]:
        if self.nodes is None:
            return None
        runtimes = {(n.runtime or "").split(":")[0] for n in self.nodes if n.is_gpu and n.runtime}
        # The operator's getRuntime: containerd wins when any GPU node runs it.
        if "containerd" in runtimes:
            return "containerd"
        if "cri-o" in runtimes:
            return "cri-o"
        if runtimes:
            raise ImportInputError(f"--nodes: GPU nodes run {', '.join(sorted(runtimes))}; gpu-stack supports containerd and cri-o")
        return None

    # -- images and versions

    def _rendered_sections(self) -> list[str]:
        s = self.spec
        container = "container" in self.workloads
        driver_deployed = self.driver_mode != "host" and container
        vm = bool(self.workloads & {"vm-passthrough", "vm-vgpu"})
        mig_capable = any(catalog.GPU_MODELS[p["gpuModel"]].mig_capable for p in self.pools if p.get("workloadType", "container") == "container")
        on = {
            "driver": driver_deployed,
            "driver.manager": driver_deployed,
            "toolkit": bool(s.get("toolkit.enabled")) and container,
            "devicePlugin": bool(s.get("devicePlugin.enabled")) and container,
            "gfd": bool(s.get("gfd.enabled")) and container,
            "validator": True,
            "nodeStatusExporter": bool(s.get("nodeStatusExporter.enabled")),
            "dcgm": bool(s.get("dcgm.enabled")) and container,
            "dcgmExporter": bool(s.get("dcgmExporter.enabled")) and container,
            "migManager": bool(s.get("migManager.enabled")) and mig_capable,
            "sandboxDevicePlugin": vm and self.sandbox_mode == "kubevirt",
            "kataSandboxDevicePlugin": vm and self.sandbox_mode == "kata",
            "ccManager": vm and self.sandbox_mode == "kata" and bool(s.get("ccManager.enabled")),
            "vgpuDeviceManager": "vm-vgpu" in self.workloads,
            "vfioManager": "vm-passthrough" in self.workloads,
            "vfioManager.driverManager": "vm-passthrough" in self.workloads,
            "vgpuManager.driverManager": "vm-vgpu" in self.workloads,
            "gds": bool(s.get("gds.enabled")) and driver_deployed,
            "gdrcopy": bool(s.get("gdrcopy.enabled")) and driver_deployed,
        }
        return [section for section, _, _ in IMAGE_SECTIONS if on[section]]

    def _images(self) -> None:
        s = self.spec
        rendered = self._rendered_sections()
        components = {section: (component, key) for section, component, key in IMAGE_SECTIONS}
        images: dict[str, _Image] = {}
        votes: dict[str, int] = {}
        registry_of: dict[str, str] = {}
        for section in rendered:
            image = _image_of(s, section)
            component = components[section][0]
            path = catalog.IMAGES[component][0]
            if image is None:
                ours = ("the validator image (versions.validator)" if section == "nodeStatusExporter"
                        else f"{path}:{catalog.IMAGES[component][1]} from the stack's registry")
                self.report(f"spec.{section}", None,
                            f"names no image: the operator takes {FALLBACK_ENV[section]} from its own Deployment, which "
                            f"this importer cannot see; gpu-stack renders {ours}")
                continue
            images[section] = image
            if image.name.endswith("/" + path):
                registry = image.name[: -len(path) - 1]
                registry_of[section] = registry
                votes[registry] = votes.get(registry, 0) + 1
            else:
                self.report(image.field, image.name,
                            f"gpu-stack pulls this image from <registry>/{path}; {image.name} does not end in {path}")
        registry = catalog.DEFAULT_REGISTRY
        if votes:
            registry = max(votes, key=lambda r: (votes[r], r == catalog.DEFAULT_REGISTRY))
        if registry != catalog.DEFAULT_REGISTRY:
            origin = next(images[sec].field for sec in registry_of if registry_of[sec] == registry)
            self.put("registry.override", registry, origin=origin)
        for section, other in registry_of.items():
            if other != registry:
                self.report(images[section].field, images[section].name,
                            f"gpu-stack pulls every image from one registry (registry.override {registry}); this one is on {other}")
        pinned: dict[str, tuple[str, str]] = {}
        for section, image in images.items():
            component, key = components[section]
            if section == "driver":
                self.driver_version = image.version
                continue
            if not image.version:
                self.report(f"spec.{section}.version", None, f"no version: gpu-stack renders {catalog.IMAGES[component][1]}")
                continue
            key = key or {"validator": "validator", "driverManager": "driverManager"}[component]
            if key in pinned:
                first_section, first_version = pinned[key]
                if image.version != first_version:
                    self.report(f"spec.{section}.version", image.version,
                                f"gpu-stack runs one {component} image for every operand that uses it; it takes "
                                f"{first_version} from spec.{first_section}")
                continue
            pinned[key] = (section, image.version)
            # Pinned even when equal to the catalog: a later gpu-stack release must not upgrade the cluster silently.
            self.put(f"versions.{key}", image.version, origin=f"spec.{section}.version")
        secrets: list[str] = []
        for section in rendered:
            for secret in s.get(f"{section}.imagePullSecrets") or []:
                if secret not in secrets:
                    secrets.append(secret)
        for section, _, _ in IMAGE_SECTIONS:
            s.use(f"{section}.imagePullSecrets")
        if secrets:
            self.put("registry.pullSecrets", secrets, origin="spec.*.imagePullSecrets")
            self.notes.append(f"registry.pullSecrets {', '.join(secrets)}: gpu-stack gives every operand the union of the "
                              "components' imagePullSecrets")

    # -- driver

    def _driver(self) -> None:
        s = self.spec
        mode = self.driver_mode
        s.use("driver.enabled", "driver.usePrecompiled")
        if mode == "host":
            self.put("driver.mode", "host", origin="spec.driver.enabled")
        if mode == "host" or "container" not in self.workloads:
            # No driver DaemonSet: the operator did not use the rest of the section either.
            s.use("driver")
            return
        self.put("driver.mode", mode, origin="spec.driver.usePrecompiled" if mode == "precompiled" else "spec.driver.enabled")
        self.put("driver.kernelModuleType", s.get("driver.kernelModuleType"), origin="spec.driver.kernelModuleType")
        version = getattr(self, "driver_version", "")
        if mode == "precompiled":
            if version:
                self.put("driver.branch", version, origin="spec.driver.version")
        elif version:
            self.put("versions.driver", version, origin="spec.driver.version")
        self._driver_probe()

    def _driver_probe(self) -> None:
        s = self.spec
        probe = s.raw("driver.startupProbe")
        if not isinstance(probe, dict):
            return
        gpu_stack = {"initialDelaySeconds": 5 if self.driver_mode == "precompiled" else 60, "periodSeconds": 10,
                     "timeoutSeconds": 60, "failureThreshold": 120, "successThreshold": 1}
        for key, value in probe.items():
            if gpu_stack.get(key) == value:
                s.use(f"driver.startupProbe.{key}")

    def _upgrade(self) -> None:
        s = self.spec
        if self.driver_mode == "host" or "container" not in self.workloads:
            s.use("driver.upgradePolicy", "driver.manager.env")
            return
        policy = s.raw("driver.upgradePolicy")
        auto = isinstance(policy, dict) and bool(s.get("driver.upgradePolicy.autoUpgrade"))
        manager_env = s.env("driver.manager.env")
        if auto and self.sandbox:
            self.report("spec.driver.upgradePolicy.autoUpgrade", True,
                        "the operator turns automatic driver upgrades off while sandboxWorkloads are enabled; imported as "
                        "upgrade.strategy manual (OnDelete), which is what the operator did")
            auto = False
        if not auto:
            # The Helm chart: with autoUpgrade false "all other options are ignored"; the driver manager's env rules.
            s.use("driver.upgradePolicy")
            self.put("upgrade.strategy", "manual", origin="spec.driver.upgradePolicy.autoUpgrade")
            self._manager_env(manager_env, superseded=False)
            return
        self.put("upgrade.strategy", "rolling", origin="spec.driver.upgradePolicy.autoUpgrade")
        parallel = s.get("driver.upgradePolicy.maxParallelUpgrades")
        unavailable = str(s.get("driver.upgradePolicy.maxUnavailable"))
        if parallel == 0:
            value: Any = int_or_percent(unavailable)
        elif unavailable.endswith("%"):
            value = parallel
            if parallel > 1:
                self.report("spec.driver.upgradePolicy.maxUnavailable", unavailable,
                            f"gpu-stack bounds a rolling driver update by one number; it takes maxParallelUpgrades "
                            f"({parallel}), which the operator further capped at {unavailable} of the GPU nodes")
        else:
            value = min(parallel, int(unavailable))
        self.put("upgrade.maxUnavailable", value, origin="spec.driver.upgradePolicy.maxParallelUpgrades")
        self.report("spec.driver.upgradePolicy.autoUpgrade", True,
                    "semantics differ: gpu-stack has no upgrade controller. The driver DaemonSet rolls (RollingUpdate, "
                    f"maxUnavailable {value}) and each new driver pod's k8s-driver-manager evicts GPU pods (and drains, "
                    "if enabled) before it swaps the driver; nodes are not cordoned across the whole upgrade and there "
                    "is no upgrade-failed state to resume from")
        self.report("spec.driver.upgradePolicy.maxParallelUpgrades", parallel,
                    f"semantics differ: imported as upgrade.maxUnavailable {value}, the DaemonSet's bound on driver pods "
                    "being replaced at once; the operator counted nodes in its upgrade state machine, cordoned ones included")
        selector = s.get("driver.upgradePolicy.waitForCompletion.podSelector")
        s.use("driver.upgradePolicy.waitForCompletion.timeoutSeconds")
        if selector:
            self.report("spec.driver.upgradePolicy.waitForCompletion.podSelector", selector,
                        "gpu-stack's driver manager does not wait for jobs to complete before it evicts GPU pods")
        deletion = s.raw("driver.upgradePolicy.podDeletion")
        self.put("upgrade.gpuPodEviction", isinstance(deletion, dict), origin="spec.driver.upgradePolicy.podDeletion")
        drain_on = s.get("driver.upgradePolicy.drain.enable")
        drain = {"enabled": drain_on}
        pairs = (("force", "force"), ("timeoutSeconds", "timeoutSeconds"), ("deleteEmptyDir", "deleteEmptyDirData"))
        for key, ours in pairs:
            drain_value = s.get(f"driver.upgradePolicy.drain.{key}")
            deletion_value = s.get(f"driver.upgradePolicy.podDeletion.{key}") if isinstance(deletion, dict) else None
            if drain_on or deletion_value is None:
                drain[ours] = drain_value
                if deletion_value is not None and deletion_value != drain_value:
                    self.report(f"spec.driver.upgradePolicy.podDeletion.{key}", deletion_value,
                                f"gpu-stack's driver manager evicts GPU pods and drains with one {ours} setting; it "
                                f"takes the drain's ({_show(drain_value)})")
            else:
                # Without a drain these settings only govern the GPU pod eviction, which is what podDeletion set.
                drain[ours] = deletion_value
        selector = s.get("driver.upgradePolicy.drain.podSelector")
        if drain_on and selector:
            drain["podSelector"] = selector
        self.put("upgrade.drain", drain, origin="spec.driver.upgradePolicy.drain")
        self._manager_env(manager_env, superseded=True)

    def _manager_env(self, env: Mapping[str, Any], *, superseded: bool) -> None:
        s = self.spec
        if superseded:
            for name in env:
                if name in DRIVER_MANAGER_ENV_DEFAULTS:
                    s.use_env("driver.manager.env", name)
                    self.report(f"spec.driver.manager.env[{name}]", env[name],
                                "superseded in the operator while autoUpgrade is true (the upgrade controller evicts and "
                                "drains); gpu-stack takes these settings from upgradePolicy")
            return
        values = {**DRIVER_MANAGER_ENV_DEFAULTS, **{k: str(v) for k, v in env.items() if k in DRIVER_MANAGER_ENV_DEFAULTS}}
        for name in env:
            if name in DRIVER_MANAGER_ENV_DEFAULTS:
                s.use_env("driver.manager.env", name)
        origin = "spec.driver.manager.env"
        self.put("upgrade.gpuPodEviction", truthy(values["ENABLE_GPU_POD_EVICTION"]), origin=origin)
        drain: dict[str, Any] = {
            "enabled": truthy(values["ENABLE_AUTO_DRAIN"]),
            "force": truthy(values["DRAIN_USE_FORCE"]),
            "timeoutSeconds": _seconds(values["DRAIN_TIMEOUT_SECONDS"], "spec.driver.manager.env[DRAIN_TIMEOUT_SECONDS]"),
            "deleteEmptyDirData": truthy(values["DRAIN_DELETE_EMPTYDIR_DATA"]),
        }
        if values["DRAIN_POD_SELECTOR_LABEL"]:
            drain["podSelector"] = values["DRAIN_POD_SELECTOR_LABEL"]
        self.put("upgrade.drain", drain, origin=origin)

    # -- toolkit, device plugin, validator

    def _toolkit(self) -> None:
        s = self.spec
        # CDI also decides the device plugin's device-list strategy, toolkit or not.
        self.put("toolkit.cdi", bool(s.get("cdi.enabled")), origin="spec.cdi.enabled")
        if not s.get("toolkit.enabled"):
            s.use("toolkit")
            return
        install_dir = s.get("toolkit.installDir")
        if install_dir != CRD_DEFAULTS["toolkit.installDir"]:
            self.put("toolkit.installDir", install_dir, origin="spec.toolkit.installDir")
        env = s.env("toolkit.env")
        crio = self.runtime == "cri-o"
        names = {
            "runtimeConfig": ("CRIO_CONFIG", "RUNTIME_CONFIG") if crio else ("CONTAINERD_CONFIG", "RUNTIME_CONFIG"),
            "runtimeDropInConfig": ("RUNTIME_DROP_IN_CONFIG",),
            "runtimeSocket": () if crio else ("CONTAINERD_SOCKET", "RUNTIME_SOCKET"),
        }
        for key, candidates in names.items():
            chosen = None
            for name in candidates:
                if name not in env:
                    continue
                s.use_env("toolkit.env", name)
                if chosen is None:
                    chosen = name
                    self.put(f"toolkit.{key}", env[name], origin=f"spec.toolkit.env[{name}]")
                elif env[name] != env[chosen]:
                    self.report(f"spec.toolkit.env[{name}]", env[name], f"contradicts {chosen}; gpu-stack took {chosen} as toolkit.{key}")

    def _device_plugin(self) -> None:
        s = self.spec
        self.put("devicePlugin.migStrategy", self.mig_strategy, origin="spec.mig.strategy")
        if not s.get("devicePlugin.enabled"):
            s.use("devicePlugin")

    def _validator(self) -> None:
        s = self.spec
        env = s.env("validator.plugin.env")
        if "WITH_WORKLOAD" in env:
            s.use_env("validator.plugin.env", "WITH_WORKLOAD")
            self.put("validator.pluginWorkload", truthy(str(env["WITH_WORKLOAD"])),
                     origin="spec.validator.plugin.env[WITH_WORKLOAD]")
        if not s.get("toolkit.enabled"):
            # gpu-stack's validation gate waits for toolkit-ready, which nothing writes without the toolkit.
            self.put("validation.mode", "off", origin="spec.toolkit.enabled")
            self.notes.append("validation.mode off: the toolkit is disabled, so gpu-stack's validation gate could never pass")

    def _nfd(self) -> None:
        if self.helm is None:
            self.notes.append("nfd.mode left at deploy (the chart's nfd.enabled default): the ClusterPolicy does not say "
                              "whether NFD came with the operator; set existing if it is installed separately")
            return
        nfd = self.helm.get("nfd") or {}
        enabled = nfd.get("enabled", True)
        self.put("nfd.mode", "deploy" if enabled else "existing", origin="helm:nfd.enabled")
        if nfd.get("nodefeaturerules") and not self._gpudirect_on():
            self.report("helm:nfd.nodefeaturerules", True,
                        "gpu-stack renders the nvidia-kernel-modules NodeFeatureRule only with GPUDirect on")
        if (self.helm.get("platform") or {}).get("openshift"):
            self.report("helm:platform.openshift", True, "gpu-stack does not target OpenShift")
        if (self.helm.get("gpuCluster") or {}).get("deployCR"):
            self.report("helm:gpuCluster.deployCR", True, "the chart deploys a GPUCluster (DRA) object, which this importer does not read")

    def _daemonsets(self) -> None:
        s = self.spec
        priority = s.get("daemonsets.priorityClassName")
        if priority:
            self.put("daemonsets.priorityClassName", priority, origin="spec.daemonsets.priorityClassName")
        tolerations = s.raw("daemonsets.tolerations")
        if isinstance(tolerations, list):
            s.use("daemonsets.tolerations")
            carried = []
            for i, toleration in enumerate(tolerations):
                if not isinstance(toleration, dict):
                    raise ImportInputError(f"spec.daemonsets.tolerations[{i}]: expected a toleration mapping, got {toleration!r}")
                entry = {k: toleration[k] for k in ("key", "operator", "value", "effect") if toleration.get(k) not in (None, "")}
                for extra in sorted(set(toleration) - {"key", "operator", "value", "effect"}):
                    self.report(f"spec.daemonsets.tolerations[{i}].{extra}", toleration[extra],
                                "gpu-stack tolerations take key, operator, value and effect only")
                carried.append(entry)
            self.put("daemonsets.tolerations", carried, origin="spec.daemonsets.tolerations")
        self.put("daemonsets.updateStrategy", s.get("daemonsets.updateStrategy"), origin="spec.daemonsets.updateStrategy")
        unavailable = s.get("daemonsets.rollingUpdate.maxUnavailable")
        if unavailable not in (None, ""):
            value = int_or_percent(unavailable)
            self.put("daemonsets.maxUnavailable", value, origin="spec.daemonsets.rollingUpdate.maxUnavailable")
        labels = dict(s.raw("daemonsets.labels") or {})
        for key in list(labels):
            if key not in HELM_OPERAND_LABELS:
                s.use(f"daemonsets.labels.{key}")
        carried_labels = {k: str(v) for k, v in labels.items() if k not in HELM_OPERAND_LABELS}
        if carried_labels:
            self.put("daemonsets.labels", carried_labels, origin="spec.daemonsets.labels")
        annotations = s.get("daemonsets.annotations")
        if annotations:
            self.put("daemonsets.annotations", {k: str(v) for k, v in annotations.items()}, origin="spec.daemonsets.annotations")

    def _monitoring(self) -> None:
        s = self.spec
        if not s.get("dcgmExporter.enabled"):
            s.use("dcgmExporter")
            return
        policy = s.get("dcgmExporter.service.internalTrafficPolicy")
        if policy:
            self.put("dcgmExporter.internalTrafficPolicy", policy, origin="spec.dcgmExporter.service.internalTrafficPolicy")
        if s.get("dcgmExporter.serviceMonitor.enabled"):
            self.put("monitoring.prometheusOperator", True, origin="spec.dcgmExporter.serviceMonitor.enabled")
            settings = {}
            for key in ("interval", "scrapeTimeout"):
                value = s.get(f"dcgmExporter.serviceMonitor.{key}")
                if value:
                    settings[key] = str(value)
            labels = s.get("dcgmExporter.serviceMonitor.additionalLabels")
            if labels:
                settings["additionalLabels"] = {k: str(v) for k, v in labels.items()}
            if settings:
                self.put("monitoring.serviceMonitor", settings, origin="spec.dcgmExporter.serviceMonitor")
            self.notes.append("monitoring.prometheusOperator true (dcgmExporter.serviceMonitor.enabled): the operator "
                              "skipped the ServiceMonitor when the CRD was missing, gpu-stack renders it, and adds its "
                              "PrometheusRule alerts; set monitoring.alerts.enabled false to leave them out")
        else:
            s.use("dcgmExporter.serviceMonitor")
        name = s.get("dcgmExporter.config.name")
        if name:
            self._dcgm_metrics(name)

    def _dcgm_metrics(self, name: str) -> None:
        data = self.configmaps.get(name)
        if data is None:
            self.report("spec.dcgmExporter.config.name", name,
                        f"the custom metrics live in ConfigMap {name}, not in the ClusterPolicy; pass it with --configmap "
                        "to carry them as dcgmExporter.extraMetrics")
            return
        self.used_configmaps.add(name)
        csv = data.get("dcgm-metrics.csv")
        where = f"configmap:{name}/dcgm-metrics.csv"
        if csv is None:
            self.report(f"configmap:{name}", sorted(data), "has no dcgm-metrics.csv key, which the exporter reads")
            return
        defaults = {m.field: m for m in dcgm_metrics.DEFAULT_METRICS}
        listed, extra = set(), []
        for number, line in enumerate(csv.splitlines(), start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = [p.strip() for p in line.split(",", 2)]
            if len(parts) != 3:
                self.report(f"{where}:{number}", line, "not a `FIELD, type, help` line")
                continue
            name_, kind, help_ = parts
            listed.add(name_)
            if name_ in defaults:
                if defaults[name_].type != kind:
                    self.report(f"{where}:{number}", line, f"gpu-stack exports {name_} as a {defaults[name_].type}")
                continue
            help_ = help_.replace(",", ";").replace('"', "") or name_
            extra.append({"field": name_, "type": kind, "help": help_})
        if extra:
            self.put("dcgmExporter.extraMetrics", extra, origin=where)
        missing = [f for f in defaults if f not in listed]
        if missing:
            self.report(where, missing, "left out by the custom file, but gpu-stack always exports its default metrics "
                                        "(components/catalogs/dcgm_metrics.py), these included")

    def _components(self) -> None:
        s = self.spec
        for key, path in (("toolkit", "toolkit.enabled"), ("devicePlugin", "devicePlugin.enabled"), ("dcgm", "dcgm.enabled"),
                          ("dcgmExporter", "dcgmExporter.enabled"), ("gfd", "gfd.enabled"), ("migManager", "migManager.enabled"),
                          ("nodeStatusExporter", "nodeStatusExporter.enabled")):
            self.put(f"components.{key}", bool(s.get(path)), origin=f"spec.{path}")
        if not self.spec.get("psa.enabled"):
            self.notes.append("psa.enabled is false, but gpu-stack labels its namespace pod-security privileged regardless")
        s.use("psa.enabled")
        for section in ("dcgm", "gfd", "nodeStatusExporter"):
            if not s.get(f"{section}.enabled"):
                s.use(section)
        if s.get("migManager.enabled"):
            env = s.env("migManager.env")
            if "WITH_REBOOT" in env:
                s.use_env("migManager.env", "WITH_REBOOT")
                self.put("migManager.withReboot", truthy(str(env["WITH_REBOOT"])), origin="spec.migManager.env[WITH_REBOOT]")
            default = s.get("migManager.config.default")
            if default == "":
                self.report("spec.migManager.config.default", "",
                            "gpu-stack labels MIG-capable nodes of pools without a layout nvidia.com/mig.config=all-disabled; "
                            "with an empty default the operator left the label alone")
        else:
            s.use("migManager")

    def _sandbox(self) -> None:
        s = self.spec
        sandbox_sections = ("sandboxWorkloads", "vfioManager", "sandboxDevicePlugin", "kataSandboxDevicePlugin",
                            "vgpuManager", "vgpuDeviceManager", "ccManager")
        if not self.sandbox:
            s.use(*sandbox_sections)
            return
        s.use("sandboxWorkloads")
        self.put("sandboxWorkloads.mode", self.sandbox_mode, origin="spec.sandboxWorkloads.mode")
        self.put("sandboxWorkloads.defaultWorkload", self.default_workload, origin="spec.sandboxWorkloads.defaultWorkload")
        # The operator never touched the KubeVirt CR: whatever permits the GPUs today keeps doing so.
        if self.sandbox_mode == "kubevirt" and self.workloads & {"vm-passthrough", "vm-vgpu"}:
            self.put("sandboxWorkloads.kubevirt.permitHostDevices", False)
            self.notes.append("sandboxWorkloads.kubevirt.permitHostDevices false: the operator left the KubeVirt CR's "
                              "permittedHostDevices to you; set it true to let gpu-stack manage them")
        needed = {
            "vfioManager": "vm-passthrough" in self.workloads,
            "sandboxDevicePlugin": bool(self.workloads & {"vm-passthrough", "vm-vgpu"}) and self.sandbox_mode == "kubevirt",
            "kataSandboxDevicePlugin": "vm-passthrough" in self.workloads and self.sandbox_mode == "kata",
            "vgpuManager": "vm-vgpu" in self.workloads,
            "vgpuDeviceManager": "vm-vgpu" in self.workloads,
        }
        for section, need in needed.items():
            if not need:
                s.use(section)
            elif not s.get(f"{section}.enabled"):
                self.report(f"spec.{section}.enabled", False,
                            "gpu-stack deploys this component on every node of a pool whose workload type needs it")
        if self.sandbox_mode == "kata" and needed["kataSandboxDevicePlugin"]:
            self.put("sandboxWorkloads.ccManager.enabled", bool(s.get("ccManager.enabled")), origin="spec.ccManager.enabled")
            mode = s.get("ccManager.defaultMode")
            if mode:
                self.put("sandboxWorkloads.ccManager.defaultMode", mode, origin="spec.ccManager.defaultMode")
        else:
            s.use("ccManager")
        if needed["vgpuManager"]:
            self._vgpu_manager()
        if needed["vgpuDeviceManager"]:
            default = s.get("vgpuDeviceManager.config.default")
            if default:
                self.put("vgpu.defaultConfig", default, origin="spec.vgpuDeviceManager.config.default")

    def _vgpu_manager(self) -> None:
        s = self.spec
        repository, image, version = (s.get(f"vgpuManager.{k}") or "" for k in ("repository", "image", "version"))
        oses = sorted({p.get("os") for p in self.pools if p.get("workloadType") == "vm-vgpu" and p.get("os")})
        if not (repository and image and version):
            self.report("spec.vgpuManager", {"repository": repository, "image": image, "version": version},
                        "no complete vGPU manager image (repository, image and version): set gpu-stack:vgpu.managerImage")
            return
        if not oses:
            self.report("spec.vgpuManager.version", version, "the vm-vgpu pools' OS is unknown, so the image's -<osTag> suffix is too")
            return
        if len(oses) > 1:
            self.report("spec.vgpuManager.version", version,
                        f"gpu-stack runs one vGPU manager image; the vm-vgpu pools boot {', '.join(oses)}, it takes {oses[0]}")
        self.put("vgpu.managerImage", f"{repository.rstrip('/')}/{image}:{version}-{oses[0]}", origin="spec.vgpuManager.repository")

    def _gpudirect_on(self) -> bool:
        s = self.spec
        return bool(s.get("gds.enabled") or s.get("gdrcopy.enabled") or s.get("driver.rdma.enabled"))

    def _gpudirect(self) -> None:
        s = self.spec
        gds, gdrcopy, rdma = bool(s.get("gds.enabled")), bool(s.get("gdrcopy.enabled")), bool(s.get("driver.rdma.enabled"))
        # The operator reads useHostMofed only with RDMA on (IsHostMOFED).
        host_mofed = bool(s.get("driver.rdma.useHostMofed")) and rdma
        for section, on in (("gds", gds), ("gdrcopy", gdrcopy)):
            if not on:
                s.use(section)
        if not (gds or gdrcopy or rdma):
            return
        self.put("gpudirect", {"gds": gds, "gdrcopy": gdrcopy, "rdma": {"enabled": rdma, "useHostMofed": host_mofed}},
                 origin="spec.gds.enabled")

    # -- node pools

    def _pools(self) -> list[dict[str, Any]]:
        if self.nodes is None:
            return [self._single_pool()]
        gpu_nodes = [n for n in self.nodes if n.is_gpu]
        if not gpu_nodes:
            raise ImportInputError("--nodes: no GPU node (nvidia.com/gpu.present=true or an NFD NVIDIA PCI label) in the dump")
        signatures = {n.name: self._signature(n) for n in gpu_nodes}
        groups = self._group(gpu_nodes, signatures)
        pools = [self._pool(group) for group in groups]
        names: dict[str, int] = {}
        base_names = [pool["name"] for pool in pools]
        for pool, group in zip(pools, groups):
            if base_names.count(pool["name"]) > 1 and group.selector:
                pool["name"] = f"{pool['name']}-{_slug('-'.join(group.selector.values()))}"[:40].strip("-")
        for pool in pools:
            count = names.get(pool["name"], 0)
            names[pool["name"]] = count + 1
            if count:
                pool["name"] = f"{pool['name'][:37]}-{count + 1}"
        if self.mig_layouts:
            self.put("migLayouts", dict(sorted(self.mig_layouts.items())),
                     origin=f"configmap:{self.spec.get('migManager.config.name')}")
        return sorted(pools, key=lambda p: (len(p["nodeSelector"]) == 0, p["name"]))

    def _model(self, node: _Node) -> str:
        for selector, model in self.facts.gpu_models:
            if selector is not None and node.labels.get(selector[0]) == selector[1]:
                return model
        product = node.labels.get(GPU_PRODUCT)
        if product:
            model = model_from_product(product, node.labels.get(GPU_MEMORY))
            if model is None:
                raise ImportInputError(f"--nodes: node {node.name} has {GPU_PRODUCT}={product}, which maps to no gpu-stack "
                                       f"model ({', '.join(catalog.GPU_MODELS)}); name it with --gpu-model KEY=VALUE:MODEL")
            return model
        default = [model for selector, model in self.facts.gpu_models if selector is None]
        if default:
            return default[0]
        raise ImportInputError(f"--nodes: node {node.name} has no {GPU_PRODUCT} label (GFD does not run on VM nodes); "
                               "name its model with --gpu-model KEY=VALUE:MODEL or --gpu-model MODEL")

    def _workload(self, node: _Node) -> str:
        label = node.labels.get(consts.WORKLOAD_CONFIG)
        if not self.sandbox:
            if label and label != "container":
                self.report(f"node:{node.name}/{consts.WORKLOAD_CONFIG}", label,
                            "sandboxWorkloads are disabled, so the operator treats every node as a container node")
            return "container"
        return label if label in consts.WORKLOAD_TYPES else self.default_workload

    def _signature(self, node: _Node) -> tuple:
        workload = self._workload(node)
        model = self._model(node)
        os_tag = os_of(node.labels) or self.facts.os
        if os_tag is None:
            raise ImportInputError(f"--nodes: node {node.name} has no NFD OS labels ({consts.NFD_OS_ID}, "
                                   f"{consts.NFD_OS_VERSION_ID}); give the OS with --os")
        kernel = node.labels.get(consts.NFD_KERNEL_FULL) if self.driver_mode == "precompiled" and workload == "container" else None
        if self.driver_mode == "precompiled" and workload == "container" and not kernel:
            raise ImportInputError(f"--nodes: node {node.name} has no {consts.NFD_KERNEL_FULL} label, which precompiled drivers need")
        container = workload == "container"
        return (
            model,
            os_tag,
            workload,
            node.labels.get(consts.MIG_CONFIG) if container else None,
            node.labels.get(consts.DEVICE_PLUGIN_CONFIG) if container else None,
            node.labels.get(consts.VGPU_CONFIG) if workload == "vm-vgpu" else None,
            kernel,
            node.labels.get(ARCH_LABEL, "amd64") if kernel else None,
        )

    def _group(self, nodes: list[_Node], signatures: Mapping[str, tuple]) -> list[_Group]:
        if len(set(signatures.values())) == 1:
            return [_Group(signatures[nodes[0].name], {}, list(nodes))]
        for key in self.facts.pool_labels:
            if key in AGENT_WRITTEN or key.startswith(consts.DEPLOY_PREFIX):
                raise ImportInputError(f"--pool-label {key}: the gpu-stack node agent writes this label, so pools cannot select by it")
        candidates = [*self.facts.pool_labels, INSTANCE_TYPE, consts.NFD_OS_ID, consts.NFD_OS_VERSION_ID]
        if self.driver_mode == "precompiled":
            candidates.append(consts.NFD_KERNEL_FULL)
        usable = [k for k in dict.fromkeys(candidates) if all(k in n.labels for n in nodes)]

        def separates(keys: Sequence[str]) -> bool:
            seen: dict[tuple, tuple] = {}
            for node in nodes:
                values = tuple(node.labels[k] for k in keys)
                if seen.setdefault(values, signatures[node.name]) != signatures[node.name]:
                    return False
            return True

        chosen: list[str] = []
        for key in usable:
            if separates(chosen):
                break
            chosen.append(key)
        if not separates(chosen):
            raise ImportInputError(
                "--nodes: GPU nodes that need different pools share every selector label "
                f"({', '.join(usable) or 'none usable'}); label them apart and name the label with --pool-label KEY")
        for key in list(chosen):
            fewer = [k for k in chosen if k != key]
            if fewer and separates(fewer):
                chosen = fewer
        groups: dict[tuple, _Group] = {}
        for node in nodes:
            selector = {k: node.labels[k] for k in chosen}
            key = (signatures[node.name], tuple(selector.values()))
            groups.setdefault(key, _Group(signatures[node.name], selector)).nodes.append(node)
        return list(groups.values())

    def _single_pool(self) -> dict[str, Any]:
        default = [model for selector, model in self.facts.gpu_models if selector is None]
        if not default:
            raise ImportInputError("--gpu-model MODEL is required without --nodes (the ClusterPolicy names no GPU model)")
        if self.driver_mode == "precompiled":
            raise ImportInputError("spec.driver.usePrecompiled is true: precompiled drivers are chosen per kernel, so pass "
                                   "--nodes (their kernel-version.full labels pick node_images/catalog.yaml entries)")
        if self.facts.os is None:
            raise ImportInputError("--os is required without --nodes (the driver image tag carries the OS, e.g. ubuntu22.04)")
        workload = self.default_workload if self.sandbox else "container"
        self.notes.append("without --nodes: one pool with an empty nodeSelector serves every GPU node; node labels "
                          "(nvidia.com/mig.config, nvidia.com/device-plugin.config, nvidia.com/gpu.workload.config) were not read")
        plugin_key = self.spec.get("devicePlugin.config.default") or None
        signature = (default[0], self.facts.os, workload, None, plugin_key, None, None, None)
        return self._pool(_Group(signature, {}, []))

    def _pool(self, group: _Group) -> dict[str, Any]:
        model, os_tag, workload, mig_label, plugin_label, vgpu_label, kernel, arch = group.signature
        nodes = ", ".join(n.name for n in group.nodes) or "every GPU node"
        name = _slug(model)
        if workload != "container":
            name += "-vm" if workload == "vm-passthrough" else "-vgpu"
        pool: dict[str, Any] = {"name": name[:40], "nodeSelector": dict(group.selector), "gpuModel": model}
        if kernel:
            pool["nodeImage"] = self._node_image(kernel, os_tag, arch, nodes)
        else:
            pool["os"] = os_tag
        if workload != "container":
            pool["workloadType"] = workload
        if vgpu_label:
            pool["vgpuConfig"] = vgpu_label
        if workload == "container":
            sharing = self._sharing(model, mig_label, plugin_label, group)
            if sharing:
                pool["sharing"] = sharing
        return pool

    def _node_image(self, kernel: str, os_tag: str, arch: str, nodes: str) -> str:
        for image in node_images():
            if image.kernel == kernel and image.os_tag == os_tag and image.arch == arch:
                return image.name
        raise ImportInputError(f"--nodes: {nodes} run kernel {kernel} on {os_tag} ({arch}), which node_images/catalog.yaml "
                               "has no entry for; precompiled pools name one (add it, then import again)")

    # -- sharing

    def _plugin_config(self, key: Optional[str], where: str) -> Optional[dict]:
        name = self.spec.get("devicePlugin.config.name")
        self.spec.use("devicePlugin.config.default")
        if not name or not key:
            return None
        data = self.configmaps.get(name)
        if data is None:
            return None
        self.used_configmaps.add(name)
        self.used_plugin_keys.add(key)
        if key not in data:
            self.report(f"configmap:{name}/{key}", None,
                        f"{where} selects config {key}, which the ConfigMap lacks; the device plugin then falls back to "
                        "an empty config (FALLBACK_STRATEGIES=empty): imported without sharing")
            return None
        try:
            document = yaml.safe_load(data[key]) or {}
        except yaml.YAMLError as exc:
            raise ImportInputError(f"configmap {name}, key {key}: not valid YAML: {exc}") from None
        if not isinstance(document, dict):
            raise ImportInputError(f"configmap {name}, key {key}: expected a device-plugin config mapping")
        return document

    def _sharing(self, model: str, mig_label: Optional[str], plugin_label: Optional[str], group: _Group) -> Optional[dict]:
        where = f"nodes {', '.join(n.name for n in group.nodes)}" if group.nodes else "the default config"
        key = plugin_label or self.spec.get("devicePlugin.config.default") or None
        document = self._plugin_config(key, where)
        cm = self.spec.get("devicePlugin.config.name")
        flags = (document or {}).get("flags") or {}
        mig_strategy = flags.get("migStrategy") or self.mig_strategy
        if document is not None:
            for flag in sorted(set(flags) - {"migStrategy"}):
                self.report(f"configmap:{cm}/{key}.flags.{flag}", flags[flag],
                            "gpu-stack's per-pool device-plugin configs set migStrategy only")
            for top in sorted(set(document) - {"version", "flags", "sharing", "resources"}):
                self.report(f"configmap:{cm}/{key}.{top}", document[top], "gpu-stack's per-pool device-plugin configs set no such section")
        shared = self._time_sharing(document, f"configmap:{cm}/{key}") if document is not None else None
        model_info = catalog.GPU_MODELS[model]
        if mig_label and mig_label != mig_catalog.ALL_DISABLED and group.nodes:
            label_path = f"node:{group.nodes[0].name}/{consts.MIG_CONFIG}"
            if not model_info.mig_capable:
                self.report(label_path, mig_label, f"the {model} has no MIG; gpu-stack writes no nvidia.com/mig.config on its nodes")
            elif mig_strategy == "none":
                self.report(label_path, mig_label,
                            "the MIG strategy is none, so the device plugin exposed these GPUs whole; gpu-stack's MIG pools "
                            "use single or mixed, and labels the pool's nodes all-disabled instead")
            else:
                if shared:
                    self.report(f"configmap:{cm}/{key}.sharing", shared,
                                "gpu-stack does not combine MIG with time-slicing or MPS on one pool; the pool keeps its MIG layout")
                layout = self._mig_layout(model, mig_label, label_path)
                if layout is not None:
                    return {"strategy": f"mig-{mig_strategy}", "migLayout": layout}
            return None
        return shared

    def _time_sharing(self, document: dict, where: str) -> Optional[dict]:
        sharing = document.get("sharing") or {}
        chosen = None
        for kind, strategy in (("mps", "mps"), ("timeSlicing", "time-slicing")):
            block = sharing.get(kind)
            if not isinstance(block, dict):
                continue
            resources = block.get("resources") or []
            replicas = [r for r in resources if isinstance(r, dict) and r.get("name") == "nvidia.com/gpu"]
            for resource in resources:
                if resource not in replicas:
                    self.report(f"{where}.sharing.{kind}.resources", resource,
                                "gpu-stack replicates nvidia.com/gpu only (no MIG device sharing)")
            count = replicas[0].get("replicas", 1) if replicas else 1
            # The plugin picks MPS when it has replicas > 1, else time-slicing (fact sheet §6.1).
            if chosen is None and isinstance(count, int) and count > 1:
                chosen = {"strategy": strategy, "replicas": count}
                if block.get("renameByDefault"):
                    chosen["renameByDefault"] = True
                if strategy == "time-slicing" and block.get("failRequestsGreaterThanOne"):
                    chosen["failRequestsGreaterThanOne"] = True
            elif isinstance(count, int) and count > 1:
                self.report(f"{where}.sharing.{kind}", block, "the device plugin uses MPS when both are set; so does gpu-stack")
        return chosen

    def _mig_layout(self, model: str, name: str, where: str) -> Optional[str]:
        custom_name = self.spec.get("migManager.config.name")
        builtin = mig_catalog.builtin_layouts(model)
        if not custom_name:
            if name in builtin:
                return name
            self.report(where, name, f"no built-in MIG layout of that name fits the {model} (the operator's MIG manager "
                                     "generated it from the hardware); pick one of gpu-stack's and set sharing.migLayout")
            return None
        data = self.configmaps.get(custom_name)
        if data is None:
            if name in builtin:
                self.notes.append(f"MIG layout {name}: assumed to be the built-in one (ConfigMap {custom_name} was not given)")
                return name
            self.report(where, name, f"defined in ConfigMap {custom_name}, which was not given; pass it with --configmap")
            return None
        self.used_configmaps.add(custom_name)
        configs = self._mig_configs(custom_name, data)
        self.used_mig_layouts.add(name)
        entries = configs.get(name)
        if entries is None:
            self.report(where, name, f"ConfigMap {custom_name} has no mig-configs entry {name}")
            return None
        filters = {f.upper() for f in mig_catalog.device_filter(model)}

        def applies(entry: dict) -> bool:
            wanted = entry.get("device-filter")
            if wanted is None:
                return True
            wanted = [wanted] if isinstance(wanted, str) else wanted
            return any(str(w).upper() in filters for w in wanted)

        applicable = [e for e in entries if isinstance(e, dict) and applies(e)]
        if len(applicable) != 1 or applicable[0].get("devices") != "all":
            self.report(where, name, f"the layout's entries for the {model} are not one `devices: all` entry; gpu-stack "
                                     "layouts give every GPU of a node the same MIG devices")
            return None
        entry = applicable[0]
        devices = {str(k): v for k, v in (entry.get("mig-devices") or {}).items()} if entry.get("mig-enabled") else {}
        if name in builtin and builtin[name].devices == devices:
            return name
        if not devices:
            self.report(where, name, "enables no MIG devices; gpu-stack labels such pools all-disabled")
            return None
        if name.startswith("all-"):
            self.report(where, name, "redefines a built-in layout name; gpu-stack's custom layouts may not start with all-")
            return None
        known = self.mig_layouts.get(name)
        if known is not None and known != devices:
            self.report(where, name, f"gives the {model} other devices than another model; gpu-stack layouts are per name")
            return None
        self.mig_layouts[name] = devices
        return name

    def _mig_configs(self, name: str, data: Mapping[str, str]) -> dict:
        if "config.yaml" not in data:
            raise ImportInputError(f"configmap {name}: a mig-parted ConfigMap holds its document under config.yaml")
        try:
            document = yaml.safe_load(data["config.yaml"]) or {}
        except yaml.YAMLError as exc:
            raise ImportInputError(f"configmap {name}, key config.yaml: not valid YAML: {exc}") from None
        configs = document.get("mig-configs") if isinstance(document, dict) else None
        if not isinstance(configs, dict):
            raise ImportInputError(f"configmap {name}, key config.yaml: no mig-configs mapping")
        return configs

    # -- what is left

    def _no_effect(self) -> None:
        for path in NO_EFFECT:
            self.spec.use(path[len("spec."):])
        for section, _, _ in IMAGE_SECTIONS:
            # Image fields were read (or reported) by _images for every operand gpu-stack renders.
            for key in ("repository", "image", "version"):
                self.spec.use(f"{section}.{key}")
        self.spec.use("vgpuManager.repository", "vgpuManager.image", "vgpuManager.version")

    def _unread_configmaps(self) -> None:
        plugin = self.spec.raw("devicePlugin.config.name")
        if plugin and plugin not in self.configmaps:
            self.report("spec.devicePlugin.config.name", plugin,
                        f"time-slicing/MPS replicas live in ConfigMap {plugin}, not in the ClusterPolicy; pass it with "
                        "--configmap to carry them onto the pools whose nodes select its keys (nvidia.com/device-plugin.config)")
        elif plugin:
            for key in self.configmaps[plugin]:
                if key not in self.used_plugin_keys:
                    self.report(f"configmap:{plugin}/{key}", None,
                                "no imported node selects this config (nvidia.com/device-plugin.config) and it is not the default"
                                if self.nodes is not None else "without --nodes only the default config is read")
        mig = self.spec.raw("migManager.config.name")
        if mig and mig in self.configmaps and self.spec.get("migManager.enabled"):
            try:
                configs = self._mig_configs(mig, self.configmaps[mig])
            except ImportInputError:
                configs = {}
            for name in configs:
                if name not in self.used_mig_layouts and not name.startswith("all-"):
                    self.report(f"configmap:{mig}/config.yaml", name, "a MIG layout no imported node uses; gpu-stack renders used layouts only")
        elif mig and self.spec.get("migManager.enabled") and not any(
            p.get("sharing", {}).get("strategy", "").startswith("mig-") for p in self.pools
        ):
            self.report("spec.migManager.config.name", mig,
                        f"custom MIG layouts live in ConfigMap {mig}; no imported node uses one (pass --nodes and --configmap to carry them)")
        self.spec.use("migManager.config.name", "devicePlugin.config.name", "dcgmExporter.config.name")
        for name in sorted(set(self.configmaps) - self.used_configmaps - {plugin, mig}):
            self.notes.append(f"ConfigMap {name} (--configmap) is not one the ClusterPolicy names; it was not read")

    def _leftovers(self) -> None:
        for path, value in _leaves(self.spec.data, "spec"):
            if _empty(value) or self.spec.is_used(path) or _same_as_gpu_stack(path, value):
                continue
            self.report(path, value, _reason(path))


def int_or_percent(value: Any) -> Any:
    """The operator reads ClusterPolicy's string budgets with intstr.Parse, so "1" meant one node; a stack says it
    as the number, since the API server refuses the string "1" in a DaemonSet."""
    text = str(value).strip()
    return int(text) if re.fullmatch(r"[0-9]+", text) else text


def truthy(value: str) -> bool:
    """A boolean env value as k8s-driver-manager's flag parsing (strconv.ParseBool) reads it."""
    return value.strip().lower() in ("1", "t", "true")


def _seconds(value: str, where: str) -> int:
    """A Go duration or plain seconds, as k8s-driver-manager's DRAIN_TIMEOUT_SECONDS takes it."""
    text = value.strip()
    if text.isdigit():
        return int(text)
    match = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", text)
    if not text or not match:
        raise ImportInputError(f"{where}: {value!r} is not a duration such as 300s or 5m")
    h, m, s = (int(g or 0) for g in match.groups())
    return h * 3600 + m * 60 + s


def import_cluster_policy(
    policy: dict,
    facts: ClusterFacts,
    *,
    helm_values: Optional[dict] = None,
    nodes: Optional[list[_Node]] = None,
    configmaps: Optional[Mapping[str, Mapping[str, str]]] = None,
) -> ImportResult:
    """The stack config and the not-carried report for one ClusterPolicy object."""
    if helm_values is not None and not isinstance(helm_values, dict):
        raise ImportInputError("--helm-values: expected a mapping of Helm values (`helm get values --all -o yaml`)")
    return _Importer(policy, facts, helm_values, nodes, configmaps or {}).run()


def validate(result: ImportResult) -> StackConfig:
    """load_config on the result, with each refused key's source named (ConfigError otherwise)."""
    try:
        return load_config(stack_file_config(result.document()))
    except ConfigError as exc:
        problems = []
        for path, message in exc.problems:
            origin = _origin(path, result.origins)
            problems.append((f"{path} (from {origin})" if origin else path, message))
        raise ConfigError(problems) from None


def _origin(path: str, origins: Mapping[str, str]) -> Optional[str]:
    best = None
    for key, origin in origins.items():
        if path == key or path.startswith(key + ".") or path.startswith(key + "["):
            if best is None or len(key) > len(best[0]):
                best = (key, origin)
    return best[1] if best else None


def stack_yaml(result: ImportResult, command: str) -> str:
    lines = [
        f"# Imported from ClusterPolicy {result.source} by `{command}`.",
        "# Review before `pulumi up`; not carried over from the operator's configuration:",
    ]
    # One comment line per item: a newline inside a value would end the comment and start YAML.
    lines += [f"#   {' '.join(item.render().splitlines())}" for item in result.not_carried] or ["#   (nothing)"]
    body = yaml.safe_dump(result.document(), sort_keys=False, default_flow_style=False, width=120)
    return "\n".join(lines) + "\n" + body


# --- command line ----------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--clusterpolicy", required=True, metavar="FILE", help="`kubectl get clusterpolicy -o yaml` output")
    parser.add_argument("--helm-values", metavar="FILE", help="the operator's `helm get values --all -o yaml`: fields the ClusterPolicy lacks take these, not the CRD defaults")
    parser.add_argument("--stack", required=True, help="stack name: writes stacks/Pulumi.<name>.yaml")
    parser.add_argument("--out", metavar="PATH", help="write the stack file here instead")
    parser.add_argument("--force", action="store_true", help="overwrite an existing stack file")
    parser.add_argument("--context", required=True, help="kubeconfig context of the cluster (gpu-stack:cluster.context)")
    parser.add_argument("--node-agent-image", required=True, metavar="IMAGE", help="gpu-stack node agent image (it replaces the operator's node labeller)")
    parser.add_argument("--cluster-name", help="gpu-stack:cluster.name (default: the context, as a DNS label)")
    parser.add_argument("--kubernetes-version", action="append", default=[], metavar="1.N", help="repeatable; default: the kubelet versions in --nodes")
    parser.add_argument("--namespace", help="operand namespace (default: the ClusterPolicy's status.namespace)")
    parser.add_argument("--container-runtime", choices=("containerd", "cri-o"), help="default: from --nodes, else containerd")
    parser.add_argument("--nodes", metavar="FILE", help="`kubectl get nodes -o yaml`: node pools from the GPU nodes' labels")
    parser.add_argument("--gpu-model", action="append", default=[], metavar="[KEY=VALUE:]MODEL",
                        help="GPU model of nodes whose labels do not say it (VM nodes), or of the single pool without --nodes; repeatable")
    parser.add_argument("--os", help="OS tag (e.g. ubuntu22.04) of nodes without NFD OS labels, or of the single pool")
    parser.add_argument("--pool-label", action="append", default=[], metavar="KEY", help="node label that tells pools apart; repeatable")
    parser.add_argument("--configmap", action="append", default=[], metavar="FILE",
                        help="`kubectl get cm -o yaml` of ConfigMaps the ClusterPolicy names (device-plugin, mig-parted, DCGM metrics); repeatable")


def _gpu_models(values: Sequence[str]) -> tuple[tuple[Optional[tuple[str, str]], str], ...]:
    parsed = []
    for value in values:
        selector, sep, model = value.rpartition(":")
        if model not in catalog.GPU_MODELS:
            raise ImportInputError(f"--gpu-model {value}: unknown model {model!r}; allowed values: {', '.join(catalog.GPU_MODELS)}")
        if not sep:
            parsed.append((None, model))
            continue
        key, eq, label = selector.partition("=")
        if not eq or not key:
            raise ImportInputError(f"--gpu-model {value}: expected KEY=VALUE:MODEL, e.g. {INSTANCE_TYPE}=p4d.24xlarge:A100-40GB")
        parsed.append(((key, label), model))
    return tuple(parsed)


def _output_path(args: argparse.Namespace) -> Path:
    if not STACK_NAME.match(args.stack):
        raise ImportInputError(f"--stack {args.stack!r}: a stack name is letters, digits, '.', '_' and '-'")
    return Path(args.out) if args.out else PROJECT_DIR / "stacks" / f"Pulumi.{args.stack}.yaml"


def run(args: argparse.Namespace) -> int:
    try:
        out = _output_path(args)
        if out.exists() and not args.force:
            raise ImportInputError(f"{out} exists; pass --force to overwrite it")
        if args.os is not None and not OS_TAG.match(args.os):
            raise ImportInputError(f"--os {args.os!r} is not an OS tag such as ubuntu22.04 or rhel9")
        policy = cluster_policy_of(read_yaml(args.clusterpolicy, "--clusterpolicy"), args.clusterpolicy)
        helm = read_yaml(args.helm_values, "--helm-values") if args.helm_values else None
        nodes = nodes_of(read_yaml(args.nodes, "--nodes"), args.nodes) if args.nodes else None
        configmaps = configmaps_of([(path, read_yaml(path, "--configmap")) for path in args.configmap])
        facts = ClusterFacts(
            context=args.context,
            node_agent_image=args.node_agent_image,
            cluster_name=args.cluster_name,
            kubernetes_versions=tuple(args.kubernetes_version),
            namespace=args.namespace,
            container_runtime=args.container_runtime,
            gpu_models=_gpu_models(args.gpu_model),
            os=args.os,
            pool_labels=tuple(args.pool_label),
        )
        result = import_cluster_policy(policy, facts, helm_values=helm, nodes=nodes, configmaps=configmaps)
    except ImportInputError as exc:
        print(f"import: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        cfg = validate(result)
    except ConfigError as exc:
        print(f"import: the imported stack does not load, nothing written\n{exc.render()}", file=sys.stderr)
        return EXIT_BAD_INPUT
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(stack_yaml(result, "python -m gpustack import"))
    print(f"wrote {out}: {len(cfg.node_pools)} pool(s) ({', '.join(p.name for p in cfg.node_pools)})")
    print(f"not carried ({len(result.not_carried)}):")
    for item in result.not_carried:
        print(f"  {item.render()}")
    if result.notes:
        print("notes:")
        for note in result.notes:
            print(f"  {note}")
    return EXIT_OK
