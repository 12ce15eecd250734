"""What OpenShift adds to the driver pod (components/catalogs/openshift.py has the facts): the Driver Toolkit
sidecar, the proxy env and the trusted CA bundle, as the operator's state-driver manifests render them (fact
sheet Appendix F). Each operand's SecurityContextConstraints come with its RBAC (kit/rbac.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.core.v1 import (
    ConfigMapVolumeSourceArgs,
    ContainerArgs,
    EmptyDirVolumeSourceArgs,
    EnvVarArgs,
    KeyToPathArgs,
    VolumeArgs,
    VolumeMountArgs,
)

from components.catalogs import openshift as facts
from components.kit.builders import PRIVILEGED_S0, env, meta, mount
from components.states.driver.targets import OpenShiftDriver, Sidecars
from components.states.driver import volumes as v


def trusted_ca_configmap(namespace: str, opts: pulumi.ResourceOptions) -> k8s.core.v1.ConfigMap:
    """`gpu-operator-trusted-ca`, which OpenShift's network operator fills with the cluster's trusted CAs. The bundle
    is OpenShift's to write: gpu-stack renders no data and leaves it alone, so a `pulumi up` never empties it (the
    operator's manifest writes an empty key that the injection then overwrites)."""
    return k8s.core.v1.ConfigMap(
        facts.TRUSTED_CA_CONFIGMAP,
        metadata=meta(facts.TRUSTED_CA_CONFIGMAP, namespace, {facts.TRUSTED_CA_INJECT_LABEL: "true"}),
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(ignore_changes=["data"])),
    )


def driver_env(openshift: Optional[OpenShiftDriver]) -> list[EnvVarArgs]:
    """The driver container's OPENSHIFT_VERSION and the cluster proxy (each variable in both cases)."""
    if openshift is None:
        return []
    return [env(facts.OPENSHIFT_VERSION_ENV, openshift.version), *(env(k, v) for k, v in openshift.proxy_env)]


SHARED_MOUNT = mount(facts.DTK_VOLUME, facts.DTK_SHARED_DIR)
TRUSTED_CA_MOUNT = mount(facts.TRUSTED_CA_CONFIGMAP, facts.TRUSTED_CA_DIR, read_only=True)


def driver_mounts(openshift: Optional[OpenShiftDriver]) -> list[VolumeMountArgs]:
    if openshift is None:
        return []
    return [*([SHARED_MOUNT] if openshift.toolkit else []), *([TRUSTED_CA_MOUNT] if openshift.trusted_ca else [])]


def driver_volumes(openshift: Optional[OpenShiftDriver]) -> list[VolumeArgs]:
    if openshift is None:
        return []
    volumes = []
    if openshift.toolkit:
        volumes.append(VolumeArgs(name=facts.DTK_VOLUME, empty_dir=EmptyDirVolumeSourceArgs()))
    if openshift.trusted_ca:
        volumes.append(
            VolumeArgs(
                name=facts.TRUSTED_CA_CONFIGMAP,
                config_map=ConfigMapVolumeSourceArgs(
                    name=facts.TRUSTED_CA_CONFIGMAP, items=[KeyToPathArgs(key=facts.TRUSTED_CA_KEY, path=facts.TRUSTED_CA_FILE)]
                ),
            )
        )
    return volumes


# The driver container prepares the shared directory (sources and the entrypoint) for the DTK container to build in.
AWAIT_PREPARED = (
    f"until [ -f {facts.DTK_SHARED_DIR}/dir_prepared ]; do echo 'waiting for nvidia-driver-ctr to prepare the shared "
    f"directory'; sleep 10; done; exec {facts.DTK_SHARED_DIR}/{facts.DTK_ENTRYPOINT} {facts.DTK_BUILD_VERB}"
)


def toolkit_container(openshift: Optional[OpenShiftDriver], digest: str, sidecars: Sidecars = Sidecars()) -> Optional[ContainerArgs]:
    """The Driver Toolkit sidecar: the cluster's DTK image for the DaemonSet's RHCOS build (its kernel headers and
    toolchain) builds the driver (or the vGPU manager), and the GPUDirect modules the stack enables, in the shared
    directory."""
    if openshift is None or not openshift.toolkit:
        return None
    assert openshift.rhcos is not None and openshift.dtk_image is not None
    return ContainerArgs(
        name=facts.DTK_CONTAINER,
        image=openshift.dtk_image,
        image_pull_policy="IfNotPresent",
        command=["bash", "-xc"],
        args=[AWAIT_PREPARED],
        env=[
            env("RHCOS_VERSION", openshift.rhcos),
            env("NVIDIA_VISIBLE_DEVICES", "void"),
            env("DRIVER_CONFIG_DIGEST", digest),
            *([env("GDS_ENABLED", "true")] if sidecars.gds is not None else []),
            *([env("GDRCOPY_ENABLED", "true")] if sidecars.gdrcopy is not None else []),
        ],
        # nvidia-installer loads and unloads the module it builds, so the build needs a privileged container.
        security_context=PRIVILEGED_S0,
        volume_mounts=[
            SHARED_MOUNT,
            v.VAR_LOG.mount("/var/log"),
            v.MOFED_SOURCES.mount("/run/mellanox/drivers/usr/src", propagation="HostToContainer"),
            v.HOST_OS_RELEASE.mount("/host-etc/os-release", read_only=True),
            v.FIRMWARE_SEARCH_PATH.mount("/sys/module/firmware_class/parameters/path"),
            v.NV_FIRMWARE.mount("/lib/firmware"),
        ],
    )


def toolkit_labels(openshift: Optional[OpenShiftDriver]) -> tuple[dict[str, str], dict[str, str]]:
    """The DaemonSet's labels (build included) and its pods' labels, as the operator labels DTK DaemonSets."""
    if openshift is None or not openshift.toolkit:
        return {}, {}
    assert openshift.rhcos is not None
    return {facts.DTK_LABEL: "true", facts.DTK_RHCOS_LABEL: openshift.rhcos}, {facts.DTK_LABEL: "true"}


@dataclass(frozen=True)
class OpenShiftPod:
    """Everything OpenShift adds to one driver pod, handed over at once so the pod takes it from one place: the
    driver container's env and mounts, the pod's volumes, the Driver Toolkit container (None without the toolkit),
    and the labels of the DaemonSet and of its pods."""

    env: list[EnvVarArgs]
    mounts: list[VolumeMountArgs]
    volumes: list[VolumeArgs]
    toolkit: Optional[ContainerArgs]
    daemonset_labels: dict[str, str]
    pod_labels: dict[str, str]


def pod_additions(openshift: Optional[OpenShiftDriver], digest: str, sidecars: Sidecars = Sidecars()) -> OpenShiftPod:
    daemonset_labels, pod_labels = toolkit_labels(openshift)
    return OpenShiftPod(
        env=driver_env(openshift),
        mounts=driver_mounts(openshift),
        volumes=driver_volumes(openshift),
        toolkit=toolkit_container(openshift, digest, sidecars),
        daemonset_labels=daemonset_labels,
        pod_labels=pod_labels,
    )
