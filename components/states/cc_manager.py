"""State `state-cc-manager`: NVIDIA's confidential-computing manager, which puts the CC-capable GPUs of a
vm-passthrough node into the CC mode Kata confidential containers need.

Objects as in GO:assets/state-cc-manager with `TransformCCManager` applied. Rendered only in
`sandboxWorkloads.mode: kata` with `ccManager.enabled` (fact sheet §1.2, state 20). The transform's one
addition to the asset is `DEFAULT_CC_MODE` (`on`, `off` or `devtools`), appended after the asset's env: the mode
for nodes without their own `nvidia.com/cc.mode` label. The manager switches the GPUs through /sys, pausing the
node's VFIO manager and sandbox validator through their deploy labels while it does (k8s-cc-manager v0.4.3 does
not pause the Kata device plugin, whose label it does not know), then writes
/run/nvidia/validations/.cc-manager-ctr-ready, which the sandbox validator's `cc-manager-validation` waits for
on nodes labelled `nvidia.com/cc.capable=true`; its preStop withdraws the file.

One deliberate difference: `OPERATOR_NAMESPACE` (the pod's namespace) is added last. k8s-cc-manager v0.4.x
waits for the paused operands' pods to go before it switches a GPU, looking for them in `OPERATOR_NAMESPACE`,
which defaults to `gpu-operator`; in a stack with another `cluster.namespace` it would look where they are not
(and its Role grants nothing), and switch without waiting for the VFIO manager's preStop to unbind the GPUs. In
the default namespace nothing changes.

The asset has no init container: the manager works on PCI devices whichever driver holds them. It selects its
pods by `name`, not `app`; kept so selectors written for the operator's pods still match, with `app` added as the
asset labels its DaemonSet. The asset's `terminationGracePeriodSeconds: 30` is the API default and is not
rendered. Its OpenShift SCC (`0400_scc.openshift.yaml`) is not rendered either: besides being OpenShift-only, it
is a copy of the VFIO manager's and carries that name, `nvidia-vfio-manager` (fact sheet §2.11, Appendix G); the
Role grants the `privileged` SCC, as every operand's does.
"""

from __future__ import annotations

from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import ContainerArgs, ExecActionArgs, LifecycleArgs, LifecycleHandlerArgs, ResourceRequirementsArgs

from components.catalogs import consts
from components.kit.builders import (
    NODE_NAME_ENV,
    OPERATOR_NAMESPACE_ENV,
    PRIVILEGED_S0,
    Operands,
    also_after,
    child_opts,
    env,
    host_path,
    mount,
    operand_daemonset,
)
from components.kit.rbac import SCC_USE, rbac_set, rule

NAME = "nvidia-cc-manager"
DEPLOY_COMPONENT = "cc-manager"
SELECTOR = {"name": NAME}
DEFAULT_CC_MODE_ENV = "DEFAULT_CC_MODE"
CC_MODES = ("on", "off", "devtools")
# Written by the manager once every CC-capable GPU is in the wanted mode; the sandbox validator gates on it.
CTR_READY = f"{consts.VALIDATIONS_DIR}/.cc-manager-ctr-ready"

ROLE_RULES = (SCC_USE, rule([""], ["pods"], ["get", "list", "watch"]))
# reading its node's nvidia.com/cc.mode and pausing / restoring the node's deploy labels
CLUSTER_RULES = (rule([""], ["nodes"], ["get", "list", "patch", "watch"]),)

VOLUMES = (
    host_path("host-sys", "/sys", "Directory"),
    host_path("run-nvidia", consts.RUN_NVIDIA, "DirectoryOrCreate"),
)


def cc_manager(image: str, default_mode: str) -> ContainerArgs:
    return ContainerArgs(
        name=NAME,
        image=image,
        image_pull_policy="IfNotPresent",
        env=[
            NODE_NAME_ENV,
            env("NVIDIA_VISIBLE_DEVICES", "void"),  # runc, never the nvidia runtime: the node has no container stack
            env(DEFAULT_CC_MODE_ENV, default_mode),
            OPERATOR_NAMESPACE_ENV,
        ],
        resources=ResourceRequirementsArgs(limits={"memory": "200Mi"}, requests={"cpu": "100m", "memory": "200Mi"}),
        security_context=PRIVILEGED_S0,
        lifecycle=LifecycleArgs(pre_stop=LifecycleHandlerArgs(exec_=ExecActionArgs(command=["/bin/rm", "-f", CTR_READY]))),
        volume_mounts=[mount("host-sys", "/sys"), mount("run-nvidia", consts.RUN_NVIDIA)],
    )


class CcManager(pulumi.ComponentResource):
    daemonset: k8s.apps.v1.DaemonSet

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        default_mode: str,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        if default_mode not in CC_MODES:
            raise ValueError(f"CC mode {default_mode!r} is not one of {', '.join(CC_MODES)}")
        super().__init__("gpu-stack:index:CcManager", name, None, opts)
        child = child_opts(self, depends_on)
        rbac = rbac_set(NAME, ops.namespace, openshift=ops.openshift, role_rules=ROLE_RULES, cluster_role_rules=CLUSTER_RULES, opts=child)
        self.daemonset = operand_daemonset(
            NAME,
            ops,
            operand="ccManager",
            deploy_component=DEPLOY_COMPONENT,
            service_account=NAME,
            selector_labels=SELECTOR,
            labels={"app": NAME},
            containers=[cc_manager(ops.images.cc_manager, default_mode)],
            volumes=list(VOLUMES),
            opts=also_after(child, *rbac.resources),
        )
        self.register_outputs({"daemonset": NAME})
