"""gpu-stack node agent.

The NVIDIA GPU Operator's controller labels GPU nodes (``nvidia.com/gpu.present``,
``nvidia.com/gpu.deploy.*``) so that its operand DaemonSets land on them. gpu-stack
replaces that controller with a Pulumi program, which cannot react to nodes joining
or changing, so this agent runs on every GPU node and labels its own node instead.
The same image also carries the one-shot validation gate that a Job runs after
``pulumi up``, the inventory loop that reads the node's GPUs through NVML and
annotates the node with them and with their drift from its pool, and the driver pod's
``wait-for-completion`` init container (upgrade.waitForCompletion).

A package per program, as client-go's authors lay out a controller: the entry points (``__main__``: one
subcommand per program), API access (:mod:`.api`: clients, reads and writes, watches, the backoff every loop runs
under, evictions and the budget's writes), the model (:mod:`.model`: the node-pools document, labels, upgrade
states, the budget's records and the handshakes on a Node, all pure functions over API objects as plain dicts), and
one package per program: :mod:`.label` (the label loop and its Pacer), :mod:`.inventory` (the NVML read, also
imported by ``python -m gpustack inventory``, and the drift), :mod:`.wait` (wait-for-completion), :mod:`.gate` (the
verdict and the gate Job's polling) and :mod:`.coordinate` (the upgrade coordinator). Only api, the programs'
loops and the coordinator talk to the API server.
"""

__version__ = "0.10.0"
