"""Validation verdict (gate.py) against recorded Node and Pod objects."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpustack_agent import gate
from gpustack_agent.gate import evaluate
from gpustack_agent.labels import desired_patch


def renamed(node: dict[str, Any], name: str) -> dict[str, Any]:
    node = copy.deepcopy(node)
    node["metadata"]["name"] = name
    return node


@pytest.fixture
def validator_pods(load_fixture) -> list[dict[str, Any]]:
    return load_fixture("pods-validators")["items"]


def test_mixed_cluster_lists_each_node_that_is_not_validated(load_fixture, validator_pods):
    nodes = [
        load_fixture("node-a100-labelled"),          # Ready validator
        load_fixture("node-h100-mig-paused"),        # toolkit-validation still running
        renamed(load_fixture("node-a100-labelled"), "ip-10-0-12-99.ec2.internal"),  # no pod yet
    ]

    result = evaluate(nodes, validator_pods)

    assert result == {
        "status": "not-validated",
        "gpuNodes": 3,
        "validatedNodes": 1,
        "notValidated": [
            {"node": "ip-10-0-12-99.ec2.internal", "reason": "no validator pod"},
            {"node": "ip-10-0-40-7.ec2.internal", "reason": "validator not ready: toolkit-validation"},
        ],
    }


def test_waiting_init_container_is_named(load_fixture, apply_patch, pool_config, validator_pods):
    # The fresh a100 node, once the agent labelled it, has a validator stuck in
    # CrashLoopBackOff on driver-validation.
    fresh = load_fixture("node-a100-fresh")
    node = apply_patch(fresh, desired_patch(fresh, pool_config))

    result = evaluate([node], validator_pods)

    assert result["notValidated"] == [
        {"node": "ip-10-0-12-34.ec2.internal", "reason": "validator not ready: driver-validation"}
    ]


def test_all_ready_is_validated(load_fixture, validator_pods):
    result = evaluate([load_fixture("node-a100-labelled")], validator_pods)

    assert result == {"status": "validated", "gpuNodes": 1, "validatedNodes": 1, "notValidated": []}


def test_no_gpu_nodes_counts_as_success(validator_pods):
    result = evaluate([], validator_pods)

    assert result == {"status": "no-gpu-nodes", "gpuNodes": 0, "validatedNodes": 0, "notValidated": []}
    assert gate.is_settled(result)
    assert gate.exit_code(result, gate.STRICT) == 0


def test_unready_pod_without_init_statuses_has_generic_reason(load_fixture, validator_pods):
    pod = copy.deepcopy(validator_pods[1])
    pod["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}

    result = evaluate([load_fixture("node-h100-mig-paused")], [pod])

    assert result["notValidated"] == [{"node": "ip-10-0-40-7.ec2.internal", "reason": "validator not ready"}]


def test_terminating_ready_pod_does_not_validate_and_new_pod_is_reported(load_fixture, validator_pods):
    old = copy.deepcopy(validator_pods[0])
    old["spec"]["nodeName"] = "ip-10-0-40-7.ec2.internal"
    old["metadata"]["deletionTimestamp"] = "2025-06-02T10:02:11Z"
    new = validator_pods[1]  # same node, toolkit-validation running

    result = evaluate([load_fixture("node-h100-mig-paused")], [old, new])

    assert result["status"] == "not-validated"
    assert result["notValidated"][0]["reason"] == "validator not ready: toolkit-validation"


def test_pods_on_other_nodes_are_ignored(load_fixture, validator_pods):
    node = renamed(load_fixture("node-a100-labelled"), "ip-10-0-99-1.ec2.internal")

    assert evaluate([node], validator_pods)["notValidated"] == [
        {"node": "ip-10-0-99-1.ec2.internal", "reason": "no validator pod"}
    ]


@pytest.mark.parametrize(
    ("status", "mode", "code"),
    [
        ("validated", "strict", 0),
        ("no-gpu-nodes", "strict", 0),
        ("not-validated", "strict", 1),
        ("validated", "advisory", 0),
        ("no-gpu-nodes", "advisory", 0),
        ("not-validated", "advisory", 0),
    ],
)
def test_exit_code_by_mode(status, mode, code):
    assert gate.exit_code({"status": status}, mode) == code


def test_unknown_mode_is_an_error():
    with pytest.raises(ValueError, match="MODE"):
        gate.exit_code({"status": "validated"}, "lenient")


def test_unavailable_result_is_a_failure_in_strict_mode():
    result = gate.unavailable_result("connection refused")

    assert result["status"] == "not-validated" and result["error"] == "connection refused"
    assert gate.exit_code(result, gate.STRICT) == 1
