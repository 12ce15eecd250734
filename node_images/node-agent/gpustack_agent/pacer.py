"""Paced label changes against the API server: the requests behind :mod:`.removal` and :mod:`.leases`.

A :class:`Pacer` is the label loop's reconcile for one node (``kube.run_label_loop(reconcile=pacer)``). With a
version 1 config it applies every change at once, as agents before 0.4.0 did. With ``removal`` (version 2), each
pass over its node:

1. lists the pods in the removal namespace on the node and splits the wanted change (:func:`removal.plan`);
   what needs no slot (additions, value changes, the pool label) is applied at once, in a patch of its own;
2. for a removal of deploy labels without ``drain``, looks for GPU work on the node, and while there is some
   leaves the deploy labels in place (``removal-waiting``, retried next pass);
3. takes a slot of the shared budget (a Lease, :mod:`.leases`), or waits for one (``removal-waiting``);
4. with ``drain``, evicts the GPU work (a PodDisruptionBudget's 429 is retried next pass) and waits until it is
   gone, holding the slot: draining is the disruption the budget bounds, so it never runs on more nodes at once;
5. applies the rest of the change and deletes orphaned driver pods;
6. holds the slot, renewing it, until :func:`removal.hold_reasons` is empty (operand pods gone, the new driver
   pod Ready), then deletes the Lease.

Every request error that is not an answer (404 for a Lease that does not exist, 409 for a slot another node
won, 429 for an eviction a PodDisruptionBudget blocks) propagates to the label loop, which retries transient
errors with jittered backoff and ends the process on the others.
"""

from __future__ import annotations

import datetime
import json
from typing import Any, Callable, Mapping, Sequence

from kubernetes.client.exceptions import ApiException

from . import kube, labels, leases, removal
from . import pods as podinfo

Now = Callable[[], datetime.datetime]
GPU_NODE_SELECTOR = f"{labels.GPU_PRESENT_LABEL}=true"


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


class Pacer:
    """Reconciles one node's labels, pacing removals; keeps, between passes, the Lease the node holds."""

    def __init__(self, core: Any, coordination: Any, *, node_name: str, log: kube.Log, now: Now = utc_now) -> None:
        self.core = core
        self.coordination = coordination
        self.node_name = node_name
        self.log = log
        self.now = now
        # The Lease this node holds, as last read or written; None while it holds none.
        self.slot: dict[str, Any] | None = None
        # Whether this process has looked for a slot it held before it restarted.
        self.resumed = False
        self._last_notice: tuple[str, str] | None = None

    def __call__(self, node: Mapping[str, Any], config_data: Any) -> bool:
        """Reconcile ``node``; returns whether the node holds a slot, so the loop looks again soon."""
        config = config_data if isinstance(config_data, labels.Config) else labels.parse_config(config_data)
        if config.removal is None:
            kube.reconcile_node(self.core, node, config, self.log)
            return False
        self._reconcile(node, config, config.removal)
        return self.slot is not None

    # --- one pass ---------------------------------------------------------------------------------------

    def _reconcile(self, node: Mapping[str, Any], config: labels.Config, rules: labels.Removal) -> None:
        node_pods = self._pods_in(rules.namespace)
        plan = removal.plan(node, config, node_pods)
        if not self.resumed:
            self.resumed = True
            if removal.hold_reasons(removal.labels_after(node, None), node_pods, config):
                self._resume_slot(rules)

        if plan.paced and plan.immediate is not None:
            # What needs no slot goes first, whatever becomes of the rest: a slot can take hours to come, and
            # its requests can fail. Read back, the node's next patch carries the new resourceVersion.
            self._apply(node, plan.immediate)
            node = kube.get_node(self.core, self.node_name)
            plan = removal.plan(node, config, node_pods)

        if not plan.paced:
            self._apply(node, plan.patch)
            # Only with operands=false, which asks for every operand to leave at once.
            self._delete_orphans(rules.namespace, plan.orphans)
            self._hold_or_release(removal.labels_after(node, plan.patch), node_pods, config, renew=True)
            return

        step = self._prepare(plan, rules)
        if step == "go":
            self._apply(node, plan.patch, paced=True)
            self._delete_orphans(rules.namespace, plan.orphans)
            self._last_notice = None
            self._hold_or_release(removal.labels_after(node, plan.patch), node_pods, config, renew=False)
        elif step == "wait":
            # A slot still held for an earlier change is no reason to hold it while this one waits.
            self._hold_or_release(removal.labels_after(node, None), node_pods, config, renew=True)

    def _prepare(self, plan: removal.Plan, rules: labels.Removal) -> str:
        """"go" when the paced change may be applied now, "drain" while its slot is held and GPU work is being
        evicted, "wait" while it waits for GPU work to end or for a slot."""
        if plan.removing and not rules.drain:
            work = self._gpu_work(rules.namespace)
            if work:
                self._notice("warning", "removal-waiting", reason="gpu work on the node", drain=False,
                             labels=sorted(plan.removing), **removal.named_pods(work))
                return "wait"
        if not self._take_slot(rules, plan):
            return "wait"
        if plan.removing and rules.drain:
            work = self._gpu_work(rules.namespace)
            if work:
                self._evict(work)
                return "drain"
        return "go"

    def _hold_or_release(self, node_labels: Mapping[str, str], node_pods: Sequence[Mapping[str, Any]],
                         config: labels.Config, *, renew: bool) -> None:
        if self.slot is None:
            return
        reasons = removal.hold_reasons(node_labels, node_pods, config)
        if not reasons:
            self._release()
            return
        if renew:
            self._renew()
        if self.slot is not None:
            self._notice("info", "removal-holding", lease=self._slot_name(), waitingFor=reasons)

    # --- slots ------------------------------------------------------------------------------------------

    def _slot_name(self) -> str:
        return ((self.slot or {}).get("metadata") or {}).get("name", "")

    def _budget(self, rules: labels.Removal) -> int:
        if isinstance(rules.max_unavailable, int):
            return rules.max_unavailable
        gpu_nodes = kube.list_nodes(self.core, GPU_NODE_SELECTOR)
        return leases.budget(rules.max_unavailable, len(gpu_nodes))

    def _read_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            lease = self.coordination.read_namespaced_lease(
                name=name, namespace=namespace, _request_timeout=kube.REQUEST_TIMEOUT_SECONDS)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return kube.as_dict(self.coordination, lease)

    def _resume_slot(self, rules: labels.Removal) -> None:
        """After a restart in the middle of a change: carry on with the slot this node still holds, if any.
        Looked for only when the node is visibly in transition, since it costs one read per slot."""
        for index in range(self._budget(rules)):
            lease = self._read_lease(rules.namespace, leases.lease_name(index))
            if leases.holder(lease) == self.node_name:
                self.slot = lease
                self.log({"level": "info", "event": "removal-slot-resumed", "node": self.node_name,
                          "lease": self._slot_name()})
                return

    def _take_slot(self, rules: labels.Removal, plan: removal.Plan) -> bool:
        if self.slot is not None and self._renew():
            return True
        slots = self._budget(rules)
        holders: set[str] = set()
        for index in range(slots):
            name = leases.lease_name(index)
            current = self._read_lease(rules.namespace, name)
            now = self.now()
            action = leases.slot_action(current, self.node_name, now)
            if action is None:
                holders.add(leases.holder(current) or "")
                continue
            body = leases.lease_body(name, rules.namespace, self.node_name, now, current)
            try:
                if action == leases.CREATE:
                    written = self.coordination.create_namespaced_lease(
                        namespace=rules.namespace, body=body, _request_timeout=kube.REQUEST_TIMEOUT_SECONDS)
                else:
                    written = self.coordination.replace_namespaced_lease(
                        name=name, namespace=rules.namespace, body=body,
                        _request_timeout=kube.REQUEST_TIMEOUT_SECONDS)
            except ApiException as exc:
                if exc.status == 409:
                    # Another node created or took it over between the read and the write.
                    continue
                raise
            self.slot = kube.as_dict(self.coordination, written)
            record: dict[str, Any] = {"level": "info", "event": "removal-slot-acquired", "node": self.node_name,
                                      "lease": name, "action": action, "budget": slots,
                                      "labels": sorted(plan.removing)}
            if plan.driver_change:
                record["driver"] = {"old": plan.driver_change[0], "new": plan.driver_change[1]}
            if plan.orphans:
                record["orphanedDriverPods"] = list(plan.orphans)
            self.log(record)
            return True
        self._notice("warning", "removal-waiting", reason="every removal slot is held", budget=slots,
                     holders=sorted(holders))
        return False

    def _renew(self) -> bool:
        """Renew the held slot; False (and no slot) if another node has it now or it is gone."""
        assert self.slot is not None
        metadata = self.slot.get("metadata") or {}
        name, namespace = metadata.get("name", ""), metadata.get("namespace", "")
        body = leases.lease_body(name, namespace, self.node_name, self.now(), self.slot)
        try:
            self.slot = kube.as_dict(self.coordination, self.coordination.replace_namespaced_lease(
                name=name, namespace=namespace, body=body, _request_timeout=kube.REQUEST_TIMEOUT_SECONDS))
            return True
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise
        current = self._read_lease(namespace, name)
        if leases.holder(current) == self.node_name:
            # Changed under us but still ours: renewed next pass, from this read.
            self.slot = current
            return True
        # Our renewals stopped long enough for another node to take it over, or someone deleted it.
        self.log({"level": "warning", "event": "removal-slot-lost", "node": self.node_name, "lease": name,
                  "holder": leases.holder(current)})
        self.slot = None
        return False

    def _release(self) -> None:
        assert self.slot is not None
        metadata = self.slot.get("metadata") or {}
        name = metadata.get("name", "")
        try:
            # The precondition keeps a slot another node has taken over from being deleted under it.
            self.coordination.delete_namespaced_lease(
                name=name, namespace=metadata.get("namespace", ""),
                body={"preconditions": {"resourceVersion": metadata.get("resourceVersion")}},
                _request_timeout=kube.REQUEST_TIMEOUT_SECONDS)
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise
        self.slot = None
        self._last_notice = None
        self.log({"level": "info", "event": "removal-released", "node": self.node_name, "lease": name})

    # --- pods and the node ------------------------------------------------------------------------------

    def _pods_in(self, namespace: str) -> list[dict[str, Any]]:
        result = self.core.list_namespaced_pod(
            namespace=namespace, field_selector=f"spec.nodeName={self.node_name}",
            _request_timeout=kube.REQUEST_TIMEOUT_SECONDS)
        return kube.as_dict(self.core, result).get("items") or []

    def _gpu_work(self, removal_namespace: str) -> list[Mapping[str, Any]]:
        result = self.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={self.node_name}", _request_timeout=kube.REQUEST_TIMEOUT_SECONDS)
        return removal.gpu_work(kube.as_dict(self.core, result).get("items") or [], removal_namespace)

    def _evict(self, work: Sequence[Mapping[str, Any]]) -> None:
        self._notice("info", "removal-draining", **removal.named_pods(work))
        for pod in work:
            if podinfo.is_terminating(pod):
                continue
            metadata = podinfo.metadata(pod)
            body = {"apiVersion": "policy/v1", "kind": "Eviction",
                    "metadata": {"name": metadata.get("name"), "namespace": metadata.get("namespace")}}
            try:
                self.core.create_namespaced_pod_eviction(
                    name=metadata.get("name"), namespace=metadata.get("namespace"), body=body,
                    _request_timeout=kube.REQUEST_TIMEOUT_SECONDS)
            except ApiException as exc:
                if exc.status == 429:
                    # A PodDisruptionBudget allows no disruption now; the next pass asks again.
                    self.log({"level": "warning", "event": "removal-eviction-blocked", "node": self.node_name,
                              "pod": podinfo.ref(pod), "status": 429})
                elif exc.status != 404:
                    raise

    def _delete_orphans(self, namespace: str, names: Sequence[str]) -> None:
        for name in names:
            try:
                self.core.delete_namespaced_pod(
                    name=name, namespace=namespace, _request_timeout=kube.REQUEST_TIMEOUT_SECONDS)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                continue
            self.log({"level": "info", "event": "driver-pod-deleted", "node": self.node_name,
                      "pod": f"{namespace}/{name}", "reason": "orphaned: its DaemonSet was deleted"})

    def _apply(self, node: Mapping[str, Any], patch: Mapping[str, Any] | None, *, paced: bool = False) -> None:
        if paced:
            kube.apply_label_patch(self.core, node, patch, self.log, paced=True)
        else:
            kube.apply_label_patch(self.core, node, patch, self.log)

    def _notice(self, level: str, event: str, **fields: Any) -> None:
        """Log a waiting state once, not on every pass: a removal can wait for hours of GPU work."""
        key = (event, json.dumps(fields, sort_keys=True))
        if key != self._last_notice:
            self._last_notice = key
            self.log({"level": level, "event": event, "node": self.node_name, **fields})
