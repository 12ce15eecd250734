"""gpu-quota: a namespace the stack puts GPU consumers in has a ResourceQuota on those GPUs.

What "requests GPUs through the stack" means for rendered objects:

* an object with a pod template (DaemonSet, Deployment, StatefulSet, ReplicaSet, Job, CronJob, Pod) whose
  containers request or limit an NVIDIA GPU resource: `nvidia.com/gpu`, `nvidia.com/gpu.shared` or a MIG
  resource `nvidia.com/mig-<profile>`;
* the validator with its plugin workload on (`plugin-validation` with `WITH_WORKLOAD=true`): at run time it
  creates a pod in its own namespace that requests `nvidia.com/gpu`, or a MIG resource under the mixed MIG
  strategy. That pod is not rendered, but the stack causes it, so its namespace counts.

The operands themselves (device plugin, DCGM, ...) reach GPUs through the runtime, not through the scheduler,
and request none. A requesting namespace needs a ResourceQuota with `requests.<resource>` in `spec.hard` for
each resource it requests (any `requests.nvidia.com/mig-*` key covers the validator's MIG request, whose
profile is only chosen at run time). Quotas the stack does not render are invisible here: name the namespaces
whose quota is managed elsewhere in `externallyManagedQuotaNamespaces`.
"""

from __future__ import annotations

from typing import Any, Mapping

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

from gpu_stack_policies import fields, objects
from gpu_stack_policies.fields import report_at

NAME = "gpu-quota"
GPU = "nvidia.com/gpu"
SHARED_GPU = "nvidia.com/gpu.shared"
MIG_PREFIX = "nvidia.com/mig-"
ANY_MIG = MIG_PREFIX + "*"

CONFIG_SCHEMA = PolicyConfigSchema(
    properties={
        "externallyManagedQuotaNamespaces": {
            "type": "array",
            "description": "Namespaces whose GPU ResourceQuota is managed outside this stack.",
            "items": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63},
            "uniqueItems": True,
            "default": [],
        },
    }
)


def is_gpu_resource(name: str) -> bool:
    return name in (GPU, SHARED_GPU) or name.startswith(MIG_PREFIX)


def requested_resources(spec: Mapping) -> dict[str, dict[str, str]]:
    """The GPU resources each container of a pod spec requests (by container name), each with the field that
    requests it (below the pod spec)."""
    found: dict[str, dict[str, str]] = {}
    for container in objects.containers(spec):
        own = found.setdefault(container.name, {})
        resources = objects.mapping(container.spec.get("resources"))
        for section in ("requests", "limits"):
            for name in objects.mapping(resources.get(section)):
                if is_gpu_resource(str(name)):
                    own.setdefault(str(name), f"{container.at}/resources/{section}/{fields.escape(name)}")
        env = container.env
        if env.get("COMPONENT") == "plugin" and env.get("WITH_WORKLOAD", "").lower() == "true":
            own.setdefault(ANY_MIG if env.get("MIG_STRATEGY") == "mixed" else GPU, container.env_at("WITH_WORKLOAD"))
    return {name: wanted for name, wanted in found.items() if wanted}


def quota_covers(hard: set[str], resource: str) -> bool:
    if resource == ANY_MIG:
        return any(key.startswith("requests." + MIG_PREFIX) for key in hard)
    return f"requests.{resource}" in hard


def validate(args: StackValidationArgs, report: ReportViolation) -> None:
    resources = list(args.resources)
    config: Mapping[str, Any] = args.get_config()
    external = {str(n) for n in config.get("externallyManagedQuotaNamespaces", [])}
    # Objects without metadata.namespace land in the provider's default namespace.
    providers = [r for r in resources if r.resource_type == "pulumi:providers:kubernetes" and r.props.get("namespace")]
    provider_namespace = str(providers[0].props["namespace"]) if providers else "default"
    hard_by_namespace: dict[str, set[str]] = {}
    for quota in objects.resources_by_kind(resources, "ResourceQuota"):
        namespace = objects.namespace_of(quota.props) or provider_namespace
        hard = objects.mapping(objects.mapping(quota.props.get("spec")).get("hard"))
        hard_by_namespace.setdefault(namespace, set()).update(str(k) for k in hard)
    requesters = 0
    for resource in resources:
        kind = objects.kind_of(resource.resource_type)
        spec = objects.pod_spec(kind, resource.props)
        by_container = requested_resources(spec) if spec is not None else {}
        if not by_container:
            continue
        requesters += 1
        namespace = objects.namespace_of(resource.props) or provider_namespace
        if namespace in external:
            continue
        hard = hard_by_namespace.get(namespace, set())
        # one report per container: each container's request is set on its own (an operand's resources)
        for container, wanted in by_container.items():
            missing = sorted(r for r in wanted if not quota_covers(hard, r))
            if not missing:
                continue
            keys = ", ".join(f"requests.{r}" for r in missing)
            shown = f" (container {container!r})" if len(by_container) > 1 else ""
            report_at(
                report, objects.pod_spec_pointer(kind) + wanted[missing[0]],
                f"{objects.describe(kind or '?', resource.props, resource.name)} requests {', '.join(sorted(wanted))}{shown} in "
                f"namespace {namespace}, which has no ResourceQuota limiting {keys}; one namespace can then take every "
                f"GPU; fix: add a ResourceQuota to {namespace} with {keys} in spec.hard, or list {namespace} in "
                "externallyManagedQuotaNamespaces if its quota lives elsewhere",
                resource.urn,
            )
    if not requesters:
        args.not_applicable("no rendered pod requests GPUs, and the validator runs no plugin workload")


POLICY = StackValidationPolicy(
    name=NAME,
    description="[low: capacity hygiene] Every namespace the stack puts GPU requests in has a ResourceQuota on those GPU resources.",
    enforcement_level=EnforcementLevel.ADVISORY,
    validate=validate,
    config_schema=CONFIG_SCHEMA,
)
