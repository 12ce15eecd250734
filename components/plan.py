"""StackPlan: what GpuStack plans before it registers anything, pure.

Every driver-like DaemonSet (the drivers, one per pool and node image; the vGPU manager, one per RHCOS build; the
VFIO manager) is planned up front with its template digest: `node-labeling`, early in the state order, names each
one in the node-pools document that the agents roll by, and the states later in the order register exactly what
was digested. The per-feature driver goldens (tests/driverfeatures.py) read the same plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from components.config import StackConfig
from components.kit.builders import Operands
from components.states.driver.rolled import RolledDaemonSet
from components.states.driver.state import DriverDaemonSet, plan_driver_daemonsets
from components.states.driver.targets import DriverTarget, ValidatedFiles, gpudirect_sidecars, plan_targets, targets_of_pool
from components.states.driver.vgpu_manager import plan_vgpu_managers, vgpu_manager_flavours
from components.states.node_labeler import DriverImage
from components.states.validator import dra_ready_files
from components.states.validator import ready_files as validator_ready_files
from components.states.vfio_manager import plan_vfio_manager


def validated_files(cfg: StackConfig) -> ValidatedFiles:
    """The validator files a driver pod's readiness waits for, by what the stack validates on its nodes."""
    gpudirect = cfg.gpudirect.validated_components
    return ValidatedFiles(
        device_plugin=validator_ready_files(device_plugin=cfg.components.device_plugin, gpudirect=gpudirect),
        dra=dra_ready_files(gpudirect=gpudirect),
    )


@dataclass(frozen=True)
class StackPlan:
    driver_targets: list[DriverTarget]
    drivers: list[DriverDaemonSet]
    vgpu_managers: list[RolledDaemonSet]
    vfio_managers: list[RolledDaemonSet]

    def driver_like_images(self, cfg: StackConfig) -> dict[str, list[DriverImage]]:
        """Each pool's driver-like DaemonSets, which its nodes' agents write as their gpu-stack/driver label and
        roll: a driver pool's drivers (one per node image), a VM pool's vGPU manager (per RHCOS build) or VFIO
        manager."""
        images = {pool.name: [DriverImage(t.daemonset, dict(t.node_labels)) for t in targets_of_pool(self.driver_targets, pool.name)]
                  for pool in cfg.driver_pools}
        rolled = {**{p.name: self.vgpu_managers for p in cfg.pools_of("vm-vgpu")},
                  **{p.name: self.vfio_managers for p in cfg.pools_of("vm-passthrough")}}
        return {**images, **{pool: [DriverImage(r.name, r.node_labels) for r in sets] for pool, sets in rolled.items()}}

    def driver_like_digests(self) -> dict[str, str]:
        """Every driver-like DaemonSet and its template digest: what the agents roll and the final gate awaits."""
        return {**{d.target.daemonset: d.digest for d in self.drivers},
                **{r.name: r.digest for r in [*self.vgpu_managers, *self.vfio_managers]}}


def plan_stack(cfg: StackConfig, ops: Operands) -> StackPlan:
    targets = plan_targets(cfg, ops.images.driver_repository, gpudirect_sidecars(cfg))
    vgpu_managers = []
    if cfg.pools_of("vm-vgpu"):
        assert cfg.vgpu.manager_image is not None  # load_config requires it with a vm-vgpu pool
        vgpu_managers = plan_vgpu_managers(ops, image=cfg.vgpu.manager_image, upgrade=cfg.upgrade,
                                           flavours=vgpu_manager_flavours(cfg), kernel_module_config=cfg.vgpu.kernel_module_config)
    return StackPlan(
        driver_targets=targets,
        drivers=plan_driver_daemonsets(ops, targets, cfg.upgrade, validated_files(cfg), cfg.driver),
        vgpu_managers=vgpu_managers,
        vfio_managers=[plan_vfio_manager(ops)] if cfg.pools_of("vm-passthrough") else [],
    )
