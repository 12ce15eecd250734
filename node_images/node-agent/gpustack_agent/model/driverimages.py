"""Which driver DaemonSet serves a node: the one built for the node image the node runs (config version 4).

A pool whose nodes move to a new kernel or OS lists both images, each with a driver DaemonSet of its own and the
NFD labels of the nodes it is built for (``driverImages``). The agent writes the node's ``gpu-stack/driver`` label
from the node's own NFD labels, so a node that reboots into the new image is handed to the new DaemonSet with no
other step. The rules, in order:

- a driver image whose labels the node carries: its DaemonSet;
- none, and the node carries no NFD OS label (NFD has not labelled it, or cannot): the node keeps what it has,
  since nothing says its driver is wrong;
- none, and NFD says which OS the node runs: the node's image is one its pool does not list. It is never given a
  DaemonSet built for another kernel or OS, it is reported (:func:`unlisted_reason`), and a DaemonSet it already has
  is taken away at the upgrade's pace, never from under GPU work (its driver may still work).

This module is pure: nodes are label maps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

NFD_OS_ID = "feature.node.kubernetes.io/system-os_release.ID"
NFD_OS_VERSION_ID = "feature.node.kubernetes.io/system-os_release.VERSION_ID"
NFD_KERNEL_FULL = "feature.node.kubernetes.io/kernel-version.full"
# Says why a node has no driver DaemonSet of its pool; shown by `kubectl describe node` and in gate verdicts.
UNLISTED_ANNOTATION = "gpu-stack/node-image-unlisted"
MAX_DRIVER_IMAGES = 16


class DriverImagesError(ValueError):
    """The document's driverImages cannot be used."""


@dataclass(frozen=True)
class DriverImage:
    daemonset: str
    node_labels: Mapping[str, str]

    def serves(self, node_labels: Mapping[str, str]) -> bool:
        return all(node_labels.get(k) == v for k, v in self.node_labels.items())


def parse(raw: Any, where: str, *, is_name: Any, is_label_key: Any, is_label_value: Any) -> tuple[DriverImage, ...]:
    """A pool's ``driverImages``: 1 to MAX_DRIVER_IMAGES objects ``{daemonSet, nodeLabels}``, distinct names."""
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_DRIVER_IMAGES:
        raise DriverImagesError(f"{where} must be a list of 1 to {MAX_DRIVER_IMAGES} driver images")
    images: list[DriverImage] = []
    for index, item in enumerate(raw):
        here = f"{where}[{index}]"
        if not isinstance(item, dict):
            raise DriverImagesError(f"{here} must be an object")
        name = item.get("daemonSet")
        if not isinstance(name, str) or not is_name(name):
            raise DriverImagesError(f"{here}.daemonSet is not a DaemonSet name")
        labels = item.get("nodeLabels", {})
        if not isinstance(labels, dict) or len(labels) > 8:
            raise DriverImagesError(f"{here}.nodeLabels must be an object of at most 8 labels")
        for key, value in labels.items():
            if not isinstance(key, str) or not is_label_key(key) or not isinstance(value, str) or not is_label_value(value):
                raise DriverImagesError(f"{here}.nodeLabels has an entry that is not a label")
        if any(i.daemonset == name for i in images):
            raise DriverImagesError(f"{here}.daemonSet {name!r} is listed twice")
        images.append(DriverImage(name, dict(labels)))
    return tuple(images)


def serving(node_labels: Mapping[str, str], images: Sequence[DriverImage]) -> Optional[DriverImage]:
    return next((image for image in images if image.serves(node_labels)), None)


def wanted(node_labels: Mapping[str, str], images: Sequence[DriverImage], current: Optional[str]) -> Optional[str]:
    """The gpu-stack/driver value the node should carry (see the module docstring)."""
    match = serving(node_labels, images)
    if match is not None:
        return match.daemonset
    if NFD_OS_ID not in node_labels:
        return current
    return None


def unlisted_reason(node_labels: Mapping[str, str], pool: str, images: Sequence[DriverImage]) -> Optional[str]:
    """Why the node gets no driver DaemonSet of its pool, or None when one serves it (or NFD has not said)."""
    if serving(node_labels, images) is not None or NFD_OS_ID not in node_labels:
        return None
    runs = f"{node_labels.get(NFD_OS_ID, '')}{node_labels.get(NFD_OS_VERSION_ID, '')}"
    kernel = node_labels.get(NFD_KERNEL_FULL)
    if kernel:
        runs += f" kernel {kernel}"
    return (f"runs {runs}, which pool {pool} lists no driver for (its driver DaemonSets: "
            f"{', '.join(i.daemonset for i in images)}); add the node image to the pool's nodeImage or os list")[:1000]


def moved_off(node_labels: Mapping[str, str], daemonset: str, all_images: Sequence[DriverImage]) -> bool:
    """Whether the node itself moved off the image ``daemonset`` is built for (it rebooted into another kernel or
    was reimaged): then that DaemonSet's driver cannot serve it any more, and handing the node on to the DaemonSet
    of its new image waits for no slot. A DaemonSet of another pool, or one the document does not know, is handed
    over at the upgrade's pace."""
    known = next((image for image in all_images if image.daemonset == daemonset), None)
    return known is not None and bool(known.node_labels) and not known.serves(node_labels)
