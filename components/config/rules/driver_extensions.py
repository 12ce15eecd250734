"""Cross-key rules of the driver pod's extensions: volumes and mount paths the driver pod already has, and what
precompiled drivers take."""

from __future__ import annotations

from components.config.base import NAMESPACE
from components.config.driver_extensions import DRIVER_MOUNT_PATHS, DRIVERS_DIR, RESERVED_VOLUMES
from components.config.stack import StackConfig


def driver_extension_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    """Keys that need a managed driver, and volume names and mount paths that must not collide in the pod."""
    driver = cfg.driver
    here = f"{NAMESPACE}:driver"
    problems: list[tuple[str, str]] = []
    managed = any(cfg.pool_driver(p).mode == "managed" for p in cfg.driver_pools)
    for key, value in (("repoConfig", driver.repo_config), ("certConfig", driver.cert_config)):
        if value is not None and not managed:
            # transformDriverContainer returns before both for precompiled drivers: the image only loads modules.
            problems.append(
                (f"{here}.{key}", f"precompiled drivers install no packages, so the operator mounts no {key}, and no "
                 "pool of this stack runs a managed driver: remove it, or use driver mode 'managed'")
            )
    volumes: dict[str, str] = {name: "the driver pod" for name in RESERVED_VOLUMES}
    if driver.licensing_config is not None:
        volumes["licensing-config"] = "licensingConfig"
    if driver.virtual_topology_config is not None:
        volumes["topology-config"] = "virtualTopologyConfig"
    for key, files in (
        ("kernelModuleConfig", driver.kernel_module_config),
        ("repoConfig", driver.repo_config),
        ("certConfig", driver.cert_config),
    ):
        if files is None:
            continue
        if files.source in volumes:
            problems.append(
                (f"{here}.{key}", f"its volume takes the ConfigMap's name {files.source!r}, already used by "
                 f"{volumes[files.source]}: give each key a ConfigMap of its own")
            )
        volumes.setdefault(files.source, key)
    taken = {path: "the driver container" for path in DRIVER_MOUNT_PATHS}
    if driver.kernel_module_config is not None:
        taken.update({f"{DRIVERS_DIR}/{f}": "kernelModuleConfig" for f in driver.kernel_module_config.files})
    for i, extra in enumerate(driver.extra_volumes):
        where = f"{here}.extraVolumes[{i}]"
        if extra.name in volumes:
            problems.append((f"{where}.name", f"{extra.name!r} is the volume of {volumes[extra.name]}; pick another name"))
        volumes.setdefault(extra.name, f"extraVolumes[{i}]")
        if extra.mount_path in taken:
            problems.append((f"{where}.mountPath", f"{extra.mount_path} is mounted by {taken[extra.mount_path]} already"))
        taken.setdefault(extra.mount_path, f"extraVolumes[{i}]")
    return problems
