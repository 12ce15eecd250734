"""Which driver DaemonSets a stack renders and what each one installs: the plan `state-driver`
(components/states/driver/state.py) renders and the driver upgrade waves (components/states/waves.py) order.

Which DaemonSets (`plan_targets`): one per pool with a deployed driver, `nvidia-driver-daemonset-<pool>`, or the
name the pool pins with `driver.daemonSetName` (pools that pin one name share that DaemonSet); without the node
labeller the stack's one driver DaemonSet keeps the operator's name `nvidia-driver-daemonset` (components/kit/naming.py).
Each selects its pools' nodes (`gpu-stack/pool In [...]`), so no node is selected by two of them; precompiled
DaemonSets also select the pool's kernel. Host-driver pools have no `driver` deploy label and get none.

A target says what a DaemonSet installs, not how it rolls: every driver DaemonSet is OnDelete, and the node agents
replace its pods within the fleet's one disruption budget (components/states/driver/state.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Optional

from components.catalogs import consts
from components.config import NodePool, StackConfig
from components.config.image_lists import DriverFlavour
from components.states.driver.images import os_tagged, sidecar_parts
from components.states.driver.extensions import digest_material
from node_images import catalog as node_image_catalog


@dataclass(frozen=True)
class Sidecars:
    """GPUDirect modules the driver pods build and load next to the driver (fact sheet §2.3): stack-wide, as
    ClusterPolicy's `gds`, `gdrcopy` and `driver.rdma` are. Repositories and versions; the node's OS tag is
    appended per DaemonSet, as for the driver image."""

    gds: Optional[tuple[str, str]] = None
    gdrcopy: Optional[tuple[str, str]] = None
    rdma: bool = False
    host_mofed: bool = False


@dataclass(frozen=True)
class ValidatedFiles:
    """What a node's validator has written once the node works, by how the node's GPUs are handed out: DRA nodes
    are validated by the DRA validator, whose last file is `dra-ready` rather than cuda's and the plugin's."""

    device_plugin: tuple[str, ...]
    dra: tuple[str, ...] = ()


@dataclass(frozen=True)
class OpenShiftDriver:
    """What a driver DaemonSet on OpenShift adds (fact sheet Appendix F): the cluster's version and proxy for the
    driver container, and with the Driver Toolkit the RHCOS build it is built for and that build's DTK image."""

    version: str
    proxy_env: tuple[tuple[str, str], ...] = ()
    trusted_ca: bool = False
    rhcos: Optional[str] = None
    dtk_image: Optional[str] = None

    @property
    def toolkit(self) -> bool:
        return self.dtk_image is not None


@dataclass(frozen=True)
class DriverTarget:
    """One driver DaemonSet and the pools it serves (`selects_pools` false: every node with the driver deploy label,
    in a stack without the node labeller)."""

    daemonset: str
    image: str
    os_tag: str
    kernel_module_type: str
    pools: tuple[str, ...]
    kernel: Optional[str] = None  # precompiled only
    sidecars: Sidecars = Sidecars()
    dra: bool = False  # its pools allocate by DRA
    selects_pools: bool = True
    # The stack's driver extensions the install depends on (states/driver/extensions.py digest_material), if any.
    extensions: Optional[str] = None
    # NFD's labels of the nodes it is built for (OS, and kernel when precompiled): what a node the agent has not
    # assigned yet must carry, and what the agent assigns nodes by (components/config/image_lists.py).
    node_labels: tuple[tuple[str, str], ...] = ()
    openshift: Optional[OpenShiftDriver] = None

    def validated_files(self, files: ValidatedFiles) -> tuple[str, ...]:
        return files.dra if self.dra else files.device_plugin

    @property
    def precompiled(self) -> bool:
        return self.kernel is not None


def gpudirect_sidecars(cfg: StackConfig) -> Sidecars:
    gpudirect = cfg.gpudirect
    return Sidecars(
        gds=sidecar_parts(cfg, "gds") if gpudirect.gds else None,
        gdrcopy=sidecar_parts(cfg, "gdrcopy") if gpudirect.gdrcopy else None,
        rdma=gpudirect.rdma.enabled,
        host_mofed=gpudirect.rdma.use_host_mofed,
    )


def plan_targets(cfg: StackConfig, repository: str, sidecars: Sidecars = Sidecars()) -> list[DriverTarget]:
    """The driver DaemonSets of a stack, in pool order: one per DaemonSet name (see the module docstring).
    load_config guarantees that pools sharing a name share their driver."""
    pools_of: dict[str, list[str]] = {}
    first: dict[str, tuple[NodePool, DriverFlavour]] = {}
    for pool in cfg.driver_pools:
        for flavour in cfg.pool_driver(pool).flavours:
            pools_of.setdefault(flavour.daemonset, []).append(pool.name)
            first.setdefault(flavour.daemonset, (pool, flavour))
    targets = []
    for name, (pool, flavour) in first.items():
        plan = cfg.pool_driver(pool)
        if plan.mode == "precompiled":
            assert flavour.node_image is not None  # load_config guarantees it
            image = node_image_catalog.image_ref(flavour.node_image, plan.branch, repository)
        else:
            image = os_tagged(repository, plan.version, flavour.os_tag)
        targets.append(
            DriverTarget(
                name,
                image,
                flavour.os_tag,
                plan.kernel_module_type,
                tuple(pools_of[name]),
                flavour.kernel,
                sidecars,
                pool.allocation == "dra",
                selects_pools=cfg.components.node_labeler,
                extensions=digest_material(cfg.driver),
                node_labels=tuple(sorted(flavour.node_labels().items())) if cfg.components.node_labeler else (),
                openshift=_openshift_driver(cfg, flavour),
            )
        )
    return targets


def _openshift_driver(cfg: StackConfig, flavour: DriverFlavour) -> Optional[OpenShiftDriver]:
    openshift = cfg.cluster.openshift
    if cfg.cluster.platform != "openshift" or openshift is None:
        return None
    proxy = openshift.proxy
    return OpenShiftDriver(
        openshift.version,
        proxy.env if proxy is not None else (),
        proxy is not None and proxy.trusted_ca,
        flavour.rhcos,
        flavour.dtk_image,
    )


def targets_of_pool(targets: list[DriverTarget], pool: str) -> list[DriverTarget]:
    """The driver DaemonSets that serve a pool: one per node image it runs."""
    return [t for t in targets if pool in t.pools]


def config_digest(target: DriverTarget) -> str:
    """Lets k8s-driver-manager skip an uninstall (and the GPU-pod eviction) when nothing the driver install
    depends on changed (DRIVER_CONFIG_DIGEST, fact sheet §4.1)."""
    material: dict = {"image": target.image, "kernelModuleType": target.kernel_module_type}
    if target.extensions is not None:
        # A licence, repository, CA, module parameter or volume change reinstalls, as the operator's digest does.
        material["extensions"] = target.extensions
    if target.openshift is not None:
        # The operator's digest holds the OpenShift version, the RHCOS build, its DTK image and the proxy too.
        material["openshift"] = dataclasses.asdict(target.openshift)
    if target.sidecars != Sidecars():
        # peermem is built into the driver install with MOFED's symbols, so turning RDMA on needs a reinstall.
        material["gpudirect"] = [*sidecar_images(target).values(), target.sidecars.rdma, target.sidecars.host_mofed]
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


def sidecar_images(target: DriverTarget) -> dict[str, str]:
    images = {}
    for name, repository_version in ((consts.GDS_CONTAINER, target.sidecars.gds), (consts.GDRCOPY_CONTAINER, target.sidecars.gdrcopy)):
        if repository_version is not None:
            images[name] = os_tagged(*repository_version, target.os_tag)
    return images
