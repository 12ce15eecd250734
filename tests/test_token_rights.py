"""Each token on a GPU node keeps only the verbs its pods use: pinned per ServiceAccount, as every shipped stack's
render grants them (the union over the stacks), so that a grant added or widened is a decision someone reads
here. Besides: a pod whose account holds no rights mounts no token, and the one account that evicts is the
coordinator's, which runs off the GPU nodes where it can."""

from __future__ import annotations

import collections
from typing import Any

import pytest

from gpustack.security import _grants
from stacktest import STACKS, stack_objects

# "resource" (with `[names]` and ` (ns)` for a Role in the operands' namespace) -> verbs
PINNED: dict[str, dict[str, str]] = {
    "compute-domain-daemon-service-account": {  # NVIDIA's DRA chart, as its daemons use it (started by the controller)
        "pods": "get list patch watch",
        "resource.nvidia.com/computedomaincliques": "create get list patch update watch",
        "resource.nvidia.com/computedomains": "get list patch update watch",
        "resource.nvidia.com/computedomains/status": "get list patch update watch",
    },
    "gpu-stack-node-inventory": {"nodes": "get patch"},
    "gpu-stack-node-labeler": {  # no eviction, no Leases, no ConfigMap creation (node agent 0.10.0)
        "apps/controllerrevisions (ns)": "list",
        "apps/daemonsets (ns)": "get",
        "configmaps[gpu-stack-upgrade-budget] (ns)": "get patch",
        "nodes": "get list patch watch",
        "pods": "list watch",
        "pods (ns)": "delete",
    },
    "node-feature-discovery-worker": {"nfd.k8s-sigs.io/nodefeatures (ns)": "create delete get update", "pods (ns)": "get"},
    "nvidia-cc-manager": {"nodes": "get list patch watch", "pods (ns)": "get list watch"},
    "nvidia-container-toolkit": {"apps/daemonsets (ns)": "list"},
    "nvidia-dcgm": {},
    "nvidia-dcgm-dra": {"resource.k8s.io/resourceclaims (ns)": "get list watch"},
    "nvidia-dcgm-exporter": {"configmaps (ns)": "get list", "pods": "get list watch"},
    "nvidia-dcgm-exporter-dra": {
        "configmaps (ns)": "get list",
        "pods": "get list watch",
        "resource.k8s.io/resourceclaims (ns)": "get list watch",
        "resource.k8s.io/resourceslices": "get list watch",
    },
    "nvidia-device-plugin": {"nodes": "get list watch"},
    "nvidia-device-plugin-mps-control-daemon": {"nodes": "get list watch"},
    "nvidia-dra-driver-kubeletplugin": {
        "apps/daemonsets (ns)": "list",
        "apps/deployments (ns)": "create delete get list patch update watch",  # MPSSupport only
        "nodes": "get list patch update watch",
        "pods": "get list watch",
        "resource.k8s.io/resourceclaims": "get list watch",
        "resource.k8s.io/resourceslices": "create delete get list update watch",
        "resource.nvidia.com/computedomaincliques (ns)": "get",
        "resource.nvidia.com/computedomains": "get list watch",
    },
    "nvidia-dra-validator": {"apps/daemonsets (ns)": "list"},  # its driver check tells a containerized driver
    "nvidia-driver": {  # no eviction with `rolling` (the default, every shipped stack)
        "apps/daemonsets": "get",
        "config.openshift.io/clusterversions": "get list",
        "nodes": "get list patch update watch",
        "pods": "get list watch",
        "resource.k8s.io/resourceclaims": "get list",
    },
    "nvidia-gpu-feature-discovery": {"nfd.k8s-sigs.io/nodefeatures (ns)": "create get list update watch",
                                     "nodes": "get list watch", "pods (ns)": "get"},
    "nvidia-kata-sandbox-device-plugin": {
        "config.openshift.io/clusterversions": "get list",
        "nfd.k8s-sigs.io/nodefeatures (ns)": "create get list update watch",
        "nodes": "get",
        "pods": "get",
        "pods (ns)": "create delete get list watch",
    },
    "nvidia-mig-manager": {
        "configmaps (ns)": "create get list patch update",
        "nodes": "get list patch update watch",
        "pods": "list",
        "pods (ns)": "delete get list watch",
    },
    "nvidia-node-status-exporter": {"apps/daemonsets (ns)": "get list watch", "nodes": "get list watch",
                                    "pods (ns)": "get list"},
    "nvidia-operator-validator": {
        "apps/daemonsets (ns)": "get list watch",
        "nodes": "get list watch",
        "nvidia.com/clusterpolicies/finalizers": "create delete get list patch update watch",
        "nvidia.com/nvidiadrivers/finalizers": "create delete get list patch update watch",
        "pods (ns)": "create delete get list patch update watch",
    },
    "nvidia-sandbox-device-plugin": {
        "config.openshift.io/clusterversions": "get list",
        "nfd.k8s-sigs.io/nodefeatures (ns)": "create get list update watch",
        "nodes": "get",
        "pods": "get",
        "pods (ns)": "create delete get list watch",
    },
    "nvidia-sandbox-validator": {"nodes": "get"},
    "nvidia-vfio-manager": {"config.openshift.io/clusterversions": "get list", "nodes": "get list patch watch",
                            "pods": "get list watch"},
    "nvidia-vgpu-device-manager": {"config.openshift.io/clusterversions": "get list", "nodes": "get list update watch",
                                   "pods (ns)": "get list watch"},
    "nvidia-vgpu-manager": {
        "apps/daemonsets": "get",
        "config.openshift.io/clusterversions": "get list",
        "nodes": "get list patch update watch",
        "pods": "get list watch",
        "resource.k8s.io/resourceclaims": "get list",
    },
}


def _renders() -> list[tuple[dict[str, Any], ...]]:
    # the renders tests/test_golden.py holds equal to the goldens, from the run's shared render cache
    return [stack_objects(stack) for stack in STACKS]


@pytest.fixture(scope="module")
def granted() -> dict[str, dict[str, str]]:
    """ServiceAccount -> its pinned-form grants, over every shipped stack's render."""
    found: dict[str, dict[str, set[str]]] = collections.defaultdict(lambda: collections.defaultdict(set))
    for objects in _renders():
        for account in (o for o in objects if o["kind"] == "ServiceAccount"):
            namespace, name = account["metadata"]["namespace"], account["metadata"]["name"]
            found[name]  # an account with no rights is listed too
            for group, resource, verb, names, scope in _grants(objects, namespace, name):
                key = (f"{group}/{resource}" if group else resource) + (f"[{','.join(names)}]" if names else "")
                found[name][key + ("" if scope == "cluster" else " (ns)")].add(verb)
    return {name: {k: " ".join(sorted(v)) for k, v in grants.items()} for name, grants in found.items()}


def gpu_node_accounts() -> set[str]:
    found = {"compute-domain-daemon-service-account"}
    for objects in _renders():
        found |= {o["spec"]["template"]["spec"]["serviceAccountName"] for o in objects if o["kind"] == "DaemonSet"}
    return found


def test_every_gpu_node_account_is_pinned():
    assert gpu_node_accounts() == set(PINNED)


@pytest.mark.parametrize("account", sorted(PINNED))
def test_each_gpu_node_account_keeps_only_the_verbs_it_uses(granted, account):
    assert granted[account] == PINNED[account]


def test_the_upgrade_coordinator_alone_may_evict_and_it_runs_off_the_gpu_nodes_where_it_can(granted):
    assert [name for name, grants in granted.items() if "pods/eviction" in grants] == ["gpu-stack-upgrade-coordinator"]
    for objects in _renders():
        [coordinator] = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "gpu-stack-upgrade-coordinator"]
        [term] = coordinator["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        assert term["preference"]["matchExpressions"] == [{"key": "nvidia.com/gpu.present", "operator": "DoesNotExist"}]


def test_a_pod_whose_account_holds_no_rights_mounts_no_token(granted):
    for objects in _renders():
        for ds in (o for o in objects if o["kind"] == "DaemonSet"):
            spec = ds["spec"]["template"]["spec"]
            if not granted[spec["serviceAccountName"]]:
                assert spec.get("automountServiceAccountToken") is False, ds["metadata"]["name"]
