"""The GPU Operator's states, one module each, named after the state; `order.py` holds the order in which
`components/stack.py` builds them. A state receives the slice of config it needs, never `pulumi.Config`."""
