"""Kubernetes machinery the states share: the DaemonSet skeleton, security contexts
and init-container gates (`builders`), RBAC sets (`rbac`), outputs resolved later in the program (`deferred`),
resource names and their aliases (`naming`), the DRA API objects (`dra_api`) and the device-plugin sharing configs
(`sharing`). The states are in components/states/, the driver-like DaemonSets in components/states/driver/."""
