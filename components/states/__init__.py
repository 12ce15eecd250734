"""The states, one module each, named after the state: the GPU Operator's and gpu-stack's own (node labelling, node
inventory, driver waves, validation gate); the driver-like DaemonSets' states live with their pods in `driver/`.
`order.py` holds the order in which `components/stack.py` builds them. A state receives the slice of config it
needs, never `pulumi.Config`."""
