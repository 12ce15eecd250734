"""Cross-key rules of each pool's driver: its OS or node images against the driver mode, the GPU's support, the list
of node images, and the DaemonSets pools share."""

from __future__ import annotations

from components.catalogs import catalog
from components.config.base import _set_aliases, NAMESPACE, node_images, shown
from components.config.drivers import PoolDriverPlan
from components.config.image_lists import DriverFlavour
from components.config.pools import NodePool
from components.config.rules.vm import vgpu_checks
from components.config.stack import StackConfig
from node_images import catalog as node_image_catalog


def pool_driver_checks(cfg: StackConfig, pool: NodePool, here: str) -> list[tuple[str, str]]:
    """A pool's OS, node image and driver keys against its effective driver mode."""
    problems: list[tuple[str, str]] = []
    image = pool.image
    if image is None and pool.os is None:
        problems.append((f"{here}.os", "required unless nodeImage names an entry of node_images/catalog.yaml"))
    elif image is not None and pool.os is not None and set(pool.os_entries) != {i.os_tag for i in pool.images}:
        images = ", ".join(f"{i.name} ({i.os_tag})" for i in pool.images)
        problems.append((f"{here}.os", f"{shown(pool.os)} contradicts nodeImage {images}; remove os"))
    own = pool.driver
    problems += vgpu_checks(cfg, pool, here)
    if pool.workload_type == "vm-passthrough" and not any(
        catalog.kubevirt_resource_name(pci_id) for pci_id in pool.model.pci_device_ids
    ):
        named = sorted({m for m, model in catalog.GPU_MODELS.items() if any(catalog.kubevirt_resource_name(i) for i in model.pci_device_ids)})
        problems.append(
            (
                f"{here}.gpuModel",
                f"gpu-stack knows no KubeVirt resource name for the {pool.gpu_model}'s PCI ids, so it cannot permit "
                f"it to VMs; vm-passthrough models: {', '.join(named)}",
            )
        )
    if pool.workload_type != "container":
        if own.model_fields_set:
            problems.append((f"{here}.driver", f"{pool.workload_type} pools take no container driver; remove this block"))
        return problems
    plan = cfg.pool_driver(pool)
    takes = {
        "managed": {"mode", "version", "kernelModuleType", "daemonSetName", "daemonSetNames"},
        "precompiled": {"mode", "branch", "kernelModuleType", "daemonSetName", "daemonSetNames"},
        "host": {"mode"},
    }[plan.mode]
    for key in sorted(_set_aliases(own) - takes):
        problems.append((f"{here}.driver.{key}", f"not used by driver mode {plan.mode!r}; it takes: {', '.join(sorted(takes))}"))
    if plan.mode == "host":
        return problems
    support = pool.model.driver
    module_problem = support.module_problem(plan.kernel_module_type)
    chosen_type = own.kernel_module_type or cfg.driver.kernel_module_type
    if module_problem and chosen_type == "auto" and cfg.gds_forces_open_modules:
        problems.append(
            (
                f"{NAMESPACE}:gpudirect.gds",
                f"nvidia-fs {cfg.versions.gds} loads only with the open kernel modules, and the {pool.gpu_model} "
                f"({pool.model.architecture}) {module_problem}; move pool {pool.name!r} to a stack without GDS",
            )
        )
    elif module_problem:
        key = f"{here}.driver.kernelModuleType" if own.kernel_module_type else f"{NAMESPACE}:driver.kernelModuleType"
        problems.append((key, f"{pool.gpu_model} ({pool.model.architecture}) {module_problem}"))
    branch = plan.branch if plan.mode == "precompiled" else plan.version.split(".")[0]
    branch_problem = support.branch_problem(int(branch)) if branch.isdigit() else None
    if branch_problem:
        if plan.mode == "precompiled":
            key = f"{here}.driver.branch" if own.branch else f"{NAMESPACE}:driver.branch"
        else:
            key = f"{here}.driver.version" if own.version else f"{NAMESPACE}:versions.driver"
        problems.append((key, f"{pool.gpu_model} {branch_problem}; this pool's driver is branch {branch}"))
    if plan.mode == "precompiled":
        if image is None:
            problems.append(
                (f"{here}.nodeImage", f"required with driver mode 'precompiled' (one image per kernel); entries: {', '.join(node_images().names)}")
            )
        for image in pool.images:
            reason = node_image_catalog.unpublished_reason(image, plan.branch)
            if reason is not None and image.private_image is None:
                tag = node_image_catalog.precompiled_tag(image, plan.branch)
                problems.append(
                    (
                        f"{here}.nodeImage",
                        f"NVIDIA publishes no precompiled driver {tag} ({reason}); build it with "
                        f"node_images/driver-precompiled/build.sh and set privateImage on {image.name!r} in "
                        "node_images/catalog.yaml, or use driver mode 'managed'",
                    )
                )
    problems += node_image_list_checks(cfg, pool, plan, here)
    return problems


def _driver_flavour(cfg: StackConfig, pool: NodePool, flavour: DriverFlavour) -> tuple:
    """What one driver DaemonSet can serve: one image and module type per OS and kernel, one readiness rule."""
    plan = cfg.pool_driver(pool)
    version = plan.branch if plan.mode == "precompiled" else plan.version
    return plan.mode, version, plan.kernel_module_type, flavour.os_tag, flavour.kernel, pool.allocation


def driver_daemonset_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    """Pools that name one driver DaemonSet must be able to share it; without the node labeller one serves all."""
    problems: list[tuple[str, str]] = []
    index = {p.name: i for i, p in enumerate(cfg.node_pools)}
    by_daemonset: dict[str, list[tuple[NodePool, DriverFlavour]]] = {}
    for pool in cfg.driver_pools:
        for flavour in cfg.pool_driver(pool).flavours:
            by_daemonset.setdefault(flavour.daemonset, []).append((pool, flavour))
    if len(by_daemonset) > 1 and not cfg.components.node_labeler:
        problems.append(
            (
                f"{NAMESPACE}:components.nodeLabeler",
                f"the driver pools need {len(by_daemonset)} driver DaemonSets ({', '.join(sorted(by_daemonset))}), each "
                "selecting its nodes by the gpu-stack/pool label the node labeller writes: set it to true",
            )
        )
    for name, served in by_daemonset.items():
        first, first_flavour = served[0]
        for other, flavour in served[1:]:
            if other.name == first.name:
                key = f"{NAMESPACE}:nodePools[{index[other.name]}].driver.daemonSetNames"
                problems.append((key, f"entries {first_flavour.entry!r} and {flavour.entry!r} of pool {other.name!r} "
                                      f"both name driver DaemonSet {shown(name)}; each entry runs its own"))
            elif _driver_flavour(cfg, other, flavour) != _driver_flavour(cfg, first, first_flavour):
                key = "daemonSetNames" if other.listed else "daemonSetName"
                problems.append(
                    (
                        f"{NAMESPACE}:nodePools[{index[other.name]}].driver.{key}",
                        f"pools {first.name!r} and {other.name!r} share driver DaemonSet {shown(name)} but run different drivers "
                        "(mode, version, module type, OS, kernel or allocation): one DaemonSet runs one image; give one "
                        f"of them a {key} of its own",
                    )
                )
    return problems


def node_image_list_checks(cfg: StackConfig, pool: NodePool, plan: PoolDriverPlan, here: str) -> list[tuple[str, str]]:
    """A pool's list of node images (or OSes) and the names its DaemonSets keep."""
    own = pool.driver
    problems: list[tuple[str, str]] = []
    listed_key = f"{here}.nodeImage" if isinstance(pool.node_image, tuple) else f"{here}.os"
    if pool.listed and not cfg.components.node_labeler:
        problems.append((listed_key, "one driver DaemonSet per node image selects its nodes by the labels the node "
                                     f"labeller writes: set {NAMESPACE}:components.nodeLabeler: true, or name one image"))
    entries = [f.entry for f in plan.flavours]
    if pool.listed and own.daemon_set_name is not None:
        problems.append((f"{here}.driver.daemonSetName",
                         f"the pool lists its node images, so each one's DaemonSet has a name of its own: keep "
                         f"{shown(own.daemon_set_name)} for the entry it already serves with daemonSetNames: "
                         f"{{<entry>: {own.daemon_set_name}}} (entries: {', '.join(entries)})"))
    if own.daemon_set_names is not None:
        if not pool.listed:
            problems.append((f"{here}.driver.daemonSetNames",
                             "names the DaemonSets of a pool that lists its node images (nodeImage or os as a list); "
                             "a pool with one keeps its name with daemonSetName"))
        else:
            for entry in own.daemon_set_names:
                if entry not in entries:
                    problems.append((f"{here}.driver.daemonSetNames",
                                     f"{shown(entry)} is not an entry of the pool; its entries: {', '.join(entries)}"))
    return problems
