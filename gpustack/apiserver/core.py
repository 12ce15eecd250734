"""ConfigMaps, Secrets and Services (pkg/apis/core/validation: ValidateConfigMap, ValidateSecret, ValidateService)."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Mapping

from gpustack.apiserver import formats
from gpustack.apiserver.engine import Obj, Report, mapping, rule
from gpustack.apiserver.pod import validate_node_selector

# core.MaxSecretSize, which ValidateConfigMap applies to ConfigMaps too.
MAX_DATA_SIZE = 1024 * 1024
SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName")
TRAFFIC_POLICIES = ("Cluster", "Local")
PROTOCOLS = ("TCP", "UDP", "SCTP")
# validateSecret's per-type required keys.
SECRET_TYPE_KEYS = {
    "kubernetes.io/dockerconfigjson": (".dockerconfigjson",),
    "kubernetes.io/dockercfg": (".dockercfg",),
    "kubernetes.io/tls": ("tls.crt", "tls.key"),
    "kubernetes.io/ssh-auth": ("ssh-privatekey",),
}
# What an offline render holds where a Pulumi secret was (gpustack.mockrun.MASKED).
MASKED = "[secret]"


def _data_sections(obj: Obj) -> list[tuple[str, Mapping[str, Any]]]:
    sections = ["data", "binaryData"] if obj.get("kind") == "ConfigMap" else ["data", "stringData"]
    return [(s, mapping(obj.get(s))) for s in sections]


@rule("data-keys", "k8s.io/kubernetes/pkg/apis/core/validation.ValidateConfigMap/ValidateSecret (keys: IsConfigMapKey; "
      "a key in data and binaryData at once is a duplicate)", kinds=("ConfigMap", "Secret"))
def data_keys(obj: Obj, report: Report) -> None:
    seen: set[str] = set()
    for section, data in _data_sections(obj):
        for key in data:
            for message in formats.is_config_map_key(str(key)):
                report(f"{section}[{str(key)[:80]}]", f"Invalid value {str(key)[:80]!r}: {message}")
            if key in seen and section == "binaryData":
                report(f"{section}[{key}]", f"Invalid value {key!r}: duplicate of key present in data")
            seen.add(str(key))


def _size(obj: Obj) -> int:
    total = 0
    for section, data in _data_sections(obj):
        for value in data.values():
            text = str(value)
            if section == "data" and obj.get("kind") == "Secret" or section == "binaryData":
                try:
                    total += len(base64.b64decode(text, validate=True))
                    continue
                except (binascii.Error, ValueError):
                    pass
            total += len(text.encode())
    return total


@rule("data-size", "k8s.io/kubernetes/pkg/apis/core/validation.ValidateConfigMap/ValidateSecret (at most core.MaxSecretSize, 1 MiB)",
      kinds=("ConfigMap", "Secret"))
def data_size(obj: Obj, report: Report) -> None:
    size = _size(obj)
    if size > MAX_DATA_SIZE:
        report("data", f"Too long: must have at most {MAX_DATA_SIZE} bytes (has {size})")


@rule("secret-type", "k8s.io/kubernetes/pkg/apis/core/validation.ValidateSecret (the keys and contents each type requires)",
      kinds=("Secret",))
def secret_type(obj: Obj, report: Report) -> None:
    type_ = obj.get("type") or "Opaque"
    keys = set(mapping(obj.get("data"))) | set(mapping(obj.get("stringData")))
    for key in SECRET_TYPE_KEYS.get(type_, ()):
        if key not in keys:
            report(f"data[{key}]", f"Required value: a {type_} Secret holds {key}")
    if type_ == "kubernetes.io/dockerconfigjson":
        raw = mapping(obj.get("stringData")).get(".dockerconfigjson")
        encoded = mapping(obj.get("data")).get(".dockerconfigjson")
        if raw is None and isinstance(encoded, str) and encoded != MASKED:
            try:
                raw = base64.b64decode(encoded, validate=True).decode()
            except (binascii.Error, ValueError):
                report("data[.dockerconfigjson]", "Invalid value: not base64")
                return
        if isinstance(raw, str) and raw != MASKED:
            try:
                json.loads(raw)
            except ValueError:
                report("data[.dockerconfigjson]", "Invalid value: invalid JSON")


@rule("service-ports", "k8s.io/kubernetes/pkg/apis/core/validation.ValidateService and validateServicePort (names: DNS-1123 "
      "labels, required with several ports, unique; port 1..65535; targetPort a number or an IANA name)", kinds=("Service",))
def service_ports(obj: Obj, report: Report) -> None:
    spec = mapping(obj.get("spec"))
    ports = spec.get("ports") or []
    if not ports and spec.get("type") != "ExternalName" and spec.get("clusterIP") != "None":
        report("spec.ports", "Required value")
    names: set[str] = set()
    keys: set[tuple] = set()
    for i, port in enumerate(ports):
        here = f"spec.ports[{i}]"
        name = port.get("name") or ""
        if not name and len(ports) > 1:
            report(f"{here}.name", "Required value")
        if name:
            for message in formats.is_dns1123_label(name):
                report(f"{here}.name", f"Invalid value {name[:80]!r}: {message}")
            if name in names:
                report(f"{here}.name", f"Duplicate value: {name!r}")
            names.add(name)
        for message in formats.is_port_number(port.get("port")):
            report(f"{here}.port", f"Invalid value {port.get('port')!r}: {message}")
        protocol = port.get("protocol", "TCP")
        if protocol not in PROTOCOLS:
            report(f"{here}.protocol", f"Unsupported value {protocol!r}: supported values: {', '.join(PROTOCOLS)}")
        key = (port.get("port"), protocol)
        if key in keys:
            report(here, f"Duplicate value: port {key[0]}/{key[1]}")
        keys.add(key)
        target = port.get("targetPort")
        if isinstance(target, str):
            for message in formats.is_port_name(target):
                report(f"{here}.targetPort", f"Invalid value {target[:80]!r}: {message}")
        elif target is not None:
            for message in formats.is_port_number(target):
                report(f"{here}.targetPort", f"Invalid value {target!r}: {message}")


@rule("service-spec", "k8s.io/kubernetes/pkg/apis/core/validation.ValidateService (type, internalTrafficPolicy, selector labels)",
      kinds=("Service",))
def service_spec(obj: Obj, report: Report) -> None:
    spec = mapping(obj.get("spec"))
    type_ = spec.get("type", "ClusterIP")
    if type_ not in SERVICE_TYPES:
        report("spec.type", f"Unsupported value {type_!r}: supported values: {', '.join(SERVICE_TYPES)}")
    for field in ("internalTrafficPolicy", "externalTrafficPolicy"):
        policy = spec.get(field)
        if policy is not None and policy not in TRAFFIC_POLICIES:
            report(f"spec.{field}", f"Unsupported value {policy!r}: supported values: {', '.join(TRAFFIC_POLICIES)}")
    if spec.get("externalTrafficPolicy") is not None and type_ not in ("NodePort", "LoadBalancer"):
        report("spec.externalTrafficPolicy", "Invalid value: may only be set for externally-accessible services")
    validate_node_selector(spec.get("selector"), "spec.selector", report)
