"""Node Feature Discovery: the labels (`feature.node.kubernetes.io/pci-10de.present`, kernel, OS) that tell the
rest of the stack which nodes carry NVIDIA GPUs.

The operator ships NFD as a Helm subchart (deployments/gpu-operator/Chart.yaml, v0.19.0) with values that
whitelist PCI display/network classes and let GFD publish `nvidia.com` labels; gpu-stack installs the same chart
with the same values. Clusters that already run NFD (often via the Network Operator) set `nfd.mode: existing`
and nothing is installed, so NFD is never duplicated.

With GPUDirect on, the chart's NodeFeatureRule `nvidia-kernel-modules` (GO:deployments/gpu-operator/templates/
nodefeaturerules.yaml) is rendered in either mode: it labels nodes `nvidia.com/{gds,gdrcopy,peermem}.capable`
from the kernel modules NFD sees loaded, so GPUDirect jobs can select the nodes where the modules really are.
"""

from __future__ import annotations

from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s

from components.catalogs import catalog
from components.config import DaemonSets

RELEASE = "node-feature-discovery"
NFD_IMAGE_PATH = "nfd/node-feature-discovery"
KERNEL_MODULES_RULE = "nvidia-kernel-modules"
# module -> the label a node gets while it is loaded
CAPABLE_LABELS = {
    "gdrdrv": "nvidia.com/gdrcopy.capable",
    "nvidia_fs": "nvidia.com/gds.capable",
    "nvidia_peermem": "nvidia.com/peermem.capable",
}


def kernel_module_rules() -> list[dict]:
    return [
        {
            "name": f"kernel-module-{module}",
            "labels": {label: "true"},
            "matchFeatures": [{"feature": "kernel.loadedmodule", "matchExpressions": {module: {"op": "Exists"}}}],
        }
        for module, label in CAPABLE_LABELS.items()
    ]


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
    release: Optional[k8s.helm.v3.Release]

    def __init__(
        self,
        name: str,
        *,
        namespace: str,
        chart_repository: str,
        chart_version: str,
        daemonsets: DaemonSets,
        registry_override: Optional[str],
        deploy: bool = True,
        kernel_module_labels: bool = False,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:NodeFeatureDiscovery", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, depends_on=list(depends_on))
        self.release = None
        if deploy:
            self.release = self._release(namespace, chart_repository, chart_version, daemonsets, registry_override, child)
        if kernel_module_labels:
            # The rule's CRD comes with the chart, so the rule waits for the release when there is one.
            k8s.apiextensions.CustomResource(
                KERNEL_MODULES_RULE,
                api_version="nfd.k8s-sigs.io/v1alpha1",
                kind="NodeFeatureRule",
                metadata=k8s.meta.v1.ObjectMetaArgs(name=KERNEL_MODULES_RULE),
                spec={"rules": kernel_module_rules()},
                opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[self.release] if self.release else [])),
            )
        self.register_outputs(
            {"release": RELEASE if deploy else None, "chartVersion": chart_version if deploy else None, "kernelModuleLabels": kernel_module_labels}
        )

    def _release(
        self,
        namespace: str,
        chart_repository: str,
        chart_version: str,
        daemonsets: DaemonSets,
        registry_override: Optional[str],
        opts: pulumi.ResourceOptions,
    ) -> k8s.helm.v3.Release:
        return k8s.helm.v3.Release(
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
            opts=opts,
        )
