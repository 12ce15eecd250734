"""mig-layout-fits-gpu: the MIG layout each pool's nodes get is one their GPU can hold.

A stack policy: the layout a pool's nodes get is the node labeller's `nvidia.com/mig.config` value (pools
document), and what that layout means is the mig-parted document the MIG manager mounts (its ConfigMap). For
every pool with the label:

* the pool's GPU model is MIG-capable (components/catalogs/catalog.py); on other GPUs the MIG manager can only fail;
* the MIG manager's document has the layout, with an entry whose device filter matches the model's PCI ids
  (or no filter), otherwise the MIG manager leaves those GPUs as they are while the pool advertises MIG
  resources;
* every matching MIG-enabled entry fits the model (components/catalogs/mig_catalog.py `check_devices`: known profiles,
  per-GPU counts, compute and memory slices).

Without a MIG manager in the stack only `all-disabled` is harmless (MIG stays as the node has it).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import yaml
from pulumi_policy import EnforcementLevel, ReportViolation, StackValidationArgs, StackValidationPolicy

from gpu_stack_policies import fields, objects
from gpu_stack_policies.fields import report_at
from gpu_stack_policies.facts import catalog
from gpu_stack_policies.facts import consts
from gpu_stack_policies.facts import mig_catalog

NAME = "mig-layout-fits-gpu"
MIG_CONFIGS = "mig-configs"
# where _check_pool's fields in the layouts' document start (validate reports them on that ConfigMap)
LAYOUTS = "layouts#"


def mounted_config_maps(resources: list[Any]) -> set[str]:
    names = set()
    for resource in resources:
        spec = objects.pod_spec(objects.kind_of(resource.resource_type), resource.props)
        for volume in objects.items((spec or {}).get("volumes")):
            config_map = objects.mapping(objects.mapping(volume).get("configMap"))
            if config_map.get("name"):
                names.add(str(config_map["name"]))
    return names


def mig_parted_document(resources: list[Any]) -> tuple[Optional[Any], Mapping, str]:
    """The mig-parted document a pod of the stack mounts (the MIG manager's): its ConfigMap, its layouts and its
    key in the ConfigMap's data, or (None, {}, "")."""
    mounted = mounted_config_maps(resources)
    for resource in objects.resources_by_kind(resources, "ConfigMap"):
        if objects.name_of(resource.props, resource.name) not in mounted:
            continue
        for key, value in objects.config_map_data(resource.props).items():
            if MIG_CONFIGS not in str(value):
                continue
            document = yaml.safe_load(str(value))
            if isinstance(document, Mapping) and isinstance(document.get(MIG_CONFIGS), Mapping):
                return resource, document[MIG_CONFIGS], str(key)
    return None, {}, ""


def _filters(entry: Mapping) -> Optional[set[str]]:
    raw = entry.get("device-filter")
    if raw is None:
        return None
    values = [raw] if isinstance(raw, str) else objects.items(raw)
    return {str(v).upper() for v in values}


def _devices(entry: Mapping) -> dict[str, Any]:
    devices = objects.mapping(entry.get("mig-devices"))
    return {str(k): int(v) if isinstance(v, float) and v.is_integer() else v for k, v in devices.items()}


def _fits_hint(model: str) -> str:
    return f"layouts that fit {model}: {', '.join(mig_catalog.fitting_layouts(model))}"


def _check_pool(pool: objects.Pool, layouts: Mapping, document_name: Optional[str], where: str, found: Callable[[str, str], None]) -> None:
    """`found(field, message)`: a field of the labeller's ConfigMap, or one of the layouts' document after LAYOUTS."""
    layout = pool.labels.get(consts.MIG_CONFIG)
    if layout is None:
        return
    selected = f"{pool.at}/labels/{fields.escape(consts.MIG_CONFIG)}"
    model = pool.gpu_model
    subject = f"{where}: pool {pool.name!r} ({model or 'no gpuModel'}) gets {consts.MIG_CONFIG}={layout}"
    known = catalog.GPU_MODELS.get(model or "")
    if known is None:
        found(f"{pool.at}/gpuModel", f"{subject}, but {model!r} is not a model of components/catalogs/catalog.py; fix: set nodePools[].gpuModel to one")
        return
    if not known.mig_capable or model not in mig_catalog.GEOMETRY:
        found(
            selected,
            f"{subject}, but {model} cannot run MIG; fix: leave sharing.strategy off mig-* for this pool "
            f"(MIG-capable models: {', '.join(sorted(mig_catalog.GEOMETRY))})"
        )
        return
    if document_name is None:
        if layout != mig_catalog.ALL_DISABLED:
            found(
                selected,
                f"{subject}, but no MIG manager in the stack mounts a mig-parted config, so the layout is never "
                "applied; fix: enable components.migManager"
            )
        return
    if layout not in layouts:
        found(selected, f"{subject}, which ConfigMap {document_name} does not define; fix: pick a defined layout ({_fits_hint(model)})")
        return
    entries = [objects.mapping(e) for e in objects.items(layouts.get(layout))]
    own_ids = {f.upper() for f in mig_catalog.device_filter(model)}
    matching = [e for e in entries if _filters(e) is None or _filters(e) & own_ids]
    if not matching:
        found(
            selected,
            f"{subject}, but no entry of that layout in ConfigMap {document_name} matches {model}'s PCI ids "
            f"({', '.join(sorted(own_ids))}), so the MIG manager leaves its GPUs as they are; fix: add an entry for "
            f"{model} (components/catalogs/mig_catalog.py mig_parted_config) or pick another layout ({_fits_hint(model)})"
        )
        return
    entries_at = f"{LAYOUTS}/{MIG_CONFIGS}/{fields.escape(layout)}"
    for entry in matching:
        if not entry.get("mig-enabled"):
            continue
        problems = mig_catalog.check_devices(model, _devices(entry))
        if problems:
            found(
                f"{entries_at}/{entries.index(entry)}/mig-devices",
                f"{subject}, whose devices {_devices(entry)} do not fit one {model}: {'; '.join(problems)}; fix: "
                f"change the layout's devices or pick another layout ({_fits_hint(model)})"
            )


def validate(args: StackValidationArgs, report: ReportViolation) -> None:
    resources = list(args.resources)
    labeller, pools = objects.find_pools(resources)
    if labeller is None:
        args.not_applicable("the stack renders no node labeller, so no pool gets a MIG layout")
    document, layouts, data_key = mig_parted_document(resources)
    document_name = objects.name_of(document.props, document.name) if document is not None else None
    where = objects.describe("ConfigMap", labeller.props, labeller.name)
    def report_for(field: str, message: str) -> None:
        # a field of the layouts' document is reported on that ConfigMap, anything else on the labeller's
        in_layouts = document is not None and field.startswith(LAYOUTS)
        if in_layouts:
            report_at(report, f"{fields.pointer('data', data_key)}#{field[len(LAYOUTS):]}", message, document.urn)
        else:
            report_at(report, field, message, labeller.urn)

    for pool in pools:
        _check_pool(pool, layouts, document_name, where, report_for)


POLICY = StackValidationPolicy(
    name=NAME,
    description="[critical: the MIG manager fails the node] Each pool's MIG layout exists for its GPU model and fits it; MIG only on MIG-capable GPUs.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate,
)
