"""NVIDIA's DRA driver for pools with `allocation: dra`, and the checks of what DRA pools need."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pydantic import Field, StrictBool, field_validator

from components.config.base import NAMESPACE, _Model, shown

if TYPE_CHECKING:
    from components.config.stack import StackConfig


# The DRA driver's own feature gates and their defaults (DRA = NVIDIA/k8s-dra-driver-gpu at 2240711, the driver
# gpu-stack renders: pkg/featuregates/featuregates.go), then the Kubernetes logging gates its --feature-gates flag
# also takes (k8s.io/component-base/logs/api/v1 kube_features.go, vendored there; the driver turns
# ContextualLogging on itself).
DRIVER_FEATURE_GATES: dict[str, bool] = {
    "TimeSlicingSettings": False,
    "MPSSupport": False,
    "IMEXDaemonsWithDNSNames": True,
    "PassthroughSupport": False,
    "NVMLDeviceHealthCheck": False,
    "DynamicMIG": False,
    "ComputeDomainCliques": True,
    "CrashOnNVLinkFabricErrors": True,
    "DeviceMetadata": False,
}
LOGGING_FEATURE_GATES: dict[str, bool] = {"ContextualLogging": True, "LoggingAlphaOptions": False, "LoggingBetaOptions": True}
KNOWN_FEATURE_GATES: dict[str, bool] = {**DRIVER_FEATURE_GATES, **LOGGING_FEATURE_GATES}
FEATURE_GATE_NAME = re.compile(r"^[A-Z][A-Za-z0-9]{1,62}$")
# (gate, gate it needs on) and (gate, gate it cannot run with): the driver's ValidateFeatureGates at 2240711, which
# makes every driver container exit at start on a violation.
GATE_REQUIRES = (("ComputeDomainCliques", "IMEXDaemonsWithDNSNames"), ("DeviceMetadata", "PassthroughSupport"))
GATE_EXCLUDES = (
    ("DynamicMIG", "PassthroughSupport"),
    ("DynamicMIG", "NVMLDeviceHealthCheck"),
    ("DynamicMIG", "MPSSupport"),
    ("PassthroughSupport", "NVMLDeviceHealthCheck"),
)


class Dra(_Model):
    """NVIDIA's DRA driver for GPUs, on the pools with `allocation: dra`."""

    # Multi-node NVLink (IMEX) ComputeDomains: the controller, CRDs and the kubelet plugin's second container.
    compute_domains: StrictBool = False
    feature_gates: dict[str, StrictBool] = Field(
        default={},
        description=(
            "The DRA driver's feature gates, `{GateName: true|false}`, set on its kubelet plugin and controller "
            "containers as FEATURE_GATES (the driver's --feature-gates). Gates of the rendered driver: "
            + ", ".join(f"{name} (default {str(on).lower()})" for name, on in KNOWN_FEATURE_GATES.items())
            + ". MPSSupport adds the plugin's Deployment rights; PassthroughSupport its /lib/modules, /sys and /proc "
            "mounts, and makes the vfio.gpu.nvidia.com DeviceClass (rendered always, as the operator does) select the "
            "vfio-pci-bound GPUs."
        ),
    )

    @field_validator("feature_gates")
    @classmethod
    def _gates(cls, gates: dict[str, bool]) -> dict[str, bool]:
        for name in gates:
            if not FEATURE_GATE_NAME.fullmatch(name):
                raise ValueError(f"{shown(name)} is not a feature gate name (CamelCase, such as MPSSupport)")
            if name not in KNOWN_FEATURE_GATES:
                raise ValueError(f"{shown(name)} is not a gate of the DRA driver; known gates: {', '.join(KNOWN_FEATURE_GATES)}")
        return gates

    def gate(self, name: str) -> bool:
        """Whether gate `name` is on for the driver: the stack's value, else the driver's default."""
        return self.feature_gates.get(name, KNOWN_FEATURE_GATES[name])


# resource.k8s.io/v1 and adminAccess (which the DRA validator's claim needs) are on by default from 1.34.
DRA_MIN_KUBERNETES_MINOR = 34


def _dra_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    for i, pool in enumerate(cfg.node_pools):
        here = f"{NAMESPACE}:nodePools[{i}]"
        if pool.allocation != "dra":
            continue
        if pool.workload_type != "container":
            problems.append((f"{here}.allocation", f"only container pools allocate GPUs to pods, not {pool.workload_type!r}; remove it"))
        elif pool.sharing.strategy in ("time-slicing", "mps"):
            problems.append(
                (
                    f"{here}.sharing.strategy",
                    f"{pool.sharing.strategy!r} configures the device plugin, which DRA pools do not run; with DRA a "
                    "claim asks for sharing in its GpuConfig; allowed values here: none, mig-single, mig-mixed",
                )
            )
    if not cfg.dra_pools:
        if cfg.dra.model_fields_set:
            problems.append((f"{NAMESPACE}:dra", "no pool has allocation: dra; remove this block"))
        return problems
    problems += _gate_checks(cfg)
    old = [v for v in cfg.cluster.kubernetes_versions if int(v.split(".")[1]) < DRA_MIN_KUBERNETES_MINOR]
    if old:
        problems.append(
            (
                f"{NAMESPACE}:cluster.kubernetesVersions",
                f"DRA pools need Kubernetes 1.{DRA_MIN_KUBERNETES_MINOR} or later (got {', '.join(old)}): before it "
                "resource.k8s.io is served only as a beta API behind the DynamicResourceAllocation feature gate, and "
                "the DRA validator's adminAccess claim is off by default",
            )
        )
    if not cfg.components.node_labeler:
        problems.append(
            (f"{NAMESPACE}:components.nodeLabeler", "DRA pools take the dra-driver deploy label from the node labeller: set it to true")
        )
    return problems


def _gate_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    """The gates against each other, as the driver checks them at start, and against the DRA pools' MIG layouts."""
    dra = cfg.dra
    here = f"{NAMESPACE}:dra.featureGates"
    problems: list[tuple[str, str]] = []
    for gate, needed in GATE_REQUIRES:
        if dra.gate(gate) and not dra.gate(needed):
            problems.append((f"{here}.{gate if gate in dra.feature_gates else needed}", f"{gate} needs {needed}: true (the driver refuses to start otherwise)"))
    for gate, other in GATE_EXCLUDES:
        if dra.gate(gate) and dra.gate(other):
            problems.append((f"{here}.{gate}", f"{gate} and {other} cannot both be on (the driver refuses to start); set one of them to false"))
    if dra.gate("DynamicMIG"):
        for i, pool in enumerate(cfg.node_pools):
            if pool.allocation == "dra" and pool.sharing.is_mig:
                problems.append(
                    (
                        f"{NAMESPACE}:nodePools[{i}].sharing.strategy",
                        "with DynamicMIG the DRA driver creates MIG devices per claim, which the MIG manager's layout on "
                        "this pool would undo; set sharing.strategy: none here, or dra.featureGates.DynamicMIG: false",
                    )
                )
    return problems
