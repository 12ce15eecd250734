"""GPU sharing per node pool: the device-plugin config a pool's nodes select, the MIG layout they get, and the
extended resources a workload on them requests.

The operator has one `devicePlugin.config` ConfigMap whose keys are named configs, and a node label
(`nvidia.com/device-plugin.config`) picking one per node (fact sheet §6.2). gpu-stack renders one key per
sharing pool (named after the pool) plus `default`, and the node agent writes the label from the pool, so
per-pool sharing is a stack setting rather than a hand-kept label. Documents follow k8s-device-plugin's
`api/config/v1` (fact sheet §6.1).
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

from components.catalogs import mig_catalog
from components.config.keys import yaml_text
from components.kit.config_manager import DEFAULT_PLUGIN_CONFIG_KEY
from components.config import NodePool

GPU_RESOURCE = "nvidia.com/gpu"
SHARED_GPU_RESOURCE = "nvidia.com/gpu.shared"
# MIG-capable nodes without a layout get MIG switched off explicitly, as the operator's labeller does (§6.4).
MIG_DISABLED = "all-disabled"


def config_key(pool: NodePool) -> str:
    return pool.name if pool.sharing.strategy != "none" else DEFAULT_PLUGIN_CONFIG_KEY


def plugin_config(default_mig_strategy: str, pool: Optional[NodePool] = None) -> dict:
    """One key of the config ConfigMap."""
    sharing = pool.sharing if pool is not None else None
    mig_strategy = sharing.mig_strategy if sharing is not None and sharing.is_mig else default_mig_strategy
    document: dict = {"version": "v1", "flags": {"migStrategy": mig_strategy}}
    if sharing is None:
        return document
    replicated = [{"name": GPU_RESOURCE, "replicas": sharing.replicas}]
    if sharing.strategy == "time-slicing":
        document["sharing"] = {
            "timeSlicing": {
                "renameByDefault": bool(sharing.rename_by_default),
                "failRequestsGreaterThanOne": bool(sharing.fail_requests_greater_than_one),
                "resources": replicated,
            }
        }
    elif sharing.strategy == "mps":
        # The plugin always refuses requests for more than one MPS replica; the key is not set here.
        document["sharing"] = {"mps": {"renameByDefault": bool(sharing.rename_by_default), "resources": replicated}}
    return document


def plugin_configs(default_mig_strategy: str, shared_pools: Sequence[NodePool]) -> dict[str, str]:
    """ConfigMap data: `default` for unshared pools, then one key per sharing pool."""
    documents = {DEFAULT_PLUGIN_CONFIG_KEY: plugin_config(default_mig_strategy)}
    documents.update({pool.name: plugin_config(default_mig_strategy, pool) for pool in shared_pools})
    return {key: yaml_text(doc, sort_keys=False) for key, doc in documents.items()}


def mig_config_label(pool: NodePool) -> Optional[str]:
    """The `nvidia.com/mig.config` value for the pool's nodes; None for GPUs without MIG."""
    if pool.workload_type != "container" or not pool.model.mig_capable:
        return None
    return pool.sharing.mig_layout if pool.sharing.is_mig else MIG_DISABLED


def pool_layout(pool: NodePool, custom_layouts: Mapping[str, mig_catalog.LayoutValue]) -> Optional[mig_catalog.Layout]:
    if not pool.sharing.is_mig or pool.sharing.mig_layout is None:
        return None
    layout, _ = mig_catalog.resolve_layout(pool.gpu_model, pool.sharing.mig_layout, custom_layouts)
    return layout


def advertised_resources(
    pool: NodePool, default_mig_strategy: str, custom_layouts: Mapping[str, mig_catalog.LayoutValue]
) -> dict[str, dict[str, int]]:
    """Extended resources the pool's GPUs turn into, what a workload team writes in `resources.limits`: GPU index
    -> resources, with the key "all" for every GPU alike (the only key unless a per-GPU MIG layout says otherwise)."""
    sharing = pool.sharing
    if sharing.strategy in ("time-slicing", "mps"):
        name = SHARED_GPU_RESOURCE if sharing.rename_by_default else GPU_RESOURCE
        return {mig_catalog.ALL_DEVICES: {name: int(sharing.replicas or 1)}}
    layout = pool_layout(pool, custom_layouts)
    if layout is not None and sharing.mig_strategy is not None:
        return mig_catalog.resources_by_gpu(layout, sharing.mig_strategy)
    return {mig_catalog.ALL_DEVICES: {GPU_RESOURCE: 1}}


def _per_gpu(resources: dict[str, dict[str, int]]) -> dict:
    """`perGpu` when every GPU is alike, else `byGpu` (GPU index -> resources)."""
    if list(resources) == [mig_catalog.ALL_DEVICES]:
        return {"perGpu": resources[mig_catalog.ALL_DEVICES]}
    return {"byGpu": resources}


def resources_by_pool(
    pools: Sequence[NodePool], default_mig_strategy: str, custom_layouts: Mapping[str, mig_catalog.LayoutValue]
) -> dict[str, dict]:
    """The stack output `gpuResources`: per container pool, its sharing strategy and the resources per GPU
    (`perGpu`), or per GPU index (`byGpu`) for a per-GPU MIG layout."""
    return {
        pool.name: {
            "strategy": pool.sharing.strategy,
            "gpuModel": pool.gpu_model,
            **_per_gpu(advertised_resources(pool, default_mig_strategy, custom_layouts)),
            **({"migLayout": pool.sharing.mig_layout} if pool.sharing.is_mig else {}),
        }
        for pool in pools
        if pool.workload_type == "container"
    }


def mig_parted_layouts(
    pools: Sequence[NodePool], custom_layouts: Mapping[str, mig_catalog.LayoutValue]
) -> dict[str, dict[str, mig_catalog.LayoutValue]]:
    """Custom layouts as `mig_catalog.mig_parted_config` takes them: name -> GPU model -> devices (or per-GPU
    entries), for the models of the pools that use them."""
    used: dict[str, dict[str, mig_catalog.LayoutValue]] = {}
    for pool in pools:
        name = pool.sharing.mig_layout
        if pool.sharing.is_mig and name in custom_layouts:
            used.setdefault(name, {})[pool.gpu_model] = custom_layouts[name]
    return used
