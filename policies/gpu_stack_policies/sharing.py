"""sharing-sane: GPU sharing stays within the stack's bounds and every node finds the plugin config it asks for.

A stack policy over the node labeller's pools document and the device-plugin config ConfigMap, which is found the
way nodes find it: through NVIDIA's config-manager containers (`NODE_LABEL=nvidia.com/device-plugin.config`),
their `CONFIG_FILE_SRCDIR` mount and `DEFAULT_CONFIG` key.

* Every config-manager's ConfigMap is rendered and has its `DEFAULT_CONFIG` key.
* Every pool whose nodes get `nvidia.com/device-plugin.config=<key>` finds `<key>` in that ConfigMap; a label
  with no config-manager to read it means the pool's sharing silently never happens.
* Time-slicing and MPS replicas per GPU lie between 2 and the configured maximum (`maxTimeSlicingReplicas`,
  `maxMpsReplicas`; MPS serves at most 48 clients per GPU).
* No MPS on a pool whose MIG layout enables MIG: the device plugin's MPS sharing works on whole GPUs only.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any, Mapping, Optional

import yaml
from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

from gpu_stack_policies import fields, objects
from gpu_stack_policies.fields import report_at
from gpu_stack_policies.facts import consts
from gpu_stack_policies.facts import mig_catalog

NAME = "sharing-sane"
MIN_REPLICAS = 2
DEFAULT_MAX_TIME_SLICING = 16
DEFAULT_MAX_MPS = 16
FIX_REPLICAS = "fix: set gpu-stack:nodePools[].sharing.replicas within the bound, or raise the bound in this stack's policy config"

CONFIG_SCHEMA = PolicyConfigSchema(
    properties={
        "maxTimeSlicingReplicas": {
            "type": "integer",
            "description": "Most workloads that may take turns on one GPU.",
            "minimum": MIN_REPLICAS,
            "maximum": 64,
            "default": DEFAULT_MAX_TIME_SLICING,
        },
        "maxMpsReplicas": {
            "type": "integer",
            "description": "Most MPS clients per GPU (MPS itself serves at most 48).",
            "minimum": MIN_REPLICAS,
            "maximum": 48,
            "default": DEFAULT_MAX_MPS,
        },
    }
)


@dataclass(frozen=True)
class Consumer:
    """A pod that selects its plugin config by node label (device plugin, GFD, MPS daemon)."""

    resource: Any
    what: str
    config_map: Optional[str]
    default_key: str
    # the config-manager container's JSON pointer
    at: str = ""


def consumers(resources: list[Any]) -> list[Consumer]:
    found = []
    for resource in resources:
        kind = objects.kind_of(resource.resource_type)
        spec = objects.pod_spec(kind, resource.props)
        if spec is None:
            continue
        volumes = {str(objects.mapping(v).get("name")): objects.mapping(v) for v in objects.items(spec.get("volumes"))}
        at = objects.pod_spec_pointer(kind)
        for container in objects.containers(spec):
            env = container.env
            if env.get("NODE_LABEL") != consts.DEVICE_PLUGIN_CONFIG:
                continue
            source = posixpath.normpath(env.get("CONFIG_FILE_SRCDIR", ""))
            config_map = None
            for mount in objects.items(container.spec.get("volumeMounts")):
                mount = objects.mapping(mount)
                if posixpath.normpath(str(mount.get("mountPath", ""))) == source:
                    config_map = objects.mapping(volumes.get(str(mount.get("name")), {}).get("configMap")).get("name")
            what = objects.describe(kind or "?", resource.props, resource.name)
            found.append(Consumer(resource, what, str(config_map) if config_map else None, env.get("DEFAULT_CONFIG", ""), f"{at}{container.at}"))
            break
    return found


def _documents(config_map: Any, report: ReportViolation) -> dict[str, Mapping]:
    documents = {}
    for key, raw in objects.config_map_data(config_map.props).items():
        try:
            document = yaml.safe_load(str(raw))
        except yaml.YAMLError as error:
            what = objects.describe("ConfigMap", config_map.props)
            report_at(report, fields.pointer("data", key), f"{what}: key {key!r} is not YAML ({error}); fix: render it from components/kit/sharing.py", config_map.urn)
            continue
        documents[str(key)] = objects.mapping(document)
    return documents


def _replica_problems(key: str, document: Mapping, bounds: dict[str, int]) -> list[tuple[str, str]]:
    """(the replicas' field, what is wrong) for each shared resource outside the bounds."""
    problems = []
    sharing = objects.mapping(document.get("sharing"))
    for mechanism, label in (("timeSlicing", "time-slicing"), ("mps", "MPS")):
        for index, resource in enumerate(objects.items(objects.mapping(sharing.get(mechanism)).get("resources"))):
            resource = objects.mapping(resource)
            replicas = resource.get("replicas")
            number = isinstance(replicas, (int, float)) and not isinstance(replicas, bool)
            if not number or not MIN_REPLICAS <= replicas <= bounds[mechanism]:
                problems.append((
                    fields.pointer("data", key) + f"#/sharing/{mechanism}/resources/{index}/replicas",
                    f"config {key!r} shares {resource.get('name', 'nvidia.com/gpu')} by {label} with {replicas} replicas, "
                    f"outside {MIN_REPLICAS}..{bounds[mechanism]}",
                ))
    return problems


def validate(args: StackValidationArgs, report: ReportViolation) -> None:
    resources = list(args.resources)
    config: Mapping[str, Any] = args.get_config()
    bounds = {
        "timeSlicing": int(config.get("maxTimeSlicingReplicas", DEFAULT_MAX_TIME_SLICING)),
        "mps": int(config.get("maxMpsReplicas", DEFAULT_MAX_MPS)),
    }
    labeller, pools = objects.find_pools(resources)
    readers = consumers(resources)
    config_maps = {objects.name_of(r.props, r.name): r for r in objects.resources_by_kind(resources, "ConfigMap")}
    documents: dict[str, dict[str, Mapping]] = {}
    for reader in readers:
        config_map = config_maps.get(reader.config_map or "")
        if config_map is None:
            report_at(
                report, f"{reader.at}/volumeMounts",
                f"{reader.what} reads its device-plugin config from ConfigMap {reader.config_map or '(no volume)'}, which "
                "the stack does not render; fix: render nvidia-device-plugin-configs (components/states/device_plugin.py)",
                reader.resource.urn,
            )
            continue
        if reader.config_map not in documents:
            documents[reader.config_map] = _documents(config_map, report)
            for key, document in documents[reader.config_map].items():
                for field, problem in _replica_problems(key, document, bounds):
                    report_at(report, field, f"{objects.describe('ConfigMap', config_map.props)}: {problem}; {FIX_REPLICAS}", config_map.urn)
        if reader.default_key not in documents[reader.config_map]:
            report_at(
                report, f"{reader.at}/env",
                f"{reader.what} falls back to config {reader.default_key!r}, which ConfigMap {reader.config_map} lacks; "
                "fix: render a `default` key (components/kit/sharing.py plugin_configs)",
                reader.resource.urn,
            )
    if labeller is None:
        return
    where = objects.describe("ConfigMap", labeller.props, labeller.name)
    # The device plugin, GFD and the MPS daemon read one ConfigMap; each finding is reported once per ConfigMap.
    read_by: dict[str, list[str]] = {}
    for reader in readers:
        if reader.config_map in documents:
            read_by.setdefault(reader.config_map, []).append(reader.what)
    for pool in pools:
        key = pool.labels.get(consts.DEVICE_PLUGIN_CONFIG)
        if key is None:
            continue
        selects = f"{pool.at}/labels/{fields.escape(consts.DEVICE_PLUGIN_CONFIG)}"
        if not readers:
            report_at(
                report, selects,
                f"{where}: pool {pool.name!r} selects device-plugin config {key!r}, but no config-manager reads "
                f"{consts.DEVICE_PLUGIN_CONFIG}, so the pool's sharing never happens; fix: enable components.devicePlugin "
                "(with a sharing pool it runs the config-manager)",
                labeller.urn,
            )
            continue
        for config_map, what in read_by.items():
            document = documents[config_map].get(key)
            if document is None:
                report_at(
                    report, selects,
                    f"{where}: pool {pool.name!r} selects device-plugin config {key!r}, which ConfigMap {config_map} "
                    f"(read by {', '.join(what)}) lacks; fix: render one key per sharing pool (components/kit/sharing.py "
                    "plugin_configs)",
                    labeller.urn,
                )
                continue
            layout = pool.labels.get(consts.MIG_CONFIG)
            if layout not in (None, mig_catalog.ALL_DISABLED) and objects.mapping(document.get("sharing")).get("mps"):
                report_at(
                    report, selects,
                    f"{where}: pool {pool.name!r} shares by MPS (config {key!r} of ConfigMap {config_map}) on GPUs the "
                    f"MIG layout {layout!r} splits, and the device plugin's MPS works on whole GPUs only; fix: share the "
                    "pool by MPS without MIG, or by a mig-* strategy without MPS",
                    labeller.urn,
                )


POLICY = StackValidationPolicy(
    name=NAME,
    description="[medium: GPUs oversubscribed or sharing silently off] GPU sharing within bounds, no MPS on MIG, and every pool's device-plugin config exists.",
    enforcement_level=EnforcementLevel.ADVISORY,
    validate=validate,
    config_schema=CONFIG_SCHEMA,
)
