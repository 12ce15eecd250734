"""OpenShift facts: the SecurityContextConstraints NVIDIA's assets ship per operand, the Driver Toolkit (DTK)
sidecar's contract with the driver images, and the cluster proxy's trusted CA bundle.

Pure data, standard library only: the program renders from it and the policy pack judges SCCs by it.

Sources (GPU Operator v26.7.0, a22dbf6): every `assets/*/0*_scc*openshift.yaml` (one SCC per operand, the
privileged SCC's shape with per-operand host flags; users are the operand's ServiceAccount, filled by the
operator), `manifests/state-driver/0500_daemonset.yaml` and `0420_proxycfg.openshift.yaml` (DTK sidecar, proxy env,
trusted CA), `internal/state/driver.go` (one driver DaemonSet per RHCOS build, DTK images from the `driver-toolkit`
ImageStream in namespace `openshift`), and the goldens `internal/state/testdata/golden/driver-openshift-
drivertoolkit.yaml`, `driver-gdrcopy-openshift.yaml`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .consts import GDRCOPY_CONTAINER, GDS_CONTAINER

SCC_API_VERSION = "security.openshift.io/v1"
SCC_KIND = "SecurityContextConstraints"
# NVIDIA's SCCs copy the privileged SCC's description with it.
SCC_DESCRIPTION = (
    "privileged allows access to all privileged and host features and the ability to run as any user, any group, "
    "any fsGroup, and with any SELinux context.  WARNING: this is the most relaxed SCC and should be used only for "
    "cluster administration. Grant with caution."
)
SCC_GROUPS = ("system:cluster-admins", "system:nodes", "system:masters")


@dataclass(frozen=True)
class Scc:
    """One operand's SCC: privileged containers and host directories always (every NVIDIA SCC allows both), the
    host namespaces and ports its asset allows, and whether it allows any capability and unsafe sysctl."""

    name: str
    service_account: str
    host_pid: bool = False
    host_ipc: bool = False
    host_network: bool = False
    host_ports: bool = False
    any_capability: bool = True
    described: bool = True


# By the ServiceAccount whose pods it admits. The cc-manager gets an SCC of its own: NVIDIA's cc-manager and
# kata-manager assets both name theirs `nvidia-vfio-manager`, so on a cluster running those next to the VFIO
# manager the last state applied wins (its users replace the others'); names are unique here.
SCCS: dict[str, Scc] = {
    scc.service_account: scc
    for scc in (
        Scc("nvidia-driver", "nvidia-driver", host_pid=True),
        Scc("nvidia-operator-validator", "nvidia-operator-validator", host_pid=True),
        Scc("nvidia-gpu-feature-discovery", "nvidia-gpu-feature-discovery", host_pid=True),
        Scc("nvidia-dcgm", "nvidia-dcgm", host_network=True, host_ports=True),
        Scc("nvidia-dcgm-exporter", "nvidia-dcgm-exporter", host_ports=True),
        Scc("nvidia-mig-manager", "nvidia-mig-manager", host_pid=True, host_ipc=True),
        Scc("nvidia-node-status-exporter", "nvidia-node-status-exporter"),
        Scc("nvidia-vgpu-manager", "nvidia-vgpu-manager", host_pid=True),
        Scc("nvidia-vgpu-device-manager", "nvidia-vgpu-device-manager"),
        Scc("nvidia-sandbox-validator", "nvidia-sandbox-validator"),
        Scc("nvidia-vfio-manager", "nvidia-vfio-manager"),
        Scc("nvidia-cc-manager", "nvidia-cc-manager"),
        Scc("nvidia-sandbox-device-plugin", "nvidia-sandbox-device-plugin", any_capability=False),
        Scc("nvidia-kata-sandbox-device-plugin", "nvidia-kata-sandbox-device-plugin", any_capability=False, described=False),
    )
}

# --- Driver Toolkit ----------------------------------------------------------------------------------------------
# NFD's label of the RHCOS build a node runs; one driver DaemonSet per build, as the operator renders them.
NFD_OSTREE_VERSION = "feature.node.kubernetes.io/system-os_release.OSTREE_VERSION"
DTK_LABEL = "openshift.driver-toolkit"
DTK_RHCOS_LABEL = "openshift.driver-toolkit.rhcos"
DTK_CONTAINER = "openshift-driver-toolkit-ctr"
DTK_VOLUME = "shared-nvidia-driver-toolkit"
DTK_SHARED_DIR = "/mnt/shared-nvidia-driver-toolkit"
# The driver images' DTK entrypoint and its verbs: the driver container prepares the shared directory, the DTK
# container (the cluster's own kernel headers and toolchain) builds the modules there, and each GPUDirect sidecar
# builds its module the same way.
DTK_ENTRYPOINT = "ocp_dtk_entrypoint"
DTK_DRIVER_VERB = "nv-ctr-run-with-dtk"
DTK_BUILD_VERB = "dtk-build-driver"
DTK_SIDECAR_VERBS = {GDS_CONTAINER: "nv-fs-ctr-run-with-dtk", GDRCOPY_CONTAINER: "gdrcopy-ctr-run-with-dtk"}

# --- cluster proxy -------------------------------------------------------------------------------------------------
# The operator's trusted CA ConfigMap: OpenShift's network operator fills `ca-bundle.crt` with the cluster's
# trusted CAs (the proxy's included) in every ConfigMap carrying the inject label.
TRUSTED_CA_CONFIGMAP = "gpu-operator-trusted-ca"
TRUSTED_CA_INJECT_LABEL = "config.openshift.io/inject-trusted-cabundle"
TRUSTED_CA_KEY = "ca-bundle.crt"
TRUSTED_CA_FILE = "tls-ca-bundle.pem"
TRUSTED_CA_DIR = "/etc/pki/ca-trust/extracted/pem"
# The driver pod's env from `cluster.openshift` (components/states/driver/openshift.py driver_env), as the operator's
# OpenShift transforms set it: the cluster's version, and the cluster proxy with each variable in both cases.
OPENSHIFT_VERSION_ENV = "OPENSHIFT_VERSION"
PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
PROXY_ENV_NAMES = tuple(name for upper in PROXY_ENV for name in (upper, upper.lower()))
# OpenShift's hooks directory for cri-o (elsewhere cri-o reads /usr/share/containers/oci/hooks.d).
CRIO_HOOKS_DIR = "/run/containers/oci/hooks.d"
