"""A cluster in memory, in virtual time, for running the node agent's own code at fleet scale.

- :class:`Hub` runs green threads (greenlet) in virtual time: an agent's ``sleep`` and a watch with nothing to read
  park its green thread until the hub's clock reaches the moment, so 10,000 real label loops (``labelloop.run_label_loop``
  with its ``Pacer``, as ``python -m gpustack_agent label`` wires them) and the coordinator run in one process.
- :class:`Server` is the API server: nodes, pods, ConfigMaps, DaemonSets and ControllerRevisions with
  resourceVersions, merge patches with resourceVersion preconditions (409), label- and field-selected lists, metadata
  only lists and watches, watches resumed from a resourceVersion (410 once it is older than the history kept), and
  bookmarks. Every request is counted by caller and method. Faults: a request refused (409, 500), a write applied
  with its answer lost.
- :class:`Api` is one caller's client: the methods of ``CoreV1Api`` and ``AppsV1Api`` the agent calls, answering
  with dicts (which ``api_client.sanitize_for_serialization`` passes through) and, for ``watch=True``, a response
  whose stream the client's own ``kubernetes.watch.Watch`` reads line by line.

The controllers the agents wait for (the DaemonSet controller, the kubelet, the MIG manager) live in
:mod:`simfleet`, beside the fleet that wires everything up.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import json
import queue
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping

import greenlet
import orjson
from kubernetes.client.exceptions import ApiException

# How far back a watch may resume (the API server's watch cache; etcd compacts every five minutes).
HISTORY_SECONDS = 300.0
NODES, PODS, CONFIG_MAPS, DAEMON_SETS = "nodes", "pods", "configmaps", "daemonsets"


# --- virtual time --------------------------------------------------------------------------------------------


class Hub:
    """Virtual time and the green threads that run in it. Callbacks (``at``) run on the hub itself and must not
    block; tasks (``spawn``) may ``sleep`` and ``park``."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Any, Any]] = []
        self._seq = itertools.count()
        self._main = greenlet.getcurrent()
        self.crashes: list[tuple[float, str, BaseException]] = []

    def at(self, when: float, callback: Callable[[], None]) -> None:
        heapq.heappush(self._heap, (max(when, self.now), next(self._seq), callback, None))

    def spawn(self, target: Callable[[], None], name: str) -> greenlet.greenlet:
        def run() -> None:
            try:
                target()
            except greenlet.GreenletExit:
                pass
            except Exception as exc:  # noqa: BLE001 - a crashed process is recorded, as a pod restart would show it
                self.crashes.append((self.now, name, exc))
        task = greenlet.greenlet(run, parent=self._main)
        self._wake(task, None, self.now)
        return task

    def kill(self, task: greenlet.greenlet) -> None:
        """The process is gone at once (SIGKILL): nothing after its last request happens."""
        if not task.dead:
            task.throw(greenlet.GreenletExit)

    def _wake(self, task: greenlet.greenlet, token: Any, when: float) -> None:
        heapq.heappush(self._heap, (when, next(self._seq), task, token))

    def sleep(self, seconds: float) -> None:
        self.park(timeout=max(0.0, seconds))

    def park(self, timeout: float | None = None) -> Any:
        """Block the calling task until :meth:`unpark` or ``timeout``; returns what unpark passed (None on time)."""
        task = greenlet.getcurrent()
        token = object()
        task.sim_token = token  # type: ignore[attr-defined]
        if timeout is not None:
            self._wake(task, token, self.now + timeout)
        return self._main.switch()

    def unpark(self, task: greenlet.greenlet, value: Any = True, delay: float = 0.0) -> None:
        token = getattr(task, "sim_token", None)
        if token is not None:
            heapq.heappush(self._heap, (self.now + delay, next(self._seq), task, (token, value)))

    def run(self, until: float, done: Callable[[], bool] = lambda: False) -> bool:
        """Run until virtual time ``until`` or until ``done()``; returns whether ``done()`` became true."""
        while self._heap and self._heap[0][0] <= until:
            when, _, what, token = heapq.heappop(self._heap)
            self.now = when
            if isinstance(what, greenlet.greenlet):
                if what.dead:
                    continue
                value = None
                if isinstance(token, tuple):
                    token, value = token
                if token is not None and getattr(what, "sim_token", None) is not token:
                    continue  # a wake-up for a park that already ended
                what.sim_token = None  # type: ignore[attr-defined]
                if what:
                    what.switch(value)
                else:
                    what.switch()  # its first run
            else:
                what()
            if done():
                return True
        self.now = max(self.now, until)
        return done()


class SimQueue:
    """``queue.Queue`` for tasks: ``get`` parks the task until something is put or the timeout passes."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.items: collections.deque[Any] = collections.deque()
        self.waiter: greenlet.greenlet | None = None

    def put(self, item: Any) -> None:
        self.items.append(item)
        if self.waiter is not None:
            self.hub.unpark(self.waiter)
            self.waiter = None

    def get(self, timeout: float | None = None) -> Any:
        if not self.items:
            self.waiter = greenlet.getcurrent()
            self.hub.park(timeout)
            self.waiter = None
        if not self.items:
            raise queue.Empty
        return self.items.popleft()

    def get_nowait(self) -> Any:
        if not self.items:
            raise queue.Empty
        return self.items.popleft()


class GreenRuntime:
    """The coordinator's runtime (:class:`coordinator.Threads`) on the hub."""

    def __init__(self, hub: Hub, name: str) -> None:
        self.hub, self.name = hub, name
        self.tasks: list[greenlet.greenlet] = []

    def spawn(self, target: Callable[[], None]) -> None:
        self.tasks.append(self.hub.spawn(target, f"{self.name}/informer"))

    def queue(self) -> SimQueue:
        return SimQueue(self.hub)


# --- selectors -----------------------------------------------------------------------------------------------


def label_matches(labels: Mapping[str, str], selector: str | None) -> bool:
    """``k``, ``!k``, ``k=v``, ``k==v``, ``k!=v`` terms, ANDed (what the agents and the coordinator send)."""
    if not selector:
        return True
    for term in selector.split(","):
        term = term.strip()
        if "!=" in term:
            key, _, value = term.partition("!=")
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, _, value = term.replace("==", "=").partition("=")
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _field(selector: str | None, key: str) -> str | None:
    for term in (selector or "").split(","):
        name, _, value = term.partition("=")
        if name.strip() == key:
            return value.strip()
    return None


def _labels(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


def _metadata_only(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}


def _copy(value: Any) -> Any:
    """A copy as a client gets it, through JSON as over the wire: nothing it changes reaches the server's object."""
    return orjson.loads(orjson.dumps(value))


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, returning a new object (the old one is left as the history holds it)."""
    if not isinstance(patch, dict):
        return _copy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge(result.get(key), value)
    return result


def _encode(event: str, obj: Mapping[str, Any], metadata_only: bool) -> bytes:
    """One line of a watch's stream."""
    shown = _metadata_only(obj) if metadata_only else obj
    return orjson.dumps({"type": event, "object": shown}) + b"\n"


def _error(status: int, reason: str) -> ApiException:
    return ApiException(status=status, reason=reason)


# --- watches -------------------------------------------------------------------------------------------------


@dataclass
class Watch:
    """One open watch: its filter, what it has not read yet, and the task waiting to read."""

    server: "Server"
    kind: str
    namespace: str | None
    name: str | None  # metadata.name field selector
    node: str | None  # spec.nodeName field selector (pods)
    label_selector: str | None
    metadata_only: bool
    bookmarks: bool
    deadline: float
    lines: collections.deque[bytes] = field(default_factory=collections.deque)
    reader: greenlet.greenlet | None = None
    closed: bool = False

    def selects(self, obj: Mapping[str, Any] | None) -> bool:
        if obj is None:
            return False
        metadata = obj.get("metadata") or {}
        if self.namespace is not None and metadata.get("namespace") != self.namespace:
            return False
        if self.name is not None and metadata.get("name") != self.name:
            return False
        if self.node is not None and (obj.get("spec") or {}).get("nodeName") != self.node:
            return False
        return label_matches(_labels(obj), self.label_selector)

    def offer(self, kind: str, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None,
              encode: Callable[[str, Mapping[str, Any], bool], bytes]) -> None:
        before, after = self.selects(old), self.selects(new)
        if not before and not after:
            return
        if kind == "DELETED" or not after:
            line = encode("DELETED", new if new is not None else old, self.metadata_only)  # type: ignore[arg-type]
        elif not before:
            line = encode("ADDED", new, self.metadata_only)  # type: ignore[arg-type]
        else:
            line = encode("MODIFIED", new, self.metadata_only)  # type: ignore[arg-type]
        self.lines.append(line)
        if self.reader is not None:
            self.server.hub.unpark(self.reader)

    # The response object kubernetes.watch.Watch reads.
    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        hub = self.server.hub
        while True:
            if self.lines:
                yield self.lines.popleft()
                continue
            if self.closed:
                return
            if hub.now >= self.deadline:
                if self.bookmarks:
                    yield json.dumps({"type": "BOOKMARK", "object": {"metadata": {
                        "resourceVersion": str(self.server.version)}}}).encode() + b"\n"
                self.close()
                return
            self.reader = greenlet.getcurrent()
            hub.park(self.deadline - hub.now)
            self.reader = None

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.server._unwatch(self)

    def release_conn(self) -> None:
        return None

    status = 200


# --- who may do what -----------------------------------------------------------------------------------------


class NodeBoundAccess:
    """What the stack's RBAC and its node-bound admission policy (components/states/node_write_policy.py) let a process
    on a GPU node do, for the callers named after their node (``agent/<node>``, ``inventory/<node>``): no eviction
    at all (no ``pods/eviction`` grant), writes to its own Node only, deletes of pods bound to its own node only.
    Every other caller (the coordinator, a person) is unrestricted. Each refusal is recorded."""

    NODE_BOUND = ("agent/", "inventory/")

    def __init__(self) -> None:
        self.refused: list[tuple[str, str, str]] = []

    def _node_of(self, caller: str) -> str | None:
        prefix = next((p for p in self.NODE_BOUND if caller.startswith(p)), None)
        return caller[len(prefix):] if prefix else None

    def _refuse(self, caller: str, verb: str, what: str) -> None:
        self.refused.append((caller, verb, what))
        raise _error(403, "Forbidden")

    def evict(self, caller: str) -> None:
        if self._node_of(caller) is not None:
            self._refuse(caller, "evict", "pods/eviction")

    def write_node(self, caller: str, name: str) -> None:
        node = self._node_of(caller)
        if node is not None and node != name:
            self._refuse(caller, "patch", f"nodes/{name}")

    def delete_pod(self, caller: str, pod: Mapping[str, Any]) -> None:
        node = self._node_of(caller)
        if node is not None and (pod.get("spec") or {}).get("nodeName") != node:
            self._refuse(caller, "delete", f"pods/{pod['metadata'].get('namespace')}/{pod['metadata']['name']}")


# --- the API server ------------------------------------------------------------------------------------------


class Server:
    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.version = 1000
        self.objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {
            NODES: {}, PODS: {}, CONFIG_MAPS: {}, DAEMON_SETS: {}}
        self.revisions: list[dict[str, Any]] = []
        self.pods_on: dict[str, set[tuple[str, str]]] = collections.defaultdict(set)
        self.history: dict[str, collections.deque[tuple[float, int, str, Any, Any]]] = {
            kind: collections.deque() for kind in self.objects}
        # The newest version each kind's history no longer holds: a watch from before it gets 410.
        self.compacted: dict[str, int] = {kind: 0 for kind in self.objects}
        # The same history by object (kind, name) and by node (pods, "node", node): what a watch of one object or
        # of one node's pods missed is found without reading every event of the kind.
        self.keyed_history: dict[tuple[str, ...], collections.deque[tuple[float, int, str, Any, Any]]] = \
            collections.defaultdict(collections.deque)
        self._by_name: dict[tuple[str, str], list[Watch]] = collections.defaultdict(list)
        self._by_node: dict[str, list[Watch]] = collections.defaultdict(list)
        self._general: dict[str, list[Watch]] = collections.defaultdict(list)
        self.requests: collections.Counter[tuple[str, str]] = collections.Counter()
        self._failures: dict[tuple[str | None, str], list[BaseException]] = collections.defaultdict(list)
        self._lost: collections.Counter[tuple[str | None, str]] = collections.Counter()
        # Called after every change with (kind, old, new): the fleet's controllers and invariant checks.
        self.observers: list[Callable[[str, Any, Any], None]] = []
        self.evictions: list[str] = []
        self.blocked: set[str] = set()
        # An admission webhook on evictions (KubeVirt's): may raise to refuse one.
        self.on_evict: Callable[[str, str], None] | None = None
        self.access = NodeBoundAccess()

    # --- faults ---

    def fail(self, method: str, error: BaseException | None, caller: str | None = None) -> None:
        """The next call of ``method`` (by ``caller``, or anyone) fails with ``error``; None lets one call through
        first."""
        self._failures[(caller, method)].append(error)

    def lose_response(self, method: str, caller: str | None = None) -> None:
        self._lost[(caller, method)] += 1

    def _enter(self, caller: str, method: str) -> None:
        self.requests[(caller, method)] += 1
        for key in ((caller, method), (None, method)):
            if self._failures.get(key):
                error = self._failures[key].pop(0)
                if error is not None:
                    raise error
                return

    def _leave(self, caller: str, method: str) -> None:
        for key in ((caller, method), (None, method)):
            if self._lost.get(key):
                self._lost[key] -= 1
                raise _error(500, "response lost")

    # --- state changes ---

    def _next_version(self) -> str:
        self.version += 1
        return str(self.version)

    def put(self, kind: str, obj: dict[str, Any], *, event: str | None = None) -> dict[str, Any]:
        """Store ``obj`` (a new dict: stored objects are never changed in place) and tell the watches."""
        metadata = obj["metadata"]
        key = (metadata.get("namespace") or "", metadata["name"])
        old = self.objects[kind].get(key)
        new = {**obj, "metadata": {**metadata, "resourceVersion": self._next_version()}}
        if kind == PODS and old is None and not metadata.get("uid"):
            # A pod created again under the same name is another object: another uid.
            new["metadata"]["uid"] = f"{key[0]}/{key[1]}@{new['metadata']['resourceVersion']}"
        self.objects[kind][key] = new
        if kind == PODS:
            self.pods_on[(new.get("spec") or {}).get("nodeName") or ""].add(key)
        self._emit(kind, event or ("ADDED" if old is None else "MODIFIED"), old, new)
        return new

    def delete(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        old = self.objects[kind].pop((namespace, name), None)
        if old is None:
            return None
        if kind == PODS:
            self.pods_on[(old.get("spec") or {}).get("nodeName") or ""].discard((namespace, name))
        gone = {**old, "metadata": {**old["metadata"], "resourceVersion": self._next_version()}}
        self._emit(kind, "DELETED", old, gone)
        return gone

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects[kind].get((namespace, name))

    def terminate_pod(self, namespace: str, name: str) -> dict[str, Any]:
        """Delete a pod as the kubelet does: terminating at once, gone after its grace period."""
        pod = self.objects[PODS][(namespace, name)]
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            return pod
        grace = float((pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
        marked = self.put(PODS, {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "2026-11-27T12:00:00Z"}})
        self.hub.at(self.hub.now + grace, lambda: self.delete(PODS, namespace, name))
        return marked

    def _emit(self, kind: str, event: str, old: Any, new: Any) -> None:
        entry = (self.hub.now, self.version, event, old, new)
        history = self.history[kind]
        history.append(entry)
        while history and history[0][0] < self.hub.now - HISTORY_SECONDS:
            self.compacted[kind] = history.popleft()[1]
        changed = new if new is not None else old
        keys = [(kind, changed["metadata"]["name"])]
        if kind == PODS:
            keys += [(PODS, "node", n) for n in {((p or {}).get("spec") or {}).get("nodeName") for p in (old, new)} if n]
        for key in keys:
            keyed = self.keyed_history[key]
            keyed.append(entry)
            while keyed and keyed[0][0] < self.hub.now - HISTORY_SECONDS:
                keyed.popleft()
        encoded: dict[tuple[str, bool], bytes] = {}

        def encode(kind_of_event: str, obj: Mapping[str, Any], metadata_only: bool) -> bytes:
            key = (kind_of_event, metadata_only)
            if key not in encoded:
                encoded[key] = _encode(kind_of_event, obj, metadata_only)
            return encoded[key]

        obj = new if new is not None else old
        metadata = obj["metadata"]
        watches = list(self._by_name.get((kind, metadata["name"]), ())) + list(self._general.get(kind, ()))
        if kind == PODS:
            for pod in (old, new):
                node = ((pod or {}).get("spec") or {}).get("nodeName")
                if node:
                    watches += [w for w in self._by_node.get(node, ()) if w not in watches]
        # A DELETED event carries the object as deleted, at the deletion's resourceVersion (as the API server's
        # does): a watch resumed from it must not replay what came before.
        for watch in watches:
            watch.offer(event, old if event != "ADDED" else None, new, encode)
        for observer in self.observers:
            observer(kind, old, new if event != "DELETED" else None)

    # --- watches ---

    def open_watch(self, kind: str, *, namespace: str | None, field_selector: str | None, label_selector: str | None,
                   metadata_only: bool, bookmarks: bool, timeout: float, resource_version: str | None) -> Watch:
        watch = Watch(self, kind, namespace, _field(field_selector, "metadata.name"),
                      _field(field_selector, "spec.nodeName"), label_selector, metadata_only, bookmarks,
                      self.hub.now + timeout)
        since = int(resource_version) if resource_version else self.version
        if since < self.compacted[kind]:
            watch.lines.append(json.dumps({"type": "ERROR", "object": {
                "kind": "Status", "code": 410, "reason": "Expired",
                "message": f"too old resource version: {since} ({self.compacted[kind]})"}}).encode() + b"\n")
            watch.closed = True
            return watch
        if since < self.version:
            # What happened since: the newest events back to ``since`` (usually none: bookmarks keep a resuming
            # watch's resourceVersion current), of its object or node when it watches one.
            key = (kind, watch.name) if watch.name is not None else (PODS, "node", watch.node) if (
                watch.node is not None) else None
            missed = []
            for entry in reversed(self.keyed_history.get(key, ()) if key else self.history[kind]):
                if entry[1] <= since:
                    break
                missed.append(entry)
            for _, version, event, old, new in reversed(missed):
                watch.offer(event, old if event != "ADDED" else None, new, _encode)
        if watch.name is not None:
            self._by_name[(kind, watch.name)].append(watch)
        elif watch.node is not None:
            self._by_node[watch.node].append(watch)
        else:
            self._general[kind].append(watch)
        return watch

    def _unwatch(self, watch: Watch) -> None:
        for index, key in ((self._by_name, (watch.kind, watch.name)), (self._by_node, watch.node),
                           (self._general, watch.kind)):
            found = index.get(key)  # type: ignore[call-overload]
            if found and watch in found:
                found.remove(watch)
                return

    def end_watch(self, pick: Callable[[list[Watch]], Watch]) -> None:
        """The server ends one open watch now, long before its timeout (an API server restarting, a proxy)."""
        found = [w for index in (self._by_name, self._by_node, self._general) for ws in index.values() for w in ws]
        if found:
            watch = pick(found)
            watch.close()
            if watch.reader is not None:
                self.hub.unpark(watch.reader)

    def open_watches(self) -> int:
        return sum(len(w) for index in (self._by_name, self._by_node, self._general) for w in index.values())

    # --- counting ---

    def count(self, callers: Iterable[str] | None = None) -> int:
        wanted = None if callers is None else set(callers)
        return sum(n for (caller, _), n in self.requests.items() if wanted is None or caller in wanted)

    def by_method(self, callers: Iterable[str] | None = None) -> dict[str, int]:
        wanted = None if callers is None else set(callers)
        found: collections.Counter[str] = collections.Counter()
        for (caller, method), n in self.requests.items():
            if wanted is None or caller in wanted:
                found[method] += n
        return dict(found)


class _ApiClient:
    """What the agent calls ``api.api_client``: the server's answers are fresh dicts already."""

    @staticmethod
    def sanitize_for_serialization(obj: Any) -> Any:
        return obj


class _Raw:
    """A response read with ``_preload_content=False``."""

    def __init__(self, body: Any) -> None:
        self.data = orjson.dumps(body)


class Api:
    """One caller's client (an agent, the coordinator, an inventory loop): CoreV1Api and AppsV1Api in one."""

    def __init__(self, server: Server, caller: str) -> None:
        self.server = server
        self.caller = caller
        self.api_client = _ApiClient()

    def _call(self, method: str, handler: Callable[[], Any]) -> Any:
        self.server._enter(self.caller, method)
        answer = handler()
        self.server._leave(self.caller, method)
        return answer

    def _list_or_watch(self, method: str, kind: str, namespace: str | None, kwargs: dict[str, Any],
                       items: Callable[[], list[dict[str, Any]]]) -> Any:
        headers = kwargs.get("_headers") or {}
        metadata_only = "PartialObjectMetadata" in headers.get("Accept", "")
        if kwargs.get("watch"):
            self.server._enter(self.caller, f"watch:{method}")
            return self.server.open_watch(
                kind, namespace=namespace, field_selector=kwargs.get("field_selector"),
                label_selector=kwargs.get("label_selector"), metadata_only=metadata_only,
                bookmarks=bool(kwargs.get("allow_watch_bookmarks")), timeout=float(kwargs.get("timeout_seconds") or 1800),
                resource_version=kwargs.get("resource_version"))

        def answer() -> Any:
            found = sorted(items(), key=lambda o: (o["metadata"].get("namespace") or "", o["metadata"]["name"]))
            limit = kwargs.get("limit")
            start = int(kwargs.get("_continue") or 0)
            page = found[start:start + limit] if limit else found
            shown = [_metadata_only(o) if metadata_only else _copy(o) for o in page]
            meta: dict[str, Any] = {"resourceVersion": str(self.server.version)}
            if limit and start + limit < len(found):
                meta["continue"] = str(start + limit)
            body = {"items": shown, "metadata": meta}
            return _Raw(body) if kwargs.get("_preload_content") is False else body
        return self._call(method, answer)

    def _selected(self, kind: str, namespace: str | None, kwargs: dict[str, Any]) -> list[dict[str, Any]]:
        name = _field(kwargs.get("field_selector"), "metadata.name")
        node = _field(kwargs.get("field_selector"), "spec.nodeName")
        if kind == PODS and node is not None:
            candidates = [self.server.objects[PODS][k] for k in self.server.pods_on.get(node, ())]
        elif name is not None:
            candidates = [o for (ns, n), o in self.server.objects[kind].items() if n == name]
        else:
            candidates = list(self.server.objects[kind].values())
        return [o for o in candidates if (namespace is None or o["metadata"].get("namespace") == namespace)
                and label_matches(_labels(o), kwargs.get("label_selector"))]

    # --- nodes ---

    def read_node(self, name: str, **kwargs: Any) -> dict[str, Any]:
        def answer() -> dict[str, Any]:
            found = self.server.get(NODES, "", name)
            if found is None:
                raise _error(404, "Not Found")
            return _copy(found)
        return self._call("read_node", answer)

    def patch_node(self, name: str, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        def answer() -> dict[str, Any]:
            self.server.access.write_node(self.caller, name)
            return _copy(self._patch(NODES, "", name, body))
        return self._call("patch_node", answer)

    def _patch(self, kind: str, namespace: str, name: str, body: Any) -> dict[str, Any]:
        current = self.server.get(kind, namespace, name)
        if current is None:
            raise _error(404, "Not Found")
        body = dict(body)
        metadata = dict(body.get("metadata") or {})
        expected = metadata.pop("resourceVersion", None)
        if expected is not None and expected != current["metadata"].get("resourceVersion"):
            raise _error(409, "Conflict")
        body["metadata"] = metadata
        return self.server.put(kind, _merge(current, body))

    def list_node(self, **kwargs: Any) -> Any:
        return self._list_or_watch("list_node", NODES, None, kwargs, lambda: self._selected(NODES, None, kwargs))

    # --- pods ---

    def list_pod_for_all_namespaces(self, **kwargs: Any) -> Any:
        return self._list_or_watch("list_pod_for_all_namespaces", PODS, None, kwargs,
                                   lambda: self._selected(PODS, None, kwargs))

    def list_namespaced_pod(self, namespace: str, **kwargs: Any) -> Any:
        return self._list_or_watch("list_namespaced_pod", PODS, namespace, kwargs,
                                   lambda: self._selected(PODS, namespace, kwargs))

    def create_namespaced_pod_eviction(self, name: str, namespace: str, body: dict[str, Any], **kwargs: Any) -> Any:
        def answer() -> dict[str, Any]:
            self.server.access.evict(self.caller)
            pod = self.server.get(PODS, namespace, name)
            if pod is None:
                raise _error(404, "Not Found")
            uid = (((body.get("deleteOptions") or {}).get("preconditions")) or {}).get("uid")
            if uid and uid != pod["metadata"].get("uid"):
                raise _error(409, "Conflict")  # the precondition names another pod of that name
            if f"{namespace}/{name}" in self.server.blocked:
                raise _error(429, "Too Many Requests")
            if self.server.on_evict is not None:
                self.server.on_evict(namespace, name)  # an admission webhook's say (KubeVirt's)
            self.server.evictions.append(f"{namespace}/{name}")
            self.server.terminate_pod(namespace, name)
            return {"kind": "Status", "status": "Success"}
        return self._call("create_namespaced_pod_eviction", answer)

    def delete_namespaced_pod(self, name: str, namespace: str, **kwargs: Any) -> Any:
        def answer() -> dict[str, Any]:
            pod = self.server.get(PODS, namespace, name)
            if pod is None:
                raise _error(404, "Not Found")
            self.server.access.delete_pod(self.caller, pod)
            return self.server.terminate_pod(namespace, name)
        return self._call("delete_namespaced_pod", answer)

    # --- config maps ---

    def read_namespaced_config_map(self, name: str, namespace: str, **kwargs: Any) -> dict[str, Any]:
        def answer() -> dict[str, Any]:
            found = self.server.get(CONFIG_MAPS, namespace, name)
            if found is None:
                raise _error(404, "Not Found")
            return _copy(found)
        return self._call("read_namespaced_config_map", answer)

    def create_namespaced_config_map(self, namespace: str, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        def answer() -> dict[str, Any]:
            if self.server.get(CONFIG_MAPS, namespace, body["metadata"]["name"]) is not None:
                raise _error(409, "AlreadyExists")
            stored = _copy(body)
            stored["metadata"]["namespace"] = namespace
            return _copy(self.server.put(CONFIG_MAPS, stored))
        return self._call("create_namespaced_config_map", answer)

    def patch_namespaced_config_map(self, name: str, namespace: str, body: Any, **kwargs: Any) -> dict[str, Any]:
        return self._call("patch_namespaced_config_map",
                          lambda: _copy(self._patch(CONFIG_MAPS, namespace, name, body)))

    def list_namespaced_config_map(self, namespace: str, **kwargs: Any) -> Any:
        return self._list_or_watch("list_namespaced_config_map", CONFIG_MAPS, namespace, kwargs,
                                   lambda: self._selected(CONFIG_MAPS, namespace, kwargs))

    # --- DaemonSets and their revisions ---

    def read_namespaced_daemon_set(self, name: str, namespace: str, **kwargs: Any) -> dict[str, Any]:
        def answer() -> dict[str, Any]:
            found = self.server.get(DAEMON_SETS, namespace, name)
            if found is None:
                raise _error(404, "Not Found")
            return _copy(found)
        return self._call("read_namespaced_daemon_set", answer)

    def list_namespaced_daemon_set(self, namespace: str, **kwargs: Any) -> Any:
        return self._list_or_watch("list_namespaced_daemon_set", DAEMON_SETS, namespace, kwargs,
                                   lambda: self._selected(DAEMON_SETS, namespace, kwargs))

    def list_namespaced_controller_revision(self, namespace: str, label_selector: str = "",
                                            **kwargs: Any) -> dict[str, Any]:
        return self._call("list_namespaced_controller_revision", lambda: {"items": [
            _copy(r) for r in self.server.revisions
            if r["metadata"]["namespace"] == namespace and label_matches(_labels(r), label_selector)]})
