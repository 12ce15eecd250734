"""Kubernetes machinery the states share: the DaemonSet skeleton, RBAC sets and init-container gates
(`builders`), resource names and their aliases (`naming`), driver upgrade waves and validation-gate Jobs, the
device-plugin sharing configs, and gpu-stack's own node agent (labeller and inventory)."""
