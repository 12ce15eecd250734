"""Node pools and how they share their GPUs (time-slicing, MPS, MIG), with the checks of each pool's sharing
block and of the custom MIG layouts."""

from __future__ import annotations

import re
from typing import Annotated, Any, Callable, Literal, Optional, Union

from pydantic import AfterValidator, Discriminator, Field, PlainSerializer, StrictBool, Tag, field_validator, model_validator

from components.catalogs import catalog
from components.catalogs import mig_catalog
from components.config import limits
from components.config.base import MAX_GPU_INDEX, OS_TAG, _Model, dns_label_problem, gpu_devices, label_map_problem, node_images, shown
from components.config.drivers import PoolDriver
from node_images import catalog as node_image_catalog


SharingStrategy = Literal["none", "time-slicing", "mps", "mig-single", "mig-mixed"]
# CUDA MPS serves at most 48 client processes per GPU on Volta and later.
MPS_MAX_REPLICAS = 48
MIG_LAYOUT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$")


_PciId = Annotated[str, Field(pattern=mig_catalog.DEVICE_FILTER.pattern)]


class MigLayoutEntry(_Model):
    """One entry of a per-GPU MIG layout, in mig-parted's own shape (MP:api/spec/v1/spec.go) written camelCase:
    the GPUs it configures and how. Rendered into the MIG manager's config as `device-filter`, `devices`,
    `mig-enabled` and `mig-devices`."""

    devices: Union[Literal["all"], list[Annotated[int, Field(ge=0, le=MAX_GPU_INDEX)]]] = Field(
        description="The GPUs this entry configures: `all`, or a list of GPU indices as nvidia-smi numbers them "
        f"(0..{MAX_GPU_INDEX}, each once), narrowed by `deviceFilter` when set."
    )
    # pydantic matches `pattern` with Rust's regex, where `$` is the end of the text: no trailing newline passes.
    # A string too in the schema editors read (docs/stack.schema.json); the model holds a list (see _filter).
    device_filter: Optional[Union[_PciId, list[_PciId]]] = Field(
        default=None,
        max_length=limits.MAX_MIG_DEVICE_FILTERS,
        description="Only GPUs with one of these PCI ids, written as mig-parted takes them: device id then NVIDIA's "
        "vendor id, `0x20B210DE` for an A100-SXM4-80GB; one id may be written as a string, as mig-parted's files do. Unset: an entry for the pool's GPU model (gpu-stack adds its "
        "ids, so other GPUs of the node are left alone).",
    )
    mig_enabled: StrictBool = Field(description="MIG mode of these GPUs; `false` leaves them whole (`migDevices` empty).")
    mig_devices: dict[str, int] = Field(
        default_factory=dict,
        max_length=limits.MAX_MIG_PROFILES,
        description="MIG devices on each of these GPUs: MIG profile → instances per GPU, e.g. `{3g.40gb: 2}`; each "
        "must fit the GPU model its devices are on. Empty with `migEnabled: true`: MIG mode without devices.",
    )

    @model_validator(mode="before")
    @classmethod
    def _keys(cls, data: Any) -> Any:
        allowed = ("devices", "deviceFilter", "migEnabled", "migDevices")
        if isinstance(data, dict):
            unknown = sorted(str(key) for key in data if key not in allowed)
            if unknown:
                raise ValueError(f"unknown key {shown(unknown[0])}; allowed keys: {', '.join(allowed)}")
        return data

    _devices = field_validator("devices", mode="before")(gpu_devices)

    @field_validator("device_filter", mode="before")
    @classmethod
    def _filter(cls, value: Any) -> Any:
        if isinstance(value, str):
            # mig-parted's own files write one filter as a string; a list of one means the same.
            value = [value]
        for item in value if isinstance(value, list) else []:
            if not isinstance(item, str) or not mig_catalog.DEVICE_FILTER.fullmatch(item):
                raise ValueError(
                    f"{shown(item)} is not an NVIDIA PCI id as mig-parted takes it: device id then vendor 10DE, e.g. 0x20B210DE"
                )
        return value

    @field_validator("mig_devices")
    @classmethod
    def _profiles(cls, devices: dict[str, int]) -> dict[str, int]:
        for profile, count in devices.items():
            if not mig_catalog.PROFILE_NAME.fullmatch(profile):
                raise ValueError(f"{shown(profile)} is not a MIG profile name such as 1g.10gb, 3g.40gb or 1g.24gb+me")
            if count < 1:
                raise ValueError(f"{profile}: count must be at least 1, got {count}")
        return devices

    @model_validator(mode="after")
    def _disabled_has_no_devices(self) -> "MigLayoutEntry":
        if not self.mig_enabled and self.mig_devices:
            raise ValueError("migDevices must be empty when migEnabled is false (mig-parted refuses it)")
        return self

    def entry(self) -> mig_catalog.GpuEntry:
        devices = self.devices if self.devices == mig_catalog.ALL_DEVICES else tuple(self.devices)
        filters = tuple(self.device_filter) if self.device_filter else None
        return mig_catalog.GpuEntry(devices, self.mig_enabled, self.mig_devices, filters)


def _entries_in(entries: list[MigLayoutEntry]) -> tuple[mig_catalog.GpuEntry, ...]:
    return tuple(entry.entry() for entry in entries)


def _entries_out(entries: tuple[mig_catalog.GpuEntry, ...]) -> list[dict]:
    """A per-GPU layout back in the stack file's camelCase shape (the config hash and dumps)."""
    written = []
    for e in entries:
        one: dict = {"devices": e.devices if e.devices == mig_catalog.ALL_DEVICES else list(e.devices)}
        if e.device_filter:
            one["deviceFilter"] = list(e.device_filter)
        written.append({**one, "migEnabled": e.mig_enabled, "migDevices": dict(e.mig_devices)})
    return written


def _layout_form(value: Any) -> Optional[str]:
    if isinstance(value, dict):
        return "dict[profile, count]"
    if isinstance(value, (list, tuple)):
        return "list[entry]"
    return None


# A custom MIG layout: {profile: count} for every GPU alike, or mig-parted's per-GPU entries. After validation the
# entries are mig_catalog.GpuEntry values, which the catalog, the MIG manager and the inventory read directly.
# (The tags name the two forms; the loader leaves such bracketed parts out of error paths.)
MigLayoutValue = Annotated[
    Union[
        Annotated[dict[str, int], Field(max_length=limits.MAX_MIG_PROFILES), Tag("dict[profile, count]")],
        Annotated[
            list[MigLayoutEntry],
            Field(max_length=limits.MAX_MIG_LAYOUT_ENTRIES),
            AfterValidator(_entries_in),
            PlainSerializer(_entries_out),
            Tag("list[entry]"),
        ],
    ],
    Discriminator(
        _layout_form,
        custom_error_type="mig_layout_form",
        custom_error_message="a MIG layout is {<MIG profile>: <instances per GPU>} or a list of per-GPU entries "
        "({devices, deviceFilter, migEnabled, migDevices})",
    ),
]


def as_entries(value: Union[None, str, tuple[str, ...]]) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else value


def entry_list(value: Any, problem: Callable[[str], Optional[str]]) -> Any:
    """`os` and `nodeImage`: one entry, or a list of distinct entries (a pool mid-rollout), each checked by
    ``problem``; anything else is refused naming what the key takes."""
    if value is None:
        return None
    if isinstance(value, str):
        reason = problem(value)
        if reason:
            raise ValueError(reason)
        return value
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{shown(value)} is neither one entry nor a list of entries")
    if not 1 <= len(value) <= limits.MAX_NODE_IMAGES_PER_POOL:
        raise ValueError(f"lists {len(value)} entries; a pool runs 1 to {limits.MAX_NODE_IMAGES_PER_POOL} at once")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise ValueError(f"entry {index} is {shown(item)}, not a string")
        reason = problem(item)
        if reason:
            raise ValueError(f"entry {index}: {reason}")
    repeated = sorted({item for item in value if value.count(item) > 1})
    if repeated:
        raise ValueError(f"lists {', '.join(map(repr, repeated))} more than once")
    return tuple(value)


def _os_problem(value: str) -> Optional[str]:
    if OS_TAG.fullmatch(value):
        return None
    return f"{shown(value)} is not an OS tag as NFD reports it (ID + VERSION_ID), e.g. ubuntu22.04, ubuntu24.04, rhel9"


def _node_image_problem(value: str) -> Optional[str]:
    if value in node_images().names:
        return None
    return f"unknown node image {shown(value)}; entries of node_images/catalog.yaml: {', '.join(node_images().names)}"


class Sharing(_Model):
    strategy: SharingStrategy = "none"
    replicas: Optional[int] = Field(default=None, ge=2, le=64)
    rename_by_default: Optional[StrictBool] = None
    fail_requests_greater_than_one: Optional[StrictBool] = None
    mig_layout: Optional[str] = None

    @property
    def is_mig(self) -> bool:
        return self.strategy.startswith("mig-")

    @property
    def mig_strategy(self) -> Optional[str]:
        return self.strategy[len("mig-"):] if self.is_mig else None


class NodePool(_Model):
    name: str
    node_selector: dict[str, str]
    gpu_model: str
    # Required unless nodeImage names a catalog entry, which carries the OS. A list while the pool's nodes move
    # from one OS to another: one driver DaemonSet per OS, each selecting the nodes that run it.
    os: Optional[Union[str, tuple[str, ...]]] = None
    # An entry of node_images/catalog.yaml: the OS, kernel and architecture the pool's nodes boot. A list while
    # they move to another image (components/config/image_lists.py).
    node_image: Optional[Union[str, tuple[str, ...]]] = None
    workload_type: Literal["container", "vm-passthrough", "vm-vgpu"] = "container"
    driver: PoolDriver = PoolDriver()
    sharing: Sharing = Sharing()
    # vm-vgpu pools: the vgpu-configs entry their GPUs are split by (label nvidia.com/vgpu.config).
    vgpu_config: Optional[str] = None
    # Container pools: who hands out the GPUs, the device plugin (nvidia.com/gpu) or NVIDIA's DRA driver
    # (ResourceClaims).
    allocation: Literal["device-plugin", "dra"] = "device-plugin"
    # How many nodes the pool has: the validation gates fail while fewer are validated, and a wave's timeout is
    # checked against how long its nodes take to roll at the upgrade's maxUnavailable.
    expected_nodes: Optional[int] = Field(default=None, ge=0, le=100_000)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        problem = dns_label_problem(value, limit=40)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("node_selector")
    @classmethod
    def _selector(cls, selector: dict[str, str]) -> dict[str, str]:
        problem = label_map_problem(selector, what="label selector term")
        if problem:
            raise ValueError(problem)
        return selector

    @field_validator("gpu_model")
    @classmethod
    def _model(cls, value: str) -> str:
        if value not in catalog.GPU_MODELS:
            raise ValueError(f"unknown GPU model {shown(value)}; allowed values: {', '.join(catalog.GPU_MODELS)}")
        return value

    @field_validator("os", mode="before")
    @classmethod
    def _os(cls, value: Any) -> Any:
        return entry_list(value, _os_problem)

    @field_validator("node_image", mode="before")
    @classmethod
    def _node_image(cls, value: Any) -> Any:
        return entry_list(value, _node_image_problem)

    @property
    def model(self) -> catalog.GpuModel:
        return catalog.GPU_MODELS[self.gpu_model]

    @property
    def listed(self) -> bool:
        """Whether the pool lists its node images (or OSes): then each gets a driver DaemonSet named from what it
        serves; a single value keeps the pool's one DaemonSet and its name."""
        return isinstance(self.node_image, tuple) or isinstance(self.os, tuple)

    @property
    def image_names(self) -> tuple[str, ...]:
        return as_entries(self.node_image)

    @property
    def os_entries(self) -> tuple[str, ...]:
        return as_entries(self.os)

    @property
    def images(self) -> tuple[node_image_catalog.NodeImage, ...]:
        return tuple(node_images().get(name) for name in self.image_names)

    @property
    def image(self) -> Optional[node_image_catalog.NodeImage]:
        """The pool's one node image (the first, while load_config is refusing a list where it needs one)."""
        return self.images[0] if self.images else None

    @property
    def os_tags(self) -> tuple[str, ...]:
        """Every OS the pool's nodes run, in the order written: the node images' when they are named."""
        if self.images:
            return tuple(dict.fromkeys(image.os_tag for image in self.images))
        return self.os_entries

    @property
    def os_tag(self) -> str:
        # The first; empty only while load_config is rejecting a pool that has neither.
        return self.os_tags[0] if self.os_tags else ""
