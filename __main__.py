"""gpu-stack: the NVIDIA GPU Operator's job as a Pulumi program.

Read the stack configuration once, build the stack against the stack's own cluster, export what workload
teams and reviewers need. An invalid configuration stops here, before anything is registered.
"""

import pulumi

from components.config import load_config, program_config, program_secret_keys
from components.kit.stack_inputs import kubernetes_provider
from components.stack import GpuStack

config = load_config(program_config(), program_secret_keys())
provider = kubernetes_provider(config)
stack = GpuStack("gpu-stack", config, opts=pulumi.ResourceOptions(providers=[provider]))

pulumi.export("cluster", config.cluster.name)
pulumi.export("namespace", config.cluster.namespace)
pulumi.export("states", list(stack.states))
pulumi.export("nodePools", {p.name: {"workloadType": p.workload_type, "gpuModel": p.gpu_model} for p in config.node_pools})
# What a workload on each pool requests: resource names and how many of each one GPU becomes.
pulumi.export("gpuResources", stack.gpu_resources)
# DRA pools: ResourceClaimTemplates to start from (one GPU, one MIG device, a ComputeDomain), at the cluster's API version.
if stack.dra_examples:
    pulumi.export("draExampleClaims", stack.dra_examples)
gate = stack.states.get("stack-validation")
pulumi.export("validation", gate.result if gate is not None else {"status": "off"})
