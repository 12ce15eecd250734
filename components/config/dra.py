"""NVIDIA's DRA driver for pools with `allocation: dra`, and the checks of what DRA pools need."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Optional

from pydantic import Field, StrictBool, field_validator

from components.config.base import NAMESPACE, _Model, shown
from components.config.overrides import Resources

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


# The kubelet plugin containers' gRPC health ports when the stack names none (GO:internal/state/dra_driver.go), and
# the HTTP metrics ports they serve besides, which a health port may not take.
DEFAULT_HEALTH_PORTS = {"gpus": 51516, "computeDomains": 51515}
METRICS_PORTS = (8080, 8081)


class PluginContainer(_Model):
    """One container of the DRA kubelet plugin, as NVIDIA's `draDriver.<gpus|computeDomains>.kubeletPlugin`."""

    resources: Optional[Resources] = Field(
        default=None, description="This container's requests and limits (none by default, as NVIDIA's asset)."
    )
    healthcheck_port: Optional[int] = Field(
        default=None, ge=1024, le=65535,
        description="The gRPC health port (HEALTHCHECK_PORT) its probes call: 51516 for gpus, 51515 for compute domains "
        "by default; change it where another host-network service on the node holds it.",
    )


class KubeletPlugin(_Model):
    gpus: PluginContainer = PluginContainer()
    compute_domains: PluginContainer = PluginContainer()

    def health_port(self, container: str) -> int:
        own = self.gpus if container == "gpus" else self.compute_domains
        return own.healthcheck_port or DEFAULT_HEALTH_PORTS[container]


class Dra(_Model):
    """NVIDIA's DRA driver for GPUs, on the pools with `allocation: dra`."""

    kubelet_plugin: KubeletPlugin = Field(
        default=KubeletPlugin(),
        description="Per container of the kubelet plugin (`gpus`, `computeDomains`): `resources` and "
        "`healthcheckPort`, as NVIDIA's `draDriver.gpus.kubeletPlugin` and `draDriver.computeDomains.kubeletPlugin`.",
    )

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
    problems += _gate_checks(cfg) + _plugin_container_checks(cfg)
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


def _plugin_container_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    """The compute domains container exists only with compute domains; the two health ports and the metrics ports
    are one host network's (the plugin runs with hostNetwork off, but both containers share the pod's)."""
    plugin = cfg.dra.kubelet_plugin
    here = f"{NAMESPACE}:dra.kubeletPlugin"
    problems: list[tuple[str, str]] = []
    if plugin.compute_domains.model_fields_set and not cfg.dra.compute_domains:
        problems.append((f"{here}.computeDomains", "the compute-domains container runs only with dra.computeDomains: true; "
                                                   "remove this block or turn compute domains on"))
    gpus, domains = plugin.health_port("gpus"), plugin.health_port("computeDomains")
    for name, port in (("gpus", gpus), ("computeDomains", domains)):
        if port in METRICS_PORTS:
            problems.append((f"{here}.{name}.healthcheckPort", f"{port} is a metrics port of the plugin (8080, 8081); pick another"))
    if cfg.dra.compute_domains and gpus == domains:
        problems.append((f"{here}.computeDomains.healthcheckPort", f"{domains} is the gpus container's health port too; "
                                                                   "the two containers share the pod's network"))
    operand = cfg.operands.dra_driver
    per_container = [n for n, c in (("gpus", plugin.gpus), ("computeDomains", plugin.compute_domains)) if c.resources is not None]
    if per_container and operand is not None and operand.resources is not None:
        problems.append((f"{here}.{per_container[0]}.resources",
                         "operands.draDriver.resources already sets every plugin container's resources: set them there "
                         "for both containers, or here per container, not both"))
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
