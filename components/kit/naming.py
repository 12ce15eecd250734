"""The one place that decides what gpu-stack's objects are called, in Kubernetes and in Pulumi's state.

Names are a public contract, like the operator's: a stack lives for years and every `pulumi up` matches objects
by them. So a name derives only from what the object is (the component, the pool it serves), never from a wave
name, a list position or which other pools exist:

| object | Kubernetes name | Pulumi parent |
|---|---|---|
| a pool's driver DaemonSet | `nvidia-driver-daemonset-<pool>`, or the pool's `driver.daemonSetName` | `state-driver` |
| the driver DaemonSet of one entry of a pool's `nodeImage` / `os` list | `nvidia-driver-daemonset-<pool>-[<kernel>-]<os>`, or `driver.daemonSetNames[<entry>]` | `state-driver` |
| the driver DaemonSet of a stack without the node labeller | `nvidia-driver-daemonset` (the operator's) | `state-driver` |
| the gate after a pool's driver rolled, when a later wave waits for it | `gpu-stack-gate-<pool>` | `driver-waves` |
| the stack's validation gate | `gpu-stack-validation` | `stack-validation` |

Upgrade waves only add dependency edges between these objects. `driver.daemonSetName` pins a pool's driver
DaemonSet to a name it already runs under (a renamed pool, or a stack deployed before names were stable), so
such a change updates the DaemonSet in place instead of handing every node over to a new one.
"""

from __future__ import annotations

import hashlib
import re
from typing import Optional

import pulumi

from components.config.keys import derived

DRIVER_DAEMONSET = "nvidia-driver-daemonset"
GATE_PREFIX = "gpu-stack-gate-"
STACK_TYPE = "gpu-stack:index:GpuStack"
STACK_NAME = "gpu-stack"
# Driver DaemonSets of later upgrade waves lived under this component before every driver DaemonSet moved under
# `state-driver`; the alias lets `pulumi up` find them there and update them in place.
FORMER_WAVES_TYPE = "gpu-stack:index:DriverWaves"
FORMER_WAVES_NAME = "driver-waves"
# A name that is also a label value (a DaemonSet's `app` label, a Job's `job-name` label) holds 63 characters.
MAX_LABELLED_NAME = 63


def bounded(name: str, limit: int = MAX_LABELLED_NAME) -> str:
    """`name`, or its first characters and a hash of the whole when it is longer than `limit`, as the operator
    shortens its DaemonSet names: stable for a given input, distinct for distinct inputs."""
    if len(name) <= limit:
        return name
    suffix = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: limit - len(suffix) - 1].rstrip('-.')}-{suffix}"


def driver_daemonset(pool: str, pinned: Optional[str], *, per_pool: bool) -> str:
    """A pool's driver DaemonSet. `per_pool` is false when the stack has no node labeller: without the
    `gpu-stack/pool` label one DaemonSet serves every driver pool, under the operator's own name."""
    if pinned:
        return pinned
    return derived(bounded(f"{DRIVER_DAEMONSET}-{pool}"), pool) if per_pool else DRIVER_DAEMONSET


def sanitize_kernel(kernel: str) -> str:
    """The operator's getSanitizedKernelVersion: drop the arch, '_' -> '.', no trailing '.', lower case."""
    without_arch = re.sub(r"x86_64(?:_64k)?|aarch64(?:_64k)?", "", kernel)
    return without_arch.replace("_", ".").rstrip(".").lower()


def image_daemonset(pool: str, os_tag: str, kernel: Optional[str]) -> str:
    """The driver DaemonSet of one entry of a pool that lists its node images (or OSes): named from what it serves,
    the pool, the kernel (precompiled) and the OS, as the operator names its per-kernel DaemonSets; never from
    the entry's place in the list, so adding or removing another entry renames nothing."""
    flavour = f"{sanitize_kernel(kernel)}-{os_tag}" if kernel else os_tag
    return derived(bounded(f"{DRIVER_DAEMONSET}-{pool}-{flavour}"), pool, os_tag, kernel)


def pool_gate(pool: str) -> str:
    return derived(f"{GATE_PREFIX}{pool}", pool)


def component_urn(type_: str, name: str) -> str:
    """The URN of a component directly under the stack's GpuStack, for aliases to places things used to be."""
    chain = f"{STACK_TYPE}${type_}"
    return f"urn:pulumi:{pulumi.get_stack()}::{pulumi.get_project()}::{chain}::{name}"


def former_wave_parent() -> pulumi.Alias:
    """Where a later wave's driver DaemonSet was registered before it moved under `state-driver`."""
    return pulumi.Alias(parent=component_urn(FORMER_WAVES_TYPE, FORMER_WAVES_NAME))
