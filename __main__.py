"""gpu-stack: the NVIDIA GPU Operator's job as a Pulumi program.

Read the stack configuration once, build the stack against the stack's own cluster, export what workload
teams and reviewers need. An invalid configuration stops here, before anything is registered.
"""

import pulumi

from components.config import NAMESPACE, SECRET_KEYS, ConfigError, load_config, program_config, program_secret_keys
from components.kit.stack_inputs import kubernetes_provider
from components.stack import GpuStack
from node_images.inputfiles import json_value_problem


def _read_config() -> dict[str, str]:
    """The CLI's config bag, each object value (JSON text) checked before load_config parses it: a value nested too
    deep, holding NaN or a duplicate key is a ConfigError naming its key, never a traceback."""
    raw = program_config()
    problems = [
        (key, f"cannot be read: {problem}")
        for key, value in sorted(raw.items())
        # a secret key's value is text as given (a password may start with '['), never parsed as JSON
        if key.startswith(NAMESPACE + ":") and key not in SECRET_KEYS and (problem := json_value_problem(value)) is not None
    ]
    if problems:
        raise ConfigError(problems)
    return raw


config = load_config(_read_config(), program_secret_keys())
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
