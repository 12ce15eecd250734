"""Cross-key rules of `gpu-stack:dra`: DRA pools against the Kubernetes versions, the feature gates, and the kubelet
plugin's containers."""

from __future__ import annotations

from components.config.base import NAMESPACE
from components.config.dra import DRA_MIN_KUBERNETES_MINOR, GATE_EXCLUDES, GATE_REQUIRES, METRICS_PORTS
from components.config.stack import StackConfig


def dra_checks(cfg: StackConfig) -> list[tuple[str, str]]:
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
