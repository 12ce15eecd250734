"""The rules that span several keys of a stack, one module per area, run once the stack config validated key by key.

The config package flows one way: `base` and `limits`, then the models of each area (cluster, pools, drivers,
upgrade, ...), then `stack` (StackConfig, which composes them), then these rules, which read a whole StackConfig,
then `loader`, which runs them. No model module imports a rule or StackConfig.
"""

from __future__ import annotations

from components.catalogs import consts
from components.config.base import DIGEST, NAMESPACE
from components.config.rules.dra import dra_checks
from components.config.rules.driver_extensions import driver_extension_checks
from components.config.rules.drivers import driver_daemonset_checks, pool_driver_checks
from components.config.rules.gpudirect import gpudirect_checks
from components.config.rules.hostpaths import host_paths_checks
from components.config.rules.monitoring import monitoring_checks
from components.config.rules.openshift import openshift_checks
from components.config.rules.overrides import operand_checks
from components.config.rules.sharing import mig_layout_checks, sharing_checks
from components.config.rules.upgrade import upgrade_checks
from components.config.rules.vm import vgpu_manager_checks
from components.config.stack import StackConfig


def cross_key_problems(cfg: StackConfig) -> list[tuple[str, str]]:
    """Rules that span several keys, after every key validated on its own; each names the key a user has to change."""
    problems: list[tuple[str, str]] = []
    seen_names: dict[str, int] = {}
    seen_selectors: dict[tuple, int] = {}
    for i, pool in enumerate(cfg.node_pools):
        here = f"{NAMESPACE}:nodePools[{i}]"
        if pool.name in seen_names:
            problems.append((f"{here}.name", f"duplicate pool name {pool.name!r} (also nodePools[{seen_names[pool.name]}])"))
        seen_names.setdefault(pool.name, i)
        selector = tuple(sorted(pool.node_selector.items()))
        if selector in seen_selectors:
            problems.append(
                (f"{here}.nodeSelector", f"same selector as nodePools[{seen_selectors[selector]}]: this pool could never match a node")
            )
        seen_selectors.setdefault(selector, i)
        if not pool.node_selector and i != len(cfg.node_pools) - 1:
            problems.append(
                (f"{here}.nodeSelector", "an empty selector matches every GPU node, so it must be the last pool")
            )
        problems += sharing_checks(cfg, pool, here)
        problems += pool_driver_checks(cfg, pool, here)
    problems += upgrade_checks(cfg)
    problems += gpudirect_checks(cfg)
    problems += host_paths_checks(cfg)
    problems += dra_checks(cfg)
    problems += monitoring_checks(cfg)
    problems += mig_layout_checks(cfg)
    problems += operand_checks(cfg)
    if cfg.driver.mode == "precompiled" and DIGEST.fullmatch(cfg.versions.driver):
        problems.append((f"{NAMESPACE}:versions.driver", "a digest cannot be combined with precompiled drivers"))
    if "node_inventory" in cfg.components.model_fields_set and cfg.components.node_inventory and not cfg.components.node_labeler:
        problems.append(
            (
                f"{NAMESPACE}:components.nodeInventory",
                "the inventory compares each node with the pool the node labeller matched it to: set "
                "components.nodeLabeler: true, or nodeInventory: false",
            )
        )
    problems += driver_daemonset_checks(cfg)
    problems += openshift_checks(cfg)
    problems += driver_extension_checks(cfg)
    problems += vgpu_manager_checks(cfg)
    if cfg.cluster.container_runtime == "cri-o" and cfg.toolkit.runtime_class != consts.DEFAULT_RUNTIME_CLASS:
        problems.append((f"{NAMESPACE}:toolkit.runtimeClass", f"on cri-o the toolkit names its runtime handler "
                         f"{consts.DEFAULT_RUNTIME_CLASS!r}, so a RuntimeClass of another name would have no handler; "
                         f"keep {consts.DEFAULT_RUNTIME_CLASS!r} (or remove the key)"))
    if cfg.cluster.container_runtime == "cri-o" and cfg.toolkit.runtime_socket is not None:
        problems.append((f"{NAMESPACE}:toolkit.runtimeSocket", "cri-o is configured without a socket; remove this key"))
    needs_agent = cfg.components.node_labeler or cfg.validation.mode != "off"
    if needs_agent and cfg.node_agent.image is None:
        problems.append(
            (
                f"{NAMESPACE}:nodeAgent.image",
                "required: the node labeller and the validation gate run it; build node_images/node-agent and push it",
            )
        )
    if cfg.validation.mode != "off" and not cfg.components.toolkit:
        problems.append(
            (f"{NAMESPACE}:validation.mode", "the validator cannot pass without the container toolkit; use 'off' or enable it")
        )
    return problems
