"""Operand images: the ClusterPolicy's repository/image/version per section becomes one registry override, the
pinned versions and the pull secrets; what gpu-stack cannot pull that way goes into the report."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from components.catalogs import catalog
from gpustack.importer.clusterpolicy import _Spec

# ClusterPolicy section -> (catalog.IMAGES component, versions key gpu-stack pins it under).
IMAGE_SECTIONS: tuple[tuple[str, str, Optional[str]], ...] = (
    ("driver", "driver", None),
    ("driver.manager", "driverManager", "driverManager"),
    ("toolkit", "toolkit", "toolkit"),
    ("devicePlugin", "devicePlugin", "devicePlugin"),
    ("gfd", "gfd", "gfd"),
    ("validator", "validator", "validator"),
    ("nodeStatusExporter", "validator", None),
    ("dcgm", "dcgm", "dcgm"),
    ("dcgmExporter", "dcgmExporter", "dcgmExporter"),
    ("migManager", "migManager", "migManager"),
    ("sandboxDevicePlugin", "sandboxDevicePlugin", "sandboxDevicePlugin"),
    ("kataSandboxDevicePlugin", "kataDevicePlugin", "kataDevicePlugin"),
    ("ccManager", "ccManager", "ccManager"),
    ("vgpuDeviceManager", "vgpuDeviceManager", "vgpuDeviceManager"),
    ("vfioManager", "driverManager", None),
    ("vfioManager.driverManager", "driverManager", None),
    ("vgpuManager.driverManager", "driverManager", None),
    ("gds", "gds", "gds"),
    ("gdrcopy", "gdrcopy", "gdrcopy"),
)
# The env var the operator falls back to when a section names no image at all (fact sheet §1.4).
FALLBACK_ENV = {"driver": "DRIVER_IMAGE", "driver.manager": "DRIVER_MANAGER_IMAGE", "toolkit": "CONTAINER_TOOLKIT_IMAGE",
                "devicePlugin": "DEVICE_PLUGIN_IMAGE", "gfd": "GFD_IMAGE", "validator": "VALIDATOR_IMAGE",
                "nodeStatusExporter": "VALIDATOR_IMAGE", "dcgm": "DCGM_IMAGE", "dcgmExporter": "DCGM_EXPORTER_IMAGE",
                "migManager": "MIG_MANAGER_IMAGE", "sandboxDevicePlugin": "SANDBOX_DEVICE_PLUGIN_IMAGE",
                "kataSandboxDevicePlugin": "KATA_SANDBOX_DEVICE_PLUGIN_IMAGE", "ccManager": "CC_MANAGER_IMAGE",
                "vgpuDeviceManager": "VGPU_DEVICE_MANAGER_IMAGE", "vfioManager": "VFIO_MANAGER_IMAGE",
                "vfioManager.driverManager": "DRIVER_MANAGER_IMAGE", "vgpuManager.driverManager": "DRIVER_MANAGER_IMAGE",
                "gds": "GDS_IMAGE", "gdrcopy": "GDRCOPY_IMAGE"}


@dataclass(frozen=True)
class _Image:
    section: str
    name: str  # registry/path, without tag
    version: str
    field: str  # the spec field that carries the name, for the report


def _image_of(spec: _Spec, section: str) -> Optional[_Image]:
    repository = spec.get(f"{section}.repository") or ""
    image = spec.get(f"{section}.image") or ""
    version = spec.get(f"{section}.version")
    version = "" if version is None else str(version)
    if repository:
        return _Image(section, f"{repository.rstrip('/')}/{image}", version, f"spec.{section}.repository")
    if image and not version:
        # The operator uses `image` verbatim when repository and version are empty.
        if "@" in image:
            name, _, digest = image.partition("@")
            return _Image(section, name, digest, f"spec.{section}.image")
        name, sep, tag = image.rpartition(":")
        if sep and "/" not in tag:
            return _Image(section, name, tag, f"spec.{section}.image")
        return _Image(section, image, "", f"spec.{section}.image")
    if image or version:
        return _Image(section, image, version, f"spec.{section}.image")
    return None


class ImagesMixin:
    """Mixed into build._Importer: the images of the operands gpu-stack renders, and their versions."""

    def _rendered_sections(self) -> list[str]:
        s = self.spec
        container = "container" in self.workloads
        driver_deployed = self.driver_mode != "host" and container
        vm = bool(self.workloads & {"vm-passthrough", "vm-vgpu"})
        mig_capable = any(catalog.GPU_MODELS[p["gpuModel"]].mig_capable for p in self.pools if p.get("workloadType", "container") == "container")
        on = {
            "driver": driver_deployed,
            "driver.manager": driver_deployed,
            "toolkit": bool(s.get("toolkit.enabled")) and container,
            "devicePlugin": bool(s.get("devicePlugin.enabled")) and container,
            "gfd": bool(s.get("gfd.enabled")) and container,
            "validator": True,
            "nodeStatusExporter": bool(s.get("nodeStatusExporter.enabled")),
            "dcgm": bool(s.get("dcgm.enabled")) and container,
            "dcgmExporter": bool(s.get("dcgmExporter.enabled")) and container,
            "migManager": bool(s.get("migManager.enabled")) and mig_capable,
            "sandboxDevicePlugin": vm and self.sandbox_mode == "kubevirt",
            "kataSandboxDevicePlugin": vm and self.sandbox_mode == "kata",
            "ccManager": vm and self.sandbox_mode == "kata" and bool(s.get("ccManager.enabled")),
            "vgpuDeviceManager": "vm-vgpu" in self.workloads,
            "vfioManager": "vm-passthrough" in self.workloads,
            "vfioManager.driverManager": "vm-passthrough" in self.workloads,
            "vgpuManager.driverManager": "vm-vgpu" in self.workloads,
            "gds": bool(s.get("gds.enabled")) and driver_deployed,
            "gdrcopy": bool(s.get("gdrcopy.enabled")) and driver_deployed,
        }
        return [section for section, _, _ in IMAGE_SECTIONS if on[section]]

    def _images(self) -> None:
        s = self.spec
        rendered = self._rendered_sections()
        components = {section: (component, key) for section, component, key in IMAGE_SECTIONS}
        images: dict[str, _Image] = {}
        votes: dict[str, int] = {}
        registry_of: dict[str, str] = {}
        for section in rendered:
            image = _image_of(s, section)
            component = components[section][0]
            path = catalog.IMAGES[component][0]
            if image is None:
                ours = ("the validator image (versions.validator)" if section == "nodeStatusExporter"
                        else f"{path}:{catalog.IMAGES[component][1]} from the stack's registry")
                self.report(f"spec.{section}", None,
                            f"names no image: the operator takes {FALLBACK_ENV[section]} from its own Deployment, which "
                            f"this importer cannot see; gpu-stack renders {ours}")
                continue
            images[section] = image
            if image.name.endswith("/" + path):
                registry = image.name[: -len(path) - 1]
                registry_of[section] = registry
                votes[registry] = votes.get(registry, 0) + 1
            else:
                self.report(image.field, image.name,
                            f"gpu-stack pulls this image from <registry>/{path}; {image.name} does not end in {path}")
        registry = catalog.DEFAULT_REGISTRY
        if votes:
            registry = max(votes, key=lambda r: (votes[r], r == catalog.DEFAULT_REGISTRY))
        if registry != catalog.DEFAULT_REGISTRY:
            origin = next(images[sec].field for sec in registry_of if registry_of[sec] == registry)
            self.put("registry.override", registry, origin=origin)
        for section, other in registry_of.items():
            if other != registry:
                self.report(images[section].field, images[section].name,
                            f"gpu-stack pulls every image from one registry (registry.override {registry}); this one is on {other}")
        pinned: dict[str, tuple[str, str]] = {}
        for section, image in images.items():
            component, key = components[section]
            if section == "driver":
                self.driver_version = image.version
                continue
            if not image.version:
                self.report(f"spec.{section}.version", None, f"no version: gpu-stack renders {catalog.IMAGES[component][1]}")
                continue
            key = key or {"validator": "validator", "driverManager": "driverManager"}[component]
            if key in pinned:
                first_section, first_version = pinned[key]
                if image.version != first_version:
                    self.report(f"spec.{section}.version", image.version,
                                f"gpu-stack runs one {component} image for every operand that uses it; it takes "
                                f"{first_version} from spec.{first_section}")
                continue
            pinned[key] = (section, image.version)
            # Pinned even when equal to the catalog: a later gpu-stack release must not upgrade the cluster silently.
            self.put(f"versions.{key}", image.version, origin=f"spec.{section}.version")
        secrets: list[str] = []
        for section in rendered:
            for secret in s.get(f"{section}.imagePullSecrets") or []:
                if secret not in secrets:
                    secrets.append(secret)
        for section, _, _ in IMAGE_SECTIONS:
            s.use(f"{section}.imagePullSecrets")
        if secrets:
            self.put("registry.pullSecrets", secrets, origin="spec.*.imagePullSecrets")
            self.notes.append(f"registry.pullSecrets {', '.join(secrets)}: gpu-stack gives every operand the union of the "
                              "components' imagePullSecrets")
