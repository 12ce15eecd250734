"""Requests on pods: the coordinator's evictions of a drain (:mod:`.drains`) and a holder's deletion of a driver pod
on its own node (an outdated one, or an orphan)."""

from __future__ import annotations

from typing import Any, Callable

from kubernetes.client.exceptions import ApiException

from gpustack_agent.api import kube


EVICTED, REFUSED, GONE, CHANGED = "evicted", "refused", "gone", "changed"


def evict(core: Any, namespace: str, name: str, uid: str | None, *, node_name: str,
          log: Callable[[dict[str, Any]], None]) -> str:
    """Evict one pod (the Eviction API, so PodDisruptionBudgets apply) as the coordinator saw it bound to
    ``node_name``: the eviction carries the pod's uid as a precondition, so a pod of that name created since (on
    another node, a StatefulSet's) is never taken. Returns EVICTED, GONE (not there: nothing left to evict),
    CHANGED (409: another pod of that name by now, or a conflict; the node's pods are to be listed again) or
    REFUSED: the API server answered 429, because a PodDisruptionBudget protects it now or KubeVirt's admission took
    the eviction of a virt-launcher pod as the order to live-migrate its VM (the pod goes once the VM runs
    elsewhere; asking again restarts a migration that failed)."""
    body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                            "metadata": {"name": name, "namespace": namespace}}
    if uid:
        body["deleteOptions"] = {"preconditions": {"uid": uid}}
    try:
        core.create_namespaced_pod_eviction(name=name, namespace=namespace, body=body,
                                            _request_timeout=kube.REQUEST_TIMEOUT_SECONDS)
    except ApiException as exc:
        if exc.status == 429:
            log({"level": "warning", "event": "eviction-blocked", "node": node_name, "pod": f"{namespace}/{name}"})
            return REFUSED
        if exc.status == 404:
            return GONE
        if exc.status == 409:
            return CHANGED
        raise
    log({"level": "info", "event": "pod-evicted", "node": node_name, "pod": f"{namespace}/{name}"})
    return EVICTED


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
