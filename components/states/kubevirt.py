"""`kubevirt-host-devices`: tell an existing KubeVirt which GPUs its VMs may request.

KubeVirt only lets a VM claim a host device listed under `spec.configuration.permittedHostDevices` of its
`KubeVirt` CR, which belongs to whoever installed KubeVirt. gpu-stack patches that CR with server-side apply
under its own field manager (`CustomResourcePatch`), so it owns the entries it writes and nothing else of the
CR, and a `pulumi destroy` removes only them. One entry per PCI id of every vm-passthrough pool's GPU model:
`pciVendorSelector` `10DE:<id>`, the resource name NVIDIA's KubeVirt GPU device plugin advertises for that id
(components/catalogs/catalog.py `kubevirt_resource_name`), and `externalResourceProvider: true`, because that plugin,
not KubeVirt, serves the device.

vm-vgpu pools add `mediatedDevices` entries, one per vGPU type their `vgpuConfig` creates on their GPU model:
`mdevNameSelector` is the type's name as the vGPU host driver publishes it in sysfs (`GRID T4-2Q` on Turing and
older boards, `NVIDIA A10-12Q` from Ampere on) and `resourceName` the name NVIDIA's KubeVirt device plugin
advertises it under (spaces turned into underscores, `nvidia.com/NVIDIA_A10-12Q`). KubeVirt must not create
mediated devices itself (NVIDIA's vGPU device manager does): enable its `DisableMDEVConfiguration` feature gate.

KubeVirt declares `pciHostDevices` (and `mediatedDevices`) an atomic list: whoever applies it owns all of it. A cluster whose admins
already list PCI devices there by hand must move those entries into a single owner first; the apply otherwise
fails with a field-manager conflict naming the other manager, rather than silently dropping their entries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s

from components.catalogs import consts
from components.catalogs import vgpu_catalog
from components.catalogs.catalog import GPU_MODELS, kubevirt_resource_name

API_VERSION = "kubevirt.io/v1"
KIND = "KubeVirt"
FIELD_MANAGER = "gpu-stack"
PATCH_FIELD_MANAGER = "pulumi.com/patchFieldManager"
NVIDIA_VENDOR = "10DE"


@dataclass(frozen=True)
class PciHostDevice:
    pci_vendor_selector: str
    resource_name: str


def permitted_pci_devices(gpu_models: Sequence[str]) -> list[PciHostDevice]:
    """The passthrough entries for these models, each PCI id once, in catalog order."""
    devices: list[PciHostDevice] = []
    for model in dict.fromkeys(gpu_models):
        for pci_id in GPU_MODELS[model].pci_device_ids:
            resource = kubevirt_resource_name(pci_id)
            selector = f"{NVIDIA_VENDOR}:{pci_id[2:].upper()}"
            if resource and all(d.pci_vendor_selector != selector for d in devices):
                devices.append(PciHostDevice(selector, resource))
    return devices


@dataclass(frozen=True)
class MediatedDevice:
    mdev_name_selector: str
    resource_name: str


# The vGPU host driver names Maxwell-to-Turing types `GRID <type>` and Ampere-and-later types `NVIDIA <type>`.
GRID_PREFIXED_ARCHITECTURES = ("volta", "turing")


def mdev_type_name(gpu_model: str, vgpu_type: str) -> str:
    prefix = "GRID" if GPU_MODELS[gpu_model].architecture in GRID_PREFIXED_ARCHITECTURES else "NVIDIA"
    return f"{prefix} {vgpu_type}"


def permitted_mediated_devices(pools: Sequence[tuple[str, str]], custom: vgpu_catalog.Custom = None) -> list[MediatedDevice]:
    """The vGPU entries for (GPU model, vgpu config) pairs: every type the config (a built-in one, or one of the
    stack's `vgpu.configs`) creates on that model's GPUs, each once, in pool order."""
    devices: list[MediatedDevice] = []
    configs = vgpu_catalog.vgpu_configs(custom)
    for model, config in pools:
        for pci_id, offered in vgpu_catalog.model_types(model).items():
            for entry in configs[config]:
                if not vgpu_catalog.entry_applies(entry, pci_id):
                    continue
                for vgpu_type in entry["vgpu-devices"]:
                    if vgpu_type not in offered:
                        continue
                    name = mdev_type_name(model, vgpu_type)
                    if all(d.mdev_name_selector != name for d in devices):
                        devices.append(MediatedDevice(name, f"nvidia.com/{name.replace(' ', '_')}"))
    return devices


class KubeVirtHostDevices(pulumi.ComponentResource):
    patch: k8s.apiextensions.CustomResourcePatch

    def __init__(
        self,
        name: str,
        *,
        kubevirt_name: str,
        kubevirt_namespace: str,
        devices: Sequence[PciHostDevice],
        mediated_devices: Sequence[MediatedDevice] = (),
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:KubeVirtHostDevices", name, None, opts)
        permitted: dict[str, list[dict]] = {}
        if devices:
            permitted["pciHostDevices"] = [
                {"pciVendorSelector": d.pci_vendor_selector, "resourceName": d.resource_name, "externalResourceProvider": True}
                for d in devices
            ]
        if mediated_devices:
            permitted["mediatedDevices"] = [
                {"mdevNameSelector": d.mdev_name_selector, "resourceName": d.resource_name, "externalResourceProvider": True}
                for d in mediated_devices
            ]
        self.patch = k8s.apiextensions.CustomResourcePatch(
            "kubevirt-permitted-gpus",
            api_version=API_VERSION,
            kind=KIND,
            metadata={
                "name": kubevirt_name,
                "namespace": kubevirt_namespace,
                "annotations": {PATCH_FIELD_MANAGER: FIELD_MANAGER, consts.SKIP_AWAIT: "true"},
            },
            spec={"configuration": {"permittedHostDevices": permitted}},
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(depends_on)),
        )
        self.register_outputs(
            {
                "permittedPciHostDevices": [d.resource_name for d in devices],
                "permittedMediatedDevices": [d.resource_name for d in mediated_devices],
            }
        )
