"""What every state of a stack shares, derived once from the config: the Kubernetes provider of the stack's
cluster, the operand images, the GPUDirect sidecars of the driver pods, and the `Operands` bundle (namespace,
images, pull secrets, DaemonSet settings, RuntimeClass) each state's DaemonSets are built from."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from components.catalogs import catalog
from components.catalogs import operand_overrides as operand_targets
from components.config import StackConfig
from components.config.overrides import catalog_version
from components.kit.builders import Images, Operands, image_ref
from components.kit.driver_targets import Sidecars
from components.kit.operand_overrides import catalog_parts, operand_image, resolve
from components.states.prerequisites import REGISTRY_SECRET, RUNTIME_CLASS


def kubernetes_provider(cfg: StackConfig) -> k8s.Provider:
    """Each stack talks to its own cluster: selecting another stack selects another context.

    `cluster_identifier` pins the provider's identity to the stack's cluster name, so a rotated kubeconfig does
    not replace the provider (and with it every object of the stack). Kubeconfig contents (the secret key
    `kubeconfig`) reach the provider as a secret Output, so state holds them encrypted; a path stays readable."""
    cluster = cfg.cluster
    contents = cfg.kubeconfig
    return k8s.Provider(
        "cluster",
        context=cluster.context,
        kubeconfig=pulumi.Output.secret(contents.get_secret_value()) if contents is not None else cluster.kubeconfig,
        cluster_identifier=cluster.name,
        namespace=cluster.namespace,
        # The operands' ConfigMaps (plugin configs, MIG layouts, the node pools) are edited in place, as the operator
        # edits them and as their readers (config-manager, the MIG manager, the node agent) expect; replacing
        # them would delete and re-create them under their fixed names.
        enable_config_map_mutable=True,
        enable_secret_mutable=True,
    )


def _catalog_parts(cfg: StackConfig, image: str) -> tuple[str, str, str]:
    """A catalog image's (repository, image, version) under the stack's registry, at its `versions.<image>`."""
    registry = cfg.registry.override or catalog.DEFAULT_REGISTRY
    return catalog_parts(registry, catalog.IMAGES[image][0], catalog_version(cfg.versions, image))


def _parts(cfg: StackConfig, image: str) -> tuple[str, str, str]:
    """The same with the override of the operand that owns the image applied."""
    return resolve(cfg.operands.by_key().get(operand_targets.image_owner(image)), _catalog_parts(cfg, image))


def operand_images(cfg: StackConfig) -> dict[str, str]:
    """Full references of the operands whose override sets an image with a tag used as is (the driver and the
    GPUDirect sidecars get the node's OS appended: see resolve_images and gpudirect_sidecars). An operand that
    borrows another's image (the MPS daemon the device plugin's) starts from that operand's resolved parts."""
    images = {}
    for key, override in cfg.operands.by_key().items():
        target = operand_targets.OPERANDS[key]
        if target.image is None or target.os_tagged:
            continue
        own = operand_targets.image_owner(target.image) == key
        image = operand_image(override, _catalog_parts(cfg, target.image) if own else _parts(cfg, target.image))
        if image is not None:
            images[key] = image
    return images


def resolve_images(cfg: StackConfig) -> Images:
    overridden = operand_images(cfg)

    def ref(component: str) -> str:
        owner = operand_targets.image_owner(component)
        return overridden.get(owner) or image_ref_of(_parts(cfg, component))

    driver_repository, driver_image, _ = _parts(cfg, "driver")
    return Images(
        driver_repository=f"{driver_repository}/{driver_image}",
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


def image_ref_of(parts: tuple[str, str, str]) -> str:
    repository, image, version = parts
    return image_ref(repository, image, version)


def gpudirect_sidecars(cfg: StackConfig) -> Sidecars:
    gpudirect = cfg.gpudirect

    def image(component: str) -> tuple[str, str]:
        # repository and version; the node's OS tag is appended per driver DaemonSet
        repository, name, version = _parts(cfg, component)
        return f"{repository}/{name}", version

    return Sidecars(
        gds=image("gds") if gpudirect.gds else None,
        gdrcopy=image("gdrcopy") if gpudirect.gdrcopy else None,
        rdma=gpudirect.rdma.enabled,
        host_mofed=gpudirect.rdma.use_host_mofed,
    )


def operands(cfg: StackConfig) -> Operands:
    # setRuntimeClassName: without CDI, cri-o runs operands through the OCI hook and no RuntimeClass is set.
    no_runtime_class = not cfg.toolkit.cdi and cfg.cluster.container_runtime == "cri-o"
    return Operands(
        namespace=cfg.cluster.namespace,
        images=resolve_images(cfg),
        pull_secrets=(*cfg.registry.pull_secrets, *((REGISTRY_SECRET,) if cfg.registry.credentials else ())),
        daemonsets=cfg.daemonsets,
        runtime_class=None if no_runtime_class else RUNTIME_CLASS,
        cdi=cfg.toolkit.cdi,
        toolkit_install_dir=cfg.toolkit.install_dir,
        host_paths=cfg.host_paths,
        overrides=cfg.operands.by_key(),
        operand_images=operand_images(cfg),
        openshift=cfg.cluster.platform == "openshift",
    )
