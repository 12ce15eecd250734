"""A driver DaemonSet's ControllerRevisions, read by the DaemonSet's own selector: which revision is its newest (the
template new pods get), and what each revision's pod template holds. Read by an agent (its own driver's, cached per
template digest) and by the coordinator (every driver DaemonSet's, when one changes)."""

from __future__ import annotations

from typing import Any, Mapping

from gpustack_agent.api import kube
from gpustack_agent.model import pods as podinfo, upgrade


def list_revisions(apps: Any, namespace: str, daemonset: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ControllerRevisions ``daemonset`` owns."""
    name = (daemonset.get("metadata") or {}).get("name")
    selector = ",".join(f"{k}={v}" for k, v in sorted(
        (((daemonset.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}).items()))
    result = apps.list_namespaced_controller_revision(
        namespace=namespace, label_selector=selector, _request_timeout=kube.REQUEST_TIMEOUT_SECONDS)
    return [r for r in kube.as_dict(apps, result).get("items") or [] if podinfo.owner(r, "DaemonSet") == name]


class DriverRevisions:
    """One agent's view of driver DaemonSets' current revisions: ``current(daemonset, digest)`` is the revision (and
    its DRIVER_CONFIG_DIGEST) once the DaemonSet runs the template ``digest`` names, read once per digest, so a node
    reads each DaemonSet once per rollout."""

    def __init__(self, apps: Any) -> None:
        self.apps = apps
        self._known: dict[tuple[str, str], tuple[str, str | None]] = {}

    def current(self, daemonset: str, digest: str, namespace: str) -> tuple[str, str | None] | None:
        key = (daemonset, digest)
        if key not in self._known:
            found = kube.read_daemon_set(self.apps, namespace, daemonset)
            owned = list_revisions(self.apps, namespace, found) if found is not None else []
            revision = upgrade.current_revision(found, owned, digest)
            if revision is None:
                # Not written yet, or the DaemonSet controller has not caught up: asked again on a later pass.
                return None
            self._known[key] = (revision, upgrade.revision_config_digest(owned, revision))
        return self._known[key]
