"""Cross-key rules of `gpu-stack:gpudirect`: GDS, GDRCopy and RDMA against the driver mode and versions."""

from __future__ import annotations

from components.config.base import NAMESPACE
from components.config.stack import StackConfig


def gpudirect_checks(cfg: StackConfig) -> list[tuple[str, str]]:
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
