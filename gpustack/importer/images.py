"""Operand images: the ClusterPolicy's repository/image/version per section becomes one registry override and the
pinned versions where the image is NVIDIA's (on nvcr.io or a mirror of it); any other image (a vGPU guest driver
from a private registry, an experimental build, a repository path that is not NVIDIA's, a second registry) becomes
that operand's own `operands.<operand>.repository/image/version`, so no foreign tag is ever pinned onto NVIDIA's
image. Pull secrets every operand shares go to the registry, the others to their operand."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from components.catalogs import catalog
from gpustack.importer.clusterpolicy import _Spec
from gpustack.importer.common import ImportInputError, shown_input

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
# ClusterPolicy section -> gpu-stack operand key (gpu-stack:operands.<key>) it configures. The VFIO and vGPU managers'
# driver-manager init containers have keys of their own and share their manager's pod (pull secrets, POD_OF).
OPERAND_OF: dict[str, str] = {
    "driver": "driver", "driver.manager": "driverManager", "toolkit": "toolkit", "devicePlugin": "devicePlugin",
    "gfd": "gfd", "validator": "validator", "nodeStatusExporter": "nodeStatusExporter", "dcgm": "dcgm",
    "dcgmExporter": "dcgmExporter", "migManager": "migManager", "sandboxDevicePlugin": "sandboxDevicePlugin",
    "kataSandboxDevicePlugin": "kataSandboxDevicePlugin", "ccManager": "ccManager",
    "vgpuDeviceManager": "vgpuDeviceManager", "vfioManager": "vfioManager", "vgpuManager": "vgpuManager",
    "gds": "gds", "gdrcopy": "gdrcopy",
    "vfioManager.driverManager": "vfioManagerDriverManager", "vgpuManager.driverManager": "vgpuManagerDriverManager",
}
POD_OF = {**OPERAND_OF, "vfioManager.driverManager": "vfioManager", "vgpuManager.driverManager": "vgpuManager"}
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

    def _rendered(self) -> dict[str, bool]:
        s = self.spec
        container = "container" in self.workloads
        driver_deployed = self.driver_mode != "host" and container
        vm = bool(self.workloads & {"vm-passthrough", "vm-vgpu"})
        mig_capable = any(catalog.GPU_MODELS[p["gpuModel"]].mig_capable for p in self.pools if p.get("workloadType", "container") == "container")
        return {
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
            "vgpuManager": "vm-vgpu" in self.workloads,  # its image is vgpu.managerImage, not an IMAGE_SECTIONS entry
            "gds": bool(s.get("gds.enabled")) and driver_deployed,
            "gdrcopy": bool(s.get("gdrcopy.enabled")) and driver_deployed,
        }

    def _own_image(self, section: str, image: _Image, why: str) -> None:
        """The operand pulls exactly the ClusterPolicy's image: its own repository/image/version keys."""
        operand = OPERAND_OF.get(section)
        fields = {k: self.spec.get(f"{section}.{k}") for k in ("repository", "image", "version")}
        fields = {k: str(v) for k, v in fields.items() if v not in (None, "")}
        if operand is None:
            for key, value in fields.items():
                self.report(f"spec.{section}.{key}", value, f"{why}; gpu-stack has no image key for this init container, "
                                                            f"it pulls <registry>/{catalog.IMAGES['driverManager'][0]} "
                                                            "(versions.driverManager)")
            return
        for key, value in fields.items():
            if key == "version" and section == "driver":
                # The driver's tag is a driver version (versions.driver, or driver.branch when precompiled) that
                # gpu-stack also reads for the pools; it goes with this repository and image, not NVIDIA's.
                self.driver_version = value
                continue
            self.put(f"operands.{operand}.{key}", value, origin=f"spec.{section}.{key}")
        self.notes.append(f"operands.{operand} image {image.name}:{image.version or '(no tag)'}: {why}, so the operand "
                          "keeps exactly this image instead of NVIDIA's")

    def _images(self) -> None:
        s = self.spec
        on = self._rendered()
        rendered = [section for section, _, _ in IMAGE_SECTIONS if on[section]]
        for section, _, _ in IMAGE_SECTIONS:
            if not on[section]:
                top = section.split(".")[0]
                s.without_effect(section, f"{top}.enabled is false: the operator did not deploy it" if s.peek(f"{top}.enabled") is False
                                 else "no node of the imported pools runs this operand")
        components = {section: (component, key) for section, component, key in IMAGE_SECTIONS}
        images: dict[str, _Image] = {}
        votes: dict[str, int] = {}
        registry_of: dict[str, str] = {}
        self.driver_version = ""
        for section in rendered:
            s.use(f"{section}.repository", f"{section}.image", f"{section}.version")
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
            if image.name.endswith("/" + path) and image.version:
                images[section] = image
                registry = image.name[: -len(path) - 1]
                registry_of[section] = registry
                votes[registry] = votes.get(registry, 0) + 1
            else:
                self._own_image(section, image, f"{image.name} is not NVIDIA's {path}" if image.version
                                else f"{image.name} has no tag, so the operator pulled it as written")
        registry = catalog.DEFAULT_REGISTRY
        if votes:
            registry = max(votes, key=lambda r: (votes[r], r == catalog.DEFAULT_REGISTRY))
        if registry != catalog.DEFAULT_REGISTRY:
            origin = next(images[sec].field for sec in registry_of if registry_of[sec] == registry)
            self.put("registry.override", registry, origin=origin)
        pinned: dict[str, tuple[str, str]] = {}
        for section, image in images.items():
            if registry_of[section] != registry:
                self._own_image(section, image, f"it comes from {registry_of[section]}, not the stack's registry {registry}")
                continue
            component, key = components[section]
            if section == "driver":
                self.driver_version = image.version
                continue
            key = key or {"validator": "validator", "driverManager": "driverManager"}[component]
            if key in pinned:
                first_section, first_version = pinned[key]
                if image.version != first_version:
                    self._own_image(section, image, f"its version differs from spec.{first_section}.version "
                                                    f"({first_version}), which versions.{key} pins")
                continue
            pinned[key] = (section, image.version)
            # Pinned even when equal to the catalog: a later gpu-stack release must not upgrade the cluster silently.
            self.put(f"versions.{key}", image.version, origin=f"spec.{section}.version")
        self._pull_secrets(rendered)

    def _pull_secrets(self, rendered: list[str]) -> None:
        """Secrets every rendered pod names go to registry.pullSecrets; the others to their operand's pod."""
        s = self.spec
        per_pod: dict[str, list[str]] = {}
        for section in rendered:
            s.use(f"{section}.imagePullSecrets")
            secrets = s.get(f"{section}.imagePullSecrets") or []
            if not isinstance(secrets, list) or not all(isinstance(x, str) for x in secrets):
                raise ImportInputError(f"spec.{section}.imagePullSecrets: expected a list of Secret names, got {shown_input(secrets)}")
            pod = per_pod.setdefault(POD_OF[section], [])
            pod += [x for x in secrets if x not in pod]
        common = [x for x in next(iter(per_pod.values()), []) if all(x in names for names in per_pod.values())]
        if common:
            self.put("registry.pullSecrets", common, origin="spec.*.imagePullSecrets")
        for operand, names in per_pod.items():
            extra = [x for x in names if x not in common]
            if extra:
                self.put(f"operands.{operand}.imagePullSecrets", extra, origin=f"spec.{operand}.imagePullSecrets")
