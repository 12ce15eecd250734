"""Every image the stack runs, resolved in one place, with the operator's rules.

An operand's image comes from the catalog (components/catalogs/catalog.py IMAGES: path and default version). Then:
- `registry.override` moves it;
- `versions.<image>` pins its version;
- `operands.<key>.repository/image/version` replaces any part, or `image` alone is a full reference.

The operator's ImagePath rule joins the parts: a `sha256:` version is a digest (`@`), anything else a tag (`:`). The
driver and its GPUDirect sidecars are resolved per node OS, one reference per driver DaemonSet, in the driver's own
package (components/states/driver/images.py), from the repository and version resolved here.

The states read `Images`; the config rules check that what `operands.<key>` composes is a reference
(`composed_reference`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from components.catalogs import catalog
from components.catalogs import operand_overrides as operand_targets
from components.config.base import _Model
from components.config.keys import composed, derived
from components.config.overrides import OperandOverride
from components.config.stack import StackConfig

Parts = tuple[str, str, str]  # repository, image name, version


def image_path(repository: str, image: str, version: str) -> str:
    """The operator's ImagePath: repository/image:version, or repository/image@version for a sha256 digest."""
    separator = "@" if version.startswith("sha256:") else ":"
    return composed(f"{repository}/{image}{separator}{version}", version=version, name=image, repository=repository)



def catalog_version(versions: _Model, image: str) -> str:
    """The stack's version of a catalog image: `versions.<image>` (the catalog's keys are its aliases)."""
    for name, field in type(versions).model_fields.items():
        if (field.alias or name) == image:
            return getattr(versions, name)
    raise KeyError(image)


def catalog_parts(registry: str, path: str, version: str) -> Parts:
    """(repository, image, version) of a catalog image: `nvidia/k8s/container-toolkit` below `nvcr.io` is
    repository nvcr.io/nvidia/k8s, image container-toolkit."""
    directory, _, name = path.rpartition("/")
    return (derived(f"{registry}/{directory}", registry) if directory else registry), name, version


def resolve(override: Optional[OperandOverride], parts: Parts) -> Parts:
    """Each part the override sets, else the part given (a full-reference image is not split: see operand_image)."""
    if override is None or override.full_reference:
        return parts
    repository, name, version = parts
    return override.repository or repository, override.image or name, override.version or version


def operand_image(override: Optional[OperandOverride], parts: Parts) -> Optional[str]:
    """The full reference an override gives an operand whose tag is used as is; None when it sets no image."""
    if override is None or not override.sets_image:
        return None
    if override.full_reference:
        return override.image
    return image_path(*resolve(override, parts))


def _registry(cfg: StackConfig) -> str:
    return cfg.registry.override or catalog.DEFAULT_REGISTRY


def stack_parts(cfg: StackConfig, image: str) -> Parts:
    """A catalog image's parts under the stack's registry, at its `versions.<image>`."""
    return catalog_parts(_registry(cfg), catalog.IMAGES[image][0], catalog_version(cfg.versions, image))


def parts(cfg: StackConfig, image: str) -> Parts:
    """The same with the override of the operand that owns the image applied."""
    return resolve(cfg.operands.by_key().get(operand_targets.image_owner(image)), stack_parts(cfg, image))


def composed_reference(cfg: StackConfig, override: OperandOverride, image: str) -> str:
    """The reference `operands.<key>` composes over the catalog image `image`, the stack's own version aside (it is
    checked where it is set): what the kubelet will parse."""
    repository, name, _ = resolve(override, stack_parts(cfg, image))
    return image_path(repository, name, override.version or "tag")


def operand_images(cfg: StackConfig) -> dict[str, str]:
    """Full references of the operands whose override sets an image with a tag used as is (the driver and the
    GPUDirect sidecars get the node's OS appended). An operand that borrows another's image (the MPS daemon the
    device plugin's) starts from that operand's resolved parts."""
    images = {}
    for key, override in cfg.operands.by_key().items():
        target = operand_targets.OPERANDS[key]
        if target.image is None or target.os_tagged:
            continue
        own = operand_targets.image_owner(target.image) == key
        image = operand_image(override, stack_parts(cfg, target.image) if own else parts(cfg, target.image))
        if image is not None:
            images[key] = image
    return images


@dataclass(frozen=True)
class Images:
    """Fully resolved image references of the operands, after the registry override, versions and overrides."""

    driver_repository: str
    driver_manager: str
    toolkit: str
    device_plugin: str
    gfd: str
    validator: str
    dcgm: str
    dcgm_exporter: str
    mig_manager: str
    sandbox_device_plugin: str
    kata_device_plugin: str
    cc_manager: str
    vgpu_device_manager: str
    node_agent: Optional[str]
    dra_driver: str


def resolve_images(cfg: StackConfig) -> Images:
    overridden = operand_images(cfg)

    def ref(component: str) -> str:
        owner = operand_targets.image_owner(component)
        return overridden.get(owner) or image_path(*parts(cfg, component))

    driver_repository, driver_image, _ = parts(cfg, "driver")
    return Images(
        driver_repository=derived(f"{driver_repository}/{driver_image}", driver_repository, driver_image),
        driver_manager=ref("driverManager"),
        toolkit=ref("toolkit"),
        device_plugin=ref("devicePlugin"),
        gfd=ref("gfd"),
        validator=ref("validator"),
        dcgm=ref("dcgm"),
        dcgm_exporter=ref("dcgmExporter"),
        mig_manager=ref("migManager"),
        sandbox_device_plugin=ref("sandboxDevicePlugin"),
        kata_device_plugin=ref("kataDevicePlugin"),
        cc_manager=ref("ccManager"),
        vgpu_device_manager=ref("vgpuDeviceManager"),
        node_agent=cfg.node_agent.image,
        dra_driver=ref("draDriver"),
    )
