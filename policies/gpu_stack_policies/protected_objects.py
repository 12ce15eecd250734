"""protected-objects: what running pods stand on cannot be deleted or replaced by a config edit.

The namespace holds every operand (the driver pods among them); a CustomResourceDefinition takes every object of
its kind with it (a workload's ComputeDomains); workloads name RuntimeClasses, DeviceClasses and PriorityClasses.
Deleting one of them, or replacing it (which deletes it first), breaks pods that gpu-stack does not own. Such an
object must be registered with `protect` (components/kit/builders.py `kept`, which also sets `retain_on_delete`): an
edit that would delete or replace it then fails `pulumi up` and `pulumi preview`, and nothing is removed until
someone unprotects it on purpose. The policy sees `protect` only: the engine does not hand `retainOnDelete` to
policy packs.
"""

from __future__ import annotations

from pulumi_policy import EnforcementLevel, ReportViolation, ResourceValidationArgs, ResourceValidationPolicy

from gpu_stack_policies import objects
from gpu_stack_policies.fields import report_at

NAME = "protected-objects"
PROTECTED_KINDS = ("Namespace", "CustomResourceDefinition", "RuntimeClass", "DeviceClass", "PriorityClass")


def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
    kind = objects.kind_of(args.resource_type)
    if kind not in PROTECTED_KINDS or args.opts.protect:
        return
    what = objects.describe(kind, args.props, args.name)
    report_at(
        report, "/metadata/name",
        f"{what} is registered without protect: a config edit that removes or replaces it deletes what running pods "
        "stand on; fix: register it with components/kit/builders.py kept(opts) (protect and retain_on_delete)"
    )


POLICY = ResourceValidationPolicy(
    name=NAME,
    description="[critical: a config edit deletes what running pods stand on] The namespace, CRDs, RuntimeClasses, DeviceClasses and PriorityClasses are protected against deletion.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate,
)
