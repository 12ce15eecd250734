"""cdi-consistency: the toolkit's CDI mode, the device plugin's device-list strategy and the RuntimeClasses agree.

A stack policy: the toolkit decides how GPUs reach containers, and every other piece must assume the same.

* CDI mode is the toolkit container's `CDI_ENABLED` (with `NVIDIA_CONTAINER_RUNTIME_MODE=cdi`); without a
  toolkit in the stack (`components.toolkit: false`) the device plugin's `CDI_ENABLED` stands for it.
* Every other container setting `CDI_ENABLED` (device plugin, MIG manager) agrees; with CDI their
  `NVIDIA_CDI_HOOK_PATH` is the toolkit's `<ROOT>/toolkit/nvidia-cdi-hook`.
* `DEVICE_LIST_STRATEGY` is `cdi-annotations` / `cdi-cri` with CDI (the `nvidia` runtime is no longer the default,
  so `envvar` injects nothing) and `envvar` without (no CDI specs are generated).
* RuntimeClasses `nvidia-cdi` and `nvidia-legacy` exist with CDI (gpu-stack keeps them without CDI too, so that
  turning CDI off never deletes a class workloads name; the toolkit configures their handlers only with CDI), and
  every RuntimeClass a pod of the stack uses (`runtimeClassName`, the validator's `VALIDATOR_RUNTIME_CLASS`) is
  rendered and has a handler the toolkit configures: `nvidia` (containerd: `CONTAINERD_RUNTIME_CLASS`), plus the
  CDI ones with CDI, none at all for cri-o in hook mode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from pulumi_policy import EnforcementLevel, ReportViolation, StackValidationArgs, StackValidationPolicy

from gpu_stack_policies import objects
from gpu_stack_policies.fields import report_at

NAME = "cdi-consistency"
CDI_RUNTIME_CLASSES = ("nvidia-cdi", "nvidia-legacy")
CDI_STRATEGIES = {"cdi-annotations", "cdi-cri"}
FIX = "fix: render them all from gpu-stack:toolkit.cdi (components/stack.py operands)"


Pod = tuple[Any, str, Mapping]  # (resource, kind, pod spec)


def _pods(resources: list[Any]) -> list[Pod]:
    found = []
    for resource in resources:
        kind = objects.kind_of(resource.resource_type)
        spec = objects.pod_spec(kind, resource.props)
        if spec is not None:
            found.append((resource, kind or "?", spec))
    return found


def _enabled(value: Optional[str]) -> bool:
    return str(value).lower() == "true"


@dataclass(frozen=True)
class Reference:
    """What the stack's runtime setup decides, and who decides it."""

    cdi: bool
    source: str  # names the container the mode was read from, for messages
    toolkit: Optional[tuple[str, str]]  # (urn, container name) of the toolkit, which the other checks skip
    handlers: Optional[set[str]]  # runtime handlers the toolkit configures; None without a toolkit
    hook_path: Optional[str]

    @property
    def mode(self) -> str:
        return "CDI" if self.cdi else "without CDI"


def _reference(pods: list[Pod], report: ReportViolation) -> Optional[Reference]:
    for resource, kind, spec in pods:
        if "container-toolkit" not in objects.deploy_components(spec):
            continue
        for container in objects.containers(spec):
            env = container.env
            if "RUNTIME" not in env:
                continue
            what = objects.describe(kind, resource.props, resource.name)
            cdi = _enabled(env.get("CDI_ENABLED"))
            if cdi != (env.get("NVIDIA_CONTAINER_RUNTIME_MODE") == "cdi"):
                report_at(
                    report, objects.pod_spec_pointer(kind) + container.env_at("NVIDIA_CONTAINER_RUNTIME_MODE"),
                    f"{what}: container {container.name!r} has CDI_ENABLED={env.get('CDI_ENABLED', 'unset')} but "
                    f"NVIDIA_CONTAINER_RUNTIME_MODE={env.get('NVIDIA_CONTAINER_RUNTIME_MODE', 'unset')}; {FIX} "
                    "(components/states/toolkit.py toolkit_env)",
                    resource.urn,
                )
            hook_mode = env.get("RUNTIME") == "crio" and env.get("CRIO_CONFIG_MODE") == "hook"
            handlers = set() if hook_mode else {env.get("CONTAINERD_RUNTIME_CLASS") or "nvidia"}
            if cdi and not hook_mode:
                handlers |= set(CDI_RUNTIME_CLASSES)
            return Reference(
                cdi=cdi,
                source=f"the toolkit ({what}, CDI_ENABLED={env.get('CDI_ENABLED', 'unset')})",
                toolkit=(resource.urn, container.name),
                handlers=handlers,
                hook_path=f"{env.get('ROOT', '').rstrip('/')}/toolkit/nvidia-cdi-hook",
            )
    for resource, kind, spec in pods:
        for container in objects.containers(spec):
            if "CDI_ENABLED" in container.env:
                what = objects.describe(kind, resource.props, resource.name)
                value = container.env["CDI_ENABLED"]
                return Reference(_enabled(value), f"{what} (CDI_ENABLED={value}; the stack renders no toolkit)", None, None, None)
    return None


def _check_operands(pods: list[Pod], ref: Reference, report: ReportViolation) -> None:
    for resource, kind, spec in pods:
        what = objects.describe(kind, resource.props, resource.name)
        at = objects.pod_spec_pointer(kind)
        for container in objects.containers(spec):
            if ref.toolkit == (resource.urn, container.name):
                continue
            env = container.env
            subject = f"{what}: container {container.name!r}"
            if "CDI_ENABLED" in env and _enabled(env["CDI_ENABLED"]) != ref.cdi:
                report_at(report, at + container.env_at("CDI_ENABLED"),
                          f"{subject} has CDI_ENABLED={env['CDI_ENABLED']} while {ref.source} runs {ref.mode}; {FIX}", resource.urn)
            hook = env.get("NVIDIA_CDI_HOOK_PATH")
            if ref.cdi and ref.hook_path and hook not in (None, ref.hook_path):
                report_at(
                    report, at + container.env_at("NVIDIA_CDI_HOOK_PATH"),
                    f"{subject} runs the CDI hook from {hook}, but the toolkit installs it at {ref.hook_path}; fix: "
                    "derive it from gpu-stack:toolkit.installDir",
                    resource.urn,
                )
            if "DEVICE_LIST_STRATEGY" not in env:
                continue
            listed = env["DEVICE_LIST_STRATEGY"]
            strategies = {s.strip() for s in listed.split(",") if s.strip()}
            strategy_at = at + container.env_at("DEVICE_LIST_STRATEGY")
            if ref.cdi and not (strategies and strategies <= CDI_STRATEGIES):
                report_at(
                    report, strategy_at,
                    f"{subject} has DEVICE_LIST_STRATEGY={listed} while {ref.source} runs CDI, where the nvidia runtime "
                    f"is not the default, so the devices it lists are never injected; {FIX} "
                    "(components/states/device_plugin.py plugin_env: cdi-annotations,cdi-cri)",
                    resource.urn,
                )
            if not ref.cdi and strategies & CDI_STRATEGIES:
                report_at(
                    report, strategy_at,
                    f"{subject} has DEVICE_LIST_STRATEGY={listed} while {ref.source} runs without CDI, so no CDI spec "
                    f"exists for the devices it names; {FIX} (components/states/device_plugin.py plugin_env: envvar)",
                    resource.urn,
                )


def _check_runtime_classes(resources: list[Any], pods: list[Pod], ref: Reference, report: ReportViolation) -> None:
    runtime_classes = {objects.name_of(r.props, r.name): r for r in objects.resources_by_kind(resources, "RuntimeClass")}
    for name in CDI_RUNTIME_CLASSES:
        if ref.cdi and name not in runtime_classes:
            report_at(
                report, "/metadata/name",
                f"RuntimeClass {name} is missing while {ref.source} runs CDI; workloads selecting it cannot start; "
                f"{FIX} (components/states/prerequisites.py)"
            )
    for resource, kind, spec in pods:
        what = objects.describe(kind, resource.props, resource.name)
        used = {str(spec["runtimeClassName"])} if spec.get("runtimeClassName") else set()
        used |= {c.env["VALIDATOR_RUNTIME_CLASS"] for c in objects.containers(spec) if c.env.get("VALIDATOR_RUNTIME_CLASS")}
        at = objects.pod_spec_pointer(kind) + "/runtimeClassName"
        for name in sorted(used):
            runtime_class = runtime_classes.get(name)
            if runtime_class is None:
                report_at(
                    report, at,
                    f"{what} uses RuntimeClass {name}, which the stack does not render; {FIX} (components/states/prerequisites.py)",
                    resource.urn,
                )
                continue
            handler = str(runtime_class.props.get("handler") or "")
            if ref.handlers is not None and handler not in ref.handlers:
                configured = ", ".join(sorted(ref.handlers)) or "none (cri-o in OCI hook mode)"
                report_at(
                    report, at,
                    f"{what} uses RuntimeClass {name} (handler {handler!r}), but the toolkit configures {configured}; "
                    f"its pods cannot start; {FIX} (without CDI on cri-o, operands set no runtimeClassName)",
                    resource.urn,
                )


def validate(args: StackValidationArgs, report: ReportViolation) -> None:
    resources = list(args.resources)
    pods = _pods(resources)
    ref = _reference(pods, report)
    if ref is None:
        args.not_applicable("the stack renders neither the toolkit nor a CDI-aware operand")
        return
    _check_operands(pods, ref, report)
    _check_runtime_classes(resources, pods, ref, report)


POLICY = StackValidationPolicy(
    name=NAME,
    description="[critical: pods fail to start] The toolkit's CDI mode, the device plugin's device-list strategy and the RuntimeClasses agree.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate,
)
