"""privileged-only-where-needed: host access only for the operands NVIDIA's manifests give it, only in the GPU
namespace.

Privileged containers, added capabilities, hostPID / hostIPC / hostNetwork and hostPath volumes are allowed
exactly as the GPU Operator v26.7.0 assets (and its Node Feature Discovery subchart) use them (fact sheet §2,
Appendix C), per workload and per container; everything else in the stack (the node labeller, the validation gates, anything new) gets none of it.
An allowance applies only in the GPU namespace: the stack's Kubernetes provider namespace (`cluster.namespace`)
unless `gpuNamespace` is configured. Host paths are matched exactly, so mounting `/` is allowed only where the
asset mounts `/`; runtime or install paths a stack moves (`toolkit.installDir`, `toolkit.runtimeConfig`, k3s
sockets) are added per workload with `additionalHostPaths`.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)

from gpu_stack_policies import objects

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
    {"k8s-driver-manager", "nvidia-driver-ctr", "nvidia-peermem-ctr", "nvidia-fs-ctr", "nvidia-gdrcopy-ctr"},
    {
        "/", "/dev/log", "/etc/os-release", "/run/mellanox/drivers", "/run/mellanox/drivers/usr/src", "/run/nvidia",
        "/run/nvidia-fabricmanager", "/run/nvidia-topologyd", "/run/nvidia/driver/lib/firmware",
        "/run/nvidia/validations", "/sys", "/sys/devices/system", "/sys/module/firmware_class/parameters/path",
        "/var/log",
    },
    {"hostPID"},
)

# Workload name (glob) -> allowance. Driver DaemonSets are one per kernel or wave in precompiled and multi-wave
# stacks, all named after `nvidia-driver-daemonset`.
ALLOWANCES: dict[str, Allowance] = {
    "nvidia-driver-daemonset": DRIVER,
    "nvidia-driver-daemonset-*": DRIVER,
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
    "nvidia-dcgm-exporter": _allow({VALIDATION_GATE, "nvidia-dcgm-exporter"}, {"/run/nvidia", "/var/lib/kubelet/pod-resources"}),
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
    # vGPU nodes (assets/state-vgpu-manager, state-vgpu-device-manager)
    "nvidia-vgpu-manager-daemonset": _allow(
        {"k8s-driver-manager", "nvidia-vgpu-manager-ctr"},
        {
            "/", "/dev/log", "/dev/vfio", "/etc/os-release", "/run/nvidia", "/run/nvidia/driver/lib/firmware", "/sys",
            "/sys/fs/cgroup", "/sys/module/firmware_class/parameters/path", "/var/log",
        },
        {"hostPID", "hostIPC"},
    ),
    "nvidia-vgpu-device-manager": _allow(
        {"vgpu-manager-validation", "nvidia-vgpu-device-manager"},
        {"/", "/run/nvidia/driver", "/run/nvidia/validations", "/sys"},
    ),
}
NOTHING = _allow(set(), set())

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
    allowance, granted_by, fix = _grant(pattern, listed, objects.namespace_of(args.props) or gpu, gpu)
    what = objects.describe(kind or "?", args.props, args.name)
    extra_paths: set[str] = set()
    if allowance is not NOTHING:
        extra_paths = {str(p) for p in objects.items(objects.mapping(config.get("additionalHostPaths")).get(pattern or ""))}

    for flag in HOST_NAMESPACES:
        if spec.get(flag) is True and flag not in allowance.host_namespaces:
            report(f"{what} sets {flag}, not granted by {granted_by}; {fix}")
    for container in objects.containers(spec):
        context = container.security_context
        if context.get("privileged") is True and container.name not in allowance.privileged_containers:
            report(f"{what}: container {container.name!r} is privileged, not granted by {granted_by}; {fix}")
        added = [str(c) for c in objects.items(objects.mapping(context.get("capabilities")).get("add"))]
        if added:
            report(
                f"{what}: container {container.name!r} adds capabilities {', '.join(added)}; no operand asset adds "
                "any (the privileged ones need none); fix: drop capabilities.add"
            )
    for volume in objects.items(spec.get("volumes")):
        volume = objects.mapping(volume)
        path = objects.mapping(volume.get("hostPath")).get("path")
        if path is not None and str(path) not in allowance.host_paths | extra_paths:
            report(f"{what}: volume {volume.get('name')!r} mounts host path {path}, not granted by {granted_by}; {fix}")


POLICY = ResourceValidationPolicy(
    name=NAME,
    description="[high: security] Privileged containers, host namespaces and host paths only where NVIDIA's manifests need them.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate,
    config_schema=CONFIG_SCHEMA,
)
