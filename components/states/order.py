"""The state order, in one place.

The GPU Operator walks its states in a fixed order (GO:controllers/state_manager.go `init()`, fact sheet §1.2).
gpu-stack keeps that order as `depends_on` edges: each state's objects are applied after the previous enabled
state's objects. Readiness never gates the next state (operands are not awaited); per-node ordering stays in
the validator init containers and the files under /run/nvidia/validations, where NVIDIA puts it.

Seven entries have no operator state: NFD (the operator's Helm subchart), node labelling (the operator's
NodeLabelingReconciler), the node inventory (NVML drift reports, which no operator state gives), the KubeVirt host-device permissions (a step NVIDIA's docs leave to the user), the node-bound admission policies
(after every state that runs pods on GPU nodes, whose ServiceAccounts they name), the
later driver upgrade waves (the operator's upgrade controller, done as ordered
DaemonSets behind validation gates) and the stack validation gate (what `kubectl get clusterpolicy` status
would say). The first wave's drivers stay in `state-driver`; every later wave waits for the wave before it
to validate, which needs the validator and everything it checks, so the later waves come after all operands.
Two come from the operator's other, experimental controller (GPUCluster, fact sheet §1.6): `state-dra-driver`
and `state-dra-validation`, placed right after the device plugin they replace on DRA pools. One moves: the
operator's second state, `state-operator-metrics`, becomes `stack-monitoring` near the end,
because its objects need the Prometheus Operator's CRDs and must not hold up the GPU operands where those
are missing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class State:
    name: str
    operator_state: str  # the asset folder or controller it replaces
    # Its module, under components/states/ (a few still under components/kit/); components/stack.py builds the
    # state with GpuStack's method `_<component>`.
    component: str


STATE_ORDER: tuple[State, ...] = (
    State("pre-requisites", "assets/pre-requisites", "prerequisites"),
    State("node-feature-discovery", "Helm subchart node-feature-discovery", "nfd"),
    State("node-labeling", "NodeLabelingReconciler", "node_labeler"),
    State("state-driver", "assets/state-driver", "driver"),
    State("state-container-toolkit", "assets/state-container-toolkit", "toolkit"),
    State("state-operator-validation", "assets/state-operator-validation", "validator"),
    State("state-device-plugin", "assets/state-device-plugin", "device_plugin"),
    State("state-dra-driver", "GPUCluster manifests/state-dra-driver (the DRA driver in place of the device plugin)", "dra_driver"),
    State("state-dra-validation", "GPUCluster manifests/state-dra-validation", "dra_validator"),
    State("state-mps-control-daemon", "assets/state-mps-control-daemon", "mps"),
    State("state-dcgm", "assets/state-dcgm", "dcgm"),
    State("state-dcgm-exporter", "assets/state-dcgm-exporter", "dcgm_exporter"),
    State("gpu-feature-discovery", "assets/gpu-feature-discovery", "gfd"),
    State("state-mig-manager", "assets/state-mig-manager", "mig_manager"),
    State("state-node-status-exporter", "assets/state-node-status-exporter", "node_status_exporter"),
    State("node-inventory", "no operator state: the node agent's NVML read against the node's declared pool", "node_inventory"),
    State("state-vgpu-manager", "assets/state-vgpu-manager", "vgpu_manager"),
    State("state-vgpu-device-manager", "assets/state-vgpu-device-manager", "vgpu_device_manager"),
    State("state-sandbox-validation", "assets/state-sandbox-validation", "sandbox_validator"),
    State("state-vfio-manager", "assets/state-vfio-manager", "vfio_manager"),
    State("state-sandbox-device-plugin", "assets/state-sandbox-device-plugin", "sandbox_device_plugin"),
    State("state-kata-device-plugin", "assets/state-kata-device-plugin", "kata_device_plugin"),
    State("state-cc-manager", "assets/state-cc-manager", "cc_manager"),
    State("kubevirt-host-devices", "the operator's KubeVirt docs (permittedHostDevices, set by hand there)", "kubevirt"),
    State("node-bound-writes", "no operator state: admission that keeps each GPU-node token's writes on its own node",
          "node_write_policy"),
    State("stack-monitoring", "assets/state-operator-metrics (no operator process: rules over the operands' metrics)", "monitoring"),
    State("driver-waves", "upgrade controller (pkg/upgrade): waves after the first, each behind a gate", "waves"),
    State("stack-validation", "ClusterPolicy status (validator Ready on every GPU node)", "validation_gate"),
)

STATE_NAMES: tuple[str, ...] = tuple(s.name for s in STATE_ORDER)


def position(state: str) -> int:
    return STATE_NAMES.index(state)
