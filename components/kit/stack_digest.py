"""The digest of a stack's configuration, which the validation gate's Job carries (components/kit/validation_gate.py):
a new digest re-runs the gate after `pulumi up`, the same one leaves the finished Job alone."""

from __future__ import annotations

import hashlib
import json

from components.config import StackConfig


# Keys added after stacks were deployed, with their defaults: while a key keeps its default it stays out of the
# digest, so upgrading gpu-stack re-runs no gate on a stack that does not use it.
ADDED_KEYS = (
    (("cluster", "platform"), "kubernetes"),
    (("cluster", "openshift"), None),
    (("driver", "virtualTopologyConfig"), None),
    (("toolkit", "runtimeClass"), "nvidia"),
    (("devicePlugin", "mpsRoot"), "/run/nvidia/mps"),
    (("vgpu", "kernelModuleConfig"), None),
    (("vgpu", "configs"), {}),
    (("operands", "vfioManagerDriverManager"), None),
    (("operands", "vgpuManagerDriverManager"), None),
)


def stack_digest(cfg: StackConfig) -> str:
    # warnings off: a tagged number inside the union of a MIG layout (components/config/keys.py) makes pydantic-core
    # warn while it writes the same value
    dumped = cfg.model_dump(mode="json", by_alias=True, warnings=False)
    for (section, key), default in ADDED_KEYS:
        if dumped[section].get(key, default) == default:
            dumped[section].pop(key, None)
    return hashlib.sha256(json.dumps(dumped, sort_keys=True).encode()).hexdigest()[:16]
