"""API glue and control loops (kube.py) against a mocked CoreV1Api / BatchV1Api.

The mocks return real client models built from the recorded fixtures and carry a
real ApiClient, so the model-to-dict conversion is the one used in the cluster.
"""

from __future__ import annotations

import json
from typing import Any, Iterable
from unittest import mock

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from agenttest import Recorder, fake_api, model, stop_after
from gpustack_agent.api import kube, podwatch
from gpustack_agent.gate import gate, job
from gpustack_agent.label import labelloop
from gpustack_agent.model import labels

NODE_NAME = "ip-10-0-12-34.ec2.internal"


@pytest.fixture
def fresh_node(load_fixture) -> dict[str, Any]:
    return load_fixture("node-a100-fresh")


@pytest.fixture
def config(pool_config) -> labels.Config:
    return labels.parse_config(pool_config)


# --- thin wrappers ---------------------------------------------------------


def test_get_node_returns_kubectl_shaped_dict(fresh_node):
    core = fake_api()
    core.read_node.return_value = model(fresh_node, "V1Node")

    node = kube.get_node(core, NODE_NAME)

    core.read_node.assert_called_once_with(NODE_NAME, _request_timeout=kube.REQUEST_TIMEOUT_SECONDS)
    assert node["metadata"]["labels"] == fresh_node["metadata"]["labels"]
    assert node["metadata"]["resourceVersion"] == "48213577"


def test_list_calls_select_server_side(load_fixture):
    core = fake_api()
    core.list_node.return_value = model({"items": [load_fixture("node-a100-labelled")]}, "V1NodeList")
    core.list_namespaced_pod.return_value = model(load_fixture("pods-validators"), "V1PodList")

    nodes = kube.list_nodes(core, gate.GPU_NODE_SELECTOR, 5.0)
    pods = kube.list_pods(core, "gpu-operator", gate.VALIDATOR_POD_SELECTOR, 5.0)

    core.list_node.assert_called_once_with(
        label_selector="nvidia.com/gpu.present=true,nvidia.com/gpu.deploy.operator-validator=true",
        _request_timeout=5.0,
    )
    core.list_namespaced_pod.assert_called_once_with(
        namespace="gpu-operator", label_selector="app=nvidia-operator-validator", _request_timeout=5.0
    )
    assert [n["metadata"]["name"] for n in nodes] == ["ip-10-0-12-35.ec2.internal"]
    assert pods[0]["spec"]["nodeName"] == "ip-10-0-12-35.ec2.internal"
    assert pods[1]["status"]["initContainerStatuses"][1]["state"]["running"]


def test_a_blank_or_garbled_watch_line_is_skipped_not_a_failed_pass(fresh_node):
    core = fake_api()
    with mock.patch.object(podwatch, "_RawWatch") as watch_cls:
        # What the client makes of a blank line and of a line that is not an event.
        watch_cls.return_value.stream.return_value = iter(
            [{"type": None, "object": None, "raw_object": None}, "garbage", {"type": "MODIFIED", "raw_object": "x"},
             {"type": "MODIFIED", "object": object(), "raw_object": fresh_node}])
        events = list(kube.watch_node(core, NODE_NAME, 60, None))

    assert [e["object"]["metadata"]["name"] for e in events] == [fresh_node["metadata"]["name"]]


def test_watch_node_watches_only_its_own_node(fresh_node):
    core = fake_api()
    with mock.patch.object(podwatch, "_RawWatch") as watch_cls:
        watch_cls.return_value.stream.return_value = iter(
            [{"type": "MODIFIED", "object": object(), "raw_object": fresh_node}]
        )
        events = list(kube.watch_node(core, NODE_NAME, 60, "48213577"))

    watch_cls.return_value.stream.assert_called_once_with(
        core.list_node,
        field_selector=f"metadata.name={NODE_NAME}",
        timeout_seconds=60,
        _request_timeout=60 + kube.WATCH_CLIENT_SLACK_SECONDS,
        allow_watch_bookmarks=True,
        resource_version="48213577",
    )
    watch_cls.return_value.stop.assert_called_once()
    assert events == [{"type": "MODIFIED", "object": fresh_node}]


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (ApiException(status=409), True),
        (ApiException(status=410), True),
        (ApiException(status=429), True),
        (ApiException(status=503), True),
        (ApiException(status=0, reason="SSLError"), True),
        (urllib3.exceptions.ProtocolError("connection reset"), True),
        (ApiException(status=403), False),
        (ApiException(status=404), False),
        (ApiException(status=422), False),
    ],
)
def test_is_transient(exc, transient):
    assert kube.is_transient(exc) is transient


# --- label loop ------------------------------------------------------------


def test_reconcile_sends_merge_patch_guarded_by_resource_version(fresh_node, config):
    core = fake_api()
    log = Recorder()

    assert kube.reconcile_node(core, fresh_node, config, log) is not None

    core.patch_node.assert_called_once()
    kwargs = core.patch_node.call_args.kwargs
    assert kwargs["name"] == NODE_NAME
    assert kwargs["_content_type"] == "application/merge-patch+json"
    body = kwargs["body"]
    assert body["metadata"]["resourceVersion"] == "48213577"
    assert body["metadata"]["labels"]["gpu-stack/pool"] == "a100"
    assert body["metadata"]["labels"]["nvidia.com/gpu.deploy.driver"] == "true"
    record = log.records[0]
    assert record["event"] == "labels-changed" and record["node"] == NODE_NAME
    assert record["labels"]["gpu-stack/pool"] == {"old": None, "new": "a100"}
    json.dumps(record)  # must be serialisable as one log line


def test_reconcile_without_changes_sends_nothing(load_fixture, config):
    core = fake_api()
    log = Recorder()

    assert kube.reconcile_node(core, load_fixture("node-a100-labelled"), config, log) is None

    core.patch_node.assert_not_called()
    assert log.records == []


def test_label_loop_reconciles_on_start_and_on_watch_events(fresh_node, apply_patch, pool_config, config):
    core = fake_api()
    core.read_node.return_value = model(fresh_node, "V1Node")
    labelled = apply_patch(fresh_node, labels.desired_patch(fresh_node, config))
    user_opted_out = apply_patch(labelled, {"metadata": {"labels": {"nvidia.com/gpu.present": None}}})
    watch_calls: list[tuple[Any, ...]] = []

    def watch_events(api: Any, name: str, timeout: int, rv: str | None) -> Iterable[dict[str, Any]]:
        watch_calls.append((api, name, timeout, rv))
        yield {"type": "MODIFIED", "object": labelled}        # our own patch echoing back
        yield {"type": "MODIFIED", "object": user_opted_out}  # someone removed gpu.present

    log = Recorder()
    labelloop.run_label_loop(
        core, node_name=NODE_NAME, load_config=lambda: pool_config, resync_seconds=60, log=log,
        stop=stop_after(3), sleep=mock.Mock(), watch_events=watch_events,
    )

    assert watch_calls == [(core, NODE_NAME, 60, "48213577")]
    assert core.patch_node.call_count == 2
    second = core.patch_node.call_args_list[1].kwargs["body"]
    assert second["metadata"]["labels"] == {"nvidia.com/gpu.present": "true"}
    # The fake watch ends as soon as its events are out, which the loop counts as a failed watch.
    assert log.events() == ["labels-changed", "labels-changed", "watch-ended-early"]


def test_label_loop_retries_conflict_with_a_fresh_read(fresh_node, pool_config):
    core = fake_api()
    core.read_node.return_value = model(fresh_node, "V1Node")
    core.patch_node.side_effect = [ApiException(status=409, reason="Conflict"), None]
    sleep = mock.Mock()
    log = Recorder()

    labelloop.run_label_loop(
        core, node_name=NODE_NAME, load_config=lambda: pool_config, resync_seconds=60, log=log,
        stop=stop_after(2), sleep=sleep, watch_events=lambda *a: iter(()), rng=lambda: 0.0,
    )

    assert core.read_node.call_count == 2
    assert core.patch_node.call_count == 2
    # The second pause is the empty watch's, one step further up the same backoff.
    assert [c.args[0] for c in sleep.call_args_list] == [0.5, 1.0]
    assert log.events() == ["retry", "labels-changed", "watch-ended-early"]
    assert log.records[0]["status"] == 409


def test_label_loop_backs_off_on_server_errors(fresh_node, pool_config):
    core = fake_api()
    core.read_node.side_effect = [ApiException(status=503), ApiException(status=500), model(fresh_node, "V1Node")]
    sleep = mock.Mock()

    labelloop.run_label_loop(
        core, node_name=NODE_NAME, load_config=lambda: pool_config, resync_seconds=60, log=Recorder(),
        stop=stop_after(3), sleep=sleep, watch_events=lambda *a: iter(()), rng=lambda: 1.0,
    )

    # 4.0: the watch that ended at once is a third failure in a row.
    assert [c.args[0] for c in sleep.call_args_list] == [1.0, 2.0, 4.0]
    core.patch_node.assert_called_once()


def test_label_loop_gives_up_on_errors_retrying_cannot_fix(pool_config):
    core = fake_api()
    core.read_node.side_effect = ApiException(status=403, reason="Forbidden")

    with pytest.raises(ApiException):
        labelloop.run_label_loop(
            core, node_name=NODE_NAME, load_config=lambda: pool_config, resync_seconds=60, log=Recorder(),
            stop=stop_after(5), sleep=mock.Mock(), watch_events=lambda *a: iter(()),
        )


def test_label_loop_leaves_labels_alone_with_an_invalid_config(fresh_node, pool_config):
    core = fake_api()
    core.read_node.return_value = model(fresh_node, "V1Node")
    sleep = mock.Mock()
    log = Recorder()

    labelloop.run_label_loop(
        core, node_name=NODE_NAME, load_config=lambda: dict(pool_config, version=5), resync_seconds=45,
        log=log, stop=stop_after(1), sleep=sleep, watch_events=lambda *a: iter(()),
    )

    core.patch_node.assert_not_called()
    sleep.assert_called_once_with(45)
    assert log.records[0]["event"] == "config-invalid"
    assert "unsupported node-pools config version 5" in log.records[0]["error"]


# --- validation gate -------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def gate_apis(nodes: list[dict[str, Any]], pod_lists: list[list[dict[str, Any]]]) -> tuple[Any, Any]:
    """Fake CoreV1Api listing `nodes`, and validator pods: each poll gets the next list of `pod_lists`. No driver
    pods."""
    core = fake_api()
    core.list_node.return_value = model({"items": nodes}, "V1NodeList")
    validator_lists = iter(pod_lists)

    def list_pods(namespace: str, label_selector: str, _request_timeout: float) -> Any:
        items = next(validator_lists) if label_selector == gate.VALIDATOR_POD_SELECTOR else []
        return model({"items": items}, "V1PodList")

    core.list_namespaced_pod.side_effect = list_pods
    return core, fake_api()


def validator_lists(core: Any) -> int:
    return sum(c.kwargs["label_selector"] == gate.VALIDATOR_POD_SELECTOR for c in core.list_namespaced_pod.call_args_list)


def run_gate(core: Any, batch: Any, clock: FakeClock, mode: str = "strict", timeout: int = 25,
             poll: int = 10, **wave: Any) -> tuple[int, list[str], Recorder]:
    out: list[str] = []
    log = Recorder()
    code = job.run_gate(
        core, batch, namespace="gpu-operator", job_namespace="gpu-stack", job_name="gpu-stack-validation",
        timeout_seconds=timeout, poll_seconds=poll, mode=mode, log=log, out=out.append,
        clock=clock, sleep=clock.sleep, **wave,
    )
    return code, out, log


def test_gate_validated_on_first_poll_annotates_job(load_fixture):
    pods = load_fixture("pods-validators")["items"]
    core, batch = gate_apis([load_fixture("node-a100-labelled")], [pods])
    clock = FakeClock()

    code, out, _ = run_gate(core, batch, clock)

    assert code == 0
    assert clock.sleeps == []
    expected = '{"status":"validated","gpuNodes":1,"validatedNodes":1,"notValidated":[]}'
    assert out == [expected]
    batch.patch_namespaced_job.assert_called_once_with(
        name="gpu-stack-validation",
        namespace="gpu-stack",
        body={"metadata": {"annotations": {"gpu-stack/validation": expected}}},
        _content_type="application/merge-patch+json",
        _request_timeout=10.0,
    )
    assert core.list_node.call_args.kwargs["label_selector"] == gate.GPU_NODE_SELECTOR
    assert core.list_namespaced_pod.call_args.kwargs["namespace"] == "gpu-operator"


def test_gate_keeps_polling_until_validated(load_fixture):
    pods = load_fixture("pods-validators")["items"]
    h100 = load_fixture("node-h100-mig-paused")
    ready_pod = json.loads(json.dumps(pods[0]))
    ready_pod["spec"]["nodeName"] = h100["metadata"]["name"]
    core, batch = gate_apis([h100], [[pods[1]], [ready_pod]])
    clock = FakeClock()

    code, out, _ = run_gate(core, batch, clock)

    assert code == 0
    assert clock.sleeps == [10.0]
    assert json.loads(out[0])["status"] == "validated"


@pytest.mark.parametrize(("mode", "code"), [("strict", 1), ("advisory", 0)])
def test_gate_times_out_without_overrunning(load_fixture, mode, code):
    pods = load_fixture("pods-validators")["items"]
    core, batch = gate_apis([load_fixture("node-h100-mig-paused")], [[pods[1]]] * 10)
    clock = FakeClock()

    exit_code, out, _ = run_gate(core, batch, clock, mode=mode, timeout=25, poll=10)

    assert exit_code == code
    # Polls at t=0, 10, 20 and a last one exactly at the deadline.
    assert clock.sleeps == [10.0, 10.0, 5.0]
    assert clock.now - 1000.0 == 25.0
    assert validator_lists(core) == 4
    result = json.loads(out[0])
    assert result["status"] == "not-validated"
    assert result["notValidated"] == [
        {"node": "ip-10-0-40-7.ec2.internal", "reason": "validator not ready: toolkit-validation"}
    ]
    annotation = batch.patch_namespaced_job.call_args.kwargs["body"]["metadata"]["annotations"]
    assert json.loads(annotation["gpu-stack/validation"]) == result


def test_gate_with_unreachable_api_reports_not_validated(load_fixture):
    core = fake_api()
    core.list_node.side_effect = ApiException(status=403, reason="Forbidden")
    batch = fake_api()
    clock = FakeClock()

    code, out, log = run_gate(core, batch, clock, timeout=20, poll=10)

    assert code == 1
    assert core.list_node.call_count == 3
    result = json.loads(out[0])
    assert result["status"] == "not-validated" and "403" in result["error"]
    assert log.events().count("poll-failed") == 3
    batch.patch_namespaced_job.assert_called_once()


def test_gate_annotation_failure_does_not_change_the_verdict(load_fixture):
    pods = load_fixture("pods-validators")["items"]
    core, batch = gate_apis([load_fixture("node-a100-labelled")], [pods])
    batch.patch_namespaced_job.side_effect = ApiException(status=404, reason="Not Found")

    code, out, log = run_gate(core, batch, FakeClock())

    assert code == 0
    assert json.loads(out[0])["status"] == "validated"
    assert log.records[-1]["event"] == "annotate-failed"


def test_advisory_gate_with_zero_gpu_nodes_succeeds_immediately(load_fixture):
    core, batch = gate_apis([], [[]])
    clock = FakeClock()

    code, out, _ = run_gate(core, batch, clock, mode="advisory")

    assert code == 0 and clock.sleeps == []
    assert json.loads(out[0])["status"] == "no-gpu-nodes"


def test_strict_gate_with_zero_gpu_nodes_keeps_looking_and_fails_at_its_timeout(load_fixture):
    core, batch = gate_apis([], [[]] * 4)
    clock = FakeClock()

    code, out, _ = run_gate(core, batch, clock, mode="strict", timeout=25, poll=10)

    assert code == 1
    assert clock.sleeps == [10.0, 10.0, 5.0]
    assert json.loads(out[0])["status"] == "no-gpu-nodes"


# --- validation gate for one driver upgrade wave -----------------------------

A100_DS = "nvidia-driver-daemonset-a100"
H100_DS = "nvidia-driver-daemonset-h100"


@pytest.fixture
def driver_daemonsets(load_fixture) -> dict[str, dict[str, Any]]:
    """a100: rolled out; h100: rolling, 1 of 3 nodes updated and 2 of 3 available."""
    return {ds["metadata"]["name"]: ds for ds in load_fixture("daemonsets-driver")["items"]}


def rolled_out(daemonset: dict[str, Any]) -> dict[str, Any]:
    daemonset = json.loads(json.dumps(daemonset))
    desired = daemonset["status"]["desiredNumberScheduled"]
    daemonset["status"].update(updatedNumberScheduled=desired, numberAvailable=desired, numberReady=desired)
    return daemonset


def apps_api(answers: dict[str, list[Any]]) -> Any:
    """Fake AppsV1Api: each read of a DaemonSet gets that name's next answer, the last
    one repeating. An answer is a DaemonSet dict, None for 404, or an exception."""
    apps = fake_api()
    pending = {name: list(queue) for name, queue in answers.items()}

    def read(name: str, namespace: str, _request_timeout: float) -> Any:
        queue = pending[name]
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if answer is None:
            raise ApiException(status=404, reason="Not Found")
        if isinstance(answer, Exception):
            raise answer
        return model(answer, "V1DaemonSet")

    apps.read_namespaced_daemon_set.side_effect = read
    return apps


def test_read_daemon_set_returns_kubectl_shaped_dict(driver_daemonsets):
    apps = apps_api({H100_DS: [driver_daemonsets[H100_DS]]})

    daemonset = kube.read_daemon_set(apps, "gpu-operator", H100_DS, 5.0)

    apps.read_namespaced_daemon_set.assert_called_once_with(
        name=H100_DS, namespace="gpu-operator", _request_timeout=5.0
    )
    assert daemonset["metadata"]["generation"] == 4
    assert daemonset["status"] == driver_daemonsets[H100_DS]["status"]


def test_read_daemon_set_answers_none_for_404_and_raises_other_errors():
    apps = apps_api({A100_DS: [None], H100_DS: [ApiException(status=403, reason="Forbidden")]})

    assert kube.read_daemon_set(apps, "gpu-operator", A100_DS) is None
    with pytest.raises(ApiException) as raised:
        kube.read_daemon_set(apps, "gpu-operator", H100_DS)
    assert raised.value.status == 403


def test_gate_waits_for_the_wave_rollout_then_validates(load_fixture, driver_daemonsets):
    pods = load_fixture("pods-validators")["items"]
    core, batch = gate_apis([load_fixture("node-a100-labelled")], [pods] * 2)
    rolling = json.loads(json.dumps(driver_daemonsets[A100_DS]))
    rolling["status"]["updatedNumberScheduled"] = 1
    apps = apps_api({A100_DS: [rolling, driver_daemonsets[A100_DS]]})
    clock = FakeClock()

    code, out, log = run_gate(core, batch, clock, apps=apps, pools=("a100",), driver_daemonsets=(A100_DS,))

    assert code == 0
    assert clock.sleeps == [10.0]
    assert core.list_node.call_args.kwargs["label_selector"] == (
        "nvidia.com/gpu.present=true,nvidia.com/gpu.deploy.operator-validator=true,gpu-stack/pool in (a100)"
    )
    assert [c.kwargs for c in apps.read_namespaced_daemon_set.call_args_list] == [
        {"name": A100_DS, "namespace": "gpu-operator", "_request_timeout": 10.0},
    ] * 2
    expected = (
        '{"status":"validated","gpuNodes":1,"validatedNodes":1,"notValidated":[],"pools":["a100"],'
        '"driverRollout":[{"daemonset":"nvidia-driver-daemonset-a100","desired":2,"updated":2,"available":2,'
        '"done":true}]}'
    )
    assert out == [expected]
    annotation = batch.patch_namespaced_job.call_args.kwargs["body"]["metadata"]["annotations"]
    assert annotation == {"gpu-stack/validation": expected}
    polls = [r for r in log.records if r["event"] == "poll"]
    assert [(p["status"], p["rolledOutDaemonSets"]) for p in polls] == [("not-validated", 0), ("validated", 1)]


def test_gate_keeps_polling_a_daemonset_that_does_not_exist_until_the_timeout(load_fixture, driver_daemonsets):
    pods = load_fixture("pods-validators")["items"]
    core, batch = gate_apis([load_fixture("node-a100-labelled")], [pods] * 10)
    apps = apps_api({A100_DS: [driver_daemonsets[A100_DS]], H100_DS: [None]})
    clock = FakeClock()

    code, out, _ = run_gate(core, batch, clock, timeout=25, poll=10, apps=apps, pools=("a100", "h100"),
                            driver_daemonsets=(A100_DS, H100_DS))

    assert code == 1
    assert clock.sleeps == [10.0, 10.0, 5.0]
    # Each read is bounded by the time left, like the list calls.
    h100_reads = [c.kwargs["_request_timeout"] for c in apps.read_namespaced_daemon_set.call_args_list
                  if c.kwargs["name"] == H100_DS]
    assert h100_reads == [10.0, 10.0, 5.0, 1.0]
    result = json.loads(out[0])
    assert result["status"] == "not-validated"
    assert result["pools"] == ["a100", "h100"]
    assert result["driverRollout"] == [
        {"daemonset": A100_DS, "desired": 2, "updated": 2, "available": 2, "done": True},
        {"daemonset": H100_DS, "desired": 0, "updated": 0, "available": 0, "done": False, "reason": "not found"},
    ]


def test_gate_with_no_wave_nodes_waits_for_the_daemonset_before_no_gpu_nodes(driver_daemonsets):
    core, batch = gate_apis([], [[]] * 3)
    empty = json.loads(json.dumps(driver_daemonsets[A100_DS]))
    empty["status"].update(desiredNumberScheduled=0, updatedNumberScheduled=0, numberAvailable=0)
    apps = apps_api({A100_DS: [None, empty]})
    clock = FakeClock()

    code, out, _ = run_gate(core, batch, clock, mode="advisory", apps=apps, driver_daemonsets=(A100_DS,))

    assert code == 0
    assert clock.sleeps == [10.0]
    assert out == ['{"status":"no-gpu-nodes","gpuNodes":0,"validatedNodes":0,"notValidated":[],"driverRollout":'
                   '[{"daemonset":"nvidia-driver-daemonset-a100","desired":0,"updated":0,"available":0,"done":true}]}']
    assert core.list_node.call_args.kwargs["label_selector"] == gate.GPU_NODE_SELECTOR


def test_gate_retries_forbidden_daemonset_reads_until_rbac_lands(load_fixture, driver_daemonsets):
    pods = load_fixture("pods-validators")["items"]
    core, batch = gate_apis([load_fixture("node-a100-labelled")], [pods])
    apps = apps_api({A100_DS: [ApiException(status=403, reason="Forbidden"), driver_daemonsets[A100_DS]]})
    clock = FakeClock()

    code, out, log = run_gate(core, batch, clock, apps=apps, driver_daemonsets=(A100_DS,))

    assert code == 0
    assert log.events() == ["poll-failed", "poll"]
    assert log.records[0]["status"] == 403
    # The DaemonSets are read first, so the failed poll listed no pods.
    assert validator_lists(core) == 1
    assert json.loads(out[0])["status"] == "validated"


def test_gate_that_never_reached_the_api_still_names_its_pools():
    core = fake_api()
    core.list_node.side_effect = urllib3.exceptions.ProtocolError("connection reset")

    code, out, _ = run_gate(core, fake_api(), FakeClock(), timeout=0, pools=("h100",))

    assert code == 1
    result = json.loads(out[0])
    assert result["pools"] == ["h100"] and "connection reset" in result["error"]


# --- validation gate judging VM nodes too (SANDBOX_VALIDATOR) ----------------

VM_NODE = "ip-10-0-64-10.ec2.internal"


def by_selector_api(nodes: dict[str, list[Any]], pods: dict[str, list[Any]]) -> Any:
    """Fake CoreV1Api answering list_node / list_namespaced_pod by label selector: each
    call gets that selector's next answer, the last one repeating. An answer is a list
    of objects or an exception."""
    core = fake_api()
    pending = {("nodes", s): list(q) for s, q in nodes.items()} | {("pods", s): list(q) for s, q in pods.items()}

    def answer(kind: str, selector: str, list_kind: str) -> Any:
        queue = pending[(kind, selector)]
        item = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(item, Exception):
            raise item
        return model({"items": item}, list_kind)

    core.list_node.side_effect = lambda label_selector, _request_timeout: answer(
        "nodes", label_selector, "V1NodeList")
    core.list_namespaced_pod.side_effect = lambda namespace, label_selector, _request_timeout: answer(
        "pods", label_selector, "V1PodList")
    return core


def selectors_read(core: Any) -> list[tuple[str, str, float]]:
    calls = [("nodes", c.kwargs["label_selector"], c.kwargs["_request_timeout"]) for c in core.list_node.call_args_list]
    calls += [("pods", c.kwargs["label_selector"], c.kwargs["_request_timeout"])
              for c in core.list_namespaced_pod.call_args_list]
    return calls


@pytest.fixture
def sandbox_pods(load_fixture) -> list[dict[str, Any]]:
    """Ready on ip-10-0-64-10, stuck on vfio-pci-validation on ip-10-0-64-11."""
    return load_fixture("pods-sandbox-validators")["items"]


def test_gate_waits_for_the_sandbox_validator_on_vm_nodes(load_fixture, sandbox_pods):
    stuck = json.loads(json.dumps(sandbox_pods[1]))
    stuck["spec"]["nodeName"] = VM_NODE
    core = by_selector_api(
        {gate.GPU_NODE_SELECTOR: [[load_fixture("node-a100-labelled")]],
         gate.SANDBOX_NODE_SELECTOR: [[load_fixture("node-passthrough-vm")]]},
        {gate.VALIDATOR_POD_SELECTOR: [load_fixture("pods-validators")["items"]],
         gate.SANDBOX_VALIDATOR_POD_SELECTOR: [[stuck], sandbox_pods]},
    )
    batch = fake_api()
    clock = FakeClock()

    code, out, log = run_gate(core, batch, clock, sandbox_validator=True)

    assert code == 0
    assert clock.sleeps == [10.0]
    expected = '{"status":"validated","gpuNodes":2,"validatedNodes":2,"notValidated":[],"sandboxNodes":1}'
    assert out == [expected]
    annotation = batch.patch_namespaced_job.call_args.kwargs["body"]["metadata"]["annotations"]
    assert annotation == {"gpu-stack/validation": expected}
    assert all(c.kwargs["namespace"] == "gpu-operator" for c in core.list_namespaced_pod.call_args_list)
    assert sorted(set(selectors_read(core))) == sorted({
        ("nodes", gate.GPU_NODE_SELECTOR, 10.0),
        ("nodes", "nvidia.com/gpu.present=true,nvidia.com/gpu.deploy.sandbox-validator=true", 10.0),
        ("pods", gate.VALIDATOR_POD_SELECTOR, 10.0),
        ("pods", "app=nvidia-sandbox-validator", 10.0),
    })
    polls = [r for r in log.records if r["event"] == "poll"]
    assert [(p["status"], p["gpuNodes"], p["validatedNodes"], p["sandboxNodes"]) for p in polls] == [
        ("not-validated", 2, 1, 1), ("validated", 2, 2, 1)]


def test_gate_keeps_polling_a_stuck_vm_node_of_the_wave_until_the_timeout(load_fixture, sandbox_pods):
    stuck = json.loads(json.dumps(sandbox_pods[1]))
    stuck["spec"]["nodeName"] = VM_NODE
    wave_nodes = f"{gate.GPU_NODE_SELECTOR},gpu-stack/pool in (passthrough)"
    wave_vm_nodes = "nvidia.com/gpu.present=true,nvidia.com/gpu.deploy.sandbox-validator=true," \
                    "gpu-stack/pool in (passthrough)"
    core = by_selector_api(
        {wave_nodes: [[]], wave_vm_nodes: [[load_fixture("node-passthrough-vm")]]},
        {gate.VALIDATOR_POD_SELECTOR: [[]], gate.SANDBOX_VALIDATOR_POD_SELECTOR: [[stuck]]},
    )
    clock = FakeClock()

    code, out, _ = run_gate(core, fake_api(), clock, timeout=25, poll=10, pools=("passthrough",),
                            sandbox_validator=True)

    assert code == 1
    assert clock.sleeps == [10.0, 10.0, 5.0]
    # Every read, the sandbox ones included, is bounded by the time left.
    for kind, selector in [("nodes", wave_vm_nodes), ("pods", gate.SANDBOX_VALIDATOR_POD_SELECTOR)]:
        assert [t for k, s, t in selectors_read(core) if (k, s) == (kind, selector)] == [10.0, 10.0, 5.0, 1.0]
    assert out == ['{"status":"not-validated","gpuNodes":1,"validatedNodes":0,"notValidated":[{"node":'
                   '"ip-10-0-64-10.ec2.internal","reason":"sandbox validator not ready: vfio-pci-validation"}],'
                   '"sandboxNodes":1,"pools":["passthrough"]}']


def test_gate_retries_failed_sandbox_reads(load_fixture, sandbox_pods):
    core = by_selector_api(
        {gate.GPU_NODE_SELECTOR: [[]],
         gate.SANDBOX_NODE_SELECTOR: [ApiException(status=403, reason="Forbidden"),
                                      [load_fixture("node-passthrough-vm")]]},
        {gate.VALIDATOR_POD_SELECTOR: [[]],
         gate.SANDBOX_VALIDATOR_POD_SELECTOR: [urllib3.exceptions.ProtocolError("connection reset"), sandbox_pods]},
    )
    clock = FakeClock()

    code, out, log = run_gate(core, fake_api(), clock, sandbox_validator=True)

    assert code == 0
    assert log.events() == ["poll-failed", "poll-failed", "poll"]
    assert log.records[0]["status"] == 403 and "connection reset" in log.records[1]["error"]
    assert clock.sleeps == [10.0, 10.0]
    assert json.loads(out[0]) == {"status": "validated", "gpuNodes": 1, "validatedNodes": 1, "notValidated": [],
                                  "sandboxNodes": 1}


def test_gate_without_sandbox_validator_reads_nothing_of_the_vm_nodes(load_fixture, sandbox_pods):
    core = by_selector_api(
        {gate.GPU_NODE_SELECTOR: [[load_fixture("node-a100-labelled")]],
         gate.SANDBOX_NODE_SELECTOR: [[load_fixture("node-passthrough-vm")]]},
        {gate.VALIDATOR_POD_SELECTOR: [load_fixture("pods-validators")["items"]],
         gate.SANDBOX_VALIDATOR_POD_SELECTOR: [sandbox_pods]},
    )

    code, out, log = run_gate(core, fake_api(), FakeClock())

    assert code == 0
    assert selectors_read(core) == [("nodes", gate.GPU_NODE_SELECTOR, 10.0),
                                    ("pods", gate.VALIDATOR_POD_SELECTOR, 10.0)]
    assert out == ['{"status":"validated","gpuNodes":1,"validatedNodes":1,"notValidated":[]}']
    assert "sandboxNodes" not in log.records[0]


def test_gate_with_sandbox_validator_that_never_reached_the_api():
    core = fake_api()
    core.list_node.side_effect = urllib3.exceptions.ProtocolError("connection reset")

    code, out, _ = run_gate(core, fake_api(), FakeClock(), timeout=0, sandbox_validator=True)

    assert code == 1
    result = json.loads(out[0])
    assert list(result) == ["status", "gpuNodes", "validatedNodes", "notValidated", "sandboxNodes", "error"]
    assert result["sandboxNodes"] == 0 and "connection reset" in result["error"]


def dra_node(load_fixture: Any) -> dict[str, Any]:
    """The A100 node as a DRA pool's node: the DRA validator's deploy label in place of the operator validator's."""
    node = json.loads(json.dumps(load_fixture("node-a100-labelled")))
    labels = node["metadata"]["labels"]
    labels.pop("nvidia.com/gpu.deploy.operator-validator", None)
    labels["nvidia.com/gpu.deploy.dra-validator"] = "true"
    return node


def test_gate_with_dra_validator_judges_dra_nodes_by_their_validator_pods(load_fixture):
    core = by_selector_api(
        {gate.GPU_NODE_SELECTOR: [[]], gate.DRA_NODE_SELECTOR: [[dra_node(load_fixture)]]},
        {gate.VALIDATOR_POD_SELECTOR: [load_fixture("pods-validators")["items"]]},
    )
    code, out, _ = run_gate(core, fake_api(), FakeClock(), dra_validator=True)
    assert code == 0
    assert out == ['{"status":"validated","gpuNodes":1,"validatedNodes":1,"notValidated":[]}']
    assert ("nodes", "nvidia.com/gpu.present=true,nvidia.com/gpu.deploy.dra-validator=true", 10.0) in selectors_read(core)


def test_a_dra_node_without_a_ready_validator_fails_the_strict_gate(load_fixture):
    core = by_selector_api(
        {gate.GPU_NODE_SELECTOR: [[]] * 3, gate.DRA_NODE_SELECTOR: [[dra_node(load_fixture)]] * 3},
        {gate.VALIDATOR_POD_SELECTOR: [[]] * 3},
    )
    code, out, _ = run_gate(core, fake_api(), FakeClock(), dra_validator=True)
    assert code == 1
    assert json.loads(out[-1])["status"] == "not-validated"
    assert json.loads(out[-1])["gpuNodes"] == 1


def test_without_dra_validator_the_gate_never_lists_dra_nodes(load_fixture):
    pods = load_fixture("pods-validators")["items"]
    core, batch = gate_apis([load_fixture("node-a100-labelled")], [pods])
    run_gate(core, batch, FakeClock())
    assert all(c.kwargs["label_selector"] != gate.DRA_NODE_SELECTOR for c in core.list_node.call_args_list)
