"""The `inventory` program: NVML reads and their drift from the node's pool."""
