"""The `wait-for-completion` program: the driver pod's init container that lets the node's jobs finish."""
