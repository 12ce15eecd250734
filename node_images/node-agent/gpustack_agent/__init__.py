"""gpu-stack node agent.

The NVIDIA GPU Operator's controller labels GPU nodes (``nvidia.com/gpu.present``,
``nvidia.com/gpu.deploy.*``) so that its operand DaemonSets land on them. gpu-stack
replaces that controller with a Pulumi program, which cannot react to nodes joining
or changing, so this agent runs on every GPU node and labels its own node instead.
The same image also carries the one-shot validation gate that a Job runs after
``pulumi up``, the inventory loop that reads the node's GPUs through NVML and
annotates the node with them and with their drift from its pool, and the driver pod's
``wait-for-completion`` init container (upgrade.waitForCompletion).

Module layout keeps decisions testable without a cluster: :mod:`.labels`, :mod:`.gate`,
:mod:`.removal` (which label changes wait for a slot), :mod:`.budget` and :mod:`.slots` (the fleet's one
disruption budget), :mod:`.upgrade` (whether a driver pod is out of date; which slot a
node may take) and :mod:`.pods` are pure functions over API objects as plain dicts,
:mod:`.inventory` holds the NVML read (also imported by ``python -m gpustack inventory``)
and pure drift checks; :mod:`.kube` (API glue, loops, the gate), :mod:`.pacer` (paced
disruptions: the budget, evictions, driver upgrades) and :mod:`.completion` (cordon, wait for matching pods,
uncordon) are the only modules that talk to the API server.
"""

__version__ = "0.10.0"
