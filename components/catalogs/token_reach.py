"""What the ServiceAccount tokens on GPU nodes could write elsewhere, as data: NVIDIA's GPU Operator's grants, and
what gpu-stack 0.9.0 granted beyond what it grants now. docs/security.md sets them beside the render's own RBAC
(gpustack/security.py). Standard library only, like every catalog.

NVIDIA's: the operator's assets (GO:assets/<state>/02*_role.yaml, 021*_clusterrole.yaml; fact sheet Appendix B),
the DRA driver's chart (components/kit/dra_api.py holds the same rules), and the NFD chart with the operator's values,
which run NFD's worker as the master's ServiceAccount (GO:deployments/gpu-operator/values.yaml
`node-feature-discovery:`). Only writes are listed: reads are what docs/security.md shows from the render.
"""

from __future__ import annotations

# (API group, resources, verbs, "cluster" or "namespace")
# (API group, resources, verbs, "cluster" or "namespace"), and the resourceNames where the rule names some.
Grant = tuple  # (str, tuple[str, ...], tuple[str, ...], str) or (str, tuple[str, ...], tuple[str, ...], str, tuple[str, ...])

_NODES_PATCH: Grant = ("", ("nodes",), ("patch",), "cluster")
_EVICT: Grant = ("", ("pods/eviction",), ("create",), "cluster")
_NODE_FEATURES: Grant = ("nfd.k8s-sigs.io", ("nodefeatures",), ("create", "update"), "namespace")

NVIDIA_WRITES: dict[str, tuple[Grant, ...]] = {
    "nvidia-driver": (("", ("nodes",), ("patch", "update"), "cluster"), _EVICT),
    "nvidia-container-toolkit": (),
    "nvidia-operator-validator": (
        ("", ("pods",), ("create", "update", "patch", "delete"), "namespace"),
        ("nvidia.com", ("clusterpolicies/finalizers", "nvidiadrivers/finalizers"), ("create", "update", "patch", "delete"),
         "cluster"),
    ),
    "nvidia-device-plugin": (),
    "nvidia-device-plugin-mps-control-daemon": (),
    "nvidia-dcgm": (),
    "nvidia-dcgm-exporter": (),
    "nvidia-gpu-feature-discovery": (_NODE_FEATURES,),
    "nvidia-mig-manager": (
        ("", ("nodes",), ("patch", "update"), "cluster"),
        ("", ("pods",), ("delete",), "namespace"),
        ("", ("configmaps",), ("create", "patch", "update"), "namespace"),
    ),
    "nvidia-node-status-exporter": (),
    "nvidia-vgpu-manager": (_NODES_PATCH, _EVICT),
    "nvidia-vgpu-device-manager": (("", ("nodes",), ("update",), "cluster"),),
    "nvidia-sandbox-validator": (),
    "nvidia-vfio-manager": (_NODES_PATCH, _EVICT),
    "nvidia-sandbox-device-plugin": (("", ("pods",), ("create", "delete"), "namespace"), _NODE_FEATURES),
    "nvidia-kata-sandbox-device-plugin": (("", ("pods",), ("create", "delete"), "namespace"), _NODE_FEATURES),
    "nvidia-cc-manager": (_NODES_PATCH,),
    # the worker runs as the master's account, `node-feature-discovery`: the master's and gc's rights on every node
    "node-feature-discovery-worker": (
        ("", ("nodes", "nodes/status"), ("patch", "update"), "cluster"),
        ("nfd.k8s-sigs.io", ("nodefeatures",), ("create", "update", "delete"), "namespace"),
        ("nfd.k8s-sigs.io", ("nodefeatures",), ("delete",), "cluster"),
        ("nfd.k8s-sigs.io", ("nodefeaturegroups/status",), ("patch", "update"), "cluster"),
        ("topology.node.k8s.io", ("noderesourcetopologies",), ("delete",), "cluster"),
        ("coordination.k8s.io", ("leases",), ("create", "update"), "namespace"),
    ),
    "nvidia-dra-driver-kubeletplugin": (
        ("", ("nodes",), ("patch", "update"), "cluster"),
        ("resource.k8s.io", ("resourceslices",), ("create", "update", "delete"), "cluster"),
        # with the MPSSupport gate: the MPS control daemons it starts
        ("apps", ("deployments",), ("create", "update", "patch", "delete"), "namespace"),
    ),
    "compute-domain-daemon-service-account": (
        ("resource.nvidia.com", ("computedomains", "computedomains/status"), ("patch", "update"), "cluster"),
        ("resource.nvidia.com", ("computedomaincliques",), ("create", "patch", "update"), "cluster"),
        ("", ("pods",), ("patch",), "cluster"),
    ),
}
# gpu-stack's own node agents have no counterpart on NVIDIA's GPU nodes: the operator's controller, a Deployment
# with cluster-wide rights, labels the nodes and drives upgrades.
NVIDIA_ABSENT = ("gpu-stack-node-labeler", "gpu-stack-node-inventory")

# What gpu-stack 0.9.0 granted these accounts beyond 0.10.0's RBAC (and no node-bound admission policy kept any write
# on the token's node): the agents' own evictions and the grants of agents before 0.8.0, the driver managers'
# evictions, and NFD's worker running as the master's account.
REMOVED_IN_0_10_0: dict[str, tuple[Grant, ...]] = {
    "gpu-stack-node-labeler": (
        _EVICT,
        ("", ("configmaps",), ("create",), "namespace"),
        ("", ("configmaps",), ("update",), "namespace", ("gpu-stack-upgrade-budget",)),
        ("coordination.k8s.io", ("leases",), ("create", "delete", "update"), "namespace"),
    ),
    "nvidia-driver": (_EVICT,),
    "nvidia-vgpu-manager": (_EVICT,),
    "nvidia-vfio-manager": (_EVICT,),
    # the master's account, as rendered (its leader-election Lease granted cluster-wide, by name for update)
    "node-feature-discovery-worker": (
        *(grant for grant in NVIDIA_WRITES["node-feature-discovery-worker"] if grant[1] != ("leases",)),
        ("coordination.k8s.io", ("leases",), ("create",), "cluster"),
        ("coordination.k8s.io", ("leases",), ("update",), "cluster", ("nfd-master.nfd.kubernetes.io",)),
    ),
}
# Accounts whose pods mounted a token in 0.9.0 and mount none now (they never call the API server).
TOKEN_REMOVED_IN_0_10_0 = ("nvidia-dcgm",)
