"""The whole stack as one model, and the rules that span several keys, which call each area's own checks."""

from __future__ import annotations

from typing import Optional

from pydantic import Field, SecretStr, field_validator

from components.config import limits
from components.config.base import DIGEST, NAMESPACE, _Model, shown
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
from components.config.dra import Dra, _dra_checks
from components.config.driver_extensions import _driver_extension_checks
from components.config.image_lists import pool_flavours
from components.config.openshift import DriverToolkit, openshift_checks
from components.config.drivers import Driver, PoolDriverPlan, _driver_daemonset_checks, _pool_driver_checks
from components.config.gpudirect import GpuDirect, _gpudirect_checks, gds_needs_open_modules
from components.config.hostpaths import HostPaths, _host_paths_checks
from components.config.monitoring import DcgmExporter, Monitoring, _monitoring_checks
from components.config.overrides import OperandOverrides, _operand_checks
from components.config.pools import MIG_LAYOUT_NAME, MigLayoutValue, NodePool, _mig_layout_checks, _sharing_checks
from components.config.upgrade import Upgrade, _upgrade_checks
from components.config.vm import SandboxWorkloads, Vgpu


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


def _cross_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    """Rules that span several keys; each names the key a user has to change."""
    problems: list[tuple[str, str]] = []
    seen_names: dict[str, int] = {}
    seen_selectors: dict[tuple, int] = {}
    for i, pool in enumerate(cfg.node_pools):
        here = f"{NAMESPACE}:nodePools[{i}]"
        if pool.name in seen_names:
            problems.append((f"{here}.name", f"duplicate pool name {pool.name!r} (also nodePools[{seen_names[pool.name]}])"))
        seen_names.setdefault(pool.name, i)
        selector = tuple(sorted(pool.node_selector.items()))
        if selector in seen_selectors:
            problems.append(
                (f"{here}.nodeSelector", f"same selector as nodePools[{seen_selectors[selector]}]: this pool could never match a node")
            )
        seen_selectors.setdefault(selector, i)
        if not pool.node_selector and i != len(cfg.node_pools) - 1:
            problems.append(
                (f"{here}.nodeSelector", "an empty selector matches every GPU node, so it must be the last pool")
            )
        problems += _sharing_checks(cfg, pool, here)
        problems += _pool_driver_checks(cfg, pool, here)
    problems += _upgrade_checks(cfg)
    problems += _gpudirect_checks(cfg)
    problems += _host_paths_checks(cfg)
    problems += _dra_checks(cfg)
    problems += _monitoring_checks(cfg)
    problems += _mig_layout_checks(cfg)
    problems += _operand_checks(cfg)
    if cfg.driver.mode == "precompiled" and DIGEST.fullmatch(cfg.versions.driver):
        problems.append((f"{NAMESPACE}:versions.driver", "a digest cannot be combined with precompiled drivers"))
    if "node_inventory" in cfg.components.model_fields_set and cfg.components.node_inventory and not cfg.components.node_labeler:
        problems.append(
            (
                f"{NAMESPACE}:components.nodeInventory",
                "the inventory compares each node with the pool the node labeller matched it to: set "
                "components.nodeLabeler: true, or nodeInventory: false",
            )
        )
    problems += _driver_daemonset_checks(cfg)
    problems += openshift_checks(cfg)
    problems += _driver_extension_checks(cfg)
    if cfg.cluster.container_runtime == "cri-o" and cfg.toolkit.runtime_socket is not None:
        problems.append((f"{NAMESPACE}:toolkit.runtimeSocket", "cri-o is configured without a socket; remove this key"))
    needs_agent = cfg.components.node_labeler or cfg.validation.mode != "off"
    if needs_agent and cfg.node_agent.image is None:
        problems.append(
            (
                f"{NAMESPACE}:nodeAgent.image",
                "required: the node labeller and the validation gate run it; build node_images/node-agent and push it",
            )
        )
    if cfg.validation.mode != "off" and not cfg.components.toolkit:
        problems.append(
            (f"{NAMESPACE}:validation.mode", "the validator cannot pass without the container toolkit; use 'off' or enable it")
        )
    return problems
