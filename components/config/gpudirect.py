"""GPUDirect Storage, GDRCopy and RDMA, and the checks that the drivers they need can carry them."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pydantic import StrictBool

from components.catalogs import catalog
from components.config.base import DIGEST, NAMESPACE, _Model

if TYPE_CHECKING:
    from components.config.stack import StackConfig


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


def _gpudirect_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    gpudirect = cfg.gpudirect
    problems: list[tuple[str, str]] = []
    if gpudirect.rdma.use_host_mofed and not gpudirect.rdma.enabled:
        problems.append((f"{NAMESPACE}:gpudirect.rdma.useHostMofed", "only used with gpudirect.rdma.enabled: true"))
    precompiled = [p.name for p in cfg.driver_pools if cfg.pool_driver(p).mode == "precompiled"]
    # NVIDIA builds nvidia-fs and gdrdrv on the node against the driver's sources, which precompiled images lack
    # (the operator refuses the same combination).
    for key, on in (("gds", gpudirect.gds), ("gdrcopy", gpudirect.gdrcopy)):
        if on and precompiled:
            problems.append(
                (
                    f"{NAMESPACE}:gpudirect.{key}",
                    f"cannot be built against precompiled drivers (pools {', '.join(precompiled)}); use driver mode "
                    "'managed' for these pools or turn it off",
                )
            )
    if cfg.gds_forces_open_modules:
        proprietary = [p.name for p in cfg.driver_pools if cfg.pool_driver(p).kernel_module_type == "proprietary"]
        if proprietary:
            problems.append(
                (
                    f"{NAMESPACE}:gpudirect.gds",
                    f"nvidia-fs {cfg.versions.gds} loads only with the open kernel modules (from 2.17.5), but pools "
                    f"{', '.join(proprietary)} set kernelModuleType 'proprietary'; allowed values with GDS: auto, open",
                )
            )
    if gpudirect.validated_components and not cfg.container_pools:
        problems.append((f"{NAMESPACE}:gpudirect", "GPUDirect serves container pools, and this stack has none; remove it"))
    return problems
