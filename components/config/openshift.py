"""`gpu-stack:cluster.openshift`: what the GPU Operator reads from an OpenShift cluster at each reconcile, written
into the stack so that it is reviewed like the rest (docs/openshift.md).

- `version`: the cluster's OpenShift version (ClusterVersion), given to the driver as OPENSHIFT_VERSION.
- `driverToolkit`: the Driver Toolkit images, one per RHCOS build the GPU nodes run, grouped by the OS tag NFD
  reports for those nodes (`oc get imagestream driver-toolkit -n openshift`; `gpustack import --imagestream` reads
  it). A managed driver pool then runs one driver DaemonSet per build, each building the modules with its build's
  DTK, as the operator does (`operator.use_ocp_driver_toolkit`, on by default).
- `proxy`: the cluster-wide Proxy (`oc get proxy cluster`), as the driver container's HTTP(S)_PROXY / NO_PROXY, and
  the trusted CA bundle OpenShift injects into `gpu-operator-trusted-ca`.

A proxy URL carrying credentials is refused: it would be written in plain text into the DaemonSet and the Pulumi
state. Such a proxy goes into a Secret named by `driver.secretEnv` (envFrom), which the driver container reads too.
"""

from __future__ import annotations

import re
from typing import Optional
from urllib.parse import urlsplit

from pydantic import Field, StrictBool, field_validator

from components.catalogs.openshift import PROXY_ENV
from components.config import limits
from components.config.base import OS_TAG, _Model, parse_image, shown


OPENSHIFT_VERSION = re.compile(r"^4\.[0-9]{1,2}$")
# An RHCOS build as NFD reports it in system-os_release.OSTREE_VERSION: 416.94.202410211619-0, 9.6.20250523-0.
RHCOS_BUILD = re.compile(r"^[0-9]+(\.[0-9]+)+-[0-9]+$")
MAX_PROXY_LENGTH = 2048


def _proxy_url(value: Optional[str]) -> Optional[str]:
    if value is None:
        return value
    if len(value) > MAX_PROXY_LENGTH or any(c.isspace() or not c.isprintable() for c in value):
        raise ValueError(f"is not a proxy URL (at most {MAX_PROXY_LENGTH} printable characters, no spaces)")
    try:
        parts = urlsplit(value)
    except ValueError:
        raise ValueError("is not a proxy URL such as http://proxy.internal:3128") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("is not a proxy URL such as http://proxy.internal:3128 (scheme http or https, and a host)")
    if parts.username is not None or parts.password is not None:
        # Never echoed: the value holds a credential.
        raise ValueError(
            "carries credentials, which would be written in plain text into the DaemonSet and the Pulumi state; "
            "put HTTP_PROXY/HTTPS_PROXY into a Secret and name it in driver.secretEnv instead"
        )
    return value


class Proxy(_Model):
    http_proxy: Optional[str] = Field(default=None, description="The cluster Proxy's spec.httpProxy (no credentials).")
    https_proxy: Optional[str] = Field(default=None, description="The cluster Proxy's spec.httpsProxy (no credentials).")
    no_proxy: Optional[str] = Field(default=None, max_length=MAX_PROXY_LENGTH, description="The cluster Proxy's status.noProxy.")
    trusted_ca: StrictBool = Field(
        default=False,
        alias="trustedCA",  # as the Proxy object spells it
        description="The Proxy names a trustedCA: render gpu-operator-trusted-ca for OpenShift to fill, and mount it into the driver.",
    )

    _urls = field_validator("http_proxy", "https_proxy")(_proxy_url)

    @field_validator("no_proxy")
    @classmethod
    def _no_proxy(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and any(c.isspace() or not c.isprintable() for c in value):
            raise ValueError("is a comma-separated list of hosts, domains and CIDRs, without spaces")
        return value

    @property
    def env(self) -> tuple[tuple[str, str], ...]:
        """The operator's proxy env: each variable upper and lower case, only when set."""
        pairs = zip(PROXY_ENV, (self.http_proxy, self.https_proxy, self.no_proxy), strict=True)
        return tuple((name, value) for upper, value in pairs if value for name in (upper, upper.lower()))


class DriverToolkit(_Model):
    enabled: StrictBool = Field(
        default=True, description="Build managed drivers with the cluster's Driver Toolkit (operator.use_ocp_driver_toolkit)."
    )
    images: dict[str, dict[str, str]] = Field(
        default={},
        description="OS tag (as NFD reports the nodes: rhcos4.16) -> RHCOS build (OSTREE_VERSION) -> its DTK image, "
        "from `oc get imagestream driver-toolkit -n openshift`.",
    )

    @field_validator("images")
    @classmethod
    def _images(cls, images: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        if len(images) > limits.MAX_NODE_IMAGES_PER_POOL:
            raise ValueError(f"lists {len(images)} OS tags; at most {limits.MAX_NODE_IMAGES_PER_POOL}")
        for os_tag, builds in images.items():
            if not OS_TAG.fullmatch(os_tag):
                raise ValueError(f"{shown(os_tag)} is not an OS tag such as rhcos4.16 (NFD's ID and VERSION_ID)")
            if not builds or len(builds) > limits.MAX_NODE_IMAGES_PER_POOL:
                raise ValueError(f"{os_tag}: list 1 to {limits.MAX_NODE_IMAGES_PER_POOL} RHCOS builds, each with its DTK image")
            for build, image in builds.items():
                if not RHCOS_BUILD.fullmatch(build) or len(build) > 40:
                    raise ValueError(f"{os_tag}: {shown(build)} is not an RHCOS build such as 416.94.202410211619-0 (OSTREE_VERSION)")
                if not isinstance(image, str):
                    raise ValueError(f"{os_tag}.{build}: the DTK image is a string (an image reference)")
                ref = parse_image(image)
                if ref.digest is None and ref.tag in (None, "latest"):
                    raise ValueError(f"{os_tag}.{build}: {shown(image)} is not pinned; the ImageStream gives each build's image by digest")
        return images

    def builds(self, os_tag: str) -> dict[str, str]:
        return self.images.get(os_tag, {}) if self.enabled else {}


class OpenShift(_Model):
    version: str = Field(description="The cluster's OpenShift version, major.minor (oc get clusterversion): the driver's OPENSHIFT_VERSION.")
    driver_toolkit: DriverToolkit = Field(default=DriverToolkit(), description="Driver Toolkit builds of managed drivers.")
    proxy: Optional[Proxy] = Field(default=None, description="The cluster-wide Proxy the driver downloads through.")

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        if not OPENSHIFT_VERSION.fullmatch(value):
            raise ValueError(f"{shown(value)} is not an OpenShift version such as 4.16 (major.minor)")
        return value
