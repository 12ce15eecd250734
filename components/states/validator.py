"""State `state-operator-validation`: the per-node gate every other operand waits on.

Objects as in GO:assets/state-operator-validation with `TransformValidator` applied: init containers run
driver → GPUDirect modules (when the stack enables them) → toolkit → cuda → plugin checks in that order, each writing its `*-ready` file under
/run/nvidia/validations; `plugin-validation` is dropped when the device plugin is off (nothing would ever
advertise a GPU). The DaemonSet name is fixed: the cuda and plugin checks read `nvidia-operator-validator` to
copy its tolerations into the workload pods they spawn.
"""

from __future__ import annotations

from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import ContainerArgs

from components.catalogs import consts
from components.config import Validator
from components.config.keys import flag
from components.kit.builders import (
    NODE_NAME_ENV,
    OPERATOR_NAMESPACE_ENV,
    PRIVILEGED_ROOT,
    PRIVILEGED_ROOT_S0,
    UNPRIVILEGED_ROOT,
    Operands,
    also_after,
    child_opts,
    env,
    host_path,
    mount,
    operand_daemonset,
    validator_container,
    validator_main,
)
from components.kit.operand_overrides import pull_secrets
from components.kit.rbac import SCC_USE, rbac_set, rule

NAME = "nvidia-operator-validator"


def ready_files(*, device_plugin: bool, gpudirect: Sequence[str] = ()) -> tuple[str, ...]:
    """What the checks write under /run/nvidia/validations; all present means the node validated (the
    validator's preStop removes them, so they never outlive its pod)."""
    return (
        "driver-ready",
        *(f"{component}-ready" for component in gpudirect),
        "toolkit-ready",
        "cuda-ready",
        *(("plugin-ready",) if device_plugin else ()),
    )


APP_LABELS = {"app": NAME, consts.PART_OF: "gpu-operator"}

ROLE_RULES = (
    SCC_USE,
    rule([""], ["pods"], ["create", "get", "list", "watch", "update", "patch", "delete"]),
    rule(["apps"], ["daemonsets"], ["get", "list", "watch"]),
)
CLUSTER_RULES = (
    rule([""], ["nodes"], ["get", "list", "watch"]),
    rule(["nvidia.com"], ["clusterpolicies/finalizers", "nvidiadrivers/finalizers"], ["create", "get", "list", "watch", "update", "patch", "delete"]),
)

VALIDATIONS_MOUNT = mount("run-nvidia-validations", consts.VALIDATIONS_DIR, propagation="Bidirectional")
# Bidirectional propagation is for privileged containers only (ValidateVolumeMounts refuses it otherwise). An
# unprivileged check only writes files there, and files reach the host through the bind mount without it.
UNPRIVILEGED_VALIDATIONS_MOUNT = mount("run-nvidia-validations", consts.VALIDATIONS_DIR)


def workload_env(ops: Operands) -> list:
    """What cuda/plugin validation need to spawn their vectorAdd pods like the operator would."""
    # The workload pods pull the validator image as the validator itself does (`operands.validator`).
    override = ops.overrides.get("validator")
    policy = (override.image_pull_policy if override else None) or "IfNotPresent"
    extra = [env("VALIDATOR_IMAGE", ops.images.validator), env("VALIDATOR_IMAGE_PULL_POLICY", policy)]
    secrets = pull_secrets(ops.pull_secrets, [override])
    if secrets:
        extra.append(env("VALIDATOR_IMAGE_PULL_SECRETS", ",".join(secrets)))
    if ops.runtime_class:
        extra.append(env("VALIDATOR_RUNTIME_CLASS", ops.runtime_class))
    return extra


def dra_ready_files(*, gpudirect: Sequence[str] = ()) -> tuple[str, ...]:
    """The files a DRA node's validator writes: the node checks, then the DRA validator's `dra-ready` in place of
    cuda and plugin (no device plugin advertises nvidia.com/gpu there)."""
    return ("driver-ready", *(f"{component}-ready" for component in gpudirect), "toolkit-ready", "dra-ready")


def gpudirect_checks(image: str, components: Sequence[str]) -> list[ContainerArgs]:
    """The checks the operator's driver validation runs for the modules `.driver-ctr-ready` lists, made explicit:
    the validator runs them only for driver DaemonSets a ClusterPolicy owns, and gpu-stack's are owned by no one.
    Each waits until its module is loaded and writes `<component>-ready`."""
    return [
        validator_container(
            f"{component}-validation",
            image,
            component,
            with_wait=True,
            # The operator runs these inside the privileged driver check; reading /proc/modules needs no privilege.
            security_context=UNPRIVILEGED_ROOT,
            mounts=[UNPRIVILEGED_VALIDATIONS_MOUNT],
        )
        for component in components
    ]


def node_checks(image: str, gpudirect: Sequence[str] = ()) -> list[ContainerArgs]:
    """driver → GPUDirect modules → toolkit: what every container GPU node must pass, however its GPUs are
    handed out (the DRA validator runs them too)."""
    return [
        validator_container(
            "driver-validation",
            image,
            "driver",
            with_wait=True,
            extra_env=[OPERATOR_NAMESPACE_ENV],
            security_context=PRIVILEGED_ROOT_S0,
            mounts=[
                mount("host-root", "/host", read_only=True, propagation="HostToContainer"),
                mount("driver-install-dir", consts.DRIVER_INSTALL_DIR, propagation="HostToContainer"),
                VALIDATIONS_MOUNT,
                mount("host-dev-char", "/host-dev-char"),
            ],
        ),
        *gpudirect_checks(image, gpudirect),
        # NVIDIA_VISIBLE_DEVICES=all only reaches a GPU if the runtime (class or CDI) really works.
        ContainerArgs(
            name="toolkit-validation",
            image=image,
            image_pull_policy="IfNotPresent",
            command=["sh", "-c"],
            args=["nvidia-validator"],
            env=[env("NVIDIA_VISIBLE_DEVICES", "all"), env("WITH_WAIT", "false"), env("COMPONENT", "toolkit")],
            security_context=PRIVILEGED_ROOT,
            volume_mounts=[VALIDATIONS_MOUNT],
        ),
    ]


# The host paths `node_checks` mount.
NODE_CHECK_VOLUMES = (
    host_path("run-nvidia-validations", consts.VALIDATIONS_DIR, "DirectoryOrCreate"),
    host_path("driver-install-dir", consts.DRIVER_INSTALL_DIR),
    host_path("host-root", "/"),
    host_path("host-dev-char", "/dev/char"),
)


def init_containers(
    ops: Operands, *, device_plugin: bool, mig_strategy: str, settings: Validator, gpudirect: Sequence[str] = ()
) -> list[ContainerArgs]:
    image = ops.images.validator
    checks = [
        *node_checks(image, gpudirect),
        validator_container(
            "cuda-validation",
            image,
            "cuda",
            with_wait=False,
            extra_env=[NODE_NAME_ENV, OPERATOR_NAMESPACE_ENV, *workload_env(ops)],
            mounts=[VALIDATIONS_MOUNT],
        ),
    ]
    if device_plugin:
        checks.append(
            ContainerArgs(
                name="plugin-validation",
                image=image,
                image_pull_policy="IfNotPresent",
                command=["sh", "-c"],
                args=["nvidia-validator"],
                env=[
                    env("COMPONENT", "plugin"),
                    env("WITH_WAIT", "false"),
                    env("WITH_WORKLOAD", flag(settings, "plugin_workload")),
                    env("MIG_STRATEGY", mig_strategy),
                    NODE_NAME_ENV,
                    OPERATOR_NAMESPACE_ENV,
                    *workload_env(ops),
                ],
                security_context=PRIVILEGED_ROOT,
                volume_mounts=[VALIDATIONS_MOUNT],
            )
        )
    return checks


class OperatorValidator(pulumi.ComponentResource):
    daemonset: k8s.apps.v1.DaemonSet

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        device_plugin: bool,
        mig_strategy: str,
        settings: Validator = Validator(),
        gpudirect: Sequence[str] = (),
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:OperatorValidator", name, None, opts)
        child = child_opts(self, depends_on)
        rbac = rbac_set(NAME, ops.namespace, openshift=ops.openshift, role_rules=ROLE_RULES, cluster_role_rules=CLUSTER_RULES, opts=child)
        # A stopping validator withdraws its verdict so nothing trusts a node mid-change.
        main = validator_main(NAME, ops.images.validator, withdraw="*-ready", mounts=[VALIDATIONS_MOUNT])
        self.daemonset = operand_daemonset(
            NAME,
            ops,
            operand="validator",
            deploy_component="operator-validator",
            service_account=NAME,
            selector_labels=APP_LABELS,
            runtime_class=True,
            init_containers=init_containers(
                ops, device_plugin=device_plugin, mig_strategy=mig_strategy, settings=settings, gpudirect=gpudirect
            ),
            containers=[main],
            volumes=list(NODE_CHECK_VOLUMES),
            opts=also_after(child, *rbac.resources),
        )
        self.register_outputs({"daemonset": NAME})
