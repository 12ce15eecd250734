"""State `state-driver`: NVIDIA's driver container, one DaemonSet per stack (managed) or per kernel (precompiled).

Objects as in GO:assets/state-driver: SA/Role/RoleBinding/ClusterRole/ClusterRoleBinding `nvidia-driver`,
ConfigMap `nvidia-driver-startup-probe`, DaemonSet `nvidia-driver-daemonset` with the `k8s-driver-manager` init
container. The DaemonSet is always OnDelete: a driver swap evicts GPU work, so pods are replaced one node at a
time by the driver manager, never by a rolling update.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import (
    AffinityArgs,
    ConfigMapVolumeSourceArgs,
    ContainerArgs,
    ExecActionArgs,
    LifecycleArgs,
    LifecycleHandlerArgs,
    PodAffinityTermArgs,
    PodAntiAffinityArgs,
    ProbeArgs,
    VolumeArgs,
)
from pulumi_kubernetes.meta.v1 import LabelSelectorArgs, LabelSelectorRequirementArgs

from components import consts
from components._k8s import (
    NODE_NAME_ENV,
    OPERATOR_NAMESPACE_ENV,
    PRIVILEGED,
    PRIVILEGED_S0,
    SCC_USE,
    Operands,
    also_after,
    child_opts,
    env,
    env_from_field,
    host_path,
    meta,
    mount,
    operand_daemonset,
    rbac_set,
    rule,
)

NAME = "nvidia-driver"
DAEMONSET = "nvidia-driver-daemonset"
COMPONENT_LABEL = "app.kubernetes.io/component"
PRECOMPILED_LABEL = "nvidia.com/precompiled"
STARTUP_PROBE_CONFIGMAP = "nvidia-driver-startup-probe"
STARTUP_PROBE_SCRIPT = "startup-probe.sh"
DRIVER_READY_FILE = ".driver-ctr-ready"
DAEMONS_STATUS_FILE = ".driver-daemons-status"

# The same probe contract as NVIDIA's asset: the pod is started once the module is loaded, any driver daemons
# report Ready and nvidia-smi answers; only then is .driver-ctr-ready written for the validators.
STARTUP_PROBE = f"""#!/bin/sh
set -eu
dir="{consts.VALIDATIONS_DIR}"
ready="$dir/{DRIVER_READY_FILE}"
daemons="$dir/{DAEMONS_STATUS_FILE}"
mkdir -p "$dir"

[ -f /sys/module/nvidia/refcnt ] || {{ echo "nvidia kernel module is not loaded yet"; exit 1; }}
if [ -f "$daemons" ] && [ "$(cat "$daemons")" != "Ready" ]; then
  echo "driver daemons report: $(cat "$daemons")"
  exit 1
fi
nvidia-smi || {{ echo "nvidia-smi does not answer yet"; exit 1; }}

# Written atomically: validators parse this file as soon as it exists.
{{
  echo "GDRCOPY_ENABLED: ${{GDRCOPY_ENABLED:-false}}"
  echo "GDS_ENABLED: ${{GDS_ENABLED:-false}}"
  echo "GPU_DIRECT_RDMA_ENABLED: ${{GPU_DIRECT_RDMA_ENABLED:-false}}"
}} > "$ready.tmp"
mv "$ready.tmp" "$ready"
"""

# k8s-driver-manager env as the asset ships it (fact sheet §2.3, §5.3).
DRIVER_MANAGER_ENV = (
    ("NVIDIA_VISIBLE_DEVICES", "void"),  # the driver manager must run under runc, not the nvidia runtime
    ("ENABLE_GPU_POD_EVICTION", "true"),
    ("ENABLE_AUTO_DRAIN", "false"),
    ("DRAIN_USE_FORCE", "false"),
    ("DRAIN_POD_SELECTOR_LABEL", ""),
    ("DRAIN_TIMEOUT_SECONDS", "0s"),
    ("DRAIN_DELETE_EMPTYDIR_DATA", "false"),
)

CLUSTER_RULES = (
    rule(["config.openshift.io"], ["clusterversions"], ["get", "list"]),
    rule([""], ["nodes"], ["get", "list", "patch", "update", "watch"]),
    rule([""], ["pods"], ["get", "list", "watch"]),
    rule([""], ["pods/eviction"], ["create"]),
    rule(["resource.k8s.io"], ["resourceclaims"], ["get", "list"]),
    rule(["apps"], ["daemonsets"], ["get"]),
)

VOLUMES = (
    host_path("run-nvidia", consts.RUN_NVIDIA, "DirectoryOrCreate"),
    host_path("var-log", "/var/log"),
    host_path("dev-log", "/dev/log"),
    host_path("host-os-release", "/etc/os-release"),
    host_path("run-nvidia-fabricmanager", "/run/nvidia-fabricmanager", "DirectoryOrCreate"),
    host_path("run-nvidia-topologyd", "/run/nvidia-topologyd", "DirectoryOrCreate"),
    host_path("mlnx-ofed-usr-src", "/run/mellanox/drivers/usr/src", "DirectoryOrCreate"),
    host_path("run-mellanox-drivers", "/run/mellanox/drivers", "DirectoryOrCreate"),
    host_path("run-nvidia-validations", consts.VALIDATIONS_DIR, "DirectoryOrCreate"),
    host_path("host-root", "/"),
    host_path("host-sys", "/sys", "Directory"),
    host_path("firmware-search-path", "/sys/module/firmware_class/parameters/path"),
    host_path("host-sys-devices-system", "/sys/devices/system", "Directory"),
    host_path("nv-firmware", f"{consts.DRIVER_INSTALL_DIR}/lib/firmware", "DirectoryOrCreate"),
)


@dataclass(frozen=True)
class DriverTarget:
    """One driver DaemonSet: the whole stack (managed) or one kernel (precompiled)."""

    daemonset: str
    image: str
    os_tag: str
    kernel: Optional[str] = None


def sanitize_kernel(kernel: str) -> str:
    """The operator's getSanitizedKernelVersion: drop the arch, '_' -> '.', no trailing '.', lower case."""
    without_arch = re.sub(r"x86_64(?:_64k)?|aarch64(?:_64k)?", "", kernel)
    return without_arch.replace("_", ".").rstrip(".").lower()


def managed_target(repository: str, version: str, os_tag: str) -> DriverTarget:
    # A digest already names one image; only tags get the OS suffix (resolveDriverTag).
    image = f"{repository}@{version}" if version.startswith("sha256:") else f"{repository}:{version}-{os_tag}"
    return DriverTarget(DAEMONSET, image, os_tag)


def precompiled_targets(repository: str, branch: str, kernels: Sequence[tuple[str, str]]) -> list[DriverTarget]:
    """One DaemonSet per distinct (kernel, OS): `<branch>-<kernel>-<osTag>` images (fact sheet §4.3)."""
    return [
        DriverTarget(f"{DAEMONSET}-{sanitize_kernel(kernel)}-{os_tag}", f"{repository}:{branch}-{kernel}-{os_tag}", os_tag, kernel)
        for kernel, os_tag in sorted(set(kernels))
    ]


def config_digest(target: DriverTarget, kernel_module_type: str) -> str:
    """Lets k8s-driver-manager skip an uninstall (and the GPU-pod eviction) when nothing the driver install
    depends on changed (DRIVER_CONFIG_DIGEST, fact sheet §4.1)."""
    material = json.dumps({"image": target.image, "kernelModuleType": kernel_module_type}, sort_keys=True)
    return hashlib.sha256(material.encode()).hexdigest()[:16]


class Driver(pulumi.ComponentResource):
    daemonsets: list[k8s.apps.v1.DaemonSet]

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        targets: Sequence[DriverTarget],
        kernel_module_type: str,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:Driver", name, None, opts)
        child = child_opts(self, depends_on)
        rbac = rbac_set(NAME, ops.namespace, role_rules=[SCC_USE], cluster_role_rules=CLUSTER_RULES, opts=child)
        probe = k8s.core.v1.ConfigMap(
            STARTUP_PROBE_CONFIGMAP,
            metadata=meta(STARTUP_PROBE_CONFIGMAP, ops.namespace, {"app": DAEMONSET, COMPONENT_LABEL: NAME}),
            data={STARTUP_PROBE_SCRIPT: STARTUP_PROBE},
            opts=child,
        )
        ds_opts = also_after(child, *rbac.resources, probe)
        self.daemonsets = [self._daemonset(ops, t, kernel_module_type, ds_opts) for t in targets]
        self.register_outputs({"daemonsets": [t.daemonset for t in targets], "images": [t.image for t in targets]})

    @staticmethod
    def _daemonset(ops: Operands, target: DriverTarget, kernel_module_type: str, opts: pulumi.ResourceOptions) -> k8s.apps.v1.DaemonSet:
        precompiled = target.kernel is not None
        digest = config_digest(target, kernel_module_type)
        driver_env = [
            NODE_NAME_ENV,
            env_from_field("NODE_IP", "status.hostIP"),
            env("KERNEL_MODULE_TYPE", kernel_module_type),
            *([env("OPEN_KERNEL_MODULES_ENABLED", "true")] if kernel_module_type == "open" else []),
            env("DRIVER_CONFIG_DIGEST", digest),
        ]
        manager = ContainerArgs(
            name="k8s-driver-manager",
            image=ops.images.driver_manager,
            image_pull_policy="IfNotPresent",
            command=["driver-manager"],
            args=["uninstall_driver"],
            env=[
                NODE_NAME_ENV,
                *(env(k, v) for k, v in DRIVER_MANAGER_ENV),
                OPERATOR_NAMESPACE_ENV,
                env("DRIVER_CONFIG_DIGEST", digest),
            ],
            security_context=PRIVILEGED,
            volume_mounts=[
                mount("run-nvidia", consts.RUN_NVIDIA, propagation="Bidirectional"),
                mount("host-root", "/host", read_only=True, propagation="HostToContainer"),
                mount("host-sys", "/sys"),
                mount("run-mellanox-drivers", "/run/mellanox/drivers", propagation="HostToContainer"),
            ],
        )
        driver = ContainerArgs(
            name="nvidia-driver-ctr",
            image=target.image,
            image_pull_policy="IfNotPresent",
            command=["nvidia-driver"],
            args=["init"],
            env=driver_env,
            security_context=PRIVILEGED_S0,
            volume_mounts=[
                mount("run-nvidia", consts.RUN_NVIDIA, propagation="Bidirectional"),
                mount("run-nvidia-fabricmanager", "/run/nvidia-fabricmanager"),
                mount("run-nvidia-topologyd", "/run/nvidia-topologyd"),
                mount("var-log", "/var/log"),
                mount("dev-log", "/dev/log"),
                mount("host-os-release", "/host-etc/os-release", read_only=True),
                mount("mlnx-ofed-usr-src", "/run/mellanox/drivers/usr/src", propagation="HostToContainer"),
                mount("run-mellanox-drivers", "/run/mellanox/drivers", propagation="HostToContainer"),
                mount("host-sys-devices-system", "/sys/devices/system"),
                mount("firmware-search-path", "/sys/module/firmware_class/parameters/path"),
                mount("nv-firmware", "/lib/firmware"),
                mount("driver-startup-probe-script", f"/usr/local/bin/{STARTUP_PROBE_SCRIPT}", sub_path=STARTUP_PROBE_SCRIPT),
            ],
            startup_probe=ProbeArgs(
                exec_=ExecActionArgs(command=["sh", f"/usr/local/bin/{STARTUP_PROBE_SCRIPT}"]),
                # precompiled images only load modules, so they are probed sooner (GO:internal/state/driver.go)
                initial_delay_seconds=5 if precompiled else 60,
                failure_threshold=120,
                success_threshold=1,
                period_seconds=10,
                timeout_seconds=60,
            ),
            lifecycle=LifecycleArgs(
                pre_stop=LifecycleHandlerArgs(
                    exec_=ExecActionArgs(
                        command=[
                            "/bin/sh",
                            "-c",
                            f"rm -f {consts.VALIDATIONS_DIR}/{DRIVER_READY_FILE} {consts.VALIDATIONS_DIR}/{DAEMONS_STATUS_FILE}",
                        ]
                    )
                )
            ),
        )
        labels = {COMPONENT_LABEL: NAME, PRECOMPILED_LABEL: "true" if precompiled else "false"}
        # Two driver pods on one node would unload each other's modules.
        one_per_node = AffinityArgs(
            pod_anti_affinity=PodAntiAffinityArgs(
                required_during_scheduling_ignored_during_execution=[
                    PodAffinityTermArgs(
                        label_selector=LabelSelectorArgs(
                            match_expressions=[LabelSelectorRequirementArgs(key=COMPONENT_LABEL, operator="In", values=[NAME])]
                        ),
                        topology_key="kubernetes.io/hostname",
                    )
                ]
            )
        )
        extra_selector = {consts.NFD_KERNEL_FULL: target.kernel} if precompiled else None
        return operand_daemonset(
            target.daemonset,
            ops,
            deploy_component="driver",
            service_account=NAME,
            labels=labels,
            template_annotations={"kubectl.kubernetes.io/default-container": "nvidia-driver-ctr"},
            extra_node_selector=extra_selector,
            host_pid=True,
            affinity=one_per_node,
            on_delete=True,
            init_containers=[manager],
            containers=[driver],
            volumes=[
                *VOLUMES,
                VolumeArgs(
                    name="driver-startup-probe-script",
                    config_map=ConfigMapVolumeSourceArgs(name=STARTUP_PROBE_CONFIGMAP, default_mode=0o755),
                ),
            ],
            opts=opts,
        )
