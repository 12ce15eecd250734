"""NVIDIA's DRA driver for pools with `allocation: dra`, and the checks of what DRA pools need."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import StrictBool

from components.config.base import NAMESPACE, _Model

if TYPE_CHECKING:
    from components.config.stack import StackConfig


class Dra(_Model):
    """NVIDIA's DRA driver for GPUs, on the pools with `allocation: dra`."""

    # Multi-node NVLink (IMEX) ComputeDomains: the controller, CRDs and the kubelet plugin's second container.
    compute_domains: StrictBool = False


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
        if "compute_domains" in cfg.dra.model_fields_set:
            problems.append((f"{NAMESPACE}:dra", "no pool has allocation: dra; remove this block"))
        return problems
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
