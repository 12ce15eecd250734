"""`wait-for-completion`: the driver pod's first init container cordons its node, waits for the node's pods matching
the selector to complete (or the timeout), and lifts only its own cordon."""

from __future__ import annotations

import json
import os
import signal
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from agenttest import FakeCluster, Recorder, clients_of, finished, pod
from gpustack_agent import __main__ as cli
from gpustack_agent import completion

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


def cluster(*pods: dict[str, Any], unschedulable: bool = False, annotations: dict[str, str] | None = None,
            ) -> FakeCluster:
    node = {"metadata": {"name": NODE, "resourceVersion": "1", "labels": {}, "annotations": dict(annotations or {})},
            "spec": {"unschedulable": True} if unschedulable else {}}
    return FakeCluster(nodes=[node], pods=pods)


def waiter(fake: FakeCluster, clock: Clock, log: Recorder, timeout: int = 600, **kwargs: Any) -> completion.Waiter:
    kwargs.setdefault("driver_loaded", lambda: True)
    return completion.Waiter(fake.core, node_name=NODE, pod_selector=SELECTOR, timeout_seconds=timeout,
                             own_pod=OWN_POD, log=log, clock=clock, sleep=clock.sleep, rng=lambda: 0.5, **kwargs)


def test_cordons_waits_for_matching_pods_on_its_node_and_uncordons():
    fake = cluster(train("job-a"), finished(train("job-done")), train("job-elsewhere", node="other-node"),
                   pod("web", NODE, namespace="ml-team", labels={"app": "web"}),
                   pod(OWN_POD[1], NODE, labels={"app": "train"}, phase="Pending"))
    clock, log = Clock(), Recorder()
    cordoned_while_waiting = []

    def job_ends(seconds: float) -> None:
        cordoned_while_waiting.append(fake.nodes[NODE]["spec"].get("unschedulable"))
        clock.sleep(seconds)
        if clock.now >= 30:
            fake.remove("job-a")

    w = waiter(fake, clock, log)
    w.sleep = job_ends

    assert w.run() == 0

    assert log.events() == ["cordoned", "waiting", "pods-completed", "uncordoned"]
    waiting = log.records[1]
    # Neither the finished job, the pod on another node, the unmatched pod nor the agent's own pod count.
    assert (waiting["pods"], waiting["podCount"]) == (["ml-team/job-a"], 1)
    assert all(cordoned_while_waiting)
    # Polled at a growing interval, never a hot loop: 5, 10, 20 s.
    assert clock.sleeps == [5.0, 10.0, 20.0]
    node = fake.nodes[NODE]
    assert "unschedulable" not in node["spec"]
    assert completion.CORDON_ANNOTATION not in node["metadata"]["annotations"]
    call = fake.core.list_pod_for_all_namespaces.call_args.kwargs
    assert (call["field_selector"], call["label_selector"]) == (f"spec.nodeName={NODE}", SELECTOR)


def test_a_node_someone_else_cordoned_stays_cordoned():
    fake = cluster(unschedulable=True)
    log = Recorder()

    assert waiter(fake, Clock(), log).run() == 0

    assert log.events() == ["cordon-kept", "pods-completed"]
    assert fake.nodes[NODE]["spec"]["unschedulable"] is True
    fake.core.patch_node.assert_not_called()


def test_a_restarted_wait_resumes_its_own_cordon_and_lifts_it():
    fake = cluster(unschedulable=True, annotations={completion.CORDON_ANNOTATION: "true"})
    log = Recorder()

    assert waiter(fake, Clock(), log).run() == 0

    assert log.events() == ["cordon-resumed", "pods-completed", "uncordoned"]
    assert "unschedulable" not in fake.nodes[NODE]["spec"]


def test_without_a_loaded_driver_nothing_waits_but_an_earlier_cordon_is_lifted():
    # A rebooted node: its GPU jobs restart and would wait for the driver this wait holds back.
    fake = cluster(train("job-a"), unschedulable=True, annotations={completion.CORDON_ANNOTATION: "true"})
    clock, log = Clock(), Recorder()

    assert waiter(fake, clock, log, timeout=0, driver_loaded=lambda: False).run() == 0

    assert log.events() == ["no-driver-loaded", "uncordoned"]
    assert clock.sleeps == []
    fake.core.list_pod_for_all_namespaces.assert_not_called()
    assert "unschedulable" not in fake.nodes[NODE]["spec"]


def test_timeout_names_the_pods_still_running_and_proceeds():
    fake = cluster(*(train(f"job-{i:02}") for i in range(12)))
    clock, log = Clock(), Recorder()

    assert waiter(fake, clock, log, timeout=100).run() == 0

    assert log.events() == ["cordoned", "waiting", "wait-timed-out", "uncordoned"]
    timed_out = log.records[2]
    assert timed_out["level"] == "warning"
    assert (len(timed_out["pods"]), timed_out["podCount"]) == (completion.LOGGED_PODS, 12)
    # 5 + 10 + 20 + 40, then only what is left of the 100 s: the timeout is kept, not overrun by a poll.
    assert clock.sleeps == [5.0, 10.0, 20.0, 40.0, 25.0]
    assert "unschedulable" not in fake.nodes[NODE]["spec"]


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
    assert log.events() == ["retry", "cordoned", "retry", "retry", "pods-completed", "uncordoned"]
    # Jittered exponential backoff (rng 0.5: three quarters of 1, 2, ... s), reset once a request succeeded.
    assert clock.sleeps == [0.75, 0.75, 1.5]


def test_an_api_never_reached_within_the_timeout_exits_1_and_leaves_the_node_alone():
    fake = cluster(train("job-a"))
    fake.fail("read_node", *(ApiException(status=503, reason="Unavailable") for _ in range(100)))
    clock, log = Clock(), Recorder()

    assert waiter(fake, clock, log, timeout=60).run() == 1

    assert log.events()[-1] == "api-unreachable"
    assert clock.now == 60
    assert "unschedulable" not in fake.nodes[NODE]["spec"]
    # Bounded backoff: capped at 30 s (times three quarters) and never past the deadline.
    assert max(clock.sleeps) <= completion.kube.BACKOFF_CAP_SECONDS


def test_pods_never_listed_within_the_timeout_lift_the_cordon_and_exit_1():
    fake = cluster(train("job-a"))
    fake.fail("list_pod_for_all_namespaces", *(ApiException(status=502, reason="Bad Gateway") for _ in range(100)))
    clock, log = Clock(), Recorder()

    assert waiter(fake, clock, log, timeout=20).run() == 1

    assert log.events()[-2:] == ["api-unreachable", "uncordoned"]
    assert "unschedulable" not in fake.nodes[NODE]["spec"]


def test_a_forbidden_list_lifts_the_cordon_and_ends_the_run():
    fake = cluster(train("job-a"))
    fake.fail("list_pod_for_all_namespaces", ApiException(status=403, reason="Forbidden"))

    with pytest.raises(ApiException):
        waiter(fake, Clock(), Recorder()).run()

    assert "unschedulable" not in fake.nodes[NODE]["spec"]
    assert completion.CORDON_ANNOTATION not in fake.nodes[NODE]["metadata"]["annotations"]


def test_cordon_is_a_compare_and_swap_and_uncordon_only_lifts_the_agents_own():
    node = {"metadata": {"name": NODE, "resourceVersion": "7"}, "spec": {}}
    assert completion.cordon_patch(node) == {
        "metadata": {"annotations": {completion.CORDON_ANNOTATION: "true"}, "resourceVersion": "7"},
        "spec": {"unschedulable": True},
    }
    assert completion.uncordon_patch(node) is None
    assert completion.uncordon_patch({"metadata": {"annotations": {completion.CORDON_ANNOTATION: "true"}},
                                      "spec": {"unschedulable": True}}) == {
        "metadata": {"annotations": {completion.CORDON_ANNOTATION: None}}, "spec": {"unschedulable": None}}


def test_a_node_someone_asked_to_keep_cordoned_stays_cordoned_after_the_wait():
    kept = {"metadata": {"annotations": {completion.CORDON_ANNOTATION: "true", "gpu-stack/keep-cordoned": "repair"}},
            "spec": {"unschedulable": True}}

    assert completion.uncordon_patch(kept) == {"metadata": {"annotations": {completion.CORDON_ANNOTATION: None}}}


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
    assert events == ["starting", "cordoned", "pods-completed", "uncordoned"]


def test_sigterm_while_waiting_lifts_the_cordon(capsys, loaded_driver):
    fake = cluster(train("job-a"))
    fake.core.list_pod_for_all_namespaces.side_effect = lambda *a, **k: os.kill(os.getpid(), signal.SIGTERM)

    assert cli.main(["wait-for-completion"], WAIT_ENV, clients=clients_of(fake.core)) == cli.EXIT_TERMINATED

    assert "unschedulable" not in fake.nodes[NODE]["spec"]
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["event"] == "stopping"
