"""Validation verdict (gate.py) against recorded Node and Pod objects."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpustack_agent.gate import gate
from gpustack_agent.gate.gate import evaluate
from gpustack_agent.model.labels import desired_patch


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


def test_no_gpu_nodes_settles_only_an_advisory_gate(validator_pods):
    result = evaluate([], validator_pods)

    assert result == {"status": "no-gpu-nodes", "gpuNodes": 0, "validatedNodes": 0, "notValidated": []}
    assert gate.is_settled(result, gate.ADVISORY) and gate.exit_code(result, gate.ADVISORY) == 0
    # A strict gate that judged nothing vouches for nothing: it keeps looking, and fails at its timeout.
    assert not gate.is_settled(result, gate.STRICT) and gate.exit_code(result, gate.STRICT) == 1


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
        ("no-gpu-nodes", "strict", 1),
        ("not-validated", "strict", 1),
        ("failed", "strict", 1),
        ("validated", "advisory", 0),
        ("no-gpu-nodes", "advisory", 0),
        ("not-validated", "advisory", 0),
        ("failed", "advisory", 0),
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


# --- driver upgrade waves: POOLS and DRIVER_DAEMONSETS ------------------------

A100_DS = "nvidia-driver-daemonset-a100"
H100_DS = "nvidia-driver-daemonset-h100"
H100_NODE = "ip-10-0-40-7.ec2.internal"


@pytest.fixture
def driver_daemonsets(load_fixture) -> dict[str, dict[str, Any]]:
    """a100: rolled out; h100: rolling, 1 of 3 nodes updated and 2 of 3 available."""
    return {ds["metadata"]["name"]: ds for ds in load_fixture("daemonsets-driver")["items"]}


def rolled_out(daemonset: dict[str, Any]) -> dict[str, Any]:
    daemonset = copy.deepcopy(daemonset)
    desired = daemonset["status"]["desiredNumberScheduled"]
    daemonset["status"].update(updatedNumberScheduled=desired, numberAvailable=desired, numberReady=desired)
    daemonset["status"].pop("numberUnavailable", None)
    return daemonset


def ready_validator_on(validator_pods: list[dict[str, Any]], node_name: str) -> dict[str, Any]:
    pod = copy.deepcopy(validator_pods[0])
    pod["spec"]["nodeName"] = node_name
    return pod


def test_node_selector_narrows_to_the_wave_pools():
    assert gate.node_selector() == gate.GPU_NODE_SELECTOR
    assert gate.node_selector(("a100", "h100")) == (
        "nvidia.com/gpu.present=true,nvidia.com/gpu.deploy.operator-validator=true,gpu-stack/pool in (a100,h100)"
    )


def test_rolled_out_daemonset_is_done(driver_daemonsets):
    assert gate.daemonset_rollout(A100_DS, driver_daemonsets[A100_DS]) == {
        "daemonset": A100_DS, "desired": 2, "updated": 2, "available": 2, "done": True,
    }


def test_rolling_daemonset_says_how_far_it_got(driver_daemonsets):
    assert gate.daemonset_rollout(H100_DS, driver_daemonsets[H100_DS]) == {
        "daemonset": H100_DS, "desired": 3, "updated": 1, "available": 2, "done": False,
        "reason": "updated 1/3, available 2/3",
    }


def test_updated_but_not_yet_available_is_not_done(driver_daemonsets):
    daemonset = rolled_out(driver_daemonsets[H100_DS])
    daemonset["status"]["numberAvailable"] = 2

    assert gate.daemonset_rollout(H100_DS, daemonset)["reason"] == "available 2/3"


def test_counters_of_an_unobserved_generation_are_not_trusted(driver_daemonsets):
    # `pulumi up` just changed the template; the status still shows the old rollout as complete.
    daemonset = copy.deepcopy(driver_daemonsets[A100_DS])
    daemonset["metadata"]["generation"] = 4

    assert gate.daemonset_rollout(A100_DS, daemonset) == {
        "daemonset": A100_DS, "desired": 2, "updated": 2, "available": 2, "done": False,
        "reason": "generation 4 not observed yet (observed 3)",
    }


def test_missing_status_counters_count_as_zero(driver_daemonsets):
    fresh = copy.deepcopy(driver_daemonsets[H100_DS])
    fresh["metadata"]["generation"] = 1
    fresh["status"] = {"currentNumberScheduled": 0, "desiredNumberScheduled": 3, "numberMisscheduled": 0,
                       "numberReady": 0, "observedGeneration": 1}
    no_status = copy.deepcopy(fresh)
    del no_status["status"]

    assert gate.daemonset_rollout(H100_DS, fresh) == {
        "daemonset": H100_DS, "desired": 3, "updated": 0, "available": 0, "done": False,
        "reason": "updated 0/3, available 0/3",
    }
    assert gate.daemonset_rollout(H100_DS, no_status)["reason"] == "generation 1 not observed yet (observed 0)"


def test_daemonset_that_does_not_exist_is_not_found():
    assert gate.daemonset_rollout(H100_DS, None) == {
        "daemonset": H100_DS, "desired": 0, "updated": 0, "available": 0, "done": False, "reason": "not found",
    }


def test_rollout_in_progress_is_not_validated_even_with_ready_validators(load_fixture, validator_pods,
                                                                        driver_daemonsets):
    # The rolling update has not reached this node yet: its validator, from the old driver, is Ready.
    pods = [ready_validator_on(validator_pods, H100_NODE)]

    result = evaluate([load_fixture("node-h100-mig-paused")], pods, pools=["h100"],
                      daemonsets={H100_DS: driver_daemonsets[H100_DS]})

    assert result == {
        "status": "not-validated",
        "gpuNodes": 1,
        "validatedNodes": 1,
        "notValidated": [],
        "pools": ["h100"],
        "driverRollout": [
            {"daemonset": H100_DS, "desired": 3, "updated": 1, "available": 2, "done": False,
             "reason": "updated 1/3, available 2/3"},
        ],
    }
    assert not gate.is_settled(result, gate.STRICT)


def test_missing_daemonset_is_not_validated_and_never_no_gpu_nodes(load_fixture, validator_pods, driver_daemonsets):
    result = evaluate([], validator_pods, pools=["a100"],
                      daemonsets={A100_DS: driver_daemonsets[A100_DS], "nvidia-driver-daemonset-l4": None})

    assert result["status"] == "not-validated"
    assert result["driverRollout"] == [
        {"daemonset": A100_DS, "desired": 2, "updated": 2, "available": 2, "done": True},
        {"daemonset": "nvidia-driver-daemonset-l4", "desired": 0, "updated": 0, "available": 0, "done": False,
         "reason": "not found"},
    ]
    assert gate.exit_code(result, gate.STRICT) == 1


def test_rolled_out_but_validator_not_ready_on_a_wave_node(load_fixture, validator_pods, driver_daemonsets):
    result = evaluate([load_fixture("node-h100-mig-paused")], validator_pods, pools=["h100"],
                      daemonsets={H100_DS: rolled_out(driver_daemonsets[H100_DS])})

    assert result == {
        "status": "not-validated",
        "gpuNodes": 1,
        "validatedNodes": 0,
        "notValidated": [{"node": H100_NODE, "reason": "validator not ready: toolkit-validation"}],
        "pools": ["h100"],
        "driverRollout": [{"daemonset": H100_DS, "desired": 3, "updated": 3, "available": 3, "done": True}],
    }


def test_nodes_outside_the_pools_are_ignored(load_fixture, validator_pods, driver_daemonsets):
    nodes = [
        load_fixture("node-a100-labelled"),    # in the wave, Ready validator
        load_fixture("node-h100-mig-paused"),  # next wave, validator not Ready
        load_fixture("node-g5-unpooled"),      # pool l4, no validator pod
    ]

    result = evaluate(nodes, validator_pods, pools=["a100"], daemonsets={A100_DS: driver_daemonsets[A100_DS]})

    assert result == {
        "status": "validated",
        "gpuNodes": 1,
        "validatedNodes": 1,
        "notValidated": [],
        "pools": ["a100"],
        "driverRollout": [{"daemonset": A100_DS, "desired": 2, "updated": 2, "available": 2, "done": True}],
    }


def test_wave_with_every_rollout_done_and_every_validator_ready_is_validated(load_fixture, validator_pods,
                                                                            driver_daemonsets):
    nodes = [load_fixture("node-a100-labelled"), load_fixture("node-h100-mig-paused")]
    pods = [validator_pods[0], ready_validator_on(validator_pods, H100_NODE)]
    daemonsets = {A100_DS: driver_daemonsets[A100_DS], H100_DS: rolled_out(driver_daemonsets[H100_DS])}

    result = evaluate(nodes, pods, pools=["a100", "h100"], daemonsets=daemonsets)

    assert result == {
        "status": "validated",
        "gpuNodes": 2,
        "validatedNodes": 2,
        "notValidated": [],
        "pools": ["a100", "h100"],
        "driverRollout": [
            {"daemonset": A100_DS, "desired": 2, "updated": 2, "available": 2, "done": True},
            {"daemonset": H100_DS, "desired": 3, "updated": 3, "available": 3, "done": True},
        ],
    }
    assert gate.is_settled(result, gate.STRICT)


def test_no_wave_nodes_and_every_rollout_done_is_no_gpu_nodes(driver_daemonsets):
    empty = copy.deepcopy(driver_daemonsets[A100_DS])
    empty["status"].update(currentNumberScheduled=0, desiredNumberScheduled=0, numberReady=0)
    del empty["status"]["numberAvailable"], empty["status"]["updatedNumberScheduled"]

    result = evaluate([], [], pools=["a100"], daemonsets={A100_DS: empty})

    assert result == {
        "status": "no-gpu-nodes",
        "gpuNodes": 0,
        "validatedNodes": 0,
        "notValidated": [],
        "pools": ["a100"],
        "driverRollout": [{"daemonset": A100_DS, "desired": 0, "updated": 0, "available": 0, "done": True}],
    }
    assert gate.exit_code(result, gate.ADVISORY) == 0


def test_unavailable_result_names_the_pools():
    assert gate.unavailable_result("connection refused", ["a100"]) == {
        "status": "not-validated", "gpuNodes": 0, "validatedNodes": 0, "notValidated": [],
        "error": "connection refused", "pools": ["a100"],
    }


# --- VM nodes: the sandbox validator (SANDBOX_VALIDATOR) -----------------------

VM_NODE = "ip-10-0-64-10.ec2.internal"        # sandbox validator Ready
VM_NODE_STUCK = "ip-10-0-64-11.ec2.internal"  # sandbox validator on vfio-pci-validation


@pytest.fixture
def sandbox_pods(load_fixture) -> list[dict[str, Any]]:
    return load_fixture("pods-sandbox-validators")["items"]


@pytest.fixture
def vm_node(load_fixture) -> dict[str, Any]:
    return load_fixture("node-passthrough-vm")


def on_node(pod: dict[str, Any], node_name: str) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["spec"]["nodeName"] = node_name
    return pod


def test_sandbox_node_selector_narrows_to_the_wave_pools():
    assert gate.node_selector(sandbox=True) == gate.SANDBOX_NODE_SELECTOR == (
        "nvidia.com/gpu.present=true,nvidia.com/gpu.deploy.sandbox-validator=true"
    )
    assert gate.node_selector(("passthrough",), sandbox=True) == (
        "nvidia.com/gpu.present=true,nvidia.com/gpu.deploy.sandbox-validator=true,gpu-stack/pool in (passthrough)"
    )
    assert gate.SANDBOX_VALIDATOR_POD_SELECTOR == "app=nvidia-sandbox-validator"


def test_recorded_vm_node_is_what_the_agent_leaves_on_a_passthrough_node(vm_node, pool_config):
    labels = vm_node["metadata"]["labels"]

    assert desired_patch(vm_node, pool_config) is None
    assert labels["nvidia.com/gpu.deploy.sandbox-validator"] == "true"
    assert "nvidia.com/gpu.deploy.operator-validator" not in labels


def test_vm_node_with_a_ready_sandbox_validator_is_validated(vm_node, validator_pods, sandbox_pods):
    result = evaluate([], validator_pods, sandbox_nodes=[vm_node], sandbox_pods=sandbox_pods)

    assert result == {"status": "validated", "gpuNodes": 1, "validatedNodes": 1, "notValidated": [],
                      "sandboxNodes": 1}
    assert list(result) == ["status", "gpuNodes", "validatedNodes", "notValidated", "sandboxNodes"]


def test_mixed_container_and_vm_cluster_names_each_node_that_is_not_validated(load_fixture, vm_node,
                                                                             validator_pods, sandbox_pods):
    nodes = [load_fixture("node-a100-labelled"), load_fixture("node-h100-mig-paused")]
    vm_nodes = [vm_node, renamed(vm_node, VM_NODE_STUCK), renamed(vm_node, "ip-10-0-64-12.ec2.internal")]

    result = evaluate(nodes, validator_pods, sandbox_nodes=vm_nodes, sandbox_pods=sandbox_pods)

    assert result == {
        "status": "not-validated",
        "gpuNodes": 5,
        "validatedNodes": 2,
        "notValidated": [
            {"node": "ip-10-0-40-7.ec2.internal", "reason": "validator not ready: toolkit-validation"},
            {"node": VM_NODE_STUCK, "reason": "sandbox validator not ready: vfio-pci-validation"},
            {"node": "ip-10-0-64-12.ec2.internal", "reason": "no sandbox validator pod"},
        ],
        "sandboxNodes": 3,
    }


def test_each_kind_of_node_is_vouched_for_only_by_its_own_validator(load_fixture, vm_node, validator_pods,
                                                                     sandbox_pods):
    # A Ready operator validator on the VM node, a Ready sandbox validator on the container node.
    container_node = load_fixture("node-a100-labelled")
    pods = [on_node(validator_pods[0], VM_NODE)]
    vm_pods = [on_node(sandbox_pods[0], container_node["metadata"]["name"])]

    result = evaluate([container_node], pods, sandbox_nodes=[vm_node], sandbox_pods=vm_pods)

    assert result["notValidated"] == [
        {"node": "ip-10-0-12-35.ec2.internal", "reason": "no validator pod"},
        {"node": VM_NODE, "reason": "no sandbox validator pod"},
    ]
    assert result["status"] == "not-validated"


def test_sandbox_validator_is_judged_like_the_operator_validator(vm_node, sandbox_pods):
    # A terminating Ready pod from the previous rollout next to the new one, and a
    # pod with no init statuses yet.
    old = on_node(sandbox_pods[0], VM_NODE_STUCK)
    old["metadata"]["deletionTimestamp"] = "2025-06-02T10:03:30Z"
    new = sandbox_pods[1]
    unscheduled = on_node(sandbox_pods[1], VM_NODE)
    unscheduled["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}

    result = evaluate([], [], sandbox_nodes=[vm_node, renamed(vm_node, VM_NODE_STUCK)],
                      sandbox_pods=[old, new, unscheduled])

    assert result["notValidated"] == [
        {"node": VM_NODE, "reason": "sandbox validator not ready"},
        {"node": VM_NODE_STUCK, "reason": "sandbox validator not ready: vfio-pci-validation"},
    ]


@pytest.mark.parametrize(
    ("operator_ready", "sandbox_ready", "reason"),
    [
        (True, True, None),
        (True, False, "sandbox validator not ready: vfio-pci-validation"),
        (False, True, "validator not ready: toolkit-validation"),
        (False, False, "validator not ready: toolkit-validation; sandbox validator not ready: vfio-pci-validation"),
    ],
)
def test_node_labelled_for_both_validators_needs_both_ready(load_fixture, validator_pods, sandbox_pods,
                                                            operator_ready, sandbox_ready, reason):
    node = load_fixture("node-h100-mig-paused")
    node["metadata"]["labels"]["nvidia.com/gpu.deploy.sandbox-validator"] = "true"
    pods = [on_node(validator_pods[0], H100_NODE)] if operator_ready else [validator_pods[1]]
    vm_pods = [on_node(sandbox_pods[0 if sandbox_ready else 1], H100_NODE)]

    result = evaluate([node], pods, sandbox_nodes=[node], sandbox_pods=vm_pods)

    assert result == {
        "status": "validated" if reason is None else "not-validated",
        "gpuNodes": 1,
        "validatedNodes": 1 if reason is None else 0,
        "notValidated": [] if reason is None else [{"node": H100_NODE, "reason": reason}],
        "sandboxNodes": 1,
    }


def test_vm_nodes_outside_the_pools_are_ignored(load_fixture, vm_node, validator_pods, sandbox_pods):
    other_pool = renamed(vm_node, VM_NODE_STUCK)
    other_pool["metadata"]["labels"]["gpu-stack/pool"] = "passthrough-l40s"

    result = evaluate([load_fixture("node-a100-labelled")], validator_pods, pools=["passthrough"],
                      sandbox_nodes=[vm_node, other_pool], sandbox_pods=sandbox_pods)

    assert result == {"status": "validated", "gpuNodes": 1, "validatedNodes": 1, "notValidated": [],
                      "sandboxNodes": 1, "pools": ["passthrough"]}


def test_vm_nodes_and_a_driver_wave_together(vm_node, sandbox_pods, driver_daemonsets):
    result = evaluate([], [], pools=["passthrough"], daemonsets={A100_DS: driver_daemonsets[A100_DS]},
                      sandbox_nodes=[renamed(vm_node, VM_NODE_STUCK)], sandbox_pods=sandbox_pods)

    assert list(result) == ["status", "gpuNodes", "validatedNodes", "notValidated", "sandboxNodes", "pools",
                            "driverRollout"]
    assert (result["status"], result["gpuNodes"], result["sandboxNodes"]) == ("not-validated", 1, 1)


def test_no_container_or_vm_nodes_is_no_gpu_nodes(sandbox_pods):
    result = evaluate([], [], sandbox_nodes=[], sandbox_pods=sandbox_pods)

    assert result == {"status": "no-gpu-nodes", "gpuNodes": 0, "validatedNodes": 0, "notValidated": [],
                      "sandboxNodes": 0}


def test_without_sandbox_nodes_the_verdict_is_unchanged(load_fixture, validator_pods, sandbox_pods):
    nodes = [load_fixture("node-a100-labelled"), load_fixture("node-h100-mig-paused")]
    # Sandbox pods on the very nodes judged: without sandbox_nodes they play no part.
    vm_pods = [on_node(sandbox_pods[0], H100_NODE)]

    assert evaluate(nodes, validator_pods, sandbox_pods=vm_pods) == evaluate(nodes, validator_pods) == {
        "status": "not-validated",
        "gpuNodes": 2,
        "validatedNodes": 1,
        "notValidated": [{"node": H100_NODE, "reason": "validator not ready: toolkit-validation"}],
    }


def test_unavailable_result_with_sandbox_validator_counts_no_vm_nodes():
    result = gate.unavailable_result("connection refused", ["passthrough"], sandbox=True)

    assert list(result) == ["status", "gpuNodes", "validatedNodes", "notValidated", "sandboxNodes", "error", "pools"]
    assert result["sandboxNodes"] == 0
    assert "sandboxNodes" not in gate.unavailable_result("connection refused", ["passthrough"])


def test_the_verdict_counts_the_nodes_in_each_upgrade_state(load_fixture, validator_pods):
    done = load_fixture("node-a100-labelled")
    done["metadata"]["labels"]["gpu-stack/upgrade-state"] = "upgrade-done"
    draining = renamed(load_fixture("node-a100-labelled"), "ip-10-0-12-98.ec2.internal")
    draining["metadata"]["labels"]["gpu-stack/upgrade-state"] = "drain-required"
    draining["spec"]["unschedulable"] = True  # cordoned by its agent: skipped, and still counted
    waiting = renamed(load_fixture("node-a100-labelled"), "ip-10-0-12-99.ec2.internal")
    waiting["metadata"]["labels"]["gpu-stack/upgrade-state"] = "upgrade-required"

    result = evaluate([done, draining, waiting], validator_pods)

    assert result["upgradeStates"] == {"drain-required": 1, "upgrade-done": 1, "upgrade-required": 1}
    assert "upgradeStates" not in evaluate([load_fixture("node-a100-labelled")], validator_pods)
