"""The driver policies on real renders: each stack passes, and the same stack broken in one place does not.

Breakages the configuration validator already refuses are put into the recorded registrations, the way a
faulty component would have rendered them; every policy runs through the analyzer path (`run_policies`).
"""

from __future__ import annotations

from typing import Callable, Optional

import pytest

from gpustack.mockrun import Recording
from gpustack.policyrun import pack_config, run_policies
from policytest import POLICIES, edit_pools, edited, messages, registration
from stacktest import STACKS, per_stack, render, render_stack, stack_config

DRIVER_POLICIES = ("single-driver-per-node", "precompiled-image-exists", "driver-supports-gpu", "upgrade-safety")


def pod_spec(recording: Recording, name: str) -> dict:
    return registration(recording, "DaemonSet", name).inputs["spec"]["template"]["spec"]


def driver_container(recording: Recording, name: str) -> dict:
    return next(c for c in pod_spec(recording, name)["containers"] if c["name"] == "nvidia-driver-ctr")


def serve_pools(recording: Recording, name: str, pools: list[str], daemonsets: Optional[list[str]] = None) -> None:
    """Make driver DaemonSet `name` select the nodes of `pools` (not yet assigned a driver DaemonSet) and those the
    agent assigned to `daemonsets` (default: itself)."""
    terms = pod_spec(recording, name)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assigned, by_pool = terms["nodeSelectorTerms"]
    assigned["matchExpressions"][0]["values"] = daemonsets or [name]
    next(e for e in by_pool["matchExpressions"] if e["key"] == "gpu-stack/pool")["values"] = pools


def with_gpu_model(recording: Recording, pool: str, model: str) -> Recording:
    return edit_pools(recording, lambda pools: next(p for p in pools if p["name"] == pool).update(gpuModel=model))


def only(found: list[str]) -> str:
    assert len(found) == 1, found
    return found[0]


# `make check-stacks` (CI) runs the whole pack on every stack; here the representative ones, the rest in `make test-all`.
@pytest.mark.parametrize("stack", per_stack())
@pytest.mark.parametrize("policy", DRIVER_POLICIES)
def test_every_stack_passes_the_driver_policies(stack, policy):
    assert messages(render_stack(stack), policy, pack_config(stack)) == []


# --- single-driver-per-node ---------------------------------------------------------------------------------------


def test_two_driver_daemonsets_serving_one_pool_are_refused():
    both = ["nvidia-driver-daemonset-training", "nvidia-driver-daemonset-canary"]
    broken = edited(render_stack("prod-managed"), lambda r: serve_pools(r, both[0], ["training-a100", "inference-l4"], both))
    message = only(messages(broken, "single-driver-per-node"))
    assert "DaemonSet gpu-operator/nvidia-driver-daemonset-canary and DaemonSet gpu-operator/nvidia-driver-daemonset-training" in message
    assert "pool(s) inference-l4" in message and "fix: " in message


def test_different_kernels_keep_driver_daemonsets_apart_even_in_one_pool():
    recording = render_stack("prod-precompiled")
    fleet = "nvidia-driver-daemonset-fleet-6.5.0-45-generic-ubuntu22.04"
    other = "nvidia-driver-daemonset-fleet-6.8.0-79-generic-ubuntu24.04"
    broken = edited(recording, lambda r: serve_pools(r, fleet, ["train-a100", "infer-l40s"], [fleet, other]))
    assert messages(broken, "single-driver-per-node") == []


def listed_oses() -> Recording:
    """prod-managed with its training pool moving from Ubuntu 22.04 to 24.04: a driver DaemonSet per OS."""
    config = stack_config("prod-managed")
    training = next(p for p in config["gpu-stack:nodePools"] if p["name"] == "training-a100")
    training.update(os=["ubuntu22.04", "ubuntu24.04"], driver={"daemonSetNames": {"ubuntu22.04": "nvidia-driver-daemonset-training"}})
    return render(config, stack="prod-managed")


def test_the_daemonsets_of_one_pools_node_images_select_disjoint_nodes():
    assert messages(listed_oses(), "single-driver-per-node", pack_config("prod-managed")) == []


def test_two_daemonsets_of_one_pool_built_for_the_same_os_are_refused():
    def same_os(recording: Recording) -> None:
        terms = pod_spec(recording, "nvidia-driver-daemonset-training-a100-ubuntu24.04")["affinity"]["nodeAffinity"]
        unassigned = terms["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][1]["matchExpressions"]
        next(e for e in unassigned if e["key"].endswith("VERSION_ID"))["values"] = ["22.04"]

    message = only(messages(edited(listed_oses(), same_os), "single-driver-per-node", pack_config("prod-managed")))
    assert "nvidia-driver-daemonset-training" in message and "pool(s) training-a100" in message


def test_a_driver_daemonset_naming_a_host_driver_pool_is_refused():
    broken = edited(render_stack("hybrid"), lambda r: serve_pools(r, "nvidia-driver-daemonset-canary-ubuntu24.04", ["l40s", "dgx-h100"]))
    message = only(messages(broken, "single-driver-per-node"))
    assert "names pool 'dgx-h100', whose nodes ship their own driver" in message and "fix: " in message


# --- precompiled-image-exists -------------------------------------------------------------------------------------

CANARY = "nvidia-driver-daemonset-canary-5.15.0-139-generic-ubuntu22.04"
FLEET_HWE = "nvidia-driver-daemonset-fleet-6.5.0-45-generic-ubuntu22.04"


def pull(name: str, image: str) -> Callable[[Recording], None]:
    return lambda r: driver_container(r, name).update(image=image)


def test_a_branch_nvidia_does_not_build_is_refused_with_the_build_recipe():
    broken = edited(render_stack("prod-precompiled"), pull(CANARY, "nvcr.io/nvidia/driver:560-5.15.0-139-generic-ubuntu22.04"))
    message = only(messages(broken, "precompiled-image-exists"))
    assert message.startswith(f"DaemonSet gpu-operator/{CANARY} pulls nvcr.io/nvidia/driver:560-5.15.0-139-generic-ubuntu22.04")
    assert "NVIDIA publishes no 560-5.15.0-139-generic-ubuntu22.04" in message
    assert "node_images/driver-precompiled/build.sh" in message


def test_a_private_build_pulled_from_nvidia_points_at_the_private_repository():
    broken = edited(render_stack("prod-precompiled"), pull(FLEET_HWE, "nvcr.io/nvidia/driver:580-6.5.0-45-generic-ubuntu22.04"))
    assert "fix: pull the private build from harbor.platform.internal/gpu-stack/driver" in only(messages(broken, "precompiled-image-exists"))


def test_a_kernel_outside_the_catalog_is_refused():
    def other_kernel(r: Recording) -> None:
        pull(CANARY, "nvcr.io/nvidia/driver:580-5.15.0-200-generic-ubuntu22.04")(r)
        pod_spec(r, CANARY)["nodeSelector"]["feature.node.kubernetes.io/kernel-version.full"] = "5.15.0-200-generic"

    message = only(messages(edited(render_stack("prod-precompiled"), other_kernel), "precompiled-image-exists"))
    assert "runs kernel 5.15.0-200-generic on ubuntu22.04, which is in no entry of node_images/catalog.yaml" in message


def test_a_tag_for_another_kernel_than_the_nodes_run_is_refused():
    broken = edited(render_stack("prod-precompiled"), pull(CANARY, "nvcr.io/nvidia/driver:580-6.8.0-79-generic-ubuntu24.04"))
    assert "on nodes running kernel 5.15.0-139-generic" in only(messages(broken, "precompiled-image-exists"))


# --- driver-supports-gpu ------------------------------------------------------------------------------------------


def test_a_gpu_past_its_last_branch_and_on_the_wrong_modules_is_refused():
    broken = with_gpu_model(render_stack("prod-managed"), "training-a100", "V100")
    found = messages(broken, "driver-supports-gpu")
    assert len(found) == 2, found
    assert "runs driver branch 595 on pool 'training-a100', but the V100 is supported up to driver branch 580 only" in found[0]
    assert "loads open kernel modules on pool 'training-a100', but the V100 predates Turing" in found[1]
    assert all(m.startswith("DaemonSet gpu-operator/nvidia-driver-daemonset-training") and "fix: " in m for m in found)


def test_a_pinned_branch_older_than_the_gpu_is_refused():
    broken = with_gpu_model(render_stack("hybrid"), "a10-legacy", "B300")
    found = messages(broken, "driver-supports-gpu")
    assert not any("runs driver branch" in m for m in found)  # B300 support starts at 580, the pool's branch
    assert any("loads proprietary kernel modules on pool 'a10-legacy', but the B300 runs only on the open kernel modules" in m for m in found)


def test_a_driver_by_digest_cannot_be_verified():
    config = stack_config("dev")
    config["gpu-stack:versions"] = {"driver": "sha256:" + "b" * 64}
    message = only(messages(render(config), "driver-supports-gpu"))
    assert "whose branch cannot be read" in message and "fix: pin the driver by version tag" in message


def test_gds_from_2_17_5_needs_open_modules():
    def add_gds(r: Recording) -> None:
        spec = pod_spec(r, "nvidia-driver-daemonset-rest-a10-legacy-rhel9")
        spec["containers"].append({"name": "nvidia-fs", "image": "nvcr.io/nvidia/cloud-native/nvidia-fs:2.29.4"})

    found = messages(edited(render_stack("hybrid"), add_gds), "driver-supports-gpu")
    assert any("runs GDS 2.29.4 on proprietary kernel modules" in m for m in found), found


# --- upgrade-safety -----------------------------------------------------------------------------------------------


def test_several_pools_without_a_canary_wave_are_reported():
    config = stack_config("prod-managed")
    del config["gpu-stack:upgrade"]["waves"]
    message = only(messages(render(config), "upgrade-safety"))
    assert "2 pools (training-a100, inference-l4) take a driver change at once" in message
    assert "fix: set gpu-stack:upgrade.waves" in message


def test_a_manual_upgrades_driver_manager_that_neither_evicts_nor_drains_is_reported():
    config = stack_config("prod-managed")
    config["gpu-stack:upgrade"].update(gpuPodEviction=False, strategy="manual")
    for key in ("waves", "waitForCompletion"):  # both need `rolling`
        config["gpu-stack:upgrade"].pop(key, None)
    found = [m for m in messages(render(config), "upgrade-safety") if "k8s-driver-manager" in m]
    assert len(found) == 2  # both pools' DaemonSets
    assert all("neither evicts GPU pods nor drains" in m and "fix: gpu-stack:upgrade.gpuPodEviction: true" in m for m in found)


def test_with_rolling_upgrades_the_driver_manager_evicts_nothing_and_that_is_no_finding():
    rendered = render(stack_config("prod-managed"))
    assert not any("k8s-driver-manager" in m for m in messages(rendered, "upgrade-safety"))


@pytest.mark.parametrize("budget,config,problem", [
    ("50%", {}, "maxUnavailable 50%, above the 25% this stack allows"),
    ("10%", {"maxUnavailablePercent": 5}, "maxUnavailable 10%, above the 5% this stack allows"),
    (12, {}, "maxUnavailable 12, above the 10 nodes this stack allows"),
    (3, {"maxUnavailableCount": 2}, "maxUnavailable 3, above the 2 nodes this stack allows"),
])
def test_a_fleet_budget_above_the_stacks_bound_is_reported(budget, config, problem):
    stack = stack_config("prod-precompiled")
    stack["gpu-stack:upgrade"]["maxUnavailable"] = budget
    found = messages(render(stack), "upgrade-safety", {"upgrade-safety": config} if config else None)
    # One budget for the fleet, read from the node-pools document the agents pace by: one report, not one per DaemonSet.
    assert len(found) == 1 and problem in found[0] and "the fleet's driver upgrade budget" in found[0], found


def test_a_driver_daemonset_rolling_by_itself_is_reported():
    def rolling(recording: Recording) -> None:
        ds = registration(recording, "DaemonSet", "nvidia-driver-daemonset-training")
        ds.inputs["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}

    found = messages(edited(render_stack("prod-managed"), rolling), "upgrade-safety")
    assert len(found) == 1 and "has updateStrategy RollingUpdate" in found[0] and "outside the node agents' fleet budget" in found[0]
    assert messages(render_stack("prod-managed"), "upgrade-safety") == []


def test_upgrade_safety_is_mandatory_in_prod_and_advisory_in_dev():
    config = stack_config("prod-managed")
    del config["gpu-stack:upgrade"]["waves"]
    recording = render(config)
    prod = run_policies(recording, [POLICIES["upgrade-safety"]], pack_config("prod-managed"))
    dev = run_policies(recording, [POLICIES["upgrade-safety"]], pack_config("dev"))
    assert [v.enforcement for v in prod] == ["mandatory"]
    assert [v.enforcement for v in dev] == ["advisory"]


def test_one_pool_needs_no_canary():
    assert messages(render_stack("dev"), "upgrade-safety") == []
