"""Every policy of the gpu-stack pack, in one list. The invariants themselves (one workload type per node,
state order, MIG layouts, pinned images, least-privilege RBAC, ...) are added here as modules beside this file."""

from __future__ import annotations

from pulumi_policy import Policy

POLICIES: list[Policy] = []
