"""What NFD's chart 0.19.0 renders for release `node-feature-discovery`, apart from the stack's choices: the
chart's object names and labels, its pod defaults (NFD:values.yaml), its CRDs (components/catalogs/nfd_crds.yaml),
the ConfigMap text as Helm renders it (whose sha256 the chart puts on the pod templates), and the builders of the
chart's metadata and pod specs.

Kept apart from the NodeFeatureDiscovery component (components/states/nfd.py, which holds the operator's values,
the RBAC rules and the objects it registers, and whose docstring names the sources) so that the state module stays
readable. Everything here is pure: reading the CRD file and reproducing Helm's output byte for byte.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import yaml
from pulumi_kubernetes.core.v1 import (
    CapabilitiesArgs,
    ContainerArgs,
    ContainerPortArgs,
    HTTPGetActionArgs,
    LocalObjectReferenceArgs,
    PodSecurityContextArgs,
    PodSpecArgs,
    PodTemplateSpecArgs,
    ProbeArgs,
    ResourceRequirementsArgs,
    SecurityContextArgs,
)
from pulumi_kubernetes.meta.v1 import LabelSelectorArgs, ObjectMetaArgs

from components.catalogs import catalog
from components.config import DaemonSets
from components.kit.builders import meta

# The Helm release earlier versions installed; the chart names every object after it (its `fullname`).
RELEASE = "node-feature-discovery"
MASTER = f"{RELEASE}-master"
WORKER = f"{RELEASE}-worker"
GC = f"{RELEASE}-gc"
MASTER_CONF = f"{MASTER}-conf"
WORKER_CONF = f"{WORKER}-conf"
MASTER_CONF_KEY = "nfd-master.conf"
WORKER_CONF_KEY = "nfd-worker.conf"
# Each of master, worker and gc runs as its own ServiceAccount, as the chart's defaults name them
# (NFD:templates/_helpers.tpl `*.serviceAccountName`: the fullname, `-worker`, `-gc`). The operator's values give all
# three the master's, so that every node's worker token carried the master's cluster-wide node writes; gpu-stack
# keeps the chart's split: the worker, on every node, only writes NodeFeature objects in its namespace.
SERVICE_ACCOUNTS = {"master": RELEASE, "worker": WORKER, "gc": GC}

# --- labels -----------------------------------------------------------------------------------------------------

NAME_LABEL = "app.kubernetes.io/name"
INSTANCE_LABEL = "app.kubernetes.io/instance"
ROLE_LABEL = "role"
SELECTOR_LABELS = {NAME_LABEL: catalog.NFD_CHART, INSTANCE_LABEL: RELEASE}
# The chart's common labels; `meta` adds managed-by (gpu-stack, where the chart says Helm).
CHART_LABELS = {
    "helm.sh/chart": f"{catalog.NFD_CHART}-{catalog.NFD_CHART_VERSION}",
    **SELECTOR_LABELS,
    "app.kubernetes.io/version": catalog.NFD_IMAGE[1],
}
# server-side apply takes the fields Helm's field manager still owns on the objects of a migrated release
PATCH_FORCE = {"pulumi.com/patchForce": "true"}
CONFIG_CHECKSUM = "checksum/config"

# --- the chart's pod settings (NFD:values.yaml defaults) ---------------------------------------------------------

PORT = 8080
PORT_NAME = "http"
HEALTH_PATH = "/healthz"
CONFIG_DIR = "/etc/kubernetes/node-feature-discovery"
# the worker's hook directory, written with its trailing slash as the chart writes it (host path and mount)
FEATURES_DIR = f"{CONFIG_DIR}/features.d/"
DNS_POLICY = "ClusterFirstWithHostNet"
GC_INTERVAL = "1h"
WORKER_OWNER_REFS = ("pod", "ds")
WORKER_MAX_UNAVAILABLE = "10%"
# volume -> (host path, mount path), read-only, in the chart's order
WORKER_HOST_MOUNTS: dict[str, tuple[str, str]] = {
    "host-boot": ("/boot", "/host-boot"),
    "host-os-release": ("/etc/os-release", "/host-etc/os-release"),
    "host-sys": ("/sys", "/host-sys"),
    "host-usr-lib": ("/usr/lib", "/host-usr/lib"),
    "host-lib": ("/lib", "/host-lib"),
    "host-proc-swaps": ("/proc/swaps", "/host-proc/swaps"),
    "features-d": (FEATURES_DIR, FEATURES_DIR),
}
# container -> (memory limit, cpu request, memory request)
RESOURCES = {"master": ("4Gi", "100m", "128Mi"), "worker": ("512Mi", "5m", "64Mi"), "gc": ("1Gi", "10m", "128Mi")}
RESTRICTED = SecurityContextArgs(
    allow_privilege_escalation=False,
    capabilities=CapabilitiesArgs(drop=["ALL"]),
    read_only_root_filesystem=True,
    run_as_non_root=True,
)

# --- the chart's CRDs (its crds/ folder) ------------------------------------------------------------------------

CRD_FILE = Path(__file__).resolve().parent.parent / "catalogs" / "nfd_crds.yaml"


@functools.lru_cache(maxsize=1)
def _crd_text_documents() -> tuple[str, ...]:
    # Parsed once per process (the CRDs are large and every render needs them), kept as JSON so that each caller
    # gets its own copy to build objects from.
    return tuple(json.dumps(doc) for doc in yaml.safe_load_all(CRD_FILE.read_text()) if doc)


def crd_documents() -> list[dict[str, Any]]:
    return [json.loads(doc) for doc in _crd_text_documents()]


# --- what Helm renders, for the ConfigMaps' data and the pods' checksum/config ----------------------------------

# Plain YAML scalars that go-yaml (Helm's toYaml) writes unquoted; anything that could read as another type is
# double-quoted, such as the PCI classes (octal-looking numbers).
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "y", "n", "null"}


def _scalar(value: str) -> str:
    return value if _PLAIN.fullmatch(value) and value.lower() not in _YAML_WORDS else json.dumps(value)


def _yaml_lines(value: Any, indent: str = "") -> list[str]:
    lines: list[str] = []
    if isinstance(value, dict):
        for key in sorted(value):
            item = value[key]
            if isinstance(item, (dict, list)) and item:
                lines.append(f"{indent}{key}:")
                lines += _yaml_lines(item, indent + "  " if isinstance(item, dict) else indent)
            else:
                lines.append(f"{indent}{key}: {_scalar(str(item))}")
    else:
        for item in value:
            lines.append(f"{indent}- {_scalar(str(item))}")
    return lines


def config_yaml(config: dict[str, Any]) -> str:
    """A config as the chart writes it into its ConfigMap: Helm's `toYaml` (sorted keys, sequences at their key's
    indentation), without the final newline."""
    return "\n".join(_yaml_lines(config))


def helm_config_text(name: str, namespace: str, key: str, config: dict[str, Any]) -> str:
    """NFD:templates/nfd-{master,worker}-conf.yaml as Helm renders it for release `node-feature-discovery` (the text
    whose sha256 the chart puts on the pod template), Helm's own labels included."""
    labels = {**CHART_LABELS, "app.kubernetes.io/version": json.dumps(catalog.NFD_IMAGE[1]), "app.kubernetes.io/managed-by": "Helm"}
    label_lines = "".join(f"\n    {k}: {v}" for k, v in labels.items())
    config_lines = "".join(f"\n    {line}" for line in config_yaml(config).split("\n"))
    return (
        f"\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {namespace}\n  labels:{label_lines}"
        f"\ndata:\n  {key}: |-{config_lines}\n"
    )


def config_checksum(name: str, namespace: str, key: str, config: dict[str, Any]) -> str:
    return hashlib.sha256(helm_config_text(name, namespace, key, config).encode()).hexdigest()


# --- builders ---------------------------------------------------------------------------------------------------


def chart_meta(
    name: str,
    namespace: Optional[str] = None,
    labels: Optional[dict[str, str]] = None,
    annotations: Optional[dict[str, str]] = None,
) -> ObjectMetaArgs:
    return meta(name, namespace, {**CHART_LABELS, **(labels or {})}, {**(annotations or {}), **PATCH_FORCE})


def health_probe(**fields: int) -> ProbeArgs:
    return ProbeArgs(http_get=HTTPGetActionArgs(path=HEALTH_PATH, port=PORT_NAME), **fields)


def container_resources(container: str) -> ResourceRequirementsArgs:
    limit, cpu, memory = RESOURCES[container]
    return ResourceRequirementsArgs(limits={"memory": limit}, requests={"cpu": cpu, "memory": memory})


def http_ports() -> list[ContainerPortArgs]:
    return [ContainerPortArgs(container_port=PORT, name=PORT_NAME)]


@dataclass(frozen=True)
class Pods:
    """What every NFD pod takes from the stack: the operands' priority class (and, on the worker, their
    tolerations), the image, and the registry's pull secrets (the chart's `imagePullSecrets`)."""

    daemonsets: DaemonSets
    image: str
    pull_secrets: tuple[str, ...]


def pod_spec(pods: Pods, role: str, container: ContainerArgs, **fields: Any) -> PodSpecArgs:
    return PodSpecArgs(
        dns_policy=DNS_POLICY,
        priority_class_name=pods.daemonsets.priority_class_name or None,
        image_pull_secrets=[LocalObjectReferenceArgs(name=s) for s in pods.pull_secrets] or None,
        service_account_name=SERVICE_ACCOUNTS[role],
        security_context=PodSecurityContextArgs(),
        host_network=False,
        containers=[container],
        **fields,
    )


def pod_template(role: str, spec: PodSpecArgs, checksum: Optional[str] = None) -> PodTemplateSpecArgs:
    return PodTemplateSpecArgs(
        metadata=ObjectMetaArgs(
            labels={**SELECTOR_LABELS, ROLE_LABEL: role},
            annotations={CONFIG_CHECKSUM: checksum} if checksum else None,
        ),
        spec=spec,
    )


def role_selector(role: str) -> LabelSelectorArgs:
    return LabelSelectorArgs(match_labels={**SELECTOR_LABELS, ROLE_LABEL: role})
