"""GPUDirect Storage, GDRCopy and RDMA, and the checks that the drivers they need can carry them."""

from __future__ import annotations

import re

from pydantic import StrictBool

from components.catalogs import catalog
from components.config.base import DIGEST, _Model


class Rdma(_Model):
    """GPUDirect RDMA: the driver pods build and keep loaded nvidia-peermem against the node's MOFED."""

    enabled: StrictBool = False
    # MOFED installed on the host (peermem builds against /usr/src) rather than by NVIDIA's Network Operator
    # (/run/mellanox/drivers).
    use_host_mofed: StrictBool = False


class GpuDirect(_Model):
    """Stack-wide, as ClusterPolicy's `gds`, `gdrcopy` and `driver.rdma` are: every driver gpu-stack deploys gets
    the sidecars, and the validator checks the modules on every container node (host-driver nodes must have them
    loaded by the host)."""

    gds: StrictBool = False
    gdrcopy: StrictBool = False
    rdma: Rdma = Rdma()

    @property
    def validated_components(self) -> tuple[str, ...]:
        """The validator components (COMPONENT=...) that check the modules, in the operator's order."""
        wanted = (("nvidia-fs", self.gds), ("gdrcopy", self.gdrcopy), ("nvidia-peermem", self.rdma.enabled))
        return tuple(component for component, on in wanted if on)


def gds_needs_open_modules(gds_version: str) -> bool:
    """A digest hides the release; every nvidia-fs NVIDIA still publishes needs the open modules, so assume so."""
    numbers = re.findall(r"[0-9]+", gds_version.split("-")[0])
    if DIGEST.fullmatch(gds_version) or len(numbers) < 3:
        return True
    return tuple(int(n) for n in numbers[:3]) >= catalog.GDS_MIN_VERSION_FOR_OPEN_MODULES
