"""The not-carried report: which leftover spec fields need no key (equal to what gpu-stack renders, or without
effect in the operator), and the reason given for each of the others."""

from __future__ import annotations

import fnmatch
from typing import Any, Iterator

from gpustack.importer.images import IMAGE_SECTIONS

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


class ReportMixin:
    """Mixed into build._Importer: the fields no mapping read, reported with their reason."""

    def _no_effect(self) -> None:
        for path in NO_EFFECT:
            self.spec.use(path[len("spec."):])
        for section, _, _ in IMAGE_SECTIONS:
            # Image fields were read (or reported) by _images for every operand gpu-stack renders.
            for key in ("repository", "image", "version"):
                self.spec.use(f"{section}.{key}")
        self.spec.use("vgpuManager.repository", "vgpuManager.image", "vgpuManager.version")

    def _leftovers(self) -> None:
        for path, value in _leaves(self.spec.data, "spec"):
            if _empty(value) or self.spec.is_used(path) or _same_as_gpu_stack(path, value):
                continue
            self.report(path, value, _reason(path))
