"""The requests a holder makes on its node's pods: evicting GPU work (the Eviction API, so PodDisruptionBudgets
apply) and deleting a driver pod (an outdated one, or an orphan)."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from kubernetes.client.exceptions import ApiException

from . import kube
from . import pods as podinfo


def evict(core: Any, work: Sequence[Mapping[str, Any]], evicted: set[str], *, node_name: str,
          log: Callable[[dict[str, Any]], None]) -> int:
    """Evict each pod of ``work`` once (``evicted`` remembers which were): a pod already going is left to go. One the
    API server answers 429 for is asked again later, until the drain's timeout: a PodDisruptionBudget protects it
    now, or KubeVirt's admission took the eviction of a virt-launcher pod as the order to live-migrate its VM (the
    pod goes once the VM runs elsewhere; asking again restarts a migration that failed). Returns how many got 429."""
    refused = 0
    for pod in work:
        ref = podinfo.ref(pod)
        if podinfo.is_terminating(pod) or ref in evicted:
            continue
        metadata = podinfo.metadata(pod)
        body = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": metadata.get("name"), "namespace": metadata.get("namespace")}}
        try:
            core.create_namespaced_pod_eviction(
                name=metadata.get("name"), namespace=metadata.get("namespace"), body=body,
                _request_timeout=kube.REQUEST_TIMEOUT_SECONDS)
        except ApiException as exc:
            if exc.status == 429:
                refused += 1
                log({"level": "warning", "event": "eviction-blocked", "node": node_name, "pod": ref})
                continue
            if exc.status != 404:
                raise
        evicted.add(ref)
    return refused


def delete_pod(core: Any, namespace: str, name: str, why: str, *, node_name: str,
               log: Callable[[dict[str, Any]], None]) -> None:
    """Delete a driver pod (gone already: nothing to do) and say why."""
    try:
        core.delete_namespaced_pod(name=name, namespace=namespace, _request_timeout=kube.REQUEST_TIMEOUT_SECONDS)
    except ApiException as exc:
        if exc.status != 404:
            raise
        return
    log({"level": "info", "event": "driver-pod-deleted", "node": node_name, "pod": f"{namespace}/{name}",
         "reason": why})
