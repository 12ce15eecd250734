"""The CrossGuard pack as the Pulumi CLI loads it. Only builds the PolicyPack: constructing one starts the
analyzer server, so tests and the offline toolkit import `gpu_stack_policies` instead."""

from pulumi_policy import PolicyPack

from gpu_stack_policies import PACK_ENFORCEMENT, PACK_NAME, POLICIES

PolicyPack(name=PACK_NAME, enforcement_level=PACK_ENFORCEMENT, policies=POLICIES)
