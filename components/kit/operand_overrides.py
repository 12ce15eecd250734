"""Applying `gpu-stack:operands.<operand>` to the objects the states build: pod-level settings to the operand's
pod template, container-level ones to its own containers (components/catalogs/operand_overrides.py says which),
with the images components/config/images.py resolves."""

from __future__ import annotations

import copy
from typing import Iterable, Mapping, Optional, Sequence

from pulumi_kubernetes.core.v1 import ContainerArgs, EnvVarArgs, ResourceRequirementsArgs, TolerationArgs

from components.catalogs import operand_overrides as targets
from components.config import DaemonSets, OperandOverride


def pod_tolerations(ds: DaemonSets, override: Optional[OperandOverride]) -> list[TolerationArgs]:
    """daemonsets.tolerations, then the operand's extra ones (a repeat of one already there is left out)."""
    seen = []
    result = []
    extra = override.tolerations if override else []
    for t in [*ds.tolerations, *extra]:
        key = (t.key, t.operator, t.value, t.effect, getattr(t, "toleration_seconds", None))
        if key in seen:
            continue
        seen.append(key)
        result.append(
            TolerationArgs(
                key=t.key, operator=t.operator, value=t.value, effect=t.effect, toleration_seconds=getattr(t, "toleration_seconds", None)
            )
        )
    return result


def pull_secrets(stack: Sequence[str], overrides: Iterable[Optional[OperandOverride]]) -> list[str]:
    """The stack's pull secrets, then those of each operand with containers in the pod."""
    names = list(stack)
    for override in overrides:
        for name in override.image_pull_secrets if override else ():
            if name not in names:
                names.append(name)
    return names


def _merged_env(current: Optional[Sequence[EnvVarArgs]], override: OperandOverride) -> Optional[list[EnvVarArgs]]:
    if not override.env:
        return list(current) if current is not None else None
    # the override's own entries (name and value), so the render records them as the override's
    given = {var.name: var for var in override.env}
    merged = []
    for var in current or ():
        if var.name in given:
            own = given.pop(var.name)
            merged.append(EnvVarArgs(name=own.name, value=own.value))
        else:
            merged.append(var)
    merged += [EnvVarArgs(name=var.name, value=var.value) for var in given.values()]
    return merged


def apply_to_container(container: ContainerArgs, override: Optional[OperandOverride], image: Optional[str]) -> ContainerArgs:
    """A copy of `container` with an operand's container-level settings; the container itself when none apply."""
    if override is None and image is None:
        return container
    changed = copy.copy(container)
    if image is not None:
        changed.image = image
    if override is None:
        return changed
    changed.env = _merged_env(container.env, override)
    if override.args:
        changed.args = list(override.args)
    changed.resources = _resources(container, override)
    if override.image_pull_policy is not None:
        changed.image_pull_policy = override.image_pull_policy
    return changed


def _resources(container: ContainerArgs, override: OperandOverride) -> Optional[ResourceRequirementsArgs]:
    """The container's requests and limits with the override's, when it sets any."""
    if override.resources is None:
        return container.resources
    # A DRA flavour's claim is how its container sees the node's GPUs: it stays.
    claims = container.resources.claims if container.resources is not None else None
    return ResourceRequirementsArgs(
        requests=dict(override.resources.requests) or None, limits=dict(override.resources.limits) or None, claims=claims
    )


def _with_pod_operands_resources(
    container: ContainerArgs, pod_operand: Optional[str], overrides: Mapping[str, OperandOverride]
) -> ContainerArgs:
    """A container of no operand's own that takes the pod operand's resources (the Driver Toolkit sidecar), with
    them; any other container as it is."""
    override = overrides.get(pod_operand) if pod_operand else None
    if override is None or container.name not in targets.OPERANDS[pod_operand].resources_also_reach:
        return container
    changed = copy.copy(container)
    changed.resources = _resources(container, override)
    return changed


def _in_effect(key: str, overrides: Mapping[str, OperandOverride], images: Mapping[str, str]) -> str:
    """The key whose settings a container gets: its own, or while that is unset the key it falls back to."""
    fallback = targets.OPERANDS[key].falls_back_to
    return key if fallback is None or key in overrides or key in images else fallback


def apply_to_containers(
    containers: Sequence[ContainerArgs],
    pod_operand: Optional[str],
    overrides: Mapping[str, OperandOverride],
    images: Mapping[str, str],
) -> list[ContainerArgs]:
    result = []
    for container in containers:
        key = targets.container_operand(container.name, pod_operand)
        if key is None:
            result.append(_with_pod_operands_resources(container, pod_operand, overrides))
            continue
        key = _in_effect(key, overrides, images)
        result.append(apply_to_container(container, overrides.get(key), images.get(key)))
    return result


def operands_in_pod(
    containers: Iterable[ContainerArgs],
    pod_operand: Optional[str],
    overrides: Mapping[str, OperandOverride] = {},
    images: Mapping[str, str] = {},
) -> list[str]:
    """The operand keys with a container in the pod (those in effect), the pod's own first."""
    keys = [pod_operand] if pod_operand else []
    for container in containers:
        key = targets.container_operand(container.name, pod_operand)
        if key:
            key = _in_effect(key, overrides, images)
        if key and key not in keys:
            keys.append(key)
    return keys
