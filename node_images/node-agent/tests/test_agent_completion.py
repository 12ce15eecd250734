"""`wait-for-completion`: the driver pod's first init container holds its node with its own taint, waits for the
node's pods matching the selector to complete (or the timeout), and lifts only its own taint: a cordon set meanwhile
stays."""

from __future__ import annotations

import json
import os
import signal
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from agenttest import FakeCluster, Recorder, clients_of, finished, pod
from gpustack_agent import __main__ as cli
from gpustack_agent.wait import completion

NODE = "ip-10-0-12-35.ec2.internal"
SELECTOR = "app=train"
OWN_POD = ("gpu-operator", "nvidia-driver-daemonset-a100-x7k2p")


class Clock:
    """A monotonic clock that only moves when the agent sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0, "a zero sleep is a hot loop"
        self.sleeps.append(seconds)
        self.now += seconds


def train(name: str, node: str = NODE, **kwargs: Any) -> dict[str, Any]:
    return pod(name, node, namespace="ml-team", labels={"app": "train"}, owner=("Job", name), **kwargs)


GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def cluster(*pods: dict[str, Any], unschedulable: bool = False, annotations: dict[str, str] | None = None,
            taints: list[dict[str, Any]] | None = None) -> FakeCluster:
    spec: dict[str, Any] = {"taints": taints or [GPU_TAINT]}
    if unschedulable:
        spec["unschedulable"] = True
    node = {"metadata": {"name": NODE, "resourceVersion": "1", "labels": {}, "annotations": dict(annotations or {})},
            "spec": spec}
    return FakeCluster(nodes=[node], pods=pods)


def held(fake: FakeCluster) -> bool:
    return completion.holds(fake.nodes[NODE])


def kubectl_cordon(fake: FakeCluster) -> None:
    """What `kubectl cordon` does: nothing at all on a node already unschedulable, else one write."""
    node = fake.nodes[NODE]
    if not node["spec"].get("unschedulable"):
        fake.core.patch_node(name=NODE, body={"spec": {"unschedulable": True}}, _content_type="merge",
                             _request_timeout=5)


def waiter(fake: FakeCluster, clock: Clock, log: Recorder, timeout: int = 600, **kwargs: Any) -> completion.Waiter:
    kwargs.setdefault("driver_loaded", lambda: True)
    return completion.Waiter(fake.core, node_name=NODE, pod_selector=SELECTOR, timeout_seconds=timeout,
                             own_pod=OWN_POD, log=log, clock=clock, sleep=clock.sleep, rng=lambda: 0.5, **kwargs)


def test_holds_the_node_waits_for_matching_pods_on_it_and_lifts_its_hold():
    fake = cluster(train("job-a"), finished(train("job-done")), train("job-elsewhere", node="other-node"),
                   pod("web", NODE, namespace="ml-team", labels={"app": "web"}),
                   pod(OWN_POD[1], NODE, labels={"app": "train"}, phase="Pending"))
    clock, log = Clock(), Recorder()
    held_while_waiting = []

    def job_ends(seconds: float) -> None:
        held_while_waiting.append(held(fake))
        clock.sleep(seconds)
        if clock.now >= 30:
            fake.remove("job-a")

    w = waiter(fake, clock, log)
    w.sleep = job_ends

    assert w.run() == 0

    assert log.events() == ["held", "waiting", "pods-completed", "released"]
    waiting = log.records[1]
    # Neither the finished job, the pod on another node, the unmatched pod nor the agent's own pod count.
    assert (waiting["pods"], waiting["podCount"]) == (["ml-team/job-a"], 1)
    assert all(held_while_waiting)
    # Polled at a growing interval, never a hot loop: 5, 10, 20 s.
    assert clock.sleeps == [5.0, 10.0, 20.0]
    node = fake.nodes[NODE]
    # The node's other taints are as they were, and the agent never touched spec.unschedulable.
    assert node["spec"] == {"taints": [GPU_TAINT]}
    call = fake.core.list_pod_for_all_namespaces.call_args.kwargs
    assert (call["field_selector"], call["label_selector"]) == (f"spec.nodeName={NODE}", SELECTOR)


def test_a_cordon_set_by_hand_during_the_wait_stays_after_it():
    # Maintenance found while the node waits (for days, perhaps): `kubectl cordon` writes spec.unschedulable, which
    # the agent's hold does not use, so lifting the hold lifts nothing of theirs.
    fake = cluster(train("job-a"))
    clock, log = Clock(), Recorder()
    w = waiter(fake, clock, log)

    def operator_cordons_then_job_ends(seconds: float) -> None:
        kubectl_cordon(fake)
        clock.sleep(seconds)
        fake.remove("job-a")

    w.sleep = operator_cordons_then_job_ends

    assert w.run() == 0

    assert log.events() == ["held", "waiting", "pods-completed", "released"]
    assert fake.nodes[NODE]["spec"] == {"taints": [GPU_TAINT], "unschedulable": True}


def test_a_node_someone_else_cordoned_is_held_too_and_stays_cordoned():
    fake = cluster(unschedulable=True)
    log = Recorder()

    assert waiter(fake, Clock(), log).run() == 0

    assert log.events() == ["held", "pods-completed", "released"]
    assert fake.nodes[NODE]["spec"] == {"taints": [GPU_TAINT], "unschedulable": True}


def test_a_restarted_wait_resumes_its_hold_and_lifts_it():
    fake = cluster(taints=[GPU_TAINT, completion.HOLD_TAINT])
    log = Recorder()

    assert waiter(fake, Clock(), log).run() == 0

    assert log.events() == ["hold-resumed", "pods-completed", "released"]
    assert fake.nodes[NODE]["spec"] == {"taints": [GPU_TAINT]}


def test_the_cordon_of_an_agent_before_0_7_0_is_lifted_by_the_next_run():
    fake = cluster(unschedulable=True, annotations={completion.CORDON_ANNOTATION: "true"})
    log = Recorder()

    assert waiter(fake, Clock(), log).run() == 0

    assert log.events() == ["held", "pods-completed", "released"]
    assert log.records[-1]["uncordoned"] is True
    node = fake.nodes[NODE]
    assert node["spec"] == {"taints": [GPU_TAINT]}
    assert completion.CORDON_ANNOTATION not in node["metadata"]["annotations"]


def test_without_a_loaded_driver_nothing_waits_but_an_earlier_hold_is_lifted():
    # A rebooted node: its GPU jobs restart and would wait for the driver this wait holds back.
    fake = cluster(train("job-a"), taints=[completion.HOLD_TAINT])
    clock, log = Clock(), Recorder()

    assert waiter(fake, clock, log, timeout=0, driver_loaded=lambda: False).run() == 0

    assert log.events() == ["no-driver-loaded", "released"]
    assert clock.sleeps == []
    fake.core.list_pod_for_all_namespaces.assert_not_called()
    assert "taints" not in fake.nodes[NODE]["spec"]


def test_timeout_names_the_pods_still_running_and_proceeds():
    fake = cluster(*(train(f"job-{i:02}") for i in range(12)))
    clock, log = Clock(), Recorder()

    assert waiter(fake, clock, log, timeout=100).run() == 0

    assert log.events() == ["held", "waiting", "wait-timed-out", "released"]
    timed_out = log.records[2]
    assert timed_out["level"] == "warning"
    assert (len(timed_out["pods"]), timed_out["podCount"]) == (completion.LOGGED_PODS, 12)
    # 5 + 10 + 20 + 40, then only what is left of the 100 s: the timeout is kept, not overrun by a poll.
    assert clock.sleeps == [5.0, 10.0, 20.0, 40.0, 25.0]
    assert not held(fake)


def test_api_errors_are_retried_with_backoff_until_the_list_succeeds():
    fake = cluster(train("job-a"))
    fake.fail("read_node", ApiException(status=503, reason="Unavailable"))
    fake.fail("list_pod_for_all_namespaces", ApiException(status=500, reason="Internal"),
              ApiException(status=429, reason="Too Many Requests"))
    clock, log = Clock(), Recorder()
    w = waiter(fake, clock, log)
    real_sleep = w.sleep

    def sleep(seconds: float) -> None:
        real_sleep(seconds)
        fake.remove("job-a")

    w.sleep = sleep

    assert w.run() == 0
    assert log.events() == ["retry", "held", "retry", "retry", "pods-completed", "released"]
    # Jittered exponential backoff (rng 0.5: three quarters of 1, 2, ... s), reset once a request succeeded.
    assert clock.sleeps == [0.75, 0.75, 1.5]


def test_a_node_written_between_read_and_taint_is_read_again_and_keeps_the_new_taint():
    # The taint list is replaced whole: a write that raced the read (here the node lifecycle controller's) must not
    # be dropped, so the patch is a compare-and-swap and a conflict starts over from a fresh read.
    fake = cluster(train("job-a"))
    not_ready = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
    real_read = fake.core.read_node.side_effect
    raced = []

    def read_then_race(*args: Any, **kwargs: Any) -> Any:
        node = real_read(*args, **kwargs)
        if not raced:
            raced.append(1)
            fake.nodes[NODE]["spec"]["taints"] = [GPU_TAINT, not_ready]
            fake.nodes[NODE]["metadata"]["resourceVersion"] = "99"
        return node

    fake.core.read_node.side_effect = read_then_race
    clock, log = Clock(), Recorder()
    w = waiter(fake, clock, log)
    seen = []

    def job_ends_once_held(seconds: float) -> None:
        seen.append(list(fake.nodes[NODE]["spec"]["taints"]))
        clock.sleep(seconds)
        if held(fake):
            fake.remove("job-a")

    w.sleep = job_ends_once_held

    assert w.run() == 0

    assert log.events() == ["retry", "held", "waiting", "pods-completed", "released"]
    assert seen[-1] == [GPU_TAINT, not_ready, completion.HOLD_TAINT]
    assert fake.nodes[NODE]["spec"]["taints"] == [GPU_TAINT, not_ready]


def test_an_api_never_reached_within_the_timeout_exits_1_and_leaves_the_node_alone():
    fake = cluster(train("job-a"))
    fake.fail("read_node", *(ApiException(status=503, reason="Unavailable") for _ in range(100)))
    clock, log = Clock(), Recorder()

    assert waiter(fake, clock, log, timeout=60).run() == 1

    assert log.events()[-1] == "api-unreachable"
    assert clock.now == 60
    assert fake.nodes[NODE]["spec"] == {"taints": [GPU_TAINT]}
    # Bounded backoff: capped at 30 s (times three quarters) and never past the deadline.
    assert max(clock.sleeps) <= completion.kube.backoff.CAP_SECONDS


def test_pods_never_listed_within_the_timeout_lift_the_hold_and_exit_1():
    fake = cluster(train("job-a"))
    fake.fail("list_pod_for_all_namespaces", *(ApiException(status=502, reason="Bad Gateway") for _ in range(100)))
    clock, log = Clock(), Recorder()

    assert waiter(fake, clock, log, timeout=20).run() == 1

    assert log.events()[-2:] == ["api-unreachable", "released"]
    assert not held(fake)


def test_a_forbidden_list_lifts_the_hold_and_ends_the_run():
    fake = cluster(train("job-a"))
    fake.fail("list_pod_for_all_namespaces", ApiException(status=403, reason="Forbidden"))

    with pytest.raises(ApiException):
        waiter(fake, Clock(), Recorder()).run()

    assert fake.nodes[NODE]["spec"] == {"taints": [GPU_TAINT]}


def test_hold_and_release_are_compare_and_swaps_that_touch_only_the_agents_own():
    node = {"metadata": {"name": NODE, "resourceVersion": "7"}, "spec": {"taints": [GPU_TAINT], "unschedulable": True}}
    assert completion.hold_patch(node) == {
        "metadata": {"resourceVersion": "7"}, "spec": {"taints": [GPU_TAINT, completion.HOLD_TAINT]}}
    assert completion.release_patch(node) is None
    node["spec"]["taints"].append(dict(completion.HOLD_TAINT))
    assert completion.hold_patch(node) is None
    assert completion.release_patch(node) == {"metadata": {"resourceVersion": "7"}, "spec": {"taints": [GPU_TAINT]}}
    alone = {"metadata": {}, "spec": {"taints": [completion.HOLD_TAINT]}}
    assert completion.release_patch(alone) == {"spec": {"taints": None}}


def test_a_pre_0_7_0_cordon_someone_asked_to_keep_stays_cordoned():
    kept = {"metadata": {"annotations": {completion.CORDON_ANNOTATION: "true", "gpu-stack/keep-cordoned": "repair"}},
            "spec": {"unschedulable": True}}

    assert completion.release_patch(kept) == {"metadata": {"annotations": {completion.CORDON_ANNOTATION: None}}}


# --- the command line ------------------------------------------------------------------------------------------

WAIT_ENV = {"NODE_NAME": NODE, "WAIT_POD_SELECTOR": SELECTOR, "WAIT_TIMEOUT_SECONDS": "600",
            "POD_NAME": OWN_POD[1], "POD_NAMESPACE": OWN_POD[0]}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({k: v for k, v in WAIT_ENV.items() if k != "NODE_NAME"}, "NODE_NAME must be set"),
        ({**WAIT_ENV, "WAIT_POD_SELECTOR": " "}, "WAIT_POD_SELECTOR must be set"),
        ({**WAIT_ENV, "WAIT_POD_SELECTOR": "a=" + "b" * 1100}, "WAIT_POD_SELECTOR is longer than 1024"),
        ({**WAIT_ENV, "WAIT_TIMEOUT_SECONDS": "-1"}, "WAIT_TIMEOUT_SECONDS must be from 0 to 604800"),
        ({**WAIT_ENV, "WAIT_TIMEOUT_SECONDS": "5m"}, "WAIT_TIMEOUT_SECONDS must be an integer"),
    ],
)
def test_bad_wait_settings_exit_2_before_touching_the_api(capsys, env, message):
    calls = []

    assert cli.main(["wait-for-completion"], env, clients=lambda: calls.append(1)) == 2

    assert not calls
    assert message in json.loads(capsys.readouterr().err.strip().splitlines()[-1])["error"]


def test_wait_settings_default_to_waiting_forever_and_know_their_own_pod():
    settings = cli.WaitSettings.from_env({"NODE_NAME": "n", "WAIT_POD_SELECTOR": "app in (a,b)"})
    assert (settings.timeout_seconds, settings.own_pod) == (0, None)
    assert cli.WaitSettings.from_env(WAIT_ENV).own_pod == OWN_POD


@pytest.fixture
def loaded_driver(tmp_path, monkeypatch) -> None:
    """The NVIDIA module's sysfs directory, as on a node whose driver is being replaced."""
    monkeypatch.setattr(completion, "DRIVER_MODULE", str(tmp_path))


def test_wait_for_completion_runs_from_the_command_line(capsys, loaded_driver):
    fake = cluster(finished(train("job-a"), "Failed"))

    assert cli.main(["wait-for-completion"], WAIT_ENV, clients=clients_of(fake.core)) == 0

    events = [json.loads(line)["event"] for line in capsys.readouterr().out.strip().splitlines()]
    assert events == ["starting", "held", "pods-completed", "released"]


def test_sigterm_while_waiting_lifts_the_hold(capsys, loaded_driver):
    fake = cluster(train("job-a"))
    fake.core.list_pod_for_all_namespaces.side_effect = lambda *a, **k: os.kill(os.getpid(), signal.SIGTERM)

    assert cli.main(["wait-for-completion"], WAIT_ENV, clients=clients_of(fake.core)) == cli.EXIT_TERMINATED

    assert fake.nodes[NODE]["spec"] == {"taints": [GPU_TAINT]}
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["event"] == "stopping"
