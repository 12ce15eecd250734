"""The driver pod's extensions (`gpu-stack:driver.licensingConfig`, `repoConfig`, `certConfig`,
`kernelModuleConfig`, `secretEnv`, `extraVolumes`, probe timings; components/config/driver_extensions.py) as the
volumes, mounts and env NVIDIA's driver DaemonSet gets for them (GO:controllers/object_controls.go
`transformDriverContainer`, `applyLicensingConfig`, `transformPeerMemoryContainer`, `transformGDSContainer`,
`transformGDRCopyContainer`; fact sheet §2.3).

Which container gets what, as the operator does it:
- nvidia-driver-ctr: everything, in the operator's order: licence, kernel module files, repository files, CA files
  (the last two not for precompiled drivers: transformDriverContainer returns before them), `envFrom` the secretEnv
  Secret; then the extra volumes.
- nvidia-peermem-ctr: the kernel module files (it loads nvidia_peermem with them).
- nvidia-fs-ctr, nvidia-gdrcopy-ctr: repository and CA files and the secretEnv Secret (they install packages too).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Optional

from pulumi_kubernetes.core.v1 import (
    ConfigMapVolumeSourceArgs,
    ContainerArgs,
    EnvFromSourceArgs,
    KeyToPathArgs,
    ProbeArgs,
    ResourceRequirementsArgs,
    SecretEnvSourceArgs,
    SecretVolumeSourceArgs,
    TolerationArgs,
    VolumeArgs,
    VolumeMountArgs,
)

from components.config import Driver as DriverSettings
from components.config.driver_extensions import (
    DRIVERS_DIR,
    GRIDD_CONF,
    GRIDD_CONF_PATH,
    NLS_TOKEN,
    NLS_TOKEN_PATH,
    NamedFiles,
    ProbeTimings,
    RepoConfig,
)
from components.config.driver_fields import DIGESTED
from components.config.upgrade import Upgrade
from components.kit.builders import AGENT_SECURITY, NODE_NAME_ENV, env, env_from_field, host_path, mount

LICENSING_VOLUME = "licensing-config"
# The vGPU topology daemon's config (GO:internal/consts VGPUTopologyConfigMountPath / FileName).
TOPOLOGY_VOLUME = "topology-config"
TOPOLOGY_CONF = "nvidia-topologyd.conf"
TOPOLOGY_CONF_PATH = f"/etc/nvidia/{TOPOLOGY_CONF}"

# The OS ID (the os tag without its version) -> where its package manager reads repositories and where its CA
# store takes extra certificates (GO:controllers/object_controls.go RepoConfigPathMap, CertConfigPathMap).
REPO_DIRS = {
    "centos": "/etc/yum.repos.d", "debian": "/etc/apt/sources.list.d", "ubuntu": "/etc/apt/sources.list.d",
    "rhcos": "/etc/yum.repos.d", "rhel": "/etc/yum.repos.d", "rocky": "/etc/yum.repos.d", "ol": "/etc/yum.repos.d",
    "sles": "/etc/zypp/repos.d", "sl-micro": "/etc/zypp/repos.d",
}
CERT_DIRS = {
    "centos": "/etc/pki/ca-trust/extracted/pem", "debian": "/usr/local/share/ca-certificates",
    "ubuntu": "/usr/local/share/ca-certificates", "rhcos": "/etc/pki/ca-trust/extracted/pem",
    "rhel": "/etc/pki/ca-trust/extracted/pem", "rocky": "/etc/pki/ca-trust/extracted/pem",
    "ol": "/etc/pki/ca-trust/extracted/pem", "sles": "/etc/pki/trust/anchors", "sl-micro": "/etc/pki/trust/anchors",
}


def os_id(os_tag: str) -> str:
    """`ubuntu24.04` -> `ubuntu`, `sl-micro6.0` -> `sl-micro`: NFD's system-os_release.ID."""
    return os_tag.rstrip("0123456789.")


@dataclass
class DriverPodExtensions:
    """What the stack's `driver` keys add to one driver DaemonSet's pod (built up by `pod_extensions`)."""

    volumes: list[VolumeArgs] = field(default_factory=list)
    driver_mounts: list[VolumeMountArgs] = field(default_factory=list)
    peermem_mounts: list[VolumeMountArgs] = field(default_factory=list)
    sidecar_mounts: list[VolumeMountArgs] = field(default_factory=list)
    env_from: Optional[list[EnvFromSourceArgs]] = None


def config_map_files(files: RepoConfig | NamedFiles, directory: str) -> tuple[VolumeArgs, list[VolumeMountArgs]]:
    """One subPath mount per key, so the files already in `directory` stay (createConfigMapVolumeMounts); keys
    sorted, as the operator adds them."""
    keys = sorted(files.files)
    volume = VolumeArgs(
        name=files.source,
        config_map=ConfigMapVolumeSourceArgs(name=files.source, items=[KeyToPathArgs(key=k, path=k) for k in keys]),
    )
    return volume, [mount(files.source, f"{directory}/{k}", read_only=True, sub_path=k) for k in keys]


def pod_extensions(settings: DriverSettings, os_tag: str, *, precompiled: bool) -> DriverPodExtensions:
    """The volumes, mounts and envFrom of one driver DaemonSet (its nodes' OS, precompiled or not)."""
    ext = DriverPodExtensions()
    licensing = settings.licensing_config
    if licensing is not None:
        items = [KeyToPathArgs(key=GRIDD_CONF, path=GRIDD_CONF)]
        ext.driver_mounts.append(mount(LICENSING_VOLUME, GRIDD_CONF_PATH, read_only=True, sub_path=GRIDD_CONF))
        if licensing.nls_enabled:
            # The client configuration token only with NLS: a legacy license server is named in gridd.conf alone.
            items.append(KeyToPathArgs(key=NLS_TOKEN, path=NLS_TOKEN))
            ext.driver_mounts.append(mount(LICENSING_VOLUME, NLS_TOKEN_PATH, read_only=True, sub_path=NLS_TOKEN))
        if licensing.secret_name is not None:
            source = VolumeArgs(name=LICENSING_VOLUME, secret=SecretVolumeSourceArgs(secret_name=licensing.secret_name, items=items))
        else:
            source = VolumeArgs(name=LICENSING_VOLUME, config_map=ConfigMapVolumeSourceArgs(name=licensing.config_map_name, items=items))
        ext.volumes.append(source)
    if settings.virtual_topology_config is not None:
        ext.volumes.append(VolumeArgs(
            name=TOPOLOGY_VOLUME,
            config_map=ConfigMapVolumeSourceArgs(name=settings.virtual_topology_config, items=[KeyToPathArgs(key=TOPOLOGY_CONF, path=TOPOLOGY_CONF)]),
        ))
        ext.driver_mounts.append(mount(TOPOLOGY_VOLUME, TOPOLOGY_CONF_PATH, read_only=True, sub_path=TOPOLOGY_CONF))
    if settings.kernel_module_config is not None:
        volume, mounts = config_map_files(settings.kernel_module_config, DRIVERS_DIR)
        ext.volumes.append(volume)
        ext.driver_mounts.extend(mounts)
        ext.peermem_mounts.extend(mounts)
    if not precompiled:
        for files, dirs in ((settings.repo_config, REPO_DIRS), (settings.cert_config, CERT_DIRS)):
            if files is None:
                continue
            # OS_TAG admits only OSes both maps know (components/config/base.py).
            volume, mounts = config_map_files(files, dirs[os_id(os_tag)])
            ext.volumes.append(volume)
            ext.driver_mounts.extend(mounts)
            ext.sidecar_mounts.extend(mounts)
    if settings.secret_env is not None:
        ext.env_from = [EnvFromSourceArgs(secret_ref=SecretEnvSourceArgs(name=settings.secret_env))]
    for extra in settings.extra_volumes:
        if extra.host_path is not None:
            ext.volumes.append(host_path(extra.name, extra.host_path.path, extra.host_path.type or None))
        elif extra.config_map is not None:
            ext.volumes.append(VolumeArgs(name=extra.name, config_map=ConfigMapVolumeSourceArgs(name=extra.config_map.name)))
        else:
            assert extra.secret is not None  # the model requires exactly one source
            ext.volumes.append(VolumeArgs(name=extra.name, secret=SecretVolumeSourceArgs(secret_name=extra.secret.name)))
        extra_mount = mount(extra.name, extra.mount_path, read_only=extra.read_only or None, sub_path=extra.sub_path)
        ext.driver_mounts.append(extra_mount)
        ext.peermem_mounts.append(extra_mount)
        ext.sidecar_mounts.append(extra_mount)
    return ext


def tuned(probe: ProbeArgs, timings: Optional[ProbeTimings]) -> ProbeArgs:
    """`probe` with the timings the stack sets; the rest stay (the operator's setContainerProbe)."""
    if timings is None:
        return probe
    return ProbeArgs(
        exec_=probe.exec_,
        initial_delay_seconds=_pick(timings.initial_delay_seconds, probe.initial_delay_seconds),
        period_seconds=_pick(timings.period_seconds, probe.period_seconds),
        timeout_seconds=_pick(timings.timeout_seconds, probe.timeout_seconds),
        failure_threshold=_pick(timings.failure_threshold, probe.failure_threshold),
        success_threshold=_pick(timings.success_threshold, probe.success_threshold),
    )


def _pick(value, default):
    return default if value is None else value


def digest_material(settings: DriverSettings) -> Optional[str]:
    """What of the extensions the driver install depends on, for DRIVER_CONFIG_DIGEST (the operator hashes the
    driver container's mounts, volumes and envFrom, extractDriverInstallConfig): the fields components/config/
    driver_fields.py classifies as reinstalling it. None when none is set, so a stack without them keeps its digest."""
    chosen = DIGESTED & settings.model_fields_set
    if not chosen:
        return None
    return json.dumps(settings.model_dump(mode="json", include=chosen), sort_keys=True)


WAIT_FOR_COMPLETION = "wait-for-completion"
# The wait holds its node with this NoSchedule taint, not a cordon, so a cordon someone sets during the wait stays
# (node agent 0.7.0, completion.py). The driver pods tolerate it: one recreated mid-wait must still land and run
# the step that lifts it.
WAIT_HOLD_TAINT = "gpu-stack/wait-for-completion"


def wait_for_completion_tolerations(upgrade: Upgrade) -> list[TolerationArgs]:
    if upgrade.wait_for_completion is None:
        return []
    return [TolerationArgs(key=WAIT_HOLD_TAINT, operator="Exists", effect="NoSchedule")]


def wait_for_completion_containers(agent_image: Optional[str], upgrade: Upgrade) -> list[ContainerArgs]:
    """`upgrade.waitForCompletion` as the node agent's init container, which must run before k8s-driver-manager
    evicts GPU pods and swaps the driver (node_images/node-agent, `wait-for-completion`); none when unset, so the
    pods of stacks without the key stay as they were. It only talks to the API server: no privilege, no mounts
    (it reads /sys/module, the host kernel's in every container, to see whether a driver is loaded)."""
    wait = upgrade.wait_for_completion
    if wait is None:
        return []
    assert agent_image is not None  # load_config refuses waitForCompletion without nodeAgent.image
    return [
        ContainerArgs(
            name=WAIT_FOR_COMPLETION,
            image=agent_image,
            image_pull_policy="IfNotPresent",
            args=[WAIT_FOR_COMPLETION],
            env=[
                NODE_NAME_ENV,
                env("WAIT_POD_SELECTOR", wait.pod_selector),
                env("WAIT_TIMEOUT_SECONDS", str(wait.timeout_seconds)),
                # Its own pod, which a selector may match and which can only run after the wait.
                env_from_field("POD_NAME", "metadata.name"),
                env_from_field("POD_NAMESPACE", "metadata.namespace"),
            ],
            security_context=AGENT_SECURITY,
            resources=ResourceRequirementsArgs(requests={"cpu": "10m", "memory": "32Mi"}, limits={"memory": "128Mi"}),
        )
    ]
