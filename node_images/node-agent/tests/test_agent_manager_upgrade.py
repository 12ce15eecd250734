"""When a vGPU or VFIO manager's node is through its upgrade (upgrade.upgraded): the manager has no readiness probe
of its own, so the node is back only once a sandbox validator that started after the new manager passed."""

from __future__ import annotations

from typing import Any

from agenttest import driver_pod, pod
from gpustack_agent.model import upgrade

NODE = "vgpu-a10-0000"
VGPU = "nvidia-vgpu-manager-daemonset"


def manager(created: str, *, ready: bool = True) -> dict[str, Any]:
    found = pod("vgpu-manager", NODE, owner=("DaemonSet", VGPU), ready=ready,
                labels={"app": VGPU, "app.kubernetes.io/component": "nvidia-vgpu-host-manager",
                        upgrade.REVISION_HASH_LABEL: "rev2"})
    found["metadata"]["creationTimestamp"] = created
    return found


def sandbox_validator(created: str, *, ready: bool = True) -> dict[str, Any]:
    found = pod(f"sandbox-validator-{created}", NODE, owner=("DaemonSet", "nvidia-sandbox-validator"), ready=ready,
                labels={"app": "nvidia-sandbox-validator"})
    found["metadata"]["creationTimestamp"] = created
    return found


def test_a_ready_manager_with_only_the_validator_from_before_is_not_through():
    pods = [manager("2026-11-28T10:05:00Z"), sandbox_validator("2026-11-28T09:00:00Z")]

    assert not upgrade.upgraded(pods, VGPU, "rev2")


def test_a_new_sandbox_validator_still_validating_keeps_the_node_waiting():
    pods = [manager("2026-11-28T10:05:00Z"), sandbox_validator("2026-11-28T10:05:40Z", ready=False)]

    assert not upgrade.upgraded(pods, VGPU, "rev2")


def test_the_sandbox_validator_that_passed_after_the_new_manager_ends_the_upgrade():
    pods = [manager("2026-11-28T10:05:00Z"), sandbox_validator("2026-11-28T10:05:40Z")]

    assert upgrade.upgraded(pods, VGPU, "rev2")
    assert not upgrade.upgraded(pods, VGPU, "rev3"), "a pod at another revision is not the upgrade"


def test_a_driver_is_judged_by_its_own_readiness_probe_alone():
    pods = [driver_pod("driver", NODE, "nvidia-driver-daemonset-a100", revision="rev2")]

    assert upgrade.upgraded(pods, "nvidia-driver-daemonset-a100", "rev2")
