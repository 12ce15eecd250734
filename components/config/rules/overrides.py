"""Cross-key rules of `gpu-stack:operands`: each override against the operands the stack deploys, and the images it
composes."""

from __future__ import annotations

from components.catalogs import operand_overrides as operand_targets
from components.config.base import NAMESPACE, parse_image
from components.config.images import composed_reference
from components.config.overrides import OperandOverride
from components.config.stack import StackConfig


def deployed_operands(cfg: "StackConfig") -> set[str]:
    """The operand keys the stack renders (components/stack.py builds a state exactly under these conditions)."""
    comps = cfg.components
    vm = bool(cfg.pools_of("vm-passthrough", "vm-vgpu"))
    vgpu = bool(cfg.pools_of("vm-vgpu"))
    passthrough = bool(cfg.pools_of("vm-passthrough"))
    kata = vm and cfg.sandbox_workloads.mode == "kata"
    driver = bool(cfg.driver_pools)
    wanted = {
        "driver": driver,
        "driverManager": driver or vgpu or passthrough,
        "toolkit": comps.toolkit,
        "validator": True,
        "devicePlugin": comps.device_plugin,
        "mpsControlDaemon": comps.device_plugin and bool(cfg.pools_sharing_by("mps")),
        "gfd": comps.gfd,
        "dcgm": comps.dcgm,
        "dcgmExporter": comps.dcgm_exporter,
        "migManager": comps.mig_manager and any(p.model.mig_capable for p in cfg.container_pools),
        "nodeStatusExporter": comps.node_status_exporter,
        "vgpuManager": vgpu,
        "vgpuDeviceManager": vgpu,
        "vfioManager": passthrough,
        "sandboxValidator": vm,
        "sandboxDevicePlugin": vm and cfg.sandbox_workloads.mode == "kubevirt",
        "kataSandboxDevicePlugin": kata,
        "ccManager": kata and cfg.sandbox_workloads.cc_manager.enabled,
        "gds": driver and cfg.gpudirect.gds,
        "gdrcopy": driver and cfg.gpudirect.gdrcopy,
        "peermem": driver and cfg.gpudirect.rdma.enabled,
        "draDriver": bool(cfg.dra_pools),
        "vfioManagerDriverManager": passthrough,
        "vgpuManagerDriverManager": vgpu,
    }
    return {key for key, on in wanted.items() if on}


def operand_checks(cfg: "StackConfig") -> list[tuple[str, str]]:
    """Rules between `operands` and the rest of the stack; each names the key to change."""
    problems: list[tuple[str, str]] = []
    deployed = deployed_operands(cfg)
    fields = type(cfg.versions).model_fields
    versions_set = {fields[name].alias or name for name in cfg.versions.model_fields_set}
    for key, override in cfg.operands.by_key().items():
        here = f"{NAMESPACE}:operands.{key}"
        target = operand_targets.OPERANDS[key]
        if key not in deployed:
            problems.append((here, f"this stack does not deploy {key}; remove the override (deployed: {', '.join(sorted(deployed))})"))
            continue
        owned = operand_targets.owned_env(key, openshift=cfg.cluster.platform == "openshift")
        for var in override.env:
            if var.name in owned:
                problems.append((f"{here}.env", f"{var.name} is set by {owned[var.name]}; change that key instead"))
        if target.runs_in and override.pod_level:
            holders = " / ".join(f"operands.{k}" for k in target.runs_in)
            problems.append(
                (here, f"{key} is a container in the pods of {holders}: set annotations, labels, priorityClassName and tolerations there")
            )
        if override.sets_image:
            problems += _image_checks(key, override, target, versions_set, here)
            problems += _composed_image_checks(cfg, override, target, here)
    return problems


def _composed_image_checks(
    cfg: "StackConfig", override: OperandOverride, target: operand_targets.OperandTarget, here: str
) -> list[tuple[str, str]]:
    """Each part may be valid alone and the reference the operand runs still not be one (over 255 characters of
    repository name, say): parse the reference the override composes, as the kubelet will."""
    if target.image is None or override.full_reference:
        return []
    try:
        parse_image(composed_reference(cfg, override, target.image))
    except ValueError as exc:
        return [(f"{here}.image" if override.image else f"{here}.repository", f"together they are no image reference: {exc}")]
    return []


def _image_checks(
    key: str, override: OperandOverride, target: operand_targets.OperandTarget, versions_set: set[str], here: str
) -> list[tuple[str, str]]:
    if target.image is None:
        return [(here, f"the {key} image is set by {target.image_set_by}; remove repository/image/version here")]
    problems: list[tuple[str, str]] = []
    if override.full_reference:
        if override.repository is not None or override.version is not None:
            problems.append((f"{here}.image", "a full image reference takes no repository or version; give one or the other"))
        if target.os_tagged:
            problems.append(
                (f"{here}.image", f"the node's OS is appended to the {key} tag: give repository and image name, not a full reference")
            )
    if override.version is not None:
        if target.version_set_by:
            problems.append((f"{here}.version", f"the {key} version is {target.version_set_by}; set it there"))
        elif operand_targets.image_owner(target.image) == key and target.image in versions_set:
            problems.append(
                (f"{here}.version", f"versions.{target.image} is set too; keep one of them (both name the {key} image's tag)")
            )
    return problems
