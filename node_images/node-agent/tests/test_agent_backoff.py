"""Every loop of the agent that talks to the API server pauses with a growing, bounded, jittered backoff on every
failure: errors, a watch the server ends at once, an unexpected error of one pass. Nothing sleeps for real: the
loops take their sleep and clock as arguments."""

from __future__ import annotations

from typing import Any, Iterator
from unittest import mock

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from agenttest import Recorder, fake_api, model, stop_after
from fakenvml import FakeNvml, a100_40gb
from gpustack_agent.api import backoff, kube, podwatch
from gpustack_agent.inventory import inventory
from gpustack_agent.label import labelloop
from gpustack_agent.gate import job
from gpustack_agent.inventory import loop

# rng=1.0: every pause is the whole ceiling, 1, 2, 4, ... up to the cap of 30 s.
GROWING = [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


class Clock:
    """A monotonic clock that moves only when the agent sleeps, or when a fake watch says time passed."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def labelled(load_fixture) -> dict[str, Any]:
    # Already right for the pool config: a pass sends no patch, so only the watch decides what the loop does.
    return load_fixture("node-a100-labelled")


def label_loop(core: Any, config: Any, clock: Clock, watch_events: Any, passes: int, log: Recorder) -> None:
    labelloop.run_label_loop(core, node_name="n1", load_config=lambda: config, resync_seconds=60, log=log,
                        stop=stop_after(passes), sleep=clock.sleep, watch_events=watch_events, rng=lambda: 1.0,
                        clock=clock)


def test_backoff_grows_to_its_cap_and_starts_again_after_a_reset():
    pause = backoff.Backoff(lambda: 1.0)
    assert [pause.failure() for _ in GROWING] == GROWING
    pause.reset()
    assert pause.failure() == 1.0
    # Jitter: a random half to all of the ceiling; a huge failure count neither overflows nor passes the cap.
    assert backoff.delay(3, lambda: 0.0) == 2.0
    assert backoff.delay(10**6, lambda: 0.999) <= backoff.CAP_SECONDS


def test_a_watch_the_server_closes_at_once_makes_the_label_loop_wait_longer_each_time(labelled, pool_config):
    core = fake_api()
    core.read_node.side_effect = lambda *a, **k: model(labelled, "V1Node")
    clock, log = Clock(), Recorder()

    label_loop(core, pool_config, clock, lambda *a: iter(()), len(GROWING), log)

    assert clock.sleeps == GROWING
    assert log.events() == ["watch-ended-early"] * len(GROWING)
    # Each new watch resumes where the last ended: the Node is read once.
    assert core.read_node.call_count == 1
    core.patch_node.assert_not_called()


def test_a_watch_that_lasts_resets_the_backoff(labelled, pool_config):
    core = fake_api()
    core.read_node.side_effect = lambda *a, **k: model(labelled, "V1Node")
    clock, log = Clock(), Recorder()
    lasts = iter([False, False, False, True, False])

    def watch_events(api: Any, name: str, timeout: int, resource_version: str | None) -> Iterator[Any]:
        if next(lasts):
            clock.now += timeout  # the server's timeout, as a healthy watch ends
        return iter(())

    label_loop(core, pool_config, clock, watch_events, 5, log)

    assert clock.sleeps == [1.0, 2.0, 4.0, 1.0]


@pytest.mark.parametrize("error", [ApiException(status=410, reason="Gone"),
                                   urllib3.exceptions.ProtocolError("Connection reset by peer")])
def test_a_watch_that_fails_at_once_backs_off_as_well(labelled, pool_config, error):
    core = fake_api()
    core.read_node.side_effect = lambda *a, **k: model(labelled, "V1Node")
    clock, log = Clock(), Recorder()

    def watch_events(*args: Any) -> Iterator[Any]:
        raise error
        yield  # a generator, as the real watch is: the error comes on the first read

    label_loop(core, pool_config, clock, watch_events, 4, log)

    assert clock.sleeps == GROWING[:4]
    assert log.events() == ["retry"] * 4


def test_the_real_watch_on_a_stream_closed_at_once_returns_instead_of_reopening_it(labelled):
    core = fake_api()
    empty = mock.Mock()
    empty.stream.return_value = iter(())
    core.list_node.return_value = empty

    assert list(kube.watch_node(core, "n1", 60, "1")) == []
    # The client would reopen a closed stream itself without timeout_seconds; with it, the agent's loop decides.
    core.list_node.assert_called_once()


def test_an_unexpected_error_in_a_pass_is_logged_and_backed_off_not_a_crash(labelled, pool_config):
    core = fake_api()
    core.read_node.side_effect = lambda *a, **k: model(labelled, "V1Node")
    clock, log = Clock(), Recorder()

    class Broken:
        node = None
        pods = podwatch.PodCache(core, "n1")

        def __call__(self, node: Any, config: Any) -> labelloop.Next:
            raise KeyError("metadata")

        def wants(self, event: Any) -> bool:
            return False

    labelloop.run_label_loop(core, node_name="n1", load_config=lambda: pool_config, resync_seconds=60, log=log,
                        stop=stop_after(3), sleep=clock.sleep, watch_events=lambda *a: iter(()), rng=lambda: 1.0,
                        clock=clock, reconcile=Broken())

    assert clock.sleeps == [1.0, 2.0, 4.0]
    assert log.events() == ["pass-failed"] * 3
    assert log.records[0]["level"] == "error" and "KeyError" in log.records[0]["error"]


def test_the_inventory_loop_backs_off_errors_and_resets_after_a_good_pass(monkeypatch, labelled, pool_config):
    FakeNvml([a100_40gb() for _ in range(8)]).install(monkeypatch)
    core = fake_api()
    core.read_node.side_effect = [ApiException(status=503), RuntimeError("garbage"), model(labelled, "V1Node"),
                                  ApiException(status=500)]
    clock, log = Clock(), Recorder()

    loop.run_inventory_loop(core, node_name="n1", load_config=lambda: pool_config,
                            read_inventory=inventory.read_inventory, resync_seconds=60, log=log, stop=stop_after(4),
                            sleep=clock.sleep, rng=lambda: 1.0)

    assert clock.sleeps == [1.0, 2.0, 60, 1.0]
    assert [r["event"] for r in log.records] == ["retry", "pass-failed", "inventory", "retry"]


def test_the_gate_backs_off_failed_polls_beyond_its_poll_interval(load_fixture):
    core, batch = fake_api(), fake_api()
    core.list_node.side_effect = ApiException(status=503, reason="Service Unavailable")
    clock, log = Clock(), Recorder()

    code = job.run_gate(core, batch, namespace="gpu-operator", job_namespace="gpu-operator", job_name="gate",
                         timeout_seconds=40, poll_seconds=2, mode="strict", log=log, out=lambda line: None,
                         termination_message_path=None, clock=clock, sleep=clock.sleep, rng=lambda: 1.0)

    assert code == 1
    # Never sooner than the poll interval; then the backoff, cut to the time left.
    assert clock.sleeps == [2.0, 2.0, 4.0, 8.0, 16.0, 8.0]
    assert [r["delaySeconds"] for r in log.records if r["event"] == "poll-failed"][:5] == [2.0, 2.0, 4.0, 8.0, 16.0]
