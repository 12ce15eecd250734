"""What `gpu-stack:operands.<operand>` addresses: for each operand key (ClusterPolicy's section name where one
exists), its own containers, where its image comes from, and the env vars gpu-stack derives from other keys and so
must keep (an override of one of them is refused, naming that key).

The rule for env: every variable gpu-stack renders in an operand's own containers is owned, its value taken from the
stack config or fixed by the operand's asset, unless `OVERRIDABLE_ENV` lists it with the reason a user may change it.
tests/test_owned_env.py renders every operand's containers and fails on a variable that is neither.

Pod-level settings (annotations, labels, priorityClassName, tolerations, imagePullSecrets) go to the operand's
DaemonSets; container-level ones (env, args, resources, imagePullPolicy, image) to its own containers only, never
to the validation init containers gpu-stack puts in front of it. Which DaemonSets are an operand's is not listed
here: the state that renders a DaemonSet names its operand (components/kit/builders.py `operand_daemonset_parts`),
so a DaemonSet named per pool, per node image or per RHCOS build is its operand's like any other. The driver
DaemonSets hold several operands: the driver itself, k8s-driver-manager and the GPUDirect sidecars, each with a key
of its own.

Standard library only, relative imports only (like every catalog module).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Optional

from .consts import DRIVER_CONTAINER, DRIVER_MANAGER_CONTAINER, GDRCOPY_CONTAINER, GDS_CONTAINER, PEERMEM_CONTAINER
from .openshift import DTK_CONTAINER, OPENSHIFT_VERSION_ENV, PROXY_ENV_NAMES

DOWNWARD_API = "gpu-stack (downward API)"
GPU_STACK = "gpu-stack (fixed by the operand's asset)"
CDI = "toolkit.cdi"
INSTALL_DIR = "toolkit.installDir"
PLUGIN_CONFIG = "nodePools[].sharing / devicePlugin.migStrategy"
GPUDIRECT_GDS = "gpudirect.gds"
GPUDIRECT_GDRCOPY = "gpudirect.gdrcopy"
GPUDIRECT_RDMA = "gpudirect.rdma.enabled"
HOST_MOFED = "gpudirect.rdma.useHostMofed"
HOST_ROOT = "hostPaths.rootFS"
DRIVER_INSTALL_DIR = "hostPaths.driverInstallDir"
PLATFORM = "cluster.platform"

# Owned by gpu-stack in every container it renders.
COMMON_OWNED_ENV: Mapping[str, str] = MappingProxyType(
    {
        "NODE_NAME": DOWNWARD_API,
        "OPERATOR_NAMESPACE": DOWNWARD_API,
        "HOST_ROOT": HOST_ROOT,
        "DRIVER_INSTALL_DIR": DRIVER_INSTALL_DIR,
        "DRIVER_INSTALL_DIR_CTR_PATH": DRIVER_INSTALL_DIR,
    }
)

# Rendered on OpenShift stacks only (components/states/driver/openshift.py driver_env), so owned there only: elsewhere a driver
# that downloads through a proxy is given one by operands.driver.env (or driver.secretEnv), as NVIDIA documents for
# Kubernetes, and nothing gpu-stack renders is overwritten.
OPENSHIFT_OWNED_ENV: Mapping[str, str] = MappingProxyType(
    {OPENSHIFT_VERSION_ENV: "cluster.openshift.version", **{name: "cluster.openshift.proxy" for name in PROXY_ENV_NAMES}}
)


@dataclass(frozen=True)
class OperandTarget:
    """One operand key. `containers` are its own containers in the pods of its DaemonSets (or, for an operand that
    runs in other operands' pods, in theirs); `image` the catalog.IMAGES entry its repository/image/version
    override, or None when its image is set elsewhere (`image_set_by` says where); `os_tagged` images get the
    node's OS appended to their tag, as the driver's do."""

    containers: tuple[str, ...]
    image: Optional[str] = None
    image_set_by: str = ""
    os_tagged: bool = False
    version_set_by: str = ""
    owned_env: Mapping[str, str] = field(default_factory=dict)
    # For an operand that is a container in other operands' pods: those operands (they hold its pod settings).
    runs_in: tuple[str, ...] = ()
    # The key whose override applies while this one is unset (a per-pod key of a container several pods run).
    falls_back_to: Optional[str] = None
    # Containers of its pods, none of them an operand's own, that take its `resources` and nothing else of it.
    resources_also_reach: tuple[str, ...] = ()
    # Its pods get OPENSHIFT_OWNED_ENV on OpenShift (the driver and the vGPU manager: both build kernel modules).
    openshift_env: bool = False


# NVIDIA's NVIDIADriver template (and ClusterPolicy's transformOpenShiftDriverToolkitContainer, a22dbf6) gives the
# Driver Toolkit sidecar the requests and limits of the driver (or vGPU manager) whose modules it builds, so the
# sidecar has no key of its own: one override sizes the driver and its build. Its image, args and env stay the
# toolkit's.
_DTK_SIDECAR = (DTK_CONTAINER,)


_DRIVER_MANAGER_ENV = {
    "NVIDIA_VISIBLE_DEVICES": GPU_STACK,
    "ENABLE_GPU_POD_EVICTION": "upgrade.gpuPodEviction",
    "ENABLE_AUTO_DRAIN": "upgrade.drain.enabled",
    "DRAIN_USE_FORCE": "upgrade.drain.force",
    "DRAIN_POD_SELECTOR_LABEL": "upgrade.drain.podSelector",
    "DRAIN_TIMEOUT_SECONDS": "upgrade.drain.timeoutSeconds",
    "DRAIN_DELETE_EMPTYDIR_DATA": "upgrade.drain.deleteEmptyDirData",
    "DRIVER_CONFIG_DIGEST": GPU_STACK,
    "GPU_DIRECT_RDMA_ENABLED": GPUDIRECT_RDMA,
    "USE_HOST_MOFED": HOST_MOFED,
}

def _own_driver_manager(pod: str) -> OperandTarget:
    return OperandTarget(containers=(DRIVER_MANAGER_CONTAINER,), image="driverManager", owned_env=_DRIVER_MANAGER_ENV,
                         runs_in=(pod,), falls_back_to="driverManager")


_PLUGIN_FAMILY_ENV = {
    "MIG_STRATEGY": PLUGIN_CONFIG,
    "NVIDIA_MIG_MONITOR_DEVICES": PLUGIN_CONFIG,
    "CONFIG_FILE": PLUGIN_CONFIG,
    "NAMESPACE": DOWNWARD_API,
    "POD_NAME": DOWNWARD_API,
}

_LEADER_ELECTION_ENV = (
    "LEADER_ELECTION_ENABLED",
    "LEADER_ELECTION_LEASE_LOCK_NAME",
    "LEADER_ELECTION_LEASE_LOCK_NAMESPACE",
    "LEADER_ELECTION_LEASE_DURATION",
    "LEADER_ELECTION_RENEW_DEADLINE",
    "LEADER_ELECTION_RETRY_PERIOD",
)

OPERANDS: Mapping[str, OperandTarget] = MappingProxyType(
    {
        "driver": OperandTarget(
            containers=(DRIVER_CONTAINER,),
            image="driver",
            os_tagged=True,
            resources_also_reach=_DTK_SIDECAR,
            version_set_by="versions.driver (or nodePools[].driver.version)",
            openshift_env=True,
            owned_env={
                "NODE_IP": DOWNWARD_API,
                "KERNEL_MODULE_TYPE": "driver.kernelModuleType (or nodePools[].driver.kernelModuleType)",
                "OPEN_KERNEL_MODULES_ENABLED": "driver.kernelModuleType (or nodePools[].driver.kernelModuleType)",
                "GDRCOPY_ENABLED": GPUDIRECT_GDRCOPY,
                "GDS_ENABLED": GPUDIRECT_GDS,
                "GPU_DIRECT_RDMA_ENABLED": GPUDIRECT_RDMA,
                "USE_HOST_MOFED": HOST_MOFED,
                "DRIVER_CONFIG_DIGEST": GPU_STACK,
                "NVIDIA_VISIBLE_DEVICES": GPU_STACK,
            },
        ),
        # k8s-driver-manager runs in front of the driver, the vGPU manager and the VFIO manager alike.
        "driverManager": OperandTarget(
            containers=(DRIVER_MANAGER_CONTAINER,),
            image="driverManager",
            owned_env=_DRIVER_MANAGER_ENV,
            runs_in=("driver", "vgpuManager", "vfioManager"),
        ),
        "toolkit": OperandTarget(
            containers=("nvidia-container-toolkit-ctr",),
            image="toolkit",
            owned_env={
                "ROOT": INSTALL_DIR,
                "CDI_ENABLED": CDI,
                "NVIDIA_RUNTIME_SET_AS_DEFAULT": CDI,
                "CONTAINERD_SET_AS_DEFAULT": CDI,
                "NVIDIA_RUNTIME_NAME": GPU_STACK,
                "NVIDIA_CONTAINER_RUNTIME_MODE": CDI,
                "CRIO_CONFIG_MODE": CDI,
                "RUNTIME": "cluster.containerRuntime",
                "CONTAINERD_RUNTIME_CLASS": GPU_STACK,
                "RUNTIME_CONFIG": "toolkit.runtimeConfig",
                "CONTAINERD_CONFIG": "toolkit.runtimeConfig",
                "CRIO_CONFIG": "toolkit.runtimeConfig",
                "RUNTIME_DROP_IN_CONFIG": "toolkit.runtimeDropInConfig",
                "RUNTIME_DROP_IN_CONFIG_HOST_PATH": "toolkit.runtimeDropInConfig",
                "RUNTIME_SOCKET": "toolkit.runtimeSocket",
                "CONTAINERD_SOCKET": "toolkit.runtimeSocket",
                "NVIDIA_VISIBLE_DEVICES": GPU_STACK,
                "TOOLKIT_PID_FILE": GPU_STACK,
                # the kind the CDI specs name GPUs by, which the device plugin's CDI annotations must match
                "NVIDIA_CONTAINER_RUNTIME_MODES_CDI_DEFAULT_KIND": GPU_STACK,
                "NRI_NAMESPACE": DOWNWARD_API,
            },
        ),
        "validator": OperandTarget(
            containers=("nvidia-operator-validator", "nvidia-dra-validator"),
            image="validator",
            owned_env={"COMPONENT": GPU_STACK, "WITH_WAIT": GPU_STACK, "MIG_STRATEGY": PLUGIN_CONFIG, "NVIDIA_VISIBLE_DEVICES": GPU_STACK},
        ),
        "devicePlugin": OperandTarget(
            containers=("nvidia-device-plugin",),
            image="devicePlugin",
            owned_env={
                **_PLUGIN_FAMILY_ENV,
                "DEVICE_LIST_STRATEGY": CDI,
                "CDI_ENABLED": CDI,
                "CDI_ANNOTATION_PREFIX": CDI,
                "NVIDIA_CDI_HOOK_PATH": INSTALL_DIR,
                "MPS_ROOT": GPU_STACK,
                "GDS_ENABLED": GPUDIRECT_GDS,
                "MOFED_ENABLED": GPUDIRECT_GDS,
                "GDRCOPY_ENABLED": GPUDIRECT_GDRCOPY,
                "NVIDIA_VISIBLE_DEVICES": GPU_STACK,
                "NVIDIA_DRIVER_CAPABILITIES": GPU_STACK,
            },
        ),
        # The MPS control daemon runs the device plugin's image unless told otherwise.
        "mpsControlDaemon": OperandTarget(
            containers=("mps-control-daemon-ctr",),
            image="devicePlugin",
            owned_env={**_PLUGIN_FAMILY_ENV, "NVIDIA_VISIBLE_DEVICES": GPU_STACK, "NVIDIA_DRIVER_CAPABILITIES": GPU_STACK},
        ),
        "gfd": OperandTarget(
            containers=("gpu-feature-discovery",), image="gfd", owned_env={**_PLUGIN_FAMILY_ENV, "USE_NODE_FEATURE_API": PLATFORM}
        ),
        # DRA pools get a flavour of their own (`-dra`), claiming their node's GPUs; the same key sets both.
        "dcgm": OperandTarget(containers=("nvidia-dcgm-ctr",), image="dcgm"),
        "dcgmExporter": OperandTarget(
            containers=("nvidia-dcgm-exporter", "nvidia-dcgm-exporter-dra"),
            image="dcgmExporter",
            owned_env={
                "DCGM_EXPORTER_LISTEN": "dcgmExporter.listenAddress",
                "DCGM_EXPORTER_KUBERNETES": GPU_STACK,
                "DCGM_EXPORTER_COLLECTORS": "dcgmExporter.extraMetrics / dcgmExporter.collectorsFile",
                "DCGM_REMOTE_HOSTENGINE_INFO": "components.dcgm / dcgmExporter.remoteHostengine",
                "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS": "dcgmExporter.enablePodLabels",
                "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID": "dcgmExporter.enablePodUid",
                "DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX": "dcgmExporter.podLabelAllowlistRegex",
                "DCGM_HPC_JOB_MAPPING_DIR": "dcgmExporter.hpcJobMapping",
                "KUBERNETES_ENABLE_DRA": "nodePools[].allocation",
            },
        ),
        "migManager": OperandTarget(
            containers=("nvidia-mig-manager",),
            image="migManager",
            owned_env={
                "CONFIG_FILE": "migLayouts / nodePools[].sharing.migLayout",
                "GPU_CLIENTS_FILE": GPU_STACK,
                "WITH_REBOOT": "migManager.withReboot",
                "CDI_ENABLED": CDI,
                "NVIDIA_CDI_HOOK_PATH": INSTALL_DIR,
                "POD_NAME": DOWNWARD_API,
                "POD_NAMESPACE": DOWNWARD_API,
                "DEFAULT_GPU_CLIENTS_NAMESPACE": DOWNWARD_API,
            },
        ),
        # The node status exporter runs the validator's image (`nvidia-validator`, COMPONENT=metrics).
        "nodeStatusExporter": OperandTarget(
            containers=("nvidia-node-status-exporter",),
            image="validator",
            owned_env={"COMPONENT": GPU_STACK, "METRICS_PORT": GPU_STACK, "NVIDIA_VISIBLE_DEVICES": GPU_STACK},
        ),
        "vgpuManager": OperandTarget(
            containers=(DRIVER_CONTAINER,),  # in its own DaemonSet: the NVIDIADriver form's container name
            image_set_by="vgpu.managerImage",
            resources_also_reach=_DTK_SIDECAR,
            openshift_env=True,
            owned_env={"NODE_IP": DOWNWARD_API, "DRIVER_CONFIG_DIGEST": GPU_STACK, "NVIDIA_VISIBLE_DEVICES": GPU_STACK},
        ),
        "vgpuDeviceManager": OperandTarget(
            containers=("nvidia-vgpu-device-manager",),
            image="vgpuDeviceManager",
            owned_env={
                "CONFIG_FILE": GPU_STACK,
                "DEFAULT_VGPU_CONFIG": "vgpu.defaultConfig",
                "NAMESPACE": DOWNWARD_API,
            },
        ),
        # vfio-manage ships in the k8s-driver-manager image.
        "vfioManager": OperandTarget(containers=("nvidia-vfio-manager",), image="driverManager"),
        "sandboxValidator": OperandTarget(
            containers=("nvidia-sandbox-validator",),
            image="validator",
            owned_env={"DEFAULT_GPU_WORKLOAD_CONFIG": "sandboxWorkloads.defaultWorkload", "COMPONENT": GPU_STACK},
        ),
        "sandboxDevicePlugin": OperandTarget(
            containers=("nvidia-sandbox-device-plugin-ctr",),
            image="sandboxDevicePlugin",
            owned_env={"POD_NAMESPACE": DOWNWARD_API, "NVIDIA_VISIBLE_DEVICES": GPU_STACK},
        ),
        "kataSandboxDevicePlugin": OperandTarget(
            containers=("nvidia-kata-sandbox-device-plugin-ctr",),
            image="kataDevicePlugin",
            owned_env={"POD_NAMESPACE": DOWNWARD_API, "POD_SERVICE_ACCOUNT": DOWNWARD_API},
        ),
        "ccManager": OperandTarget(
            containers=("nvidia-cc-manager",),
            image="ccManager",
            owned_env={"DEFAULT_CC_MODE": "sandboxWorkloads.ccManager.defaultMode", "NVIDIA_VISIBLE_DEVICES": GPU_STACK},
        ),
        # The GPUDirect sidecars of the driver pods: their tags get the node's OS, as the driver's does.
        "gds": OperandTarget(containers=(GDS_CONTAINER,), image="gds", os_tagged=True, runs_in=("driver",)),
        "gdrcopy": OperandTarget(containers=(GDRCOPY_CONTAINER,), image="gdrcopy", os_tagged=True, runs_in=("driver",)),
        "peermem": OperandTarget(
            containers=(PEERMEM_CONTAINER,),
            image_set_by="operands.driver (peermem runs from the driver image)",
            runs_in=("driver",),
            owned_env={"USE_HOST_MOFED": HOST_MOFED, "NVIDIA_VISIBLE_DEVICES": GPU_STACK},
        ),
        # The DRA kubelet plugin (DaemonSet) and, with compute domains, its controller (a Deployment).
        "draDriver": OperandTarget(
            containers=("gpus", "compute-domains", "compute-domain"),
            image="draDriver",
            owned_env={
                "NVIDIA_VISIBLE_DEVICES": GPU_STACK,
                "CDI_ROOT": GPU_STACK,
                "IMAGE_NAME": "operands.draDriver.repository/image/version",
                "HEALTHCHECK_PORT": GPU_STACK,
                "HTTP_ENDPOINT": GPU_STACK,
                "KUBELET_REGISTRAR_DIRECTORY_PATH": "hostPaths.kubeletRootDir",
                "KUBELET_PLUGINS_DIRECTORY_PATH": "hostPaths.kubeletRootDir",
                "NAMESPACE": DOWNWARD_API,
                "POD_NAME": DOWNWARD_API,
                "CD_DAEMON_IMAGE_PULL_SECRET_NAMES": "registry.pullSecrets / operands.draDriver.imagePullSecrets",
                "FEATURE_GATES": "dra.featureGates",
                "METRICS_PATH": GPU_STACK,
                "NVIDIA_MIG_CONFIG_DEVICES": GPU_STACK,
                "GPU_CLIQUE_LABEL_ENABLED": GPU_STACK,
                # one controller replica: no election, and the lease named in gpu-stack's namespace
                **{name: GPU_STACK for name in _LEADER_ELECTION_ENV},
            },
        ),
        # k8s-driver-manager in the VFIO and vGPU managers' pods alone (ClusterPolicy's vfioManager.driverManager and
        # vgpuManager.driverManager); unset, operands.driverManager applies there too.
        "vfioManagerDriverManager": _own_driver_manager("vfioManager"),
        "vgpuManagerDriverManager": _own_driver_manager("vgpuManager"),
    }
)

OPERAND_KEYS: tuple[str, ...] = tuple(OPERANDS)

# Env gpu-stack renders that a user may change through operands.<operand>.env: the defaults of an operand's own
# tunables, which NVIDIA's assets set and ClusterPolicy's <section>.env replaces, and from which gpu-stack derives
# nothing. Anything else gpu-stack renders is owned.
_TUNABLE = "a tunable of the operand itself whose default NVIDIA's asset sets; gpu-stack derives nothing from it"
OVERRIDABLE_ENV: Mapping[str, Mapping[str, str]] = MappingProxyType(
    {
        "devicePlugin": {"PASS_DEVICE_SPECS": _TUNABLE, "FAIL_ON_INIT_ERROR": _TUNABLE, "DEVICE_ID_STRATEGY": _TUNABLE},
        "gfd": {"GFD_SLEEP_INTERVAL": _TUNABLE, "GFD_FAIL_ON_INIT_ERROR": _TUNABLE},
        # the DRA driver chart's logVerbosity
        "draDriver": {"LOG_VERBOSITY": _TUNABLE, "LOG_VERBOSITY_CD_DAEMON": _TUNABLE},
    }
)

# The operand whose override sets a catalog image for every operand that runs it, where the names differ.
_IMAGE_OWNERS: Mapping[str, str] = MappingProxyType({"kataDevicePlugin": "kataSandboxDevicePlugin"})


def image_owner(image: str) -> str:
    """The operand key that owns catalog image `image` (its `versions.<image>` key); others only borrow it."""
    return _IMAGE_OWNERS.get(image, image)


def container_operand(container: str, pod_operand: Optional[str]) -> Optional[str]:
    """The operand key a container's overrides come from: the pod's own operand when the container is one of its
    own, else the operand that names the container (k8s-driver-manager, the GPUDirect sidecars); None for the
    validation gates and helpers gpu-stack puts next to an operand."""
    if pod_operand is not None and container in OPERANDS[pod_operand].containers:
        return pod_operand
    candidates = [key for key, target in OPERANDS.items() if target.runs_in and container in target.containers]
    # The key of this pod's own copy of the container first (the VFIO manager's k8s-driver-manager).
    own = sorted((len(OPERANDS[key].runs_in), i, key) for i, key in enumerate(candidates) if pod_operand in OPERANDS[key].runs_in)
    if own:
        return own[0][2]
    return candidates[0] if candidates else None


def owned_env(operand: str, *, openshift: bool) -> dict[str, str]:
    """Env var name -> the stack key (or gpu-stack mechanism) that sets it, for one operand's containers; `openshift`:
    the stack's cluster.platform is openshift."""
    target = OPERANDS[operand]
    on_openshift = OPENSHIFT_OWNED_ENV if openshift and target.openshift_env else {}
    return {**COMMON_OWNED_ENV, **target.owned_env, **on_openshift}
