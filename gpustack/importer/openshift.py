"""The import's OpenShift part: what the operator reads from an OpenShift cluster at each reconcile, carried into
`cluster.openshift` (docs/openshift.md).

- `--openshift-version` (`oc get clusterversion`): the cluster is OpenShift; cri-o is its runtime.
- `--imagestream` (`oc get imagestream driver-toolkit -n openshift -o yaml`): one DTK image per RHCOS build, kept
  for the builds the GPU nodes in `--nodes` run, grouped by the OS tag NFD reports for them.
- `--proxy` (`oc get proxy cluster -o yaml`): spec.httpProxy, spec.httpsProxy, status.noProxy, spec.trustedCA.
- `operator.use_ocp_driver_toolkit: false` turns the Driver Toolkit off, as it does in the operator.
"""

from __future__ import annotations

from typing import Any, Optional
from urllib.parse import urlsplit

from components.catalogs.openshift import NFD_OSTREE_VERSION
from components.catalogs.consts import NFD_OS_ID, NFD_OS_VERSION_ID
from gpustack.importer.common import ImportInputError
from node_images.catalog import MAJOR_ONLY_OS


def imagestream_builds(document: Any, where: str) -> dict[str, str]:
    """RHCOS build -> DTK image from the `driver-toolkit` ImageStream, as the operator reads it: tags with a source
    image, `latest` left out."""
    if not isinstance(document, dict) or document.get("kind") != "ImageStream":
        raise ImportInputError(f"{where}: expected the driver-toolkit ImageStream (oc get imagestream driver-toolkit -n openshift -o yaml)")
    builds = {}
    tags = (document.get("spec") or {}).get("tags") or []
    if not isinstance(tags, list):
        raise ImportInputError(f"{where}: spec.tags is not a list")
    for tag in tags:
        if not isinstance(tag, dict):
            continue
        name, source = tag.get("name"), tag.get("from")
        if isinstance(name, str) and name and name != "latest" and isinstance(source, dict) and isinstance(source.get("name"), str):
            builds[name] = source["name"]
    if not builds:
        raise ImportInputError(f"{where}: the ImageStream lists no RHCOS build with an image")
    return builds


def proxy_settings(document: Any, where: str) -> Optional[dict[str, Any]]:
    """`cluster.openshift.proxy` from the cluster Proxy object, or None when it sets no proxy."""
    if not isinstance(document, dict) or document.get("kind") != "Proxy":
        raise ImportInputError(f"{where}: expected the cluster Proxy (oc get proxy cluster -o yaml)")
    spec, status = document.get("spec") or {}, document.get("status") or {}
    proxy: dict[str, Any] = {}
    for key in ("httpProxy", "httpsProxy"):
        value = spec.get(key)
        if isinstance(value, str) and value:
            try:
                parts = urlsplit(value)
            except ValueError:
                raise ImportInputError(f"{where}: spec.{key} is not a URL") from None
            if parts.username is not None or parts.password is not None:
                # never echoed: it holds a credential
                raise ImportInputError(
                    f"{where}: spec.{key} carries credentials, which the stack would hold in plain text; put "
                    "HTTP_PROXY/HTTPS_PROXY into a Secret, name it in driver.secretEnv, and import without --proxy")
            proxy[key] = value
    no_proxy = status.get("noProxy") or spec.get("noProxy")
    if isinstance(no_proxy, str) and no_proxy:
        proxy["noProxy"] = no_proxy
    trusted = spec.get("trustedCA") or {}
    if isinstance(trusted, dict) and trusted.get("name"):
        proxy["trustedCA"] = True
    return proxy or None


def _os_tag(labels: dict[str, str]) -> Optional[str]:
    os_id, version = labels.get(NFD_OS_ID), labels.get(NFD_OS_VERSION_ID)
    if not os_id or not version:
        return None
    return f"{os_id}{version.split('.')[0]}" if os_id in MAJOR_ONLY_OS else f"{os_id}{version}"


class OpenShiftMixin:
    def _openshift(self) -> None:
        facts = self.facts
        if facts.openshift_version is None:
            if facts.imagestream is not None or facts.proxy is not None:
                raise ImportInputError("--imagestream and --proxy describe an OpenShift cluster: give its --openshift-version too")
            return
        self.put("cluster.platform", "openshift")
        openshift: dict[str, Any] = {"version": facts.openshift_version}
        enabled = self.spec.get("operator.use_ocp_driver_toolkit")
        if enabled is False:
            openshift["driverToolkit"] = {"enabled": False}
        elif self.driver_mode == "managed":
            openshift["driverToolkit"] = {"images": self._toolkit_images()}
        if facts.proxy is not None:
            proxy = proxy_settings(facts.proxy, "--proxy")
            if proxy:
                openshift["proxy"] = proxy
        self.put("cluster.openshift", openshift, origin="--openshift-version")

    def _toolkit_images(self) -> dict[str, dict[str, str]]:
        if self.facts.imagestream is None or self.nodes is None:
            raise ImportInputError(
                "an OpenShift cluster with operator-built drivers builds them with the Driver Toolkit: pass "
                "--imagestream (oc get imagestream driver-toolkit -n openshift -o yaml) and --nodes, or set "
                "operator.use_ocp_driver_toolkit: false")
        builds = imagestream_builds(self.facts.imagestream, "--imagestream")
        grouped: dict[str, dict[str, str]] = {}
        for node in self.nodes:
            if not node.is_gpu:
                continue
            build, os_tag = node.labels.get(NFD_OSTREE_VERSION), _os_tag(node.labels)
            if build is None or os_tag is None:
                raise ImportInputError(f"--nodes: GPU node {node.name} has no NFD OS labels (ID, VERSION_ID, OSTREE_VERSION); "
                                       "is the NFD Operator running?")
            if build not in builds:
                raise ImportInputError(f"--nodes: GPU node {node.name} runs RHCOS build {build}, which the ImageStream has "
                                       "no image for; export the ImageStream again after the cluster update settles")
            grouped.setdefault(os_tag, {})[build] = builds[build]
        if not grouped:
            raise ImportInputError("--nodes lists no GPU node, so no RHCOS build is known to keep a DTK image for")
        return {tag: dict(sorted(found.items())) for tag, found in sorted(grouped.items())}
