"""The CrossGuard pack as the Pulumi CLI loads it. Only builds the PolicyPack: constructing one starts the
analyzer server, so tests and the offline toolkit import `gpu_stack_policies` instead."""

from pulumi_policy import EnforcementLevel, PolicyPack

from gpu_stack_policies import POLICIES

PolicyPack(name="gpu-stack", enforcement_level=EnforcementLevel.ADVISORY, policies=POLICIES)
