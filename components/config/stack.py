"""The whole stack as one model (StackConfig), composed of each area's models, and how each pool's driver is planned
(`pool_driver`, `pool_flavours`). The rules that span several keys read it from components/config/rules/."""

from __future__ import annotations

from typing import Optional

from pydantic import Field, SecretStr, field_validator

from components.config import limits
from components.config.base import _Model, shown
from components.config.cluster import (
    Cluster,
    Components,
    DaemonSets,
    DevicePlugin,
    MigManager,
    Nfd,
    NodeAgent,
    Registry,
    Toolkit,
    Validation,
    Validator,
    Versions,
)
from components.config.dra import Dra
from components.config.drivers import Driver, PoolDriver, PoolDriverPlan
from components.config.gpudirect import GpuDirect, gds_needs_open_modules
from components.config.hostpaths import HostPaths
from components.config.image_lists import DriverFlavour
from components.config.monitoring import DcgmExporter, Monitoring
from components.config.openshift import DriverToolkit
from components.config.overrides import OperandOverrides
from components.config.pools import MIG_LAYOUT_NAME, MigLayoutValue, NodePool
from components.config.upgrade import Upgrade
from components.config.vm import SandboxWorkloads, Vgpu
from components.kit import naming


class StackConfig(_Model):
    cluster: Cluster
    registry: Registry = Registry()
    versions: Versions = Versions()
    driver: Driver = Driver()
    toolkit: Toolkit = Toolkit()
    host_paths: HostPaths = HostPaths()
    device_plugin: DevicePlugin = DevicePlugin()
    validator: Validator = Validator()
    validation: Validation = Validation()
    nfd: Nfd = Nfd()
    node_agent: NodeAgent = NodeAgent()
    daemonsets: DaemonSets = DaemonSets()
    dcgm_exporter: DcgmExporter = DcgmExporter()
    mig_manager: MigManager = MigManager()
    monitoring: Monitoring = Monitoring()
    mig_layouts: dict[str, MigLayoutValue] = Field(
        default={},
        max_length=limits.MAX_MIG_LAYOUTS,
        description="Custom MIG layouts, usable as `nodePools[].sharing.migLayout`: layout name → either "
        "`{<MIG profile>: <instances per GPU>}` (the same devices on every GPU), or a list of per-GPU entries in "
        "mig-parted's shape (`devices`, `deviceFilter`, `migEnabled`, `migDevices`), so GPUs of one node can differ. "
        "Names are lower-case `a-z 0-9 - .`, never `all-…` (those are the built-ins), and each must be used by a pool. "
        "See docs/sharing.md.",
    )
    node_pools: list[NodePool] = Field(min_length=1, max_length=limits.MAX_NODE_POOLS)
    components: Components = Components()
    upgrade: Upgrade = Upgrade()
    sandbox_workloads: SandboxWorkloads = SandboxWorkloads()
    vgpu: Vgpu = Vgpu()
    gpudirect: GpuDirect = GpuDirect()
    dra: Dra = Dra()
    # Per-operand overrides (env, args, resources, images, pod settings): components/config/overrides.py
    operands: OperandOverrides = OperandOverrides()
    # Only ever a Pulumi secret (`pulumi config set --secret`); load_config refuses a plain value.
    registry_password: Optional[SecretStr] = None
    # Only ever a Pulumi secret: the contents of the cluster's kubeconfig (cluster.kubeconfig takes a path).
    kubeconfig: Optional[SecretStr] = None

    @field_validator("mig_layouts")
    @classmethod
    def _layout_names(cls, layouts: dict[str, MigLayoutValue]) -> dict[str, MigLayoutValue]:
        for name in layouts:
            if not MIG_LAYOUT_NAME.fullmatch(name):
                raise ValueError(f"{shown(name)} is not a usable layout name (a node label value: a-z, 0-9, '-', '.')")
        return layouts

    def pools_of(self, *workload_types: str) -> list[NodePool]:
        return [p for p in self.node_pools if p.workload_type in workload_types]

    @property
    def container_pools(self) -> list[NodePool]:
        return [p for p in self.node_pools if p.workload_type == "container"]

    @property
    def dra_pools(self) -> list[NodePool]:
        return [p for p in self.container_pools if p.allocation == "dra"]

    @property
    def gds_forces_open_modules(self) -> bool:
        return self.gpudirect.gds and gds_needs_open_modules(self.versions.gds)

    def pool_driver(self, pool: NodePool) -> PoolDriverPlan:
        own = pool.driver
        module_type = own.kernel_module_type or self.driver.kernel_module_type
        if module_type == "auto" and self.gds_forces_open_modules:
            # The operator resolves `auto` the same way for NVIDIADriver (IsOpenKernelModulesRequired).
            module_type = "open"
        mode = own.mode or self.driver.mode
        return PoolDriverPlan(
            mode=mode,
            version=own.version or self.versions.driver,
            branch=own.branch or self.driver.branch,
            kernel_module_type=module_type,
            flavours=pool_flavours(pool, mode, own, per_pool=self.components.node_labeler, dtk=self.driver_toolkit),
        )

    @property
    def driver_toolkit(self) -> Optional[DriverToolkit]:
        """The cluster's Driver Toolkit builds, where managed drivers are built with them (OpenShift)."""
        openshift = self.cluster.openshift
        if self.cluster.platform != "openshift" or openshift is None or not openshift.driver_toolkit.enabled:
            return None
        return openshift.driver_toolkit

    @property
    def driver_pools(self) -> list[NodePool]:
        """Container pools whose driver gpu-stack deploys (managed or precompiled)."""
        return [p for p in self.container_pools if self.pool_driver(p).mode != "host"]

    @property
    def shared_pools(self) -> list[NodePool]:
        """Pools whose device plugin needs a config of its own (any sharing, MIG included). DRA pools keep theirs:
        GFD reads the same config for its MIG strategy."""
        return [p for p in self.node_pools if p.sharing.strategy != "none"]

    def pools_sharing_by(self, *strategies: str) -> list[NodePool]:
        return [p for p in self.node_pools if p.sharing.strategy in strategies]


def pool_flavours(
    pool: NodePool, mode: str, own: PoolDriver, *, per_pool: bool, dtk: Optional[DriverToolkit] = None
) -> tuple[DriverFlavour, ...]:
    """The flavours of a pool's driver, in the order the pool writes them: one per node image with precompiled
    drivers (each kernel needs its own build), one per OS otherwise (a managed driver compiles for the kernel it
    finds), and on OpenShift with the Driver Toolkit one per RHCOS build of each OS (each build's DTK holds the
    kernel headers of that build alone)."""
    precompiled = mode == "precompiled"
    if dtk is not None and mode == "managed":
        return _toolkit_flavours(pool, dtk)
    if precompiled and pool.images:
        entries = [(image.name, image.os_tag, image) for image in pool.images]
    else:
        entries = [(tag, tag, next((i for i in pool.images if i.os_tag == tag), None)) for tag in pool.os_tags]
    if not entries:
        entries = [("", "", None)]  # only while load_config is refusing a pool without OS or node image
    if not pool.listed:
        entry, os_tag, image = entries[0]
        name = naming.driver_daemonset(pool.name, own.daemon_set_name, per_pool=per_pool)
        return (DriverFlavour(entry, os_tag, image, name, precompiled),)
    pins = own.daemon_set_names or {}
    return tuple(
        DriverFlavour(
            entry, os_tag, image,
            pins.get(entry) or naming.image_daemonset(pool.name, os_tag, image.kernel if precompiled and image else None),
            precompiled,
        )
        for entry, os_tag, image in entries
    )


def _toolkit_flavours(pool: NodePool, dtk: DriverToolkit) -> tuple[DriverFlavour, ...]:
    """One driver DaemonSet per (pool, RHCOS build), named from both, as the operator names its DTK DaemonSets per
    build: an OpenShift update that moves the nodes to a new build adds the new build's DaemonSet next to the old
    one, and the node agent moves each node over when it reboots into the new build. Pinned names do not apply:
    a build's DaemonSet lives only as long as the build."""
    return tuple(
        DriverFlavour(
            os_tag, os_tag, None, naming.bounded(f"{naming.DRIVER_DAEMONSET}-{pool.name}-{build}"), False, build, image
        )
        for os_tag in pool.os_tags
        for build, image in dtk.builds(os_tag).items()
    ) or (DriverFlavour("", "", None, naming.driver_daemonset(pool.name, None, per_pool=True), False),)
