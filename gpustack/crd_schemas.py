"""Strict JSON Schemas for the custom resources gpu-stack renders: the Prometheus Operator's `ServiceMonitor` and
`PrometheusRule` (monitoring.coreos.com/v1), its patch of KubeVirt's `KubeVirt` (kubevirt.io/v1) and NFD's
`NodeFeatureRule` (nfd.k8s-sigs.io/v1alpha1), OpenShift's `SecurityContextConstraints`.

kubernetes-validate ships schemas for built-in kinds only, so `gpustack.schema.validator` falls back to these.
They are written from each project's API reference (field names and types: the Prometheus Operator API docs,
kubevirt.io/api core/v1 types.go), cover the fields gpu-stack sets plus the common optional ones, and reject
anything else (`additionalProperties: false` on every object defined here), so a misspelt field fails the check
instead of being silently pruned by the API server.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Optional

import jsonschema
import yaml

API_VERSION = "monitoring.coreos.com/v1"

# Prometheus duration: units from years down to milliseconds, largest first, e.g. 30s, 1h30m, 0.
_DURATION = {
    "type": "string",
    "minLength": 1,
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
}
_LABEL_NAME = {"type": "string", "pattern": r"^[a-zA-Z_][a-zA-Z0-9_]*$"}
_STRINGS = {"type": "array", "items": {"type": "string"}}
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_INT_OR_STRING = {"anyOf": [{"type": "integer"}, {"type": "string"}]}


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    return schema


_METADATA = _object(
    {
        "name": {"type": "string", "minLength": 1, "maxLength": 253,
                 "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"},
        "namespace": {"type": "string", "minLength": 1, "maxLength": 63,
                      "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
        "labels": _STRING_MAP,
        "annotations": _STRING_MAP,
    },
    required=("name",),
)

# Both spellings are accepted by the API (lower case, as in Prometheus, or CamelCase).
_RELABEL_ACTIONS = [
    "replace", "Replace", "keep", "Keep", "drop", "Drop", "hashmod", "HashMod", "labelmap", "LabelMap",
    "labeldrop", "LabelDrop", "labelkeep", "LabelKeep", "lowercase", "Lowercase", "uppercase", "Uppercase",
    "keepequal", "KeepEqual", "dropequal", "DropEqual",
]

_RELABEL_CONFIG = _object(
    {
        "sourceLabels": {"type": "array", "items": _LABEL_NAME},
        "separator": {"type": "string"},
        "targetLabel": {"type": "string"},
        "regex": {"type": "string"},
        "replacement": {"type": "string"},
        "modulus": {"type": "integer", "minimum": 0},
        "action": {"enum": _RELABEL_ACTIONS},
    }
)

_LABEL_SELECTOR = _object(
    {
        "matchLabels": _STRING_MAP,
        "matchExpressions": {
            "type": "array",
            "items": _object(
                {
                    "key": {"type": "string", "minLength": 1},
                    "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                    "values": _STRINGS,
                },
                required=("key", "operator"),
            ),
        },
    }
)

_ENDPOINT = _object(
    {
        "port": {"type": "string", "minLength": 1},
        "targetPort": _INT_OR_STRING,
        "path": {"type": "string", "pattern": "^/"},
        "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
        "params": {"type": "object", "additionalProperties": _STRINGS},
        "interval": _DURATION,
        "scrapeTimeout": _DURATION,
        "honorLabels": {"type": "boolean"},
        "honorTimestamps": {"type": "boolean"},
        "trackTimestampsStaleness": {"type": "boolean"},
        "followRedirects": {"type": "boolean"},
        "enableHttp2": {"type": "boolean"},
        "filterRunning": {"type": "boolean"},
        "relabelings": {"type": "array", "items": _RELABEL_CONFIG},
        "metricRelabelings": {"type": "array", "items": _RELABEL_CONFIG},
    }
)

SERVICE_MONITOR: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "ServiceMonitor (monitoring.coreos.com/v1), as gpu-stack renders it",
    **_object(
        {
            "apiVersion": {"const": API_VERSION},
            "kind": {"const": "ServiceMonitor"},
            "metadata": _METADATA,
            "spec": _object(
                {
                    "jobLabel": {"type": "string"},
                    "targetLabels": _STRINGS,
                    "podTargetLabels": _STRINGS,
                    "endpoints": {"type": "array", "items": _ENDPOINT},
                    "selector": _LABEL_SELECTOR,
                    "namespaceSelector": _object({"any": {"type": "boolean"}, "matchNames": _STRINGS}),
                    "sampleLimit": {"type": "integer", "minimum": 0},
                    "targetLimit": {"type": "integer", "minimum": 0},
                    "labelLimit": {"type": "integer", "minimum": 0},
                    "attachMetadata": _object({"node": {"type": "boolean"}}),
                    "scrapeClass": {"type": "string", "minLength": 1},
                },
                required=("selector",),
            ),
        },
        required=("apiVersion", "kind", "metadata", "spec"),
    ),
}

_RULE = {
    **_object(
        {
            "alert": {"type": "string", "minLength": 1},
            "record": {"type": "string", "minLength": 1},
            "expr": {"anyOf": [{"type": "string", "minLength": 1}, {"type": "integer"}]},
            "for": _DURATION,
            "keep_firing_for": _DURATION,
            "labels": _STRING_MAP,
            "annotations": _STRING_MAP,
        },
        required=("expr",),
    ),
    # Exactly one of alert / record.
    "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
    # A recording rule has no `for`, `keep_firing_for` or annotations.
    "if": {"required": ["record"]},
    "then": {"not": {"anyOf": [{"required": ["for"]}, {"required": ["keep_firing_for"]},
                               {"required": ["annotations"]}]}},
}

PROMETHEUS_RULE: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "PrometheusRule (monitoring.coreos.com/v1), as gpu-stack renders it",
    **_object(
        {
            "apiVersion": {"const": API_VERSION},
            "kind": {"const": "PrometheusRule"},
            "metadata": _METADATA,
            "spec": _object(
                {
                    "groups": {
                        "type": "array",
                        "items": _object(
                            {
                                "name": {"type": "string", "minLength": 1},
                                "interval": _DURATION,
                                "limit": {"type": "integer", "minimum": 0},
                                "query_offset": _DURATION,
                                "labels": _STRING_MAP,
                                "partial_response_strategy": {"type": "string"},
                                "rules": {"type": "array", "items": _RULE},
                            },
                            required=("name",),
                        ),
                    },
                },
            ),
        },
        required=("apiVersion", "kind", "metadata", "spec"),
    ),
}

# A patch of the KubeVirt CR: only the part gpu-stack applies, spec.configuration.permittedHostDevices.
_PCI_HOST_DEVICE = _object(
    {
        "pciVendorSelector": {"type": "string", "pattern": r"^[0-9A-Fa-f]{4}:[0-9A-Fa-f]{4}$"},
        "resourceName": {"type": "string", "pattern": r"^[a-z0-9.-]+/[A-Za-z0-9_.-]+$"},
        "externalResourceProvider": {"type": "boolean"},
    },
    required=("pciVendorSelector", "resourceName"),
)
_MEDIATED_DEVICE = _object(
    {
        "mdevNameSelector": {"type": "string", "minLength": 1},
        "resourceName": {"type": "string", "pattern": r"^[a-z0-9.-]+/[A-Za-z0-9_.-]+$"},
        "externalResourceProvider": {"type": "boolean"},
    },
    required=("mdevNameSelector", "resourceName"),
)
KUBEVIRT = _object(
    {
        "apiVersion": {"const": "kubevirt.io/v1"},
        "kind": {"const": "KubeVirt"},
        "metadata": _METADATA,
        "spec": _object(
            {
                "configuration": _object(
                    {
                        "permittedHostDevices": _object(
                            {
                                "pciHostDevices": {"type": "array", "items": _PCI_HOST_DEVICE},
                                "mediatedDevices": {"type": "array", "items": _MEDIATED_DEVICE},
                            }
                        )
                    }
                )
            }
        ),
    },
    required=("apiVersion", "kind", "metadata", "spec"),
)

# NFD's NodeFeatureRule (nfd.k8s-sigs.io/v1alpha1, cluster-scoped), from NFD's API reference: rules that turn
# features a worker found (here: loaded kernel modules) into node labels. A rule must also pass the schema the CRD
# itself serves (`served_schema`), which this one follows field by field while refusing unknown keys.
_MATCH_EXPRESSION = _object(
    {
        "op": {"enum": ["In", "NotIn", "InRegexp", "Exists", "DoesNotExist", "Gt", "Ge", "Lt", "Le", "GtLt", "GeLe", "IsTrue", "IsFalse"]},
        "type": {"type": "string"},
        "value": _STRINGS,
    },
    required=("op",),
)
_FEATURE_MATCHER = {
    "type": "array",
    "items": _object(
        {
            "feature": {"type": "string", "pattern": r"^[a-z]+\.[a-z_]+$"},
            "matchExpressions": {"type": "object", "additionalProperties": _MATCH_EXPRESSION},
            "matchName": _MATCH_EXPRESSION,
        },
        required=("feature",),
    ),
}
NODE_FEATURE_RULE = _object(
    {
        "apiVersion": {"const": "nfd.k8s-sigs.io/v1alpha1"},
        "kind": {"const": "NodeFeatureRule"},
        "metadata": _METADATA,
        "spec": _object(
            {
                "rules": {
                    "type": "array",
                    "minItems": 1,
                    "items": _object(
                        {
                            "name": {"type": "string", "minLength": 1},
                            "labels": _STRING_MAP,
                            "labelsTemplate": {"type": "string"},
                            "annotations": _STRING_MAP,
                            "extendedResources": _STRING_MAP,
                            "taints": {
                                "type": "array",
                                "items": _object(
                                    {
                                        "key": {"type": "string", "minLength": 1},
                                        "value": {"type": "string"},
                                        "effect": {"enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
                                    },
                                    required=("key", "effect"),
                                ),
                            },
                            "vars": _STRING_MAP,
                            "varsTemplate": {"type": "string"},
                            "matchFeatures": _FEATURE_MATCHER,
                            "matchAny": {"type": "array", "items": _object({"matchFeatures": _FEATURE_MATCHER})},
                        },
                        required=("name",),
                    ),
                }
            },
            required=("rules",),
        ),
    },
    required=("apiVersion", "kind", "metadata", "spec"),
)

# NVIDIA's DRA driver's ComputeDomain (resource.nvidia.com/v1beta1, k8s-dra-driver-gpu chart CRD at v0.4.0): the
# spec a user writes, which cannot change once created; `numNodes` is deprecated and optional since v0.4.0.
COMPUTE_DOMAIN = _object(
    {
        "apiVersion": {"const": "resource.nvidia.com/v1beta1"},
        "kind": {"const": "ComputeDomain"},
        "metadata": _METADATA,
        "spec": _object(
            {
                "numNodes": {"type": "integer", "minimum": 0},
                "channel": _object(
                    {
                        "allocationMode": {"enum": ["All", "Single"]},
                        "resourceClaimTemplate": _object({"name": {"type": "string", "minLength": 1}}, required=("name",)),
                    },
                    required=("resourceClaimTemplate",),
                ),
            },
            required=("channel",),
        ),
    },
    required=("apiVersion", "kind", "metadata", "spec"),
)

# OpenShift's SecurityContextConstraints (security.openshift.io/v1, openshift/api security/v1 types.go and its CRD):
# the fields sit at the top level, not under a spec, and the CRD requires the host flags and the capability and
# volume lists (nullable there; gpu-stack writes empty lists and priority 0, what null means).
_STRATEGY = {"type": "string", "enum": ["MustRunAs", "RunAsAny", "MustRunAsRange", "MustRunAsNonRoot"]}
_ID_RANGES = {"type": "array", "items": _object({"min": {"type": "integer"}, "max": {"type": "integer"}})}
SECURITY_CONTEXT_CONSTRAINTS = _object(
    {
        "apiVersion": {"const": "security.openshift.io/v1"},
        "kind": {"const": "SecurityContextConstraints"},
        "metadata": _METADATA,
        **{flag: {"type": "boolean"} for flag in (
            "allowHostDirVolumePlugin", "allowHostIPC", "allowHostNetwork", "allowHostPID", "allowHostPorts",
            "allowPrivilegeEscalation", "allowPrivilegedContainer", "defaultAllowPrivilegeEscalation",
            "readOnlyRootFilesystem",
        )},
        **{strings: _STRINGS for strings in (
            "allowedCapabilities", "allowedUnsafeSysctls", "defaultAddCapabilities", "forbiddenSysctls", "groups",
            "requiredDropCapabilities", "seccompProfiles", "users", "volumes",
        )},
        "priority": {"type": "integer", "minimum": 0},
        "fsGroup": _object({"type": _STRATEGY, "ranges": _ID_RANGES}),
        "supplementalGroups": _object({"type": _STRATEGY, "ranges": _ID_RANGES}),
        "runAsUser": _object({"type": _STRATEGY, "uid": {"type": "integer"}, "uidRangeMin": {"type": "integer"}, "uidRangeMax": {"type": "integer"}}),
        "seLinuxContext": _object({"type": _STRATEGY, "seLinuxOptions": _STRING_MAP}),
        "userNamespaceLevel": {"enum": ["AllowHostLevel", "RequirePodLevel"]},
    },
    required=(
        "apiVersion", "kind", "metadata", "allowHostDirVolumePlugin", "allowHostIPC", "allowHostNetwork",
        "allowHostPID", "allowHostPorts", "allowPrivilegedContainer", "allowedCapabilities", "defaultAddCapabilities",
        "priority", "readOnlyRootFilesystem", "requiredDropCapabilities", "volumes",
    ),
)

SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    ("security.openshift.io/v1", "SecurityContextConstraints"): SECURITY_CONTEXT_CONSTRAINTS,
    ("resource.nvidia.com/v1beta1", "ComputeDomain"): COMPUTE_DOMAIN,
    (API_VERSION, "ServiceMonitor"): SERVICE_MONITOR,
    (API_VERSION, "PrometheusRule"): PROMETHEUS_RULE,
    ("kubevirt.io/v1", "KubeVirt"): KUBEVIRT,
    ("nfd.k8s-sigs.io/v1alpha1", "NodeFeatureRule"): NODE_FEATURE_RULE,
}


# The CRDs gpu-stack deploys for NFD (components/kit/nfd_chart.py reads the same file): kind -> CRD name.
NFD_CRDS = Path(__file__).resolve().parent.parent / "components" / "catalogs" / "nfd_crds.yaml"
SERVED: dict[tuple[str, str], tuple[Path, str]] = {
    ("nfd.k8s-sigs.io/v1alpha1", "NodeFeatureRule"): (NFD_CRDS, "nodefeaturerules.nfd.k8s-sigs.io"),
}


def served_schema(path: Path, crd: str, version: str) -> dict[str, Any]:
    """The openAPIV3Schema that CRD `crd` in `path` serves for `version`."""
    for doc in yaml.safe_load_all(path.read_text()):
        if doc and doc["metadata"]["name"] == crd:
            for served in doc["spec"]["versions"]:
                if served["name"] == version:
                    return served["schema"]["openAPIV3Schema"]
    raise KeyError(f"{path.name} has no CRD {crd} serving {version}")


@functools.lru_cache(maxsize=None)
def crd_validator(api_version: str, kind: str) -> Optional[jsonschema.protocols.Validator]:
    """A compiled strict validator for a custom resource kind gpu-stack renders, or None for any other kind."""
    schema = SCHEMAS.get((api_version, kind))
    if schema is None:
        return None
    if (api_version, kind) in SERVED:
        path, crd = SERVED[(api_version, kind)]
        schema = {"allOf": [schema, served_schema(path, crd, api_version.rsplit("/", 1)[1])]}
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)
