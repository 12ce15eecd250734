"""The report: every leaf of the effective spec no mapping carried is listed by its path, either as not carried
(with the reason) or as without effect in the operator (a component it did not deploy, a deprecated no-op). The
only fields left out are those whose exact value is what gpu-stack renders anyway (`SAME_AS_GPU_STACK`)."""

from __future__ import annotations

import fnmatch
from typing import Any

from gpustack.importer.common import NotCarried
from gpustack.importer.ledger import empty, leaves

# Exact values gpu-stack renders without a key: such fields are carried as they are. A rule here matches one value,
# never every value of a field (a field gpu-stack has no key for is reported whatever it holds).
SAME_AS_GPU_STACK: tuple[tuple[str, Any], ...] = (
    ("spec.*.hostNetwork", False),
    ("spec.operator.use_ocp_driver_toolkit", False),
    ("spec.cdi.nriPluginEnabled", False),
    ("spec.dcgmExporter.service.type", "ClusterIP"),
    ("spec.toolkit.env[CONTAINERD_RUNTIME_CLASS]", "nvidia"),
    ("spec.psa.enabled", True),
    ("spec.driver.startupProbe.successThreshold", 1),
    # A VM operand switched on: gpu-stack deploys it on the pools whose workload type needs it.
    *((f"spec.{section}.enabled", True) for section in ("vfioManager", "vgpuManager", "vgpuDeviceManager",
                                                        "sandboxDevicePlugin", "kataSandboxDevicePlugin")),
)
# Fields the operator ignores: reported as without effect when they hold anything.
DEPRECATED: tuple[tuple[str, str], ...] = (
    ("cdi.default", "deprecated no-op in the operator (CDI is on with cdi.enabled)"),
    ("psp", "PodSecurityPolicies: deprecated, the operator ignores them"),
    ("operator.defaultRuntime", "deprecated, the operator detects the runtime from the nodes"),
    ("driver.useOpenKernelModules", "deprecated no-op in the operator (driver.kernelModuleType replaced it)"),
    ("kataManager", "deprecated: the operator never deploys the Kata manager"),
    ("dcgm.hostPort", "deprecated, the operator ignores it"),
)

REASONS: tuple[tuple[str, str], ...] = (
    ("spec.operator.initContainer*", "deprecated in the operator (the validator's CUDA base image); gpu-stack runs the CUDA "
                                     "validation workload from the validator image and has no key for another"),
    ("spec.operator.use_ocp_driver_toolkit", "OpenShift's Driver Toolkit: carried into cluster.openshift.driverToolkit "
                                             "when the cluster is OpenShift; pass --openshift-version (and --imagestream)"),
    ("spec.operator.*", "gpu-stack runs no operator controller, so there is no operator Deployment or metrics endpoint to configure"),
    # NVIDIA's driver container has no liveness probe: the operator's setContainerProbe tunes an existing probe
    # only, so these timings never took effect there, and carrying them would turn on a probe that restarts the
    # driver under GPU work, which the cluster never had.
    ("spec.driver.livenessProbe*", "NVIDIA's driver container has no liveness probe, so the operator never applied "
                                   "these timings; set driver.livenessProbe in the stack to have gpu-stack add one"),
    ("spec.driver.*Probe*", "gpu-stack's driver probe keys are initialDelaySeconds, periodSeconds, timeoutSeconds, failureThreshold (and successThreshold for readiness)"),
    ("spec.validator.*.env[*]", "the validator's per-check env: gpu-stack exposes WITH_WORKLOAD (validator.pluginWorkload) only"),
    ("spec.*.hostNetwork", "gpu-stack has a hostNetwork key for the driver and the DCGM exporter only"),
    ("spec.daemonsets.podSecurityContext*", "gpu-stack has no key for a pod security context; each operand keeps its asset's"),
    ("spec.daemonsets.labels.*", "set by the operator's Helm chart to mark the operands it manages; gpu-stack's objects are not the chart's"),
    ("spec.daemonsets.tolerations*", "gpu-stack tolerations take key, operator, value, effect and tolerationSeconds only"),
    ("spec.dcgmExporter.serviceMonitor.*", "gpu-stack's ServiceMonitor settings are interval, scrapeTimeout, honorLabels, "
                                           "additionalLabels and relabelings only"),
    ("spec.dcgmExporter.service.type", "gpu-stack renders the DCGM exporter Service as ClusterIP"),
    ("spec.psa.enabled", "gpu-stack labels its namespace pod-security privileged whatever this says"),
    ("spec.cdi.nriPluginEnabled", "gpu-stack has no NRI plugin mode (fact sheet §8.2): CDI goes through the runtime's config"),
    ("spec.*.env[*].*", "the ClusterPolicy's env entries are {name, value} (the CRD has no valueFrom, the operator never "
                        "saw it): not carried; the driver reads a Secret with driver.secretEnv"),
    ("spec.*.env[*]", "gpu-stack owns this variable for this operand (it derives it from its own keys)"),
)


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


def _subtree(data: dict, path: str) -> Any:
    node: Any = data
    for part in path[len("spec."):].split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


class ReportMixin:
    """Mixed into build._Importer: the fields no mapping read, reported with their reason."""

    def _no_effect(self) -> None:
        for path, reason in DEPRECATED:
            self.spec.without_effect(path, reason)

    def _leftovers(self) -> None:
        moot_seen: set[str] = set()
        for path, value in leaves(self.spec.data, "spec"):
            if empty(path, value) or self.spec.is_used(path) or _same_as_gpu_stack(path, value):
                continue
            moot = self.spec.moot_of(path)
            if moot is None:
                self.report(path, value, _reason(path))
            elif moot not in moot_seen:
                # One entry per subtree: a component the operator did not deploy is one line, not one per field.
                moot_seen.add(moot)
                subtree = _subtree(self.spec.data, moot)
                if isinstance(subtree, dict):
                    # The fields it set, by name: their values had no effect, and a whole section is too long a line.
                    subtree = [p[len(moot) + 1:] for p, v in leaves(subtree, moot) if not empty(p, v)]
                self.no_effect.append(NotCarried(moot, subtree, self.spec.moot[moot]))
