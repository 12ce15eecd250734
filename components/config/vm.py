"""VM pools: KubeVirt or Kata sandboxes, the confidential-computing manager, vGPU, and the checks of vm-vgpu pools."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import StrictBool, field_validator

from components.catalogs import vgpu_catalog
from components.config.base import _dns_label, _Model, _pinned_image, shown


class KubeVirt(_Model):
    """The cluster's existing KubeVirt CR, whose permittedHostDevices gpu-stack patches."""

    name: str = "kubevirt"
    namespace: str = "kubevirt"
    # false leaves permittedHostDevices to whoever owns the CR (then list the README's entries there yourself).
    permit_host_devices: StrictBool = True

    _names = field_validator("name", "namespace")(_dns_label)


class CcManager(_Model):
    """NVIDIA's confidential-computing manager, deployed in kata mode (`ccManager`, Helm defaults)."""

    enabled: StrictBool = True
    # DEFAULT_CC_MODE for CC-capable GPUs whose node sets no nvidia.com/cc.mode label.
    default_mode: Literal["on", "off", "devtools"] = "on"


class SandboxWorkloads(_Model):
    """How VM pools (`workloadType: vm-passthrough | vm-vgpu`) hand their GPUs over (fact sheet §7)."""

    # kubevirt: the KubeVirt GPU device plugin advertises the GPUs to virt-launcher pods; kata: NVIDIA's sandbox
    # device plugin serves Kata Containers, with the confidential-computing manager beside it.
    mode: Literal["kubevirt", "kata"] = "kubevirt"
    cc_manager: CcManager = CcManager()
    # What the sandbox validator assumes for a node whose nvidia.com/gpu.workload.config label is missing.
    default_workload: Literal["container", "vm-passthrough", "vm-vgpu"] = "container"
    kubevirt: KubeVirt = KubeVirt()


class Vgpu(_Model):
    """vm-vgpu pools: NVIDIA's vGPU host driver and the vGPU devices each GPU is split into."""

    # The vGPU manager image the team built from NVIDIA's licensed vGPU software (NVIDIA publishes none), with its
    # `-<osTag>` suffix, e.g. harbor.platform.internal/gpu-stack/vgpu-manager:580.95.02-ubuntu22.04.
    manager_image: Optional[str] = None
    # DEFAULT_VGPU_CONFIG: the vgpu-configs entry of a node whose pool names none.
    default_config: str = vgpu_catalog.DEFAULT_CONFIG

    _pinned = field_validator("manager_image")(_pinned_image)

    @field_validator("default_config")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in vgpu_catalog.config_names():
            raise ValueError(f"no vGPU config named {shown(value)} in default-vgpu-devices-config (e.g. default, A10-12Q)")
        return value
