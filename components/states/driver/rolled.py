"""DaemonSets the node agents roll: OnDelete, each node's pod replaced within the fleet's one budget.

A driver-like DaemonSet (a driver, the vGPU manager, the VFIO manager) takes the GPUs from the work on a node when
its pod restarts, so its DaemonSet is OnDelete and the node's agent replaces the pod only while holding a slot,
after cordoning the node and moving its GPU work (VMs included) off. The agent tells an outdated pod by
`gpu-stack/template-digest`, a digest of the pod template as rendered, which the DaemonSet carries and the
node-pools document names under `drivers`: planned here once, before anything is registered, because
`node-labeling` comes before these states in the state order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from pulumi_kubernetes.apps.v1 import DaemonSetUpdateStrategyArgs

from components.kit.builders import DaemonSetParts
from components.kit.digest import template_digest

TEMPLATE_DIGEST_ANNOTATION = "gpu-stack/template-digest"
# OnDelete even where the stack asks for rolling updates: the node agent replaces each node's pod within the fleet
# budget, which a DaemonSet's own maxUnavailable (one budget per DaemonSet, blind to the others and to the agents'
# other disruptions) cannot bound.
UPDATE_STRATEGY = DaemonSetUpdateStrategyArgs(type="OnDelete")


@dataclass(frozen=True)
class RolledDaemonSet:
    """One agent-rolled DaemonSet as it will be registered (annotated with its digest), its template digest, and
    the NFD labels of the nodes of a pool it serves (empty: every node of the pool)."""

    parts: DaemonSetParts
    digest: str
    node_labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        name = self.parts.metadata.name
        assert isinstance(name, str)
        return name


def agent_rolled(parts: DaemonSetParts, node_labels: Mapping[str, str] | None = None) -> RolledDaemonSet:
    digest = template_digest(parts.spec.template)
    return RolledDaemonSet(parts.annotated({TEMPLATE_DIGEST_ANNOTATION: digest}), digest, dict(node_labels or {}))
