"""upgrade-safety: a driver change cannot pull the driver from under running GPU work, take down too many
nodes at once, or reach every pool before a canary validated it.

Checked on the rendered driver DaemonSets (a stack policy, because the canary rule spans all of them):

* With `manual` upgrades, k8s-driver-manager evicts GPU pods (`ENABLE_GPU_POD_EVICTION=true`) or drains
  (`ENABLE_AUTO_DRAIN=true`); with neither, a driver swap unloads modules in use and fails, or worse, runs under
  them. With `rolling` (`driverUpgrade` of the node-pools document) the node agents empty a node before its driver
  pod goes, and the manager's own eviction is off on purpose: its token, on every GPU node, must not evict.
* Driver DaemonSets are OnDelete: the node agents replace driver pods within the fleet's one disruption budget,
  which a DaemonSet rolling by itself (RollingUpdate) would go around.
* That budget, `removal.maxUnavailable` of the node-pools document the agents read, stays within
  `maxUnavailablePercent` (percentages) and `maxUnavailableCount` (counts) of the policy config.
* With more than one pool on a deployed driver, the driver DaemonSets belong to at least two upgrade waves (some
  wait for a gate Job that others do not), so a gate holds the rest back until the first wave validated.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from pulumi_policy import EnforcementLevel, PolicyConfigSchema, ReportViolation, StackValidationArgs, StackValidationPolicy

from gpu_stack_policies import drivers, fields, objects
from gpu_stack_policies.fields import report_at
from gpu_stack_policies.graph import Graph, gates_before

NAME = "upgrade-safety"
DEFAULT_MAX_PERCENT = 25
DEFAULT_MAX_COUNT = 10

CONFIG_SCHEMA = PolicyConfigSchema(
    properties={
        "maxUnavailablePercent": {
            "type": "integer",
            "description": "Largest percentage of the GPU nodes the fleet's driver upgrade budget may take out at once.",
            "minimum": 1,
            "maximum": 100,
            "default": DEFAULT_MAX_PERCENT,
        },
        "maxUnavailableCount": {
            "type": "integer",
            "description": "Largest node count the fleet's driver upgrade budget may take out at once.",
            "minimum": 1,
            "default": DEFAULT_MAX_COUNT,
        },
    }
)


def _budget_problem(value: Any, max_percent: int, max_count: int) -> str | None:
    # Numbers reach policies as floats (12.0): whole ones are counts.
    text = str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)
    if text.endswith("%"):
        number = text[:-1]
        if number.isdigit() and int(number) <= max_percent:
            return None
        return f"takes out up to maxUnavailable {text}, above the {max_percent}% this stack allows"
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 1 <= value <= max_count:
        return None
    if text.isdigit() and 1 <= int(text) <= max_count:
        return None
    return f"takes out up to maxUnavailable {text}, above the {max_count} nodes this stack allows"


def _fleet_budget(resources: list) -> tuple[Any, Any]:
    """The labeller's ConfigMap and the fleet budget its document gives the node agents (None, None without one;
    an unreadable document is the node-pools policies' to report)."""
    for resource in objects.resources_by_kind(resources, "ConfigMap"):
        raw = objects.config_map_data(resource.props).get(objects.NODE_POOLS_KEY)
        if raw is None:
            continue
        try:
            document = json.loads(str(raw))
        except ValueError:
            return None, None
        return resource, objects.mapping(objects.mapping(document).get("removal")).get("maxUnavailable")
    return None, None


def _driver_upgrade(resources: list) -> Any:
    """`removal.driverUpgrade` of the document the node agents read; None without one."""
    document, _ = _fleet_budget(resources)
    if document is None:
        return None
    raw = objects.config_map_data(document.props).get(objects.NODE_POOLS_KEY)
    try:
        return objects.mapping(objects.mapping(json.loads(str(raw))).get("removal")).get("driverUpgrade")
    except ValueError:
        return None


def validate(args: StackValidationArgs, report: ReportViolation) -> None:
    resources = list(args.resources)
    config: Mapping[str, Any] = args.get_config()
    max_percent = int(config.get("maxUnavailablePercent", DEFAULT_MAX_PERCENT))
    max_count = int(config.get("maxUnavailableCount", DEFAULT_MAX_COUNT))
    sets = drivers.driver_sets(resources)
    rolling = _driver_upgrade(resources) == "rolling"
    for driver in sets:
        env = driver.manager.env if driver.manager else {}
        manager = f"{driver.at}{driver.manager.at}" if driver.manager else f"{driver.at}/initContainers"
        if not rolling and env.get("ENABLE_GPU_POD_EVICTION") != "true" and env.get("ENABLE_AUTO_DRAIN") != "true":
            eviction = driver.manager.env_at("ENABLE_GPU_POD_EVICTION") if driver.manager else ""
            report_at(
                report, f"{driver.at}{eviction}" if eviction else manager,
                f"{driver.what}: its k8s-driver-manager neither evicts GPU pods nor drains, so a driver change unloads "
                "modules under running GPU work; fix: gpu-stack:upgrade.gpuPodEviction: true (or drain.enabled: true)",
                driver.resource.urn,
            )
        strategy = objects.mapping(objects.mapping(driver.resource.props.get("spec")).get("updateStrategy"))
        # An absent strategy is RollingUpdate to the API server.
        if strategy.get("type", "RollingUpdate") != "OnDelete":
            report_at(
                report, "/spec/updateStrategy/type",
                f"{driver.what} has updateStrategy {strategy.get('type', 'RollingUpdate')}: the DaemonSet controller "
                "replaces its driver pods by itself, outside the node agents' fleet budget; fix: render it with "
                "gpu-stack (OnDelete)",
                driver.resource.urn,
            )
    document, budget = _fleet_budget(resources)
    if sets and document is not None and budget is not None:
        problem = _budget_problem(budget, max_percent, max_count)
        if problem:
            report_at(report, f"/data/{objects.NODE_POOLS_KEY}#/removal/maxUnavailable",
                      f"the fleet's driver upgrade budget {problem}; fix: lower gpu-stack:upgrade.maxUnavailable", document.urn)
    _, pools = objects.find_pools(resources)
    deployed = drivers.driver_pools(pools)
    graph = Graph(resources)
    # A wave is a rank: how many gates a driver DaemonSet waits for before it may roll.
    waves = {len(gates_before(graph, driver.resource)) for driver in sets}
    if sets and len(deployed) > 1 and len(waves) < 2:
        names = ", ".join(p.name for p in deployed)
        report_at(
            report, fields.DEPENDENCIES,
            f"{len(deployed)} pools ({names}) take a driver change at once: no canary wave goes first; fix: set "
            "gpu-stack:upgrade.waves with a first wave of one small pool",
            sets[0].resource.urn,
        )


POLICY = StackValidationPolicy(
    name=NAME,
    description="[medium: upgrades disrupt more than they must] Driver upgrades evict or drain GPU pods, stay within the fleet's bounded maxUnavailable, and start with a canary wave.",
    enforcement_level=EnforcementLevel.ADVISORY,
    validate=validate,
    config_schema=CONFIG_SCHEMA,
)
