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

This module holds what a flavour is; StackConfig plans a pool's flavours (components/config/stack.py
`pool_flavours`) and components/config/rules/drivers.py checks a pool's list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from components.catalogs import openshift
from node_images import catalog as node_image_catalog

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
