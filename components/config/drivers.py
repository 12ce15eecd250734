"""The driver: stack-wide and per-pool settings, the plan a pool's nodes run, and the checks that each pool's
driver suits its GPUs and node image, and that pools sharing a driver DaemonSet can share it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional, get_args

from pydantic import Field, StrictBool, field_validator

from components.catalogs import catalog
from components.config.base import DNS_SUBDOMAIN, _driver_branch, _full_driver_version, _Model, shown
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
from components.config.image_lists import DriverFlavour
from node_images import catalog as node_image_catalog


# The one spelling of each: the models' fields take these types (the schema, the docs and pydantic's errors list
# their values), the importer the kernel module types.
DriverMode = Literal["managed", "host", "precompiled"]
KernelModuleType = Literal["auto", "open", "proprietary"]
KERNEL_MODULE_TYPES = get_args(KernelModuleType)


class Driver(_Model):
    mode: DriverMode = "managed"
    # Precompiled images are tagged by branch, not full version (fact sheet §4.3).
    branch: str = catalog.IMAGES["driver"][1].split(".")[0]
    kernel_module_type: KernelModuleType = "auto"
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

    mode: Optional[DriverMode] = None
    # Full version (managed) or branch (precompiled), as the stack-wide keys.
    version: Optional[str] = None
    branch: Optional[str] = None
    kernel_module_type: Optional[KernelModuleType] = None
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
