"""What a change to each field of the driver's config does to a node: reinstall the driver (the field feeds
DRIVER_CONFIG_DIGEST, so k8s-driver-manager evicts the GPU pods, unloads the driver and installs it again), or only
replace the driver pod (the pod template changes and the digest does not, so the new pod finds its driver loaded and
keeps it). No field today affects neither.

One table per model, `gpu-stack:driver` (Driver) and `nodePools[].driver` (PoolDriver). A field's class covers its
whole value, the models of components/config/driver_extensions.py inside it included: the digest takes a value whole.
tests/test_driver_fields.py fails on a field of either model that is not classified here, so a new `driver.*` key
cannot silently leave the driver installed as it was.
"""

from __future__ import annotations

from enum import Enum
from types import MappingProxyType
from typing import Mapping


class Effect(Enum):
    # Its value is digest material (components/states/driver/extensions.py digest_material), as the operator hashes the
    # driver container's volumes, mounts and envFrom (extractDriverInstallConfig).
    REINSTALLS = "reinstalls the driver (its value is digest material)"
    # It chooses the driver plan's image or kernel module type, which the digest holds (driver_targets.config_digest).
    REINSTALLS_BY_PLAN = "reinstalls the driver (it picks the image or kernel module type the digest holds)"
    REPLACES_POD = "replaces the driver pod and keeps the driver installed"


DRIVER_FIELDS: Mapping[str, Effect] = MappingProxyType(
    {
        "mode": Effect.REINSTALLS_BY_PLAN,
        "branch": Effect.REINSTALLS_BY_PLAN,
        "kernel_module_type": Effect.REINSTALLS_BY_PLAN,
        "licensing_config": Effect.REINSTALLS,
        "repo_config": Effect.REINSTALLS,
        "cert_config": Effect.REINSTALLS,
        "kernel_module_config": Effect.REINSTALLS,
        "virtual_topology_config": Effect.REINSTALLS,
        "secret_env": Effect.REINSTALLS,
        "extra_volumes": Effect.REINSTALLS,
        # How the pod is watched and networked, not what is installed: the operator's digest leaves them out too.
        "startup_probe": Effect.REPLACES_POD,
        "readiness_probe": Effect.REPLACES_POD,
        "liveness_probe": Effect.REPLACES_POD,
        "host_network": Effect.REPLACES_POD,
    }
)

POOL_DRIVER_FIELDS: Mapping[str, Effect] = MappingProxyType(
    {
        "mode": Effect.REINSTALLS_BY_PLAN,
        "version": Effect.REINSTALLS_BY_PLAN,
        "branch": Effect.REINSTALLS_BY_PLAN,
        "kernel_module_type": Effect.REINSTALLS_BY_PLAN,
        # A new name replaces the DaemonSet and so its pods; the digest is the same, so the driver stays.
        "daemon_set_name": Effect.REPLACES_POD,
        "daemon_set_names": Effect.REPLACES_POD,
    }
)

# The Driver fields digest_material hashes.
DIGESTED: frozenset[str] = frozenset(name for name, effect in DRIVER_FIELDS.items() if effect is Effect.REINSTALLS)
