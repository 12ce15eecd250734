"""What every state of a stack shares, derived once from the config: the Kubernetes provider of the stack's
cluster, the operand images, the GPUDirect sidecars of the driver pods, and the `Operands` bundle (namespace,
images, pull secrets, DaemonSet settings, RuntimeClass) each state's DaemonSets are built from."""

from __future__ import annotations

import pulumi_kubernetes as k8s

from components.catalogs import catalog
from components.config import StackConfig
from components.kit.builders import Images, Operands, image_ref
from components.kit.driver_targets import Sidecars
from components.states.prerequisites import REGISTRY_SECRET, RUNTIME_CLASS


def kubernetes_provider(cfg: StackConfig) -> k8s.Provider:
    """Each stack talks to its own cluster: selecting another stack selects another context.

    `cluster_identifier` pins the provider's identity to the stack's cluster name, so a rotated kubeconfig does
    not replace the provider (and with it every object of the stack)."""
    cluster = cfg.cluster
    return k8s.Provider(
        "cluster",
        context=cluster.context,
        kubeconfig=cluster.kubeconfig,
        cluster_identifier=cluster.name,
        namespace=cluster.namespace,
        # The operands' ConfigMaps (plugin configs, MIG layouts, the node pools) are edited in place, as the operator
        # edits them and as their readers (config-manager, the MIG manager, the node agent) expect; replacing
        # them would delete and re-create them under their fixed names.
        enable_config_map_mutable=True,
        enable_secret_mutable=True,
    )


def resolve_images(cfg: StackConfig) -> Images:
    registry = cfg.registry.override or catalog.DEFAULT_REGISTRY
    versions = cfg.versions

    def ref(component: str, version: str) -> str:
        return image_ref(registry, catalog.IMAGES[component][0], version)

    return Images(
        driver_repository=f"{registry}/{catalog.IMAGES['driver'][0]}",
        driver_manager=ref("driverManager", versions.driver_manager),
        toolkit=ref("toolkit", versions.toolkit),
        device_plugin=ref("devicePlugin", versions.device_plugin),
        gfd=ref("gfd", versions.gfd),
        validator=ref("validator", versions.validator),
        dcgm=ref("dcgm", versions.dcgm),
        dcgm_exporter=ref("dcgmExporter", versions.dcgm_exporter),
        mig_manager=ref("migManager", versions.mig_manager),
        sandbox_device_plugin=ref("sandboxDevicePlugin", versions.sandbox_device_plugin),
        kata_device_plugin=ref("kataDevicePlugin", versions.kata_device_plugin),
        cc_manager=ref("ccManager", versions.cc_manager),
        vgpu_device_manager=ref("vgpuDeviceManager", versions.vgpu_device_manager),
        node_agent=cfg.node_agent.image,
    )


def gpudirect_sidecars(cfg: StackConfig) -> Sidecars:
    registry = cfg.registry.override or catalog.DEFAULT_REGISTRY
    gpudirect = cfg.gpudirect

    def image(component: str, version: str) -> tuple[str, str]:
        return f"{registry}/{catalog.IMAGES[component][0]}", version

    return Sidecars(
        gds=image("gds", cfg.versions.gds) if gpudirect.gds else None,
        gdrcopy=image("gdrcopy", cfg.versions.gdrcopy) if gpudirect.gdrcopy else None,
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
    )
