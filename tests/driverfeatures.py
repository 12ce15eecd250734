"""The driver pod per feature, from the pure builders (no Pulumi run): one golden per feature of one state, as
NVIDIA keeps internal/state/testdata/golden/driver-*.yaml, beside the whole-stack goldens.

Each feature is one edit of the `dev` stack (a managed driver on one Ubuntu pool), or a shipped stack where the
feature needs a whole platform (OpenShift's Driver Toolkit, KubeVirt's vGPU manager). `python
tests/regenerate_golden.py` rewrites them; tests/test_driver_goldens.py fails when one is stale.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import yaml

from components.config import load_config
from components.kit.digest import plain
from components.kit.stack_inputs import operands
from components.plan import plan_stack
from stacktest import ROOT, bag, stack_config

GOLDEN = ROOT / "tests" / "golden" / "driver"


def driver_parts(config: dict[str, Any]) -> list[Any]:
    """The driver DaemonSets a stack's `gpu-stack:` settings plan, as the program plans them before registering."""
    cfg = load_config(bag(config))
    return [driver.parts for driver in plan_stack(cfg, operands(cfg)).drivers]


def as_objects(parts: list[Any]) -> list[dict[str, Any]]:
    # through JSON: values the config tagged with their key (components/config/keys.py) come back as plain strings
    return [json.loads(json.dumps({"apiVersion": "apps/v1", "kind": "DaemonSet",
                                   **plain({"metadata": p.metadata, "spec": p.spec})})) for p in parts]


def driver_daemonsets(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The driver DaemonSets of `config` by name, as the API server would store them, without a whole-stack render."""
    return {ds["metadata"]["name"]: ds for ds in as_objects(driver_parts(config))}


def _driver(stack: str, edit: Callable[[dict[str, Any]], None] = lambda config: None) -> Callable[[], list[Any]]:
    def parts() -> list[Any]:
        config = stack_config(stack)
        edit(config)
        return driver_parts(config)
    return parts


def _vgpu_manager(stack: str) -> Callable[[], list[Any]]:
    def parts() -> list[Any]:
        cfg = load_config(bag(stack_config(stack)))
        return [rolled.parts for rolled in plan_stack(cfg, operands(cfg)).vgpu_managers]
    return parts


def _set(section: str, **values: Any) -> Callable[[dict[str, Any]], None]:
    def edit(config: dict[str, Any]) -> None:
        config.setdefault(f"gpu-stack:{section}", {}).update(values)
    return edit


def _pool(driver: dict[str, Any], **values: Any) -> Callable[[dict[str, Any]], None]:
    def edit(config: dict[str, Any]) -> None:
        pool = config["gpu-stack:nodePools"][0]
        pool.update(values)
        pool.setdefault("driver", {}).update(driver)
    return edit


FEATURES: dict[str, Callable[[], list[Any]]] = {
    "base": _driver("dev"),
    "open-kernel-modules": _driver("dev", _set("driver", kernelModuleType="open")),
    # one kernel of the node image catalog (node_images/catalog.yaml): a precompiled driver is built per kernel
    "precompiled": _driver("dev", _pool({"mode": "precompiled"}, nodeImage="ubuntu24.04-6.8.0-79-generic-amd64")),
    "gds": _driver("dev", _set("gpudirect", gds=True)),
    "gdrcopy": _driver("dev", _set("gpudirect", gdrcopy=True)),
    "rdma": _driver("dev", _set("gpudirect", rdma={"enabled": True})),
    "rdma-host-mofed": _driver("dev", _set("gpudirect", rdma={"enabled": True, "useHostMofed": True})),
    "licensing": _driver("dev", _set("driver", licensingConfig={"secretName": "vgpu-licensing", "nlsEnabled": True})),
    "repositories-and-certificates": _driver("dev", _set(
        "driver", repoConfig={"configMapName": "apt-mirror", "files": ["ubuntu.sources"]},
        certConfig={"name": "internal-ca", "files": ["platform-root-ca.crt"]})),
    "kernel-module-parameters": _driver("dev", _set("driver", kernelModuleConfig={"name": "nvidia-params",
                                                                                   "files": ["nvidia.conf"]})),
    "secret-env": _driver("dev", _set("driver", secretEnv="driver-proxy")),
    "extra-volumes": _driver("dev", _set("driver", extraVolumes=[
        {"name": "crash-dumps", "mountPath": "/var/crash", "hostPath": {"path": "/var/crash", "type": "DirectoryOrCreate"}}])),
    "probes-and-host-network": _driver("dev", _set(
        "driver", startupProbe={"initialDelaySeconds": 90}, livenessProbe={"periodSeconds": 30}, hostNetwork=True)),
    "wait-for-completion": _driver("dev", _set("upgrade", waitForCompletion={"podSelector": "app=batch",
                                                                               "timeoutSeconds": 600})),
    "openshift-driver-toolkit": _driver("openshift"),
    "vgpu-manager": _vgpu_manager("kubevirt"),
}


def rendered(feature: str) -> str:
    """The feature's driver DaemonSets, as the API server would store their input (the Kubernetes names)."""
    documents = as_objects(FEATURES[feature]())
    return yaml.safe_dump_all(documents, sort_keys=False, default_flow_style=False, width=120)


def golden_path(feature: str) -> Path:
    return GOLDEN / f"{feature}.yaml"
