"""The driver pod's GPUDirect sidecars (nvidia-peermem, nvidia-fs, gdrcopy) and the env that tells the driver install
and k8s-driver-manager about GPUDirect, as NVIDIA's state-driver asset renders them (GO:assets/state-driver/
0500_daemonset.yaml); the driver DaemonSet itself is components/states/driver/state.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from pulumi_kubernetes.core.v1 import ContainerArgs, EnvVarArgs, ExecActionArgs, ProbeArgs

from components.catalogs import consts
from components.catalogs.openshift import DTK_ENTRYPOINT, DTK_SHARED_DIR, DTK_SIDECAR_VERBS, DTK_VOLUME
from components.kit.builders import PRIVILEGED_S0, env, mount
from components.states.driver.extensions import DriverPodExtensions
from components.states.driver.targets import DriverTarget, Sidecars, sidecar_images
from components.states.driver import volumes as v

# k8s-driver-manager, the driver and peermem must run under runc, never the NVIDIA runtime's hook (NVIDIA's
# state-driver manifest sets it on all three).
RUNC_ONLY = env("NVIDIA_VISIBLE_DEVICES", "void")


def _shell_probe(script: str, *, initial_delay: int, period: int, failures: int) -> ProbeArgs:
    return ProbeArgs(
        exec_=ExecActionArgs(command=["sh", "-c", script]),
        initial_delay_seconds=initial_delay,
        period_seconds=period,
        failure_threshold=failures,
        success_threshold=1,
        timeout_seconds=10,
    )


# nvidia-fs and gdrdrv build against the driver's sources, which the driver container exposes under
# /run/nvidia/driver only once its own install is done.
AWAIT_DRIVER = (
    f"until [ -d {consts.DRIVER_INSTALL_DIR}/usr/src ] && lsmod | grep -q '^nvidia '; do "
    "echo 'waiting for the NVIDIA driver install'; sleep 10; done; "
)
PEERMEM_PROBE = "nvidia-driver probe_nvidia_peermem"
SIDECAR_MOUNTS = (
    v.RUN_NVIDIA.mount(consts.RUN_NVIDIA, propagation="HostToContainer"),
    v.VAR_LOG.mount("/var/log"),
    v.DEV_LOG.mount("/dev/log", read_only=True),
)


def gpudirect_containers(target: DriverTarget, ext: Optional[DriverPodExtensions] = None) -> list[ContainerArgs]:
    """The operator's driver sidecars, kept for what the stack enables (GO:assets/state-driver/0500_daemonset.yaml),
    with the mounts and envFrom the stack's driver extensions give each (states/driver/extensions.py)."""
    ext = ext or DriverPodExtensions()
    sidecars = target.sidecars
    containers = []
    if sidecars.rdma:
        # Runs from the driver image: it reloads nvidia_peermem whenever a MOFED reinstall unloads it.
        containers.append(
            ContainerArgs(
                name=consts.PEERMEM_CONTAINER,
                image=target.image,
                image_pull_policy="IfNotPresent",
                command=["nvidia-driver"],
                args=["reload_nvidia_peermem"],
                env=[RUNC_ONLY, *([env("USE_HOST_MOFED", "true")] if sidecars.host_mofed else [])],
                security_context=PRIVILEGED_S0,
                volume_mounts=[
                    v.RUN_NVIDIA.mount(consts.RUN_NVIDIA, propagation="Bidirectional"),
                    v.VAR_LOG.mount("/var/log"),
                    v.DEV_LOG.mount("/dev/log", read_only=True),
                    v.MELLANOX_DRIVERS.mount("/run/mellanox/drivers", propagation="HostToContainer"),
                    *ext.peermem_mounts,
                ],
                startup_probe=_shell_probe(PEERMEM_PROBE, initial_delay=10, period=10, failures=120),
                liveness_probe=_shell_probe(PEERMEM_PROBE, initial_delay=30, period=30, failures=1),
            )
        )
    dtk = target.openshift is not None and target.openshift.toolkit
    installers = {consts.GDS_CONTAINER: ("nvidia-gds-driver", "nvidia_fs"), consts.GDRCOPY_CONTAINER: ("nvidia-gdrcopy-driver", "gdrdrv")}
    for name, image in sidecar_images(target).items():
        installer, module = installers[name]
        containers.append(
            ContainerArgs(
                name=name,
                image=image,
                image_pull_policy="IfNotPresent",
                # With the Driver Toolkit the module is built by the DTK entrypoint the driver container shares.
                command=[DTK_ENTRYPOINT] if dtk else ["bash", "-xc"],
                args=[DTK_SIDECAR_VERBS[name]] if dtk else [f"{AWAIT_DRIVER}exec {installer} install"],
                security_context=PRIVILEGED_S0,
                env_from=ext.env_from,
                volume_mounts=[*SIDECAR_MOUNTS, *([mount(DTK_VOLUME, DTK_SHARED_DIR)] if dtk else []), *ext.sidecar_mounts],
                startup_probe=_shell_probe(f"lsmod | grep -q '^{module} '", initial_delay=10, period=10, failures=120),
            )
        )
    return containers


def gpudirect_env(sidecars: Sidecars, *, driver_container: bool) -> list:
    """What tells the driver install (and k8s-driver-manager, which waits for MOFED) about GPUDirect; the
    operator sets each variable only when its feature is on."""
    wanted = []
    if driver_container:
        wanted += [("GDRCOPY_ENABLED", sidecars.gdrcopy is not None), ("GDS_ENABLED", sidecars.gds is not None)]
    wanted += [("GPU_DIRECT_RDMA_ENABLED", sidecars.rdma), ("USE_HOST_MOFED", sidecars.rdma and sidecars.host_mofed)]
    return [env(name, "true") for name, on in wanted if on]


@dataclass(frozen=True)
class GpuDirectPod:
    """Everything GPUDirect adds to one driver pod, handed over at once: the driver container's env,
    k8s-driver-manager's, and the sidecar containers."""

    driver_env: list[EnvVarArgs]
    manager_env: list[EnvVarArgs]
    containers: list[ContainerArgs]


def gpudirect_pod(target: DriverTarget, ext: Optional[DriverPodExtensions] = None) -> GpuDirectPod:
    return GpuDirectPod(
        driver_env=gpudirect_env(target.sidecars, driver_container=True),
        manager_env=gpudirect_env(target.sidecars, driver_container=False),
        containers=gpudirect_containers(target, ext),
    )
