"""The driver's images, per node OS (the operator's resolveDriverTag): the driver and its GPUDirect sidecars get
`-<osTag>` appended to a tag, never to a digest, so each driver DaemonSet runs the build for its nodes' OS. Their
repository and version are resolved with every other operand's in components/config/images.py."""

from __future__ import annotations

from components.config.images import parts
from components.config.keys import composed, derived
from components.config.stack import StackConfig


def os_tagged(repository: str, version: str, os_tag: str) -> str:
    """The driver's (and the GPUDirect sidecars') reference on one OS (resolveDriverTag): a digest already names one
    image; a tag gets the OS suffix."""
    reference = f"{repository}@{version}" if version.startswith("sha256:") else f"{repository}:{version}-{os_tag}"
    return composed(reference, version=version, repository=repository, os=os_tag)


def sidecar_parts(cfg: StackConfig, component: str) -> tuple[str, str]:
    """A GPUDirect sidecar's repository and version; the node's OS tag is appended per driver DaemonSet."""
    repository, name, version = parts(cfg, component)
    return derived(f"{repository}/{name}", repository, name), version
