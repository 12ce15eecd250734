"""Cross-key rules of vm-vgpu pools: the pool's vGPU type against its GPU model and the vGPU manager image."""

from __future__ import annotations

from components.catalogs import vgpu_catalog
from components.config.base import NAMESPACE
from components.config.driver_extensions import RESERVED_VOLUMES
from components.config.pools import NodePool
from components.config.stack import StackConfig


def vgpu_checks(cfg: StackConfig, pool: NodePool, here: str) -> list[tuple[str, str]]:
    if pool.workload_type != "vm-vgpu":
        if pool.vgpu_config is not None:
            return [(f"{here}.vgpuConfig", f"only vm-vgpu pools split GPUs into vGPUs, not {pool.workload_type!r}; remove it")]
        return []
    problems: list[tuple[str, str]] = []
    if cfg.vgpu.manager_image is None:
        problems.append(
            (f"{NAMESPACE}:vgpu.managerImage", "required with a vm-vgpu pool: NVIDIA publishes no vGPU manager image; build one and pin it")
        )
    if cfg.sandbox_workloads.mode != "kubevirt":
        problems.append((f"{here}.workloadType", "vGPUs are served to KubeVirt VMs: set gpu-stack:sandboxWorkloads.mode: kubevirt"))
    config = pool.vgpu_config or cfg.vgpu.default_config
    problem = vgpu_catalog.config_problem(config, pool.gpu_model, cfg.vgpu.custom_configs)
    if problem:
        key = f"{here}.vgpuConfig" if pool.vgpu_config else f"{here}.gpuModel"
        problems.append((key, problem))
    return problems


# The vGPU manager pod's own volumes (components/states/driver/vgpu_manager.py VOLUMES): the driver pod's and two more.
VGPU_MANAGER_VOLUMES = RESERVED_VOLUMES | {"cgroup", "vfio"}


def vgpu_manager_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    """vgpu.kernelModuleConfig: for a vGPU manager the stack runs, and a volume name its pod does not have."""
    files = cfg.vgpu.kernel_module_config
    if files is None:
        return []
    here = f"{NAMESPACE}:vgpu.kernelModuleConfig"
    if not cfg.pools_of("vm-vgpu"):
        return [(here, "no vm-vgpu pool runs a vGPU manager to load these module parameters; remove it")]
    if files.source in VGPU_MANAGER_VOLUMES:
        return [(f"{here}.name", f"the vGPU manager pod's volume takes the ConfigMap's name, and {files.source!r} is one of "
                 "its own volumes already; use a ConfigMap of another name")]
    return []
