"""Node Feature Discovery: the labels (`feature.node.kubernetes.io/pci-10de.present`, kernel, OS) that tell the
rest of the stack which nodes carry NVIDIA GPUs.

The operator ships NFD as a Helm subchart (deployments/gpu-operator/Chart.yaml, v0.19.0) with values that
whitelist PCI display/network classes and let GFD publish `nvidia.com` labels; gpu-stack installs the same chart
with the same values. Clusters that already run NFD (often via the Network Operator) set `nfd.mode: existing`
and nothing is installed, so NFD is never duplicated.
"""

from __future__ import annotations

from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s

from components import catalog
from components.config import DaemonSets

RELEASE = "node-feature-discovery"
NFD_IMAGE_PATH = "nfd/node-feature-discovery"


def chart_values(daemonsets: DaemonSets, registry_override: Optional[str]) -> dict:
    """The operator's Helm values for the NFD subchart (GO:deployments/gpu-operator/values.yaml)."""
    gpu_tolerations = [
        {k: v for k, v in {"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect}.items() if v is not None}
        for t in daemonsets.tolerations
    ]
    values: dict = {
        "priorityClassName": daemonsets.priority_class_name,
        "gc": {"enable": True, "replicaCount": 1, "serviceAccount": {"name": RELEASE, "create": False}},
        "worker": {
            "serviceAccount": {"name": RELEASE, "create": False},
            "tolerations": [
                {"key": "node-role.kubernetes.io/control-plane", "operator": "Equal", "value": "", "effect": "NoSchedule"},
                *gpu_tolerations,
            ],
            "config": {
                "sources": {
                    "pci": {"deviceClassWhitelist": ["02", "0200", "0207", "0300", "0302"], "deviceLabelFields": ["vendor"]}
                }
            },
        },
        "master": {"serviceAccount": {"name": RELEASE, "create": True}, "config": {"extraLabelNs": ["nvidia.com"]}},
    }
    if registry_override:
        values["image"] = {"repository": f"{registry_override}/{NFD_IMAGE_PATH}"}
    return values


class NodeFeatureDiscovery(pulumi.ComponentResource):
    release: k8s.helm.v3.Release

    def __init__(
        self,
        name: str,
        *,
        namespace: str,
        chart_repository: str,
        chart_version: str,
        daemonsets: DaemonSets,
        registry_override: Optional[str],
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:NodeFeatureDiscovery", name, None, opts)
        self.release = k8s.helm.v3.Release(
            RELEASE,
            k8s.helm.v3.ReleaseArgs(
                name=RELEASE,
                chart=f"{chart_repository.rstrip('/')}/{catalog.NFD_CHART}",
                version=chart_version,
                namespace=namespace,
                values=chart_values(daemonsets, registry_override),
                # NFD's master and gc are Deployments; a broken install should fail the update, not hang it.
                timeout=600,
                atomic=True,
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(depends_on)),
        )
        self.register_outputs({"release": RELEASE, "chartVersion": chart_version})
