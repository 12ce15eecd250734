"""Which removal slot a node may take (leases.py), on a fixed clock."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from gpustack_agent import leases

NOW = datetime.datetime(2025, 6, 2, 10, 0, 0, tzinfo=datetime.timezone.utc)
NODE = "ip-10-0-12-35.ec2.internal"
OTHER = "ip-10-0-12-36.ec2.internal"


def lease(holder: str | None, renewed: datetime.datetime | None, duration: int | None = 300,
          **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"leaseTransitions": 2, **spec}
    if holder is not None:
        body["holderIdentity"] = holder
    if renewed is not None:
        body["renewTime"] = leases.format_time(renewed)
    if duration is not None:
        body["leaseDurationSeconds"] = duration
    return {"metadata": {"name": "gpu-stack-removal-0", "namespace": "gpu-operator", "resourceVersion": "77"},
            "spec": body}


@pytest.mark.parametrize(
    ("max_unavailable", "gpu_nodes", "slots"),
    [(1, 40, 1), (3, 2, 3), ("10%", 40, 4), ("10%", 41, 5), ("25%", 2, 1), ("1%", 0, 1), ("100%", 7, 7),
     ("50%", 3, 2)],
)
def test_budget_rounds_a_percentage_up_and_never_below_one(max_unavailable, gpu_nodes, slots):
    assert leases.budget(max_unavailable, gpu_nodes) == slots


def test_slots_are_numbered_leases():
    assert [leases.lease_name(i) for i in range(3)] == [
        "gpu-stack-removal-0", "gpu-stack-removal-1", "gpu-stack-removal-2"]


@pytest.mark.parametrize(
    ("current", "action"),
    [
        (None, leases.CREATE),
        (lease(NODE, NOW - datetime.timedelta(seconds=10)), leases.RENEW),
        # Our own, even long expired: nobody else has taken it.
        (lease(NODE, NOW - datetime.timedelta(hours=1)), leases.RENEW),
        (lease(OTHER, NOW - datetime.timedelta(seconds=299)), None),
        (lease(OTHER, NOW - datetime.timedelta(seconds=300)), None),
        (lease(OTHER, NOW - datetime.timedelta(seconds=301)), leases.TAKE_OVER),
        (lease(None, NOW), leases.TAKE_OVER),
        (lease(OTHER, None), leases.TAKE_OVER),
        (lease(OTHER, None, acquireTime=leases.format_time(NOW)), None),
        (lease(OTHER, NOW, duration=None), leases.TAKE_OVER),
    ],
)
def test_a_slot_is_free_when_missing_ours_unheld_or_expired(current, action):
    assert leases.slot_action(current, NODE, NOW) == action


def test_a_new_lease_names_this_node_as_holder_for_the_lease_duration():
    assert leases.lease_body("gpu-stack-removal-1", "gpu-operator", NODE, NOW) == {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "gpu-stack-removal-1", "namespace": "gpu-operator"},
        "spec": {"holderIdentity": NODE, "leaseDurationSeconds": leases.LEASE_DURATION_SECONDS,
                 "acquireTime": "2025-06-02T10:00:00.000000Z", "renewTime": "2025-06-02T10:00:00.000000Z",
                 "leaseTransitions": 0},
    }


def test_taking_over_counts_a_transition_and_keeps_the_resource_version_for_compare_and_swap():
    expired = lease(OTHER, NOW - datetime.timedelta(hours=1))

    body = leases.lease_body("gpu-stack-removal-0", "gpu-operator", NODE, NOW, expired)

    assert body["metadata"]["resourceVersion"] == "77"
    assert body["spec"]["holderIdentity"] == NODE
    assert body["spec"]["leaseTransitions"] == 3
    assert body["spec"]["acquireTime"] == body["spec"]["renewTime"] == "2025-06-02T10:00:00.000000Z"


def test_renewing_moves_only_the_renew_time():
    acquired = NOW - datetime.timedelta(seconds=30)
    held = lease(NODE, acquired, acquireTime=leases.format_time(acquired))

    body = leases.lease_body("gpu-stack-removal-0", "gpu-operator", NODE, NOW, held)

    assert body["spec"] == {**held["spec"], "renewTime": "2025-06-02T10:00:00.000000Z"}
    assert body["metadata"]["resourceVersion"] == "77"


def test_times_read_back_through_the_client_are_written_as_micro_time():
    # The client hands a MicroTime back as datetime.isoformat(), which drops the fraction on a whole second.
    held = lease(NODE, None, acquireTime="2025-06-02T09:59:00+00:00")

    body = leases.lease_body("gpu-stack-removal-0", "gpu-operator", NODE, NOW, held)

    assert body["spec"]["acquireTime"] == "2025-06-02T09:59:00.000000Z"


@pytest.mark.parametrize(
    ("text", "moment"),
    [("2025-06-02T10:00:00.000000Z", NOW), ("2025-06-02T10:00:00+00:00", NOW), ("2025-06-02T12:00:00+02:00", NOW),
     ("2025-06-02T10:00:00", NOW), ("", None), ("yesterday", None), (None, None)],
)
def test_lease_times_are_read_as_the_api_server_and_the_client_write_them(text, moment):
    assert leases.parse_time(text) == moment
