"""State `state-kata-device-plugin`: NVIDIA's sandbox device plugin for Kata Containers, advertising a
vm-passthrough node's vfio-bound GPUs to the kubelet so a Kata pod can request one and have it passed into its
VM.

Objects as in GO:assets/state-kata-device-plugin with `TransformKataDevicePlugin` applied. Rendered only in
`sandboxWorkloads.mode: kata` (fact sheet §1.2, state 18), where it takes the place of the KubeVirt plugin: the
node agent then writes `nvidia.com/gpu.deploy.kata-sandbox-device-plugin` instead of
`...sandbox-device-plugin` on vm-passthrough nodes (GO:controllers/state_manager.go `getEffectiveStateLabels`).

Kata serves passthrough only, so the asset has one gate and not the KubeVirt plugin's two: `vfio-pci-validation`
waits for the sandbox validator to record the node's workload type and, on a vm-passthrough node, for
`vfio-pci-ready`. The transform runs that gate in the validator image with `runAsUser: 0`, as every validation
init container (`transformValidationInitContainer`). The plugin writes CDI specs for the GPUs under /var/run/cdi
and the Kata runtime opens /dev/vfio itself, so unlike the KubeVirt plugin it mounts no /dev/vfio.

The asset's `openshift.io/scc` annotation names an SCC gpu-stack does not create (its Role grants the
`privileged` SCC, as every operand's does), so it is not rendered.
"""

from __future__ import annotations

from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import ContainerArgs

from components.catalogs import consts
from components.kit.builders import (
    NODE_NAME_ENV,
    PRIVILEGED,
    VALIDATIONS_VOLUME,
    Operands,
    also_after,
    child_opts,
    env_from_field,
    host_path,
    mount,
    operand_daemonset,
)
from components.kit.rbac import rbac_set
# The asset's RBAC is the KubeVirt plugin's, rule for rule.
from components.states.sandbox_device_plugin import CLUSTER_RULES, KUBELET_DEVICE_PLUGINS, ROLE_RULES, workload_gate
from components.states.sandbox_validator import VFIO_PCI_READY

NAME = "nvidia-kata-sandbox-device-plugin"
DAEMONSET = "nvidia-kata-sandbox-device-plugin-daemonset"
CONTAINER = "nvidia-kata-sandbox-device-plugin-ctr"
DEPLOY_COMPONENT = "kata-sandbox-device-plugin"


VOLUMES = (
    host_path("device-plugin", KUBELET_DEVICE_PLUGINS),
    VALIDATIONS_VOLUME,
    host_path("cdi-root", consts.CDI_SPEC_DIR, "DirectoryOrCreate"),
)


def plugin(image: str) -> ContainerArgs:
    return ContainerArgs(
        name=CONTAINER,
        image=image,
        image_pull_policy="IfNotPresent",
        env=[
            NODE_NAME_ENV,
            env_from_field("POD_NAMESPACE", "metadata.namespace"),
            env_from_field("POD_SERVICE_ACCOUNT", "spec.serviceAccountName"),
        ],
        security_context=PRIVILEGED,
        volume_mounts=[mount("device-plugin", KUBELET_DEVICE_PLUGINS), mount("cdi-root", consts.CDI_SPEC_DIR)],
    )


class KataDevicePlugin(pulumi.ComponentResource):
    daemonset: k8s.apps.v1.DaemonSet

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:KataDevicePlugin", name, None, opts)
        child = child_opts(self, depends_on)
        rbac = rbac_set(NAME, ops.namespace, openshift=ops.openshift, role_rules=ROLE_RULES, cluster_role_rules=CLUSTER_RULES, opts=child)
        self.daemonset = operand_daemonset(
            DAEMONSET,
            ops,
            operand="kataSandboxDevicePlugin",
            deploy_component=DEPLOY_COMPONENT,
            service_account=NAME,
            init_containers=[
                workload_gate(ops.images.validator, name="vfio-pci-validation", workload="vm-passthrough", ready_file=VFIO_PCI_READY)
            ],
            containers=[plugin(ops.images.kata_device_plugin)],
            volumes=list(VOLUMES),
            opts=also_after(child, *rbac.resources),
        )
        self.register_outputs({"daemonset": DAEMONSET})
