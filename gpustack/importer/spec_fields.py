"""The type of every ClusterPolicy field the import reads (GO:api/nvidia/v1/clusterpolicy_types.go, fact sheet §11)
and of the Helm values it reads (the chart's values.yaml), checked before any mapping runs: `SPEC_FIELDS` and
`HELM_FIELDS`, dotted paths under `spec` and under the values file. tests/test_import_inputs.py checks that every
path the mapping reads from the effective spec is typed here.

The table is derived where the importer already knows a field's kind: CRD_DEFAULTS (their Python type), ENUMS
(strings), the per-operand fields of every section with an image (images.POD_OF), and the mapping table's plain
copies (mapping.DIRECT, by their default); the rest is listed by hand below.
"""

from __future__ import annotations

from typing import Any

from gpustack.importer.clusterpolicy import CRD_DEFAULTS, ENUMS
from gpustack.importer.common import ImportInputError
from gpustack.importer.images import POD_OF
from gpustack.importer.mapping import DIRECT
from gpustack.importer.shapes import (ANY_LIST, BOOLEAN, ENV_LIST, INT_OR_PERCENT_KIND, INTEGER, MAPPING, RELABELINGS, STRING,
                                      STRING_LIST, STRING_MAP, TOLERATIONS, Kind, check_fields, type_name)

# Budgets the operator parses with intstr.Parse.
_INT_OR_PERCENT_FIELDS = ("driver.upgradePolicy.maxUnavailable", "daemonsets.rollingUpdate.maxUnavailable")
_PROBE_FIELDS = ("initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold")
# Validator checks with an env of their own (validator.<check>.env).
_VALIDATOR_CHECKS = ("plugin", "cuda", "driver", "toolkit", "vfioPCI", "vgpuManager", "vgpuDevices")

_BY_HAND: dict[str, Kind] = {
    "operator.runtimeClass": STRING,
    "operator.defaultRuntime": STRING,
    "operator.use_ocp_driver_toolkit": BOOLEAN,
    "operator.labels": STRING_MAP,
    "operator.annotations": STRING_MAP,
    "operator.metrics.serviceMonitor.enabled": BOOLEAN,
    "operator.initContainer.repository": STRING,
    "operator.initContainer.image": STRING,
    "operator.initContainer.version": STRING,
    "operator.initContainer.imagePullPolicy": STRING,
    "operator.initContainer.imagePullSecrets": STRING_LIST,
    "daemonsets.labels": STRING_MAP,
    "daemonsets.annotations": STRING_MAP,
    "daemonsets.tolerations": TOLERATIONS,
    "daemonsets.priorityClassName": STRING,
    "daemonsets.podSecurityContext": MAPPING,
    "driver.repoConfig.configMapName": STRING,
    "driver.certConfig.name": STRING,
    "driver.kernelModuleConfig.name": STRING,
    "driver.licensingConfig.nlsEnabled": BOOLEAN,
    "driver.virtualTopology.config": STRING,
    "driver.useOpenKernelModules": BOOLEAN,
    "driver.upgradePolicy.waitForCompletion.podSelector": STRING,
    "driver.upgradePolicy.waitForCompletion.timeoutSeconds": INTEGER,
    "devicePlugin.config.name": STRING,
    "devicePlugin.config.default": STRING,
    "devicePlugin.mps.root": STRING,
    "dcgm.hostPort": INTEGER,
    "dcgmExporter.config.name": STRING,
    "dcgmExporter.service.type": STRING,
    "dcgmExporter.serviceMonitor.interval": STRING,
    "dcgmExporter.serviceMonitor.scrapeTimeout": STRING,
    "dcgmExporter.serviceMonitor.honorLabels": BOOLEAN,
    "dcgmExporter.serviceMonitor.additionalLabels": STRING_MAP,
    "dcgmExporter.serviceMonitor.relabelings": RELABELINGS,
    "migManager.config.name": STRING,
    "migManager.gpuClientsConfig.name": STRING,
    "vgpuManager.kernelModuleConfig.name": STRING,
    "vgpuDeviceManager.config.name": STRING,
    "cdi.default": BOOLEAN,
    "cdi.nriPluginEnabled": BOOLEAN,
    "psp.enabled": BOOLEAN,
    "kataManager.enabled": BOOLEAN,
    "ccManager.defaultMode": STRING,
}


def _spec_fields() -> dict[str, Kind]:
    fields: dict[str, Kind] = {}
    for path, default in CRD_DEFAULTS.items():
        fields[path] = BOOLEAN if isinstance(default, bool) else INTEGER if isinstance(default, int) else STRING
    for path in _INT_OR_PERCENT_FIELDS:
        fields[path] = INT_OR_PERCENT_KIND
    for path in ENUMS:
        fields[path] = STRING
    for section in POD_OF:
        for key in ("repository", "image", "version", "imagePullPolicy"):
            fields[f"{section}.{key}"] = STRING
        fields[f"{section}.imagePullSecrets"] = STRING_LIST
        fields[f"{section}.args"] = STRING_LIST
        fields[f"{section}.env"] = ENV_LIST
        fields[f"{section}.resources"] = MAPPING
        fields[f"{section}.resources.limits"] = MAPPING
        fields[f"{section}.resources.requests"] = MAPPING
        fields[f"{section}.hostNetwork"] = BOOLEAN
    for row in DIRECT:
        default = row.default
        fields[row.path] = BOOLEAN if isinstance(default, bool) else STRING_LIST if isinstance(default, list) else STRING
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        for key in _PROBE_FIELDS:
            fields[f"driver.{probe}.{key}"] = INTEGER
    for check in _VALIDATOR_CHECKS:
        fields[f"validator.{check}.env"] = ENV_LIST
    fields.update(_BY_HAND)
    return fields


SPEC_FIELDS: dict[str, Kind] = _spec_fields()

# Where the chart's values differ from the ClusterPolicy's shape (helm.helm_values_as_spec undoes these).
_HELM_RENAMES = (("driver.upgradePolicy.podDeletion.", "driver.upgradePolicy.gpuPodDeletion."),
                 ("driver.useNvidiaDriverCRD", "driver.nvidiaDriverCRD.enabled"))
_HELM_ONLY_FIELDS: dict[str, Kind] = {
    "nfd.enabled": BOOLEAN,
    "nfd.nodefeaturerules": BOOLEAN,
    "platform.openshift": BOOLEAN,
    "clusterPolicy.deployCR": BOOLEAN,
    "gpuCluster.deployCR": BOOLEAN,
    "draDriver": MAPPING,
    "extraObjects": ANY_LIST,
    "nameOverride": STRING,
    "fullnameOverride": STRING,
    "node-feature-discovery": MAPPING,
    **{f"{section}.config.create": BOOLEAN for section in ("devicePlugin", "migManager", "dcgmExporter", "vgpuDeviceManager")},
    **{f"{section}.config.data": MAPPING for section in ("devicePlugin", "migManager", "dcgmExporter", "vgpuDeviceManager")},
}


def _helm_fields() -> dict[str, Kind]:
    fields: dict[str, Kind] = {}
    for path, kind in SPEC_FIELDS.items():
        for ours, theirs in _HELM_RENAMES:
            if path.startswith(ours):
                path = theirs + path[len(ours):]
        fields[path] = kind
    fields.update(_HELM_ONLY_FIELDS)
    return fields


HELM_FIELDS: dict[str, Kind] = _helm_fields()
# Top-level Helm values that are not a mapping of settings.
_HELM_SCALARS = ("extraObjects", "nameOverride", "fullnameOverride")


def validate_spec_fields(spec: Any, prefix: str = "spec") -> None:
    """The ClusterPolicy's spec: a mapping of sections (mappings), each typed field of its kind."""
    if not isinstance(spec, dict):
        raise ImportInputError(f"{prefix}: expected a mapping, got {type_name(spec)}")
    for section, value in spec.items():
        if not isinstance(section, str):
            raise ImportInputError(f"{prefix}: keys must be strings, found a key of type {type_name(section)}")
        if not isinstance(value, dict) and value is not None:
            raise ImportInputError(f"{prefix}.{section}: expected a mapping, got {type_name(value)}")
    check_fields(spec, SPEC_FIELDS, prefix)


def validate_helm_values(values: Any, where: str = "--helm-values") -> None:
    """The Helm values (`helm get values --all -o yaml`), before they are put in ClusterPolicy shape."""
    if not isinstance(values, dict):
        raise ImportInputError(f"{where}: expected a mapping of Helm values (`helm get values --all -o yaml`), "
                               f"got {type_name(values)}")
    for key, value in values.items():
        if not isinstance(key, str):
            raise ImportInputError(f"{where}: keys must be strings, found a key of type {type_name(key)}")
        if key not in _HELM_SCALARS and value is not None and not isinstance(value, dict):
            raise ImportInputError(f"{where}: {key}: expected a mapping, got {type_name(value)}")
    try:
        check_fields(values, HELM_FIELDS, "")
    except ImportInputError as exc:
        raise ImportInputError(f"{where}: {exc}") from None
