"""What the gate skips, how many nodes it demands, and what fails it at once (gate.py, and job.run_gate for the
polling), against recorded Node and Pod objects."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from agenttest import Recorder, container_status, driver_pod, fake_api, model, renamed, terminating
from gpustack_agent.gate import gate
from gpustack_agent.gate.gate import evaluate
from gpustack_agent.gate import job

A100_NODE = "ip-10-0-12-35.ec2.internal"      # Ready validator
H100_NODE = "ip-10-0-40-7.ec2.internal"       # validator on toolkit-validation
FRESH_NODE = "ip-10-0-12-34.ec2.internal"     # validator crash-looping on driver-validation
A100_DS = "nvidia-driver-daemonset-a100"


@pytest.fixture
def validator_pods(load_fixture) -> list[dict[str, Any]]:
    return load_fixture("pods-validators")["items"]


@pytest.fixture
def a100(load_fixture) -> dict[str, Any]:
    return load_fixture("node-a100-labelled")


def cordoned(node: dict[str, Any]) -> dict[str, Any]:
    node = copy.deepcopy(node)
    node.setdefault("spec", {})["unschedulable"] = True
    return node


def not_ready(node: dict[str, Any], status: str = "False") -> dict[str, Any]:
    node = copy.deepcopy(node)
    for condition in node["status"]["conditions"]:
        if condition["type"] == "Ready":
            condition["status"] = status
    return node


def stuck(pod: dict[str, Any], container: str, state: dict[str, Any], *, init: bool = True) -> dict[str, Any]:
    """`pod` with `container` (an init container unless `init` is false) in `state`."""
    pod = copy.deepcopy(pod)
    for status in pod["status"]["initContainerStatuses" if init else "containerStatuses"]:
        if status["name"] == container:
            status["state"] = state
    return pod


def waiting(reason: str) -> dict[str, Any]:
    return {"waiting": {"reason": reason, "message": "..."}}


# --- skipped nodes ---------------------------------------------------------------------------------------------


def test_cordoned_and_not_ready_nodes_are_listed_as_skipped_and_not_judged(load_fixture, a100, validator_pods):
    nodes = [a100, cordoned(load_fixture("node-h100-mig-paused")),
             not_ready(renamed(a100, "ip-10-0-12-90.ec2.internal")),
             not_ready(renamed(a100, "ip-10-0-12-91.ec2.internal"), status="Unknown")]

    result = evaluate(nodes, validator_pods)

    assert result == {
        "status": "validated", "gpuNodes": 1, "validatedNodes": 1, "notValidated": [],
        "skipped": [{"node": "ip-10-0-12-90.ec2.internal", "reason": "not ready"},
                    {"node": "ip-10-0-12-91.ec2.internal", "reason": "not ready"},
                    {"node": H100_NODE, "reason": "cordoned"}],
    }


def test_a_node_without_a_ready_condition_is_not_ready(a100, validator_pods):
    del a100["status"]["conditions"]

    assert evaluate([a100], validator_pods)["skipped"] == [{"node": A100_NODE, "reason": "not ready"}]


def test_a_skipped_vm_node_is_not_counted_as_one(load_fixture, validator_pods):
    vm = cordoned(load_fixture("node-passthrough-vm"))

    assert evaluate([], validator_pods, sandbox_nodes=[vm], sandbox_pods=[]) == {
        "status": "no-gpu-nodes", "gpuNodes": 0, "validatedNodes": 0, "notValidated": [],
        "skipped": [{"node": "ip-10-0-64-10.ec2.internal", "reason": "cordoned"}], "sandboxNodes": 0,
    }


# --- expected nodes --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("expected", "missing"), [
    ({"a100": 1}, []),
    ({"a100": 0}, []),
    ({"a100": 2}, [{"pool": "a100", "expected": 2, "validated": 1}]),
    ({"a100": 1, "h100": 1}, [{"pool": "h100", "expected": 1, "validated": 0}]),
    ({"l40s": 3}, [{"pool": "l40s", "expected": 3, "validated": 0}]),
])
def test_a_pool_with_fewer_validated_nodes_than_expected_is_not_validated(load_fixture, a100, validator_pods,
                                                                          expected, missing):
    result = evaluate([a100, load_fixture("node-h100-mig-paused")], [validator_pods[0]], expected_nodes=expected)

    assert result.get("missingNodes", []) == missing
    # h100's validator pod is missing either way.
    assert result["status"] == "not-validated"


def test_skipped_nodes_do_not_make_up_a_pools_count(a100, validator_pods):
    nodes = [a100, cordoned(renamed(a100, "ip-10-0-12-90.ec2.internal"))]

    result = evaluate(nodes, validator_pods, expected_nodes={"a100": 2})

    assert result["status"] == "not-validated"
    assert result["missingNodes"] == [{"pool": "a100", "expected": 2, "validated": 1}]


def test_no_nodes_where_some_are_expected_is_not_no_gpu_nodes():
    assert evaluate([], [], expected_nodes={"a100": 2})["status"] == "not-validated"
    assert evaluate([], [], expected_nodes={"a100": 0})["status"] == "no-gpu-nodes"


def test_a_wave_of_pools_declared_empty_is_validated_with_no_nodes():
    """A pool scaled to zero on purpose (expectedNodes: 0) must not fail a strict gate for having no nodes."""
    assert evaluate([], [], pools=["a100"], expected_nodes={"a100": 0})["status"] == "validated"
    assert evaluate([], [], pools=["a100", "h100"], expected_nodes={"a100": 0})["status"] == "no-gpu-nodes"


# --- failing fast ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("container", "state", "init", "reason"), [
    ("toolkit-validation", waiting("CrashLoopBackOff"), True, "CrashLoopBackOff"),
    ("toolkit-validation", waiting("ErrImagePull"), True, "ErrImagePull"),
    ("toolkit-validation", waiting("InvalidImageName"), True, "InvalidImageName"),
    ("toolkit-validation", {"terminated": {"exitCode": 1, "reason": "Error"}}, True, "Init:Error"),
    ("nvidia-operator-validator", waiting("ImagePullBackOff"), False, "ImagePullBackOff"),
    ("nvidia-operator-validator", waiting("CreateContainerConfigError"), False, "CreateContainerConfigError"),
    ("nvidia-operator-validator", waiting("CreateContainerError"), False, "CreateContainerError"),
])
def test_a_container_that_cannot_start_is_a_failure(load_fixture, validator_pods, container, state, init, reason):
    pod = stuck(validator_pods[1], container, state, init=init)

    result = evaluate([load_fixture("node-h100-mig-paused")], [pod])

    assert [{k: f[k] for k in ("node", "pod", "container", "reason")} for f in result["failures"]] == [
        {"node": H100_NODE, "pod": "nvidia-operator-validator-q9z4m", "container": container, "reason": reason}]


@pytest.mark.parametrize("state", [
    waiting("PodInitializing"), waiting("ContainerCreating"), {"running": {}},
    {"terminated": {"exitCode": 0, "reason": "Completed"}},
])
def test_a_container_on_its_way_is_no_failure(load_fixture, validator_pods, state):
    pod = stuck(validator_pods[1], "toolkit-validation", state)

    assert "failures" not in evaluate([load_fixture("node-h100-mig-paused")], [pod])


def restarted(pod: dict[str, Any], container: str) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    for status in pod["status"].get("initContainerStatuses", []) + pod["status"].get("containerStatuses", []):
        if status["name"] == container:
            status["restartCount"] = int(status.get("restartCount") or 0) + 1
    return pod


def test_a_crash_loop_is_failed_once_it_restarted_between_two_polls(load_fixture, validator_pods):
    nodes = [load_fixture("node-a100-fresh")]  # its validator crash-loops on driver-validation
    failure = {"node": FRESH_NODE, "pod": "nvidia-operator-validator-b8wfn", "container": "driver-validation",
               "reason": "CrashLoopBackOff"}

    first = evaluate(nodes, validator_pods, now=0)
    same = evaluate(nodes, validator_pods, previous=first, now=10)
    again = evaluate(nodes, [restarted(p, "driver-validation") for p in validator_pods], previous=same, now=20)

    assert first["status"] == "not-validated" and {k: first["failures"][0][k] for k in failure} == failure
    assert not gate.is_settled(first, gate.STRICT)
    assert same["status"] == "not-validated", "two polls without a restart are no proof"
    assert again["status"] == "failed" and again["failures"][0]["since"] == 0
    assert gate.is_settled(again, gate.STRICT) and gate.is_settled(again, gate.ADVISORY)
    assert (gate.exit_code(again, gate.STRICT), gate.exit_code(again, gate.ADVISORY)) == (1, 0)


def test_an_image_that_cannot_be_pulled_fails_once_it_kept_failing_though_its_reason_alternates(
        load_fixture, validator_pods):
    node = [load_fixture("node-h100-mig-paused")]
    pull_error = stuck(validator_pods[1], "nvidia-operator-validator", waiting("ErrImagePull"), init=False)
    back_off = stuck(validator_pods[1], "nvidia-operator-validator", waiting("ImagePullBackOff"), init=False)

    first = evaluate(node, [pull_error], now=0)
    blip = evaluate(node, [back_off], previous=first, now=10)  # a registry's rate limit, say: not yet
    assert blip["status"] == "not-validated"
    late = evaluate(node, [pull_error], previous=blip, now=gate.FAILURE_CONFIRM_SECONDS)
    assert late["status"] == "failed"


def test_a_blip_that_clears_is_not_a_failure(load_fixture, validator_pods):
    node = [load_fixture("node-h100-mig-paused")]
    blip = evaluate(node, [stuck(validator_pods[1], "toolkit-validation", waiting("ErrImagePull"))])

    assert evaluate(node, [validator_pods[1]], previous=blip)["status"] == "not-validated"
    assert "failures" not in evaluate(node, [validator_pods[1]], previous=blip)


def test_pods_the_gate_does_not_judge_cannot_fail_it(load_fixture, a100, validator_pods):
    crash = waiting("CrashLoopBackOff")
    on_cordoned = stuck(validator_pods[1], "toolkit-validation", crash)
    previous_rollout = terminating(stuck(validator_pods[0], "toolkit-validation", crash))
    nodes = [a100, cordoned(load_fixture("node-h100-mig-paused"))]
    pods = [validator_pods[0], previous_rollout, on_cordoned, validator_pods[2]]  # [2]: a node not judged

    first = evaluate(nodes, pods)

    assert "failures" not in first and evaluate(nodes, pods, previous=first)["status"] == "validated"


def test_a_driver_pod_of_the_waves_daemonsets_fails_the_gate_and_no_other(a100, validator_pods, load_fixture):
    daemonsets = {A100_DS: load_fixture("daemonsets-driver")["items"][0]}
    theirs = driver_pod("nvidia-driver-daemonset-a100-abcde", A100_NODE, A100_DS)
    theirs["status"]["containerStatuses"] = [container_status("nvidia-driver-ctr", waiting("CrashLoopBackOff"))]
    other = copy.deepcopy(theirs)
    other["metadata"].update(name="nvidia-driver-daemonset-h100-x", ownerReferences=[
        {"kind": "DaemonSet", "name": "nvidia-driver-daemonset-h100"}])
    orphan = copy.deepcopy(theirs)
    orphan["metadata"].update(name="nvidia-driver-old-x", ownerReferences=[])

    result = evaluate([a100], validator_pods, daemonsets=daemonsets, driver_pods=[other, orphan, theirs])

    assert [{k: f[k] for k in ("node", "pod", "container", "reason")} for f in result["failures"]] == [
        {"node": A100_NODE, "pod": "nvidia-driver-daemonset-a100-abcde", "container": "nvidia-driver-ctr",
         "reason": "CrashLoopBackOff"}]


def test_sandbox_validator_pods_fail_the_gate_only_when_it_judges_vm_nodes(load_fixture):
    vm = load_fixture("node-passthrough-vm")
    sandbox_pods = load_fixture("pods-sandbox-validators")["items"]
    broken = stuck(sandbox_pods[0], "vfio-pci-validation", waiting("CrashLoopBackOff"))

    assert evaluate([vm], [], sandbox_nodes=[vm], sandbox_pods=[broken])["failures"][0]["reason"] == "CrashLoopBackOff"
    assert "failures" not in evaluate([vm], [], sandbox_pods=[broken])


# --- the termination message -------------------------------------------------------------------------------------


def test_a_short_verdict_is_the_termination_message_as_it_is():
    result = {"status": "validated", "gpuNodes": 1, "validatedNodes": 1, "notValidated": []}

    assert gate.termination_message(result) == json.dumps(result, separators=(",", ":"))


def test_a_long_verdict_is_cut_to_the_kubelets_limit_and_says_what_it_left_out():
    not_validated = [{"node": f"ip-10-0-{i // 256}-{i % 256}.ec2.internal", "reason": "no validator pod"}
                     for i in range(300)]
    result = {"status": "not-validated", "gpuNodes": 300, "validatedNodes": 0, "notValidated": not_validated,
              "skipped": [{"node": "ip-10-9-0-1.ec2.internal", "reason": "cordoned"}]}

    message = gate.termination_message(result)

    assert len(message.encode()) <= gate.TERMINATION_MESSAGE_LIMIT
    cut = json.loads(message)
    assert cut["status"] == "not-validated" and cut["skipped"] == result["skipped"]
    assert cut["notValidated"] == not_validated[:len(cut["notValidated"])]
    assert cut["omitted"] == {"notValidated": 300 - len(cut["notValidated"])}


def test_a_verdict_too_long_to_cut_keeps_its_status():
    message = gate.termination_message({"status": "not-validated", "notValidated": [], "error": "x" * 5000})

    assert json.loads(message) == {"status": "not-validated", "omitted": "all but the status"}


# --- polling ----------------------------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def core_listing(nodes: list[dict[str, Any]], pods: dict[str, list[dict[str, Any]]]) -> Any:
    """Fake CoreV1Api: `nodes` for any node selector, `pods` by label selector (none for others)."""
    core = fake_api()
    core.list_node.return_value = model({"items": nodes}, "V1NodeList")
    core.list_namespaced_pod.side_effect = lambda namespace, label_selector, _request_timeout: model(
        {"items": pods.get(label_selector, [])}, "V1PodList")
    return core


def run(core: Any, mode: str = "strict", path: Any = None, apps: Any = None, timeout: int = 60,
        **settings: Any) -> tuple[int, dict, Any]:
    clock, log, out = FakeClock(), Recorder(), []
    code = job.run_gate(core, fake_api(), apps=apps, namespace="gpu-operator", job_namespace="gpu-stack",
                         job_name="gpu-stack-validation", timeout_seconds=timeout, poll_seconds=10, mode=mode, log=log,
                         out=out.append, termination_message_path=None if path is None else str(path),
                         clock=clock, sleep=clock.sleep, **settings)
    return code, json.loads(out[-1]), (clock, log)


@pytest.mark.parametrize(("mode", "code"), [("strict", 1), ("advisory", 0)])
def test_the_gate_stops_once_a_failure_lasted_the_confirmation_time(load_fixture, validator_pods, mode, code):
    # The fixture's crash loop does not restart between polls: it is confirmed by time, not after one poll.
    core = core_listing([load_fixture("node-a100-fresh")], {gate.VALIDATOR_POD_SELECTOR: validator_pods})

    exit_code, result, (clock, log) = run(core, mode, timeout=600)

    assert exit_code == code
    assert clock.sleeps == [10.0] * (gate.FAILURE_CONFIRM_SECONDS // 10)
    assert result["status"] == "failed"


def test_a_short_gate_times_out_not_validated_on_a_failure_it_could_not_confirm(load_fixture, validator_pods):
    core = core_listing([load_fixture("node-a100-fresh")], {gate.VALIDATOR_POD_SELECTOR: validator_pods})

    exit_code, result, _ = run(core, timeout=60)

    assert exit_code == 1 and result["status"] == "not-validated" and result["failures"]


def test_the_gate_judges_the_driver_pods_of_its_daemonsets(load_fixture, a100, validator_pods):
    ds = load_fixture("daemonsets-driver")["items"][0]
    apps = fake_api()
    apps.read_namespaced_daemon_set.return_value = model(ds, "V1DaemonSet")
    unpullable = driver_pod("nvidia-driver-daemonset-a100-abcde", A100_NODE, A100_DS)
    unpullable["status"]["initContainerStatuses"] = [container_status("k8s-driver-manager", waiting("ErrImagePull"))]
    core = core_listing([a100], {gate.VALIDATOR_POD_SELECTOR: validator_pods,
                                 "app.kubernetes.io/component=nvidia-driver": [unpullable]})

    exit_code, result, _ = run(core, apps=apps, driver_daemonsets=(A100_DS,), timeout=600)

    assert exit_code == 1 and result["status"] == "failed"
    assert result["failures"][0]["container"] == "k8s-driver-manager"


def test_the_gate_without_driver_daemonsets_lists_no_driver_pods(a100, validator_pods):
    core = core_listing([a100], {gate.VALIDATOR_POD_SELECTOR: validator_pods})

    run(core)

    assert [c.kwargs["label_selector"] for c in core.list_namespaced_pod.call_args_list] == [
        gate.VALIDATOR_POD_SELECTOR]


def test_the_gate_waits_for_the_nodes_a_pool_expects(a100, validator_pods):
    core = core_listing([a100], {gate.VALIDATOR_POD_SELECTOR: validator_pods})

    exit_code, result, (clock, _) = run(core, expected_nodes={"a100": 2})

    assert exit_code == 1
    assert clock.sleeps == [10.0] * 6
    assert result["missingNodes"] == [{"pool": "a100", "expected": 2, "validated": 1}]


def test_the_verdict_is_written_to_the_termination_message_file(a100, validator_pods, tmp_path):
    path = tmp_path / "termination-log"
    core = core_listing([a100], {gate.VALIDATOR_POD_SELECTOR: validator_pods})

    _, result, _ = run(core, path=path)

    assert json.loads(path.read_text()) == result


def test_a_termination_message_that_cannot_be_written_changes_nothing_but_a_warning(a100, validator_pods, tmp_path):
    core = core_listing([a100], {gate.VALIDATOR_POD_SELECTOR: validator_pods})

    exit_code, result, (_, log) = run(core, path=tmp_path / "missing" / "termination-log")

    assert exit_code == 0 and result["status"] == "validated"
    assert log.records[-1]["event"] == "termination-message-failed"
    assert log.records[-1]["level"] == "warning"


# --- validators of the current template --------------------------------------------------------------------------


def validator_daemonset(desired: int, updated: int, strategy: str = "RollingUpdate") -> dict[str, Any]:
    return {"metadata": {"name": "nvidia-operator-validator", "generation": 4},
            "spec": {"updateStrategy": {"type": strategy}, "selector": {"matchLabels": {"app": "nvidia-operator-validator"}},
                     "template": {"metadata": {"labels": {"app": "nvidia-operator-validator"}},
                                  "spec": {"containers": [{"name": "nvidia-operator-validator"}]}}},
            "status": {"observedGeneration": 4, "currentNumberScheduled": desired, "numberMisscheduled": 0,
                       "numberReady": desired, "desiredNumberScheduled": desired, "updatedNumberScheduled": updated,
                       "numberAvailable": desired}}


def test_validator_pods_of_a_daemonset_mid_rollout_vouch_for_nothing(a100, validator_pods):
    rolling = {"nvidia-operator-validator": validator_daemonset(desired=1, updated=0)}

    result = evaluate([a100], validator_pods, validator_daemonsets=rolling)

    assert result["status"] == "not-validated"
    assert result["validatorRollout"][0]["reason"] == "updated 0/1"
    done = {"nvidia-operator-validator": validator_daemonset(desired=1, updated=1)}
    assert evaluate([a100], validator_pods, validator_daemonsets=done)["status"] == "validated"


def test_an_ondelete_validator_is_judged_by_its_pods_alone(a100, validator_pods):
    manual = {"nvidia-operator-validator": validator_daemonset(desired=1, updated=0, strategy="OnDelete")}

    assert evaluate([a100], validator_pods, validator_daemonsets=manual)["status"] == "validated"


def test_the_gate_reads_the_validator_daemonsets_it_is_told_to(a100, validator_pods):
    apps = fake_api()
    apps.read_namespaced_daemon_set.return_value = model(validator_daemonset(desired=1, updated=0), "V1DaemonSet")
    core = core_listing([a100], {gate.VALIDATOR_POD_SELECTOR: validator_pods})

    exit_code, result, _ = run(core, apps=apps, validator_daemonsets=("nvidia-operator-validator",))

    assert exit_code == 1 and result["status"] == "not-validated"
    assert apps.read_namespaced_daemon_set.call_args.kwargs["name"] == "nvidia-operator-validator"


def test_a_driver_pod_crash_looping_on_a_node_the_gate_does_not_judge_still_fails_it(load_fixture, a100,
                                                                                     validator_pods):
    daemonsets = {A100_DS: load_fixture("daemonsets-driver")["items"][0]}
    paused = renamed(a100, "ip-10-0-12-77.ec2.internal")  # its validator paused: not among the judged nodes
    crash = driver_pod("nvidia-driver-daemonset-a100-zzzzz", "ip-10-0-12-77.ec2.internal", A100_DS)
    crash["status"]["containerStatuses"] = [container_status("nvidia-driver-ctr", waiting("CrashLoopBackOff"))]

    first = evaluate([a100], validator_pods, daemonsets=daemonsets, driver_pods=[crash], now=0)
    looping = [restarted(crash, "nvidia-driver-ctr")]
    again = evaluate([a100], validator_pods, daemonsets=daemonsets, driver_pods=looping, previous=first, now=10)

    assert [f["node"] for f in first["failures"]] == ["ip-10-0-12-77.ec2.internal"]
    assert again["status"] == "failed"


def _manager_daemonset(name: str, app: str) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": app}},
                     "template": {"metadata": {"labels": {"app": app}}}}}


def test_the_gate_lists_a_vgpu_managers_pods_by_its_own_selector_and_every_driver_by_one_label():
    """A vGPU or VFIO manager pod does not carry the driver's component label: the gate finds it by its DaemonSet's
    selector, while all driver DaemonSets share one list however many there are."""
    core = fake_api()
    listed = {"app.kubernetes.io/component=nvidia-driver": [driver_pod("a100-pod", A100_NODE, A100_DS)],
              "app=nvidia-vgpu-manager-daemonset": [driver_pod("vgpu-pod", H100_NODE, "vgpu")]}
    core.list_namespaced_pod.side_effect = lambda namespace, label_selector, _request_timeout: model(
        {"items": listed.get(label_selector, [])}, "V1PodList")
    a100 = {"metadata": {"name": A100_DS}, "spec": {"selector": {"matchLabels": {"app": A100_DS}}, "template": {
        "metadata": {"labels": {"app": A100_DS, "app.kubernetes.io/component": "nvidia-driver"}}}}}
    daemonsets = {A100_DS: a100, "vgpu": _manager_daemonset("vgpu", "nvidia-vgpu-manager-daemonset"), "gone": None}

    found = job.driver_like_pods(core, "gpu-operator", daemonsets, 5.0)

    assert sorted(p["metadata"]["name"] for p in found) == ["a100-pod", "vgpu-pod"]
    assert [c.kwargs["label_selector"] for c in core.list_namespaced_pod.call_args_list] == [
        "app.kubernetes.io/component=nvidia-driver", "app=nvidia-vgpu-manager-daemonset"]
