"""A node agent's requests on the budget ConfigMap (:mod:`.budget`): read its own slot, give it back, mark it failed.

The agent never takes a slot: the coordinator grants them (:mod:`.grants`). What is left to the agent is cheap and
idempotent by the node's name: reading the budget once per grant (to act only on a slot the ConfigMap really holds),
giving the slot back with a merge patch that removes the node's key (no compare-and-swap is needed to remove one's
own slot, and a lost answer is found harmless by whoever reads next), and marking it failed with a
compare-and-swap against the budget as read.
"""

from __future__ import annotations

from typing import Any

from kubernetes.client.exceptions import ApiException

from gpustack_agent.api import kube
from gpustack_agent.model import budget

# A compare-and-swap that loses this many races in a row is given up until the next pass.
MAX_RACES = 10


class Slots:
    """One node's view of the budget ConfigMap in a namespace."""

    def __init__(self, core: Any, *, node_name: str, log: kube.Log) -> None:
        self.core = core
        self.node_name = node_name
        self.log = log

    def read(self, namespace: str) -> dict[str, Any] | None:
        try:
            found = self.core.read_namespaced_config_map(
                name=budget.NAME, namespace=namespace, _request_timeout=kube.REQUEST_TIMEOUT_SECONDS)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return kube.as_dict(self.core, found)

    def record(self, namespace: str) -> dict[str, Any] | None:
        """This node's slot record as the budget holds it now, None if it holds none."""
        return budget.holder(self.read(namespace), self.node_name)

    def release(self, namespace: str) -> None:
        """Give this node's slot back; the coordinator, watching the budget, grants it to the next node."""
        try:
            self.core.patch_namespaced_config_map(
                name=budget.NAME, namespace=namespace, body=budget.release_patch({self.node_name}),
                _content_type=kube.MERGE_PATCH, _request_timeout=kube.REQUEST_TIMEOUT_SECONDS)
        except ApiException as exc:
            if exc.status != 404:
                raise
        self.log({"level": "info", "event": "slot-released", "node": self.node_name})

    def mark(self, namespace: str, why: str | None) -> None:
        """Mark this node's slot failed (``why``) or clear the mark (None); a failed slot halts new grants."""
        for _ in range(MAX_RACES):
            patch = budget.mark_patch(self.read(namespace) or {}, self.node_name, why)
            if patch is None:
                return
            if write_if_unchanged(self.core, namespace, patch):
                return


def write_if_unchanged(core: Any, namespace: str, patch: dict[str, Any]) -> dict[str, Any] | None:
    """Apply a compare-and-swap merge patch to the budget; the budget as written, or None when another writer came
    first (409) or the budget is gone (404)."""
    try:
        written = core.patch_namespaced_config_map(
            name=budget.NAME, namespace=namespace, body=patch, _content_type=kube.MERGE_PATCH,
            _request_timeout=kube.REQUEST_TIMEOUT_SECONDS)
    except ApiException as exc:
        if exc.status in (404, 409):
            return None
        raise
    return kube.as_dict(core, written)
