"""The driver: stack-wide and per-pool settings, the plan a pool's nodes run, and the checks that each pool's
driver suits its GPUs and node image, and that pools sharing a driver DaemonSet can share it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Optional

from pydantic import Field, StrictBool, field_validator

from components.catalogs import catalog
from components.config.base import (
    DNS_SUBDOMAIN,
    NAMESPACE,
    _driver_branch,
    _full_driver_version,
    _Model,
    _set_aliases,
    node_images,
    shown,
)
from components.config.driver_extensions import (
    ExtraVolume,
    LicensingConfig,
    LivenessProbeTimings,
    NamedFiles,
    ProbeTimings,
    RepoConfig,
    StartupProbeTimings,
    _object_name,
)
from components.config.limits import MAX_NODE_IMAGES_PER_POOL
from components.config.image_lists import DriverFlavour, node_image_list_checks
from components.config.vm import _vgpu_checks
from node_images import catalog as node_image_catalog

if TYPE_CHECKING:
    from components.config.pools import NodePool
    from components.config.stack import StackConfig


DRIVER_MODES = ("managed", "host", "precompiled")
KERNEL_MODULE_TYPES = ("auto", "open", "proprietary")


class Driver(_Model):
    mode: Literal["managed", "host", "precompiled"] = "managed"
    # Precompiled images are tagged by branch, not full version (fact sheet §4.3).
    branch: str = catalog.IMAGES["driver"][1].split(".")[0]
    kernel_module_type: Literal["auto", "open", "proprietary"] = "auto"
    # What the driver pod takes besides the driver (components/config/driver_extensions.py); stack-wide, see there.
    licensing_config: Optional[LicensingConfig] = Field(
        default=None, description="vGPU guest licensing: gridd.conf (and the NLS client token) mounted into the driver container."
    )
    repo_config: Optional[RepoConfig] = Field(
        default=None, description="Package repository files for managed drivers (refused when no pool runs one)."
    )
    cert_config: Optional[NamedFiles] = Field(
        default=None, description="CA certificates for the driver install's downloads, mounted into the OS's CA directory (managed drivers)."
    )
    kernel_module_config: Optional[NamedFiles] = Field(
        default=None, description="Kernel module parameter files (e.g. `nvidia.conf`) mounted into /drivers."
    )
    virtual_topology_config: Optional[str] = Field(
        default=None,
        description="vGPU guests: a ConfigMap whose key `nvidia-topologyd.conf` configures the vGPU topology daemon "
        "(mounted at /etc/nvidia/nvidia-topologyd.conf), ClusterPolicy's driver.virtualTopology.config.",
    )
    secret_env: Optional[str] = Field(
        default=None,
        description="A Secret (stack namespace) whose keys become the driver container's environment (`envFrom`), "
        "and that of the GDS and GDRCopy sidecars.",
    )
    extra_volumes: list[ExtraVolume] = Field(
        default=[], max_length=32, description="More volumes, mounted into nvidia-driver-ctr and each GPUDirect sidecar (peermem, nvidia-fs, gdrcopy), as NVIDIADriver mounts its additional volumes."
    )
    startup_probe: Optional[StartupProbeTimings] = Field(
        default=None,
        description="Timings of the driver container's startup probe (defaults 60/10/60/120: initialDelay, period, "
        "timeout, failureThreshold; precompiled initialDelay 5).",
    )
    readiness_probe: Optional[ProbeTimings] = Field(
        default=None,
        description="Timings of the driver container's readiness probe (ready once the node validated; defaults "
        "period 10, timeout 5, thresholds 1).",
    )
    liveness_probe: Optional[LivenessProbeTimings] = Field(
        default=None,
        description="Set (`{}` included), adds a liveness probe to the driver container: the startup probe's check "
        "(module loaded, driver daemons Ready, nvidia-smi answers) run again once started, with the startup probe's "
        "defaults for unset timings. Unset: no liveness probe, as in NVIDIA's asset. A failing probe restarts nvidia-driver-ctr, which "
        "reloads the driver under the node's GPU workloads.",
    )
    host_network: StrictBool = Field(
        default=False, description="Run driver pods in the node's network namespace (dnsPolicy ClusterFirstWithHostNet)."
    )

    _branch = field_validator("branch")(_driver_branch)
    _secret = field_validator("secret_env", "virtual_topology_config")(_object_name)


class PoolDriver(_Model):
    """A pool's own driver where it differs from `gpu-stack:driver` / `gpu-stack:versions.driver`."""

    mode: Optional[Literal["managed", "host", "precompiled"]] = None
    # Full version (managed) or branch (precompiled), as the stack-wide keys.
    version: Optional[str] = None
    branch: Optional[str] = None
    kernel_module_type: Optional[Literal["auto", "open", "proprietary"]] = None
    # The driver DaemonSet's name when it is not `nvidia-driver-daemonset-<pool>`: the name it already runs under
    # (after a pool rename, or from a stack deployed before names were stable), so that `pulumi up` updates it in
    # place. Pools that name the same DaemonSet share it.
    daemon_set_name: Optional[str] = None
    # A pool that lists its node images (or OSes): the name each entry's DaemonSet already runs under, where it is
    # not `nvidia-driver-daemonset-<pool>-[<kernel>-]<os>` (the pool's one DaemonSet, once the pool lists a second
    # image next to its first).
    daemon_set_names: Optional[dict[str, str]] = None

    _version = field_validator("version")(_full_driver_version)
    _branch = field_validator("branch")(_driver_branch)

    @field_validator("daemon_set_name")
    @classmethod
    def _daemonset_name(cls, value: Optional[str]) -> Optional[str]:
        problem = daemonset_name_problem(value) if value is not None else None
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("daemon_set_names")
    @classmethod
    def _daemonset_names(cls, value: Optional[dict[str, str]]) -> Optional[dict[str, str]]:
        if value is None:
            return None
        if not 1 <= len(value) <= MAX_NODE_IMAGES_PER_POOL:
            raise ValueError(f"names {len(value)} entries; a pool lists 1 to {MAX_NODE_IMAGES_PER_POOL} node images")
        for entry, name in value.items():
            problem = daemonset_name_problem(name)
            if problem:
                raise ValueError(f"{shown(entry)}: {problem}")
        repeated = sorted({n for n in value.values() if list(value.values()).count(n) > 1})
        if repeated:
            raise ValueError(f"{', '.join(map(repr, repeated))} is named for more than one entry; each entry runs its own DaemonSet")
        return value


def daemonset_name_problem(value: str) -> Optional[str]:
    # The name is also the pods' `app` label value: a DNS subdomain of at most 63 characters.
    if not DNS_SUBDOMAIN.fullmatch(value) or len(value) > 63:
        return f"{shown(value)} is not a DaemonSet name usable as a label value (DNS-1123 subdomain, at most 63)"
    return None


@dataclass(frozen=True)
class PoolDriverPlan:
    """The driver a pool's nodes run once stack defaults and the pool's own `driver` keys are combined: one
    flavour per node image (or OS) the pool runs (components/config/image_lists.py)."""

    mode: str
    version: str  # managed: full version or digest
    branch: str  # precompiled
    kernel_module_type: str
    flavours: tuple[DriverFlavour, ...]

    # The first flavour's, for what a pool with one node image has one of.
    @property
    def os_tag(self) -> str:
        return self.flavours[0].os_tag

    @property
    def node_image(self) -> Optional[node_image_catalog.NodeImage]:
        return self.flavours[0].node_image

    @property
    def daemonset(self) -> str:
        return self.flavours[0].daemonset

    @property
    def kernel(self) -> Optional[str]:
        return self.flavours[0].kernel

    @property
    def daemonsets(self) -> tuple[str, ...]:
        return tuple(f.daemonset for f in self.flavours)


def _pool_driver_checks(cfg: StackConfig, pool: NodePool, here: str) -> list[tuple[str, str]]:
    """A pool's OS, node image and driver keys against its effective driver mode."""
    problems: list[tuple[str, str]] = []
    image = pool.image
    if image is None and pool.os is None:
        problems.append((f"{here}.os", "required unless nodeImage names an entry of node_images/catalog.yaml"))
    elif image is not None and pool.os is not None and set(pool.os_entries) != {i.os_tag for i in pool.images}:
        images = ", ".join(f"{i.name} ({i.os_tag})" for i in pool.images)
        problems.append((f"{here}.os", f"{shown(pool.os)} contradicts nodeImage {images}; remove os"))
    own = pool.driver
    problems += _vgpu_checks(cfg, pool, here)
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


def _driver_daemonset_checks(cfg: StackConfig) -> list[tuple[str, str]]:
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
