"""Kubernetes machinery the states share: the DaemonSet skeleton and init-container gates (`builders`), RBAC sets
(`rbac`), outputs resolved later in the program (`deferred`), resource names and their aliases (`naming`), the DRA
API objects (`dra_api`), the device-plugin sharing configs, and gpu-stack's own node agent (labeller and inventory)."""
