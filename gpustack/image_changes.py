"""What a change does to the node images the driver DaemonSets serve (components/config/image_lists.py).

A driver DaemonSet is built for one node image: NFD's OS labels in the affinity term that picks the nodes the agent
has not assigned yet, and the kernel in its node selector (precompiled). Changing that in place, the edit a pool
with one `nodeImage` or `os` invites, breaks every node still on the old image at once: the DaemonSet controller
deletes the driver pod of each node whose kernel no longer matches, and the node agent takes the DaemonSet away
from each node whose OS no longer does, outside any budget and days before those nodes are reimaged
(`node-image-changed`). Deleting a DaemonSet that still serves nodes is what the last step of a rollout does; its
orphaned pods are retired by the agents at the budget's pace, and how many nodes that is cannot be known offline,
so the plan says how to count them (a note, not a danger).
"""

from __future__ import annotations

from typing import Mapping

from gpustack.mockrun import Registration
from node_images.catalog import NFD_KERNEL_FULL, NFD_OS_ID, NFD_OS_VERSION_ID, NFD_OS_VERSION_MAJOR

NODE_IMAGE_KEYS = (NFD_OS_ID, NFD_OS_VERSION_ID, NFD_OS_VERSION_MAJOR, NFD_KERNEL_FULL)
DRIVER_LABEL = "gpu-stack/driver"


def serves(registration: Registration) -> dict[str, str]:
    """The NFD labels of the node image a driver DaemonSet is built for ({} when it selects no image)."""
    spec = ((registration.inputs.get("spec") or {}).get("template") or {}).get("spec") or {}
    found = {k: v for k, v in (spec.get("nodeSelector") or {}).items() if k in NODE_IMAGE_KEYS}
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    for term in required.get("nodeSelectorTerms") or []:
        for expression in term.get("matchExpressions") or []:
            values = expression.get("values") or []
            if expression.get("key") in NODE_IMAGE_KEYS and expression.get("operator") == "In" and len(values) == 1:
                found[expression["key"]] = values[0]
    return found


def described(labels: Mapping[str, str]) -> str:
    os_tag = labels.get(NFD_OS_ID, "") + labels.get(NFD_OS_VERSION_ID, labels.get(NFD_OS_VERSION_MAJOR, ""))
    kernel = labels.get(NFD_KERNEL_FULL)
    return " ".join(part for part in (os_tag, f"kernel {kernel}" if kernel else "") if part) or "any node image"


def moved_in_place(old: Registration, new: Registration) -> bool:
    """Whether the DaemonSet would serve another node image than before. A key only one side has is no move: a
    DaemonSet rendered before it named its OS (gpu-stack before node image lists) gains the OS it already ran."""
    before, after = serves(old), serves(new)
    return any(before[key] != after[key] for key in before.keys() & after.keys())


def moved_message(label: str, old: Registration, new: Registration) -> str:
    was, becomes = described(serves(old)), described(serves(new))
    return (f"{label} is built for {was} and would serve {becomes} instead, in place: every node still on {was} "
            f"loses its driver at once (or runs one built for {becomes}), outside the budget, before it is "
            f"reimaged. List the new image next to the old one (`nodeImage: [old, new]`, or `os: [old, new]` for a "
            f"managed driver) so it gets a DaemonSet of its own; remove the old one once no node runs it "
            f"(docs/runbook.md, \"Rolling a pool to a new kernel or OS\")")


def removed_note(label: str, old: Registration) -> str:
    name = (old.inputs.get("metadata") or {}).get("name") or label
    return (f"{label} served {described(serves(old))}: nodes still running it keep their driver until the node "
            f"agent retires it at the budget's pace, and are reported (gpu-stack/node-image-unlisted). This diff "
            f"cannot count them offline; before `pulumi up`: kubectl get nodes -l {DRIVER_LABEL}={name}")


def is_image_daemonset(registration: Registration) -> bool:
    return bool(serves(registration))

