"""`driver-waves`: driver upgrades in ordered waves, each wave behind the gates of the wave before it.

What the operator's upgrade controller does with node state labels and a requeue loop (fact sheet §5.2), done
with Pulumi dependencies and the node agents. Pulumi decides when a wave's driver DaemonSets get their new
template; the DaemonSets are OnDelete, and the node agents then replace each node's outdated driver pod within the
fleet's one disruption budget (`upgrade.maxUnavailable`, shared by every wave, pool and DaemonSet:
components/states/driver/state.py). Every driver DaemonSet belongs to `state-driver`; for each pool of a wave that a
later wave waits for, this component renders a gate Job on that pool, and the later wave's DaemonSets depend on
the gates of every pool of the wave before them. Pulumi awaits a Job, so a wave's DaemonSets are not touched
before the previous wave's gates completed:

    wave 1 DaemonSets ──► gates(wave 1 pools) ──► wave 2 DaemonSets ──► gates(wave 2 pools) ──► ...

A gate is named after its pool (`gpu-stack-gate-<pool>`, components/kit/naming.py), never after its wave: renaming or
reordering waves, or moving a pool to another wave, changes which gates a DaemonSet waits for, not what anything
is called. A gate (node agent `wait-validated`, strict) completes once every driver pod of its pool runs its
DaemonSet's current template (the agents replaced the outdated ones) and the validator is Ready on every node of
the pool (and at least `expectedNodes` of them, when the pool declares it); it fails as soon as a validator or
driver crash-loops (restarts between two polls) or stays unpullable for three minutes (a registry blip is not a
failure), and when the pool's `timeoutSeconds` pass, leaving the later waves untouched. A gate's Job is replaced (re-run) whenever its pool's DaemonSet changes; a pool whose DaemonSet did not change passes
without a run. The last wave is judged by
`stack-validation`, which names every driver DaemonSet.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from typing import Mapping, Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s

from components.kit import naming
from components.kit.builders import Operands, also_after, child_opts, env
from components.kit.deferred import Later
from components.kit.rbac import rbac_set, rule
from components.config import NodePool, Upgrade
from components.states.driver.targets import DriverTarget, targets_of_pool
from components.states.driver.manager import driver_manager_env
from components.states.validation_gate import expected_nodes_env, gate_job, gate_rules, validator_daemonsets

NAME = "gpu-stack-wave-gate"
GATE_DIGEST_ANNOTATION = "gpu-stack/gate-digest"
GATE_POOL_LABEL = "gpu-stack/validates-pool"


def _described(target: DriverTarget) -> dict:
    # Off OpenShift the target describes itself as it did before it could be on OpenShift: no gate re-runs.
    fields = asdict(target)
    if fields["openshift"] is None:
        del fields["openshift"]
    return fields


def gate_digest(targets: Sequence[DriverTarget], upgrade: Upgrade) -> str:
    """Changes exactly when the pool's DaemonSets or the budget they are rolled within change."""
    described = [_described(t) for t in targets]
    material = {
        # One DaemonSet per node image the pool runs; a pool with one keeps the digest's earlier form.
        "target": described[0] if len(described) == 1 else described,
        "managerEnv": driver_manager_env(upgrade),
        "strategy": [upgrade.strategy, upgrade.max_unavailable],
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


class DriverWaves(pulumi.ComponentResource):
    """The gates of the pools a later wave waits for. `gates` resolves each pool's `Later`, on which the later
    waves' DaemonSets (created by `state-driver`) already wait."""

    gates: dict[str, k8s.batch.v1.Job]

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        gate_image: str,
        gated_pools: Sequence[NodePool],
        targets: Sequence[DriverTarget],
        daemonsets: Mapping[str, k8s.apps.v1.DaemonSet],
        upgrade: Upgrade,
        timeout_of: Mapping[str, int],
        gates: Mapping[str, Later],
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:DriverWaves", name, None, opts)
        targets_of = {p.name: targets_of_pool(list(targets), p.name) for p in gated_pools}
        job_names = [naming.pool_gate(p.name) for p in gated_pools]
        role_rules, cluster_rules = gate_rules(job_names)
        watched = {t.daemonset for p in gated_pools for t in targets_of[p.name]}
        for pool in gated_pools:
            watched.update(validator_daemonsets(dra=targets_of[pool.name][0].dra))
        role_rules.append(rule(["apps"], ["daemonsets"], ["get"], sorted(watched)))
        child = child_opts(self, depends_on)
        rbac = rbac_set(NAME, ops.namespace, openshift=ops.openshift, role_rules=role_rules, cluster_role_rules=cluster_rules, opts=child)
        self.gates = {}
        for pool in gated_pools:
            pool_targets = targets_of[pool.name]
            target = pool_targets[0]  # a pool's DaemonSets share its allocation, so its validators
            gate = gate_job(
                naming.pool_gate(pool.name),
                ops,
                gate_image,
                mode="strict",
                timeout_seconds=timeout_of[pool.name],
                labels={GATE_POOL_LABEL: pool.name},
                annotations={GATE_DIGEST_ANNOTATION: gate_digest(pool_targets, upgrade)},
                extra_env=[
                    env("POOLS", pool.name),
                    env("DRIVER_DAEMONSETS", ",".join(t.daemonset for t in pool_targets)),
                    env("VALIDATOR_DAEMONSETS", ",".join(validator_daemonsets(dra=target.dra))),
                    *expected_nodes_env([pool]),
                    *([env("DRA_VALIDATOR", "true")] if target.dra else []),
                ],
                service_account=NAME,
                opts=also_after(child, *rbac.resources, *(daemonsets[t.daemonset] for t in pool_targets)),
            )
            self.gates[pool.name] = gate
            gates[pool.name].resolve(gate)
        self.register_outputs({"gates": job_names})
