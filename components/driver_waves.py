"""`driver-waves`: driver upgrades in ordered waves, each behind a gate on the wave before it.

What the operator's upgrade controller does with node state labels and a requeue loop (fact sheet §5.2), done
with Pulumi dependencies: `state-driver` holds the first wave's DaemonSets; for every later wave this component
renders a gate Job on the previous wave, and the wave's DaemonSets depend on that Job. Pulumi awaits a Job, so
the next wave's DaemonSets are not touched before the gate completed:

    wave 1 DaemonSets ──► gate(wave 1) ──► wave 2 DaemonSets ──► gate(wave 2) ──► wave 3 DaemonSets ──► ...

A gate (node agent `wait-validated`, strict) completes once every DaemonSet of its wave finished its rolling
update (updated and available on every node it selects) and the validator pod is Ready on every node of the
wave's pools; it fails when that takes longer than the wave's `timeoutSeconds`, and so does `pulumi up`, leaving
the later waves untouched. A gate's Job is replaced (re-run) whenever its wave's DaemonSets change; a wave that
did not change passes its gate without a run. The last wave is judged by `stack-validation`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from typing import Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s

from components._k8s import Operands, also_after, child_opts, env, rbac_set, rule
from components.config import Upgrade
from components.driver import WAVE_LABEL, DriverTarget, ValidatedFiles, driver_daemonset, driver_manager_env
from components.validation_gate import gate_job, gate_rules

NAME = "gpu-stack-wave-gate"
WAVE_DIGEST_ANNOTATION = "gpu-stack/wave-digest"


def gate_name(wave: str) -> str:
    return f"gpu-stack-wave-{wave}-validated"


def wave_digest(targets: Sequence[DriverTarget], upgrade: Upgrade) -> str:
    """Changes exactly when a DaemonSet of the wave changes the way it rolls out."""
    material = {
        "targets": [asdict(t) for t in targets],
        "managerEnv": driver_manager_env(upgrade),
        "strategy": [upgrade.strategy, upgrade.max_unavailable],
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


class DriverWaves(pulumi.ComponentResource):
    gates: dict[str, k8s.batch.v1.Job]
    daemonsets: list[k8s.apps.v1.DaemonSet]

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        gate_image: str,
        targets: Sequence[DriverTarget],
        upgrade: Upgrade,
        validated_files: ValidatedFiles,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:DriverWaves", name, None, opts)
        waves = upgrade.waves
        gated = [w.name for w in waves[:-1]]
        role_rules, cluster_rules = gate_rules([gate_name(w) for w in gated])
        role_rules.append(rule(["apps"], ["daemonsets"], ["get"], [t.daemonset for t in targets if t.wave in gated]))
        child = child_opts(self, depends_on)
        rbac = rbac_set(NAME, ops.namespace, role_rules=role_rules, cluster_role_rules=cluster_rules, opts=child)
        self.gates = {}
        self.daemonsets = []
        previous: list[pulumi.Resource] = []
        for before, wave in zip(waves, waves[1:]):
            wave_before = [t for t in targets if t.wave == before.name]
            gate = gate_job(
                gate_name(before.name),
                ops,
                gate_image,
                mode="strict",
                timeout_seconds=before.timeout_seconds,
                labels={WAVE_LABEL: before.name},
                annotations={WAVE_DIGEST_ANNOTATION: wave_digest(wave_before, upgrade)},
                extra_env=[
                    env("POOLS", ",".join(before.pools)),
                    env("DRIVER_DAEMONSETS", ",".join(t.daemonset for t in wave_before)),
                    *([env("DRA_VALIDATOR", "true")] if any(t.dra for t in wave_before) else []),
                ],
                service_account=NAME,
                opts=also_after(child, *rbac.resources, *previous),
            )
            self.gates[before.name] = gate
            wave_opts = also_after(child, gate)
            wave_sets = [driver_daemonset(ops, t, upgrade, validated_files, wave_opts) for t in targets if t.wave == wave.name]
            self.daemonsets += wave_sets
            previous = [gate, *wave_sets]
        self.register_outputs(
            {"gates": [gate_name(w) for w in self.gates], "daemonsets": [t.daemonset for t in targets if t.wave != waves[0].name]}
        )
