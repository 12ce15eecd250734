"""Node-pools document version 4: the agent gives each node the driver DaemonSet of the node image it runs, moves a
node that rebooted into another listed image at once, and never gives one built for another kernel or OS."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpustack_agent.gate import gate
from gpustack_agent.inventory import drift
from gpustack_agent.inventory.inventory import Gpu, Inventory
from gpustack_agent.model import driverimages, labels, removal

KERNEL = "feature.node.kubernetes.io/kernel-version.full"
OS_ID = "feature.node.kubernetes.io/system-os_release.ID"
OS_VERSION = "feature.node.kubernetes.io/system-os_release.VERSION_ID"
OLD_DS = "nvidia-driver-daemonset-a100-5.15.0-1066-aws-ubuntu22.04"
NEW_DS = "nvidia-driver-daemonset-a100-6.8.0-1035-aws-ubuntu22.04"
H100_DS = "nvidia-driver-daemonset-h100"
DRIVER = labels.DRIVER_LABEL


def image(daemonset: str, kernel: str) -> dict[str, Any]:
    return {"daemonSet": daemonset, "nodeLabels": {KERNEL: kernel, OS_ID: "ubuntu", OS_VERSION: "22.04"}}


@pytest.fixture
def v4(paced_config) -> dict[str, Any]:
    """The pools as version 4 renders them: the a100 pool mid-rollout from one kernel to the next."""
    config = copy.deepcopy(paced_config)
    config.update(version=4, removal={**config["removal"], "maxUnavailable": 1})
    config["removal"].update(driverUpgrade="manual")
    for pool in config["pools"]:
        pool["labels"].pop(DRIVER, None)
    a100 = next(p for p in config["pools"] if p["name"] == "a100")
    a100["driverImages"] = [image(OLD_DS, "5.15.0-1066-aws"), image(NEW_DS, "6.8.0-1035-aws")]
    h100 = next(p for p in config["pools"] if p["name"] == "h100")
    h100["driverImages"] = [image(H100_DS, "5.15.0-1066-aws")]
    return config


def node(load_fixture, *, driver: str | None = OLD_DS, **nfd: str | None) -> dict[str, Any]:
    found = load_fixture("node-a100-labelled")
    node_labels = found["metadata"]["labels"]
    if driver is not None:
        node_labels[DRIVER] = driver
        record = labels.applied_labels(found["metadata"]["annotations"]) | {DRIVER}
        found["metadata"]["annotations"][labels.APPLIED_LABELS_ANNOTATION] = labels.applied_record(record)
    for key, value in {KERNEL: nfd.get("kernel", "5.15.0-1066-aws"), OS_VERSION: nfd.get("version", "22.04")}.items():
        node_labels[key] = value
    if nfd.get("no_os"):
        node_labels.pop(OS_ID)
    return found


def changes(patch: dict[str, Any] | None) -> dict[str, Any]:
    return ((patch or {}).get("metadata") or {}).get("labels") or {}


def annotations(patch: dict[str, Any] | None) -> dict[str, Any]:
    return ((patch or {}).get("metadata") or {}).get("annotations") or {}


def test_a_new_node_gets_the_daemonset_of_the_image_it_runs(load_fixture, v4):
    fresh = node(load_fixture, driver=None, kernel="6.8.0-1035-aws")

    patch = labels.desired_patch(fresh, labels.parse_config(v4))

    assert changes(patch)[DRIVER] == NEW_DS
    assert driverimages.UNLISTED_ANNOTATION not in annotations(patch)


def test_a_node_that_rebooted_into_the_next_listed_kernel_moves_to_its_daemonset_at_once(load_fixture, v4):
    # Its old DaemonSet's pod is built for the kernel the node left: nothing there to protect with a slot.
    rebooted = node(load_fixture, kernel="6.8.0-1035-aws")

    plan = removal.plan(rebooted, labels.parse_config(v4))

    assert plan.driver_change is None and not plan.paced
    assert changes(plan.immediate)[DRIVER] == NEW_DS


def test_a_node_still_on_the_old_kernel_keeps_its_daemonset(load_fixture, v4):
    plan = removal.plan(node(load_fixture), labels.parse_config(v4))
    assert DRIVER not in changes(plan.patch) and not plan.paced


def test_a_node_moved_to_another_pool_running_the_same_image_is_handed_over_at_the_pace(load_fixture, v4):
    config = labels.parse_config(v4)
    from_h100 = node(load_fixture, driver=H100_DS)

    plan = removal.plan(from_h100, config)

    assert plan.driver_change == (H100_DS, OLD_DS) and plan.paced


def test_a_node_on_an_image_its_pool_does_not_list_gets_none_and_is_reported(load_fixture, v4):
    config = labels.parse_config(v4)
    unlisted = node(load_fixture, kernel="6.1.0-1999-aws")

    plan = removal.plan(unlisted, config)

    # No DaemonSet of another build follows; the one it has goes at the pace, never from under GPU work.
    assert plan.driver_change == (OLD_DS, None) and plan.paced
    assert DRIVER not in changes(plan.immediate)
    reason = annotations(plan.immediate)[driverimages.UNLISTED_ANNOTATION]
    assert reason.startswith("runs ubuntu22.04 kernel 6.1.0-1999-aws, which pool a100 lists no driver for")
    assert OLD_DS in reason and NEW_DS in reason

    # Once listed again (or the node reimaged onto a listed image), the report goes.
    labelled = copy.deepcopy(unlisted)
    labelled["metadata"]["labels"].pop(DRIVER)
    labelled["metadata"]["annotations"][driverimages.UNLISTED_ANNOTATION] = reason
    labelled["metadata"]["labels"][KERNEL] = "5.15.0-1066-aws"
    assert annotations(labels.desired_patch(labelled, config))[driverimages.UNLISTED_ANNOTATION] is None


def test_an_unlisted_node_is_named_in_the_gate_verdict_and_in_its_drift(load_fixture, v4):
    config = labels.parse_config(v4)
    unlisted = node(load_fixture, driver=None, kernel="6.1.0-1999-aws")
    reason = driverimages.unlisted_reason(unlisted["metadata"]["labels"], "a100", config.pools[0].driver_images)
    unlisted["metadata"]["annotations"][driverimages.UNLISTED_ANNOTATION] = reason

    verdict = gate.evaluate([unlisted], [], pools=("a100",))

    assert verdict["notValidated"][0]["reason"].startswith("node image not listed: runs ubuntu22.04 kernel 6.1.0-1999-aws")
    gpus = tuple(Gpu(index=i, name="NVIDIA A100-SXM4-40GB", pci_device_id="0x20B0", pci_bus_id=f"0000:{i:02x}:00.0",
                     memory_mib=40_960, architecture="Ampere", model="A100-40GB", mig_mode="disabled", mig_pending=None)
                 for i in range(8))
    inventory = Inventory(driver_version="550.90.07", cuda_version="12.4", gpus=gpus)
    found = drift.node_drift(inventory, unlisted["metadata"]["labels"], config)
    assert [d.kind for d in found] == ["node-image"]


def test_a_node_nfd_has_not_labelled_keeps_what_it_has(load_fixture, v4):
    unknown = node(load_fixture, no_os=True, kernel="6.1.0-1999-aws")

    patch = labels.desired_patch(unknown, labels.parse_config(v4))

    assert DRIVER not in changes(patch) and driverimages.UNLISTED_ANNOTATION not in annotations(patch)


@pytest.mark.parametrize(
    ("images", "message"),
    [
        ([], "must be a list of 1 to 16 driver images"),
        ("x", "must be a list of 1 to 16 driver images"),
        ([{"daemonSet": "Bad_Name"}], "driverImages[0].daemonSet is not a DaemonSet name"),
        ([{"daemonSet": "a", "nodeLabels": {"bad key!": "x"}}], "driverImages[0].nodeLabels has an entry that is not a label"),
        ([{"daemonSet": "a"}, {"daemonSet": "a"}], "driverImages[1].daemonSet 'a' is listed twice"),
    ],
)
def test_bad_driver_images_are_refused_naming_the_key(v4, images, message):
    v4["pools"][0]["driverImages"] = images
    with pytest.raises(labels.ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        labels.parse_config(v4)


def test_a_version_4_pool_may_not_set_the_driver_label_itself(v4):
    v4["pools"][0]["labels"][DRIVER] = OLD_DS
    with pytest.raises(labels.ConfigError, match="may not set"):
        labels.parse_config(v4)
