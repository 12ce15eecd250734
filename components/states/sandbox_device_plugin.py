"""State `state-sandbox-device-plugin`: KubeVirt's GPU device plugin, advertising a VM node's vfio-bound GPUs
(and vGPU devices) to the kubelet for virt-launcher pods.

Objects as in GO:assets/state-sandbox-device-plugin with `TransformSandboxDevicePlugin` applied. Rendered only
in `sandboxWorkloads.mode: kubevirt` (fact sheet §1.2). Its two init gates wait for the sandbox validator's
verdict on the node: each first waits for `workload-type`, passes at once when the node runs the other VM
workload type, and otherwise waits for its own `*-ready` file. The `app` label is fixed: k8s-driver-manager
waits for pods labelled `app=nvidia-sandbox-device-plugin-daemonset` to go before it unloads a driver.

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
    PRIVILEGED_ROOT,
    VALIDATIONS_VOLUME,
    Operands,
    also_after,
    child_opts,
    env,
    env_from_field,
    host_path,
    mount,
    operand_daemonset,
)
from components.kit.rbac import SCC_USE, rbac_set, rule
from components.states.sandbox_validator import VFIO_PCI_READY, VGPU_DEVICES_READY, WORKLOAD_TYPE_FILE

NAME = "nvidia-sandbox-device-plugin"
DAEMONSET = "nvidia-sandbox-device-plugin-daemonset"
CONTAINER = "nvidia-sandbox-device-plugin-ctr"
DEPLOY_COMPONENT = "sandbox-device-plugin"
KUBELET_DEVICE_PLUGINS = "/var/lib/kubelet/device-plugins"
DEV_VFIO = "/dev/vfio"

ROLE_RULES = (
    SCC_USE,
    rule([""], ["pods"], ["create", "get", "list", "watch", "delete"]),
    rule(["nfd.k8s-sigs.io"], ["nodefeatures"], ["create", "get", "list", "watch", "update"]),
)
CLUSTER_RULES = (
    rule(["config.openshift.io"], ["clusterversions"], ["get", "list"]),
    rule([""], ["nodes", "pods"], ["get"]),
)


def workload_gate(image: str, *, name: str, workload: str, ready_file: str) -> ContainerArgs:
    """On a node of `workload`, waits for `ready_file`; elsewhere only until the validator has recorded the
    node's type. It runs in the validator image, as the operator's transform sets it, for nothing but a shell."""
    validations = consts.VALIDATIONS_DIR
    script = (
        f"until [ -f {validations}/{WORKLOAD_TYPE_FILE} ]; do echo waiting for the sandbox validator to record the workload type; sleep 5; done; "
        f'if [ "$(cat {validations}/{WORKLOAD_TYPE_FILE})" != "{workload}" ]; then echo not a {workload} node, {ready_file} not needed; exit 0; fi; '
        f"until [ -f {validations}/{ready_file} ]; do echo waiting for {ready_file}; sleep 5; done"
    )
    return ContainerArgs(
        name=name,
        image=image,
        image_pull_policy="IfNotPresent",
        command=["sh", "-c"],
        args=[script],
        env=[env("NVIDIA_VISIBLE_DEVICES", "void")],
        security_context=PRIVILEGED_ROOT,
        volume_mounts=[mount(VALIDATIONS_VOLUME.name, validations, propagation="HostToContainer")],
    )


class SandboxDevicePlugin(pulumi.ComponentResource):
    daemonset: k8s.apps.v1.DaemonSet

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:SandboxDevicePlugin", name, None, opts)
        child = child_opts(self, depends_on)
        rbac = rbac_set(NAME, ops.namespace, openshift=ops.openshift, role_rules=ROLE_RULES, cluster_role_rules=CLUSTER_RULES, opts=child)
        validator = ops.images.validator
        plugin = ContainerArgs(
            name=CONTAINER,
            image=ops.images.sandbox_device_plugin,
            image_pull_policy="IfNotPresent",
            env=[NODE_NAME_ENV, env_from_field("POD_NAMESPACE", "metadata.namespace")],
            security_context=PRIVILEGED,
            volume_mounts=[
                mount("device-plugin", KUBELET_DEVICE_PLUGINS),
                mount("vfio", DEV_VFIO),
                mount("cdi-root", consts.CDI_SPEC_DIR),
            ],
        )
        self.daemonset = operand_daemonset(
            DAEMONSET,
            ops,
            operand="sandboxDevicePlugin",
            deploy_component=DEPLOY_COMPONENT,
            service_account=NAME,
            init_containers=[
                workload_gate(validator, name="vfio-pci-validation", workload="vm-passthrough", ready_file=VFIO_PCI_READY),
                workload_gate(validator, name="vgpu-devices-validation", workload="vm-vgpu", ready_file=VGPU_DEVICES_READY),
            ],
            containers=[plugin],
            volumes=[
                host_path("device-plugin", KUBELET_DEVICE_PLUGINS),
                VALIDATIONS_VOLUME,
                host_path("vfio", DEV_VFIO),
                host_path("cdi-root", consts.CDI_SPEC_DIR, "DirectoryOrCreate"),
            ],
            opts=also_after(child, *rbac.resources),
        )
        self.register_outputs({"daemonset": DAEMONSET})
