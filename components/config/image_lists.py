"""Node image rollouts: a pool whose nodes run several node images (precompiled) or OSes (managed) at once.

Platform teams move a pool's nodes to a new kernel or OS release node by node, with their own tooling, over days.
Through that rollout the pool lists both: `nodeImage: [old, new]` (catalog entries) or `os: [old, new]`. Each
entry is a flavour of the pool's driver, served by a driver DaemonSet of its own that selects the nodes running it
(NFD's OS and kernel labels, as the operator's per-OS and per-kernel DaemonSets do), so a node that reboots into
the new image is served by the new DaemonSet with no other step.

Names are a contract (components/kit/naming.py). A pool with one value (`nodeImage: X`) keeps its one DaemonSet
and its name, `nvidia-driver-daemonset-<pool>` or `driver.daemonSetName`. A pool with a list names each entry's
DaemonSet from what it serves, `nvidia-driver-daemonset-<pool>-[<kernel>-]<os>`, never from the entry's place in
the list, or from `driver.daemonSetNames[<entry>]`, the name it already runs under: the pool's one DaemonSet, kept
for its entry when the pool first lists a second image next to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from components.catalogs import openshift
from components.config.base import NAMESPACE, shown
from components.kit import naming
from node_images import catalog as node_image_catalog

if TYPE_CHECKING:
    from components.config.drivers import PoolDriver, PoolDriverPlan
    from components.config.openshift import DriverToolkit
    from components.config.pools import NodePool
    from components.config.stack import StackConfig


@dataclass(frozen=True)
class DriverFlavour:
    """One node image (precompiled: its kernel and OS) or OS (managed) of a pool, and the driver DaemonSet that
    serves the pool's nodes running it."""

    # As the pool writes it: a node_images/catalog.yaml entry (precompiled) or an OS tag (managed).
    entry: str
    os_tag: str
    node_image: Optional[node_image_catalog.NodeImage]
    daemonset: str
    precompiled: bool
    # OpenShift with the Driver Toolkit: the RHCOS build this flavour's driver is built for, and its DTK image.
    rhcos: Optional[str] = None
    dtk_image: Optional[str] = None

    @property
    def kernel(self) -> Optional[str]:
        return self.node_image.kernel if self.precompiled and self.node_image else None

    def node_labels(self) -> dict[str, str]:
        """The NFD labels of exactly the nodes this flavour's driver is built for."""
        labels = node_image_catalog.os_release_labels(self.os_tag) if self.os_tag else {}
        if self.kernel:
            labels[node_image_catalog.NFD_KERNEL_FULL] = self.kernel
        if self.rhcos:
            labels[openshift.NFD_OSTREE_VERSION] = self.rhcos
        return labels


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
