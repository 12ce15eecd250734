"""What every state of a stack shares, derived once from the config: the Kubernetes provider of the stack's
cluster and the `Operands` bundle (namespace, images, pull secrets, DaemonSet settings, RuntimeClass) each state's
DaemonSets are built from. Images are resolved in components/config/images.py."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from components.config import StackConfig
from components.config.images import operand_images, resolve_images
from components.kit.builders import Operands
from components.states.prerequisites import REGISTRY_SECRET


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


def operands(cfg: StackConfig) -> Operands:
    # setRuntimeClassName: without CDI, cri-o runs operands through the OCI hook and no RuntimeClass is set.
    no_runtime_class = not cfg.toolkit.cdi and cfg.cluster.container_runtime == "cri-o"
    return Operands(
        namespace=cfg.cluster.namespace,
        images=resolve_images(cfg),
        pull_secrets=(*cfg.registry.pull_secrets, *((REGISTRY_SECRET,) if cfg.registry.credentials else ())),
        daemonsets=cfg.daemonsets,
        runtime_class=None if no_runtime_class else cfg.toolkit.runtime_class,
        cdi=cfg.toolkit.cdi,
        toolkit_install_dir=cfg.toolkit.install_dir,
        host_paths=cfg.host_paths,
        overrides=cfg.operands.by_key(),
        operand_images=operand_images(cfg),
        openshift=cfg.cluster.platform == "openshift",
    )
