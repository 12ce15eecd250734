"""What NVIDIA's driver DaemonSet takes besides the driver itself (fact sheet §2.3, §11 driver rows): vGPU guest
licensing, package-repository and certificate ConfigMaps, kernel module parameters, a Secret as environment, extra
volumes, probe timings and host networking. Rendered by components/states/driver/extensions.py.

Every key is stack-wide (`gpu-stack:driver.*`), as ClusterPolicy's `driver` section has them: one driver image
repository serves every pool (a vGPU guest driver is a repository of its own, so a licence goes with it), the
mirror and CA a node fetches packages through are a property of the network, and pools that share a driver
DaemonSet would otherwise have to agree on each key. What differs per DaemonSet is derived from the pool: the OS
directories the repository and certificate files land in, and whether the driver is precompiled.
"""

from __future__ import annotations

import re
from typing import ClassVar, Literal, Optional

from pydantic import Field, StrictBool, field_validator, model_validator

from components.config.base import DNS_LABEL, DNS_SUBDOMAIN, _Model, shown


# A ConfigMap or Secret key (IsConfigMapKey): also the file name it is mounted as.
CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
# Volume names the driver DaemonSet already uses (components/states/driver/state.py, states/driver/extensions.py).
RESERVED_VOLUMES = frozenset(
    {
        "run-nvidia", "var-log", "dev-log", "host-os-release", "run-nvidia-fabricmanager", "run-nvidia-topologyd",
        "mlnx-ofed-usr-src", "run-mellanox-drivers", "run-nvidia-validations", "host-root", "host-sys",
        "firmware-search-path", "host-sys-devices-system", "nv-firmware", "driver-startup-probe-script",
        "licensing-config",
    }
)
# Where the operator mounts kernel module parameters and the vGPU licence (GO:controllers/object_controls.go
# driversDir, GO:internal/consts/consts.go).
DRIVERS_DIR = "/drivers"
GRIDD_CONF = "gridd.conf"
NLS_TOKEN = "client_configuration_token.tok"
GRIDD_CONF_PATH = f"{DRIVERS_DIR}/{GRIDD_CONF}"
NLS_TOKEN_PATH = f"{DRIVERS_DIR}/ClientConfigToken/{NLS_TOKEN}"
# nvidia-driver-ctr's own mounts (components/states/driver/state.py): an extra volume cannot take one of them.
DRIVER_MOUNT_PATHS = frozenset(
    {
        "/run/nvidia", "/run/nvidia-fabricmanager", "/run/nvidia-topologyd", "/var/log", "/dev/log",
        "/host-etc/os-release", "/run/mellanox/drivers/usr/src", "/run/mellanox/drivers", "/sys/devices/system",
        "/sys/module/firmware_class/parameters/path", "/lib/firmware", "/usr/local/bin/startup-probe.sh",
        GRIDD_CONF_PATH, NLS_TOKEN_PATH,
    }
)


def _object_name(value: Optional[str]) -> Optional[str]:
    if value is not None and (not DNS_SUBDOMAIN.fullmatch(value) or len(value) > 253):
        raise ValueError(f"{value[:80]!r} is not a Kubernetes object name (DNS-1123 subdomain, at most 253)")
    return value


def _volume_source_name(value: str) -> str:
    # NVIDIA names the volume after the ConfigMap (createConfigMapVolume), so the name must also be a volume name.
    if not DNS_LABEL.fullmatch(value) or len(value) > 63:
        raise ValueError(
            f"{value[:80]!r} is not usable: the driver pod's volume takes the ConfigMap's name, which must then be a "
            "DNS-1123 label (lower-case letters, digits and '-', at most 63)"
        )
    return value


def _files(value: list[str]) -> list[str]:
    for key in value:
        if not CONFIG_KEY.fullmatch(key) or key.startswith("..") or key == "." or len(key) > 253:
            raise ValueError(f"{key[:80]!r} is not a ConfigMap key (letters, digits, '-', '_', '.')")
    if len(set(value)) != len(value):
        raise ValueError("lists a key twice")
    return value


class LicensingConfig(_Model):
    """vGPU guest licensing (`driver.licensingConfig`): gridd.conf, and with NLS the client configuration token,
    mounted into the driver container under /drivers."""

    secret_name: Optional[str] = Field(
        default=None,
        description="The Secret holding `gridd.conf` and, with `nlsEnabled`, `client_configuration_token.tok` "
        "(in the stack's namespace). Preferred over `configMapName`: the token is a credential.",
    )
    config_map_name: Optional[str] = Field(
        default=None,
        description="Deprecated in the GPU Operator (use `secretName`): a ConfigMap with the same keys.",
    )
    nls_enabled: StrictBool = Field(
        default=True,
        description="NVIDIA License System: also mount `client_configuration_token.tok` at "
        "/drivers/ClientConfigToken/. `false` for a legacy license server configured in gridd.conf alone.",
    )

    _names = field_validator("secret_name", "config_map_name")(_object_name)

    @model_validator(mode="after")
    def _one_source(self) -> "LicensingConfig":
        if (self.secret_name is None) == (self.config_map_name is None):
            raise ValueError("set exactly one of secretName (preferred) and configMapName")
        return self


class _Files(_Model):
    files: list[str] = Field(
        min_length=1,
        max_length=64,
        description="The ConfigMap's keys, each mounted as a file of that name (the operator mounts every key it "
        "finds in the cluster; gpu-stack renders offline, so it takes them here).",
    )

    _keys = field_validator("files")(_files)


class RepoConfig(_Files):
    """Package repositories for the driver install (`driver.repoConfig`): each key a file in the OS's repository
    directory (/etc/apt/sources.list.d, /etc/yum.repos.d, /etc/zypp/repos.d), mounted one by one (subPath), so the
    image's own files there stay."""

    config_map_name: str = Field(description="The ConfigMap, in the stack's namespace; also the volume's name.")

    _name = field_validator("config_map_name")(_volume_source_name)

    @property
    def source(self) -> str:
        return self.config_map_name


class NamedFiles(_Files):
    """A ConfigMap mounted key by key (subPath): `certConfig` into the OS's CA directory, `kernelModuleConfig`
    (e.g. `nvidia.conf` with module parameters) into /drivers."""

    name: str = Field(description="The ConfigMap, in the stack's namespace; also the volume's name.")

    _name = field_validator("name")(_volume_source_name)

    @property
    def source(self) -> str:
        return self.name


class HostPathSource(_Model):
    path: str = Field(description="Absolute path on the node.")
    type: Literal["", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice"] = Field(
        default="", description="The hostPath type check (empty: none)."
    )

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/") or len(value) > 1024 or ".." in value.split("/"):
            raise ValueError(f"{value[:80]!r} is not an absolute path without '..'")
        return value


class NamedSource(_Model):
    name: str = Field(description="The object's name, in the stack's namespace.")

    _name = field_validator("name")(_object_name)


class ExtraVolume(_Model):
    """One more volume for the driver pod, mounted where the NVIDIADriver form mounts its additional volumes: into
    nvidia-driver-ctr and each GPUDirect sidecar the stack runs (nvidia-peermem-ctr, nvidia-fs-ctr,
    nvidia-gdrcopy-ctr), never into k8s-driver-manager or the Driver Toolkit sidecar
    (GO:internal/state/driver_volumes.go getDriverAdditionalConfigs, manifests/state-driver/0500_daemonset.yaml)."""

    name: str = Field(description="Volume name: a DNS-1123 label not used by the driver pod already.")
    mount_path: str = Field(description="Where it is mounted in each container that gets it (absolute).")
    sub_path: Optional[str] = Field(
        default=None, description="Mount only this file or directory of the volume (relative, without '..')."
    )
    read_only: StrictBool = Field(default=True, description="Mount read-only (the default).")
    host_path: Optional[HostPathSource] = Field(default=None, description="A node path (the policy pack must allow it).")
    config_map: Optional[NamedSource] = Field(default=None, description="A ConfigMap, every key a file.")
    secret: Optional[NamedSource] = Field(default=None, description="A Secret, every key a file.")

    @field_validator("name")
    @classmethod
    def _volume_name(cls, value: str) -> str:
        if not DNS_LABEL.fullmatch(value) or len(value) > 63:
            raise ValueError(f"{value[:80]!r} is not a volume name (DNS-1123 label, at most 63)")
        if value in RESERVED_VOLUMES:
            raise ValueError(f"{shown(value)} is a volume of the driver pod already; reserved: {', '.join(sorted(RESERVED_VOLUMES))}")
        return value

    @field_validator("mount_path")
    @classmethod
    def _mount_path(cls, value: str) -> str:
        if not value.startswith("/") or ":" in value or len(value) > 1024 or ".." in value.split("/"):
            raise ValueError(f"{value[:80]!r} is not an absolute path without ':' or '..'")
        return value

    @field_validator("sub_path")
    @classmethod
    def _sub_path(cls, value: Optional[str]) -> Optional[str]:
        # The API server's validateLocalDescendingPath: relative, no '..' element.
        if value is not None and (not value or value.startswith("/") or len(value) > 1024 or ".." in value.split("/")):
            raise ValueError(f"{value[:80]!r} is not a relative path inside the volume (no leading '/', no '..')")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> "ExtraVolume":
        if sum(s is not None for s in (self.host_path, self.config_map, self.secret)) != 1:
            raise ValueError("set exactly one of hostPath, configMap and secret")
        return self


class ProbeTimings(_Model):
    """Timings of a probe the driver container already has; unset keys keep gpu-stack's (the operator's
    setContainerProbe: only what is set changes)."""

    initial_delay_seconds: Optional[int] = Field(default=None, ge=0, le=3600, description="Seconds before the first probe.")
    period_seconds: Optional[int] = Field(default=None, ge=1, le=3600, description="Seconds between probes.")
    timeout_seconds: Optional[int] = Field(default=None, ge=1, le=3600, description="Seconds one probe may take.")
    failure_threshold: Optional[int] = Field(default=None, ge=1, le=10_000, description="Failures in a row that fail it.")
    success_threshold: Optional[int] = Field(
        default=None, ge=1, le=100, description="Successes in a row that pass it (startup and liveness probes: only 1)."
    )


class _OneSuccessTimings(ProbeTimings):
    kind: ClassVar[str] = "startup"

    @field_validator("success_threshold")
    @classmethod
    def _one(cls, value: Optional[int]) -> Optional[int]:
        # The API server refuses anything else on startup and liveness probes (validateProbe).
        if value not in (None, 1):
            raise ValueError(f"got {value}; a {cls.kind} probe's successThreshold must be 1")
        return value


class StartupProbeTimings(_OneSuccessTimings):
    pass


class LivenessProbeTimings(_OneSuccessTimings):
    """Timings of the liveness probe gpu-stack adds to the driver container when the key is set: the startup
    probe's check run again, starting from the startup probe's defaults."""

    kind: ClassVar[str] = "liveness"
