"""Cross-key rules of `gpu-stack:hostPaths` and of the toolkit's runtime paths."""

from __future__ import annotations

from components.catalogs import consts
from components.config.base import NAMESPACE, shown
from components.config.hostpaths import _host_path, _not_root_or_system, HostPaths


def _toolkit_path_checks(cfg) -> list[tuple[str, str]]:
    """The toolkit's paths become hostPath volumes of their directories, env values and CDI hook paths
    (components/states/toolkit.py): the same bounds as hostPaths, and a runtime file directly under / would mount
    the whole host read-write as the runtime's config directory."""
    toolkit = cfg.toolkit
    files = {
        "runtimeConfig": toolkit.runtime_config,
        "runtimeDropInConfig": toolkit.runtime_drop_in_config,
        "runtimeSocket": toolkit.runtime_socket,
    }
    problems: list[tuple[str, str]] = []
    for key, value in {"installDir": toolkit.install_dir, **files}.items():
        if value is None:
            continue
        try:
            _host_path(value)
            if key == "installDir":
                _not_root_or_system(value)
            elif value.rpartition("/")[0] == "":
                raise ValueError(
                    f"{shown(value)} is a file directly under /: its directory, the whole host, would be mounted "
                    "read-write; use the runtime's own directory"
                )
            elif key != "runtimeSocket" and cfg.cluster.container_runtime == "containerd" and not value.endswith(".toml"):
                raise ValueError(f"{shown(value)}: containerd reads TOML; name a .toml file")
        except ValueError as error:
            problems.append((f"{NAMESPACE}:toolkit.{key}", str(error)))
    if toolkit.runtime_config is not None and toolkit.runtime_config == toolkit.runtime_drop_in_config:
        problems.append(
            (
                f"{NAMESPACE}:toolkit.runtimeDropInConfig",
                "the same file as toolkit.runtimeConfig: the toolkit would import the file into itself; name another",
            )
        )
    return problems


def host_paths_checks(cfg) -> list[tuple[str, str]]:
    """A moved driver directory only works for drivers gpu-stack does not deploy: its driver container and the
    driver-manager install into /run/nvidia/driver whatever the operands are told."""
    problems = _toolkit_path_checks(cfg)
    paths: HostPaths = cfg.host_paths
    if paths.driver_install_dir == consts.DRIVER_INSTALL_DIR:
        return problems
    deployed = [pool.name for pool in cfg.driver_pools] + [pool.name for pool in cfg.pools_of("vm-vgpu")]
    if deployed:
        problems.append(
            (
                f"{NAMESPACE}:hostPaths.driverInstallDir",
                f"pools {', '.join(sorted(set(deployed)))} run a driver gpu-stack deploys, which always installs into "
                f"{consts.DRIVER_INSTALL_DIR}; remove this key, or set driver.mode: host on those pools (a driver "
                "installed by the node image or another installer)",
            )
        )
    return problems
