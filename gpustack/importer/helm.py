"""The operator's Helm values (`helm get values --all`): in ClusterPolicy shape under the ClusterPolicy's own
fields, and the chart-only values (NFD, OpenShift, the GPUCluster CR) the stack file takes or reports."""

from __future__ import annotations

import copy
from typing import Any, Mapping

from gpustack.importer.common import NotCarried

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


class HelmMixin:
    """Mixed into build._Importer: the Helm values that are not ClusterPolicy fields."""

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
        gates = (self.helm.get("draDriver") or {}).get("featureGates")
        if (self.helm.get("gpuCluster") or {}).get("deployCR"):
            self.report("helm:gpuCluster.deployCR", True, "the chart deploys a GPUCluster (DRA) object, which this importer "
                                                          "does not read: set nodePools[].allocation dra by hand")
            if gates:
                # gpu-stack takes DRA settings only with DRA pools, which the import does not set up.
                self.report("helm:draDriver.featureGates", gates, "the DRA driver's feature gates: set gpu-stack:dra.featureGates "
                                                                  "(1:1) together with the pools' allocation: dra")
        elif gates:
            self.no_effect.append(NotCarried("helm:draDriver.featureGates", gates,
                                             "gpuCluster.deployCR is false: the chart deployed no DRA driver"))
        if self.helm.get("extraObjects"):
            self.report("helm:extraObjects", len(self.helm["extraObjects"]),
                        "objects the chart created besides the operator's; gpu-stack renders none of them: keep them outside the stack")
