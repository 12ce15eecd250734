"""`gpustack import --from-cluster`: the import's inputs read from a running cluster through the kubeconfig, instead
of files exported one by one: the ClusterPolicy, the NVIDIADriver objects (when the ClusterPolicy uses them), the
nodes, every ConfigMap the ClusterPolicy and the NVIDIADrivers name (in the operator's namespace) and, on
OpenShift, the cluster version, the driver-toolkit ImageStream and the cluster Proxy.

Read-only: only GET and LIST requests (the kubernetes client's own calls). A request the cluster refuses with 403 is
collected, and the import stops with one line per missing permission (verb, resource, namespace) so a cluster
admin can grant exactly those; anything else that goes wrong (no kubeconfig, an unknown context, an unreachable
API server) is one line too. The documents returned have the shape `kubectl get -o yaml` prints, so the rest of
the import cannot tell them from files.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from gpustack.importer.common import ImportInputError

# (API group, version, resource) the import lists or gets; the core group is "".
CLUSTER_POLICIES = ("nvidia.com", "v1", "clusterpolicies")
NVIDIA_DRIVERS = ("nvidia.com", "v1alpha1", "nvidiadrivers")
CLUSTER_VERSIONS = ("config.openshift.io", "v1", "clusterversions")
PROXIES = ("config.openshift.io", "v1", "proxies")
IMAGE_STREAMS = ("image.openshift.io", "v1", "imagestreams")
REQUEST_TIMEOUT_SECONDS = 60
NODE_PAGE = 500  # nodes per LIST page: a 10,000-node cluster is 20 requests, never one huge response
# The ClusterPolicy and NVIDIADriver fields that name a ConfigMap in the operator's namespace.
POLICY_CONFIGMAPS = ("devicePlugin.config.name", "migManager.config.name", "dcgmExporter.config.name",
                     "vgpuDeviceManager.config.name", "driver.repoConfig.configMapName", "driver.certConfig.name",
                     "driver.kernelModuleConfig.name", "vgpuManager.kernelModuleConfig.name", "migManager.gpuClientsConfig.name")
DRIVER_CONFIGMAPS = ("repoConfig.name", "certConfig.name", "kernelModuleConfig.name")


@dataclass
class ClusterInputs:
    """What `run` otherwise reads from files, as documents."""

    cluster_policy: Any
    nodes: Any
    configmaps: list[tuple[str, Any]] = field(default_factory=list)
    nvidia_drivers: list[tuple[str, Any]] = field(default_factory=list)
    openshift_version: Optional[str] = None
    imagestream: Optional[Any] = None
    proxy: Optional[Any] = None
    context: str = ""


def _get(data: Any, path: str) -> Any:
    for part in path.split("."):
        data = data.get(part) if isinstance(data, dict) else None
    return data


def referenced_configmaps(policy_spec: dict, drivers: list[dict]) -> list[str]:
    names = {_get(policy_spec, path) for path in POLICY_CONFIGMAPS}
    names |= {_get(d.get("spec") or {}, path) for d in drivers for path in DRIVER_CONFIGMAPS}
    return sorted(n for n in names if isinstance(n, str) and n)


class _Denied(Exception):
    """403 on one request: recorded, the reading goes on, the import stops with every one."""


class ClusterReader:
    """GETs and LISTs through one kubernetes ApiClient; 403s are collected as missing permissions."""

    def __init__(self, api_client: Any):
        self.api = api_client
        self.missing: list[str] = []

    def _call(self, path: str, verb: str, what: str, namespace: Optional[str], query: Optional[list] = None) -> Optional[dict]:
        """One GET through the client's own request path (its kubeconfig auth, TLS and proxy settings)."""
        try:
            method, url, headers, body, post = self.api.param_serialize(
                "GET", path, query_params=query or [], header_params={"Accept": "application/json"}, auth_settings=["BearerToken"])
            response = self.api.call_api(method, url, header_params=headers, body=body, post_params=post,
                                         _request_timeout=REQUEST_TIMEOUT_SECONDS)
            data = response.read()
        except Exception as exc:  # urllib3's connection errors, TLS, timeouts: one line, never a traceback
            raise ImportInputError(f"--from-cluster: {verb} {what}: cannot reach the API server ({type(exc).__name__}: {exc})") from None
        if response.status == 403:
            where = f"in namespace {namespace}" if namespace else "cluster-wide"
            self.missing.append(f"{verb} {what} {where}")
            raise _Denied()
        if response.status == 404:
            return None
        if response.status >= 400:
            raise ImportInputError(f"--from-cluster: {verb} {what}: the API server answered {response.status} {response.reason}")
        try:
            return json.loads(data)
        except ValueError:
            raise ImportInputError(f"--from-cluster: {verb} {what}: the API server's answer is not JSON") from None

    def _list(self, group_version_resource: tuple[str, str, str], kind: str, namespace: Optional[str] = None,
              page: Optional[int] = None) -> Optional[dict]:
        group, version, resource = group_version_resource
        base = f"/apis/{group}/{version}" if group else f"/api/{version}"
        path = f"{base}/namespaces/{namespace}/{resource}" if namespace else f"{base}/{resource}"
        what = f"{resource}.{group}" if group else resource
        items: list[dict] = []
        token = None
        while True:
            query = [("limit", page)] if page else []
            if token:
                query.append(("continue", token))
            answer = self._call(path, "list", what, namespace, query)
            if answer is None:
                return None
            items += [{"apiVersion": f"{group}/{version}" if group else version, "kind": kind, **item}
                      for item in answer.get("items") or []]
            token = (answer.get("metadata") or {}).get("continue")
            if not token:
                return {"apiVersion": "v1", "kind": "List", "items": items}

    def _read(self, group_version_resource: tuple[str, str, str], kind: str, name: str, namespace: Optional[str] = None) -> Optional[dict]:
        group, version, resource = group_version_resource
        base = f"/apis/{group}/{version}" if group else f"/api/{version}"
        path = f"{base}/namespaces/{namespace}/{resource}/{name}" if namespace else f"{base}/{resource}/{name}"
        what = f"{resource}.{group}" if group else resource
        found = self._call(path, "get", what, namespace)
        return {"apiVersion": f"{group}/{version}" if group else version, "kind": kind, **found} if found else None

    def attempt(self, read: Callable[[], Any]) -> Any:
        try:
            return read()
        except _Denied:
            return None

    def read(self, namespace: Optional[str]) -> ClusterInputs:
        policies = self.attempt(lambda: self._list(CLUSTER_POLICIES, "ClusterPolicy"))
        nodes = self.attempt(lambda: self._list(("", "v1", "nodes"), "Node", page=NODE_PAGE))
        if policies is None and not self.missing:
            raise ImportInputError("--from-cluster: the cluster has no ClusterPolicy CRD (clusterpolicies.nvidia.com): "
                                   "is the GPU Operator installed?")
        active = [p for p in (policies or {}).get("items", []) if (p.get("status") or {}).get("state") != "ignored"]
        spec = (active[0].get("spec") or {}) if len(active) == 1 else {}
        drivers: list[dict] = []
        if (spec.get("driver") or {}).get("useNvidiaDriverCRD") is True:
            listed = self.attempt(lambda: self._list(NVIDIA_DRIVERS, "NVIDIADriver"))
            drivers = (listed or {}).get("items", [])
        operator_namespace = namespace or (active[0].get("status") or {}).get("namespace") if len(active) == 1 else namespace
        configmaps = []
        for name in referenced_configmaps(spec, drivers):
            if not operator_namespace:
                break
            found = self.attempt(lambda name=name: self._read(("", "v1", "configmaps"), "ConfigMap", name, operator_namespace))
            if found is not None:
                configmaps.append((f"configmap {operator_namespace}/{name}", found))
        openshift = self.attempt(lambda: self._read(CLUSTER_VERSIONS, "ClusterVersion", "version"))
        inputs = ClusterInputs(policies, nodes, configmaps, [("nvidiadrivers (cluster)", {"apiVersion": "v1", "kind": "List", "items": drivers})] if drivers else [])
        if openshift is not None:
            version = str(_get(openshift, "status.desired.version") or "")
            inputs.openshift_version = ".".join(version.split(".")[:2]) or None
            inputs.imagestream = self.attempt(lambda: self._read(IMAGE_STREAMS, "ImageStream", "driver-toolkit", "openshift"))
            inputs.proxy = self.attempt(lambda: self._read(PROXIES, "Proxy", "cluster"))
        if self.missing:
            raise ImportInputError("--from-cluster: the kubeconfig's user may not read what the import needs; missing "
                                   "permission(s), each to grant read-only:\n" + "\n".join(f"  {m}" for m in self.missing))
        return inputs


def api_client(kubeconfig: Optional[str], context: Optional[str]) -> tuple[Any, str]:
    """A kubernetes ApiClient for the kubeconfig's context (its current one when none is named), and that context."""
    from kubernetes import config as kube_config
    from kubernetes.config.config_exception import ConfigException

    # $KUBECONFIG as kubectl reads it at run time (the client reads it once, when first imported).
    kubeconfig = kubeconfig or os.environ.get("KUBECONFIG") or None
    try:
        contexts, current = kube_config.list_kube_config_contexts(config_file=kubeconfig)
        names = [c["name"] for c in contexts or []]
        chosen = context or (current or {}).get("name")
        if chosen not in names:
            raise ImportInputError(f"--context {chosen!r}: the kubeconfig has no such context (contexts: {', '.join(names) or 'none'})")
        return kube_config.new_client_from_config(config_file=kubeconfig, context=chosen), chosen
    except ConfigException as exc:
        raise ImportInputError(f"--from-cluster: cannot use the kubeconfig ({exc})") from None


def read_cluster(kubeconfig: Optional[str], context: Optional[str], namespace: Optional[str]) -> ClusterInputs:
    client, chosen = api_client(kubeconfig, context)
    try:
        inputs = ClusterReader(client).read(namespace)
    finally:
        client.close()
    inputs.context = chosen
    return inputs
