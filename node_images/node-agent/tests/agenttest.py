"""Fakes the agent's tests share: Kubernetes API objects and clients, a stop() that ends loops, a log recorder,
pods of the kinds the agent judges, and an API server in memory for the paced removal."""

from __future__ import annotations

import copy
import itertools
import json
from typing import Any, Callable, Iterable
from unittest import mock

from kubernetes import client
from kubernetes.client.exceptions import ApiException


def model(obj: Any, kind: str) -> Any:
    return client.ApiClient().deserialize(json.dumps(obj), kind, "application/json")


def fake_api() -> mock.MagicMock:
    api = mock.MagicMock()
    api.api_client = client.ApiClient()
    # A write answers an empty object unless a test says what (a MagicMock would be read as an endless API object).
    api.patch_node.return_value = {}
    return api


def stop_after(calls: int) -> Callable[[], bool]:
    """stop() that says False for the first `calls` checks, then True."""
    answers = itertools.chain([False] * calls, itertools.repeat(True))
    return lambda: next(answers)


class Recorder:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def __call__(self, record: dict[str, Any]) -> None:
        self.records.append(record)

    def events(self) -> list[str]:
        return [r["event"] for r in self.records]


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies it, on a copy."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


def renamed(node: dict[str, Any], name: str) -> dict[str, Any]:
    node = copy.deepcopy(node)
    node["metadata"]["name"] = name
    node["metadata"]["labels"]["kubernetes.io/hostname"] = name
    return node


def clients_of(core: Any = None, batch: Any = None, apps: Any = None, coordination: Any = None) -> Callable[[], tuple]:
    """The `clients` argument of `__main__.main`: core, batch, apps and coordination API objects."""
    return lambda: (core, batch, apps, coordination)


# --- pods as the API server returns them -------------------------------------------------------------------

NAMESPACE = "gpu-operator"
A100_DRIVER = "nvidia-driver-daemonset-a100"
H100_DRIVER = "nvidia-driver-daemonset-h100"


def pod(name: str, node: str, *, namespace: str = NAMESPACE, labels: dict[str, str] | None = None,
        owner: tuple[str, str] | None = None, node_selector: dict[str, str] | None = None,
        resources: dict[str, Any] | None = None, ready: bool = True, phase: str = "Running",
        **spec: Any) -> dict[str, Any]:
    """A pod on `node`; `owner` is (kind, name) of its controller."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels or {}),
                                "creationTimestamp": "2025-06-02T10:00:00Z"}
    if owner is not None:
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1],
                                        "uid": f"uid-{owner[1]}", "controller": True}]
    container: dict[str, Any] = {"name": "main", "image": "registry.example/main:1"}
    if resources:
        container["resources"] = resources
    body: dict[str, Any] = {"nodeName": node, "containers": [container], **spec}
    if node_selector:
        body["nodeSelector"] = dict(node_selector)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": body,
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def operand_pod(name: str, node: str, component: str) -> dict[str, Any]:
    """A pod of an operand DaemonSet, which selects its nodes by `nvidia.com/gpu.deploy.<component>=true`."""
    return pod(name, node, owner=("DaemonSet", f"nvidia-{component}"),
               node_selector={f"nvidia.com/gpu.deploy.{component}": "true"})


def driver_pod(name: str, node: str, daemonset: str | None, *, ready: bool = True,
               revision: str | None = None) -> dict[str, Any]:
    """A driver pod as components/states/driver/state.py renders it; `daemonset` None: orphaned, its DaemonSet deleted;
    `revision` its controller-revision-hash."""
    pod_labels = {"app": daemonset or "nvidia-driver-daemonset-gone", "app.kubernetes.io/component": "nvidia-driver"}
    if revision is not None:
        pod_labels["controller-revision-hash"] = revision
    return pod(name, node, ready=ready, owner=("DaemonSet", daemonset) if daemonset else None,
               labels=pod_labels, node_selector={"nvidia.com/gpu.deploy.driver": "true"})


def gpu_job_pod(name: str, node: str, namespace: str = "ml-team") -> dict[str, Any]:
    """User work holding a GPU: what a removal must not pull the operands from under."""
    return pod(name, node, namespace=namespace, owner=("Job", name),
               resources={"limits": {"nvidia.com/gpu": "1"}})


def container_status(name: str, state: dict[str, Any]) -> dict[str, Any]:
    """A container's status in `state`, e.g. {"waiting": {"reason": "CrashLoopBackOff"}}."""
    return {"name": name, "image": "registry.example/main:1", "imageID": "", "ready": False, "restartCount": 3,
            "state": state}


def terminating(target: dict[str, Any]) -> dict[str, Any]:
    """`target`, deleted but not gone yet."""
    target = copy.deepcopy(target)
    target["metadata"]["deletionTimestamp"] = "2025-06-02T10:05:00Z"
    return target


def finished(target: dict[str, Any], phase: str = "Succeeded") -> dict[str, Any]:
    target = copy.deepcopy(target)
    target["status"]["phase"] = phase
    return target


# --- an API server in memory ------------------------------------------------------------------------------


def _api_error(status: int, reason: str) -> ApiException:
    return ApiException(status=status, reason=reason)


def _matches(labels: dict[str, str], selector: str | None) -> bool:
    if not selector:
        return True
    def one(term: str) -> bool:
        if "!=" in term:
            key, _, value = term.partition("!=")
            return labels.get(key) != value
        key, equals, value = term.partition("=")
        return labels.get(key) == value if equals else key in labels
    return all(one(term) for term in selector.split(","))


class FakeCluster:
    """Nodes, pods and Leases in memory behind fake CoreV1Api (`core`) and CoordinationV1Api (`coordination`)
    objects, answering with real client models and with the API server's rules: a write carrying a stale
    resourceVersion gets 409, a missing object 404, an existing one 409 on create. Deleting or evicting a pod
    marks it terminating; `settle()` lets terminating pods go. `fail(method, exc, ...)` makes the next calls of
    a method raise those errors, and `blocked` holds the "namespace/name" of pods a PodDisruptionBudget protects.
    Mocks underneath, so calls can be asserted."""

    def __init__(self, nodes: Iterable[dict[str, Any]] = (), pods: Iterable[dict[str, Any]] = ()) -> None:
        self.nodes = {n["metadata"]["name"]: copy.deepcopy(n) for n in nodes}
        self.pods = [copy.deepcopy(p) for p in pods]
        self.leases: dict[tuple[str, str], dict[str, Any]] = {}
        self.config_maps: dict[tuple[str, str], dict[str, Any]] = {}
        self.daemonsets: dict[tuple[str, str], dict[str, Any]] = {}
        self.revisions: list[dict[str, Any]] = []
        # Methods whose next calls are applied and then answer 500, as when the response is lost on the way back.
        self._lost: dict[str, int] = {}
        self.calls: list[str] = []
        self.on_change: Callable[[], None] = lambda: None
        self.blocked: set[str] = set()
        self.evicted: list[str] = []
        self.deleted: list[str] = []
        self._failures: dict[str, list[BaseException]] = {}
        self._version = itertools.count(1000)
        self.core = fake_api()
        self.coordination = fake_api()
        self.apps = fake_api()
        for api, names in ((self.core, ("read_node", "patch_node", "list_node", "list_namespaced_pod",
                                        "list_pod_for_all_namespaces", "create_namespaced_pod_eviction",
                                        "delete_namespaced_pod", "read_namespaced_config_map",
                                        "create_namespaced_config_map", "replace_namespaced_config_map")),
                           (self.apps, ("read_namespaced_daemon_set", "list_namespaced_controller_revision")),
                           (self.coordination, ("read_namespaced_lease", "create_namespaced_lease",
                                                "replace_namespaced_lease", "delete_namespaced_lease"))):
            for name in names:
                getattr(api, name).side_effect = self._failing(name, getattr(self, f"_{name}"))

    # --- test controls ---

    def fail(self, method: str, *errors: BaseException) -> None:
        self._failures.setdefault(method, []).extend(errors)

    def lose_response(self, method: str, times: int = 1) -> None:
        """The next `times` calls of `method` are carried out, but the caller gets a 500 instead of the answer."""
        self._lost[method] = self._lost.get(method, 0) + times

    def budget(self, namespace: str = NAMESPACE) -> dict[str, Any] | None:
        return self.config_maps.get((namespace, "gpu-stack-upgrade-budget"))

    def holders(self, namespace: str = NAMESPACE) -> set[str]:
        return set(((self.budget(namespace) or {}).get("data") or {}))

    def put_daemonset(self, name: str, digest: str, revision: str, *, namespace: str = NAMESPACE,
                      observed: bool = True, config_digest: str | None = None) -> None:
        """A driver DaemonSet whose template (digest) is at `revision`: generation, ControllerRevision and all."""
        current = self.daemonsets.get((namespace, name))
        generation = int((current or {}).get("metadata", {}).get("generation", 0)) + 1
        self.daemonsets[(namespace, name)] = {
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": namespace, "generation": generation,
                         "annotations": {"gpu-stack/template-digest": digest}},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "nvidia-driver-ctr", "image": f"driver:{revision}"}]}}},
            "status": {"observedGeneration": generation if observed else generation - 1, "currentNumberScheduled": 0,
                       "desiredNumberScheduled": 0, "numberMisscheduled": 0, "numberReady": 0},
        }
        number = 1 + max((int(r["revision"]) for r in self.revisions
                          if r["metadata"]["ownerReferences"][0]["name"] == name), default=0)
        self.revisions.append({"apiVersion": "apps/v1", "kind": "ControllerRevision", "revision": number, "data": {"spec": {"template": {"$patch": "replace", "spec": {"containers": [
                                   {"name": "nvidia-driver-ctr",
                                    "env": [{"name": "DRIVER_CONFIG_DIGEST", "value": config_digest or revision}]}]}}}},
                               "metadata": {"name": f"{name}-{revision}", "namespace": namespace,
                                            "labels": {"app": name, "controller-revision-hash": revision},
                                            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                                                                 "name": name, "uid": f"uid-{name}",
                                                                 "controller": True}]}})

    def revision_of(self, name: str) -> str:
        owned = [r for r in self.revisions if r["metadata"]["ownerReferences"][0]["name"] == name]
        return max(owned, key=lambda r: r["revision"])["metadata"]["labels"]["controller-revision-hash"]

    def add(self, *new_pods: dict[str, Any]) -> None:
        self.pods += [copy.deepcopy(p) for p in new_pods]

    def remove(self, name: str) -> None:
        self.pods = [p for p in self.pods if p["metadata"]["name"] != name]

    def settle(self) -> None:
        """Terminating pods finish terminating."""
        self.pods = [p for p in self.pods if not p["metadata"].get("deletionTimestamp")]

    def node_labels(self, name: str) -> dict[str, str]:
        return self.nodes[name]["metadata"].get("labels") or {}

    def lease(self, name: str, namespace: str = NAMESPACE) -> dict[str, Any] | None:
        return self.leases.get((namespace, name))

    def put_lease(self, name: str, holder: str, renewed: str, namespace: str = NAMESPACE,
                  duration: int = 300) -> None:
        self.leases[(namespace, name)] = {
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": str(next(self._version))},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "acquireTime": renewed,
                     "renewTime": renewed, "leaseTransitions": 0},
        }

    # --- the API ---

    def _failing(self, method: str, handler: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(method)
            queue = self._failures.get(method)
            if queue:
                raise queue.pop(0)
            answer = handler(*args, **kwargs)
            if not method.startswith(("read_", "list_")):
                self.on_change()
            if self._lost.get(method):
                self._lost[method] -= 1
                raise _api_error(500, "response lost")
            return answer
        return call

    def _read_node(self, name: str, _request_timeout: float) -> Any:
        if name not in self.nodes:
            raise _api_error(404, "Not Found")
        return model(self.nodes[name], "V1Node")

    def _patch_node(self, name: str, body: dict[str, Any], _content_type: str, _request_timeout: float) -> Any:
        node = self.nodes[name]
        body = copy.deepcopy(body)
        expected = body.setdefault("metadata", {}).pop("resourceVersion", None)
        if expected is not None and expected != node["metadata"].get("resourceVersion"):
            raise _api_error(409, "Conflict")
        for section in ("labels", "annotations"):
            current = node["metadata"].setdefault(section, {})
            for key, value in (body["metadata"].get(section) or {}).items():
                if value is None:
                    current.pop(key, None)
                else:
                    current[key] = value
        if "spec" in body:
            node["spec"] = apply_merge_patch(node.get("spec") or {}, body["spec"])
        node["metadata"]["resourceVersion"] = str(next(self._version))
        return model(node, "V1Node")

    def _list_node(self, label_selector: str, _request_timeout: float, _headers: dict | None = None,
                   _preload_content: bool = True, limit: int | None = None, _continue: str | None = None) -> Any:
        items = sorted((n for n in self.nodes.values() if _matches(n["metadata"].get("labels") or {}, label_selector)),
                       key=lambda n: n["metadata"]["name"])
        if limit is not None:
            items = items[:limit]
        if _headers and "PartialObjectMetadataList" in _headers.get("Accept", ""):
            assert _preload_content is False
            body = {"kind": "PartialObjectMetadataList", "metadata": {},
                    "items": [{"metadata": {"name": n["metadata"]["name"],
                                            "labels": n["metadata"].get("labels") or {}}} for n in items]}
            return mock.Mock(data=json.dumps(body).encode())
        return model({"items": items}, "V1NodeList")

    def _pods_matching(self, namespace: str | None, label_selector: str | None, field_selector: str | None) -> Any:
        node = field_selector.partition("spec.nodeName=")[2] if field_selector else None
        items = [p for p in self.pods
                 if (namespace is None or p["metadata"]["namespace"] == namespace)
                 and (node is None or p["spec"].get("nodeName") == node)
                 and _matches(p["metadata"].get("labels") or {}, label_selector)]
        return model({"items": items}, "V1PodList")

    def _list_namespaced_pod(self, namespace: str, label_selector: str | None = None,
                             field_selector: str | None = None, _request_timeout: float = 0) -> Any:
        return self._pods_matching(namespace, label_selector, field_selector)

    def _list_pod_for_all_namespaces(self, field_selector: str | None = None, label_selector: str | None = None,
                                     _request_timeout: float = 0) -> Any:
        listed = self._pods_matching(None, label_selector, field_selector)
        listed.metadata = client.V1ListMeta(resource_version=str(next(self._version)))
        return listed

    # --- the budget ConfigMap, DaemonSets and their revisions ---

    def _read_namespaced_config_map(self, name: str, namespace: str, _request_timeout: float) -> Any:
        if (namespace, name) not in self.config_maps:
            raise _api_error(404, "Not Found")
        return model(self.config_maps[(namespace, name)], "V1ConfigMap")

    def _create_namespaced_config_map(self, namespace: str, body: dict[str, Any], _request_timeout: float) -> Any:
        if (namespace, body["metadata"]["name"]) in self.config_maps:
            raise _api_error(409, "AlreadyExists")
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(next(self._version))
        self.config_maps[(namespace, body["metadata"]["name"])] = stored
        return model(stored, "V1ConfigMap")

    def _replace_namespaced_config_map(self, name: str, namespace: str, body: dict[str, Any],
                                       _request_timeout: float) -> Any:
        current = self.config_maps.get((namespace, name))
        if current is None:
            raise _api_error(404, "Not Found")
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise _api_error(409, "Conflict")
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(next(self._version))
        self.config_maps[(namespace, name)] = stored
        return model(stored, "V1ConfigMap")

    def _read_namespaced_daemon_set(self, name: str, namespace: str, _request_timeout: float) -> Any:
        if (namespace, name) not in self.daemonsets:
            raise _api_error(404, "Not Found")
        return model(self.daemonsets[(namespace, name)], "V1DaemonSet")

    def _list_namespaced_controller_revision(self, namespace: str, label_selector: str,
                                             _request_timeout: float) -> Any:
        items = [r for r in self.revisions if r["metadata"]["namespace"] == namespace
                 and _matches(r["metadata"]["labels"], label_selector)]
        return model({"items": items}, "V1ControllerRevisionList")

    def _find_pod(self, name: str, namespace: str) -> dict[str, Any]:
        for candidate in self.pods:
            if (candidate["metadata"]["name"], candidate["metadata"]["namespace"]) == (name, namespace):
                return candidate
        raise _api_error(404, "Not Found")

    def _create_namespaced_pod_eviction(self, name: str, namespace: str, body: dict[str, Any],
                                        _request_timeout: float) -> Any:
        assert body["kind"] == "Eviction" and body["metadata"] == {"name": name, "namespace": namespace}
        target = self._find_pod(name, namespace)
        if f"{namespace}/{name}" in self.blocked:
            raise _api_error(429, "Too Many Requests")
        self.evicted.append(f"{namespace}/{name}")
        target["metadata"]["deletionTimestamp"] = "2025-06-02T10:05:00Z"

    def _delete_namespaced_pod(self, name: str, namespace: str, _request_timeout: float) -> Any:
        self._find_pod(name, namespace)["metadata"]["deletionTimestamp"] = "2025-06-02T10:05:00Z"
        self.deleted.append(f"{namespace}/{name}")

    def _read_namespaced_lease(self, name: str, namespace: str, _request_timeout: float) -> Any:
        if (namespace, name) not in self.leases:
            raise _api_error(404, "Not Found")
        return model(self.leases[(namespace, name)], "V1Lease")

    def _store_lease(self, namespace: str, body: dict[str, Any]) -> Any:
        lease = copy.deepcopy(body)
        lease["metadata"]["resourceVersion"] = str(next(self._version))
        self.leases[(namespace, lease["metadata"]["name"])] = lease
        return model(lease, "V1Lease")

    def _create_namespaced_lease(self, namespace: str, body: dict[str, Any], _request_timeout: float) -> Any:
        if (namespace, body["metadata"]["name"]) in self.leases:
            raise _api_error(409, "AlreadyExists")
        return self._store_lease(namespace, body)

    def _replace_namespaced_lease(self, name: str, namespace: str, body: dict[str, Any],
                                  _request_timeout: float) -> Any:
        current = self.leases.get((namespace, name))
        if current is None:
            raise _api_error(404, "Not Found")
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise _api_error(409, "Conflict")
        return self._store_lease(namespace, body)

    def _delete_namespaced_lease(self, name: str, namespace: str, body: dict[str, Any],
                                 _request_timeout: float) -> Any:
        current = self.leases.get((namespace, name))
        if current is None:
            raise _api_error(404, "Not Found")
        expected = (body.get("preconditions") or {}).get("resourceVersion")
        if expected is not None and expected != current["metadata"]["resourceVersion"]:
            raise _api_error(409, "Conflict")
        del self.leases[(namespace, name)]
