"""Cross-key rules of OpenShift: the cluster key and what it implies for the runtime and each pool's driver."""

from __future__ import annotations

from components.config.base import NAMESPACE
from components.config.openshift import DriverToolkit
from components.config.pools import NodePool
from components.config.stack import StackConfig


def openshift_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    """The cluster key and what OpenShift implies for the rest of the stack."""
    cluster = cfg.cluster
    here = f"{NAMESPACE}:cluster"
    if cluster.platform != "openshift":
        return [(f"{here}.openshift", "set only with cluster.platform: openshift")] if cluster.openshift is not None else []
    problems: list[tuple[str, str]] = []
    if cluster.openshift is None:
        problems.append((f"{here}.openshift", "required with platform openshift: at least version (oc get clusterversion)"))
    if cluster.container_runtime != "cri-o":
        problems.append((f"{here}.containerRuntime", "OpenShift runs cri-o (the operator forces it there); set cri-o"))
    if cluster.openshift is None:
        return problems
    dtk = cluster.openshift.driver_toolkit
    for i, pool in enumerate(cfg.node_pools):
        if not dtk.enabled:
            break
        if pool.workload_type == "vm-vgpu":
            # The vGPU manager is built per RHCOS build too, when its pools name their OS.
            problems += _missing_builds(dtk, pool, here)
            continue
        if pool.workload_type != "container" or cfg.pool_driver(pool).mode != "managed":
            continue
        pinned = sorted(k for k in ("daemon_set_name", "daemon_set_names") if getattr(pool.driver, k) is not None)
        if pinned:
            key = "daemonSetName" if pinned == ["daemon_set_name"] else "daemonSetNames"
            problems.append(
                (
                    f"{NAMESPACE}:nodePools[{i}].driver.{key}",
                    "a Driver Toolkit pool runs one DaemonSet per RHCOS build, named from the build "
                    "(nvidia-driver-daemonset-<pool>-<build>), and lives as long as the build; remove it",
                )
            )
        problems += _missing_builds(dtk, pool, here)
    return problems


def _missing_builds(dtk: DriverToolkit, pool: NodePool, here: str) -> list[tuple[str, str]]:
    missing = [tag for tag in pool.os_tags if not dtk.builds(tag)]
    if not missing:
        return []
    return [
        (
            f"{here}.openshift.driverToolkit.images",
            f"pool {pool.name!r} runs {', '.join(missing)}, for which no RHCOS build has a DTK image; list the "
            "builds its nodes run (NFD's system-os_release.OSTREE_VERSION) with their images from "
            "`oc get imagestream driver-toolkit -n openshift`, or set driverToolkit.enabled: false",
        )
    ]
