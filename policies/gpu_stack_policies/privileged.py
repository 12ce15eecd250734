"""privileged-only-where-needed: host access only for the operands NVIDIA's manifests give it, only in the GPU
namespace.

Privileged containers, added capabilities, hostPID / hostIPC / hostNetwork and hostPath volumes are allowed
exactly as the GPU Operator v26.7.0 assets (and its Node Feature Discovery subchart) use them (fact sheet §2,
Appendix C), per workload and per container; everything else in the stack (the node labeller, the validation gates, anything new) gets none of it.
An allowance applies only in the GPU namespace: the stack's Kubernetes provider namespace (`cluster.namespace`)
unless `gpuNamespace` is configured. Host paths are matched exactly, so mounting `/` is allowed only where the
asset mounts `/`, with one exception: the paths NVIDIA's operator lets a distribution move (hostPaths.rootFS,
driverInstallDir and kubeletRootDir, the toolkit's install directory and the runtime's config, drop-in and socket,
the host MOFED sources of `rdma.useHostMofed`) are followed through the volume the asset gives them (`MOVABLE`),
and only where the pod also tells its containers the moved path the way the operator does (HOST_ROOT,
DRIVER_INSTALL_DIR, ROOT, RUNTIME_DROP_IN_CONFIG_HOST_PATH, USE_HOST_MOFED, ...), so a half-moved pod is refused.
The pack reads these from the rendered object: pulumi-policy hands a policy its own config, not the stack's. Any
other path a stack needs is added per workload with `additionalHostPaths`.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)

from gpu_stack_policies import objects
from gpu_stack_policies.fields import report_at
from gpu_stack_policies.facts import consts

NAME = "privileged-only-where-needed"
HOST_NAMESPACES = ("hostPID", "hostIPC", "hostNetwork")
VALIDATION_GATE = "toolkit-validation"  # the shell gate in front of every operand that needs the container stack


@dataclass(frozen=True)
class Allowance:
    """What one operand workload may do on the host, from its GPU Operator asset."""

    privileged_containers: frozenset[str]
    host_paths: frozenset[str]
    host_namespaces: frozenset[str]


def _allow(containers: Iterable[str], paths: Iterable[str], namespaces: Iterable[str] = ()) -> Allowance:
    return Allowance(frozenset(containers), frozenset(paths), frozenset(namespaces))


DRIVER = _allow(
    # the sidecars exist only with RDMA, GDS or GDRCopy, but they are the asset's and privileged there too
    # (openshift-driver-toolkit-ctr: the Driver Toolkit build on OpenShift, privileged in the asset: it loads the module)
    {"k8s-driver-manager", "nvidia-driver-ctr", "nvidia-peermem-ctr", "nvidia-fs-ctr", "nvidia-gdrcopy-ctr", "openshift-driver-toolkit-ctr"},
    {
        "/", "/dev/log", "/etc/os-release", "/run/mellanox/drivers", "/run/mellanox/drivers/usr/src", "/run/nvidia",
        "/run/nvidia-fabricmanager", "/run/nvidia-topologyd", "/run/nvidia/driver/lib/firmware",
        "/run/nvidia/validations", "/sys", "/sys/devices/system", "/sys/module/firmware_class/parameters/path",
        "/var/log",
    },
    # hostNetwork only where driver.hostNetwork asks for it: the operator's TransformDriver applies it the same way
    {"hostPID", "hostNetwork"},
)

# the NVIDIADriver form (manifests/state-driver, driverType vgpu-host-manager): the driver's paths plus cgroup and
# vfio, hostPID only; the Driver Toolkit container on OpenShift
VGPU_MANAGER = _allow(
    {"k8s-driver-manager", "nvidia-driver-ctr", "openshift-driver-toolkit-ctr"},
    {
        "/", "/dev/log", "/dev/vfio", "/etc/os-release", "/run/mellanox/drivers", "/run/mellanox/drivers/usr/src",
        "/run/nvidia", "/run/nvidia-fabricmanager", "/run/nvidia-topologyd", "/run/nvidia/driver/lib/firmware",
        "/sys", "/sys/devices/system", "/sys/fs/cgroup", "/sys/module/firmware_class/parameters/path", "/var/log",
    },
    {"hostPID"},
)

# Workload name (glob) -> allowance. Driver DaemonSets are one per kernel or wave in precompiled and multi-wave
# stacks, all named after `nvidia-driver-daemonset`, or, adopted from NVIDIADriver objects, under the names the
# operator gave them (`nvidia-<gpu|vgpu>-driver-<os>-<hash>`, the same asset).
ALLOWANCES: dict[str, Allowance] = {
    "nvidia-driver-daemonset": DRIVER,
    "nvidia-driver-daemonset-*": DRIVER,
    "nvidia-gpu-driver-*": DRIVER,
    "nvidia-vgpu-driver-*": DRIVER,
    "nvidia-container-toolkit-daemonset": _allow(
        {"driver-validation", "nvidia-container-toolkit-ctr"},
        {
            "/", "/dev/char", "/run/nvidia/driver", "/run/nvidia/toolkit", "/run/nvidia/validations", "/var/run/cdi",
            "/usr/local/nvidia",
            # OCI hook directories: /run for containerd (the asset's path), /usr/share for cri-o outside OpenShift
            "/run/containers/oci/hooks.d", "/usr/share/containers/oci/hooks.d",
            # default config, drop-in and socket directories of containerd and cri-o
            "/etc/containerd", "/etc/containerd/conf.d", "/run/containerd", "/etc/crio", "/etc/crio/crio.conf.d",
        },
        {"hostPID"},
    ),
    "nvidia-dra-driver-kubelet-plugin": _allow(
        {"driver-validation", "gpus", "compute-domains"},
        {
            "/", "/run/nvidia/driver", "/run/nvidia/validations", "/var/run/cdi", "/var/lib/kubelet/plugins",
            "/var/lib/kubelet/plugins_registry",
            # the PassthroughSupport feature gate's vfio-pci binding (GO:manifests/state-dra-driver/0500_daemonset.yaml)
            "/lib/modules", "/sys", "/proc",
        },
    ),
    # the operator validator's node checks, then an unprivileged claim check
    "nvidia-dra-validator": _allow(
        {"driver-validation", "toolkit-validation"}, {"/", "/dev/char", "/run/nvidia/driver", "/run/nvidia/validations"}
    ),
    "nvidia-operator-validator": _allow(
        {"driver-validation", "toolkit-validation", "cuda-validation", "plugin-validation", "nvidia-operator-validator"},
        {"/", "/dev/char", "/run/nvidia/driver", "/run/nvidia/validations"},
    ),
    "nvidia-device-plugin-daemonset": _allow(
        {VALIDATION_GATE, "nvidia-device-plugin", "config-manager"},
        {
            "/", "/run/nvidia/driver", "/run/nvidia/mps", "/run/nvidia/mps/shm", "/run/nvidia/validations",
            "/var/lib/kubelet/device-plugins", "/var/run/cdi",
        },
    ),
    "nvidia-device-plugin-mps-control-daemon": _allow(
        {VALIDATION_GATE, "mps-control-daemon-mounts", "mps-control-daemon-ctr", "config-manager"},
        {"/run/nvidia", "/run/nvidia/mps", "/run/nvidia/mps/shm"},
        {"hostPID"},
    ),
    "nvidia-dcgm": _allow({VALIDATION_GATE, "nvidia-dcgm-ctr"}, {"/run/nvidia"}),
    # hostPID, hostNetwork and the HPC job-mapping directory (default path; another one goes in additionalHostPaths)
    # are the exporter's ClusterPolicy options (TransformDCGMExporter)
    "nvidia-dcgm-exporter": _allow(
        {VALIDATION_GATE, "nvidia-dcgm-exporter"},
        {"/run/nvidia", "/var/lib/kubelet/pod-resources", "/var/lib/dcgm-exporter/job-mapping"},
        {"hostPID", "hostNetwork"},
    ),
    # the DRA flavours (GO:manifests/state-dcgm, state-dcgm-exporter): GPUs through an adminAccess claim
    "nvidia-dcgm-dra": _allow({"nvidia-dcgm-ctr"}, set()),
    "nvidia-dcgm-exporter-dra": _allow(
        {"nvidia-dcgm-exporter-dra"},
        {"/var/lib/kubelet/pod-resources", "/var/lib/dcgm-exporter/job-mapping"},
        {"hostPID", "hostNetwork"},
    ),
    "gpu-feature-discovery": _allow(
        {VALIDATION_GATE, "gpu-feature-discovery", "config-manager"},
        {"/etc/kubernetes/node-feature-discovery/features.d", "/run/nvidia", "/sys"},
    ),
    "nvidia-mig-manager": _allow(
        {VALIDATION_GATE, "nvidia-mig-manager"},
        {"/", "/run/nvidia/driver", "/run/nvidia/validations", "/sys", "/var/run/cdi"},
        {"hostPID", "hostIPC"},
    ),
    "nvidia-node-status-exporter": _allow({"nvidia-node-status-exporter"}, {"/", "/run/nvidia"}),
    # Node Feature Discovery, the operator's subchart (NFD chart 0.19.0 templates/worker.yaml): the worker reads
    # the host through read-only mounts, unprivileged; the hook directory keeps the chart's trailing slash.
    "node-feature-discovery-worker": _allow(
        set(),
        {
            "/boot", "/etc/os-release", "/lib", "/proc/swaps", "/sys", "/usr/lib",
            "/etc/kubernetes/node-feature-discovery/features.d/",
        },
    ),
    # VM nodes (assets/state-sandbox-validation, state-vfio-manager, state-sandbox-device-plugin)
    "nvidia-sandbox-validator": _allow(
        {"cc-manager-validation", "vfio-pci-validation", "vgpu-manager-validation", "vgpu-devices-validation", "nvidia-sandbox-validator"},
        {"/", "/run/nvidia/driver", "/run/nvidia/validations"},
    ),
    "nvidia-vfio-manager": _allow({"k8s-driver-manager", "nvidia-vfio-manager"}, {"/", "/lib/modules", "/run/nvidia", "/sys"}),
    "nvidia-sandbox-device-plugin-daemonset": _allow(
        {"vfio-pci-validation", "vgpu-devices-validation", "nvidia-sandbox-device-plugin-ctr"},
        {"/dev/vfio", "/run/nvidia/validations", "/var/lib/kubelet/device-plugins", "/var/run/cdi"},
    ),
    # Kata sandboxes (assets/state-kata-device-plugin, state-cc-manager)
    "nvidia-kata-sandbox-device-plugin-daemonset": _allow(
        {"vfio-pci-validation", "nvidia-kata-sandbox-device-plugin-ctr"},
        {"/run/nvidia/validations", "/var/lib/kubelet/device-plugins", "/var/run/cdi"},
    ),
    "nvidia-cc-manager": _allow({"nvidia-cc-manager"}, {"/run/nvidia", "/sys"}),
    # vGPU nodes (the vGPU manager in NVIDIADriver's form, assets/state-vgpu-device-manager)
    "nvidia-vgpu-manager-daemonset": VGPU_MANAGER,
    # one per RHCOS build on OpenShift with the Driver Toolkit
    "nvidia-vgpu-manager-daemonset-*": VGPU_MANAGER,
    "nvidia-vgpu-device-manager": _allow(
        {"vgpu-manager-validation", "nvidia-vgpu-device-manager"},
        {"/", "/run/nvidia/driver", "/run/nvidia/validations", "/sys"},
    ),
}
NOTHING = _allow(set(), set())

# --- host paths a distribution moves -------------------------------------------------------------------------
# Each check gets the moved path, the pod spec and its containers, and says what is wrong (None: nothing).
Check = Callable[[str, Mapping, list], Optional[str]]
TOOLKIT_CONTAINER = "nvidia-container-toolkit-ctr"  # components/states/toolkit.py


def _normalised(path: str) -> bool:
    return path.startswith("/") and path != "/" and not path.endswith("/") and all(
        part not in ("", ".", "..") for part in path[1:].split("/")
    )


def _system_dir(path: str) -> Optional[str]:
    return next((d for d in consts.SYSTEM_DIRS if path == d or path.startswith(d + "/")), None)


def _told(containers: list, env: str, path: str, *, only: Iterable[str] = (), skip: Iterable[str] = ()) -> Optional[str]:
    """None when every container that sets `env` (those named in `only`, when given) sets it to `path`, and one
    does; else what is wrong."""
    relevant = [c for c in containers if (not only or c.name in only) and env in c.env and c.env[env] not in skip]
    wrong = [f"{c.name!r} has {env}={c.env[env]}" for c in relevant if c.env[env] != path]
    if wrong:
        return f"but container {', '.join(wrong)}"
    if not relevant:
        return f"but no container is told {env}={path}"
    return None


def _host_root(path: str, spec: Mapping, containers: list) -> Optional[str]:
    system = _system_dir(path)
    if not _normalised(path) or system:
        return f"which is {'inside ' + system if system else 'not a normalised absolute path'}"
    return _told(containers, consts.HOST_ROOT_ENV, path, skip=(consts.HOST_ROOT_MOUNT,))


def _dev_char(path: str, spec: Mapping, containers: list) -> Optional[str]:
    root = _volume_path(spec, consts.HOST_ROOT_VOLUME)
    if root is None or path != f"{root}{consts.DEV_CHAR}":
        return f"but it must be <host-root>{consts.DEV_CHAR} (host-root mounts {root or 'nothing'})"
    return None


def _driver_install_dir(path: str, spec: Mapping, containers: list) -> Optional[str]:
    system = _system_dir(path)
    if not _normalised(path) or system:
        return f"which is {'inside ' + system if system else 'not a normalised absolute path'}"
    if not any(c.name == consts.DRIVER_VALIDATION_CONTAINER for c in containers):
        return None  # the operand learns the driver root from the driver-ready file the validation writes
    return _told(containers, consts.DRIVER_INSTALL_DIR_ENV, path, only=(consts.DRIVER_VALIDATION_CONTAINER,))


def _kubelet_dir(volume: str) -> Check:
    subdir = consts.KUBELET_VOLUMES[volume]

    def check(path: str, spec: Mapping, containers: list) -> Optional[str]:
        root = path[: -len(subdir) - 1] if path.endswith("/" + subdir) else ""
        system = _system_dir(root)
        if not _normalised(root) or system:
            return f"but it must be <kubelet root>/{subdir} outside the system directories"
        env = consts.KUBELET_PATH_ENV.get(volume)
        return _told(containers, env, path) if env else None

    return check


def _runtime_dir(path: str, spec: Mapping, containers: list) -> Optional[str]:
    # Where the distribution keeps its container runtime's files (k0s: /etc/k0s/containerd.d, /run/k0s): the
    # toolkit reads and edits only the file it is told, and /etc is where runtimes keep their config; never a whole
    # system directory, which the toolkit would get read-write.
    if not _normalised(path) or path in consts.SYSTEM_DIRS:
        return "which is not a runtime's own directory (a normalised absolute path below the system directories)"
    return None


def _drop_in_dir(path: str, spec: Mapping, containers: list) -> Optional[str]:
    # The toolkit writes the drop-in where this env says, on the host: the volume must be that file's directory.
    env = "RUNTIME_DROP_IN_CONFIG_HOST_PATH"
    told = [c.env.get(env) for c in containers if c.name == TOOLKIT_CONTAINER]
    if _runtime_dir(path, spec, containers) or not told or any(f is None or f.rsplit("/", 1)[0] != path for f in told):
        return f"but the toolkit's {env} is not a file in it ({', '.join(str(f) for f in told) or 'unset'})"
    return None


def _toolkit_install_dir(path: str, spec: Mapping, containers: list) -> Optional[str]:
    system = _system_dir(path)
    if not _normalised(path) or system:
        return f"which is {'inside ' + system if system else 'not a normalised absolute path'}"
    return _told(containers, "ROOT", path, only=(TOOLKIT_CONTAINER,))


def _mps_root(path: str, spec: Mapping, containers: list) -> Optional[str]:
    # devicePlugin.mpsRoot: the plugin hands MPS clients the host path it is told, so it must be told this one.
    system = _system_dir(path)
    if not _normalised(path) or system or path == "/":
        return f"which is {'inside ' + system if system else 'not a normalised absolute directory'}"
    if not any("MPS_ROOT" in c.env for c in containers):
        return None  # the MPS daemon mounts it and is told nothing
    return _told(containers, "MPS_ROOT", path)


def _mps_shm(path: str, spec: Mapping, containers: list) -> Optional[str]:
    root = _volume_path(spec, "mps-root")
    if root is None or path != f"{root}/shm":
        return f"but it must be <mps-root>/shm (mps-root mounts {root or 'nothing'})"
    return None


def _host_mofed(path: str, spec: Mapping, containers: list) -> Optional[str]:
    if path != consts.HOST_USR_SRC:
        return f"but a host MOFED keeps its sources in {consts.HOST_USR_SRC}"
    if not any(c.env.get(consts.USE_HOST_MOFED_ENV) == "true" for c in containers):
        return f"but no container is told {consts.USE_HOST_MOFED_ENV}=true (gpudirect.rdma.useHostMofed)"
    return None


@dataclass(frozen=True)
class Movable:
    """A volume whose host path a stack may move: followed only on workloads whose allowance has `default`."""

    default: str
    check: Check
    key: str  # the stack key that moves it, for messages


MOVABLE: dict[str, Movable] = {
    consts.HOST_ROOT_VOLUME: Movable(consts.DEFAULT_ROOT_FS, _host_root, "hostPaths.rootFS"),
    consts.HOST_DEV_CHAR_VOLUME: Movable(consts.DEV_CHAR, _dev_char, "hostPaths.rootFS"),
    consts.DRIVER_INSTALL_DIR_VOLUME: Movable(consts.DRIVER_INSTALL_DIR, _driver_install_dir, "hostPaths.driverInstallDir"),
    **{
        volume: Movable(f"{consts.DEFAULT_KUBELET_ROOT_DIR}/{subdir}", _kubelet_dir(volume), "hostPaths.kubeletRootDir")
        for volume, subdir in consts.KUBELET_VOLUMES.items()
    },
    # the toolkit's runtime volumes, `<runtime>-<role>` (components/states/toolkit.py)
    "containerd-config": Movable("/etc/containerd", _runtime_dir, "toolkit.runtimeConfig"),
    "containerd-drop-in-config": Movable("/etc/containerd/conf.d", _drop_in_dir, "toolkit.runtimeDropInConfig"),
    "containerd-socket": Movable("/run/containerd", _runtime_dir, "toolkit.runtimeSocket"),
    "crio-config": Movable("/etc/crio", _runtime_dir, "toolkit.runtimeConfig"),
    "crio-drop-in-config": Movable("/etc/crio/crio.conf.d", _drop_in_dir, "toolkit.runtimeDropInConfig"),
    "toolkit-install-dir": Movable("/usr/local/nvidia", _toolkit_install_dir, "toolkit.installDir"),
    "mps-root": Movable("/run/nvidia/mps", _mps_root, "devicePlugin.mpsRoot"),
    "mps-shm": Movable("/run/nvidia/mps/shm", _mps_shm, "devicePlugin.mpsRoot"),
    consts.MOFED_USR_SRC_VOLUME: Movable(consts.MOFED_CONTAINER_USR_SRC, _host_mofed, "gpudirect.rdma.useHostMofed"),
}


def _volume_path(spec: Mapping, name: str) -> Optional[str]:
    for volume in objects.items(spec.get("volumes")):
        volume = objects.mapping(volume)
        if volume.get("name") == name:
            path = objects.mapping(volume.get("hostPath")).get("path")
            return str(path) if path is not None else None
    return None


def movable_for(volume: str, allowance: Allowance) -> Optional[Movable]:
    """The rule for `volume` when this workload's asset has it at NVIDIA's default path, so the stack may move it."""
    movable = MOVABLE.get(volume)
    return movable if movable is not None and movable.default in allowance.host_paths else None

CONFIG_SCHEMA = PolicyConfigSchema(
    properties={
        "gpuNamespace": {
            "type": "string",
            "description": "Namespace the operands run in; default: the stack's Kubernetes provider namespace.",
            "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
            "maxLength": 63,
        },
        "additionalHostPaths": {
            "type": "object",
            "description": "Workload name (as in the allow-list) -> further absolute host paths it may mount.",
            "propertyNames": {"enum": sorted(ALLOWANCES)},
            "additionalProperties": {
                "type": "array",
                "items": {"type": "string", "pattern": "^/([^/]+(/[^/]+)*)?$"},
                "uniqueItems": True,
            },
        },
    }
)


def allowance_for(name: str) -> tuple[Optional[str], Allowance]:
    for pattern, allowance in ALLOWANCES.items():
        if fnmatch.fnmatchcase(name, pattern):
            return pattern, allowance
    return None, NOTHING


def gpu_namespace(args: ResourceValidationArgs, config: Mapping[str, Any]) -> Optional[str]:
    if config.get("gpuNamespace"):
        return str(config["gpuNamespace"])
    provider = args.provider
    return str(provider.props.get("namespace")) if provider is not None and provider.props.get("namespace") else None


def _grant(pattern: Optional[str], allowance: Allowance, namespace: Optional[str], gpu: Optional[str]) -> tuple[Allowance, str, str]:
    """The allowance that holds for this object, how messages name it, and the fix they suggest."""
    if pattern is None:
        return (
            NOTHING,
            "no allow-list entry (nothing outside NVIDIA's operands gets host access)",
            "fix: drop it, or if NVIDIA's asset for this operand needs it, add the operand to "
            "policies/gpu_stack_policies/privileged.py ALLOWANCES",
        )
    if namespace != gpu:
        return (
            NOTHING,
            f"the allow-list entry {pattern!r}, which applies only in the GPU namespace {gpu or '(unknown)'}",
            f"fix: deploy it to {gpu}" if gpu else "fix: set gpuNamespace in this policy's config",
        )
    return (
        allowance,
        f"the allow-list entry {pattern!r}",
        "fix: drop it, or if NVIDIA's asset needs it, extend that entry in policies/gpu_stack_policies/privileged.py "
        "ALLOWANCES (a host path this stack moves: additionalHostPaths in its policy config)",
    )


def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
    kind = objects.kind_of(args.resource_type)
    spec = objects.pod_spec(kind, args.props)
    if spec is None:
        return
    config: Mapping[str, Any] = args.get_config()
    gpu = gpu_namespace(args, config)
    pattern, listed = allowance_for(objects.name_of(args.props, args.name))
    namespace = objects.namespace_of(args.props) or gpu
    allowance, granted_by, fix = _grant(pattern, listed, namespace, gpu)
    what = objects.describe(kind or "?", args.props, args.name)
    at = objects.pod_spec_pointer(kind)
    # outside the GPU namespace, the namespace is what is wrong, whatever the object asks for
    misplaced = pattern is not None and namespace != gpu

    def field(pointer: str) -> str:
        return "/metadata/namespace" if misplaced else pointer

    extra_paths: set[str] = set()
    if allowance is not NOTHING:
        extra_paths = {str(p) for p in objects.items(objects.mapping(config.get("additionalHostPaths")).get(pattern or ""))}

    for flag in HOST_NAMESPACES:
        if spec.get(flag) is True and flag not in allowance.host_namespaces:
            report_at(report, field(f"{at}/{flag}"), f"{what} sets {flag}, not granted by {granted_by}; {fix}")
    for container in objects.containers(spec):
        context = container.security_context
        if context.get("privileged") is True and container.name not in allowance.privileged_containers:
            report_at(report, field(f"{at}{container.at}/securityContext/privileged"),
                      f"{what}: container {container.name!r} is privileged, not granted by {granted_by}; {fix}")
        added = [str(c) for c in objects.items(objects.mapping(context.get("capabilities")).get("add"))]
        if added:
            report_at(
                report, field(f"{at}{container.at}/securityContext/capabilities/add"),
                f"{what}: container {container.name!r} adds capabilities {', '.join(added)}; no operand asset adds "
                "any (the privileged ones need none); fix: drop capabilities.add"
            )
    for index, volume in enumerate(objects.items(spec.get("volumes"))):
        volume = objects.mapping(volume)
        path = objects.mapping(volume.get("hostPath")).get("path")
        volume_field = field(f"{at}/volumes/{index}/hostPath/path")
        if path is None or str(path) in allowance.host_paths | extra_paths:
            continue
        name = str(volume.get("name"))
        movable = movable_for(name, allowance)
        if movable is None:
            report_at(report, volume_field, f"{what}: volume {name!r} mounts host path {path}, not granted by {granted_by}; {fix}")
            continue
        problem = movable.check(str(path), spec, objects.containers(spec))
        if problem is not None:
            report_at(
                report, volume_field,
                f"{what}: volume {name!r} mounts host path {path} as a moved {movable.key}, {problem}; fix: move it "
                f"with gpu-stack:{movable.key}, which tells the containers too (components/kit/host_paths.py, "
                "components/states/toolkit.py)"
            )


POLICY = ResourceValidationPolicy(
    name=NAME,
    description="[high: security] Privileged containers, host namespaces and host paths only where NVIDIA's manifests need them.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate,
    config_schema=CONFIG_SCHEMA,
)
