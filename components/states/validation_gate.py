"""Stack validation: did every GPU node end up with a Ready `nvidia-operator-validator` pod?

Operand DaemonSets are not awaited (ordering is per node, fact sheet §1.3), so `pulumi up` learns about node
health here: a Job, run by the node agent image after everything else is applied, polls the validator pods on
the GPU nodes until all are Ready or the stack's timeout passes. Nothing depends on this component, so nothing
the validator needs ever waits on the validator.

Nodes of VM pools are judged by their Ready `nvidia-sandbox-validator` pod instead (`SANDBOX_VALIDATOR`).

The gate waits for every driver DaemonSet (`DRIVER_DAEMONSETS`, the last upgrade wave's included) to finish its
rollout, and for at least `expectedNodes` validated nodes in each pool that declares it. Cordoned and NotReady
nodes are skipped and listed as such; a crash-looping or unpullable validator or driver fails it at once.

- strict: the Job fails when a node is not validated in time, and so does the update; judging no GPU node at all
  is a failure too, unless every judged pool declares `expectedNodes: 0`;
- advisory: the Job always completes and records its verdict in the annotation `gpu-stack/validation`, which
  the program exports as the `validation` stack output.
The Job is replaced whenever the stack's rendered configuration changes, so every effective `pulumi up`
re-checks the fleet; in advisory mode a zero-GPU-node cluster completes at once with `no-gpu-nodes`.
"""

from __future__ import annotations

import json
from typing import Any, Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.batch.v1 import JobSpecArgs
from pulumi_kubernetes.core.v1 import (
    ContainerArgs,
    EnvVarArgs,
    LocalObjectReferenceArgs,
    PodSpecArgs,
    PodTemplateSpecArgs,
    ResourceRequirementsArgs,
)
from pulumi_kubernetes.rbac.v1 import PolicyRuleArgs
from pulumi_kubernetes.meta.v1 import ObjectMetaArgs

from components.catalogs import consts
from components.kit.builders import AGENT_SECURITY, Operands, also_after, child_opts, env, env_from_field, meta
from components.kit.rbac import rbac_set, rule
from components.config import NodePool
from components.states.validator import NAME as VALIDATOR
from components.states.dra_validator import NAME as DRA_VALIDATOR
from components.states.sandbox_validator import NAME as SANDBOX_VALIDATOR

NAME = "gpu-stack-validation"
RESULT_ANNOTATION = "gpu-stack/validation"
DIGEST_ANNOTATION = "gpu-stack/stack-digest"
POLL_SECONDS = 10
# Room for the Job's own start-up and the final patch beyond the validation timeout.
SLACK_SECONDS = 120


def parse_result(annotations: Optional[dict[str, str]]) -> Any:
    raw = (annotations or {}).get(RESULT_ANNOTATION)
    if raw is None:
        return {"status": "unknown", "reason": "the validation Job has not reported (offline render or preview)"}
    return json.loads(raw)


# `pool=N,...`: each judged pool that declares nodePools[].expectedNodes (gpustack's diff report reads it too).
EXPECTED_NODES_ENV = "EXPECTED_NODES"


def expected_nodes_env(pools: Sequence[NodePool]) -> list[EnvVarArgs]:
    """EXPECTED_NODES for the pools that declare how many nodes they have: fewer validated fails the gate."""
    declared = [f"{p.name}={p.expected_nodes}" for p in pools if p.expected_nodes is not None]
    return [env(EXPECTED_NODES_ENV, ",".join(declared))] if declared else []


def gate_rules(job_names: Sequence[str]) -> tuple[list[PolicyRuleArgs], list[PolicyRuleArgs]]:
    """Namespace and cluster rules of a gate Job: read validator pods and nodes, annotate only its own Job."""
    return (
        [rule([""], ["pods"], ["get", "list"]), rule(["batch"], ["jobs"], ["get", "patch"], list(job_names))],
        [rule([""], ["nodes"], ["get", "list"])],
    )


def gate_job(
    name: str,
    ops: Operands,
    image: str,
    *,
    mode: str,
    timeout_seconds: int,
    labels: dict[str, str],
    annotations: dict[str, str],
    extra_env: Sequence[EnvVarArgs] = (),
    service_account: Optional[str] = None,
    opts: pulumi.ResourceOptions,
) -> k8s.batch.v1.Job:
    """A Job running the node agent's `wait-validated`, replaced whenever `annotations` change, so each effective
    `pulumi up` re-checks; its ServiceAccount defaults to `name`. Pulumi awaits the Job, so whatever depends on it waits."""
    budget = timeout_seconds + SLACK_SECONDS
    checker = ContainerArgs(
        name="wait-validated",
        image=image,
        image_pull_policy="IfNotPresent",
        args=["wait-validated"],
        env=[
            env("NAMESPACE", ops.namespace),
            env("TIMEOUT_SECONDS", str(timeout_seconds)),
            env("POLL_SECONDS", str(POLL_SECONDS)),
            env("MODE", mode),
            env_from_field("JOB_NAME", "metadata.labels['job-name']"),
            *extra_env,
        ],
        security_context=AGENT_SECURITY,
        resources=ResourceRequirementsArgs(requests={"cpu": "10m", "memory": "32Mi"}, limits={"memory": "128Mi"}),
        # The agent writes its verdict there; if it dies before, the log's tail stands in, so a failed gate
        # always says why where `kubectl describe` and `pulumi up` look.
        termination_message_policy="FallbackToLogsOnError",
    )
    return k8s.batch.v1.Job(
        name,
        metadata=meta(name, ops.namespace, {"app": name, **labels}, {**annotations, consts.TIMEOUT_SECONDS: str(budget)}),
        spec=JobSpecArgs(
            backoff_limit=0,
            active_deadline_seconds=budget,
            template=PodTemplateSpecArgs(
                metadata=ObjectMetaArgs(labels={"app": name}),
                spec=PodSpecArgs(
                    service_account_name=service_account or name,
                    restart_policy="Never",
                    containers=[checker],
                    image_pull_secrets=[LocalObjectReferenceArgs(name=s) for s in ops.pull_secrets] or None,
                ),
            ),
        ),
        opts=pulumi.ResourceOptions.merge(
            opts,
            pulumi.ResourceOptions(
                # Jobs are immutable: a new digest means a new run, the old one deleted first.
                replace_on_changes=["*"],
                delete_before_replace=True,
                custom_timeouts=pulumi.CustomTimeouts(create=f"{budget}s", update=f"{budget}s"),
            ),
        ),
    )


def validator_daemonsets(*, container: bool = True, sandbox: bool = False, dra: bool = False) -> list[str]:
    """The validator DaemonSets whose pods a gate judges: their own rollout must be finished too, or a Ready pod of
    the old template would vouch for a node (the node agent's VALIDATOR_DAEMONSETS)."""
    return [name for name, judged in ((VALIDATOR, container), (SANDBOX_VALIDATOR, sandbox), (DRA_VALIDATOR, dra))
            if judged]


class ValidationGate(pulumi.ComponentResource):
    job: k8s.batch.v1.Job
    result: pulumi.Output[Any]

    def __init__(
        self,
        name: str,
        *,
        ops: Operands,
        image: str,
        mode: str,
        timeout_seconds: int,
        stack_digest: str,
        driver_daemonsets: Sequence[str] = (),
        pools: Sequence[NodePool] = (),
        sandbox_validator: bool = False,
        dra_validator: bool = False,
        depends_on: Sequence[pulumi.Resource] = (),
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        super().__init__("gpu-stack:index:ValidationGate", name, None, opts)
        child = child_opts(self, depends_on)
        role_rules, cluster_rules = gate_rules([NAME])
        validators = validator_daemonsets(sandbox=sandbox_validator, dra=dra_validator)
        role_rules.append(rule(["apps"], ["daemonsets"], ["get"], sorted({*driver_daemonsets, *validators})))
        rbac = rbac_set(NAME, ops.namespace, openshift=ops.openshift, role_rules=role_rules, cluster_role_rules=cluster_rules, opts=child)
        self.job = gate_job(
            NAME,
            ops,
            image,
            mode=mode,
            timeout_seconds=timeout_seconds,
            labels={"gpu-stack/validates": VALIDATOR},
            annotations={DIGEST_ANNOTATION: stack_digest},
            # VM nodes run NVIDIA's sandbox validator instead; the gate judges them by it
            extra_env=[
                # every wave's drivers, the last one's included: the stack is validated once they all rolled
                *([env("DRIVER_DAEMONSETS", ",".join(driver_daemonsets))] if driver_daemonsets else []),
                env("VALIDATOR_DAEMONSETS", ",".join(validators)),
                *expected_nodes_env(pools),
                *([env("SANDBOX_VALIDATOR", "true")] if sandbox_validator else []),
                # DRA nodes run the DRA validator, whose pods carry the operator validator's app label
                *([env("DRA_VALIDATOR", "true")] if dra_validator else []),
            ],
            opts=also_after(child, *rbac.resources),
        )
        self.result = self.job.metadata.apply(lambda m: parse_result(m.annotations if m else None))
        self.register_outputs({"mode": mode, "result": self.result})
