"""VM pools: KubeVirt or Kata sandboxes, the confidential-computing manager, vGPU, and the checks of vm-vgpu pools."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import Field, StrictBool, ValidationInfo, field_validator

from components.catalogs import mig_catalog, vgpu_catalog
from components.config import limits
from components.config.base import LABEL_VALUE, MAX_GPU_INDEX, _dns_label, _Model, _pinned_image, gpu_devices, label_value_problem, shown
from components.config.driver_extensions import NamedFiles


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


_PciFilter = Annotated[str, Field(pattern=mig_catalog.DEVICE_FILTER.pattern)]


class VgpuConfigEntry(_Model):
    """One entry of a named vGPU config, in the vGPU device manager's own shape (NVIDIA/vgpu-device-manager
    api/spec/v1) written camelCase; rendered as `devices`, `device-filter` and `vgpu-devices`."""

    devices: Union[Literal["all"], list[Annotated[int, Field(ge=0, le=MAX_GPU_INDEX)]]] = Field(
        description=f"The GPUs this entry splits: `all`, or a list of GPU indices (0..{MAX_GPU_INDEX}), narrowed by `deviceFilter`."
    )
    device_filter: Optional[Union[_PciFilter, list[_PciFilter]]] = Field(
        default=None,
        max_length=limits.MAX_MIG_DEVICE_FILTERS,
        description="Only GPUs with one of these PCI ids, device id then NVIDIA's vendor id (`0x20B510DE`); one id may be "
        "a string. Unset: every GPU the entry's `devices` names.",
    )
    vgpu_devices: dict[str, int] = Field(
        max_length=limits.MAX_VGPU_TYPES,
        description="vGPU type -> vGPU devices of that type on each of these GPUs, e.g. `{A10-12Q: 2}`; time-sliced "
        "and MIG-backed types never in one entry (the device manager refuses it).",
    )

    _devices = field_validator("devices", mode="before")(gpu_devices)

    @field_validator("device_filter", mode="before")
    @classmethod
    def _filter(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("vgpu_devices")
    @classmethod
    def _types(cls, devices: dict[str, int]) -> dict[str, int]:
        if not devices:
            raise ValueError("names no vGPU type; an entry creates at least one vGPU device")
        kinds = set()
        for name, count in devices.items():
            try:
                kinds.add(vgpu_catalog.parse_type(name).mig_backed)
            except ValueError as exc:
                raise ValueError(str(exc)) from None
            if count < 1:
                raise ValueError(f"{name}: count must be at least 1, got {count}")
        if len(kinds) > 1:
            raise ValueError("mixes time-sliced and MIG-backed vGPU types, which the vGPU device manager refuses")
        return devices

    def document(self) -> dict[str, Any]:
        """The entry as the device manager reads it."""
        written: dict[str, Any] = {}
        if self.device_filter:
            written["device-filter"] = list(self.device_filter)
        written["devices"] = self.devices if self.devices == vgpu_catalog.ALL_DEVICES else list(self.devices)
        written["vgpu-devices"] = dict(self.vgpu_devices)
        return written


class Vgpu(_Model):
    """vm-vgpu pools: NVIDIA's vGPU host driver and the vGPU devices each GPU is split into."""

    # The vGPU manager image the team built from NVIDIA's licensed vGPU software (NVIDIA publishes none), with its
    # `-<osTag>` suffix, e.g. harbor.platform.internal/gpu-stack/vgpu-manager:580.95.02-ubuntu22.04.
    manager_image: Optional[str] = None
    configs: dict[str, list[VgpuConfigEntry]] = Field(
        default={},
        max_length=limits.MAX_VGPU_CONFIGS,
        description="Named vGPU configs of your own, rendered into `default-vgpu-devices-config` next to NVIDIA's (one "
        "of a built-in name replaces it): a name, as the `nvidia.com/vgpu.config` label value a pool's `vgpuConfig` "
        "or `vgpu.defaultConfig` gives, -> its entries. ClusterPolicy's custom `vgpuDeviceManager.config.name` "
        "ConfigMap, imported with --configmap.",
        json_schema_extra={"propertyNames": {"pattern": LABEL_VALUE.pattern, "maxLength": 63, "minLength": 1}},
    )
    # DEFAULT_VGPU_CONFIG: the vgpu-configs entry of a node whose pool names none.
    default_config: str = vgpu_catalog.DEFAULT_CONFIG
    kernel_module_config: Optional[NamedFiles] = Field(
        default=None,
        description="Kernel module parameter files (e.g. `nvidia.conf`) of the vGPU manager, a ConfigMap mounted key by "
        "key into /drivers of its container, as the driver's `driver.kernelModuleConfig` (ClusterPolicy's "
        "`vgpuManager.kernelModuleConfig`).",
    )

    _pinned = field_validator("manager_image")(_pinned_image)

    @field_validator("configs")
    @classmethod
    def _names(cls, configs: dict[str, list[VgpuConfigEntry]]) -> dict[str, list[VgpuConfigEntry]]:
        for name, entries in configs.items():
            # Nodes select a config by label value.
            if not name or label_value_problem(name):
                raise ValueError(f"config name {label_value_problem(name) or 'is empty'}")
            if not entries:
                raise ValueError(f"{name}: a config lists at least one entry")
            if len(entries) > limits.MAX_VGPU_CONFIG_ENTRIES:
                raise ValueError(f"{name}: {len(entries)} entries; at most {limits.MAX_VGPU_CONFIG_ENTRIES} (limits.MAX_VGPU_CONFIG_ENTRIES)")
        return configs

    @field_validator("default_config")
    @classmethod
    def _known(cls, value: str, info: ValidationInfo) -> str:
        if value not in vgpu_catalog.config_names(documents(info.data.get("configs") or {})):
            raise ValueError(f"no vGPU config named {shown(value)} in default-vgpu-devices-config (e.g. default, A10-12Q)")
        return value

    @property
    def custom_configs(self) -> dict[str, list[dict[str, Any]]]:
        """`configs` in the device manager's shape (vgpu_catalog.Custom)."""
        return documents(self.configs)


def documents(configs: dict[str, list[VgpuConfigEntry]]) -> dict[str, list[dict[str, Any]]]:
    return {name: [entry.document() for entry in entries] for name, entries in configs.items()}
