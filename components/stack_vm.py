"""VmStates: GpuStack's factories for the VM-workload states (vGPU, sandbox, VFIO, Kata, CC, KubeVirt), and the
driver-like DaemonSets of every pool (drivers, vGPU and VFIO managers) that the agents roll.

A mixin only to keep components/stack.py short: GpuStack.__init__ still lists every state's factory, these
among them, in state order (components/states/order.py), and each component is a child of the GpuStack.
"""

from __future__ import annotations

from typing import Callable, Optional

import pulumi

from components.config import StackConfig
from components.kit.builders import Operands
from components.states.cc_manager import CcManager
from components.states.kata_device_plugin import KataDevicePlugin
from components.states.kubevirt import KubeVirtHostDevices, permitted_mediated_devices, permitted_pci_devices
from components.states.sandbox_device_plugin import SandboxDevicePlugin
from components.states.sandbox_validator import SandboxValidator
from components.states.driver.rolled import RolledDaemonSet
from components.states.driver.targets import DriverTarget, targets_of_pool
from components.states.node_labeler import DriverImage
from components.states.driver.state import DriverDaemonSet
from components.states.vfio_manager import VfioManager, plan_vfio_manager
from components.states.vgpu_device_manager import VgpuDeviceManager
from components.states.driver.vgpu_manager import VgpuManager, plan_vgpu_managers, vgpu_manager_flavours


class VmStates:
    """The factories of the states for pools running VMs (`vm-passthrough`, `vm-vgpu`); GpuStack sets the fields."""

    _cfg: StackConfig
    _ops: Operands
    _opts: Callable[[], pulumi.ResourceOptions]

    _driver_targets: list[DriverTarget]
    _driver_daemonsets: list[DriverDaemonSet]
    _vgpu_managers: list[RolledDaemonSet]
    _vfio_managers: list[RolledDaemonSet]

    def _vm_pools(self) -> bool:
        return bool(self._cfg.pools_of("vm-passthrough", "vm-vgpu"))

    def _plan_vm_managers(self) -> None:
        """The vGPU and VFIO manager DaemonSets, planned up front as the drivers are: `node-labeling`, earlier in the
        state order, names each one's template digest, and the node agents roll them within the fleet's budget."""
        cfg = self._cfg
        self._vgpu_managers = []
        if cfg.pools_of("vm-vgpu"):
            assert cfg.vgpu.manager_image is not None  # load_config requires it with a vm-vgpu pool
            self._vgpu_managers = plan_vgpu_managers(
                self._ops, image=cfg.vgpu.manager_image, upgrade=cfg.upgrade, flavours=vgpu_manager_flavours(cfg),
                kernel_module_config=cfg.vgpu.kernel_module_config)
        self._vfio_managers = [plan_vfio_manager(self._ops)] if cfg.pools_of("vm-passthrough") else []

    def _driver_like_images(self) -> dict[str, list[DriverImage]]:
        """Each pool's driver-like DaemonSets, which its nodes' agents write as their gpu-stack/driver label and roll:
        a driver pool's drivers (one per node image), a VM pool's vGPU manager (per RHCOS build) or VFIO manager."""
        images = {pool.name: [DriverImage(t.daemonset, dict(t.node_labels)) for t in targets_of_pool(self._driver_targets, pool.name)]
                  for pool in self._cfg.driver_pools}
        rolled = {**{p.name: self._vgpu_managers for p in self._cfg.pools_of("vm-vgpu")},
                  **{p.name: self._vfio_managers for p in self._cfg.pools_of("vm-passthrough")}}
        return {**images, **{pool: [DriverImage(r.name, r.node_labels) for r in sets] for pool, sets in rolled.items()}}

    def _driver_like_digests(self) -> dict[str, str]:
        """Every driver-like DaemonSet and its template digest: what the agents roll and the final gate awaits."""
        return {**{d.target.daemonset: d.digest for d in self._driver_daemonsets},
                **{r.name: r.digest for r in [*self._vgpu_managers, *self._vfio_managers]}}

    def _vgpu_manager(self, after: list[pulumi.Resource]) -> Optional[VgpuManager]:
        if not self._vgpu_managers:
            return None
        assert self._cfg.vgpu.manager_image is not None
        return VgpuManager(
            "state-vgpu-manager",
            ops=self._ops,
            image=self._cfg.vgpu.manager_image,
            upgrade=self._cfg.upgrade,
            planned=self._vgpu_managers,
            depends_on=after,
            opts=self._opts(),
        )

    def _vgpu_device_manager(self, after: list[pulumi.Resource]) -> Optional[VgpuDeviceManager]:
        if not self._cfg.pools_of("vm-vgpu"):
            return None
        return VgpuDeviceManager(
            "state-vgpu-device-manager",
            ops=self._ops,
            default_config=self._cfg.vgpu.default_config,
            configs=self._cfg.vgpu.custom_configs,
            depends_on=after,
            opts=self._opts(),
        )

    def _sandbox_validator(self, after: list[pulumi.Resource]) -> Optional[SandboxValidator]:
        if not self._vm_pools():
            return None
        sandbox = self._cfg.sandbox_workloads
        return SandboxValidator(
            "state-sandbox-validation",
            ops=self._ops,
            cc_manager=sandbox.mode == "kata" and sandbox.cc_manager.enabled,
            vgpu=bool(self._cfg.pools_of("vm-vgpu")),
            default_workload=self._cfg.sandbox_workloads.default_workload,
            depends_on=after,
            opts=self._opts(),
        )

    def _vfio_manager(self, after: list[pulumi.Resource]) -> Optional[VfioManager]:
        if not self._vfio_managers:
            return None
        return VfioManager("state-vfio-manager", ops=self._ops, planned=self._vfio_managers[0], depends_on=after, opts=self._opts())

    def _sandbox_device_plugin(self, after: list[pulumi.Resource]) -> Optional[SandboxDevicePlugin]:
        if not self._vm_pools() or self._cfg.sandbox_workloads.mode != "kubevirt":
            return None
        return SandboxDevicePlugin("state-sandbox-device-plugin", ops=self._ops, depends_on=after, opts=self._opts())

    def _kata_device_plugin(self, after: list[pulumi.Resource]) -> Optional[KataDevicePlugin]:
        if not self._vm_pools() or self._cfg.sandbox_workloads.mode != "kata":
            return None
        return KataDevicePlugin("state-kata-device-plugin", ops=self._ops, depends_on=after, opts=self._opts())

    def _cc_manager(self, after: list[pulumi.Resource]) -> Optional[CcManager]:
        sandbox = self._cfg.sandbox_workloads
        if not self._vm_pools() or sandbox.mode != "kata" or not sandbox.cc_manager.enabled:
            return None
        return CcManager(
            "state-cc-manager", ops=self._ops, default_mode=sandbox.cc_manager.default_mode, depends_on=after, opts=self._opts()
        )

    def _kubevirt(self, after: list[pulumi.Resource]) -> Optional[KubeVirtHostDevices]:
        cfg = self._cfg
        sandbox = cfg.sandbox_workloads
        models = [p.gpu_model for p in cfg.pools_of("vm-passthrough")]
        vgpu_pools = [(p.gpu_model, p.vgpu_config or cfg.vgpu.default_config) for p in cfg.pools_of("vm-vgpu")]
        if not (models or vgpu_pools) or sandbox.mode != "kubevirt" or not sandbox.kubevirt.permit_host_devices:
            return None
        return KubeVirtHostDevices(
            "kubevirt-host-devices",
            kubevirt_name=sandbox.kubevirt.name,
            kubevirt_namespace=sandbox.kubevirt.namespace,
            devices=permitted_pci_devices(models),
            mediated_devices=permitted_mediated_devices(vgpu_pools, cfg.vgpu.custom_configs),
            depends_on=after,
            opts=self._opts(),
        )
