"""NVIDIA's DRA driver for pools with `allocation: dra`, and the checks of what DRA pools need."""

from __future__ import annotations

import re
from typing import Optional

from pydantic import Field, StrictBool, field_validator

from components.config.base import _Model, shown
from components.config.overrides import Resources


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
