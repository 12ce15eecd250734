"""Labelling rules (labels.py) against recorded Node objects."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from gpustack_agent.model import labels
from gpustack_agent.model.labels import ConfigError, desired_patch, parse_config

FIXTURES = Path(__file__).resolve().parent / "fixtures"
NODE_FIXTURES = sorted(p.stem for p in FIXTURES.glob("node-*.json"))

APPLIED = labels.APPLIED_LABELS_ANNOTATION
CONTAINER_DEPLOY = [
    "nvidia.com/gpu.deploy.container-toolkit",
    "nvidia.com/gpu.deploy.dcgm",
    "nvidia.com/gpu.deploy.dcgm-exporter",
    "nvidia.com/gpu.deploy.device-plugin",
    "nvidia.com/gpu.deploy.driver",
    "nvidia.com/gpu.deploy.gpu-feature-discovery",
    "nvidia.com/gpu.deploy.mig-manager",
    "nvidia.com/gpu.deploy.mps-control-daemon",
    "nvidia.com/gpu.deploy.node-status-exporter",
    "nvidia.com/gpu.deploy.operator-validator",
]


def node_labels(node: dict[str, Any]) -> dict[str, str]:
    return node["metadata"]["labels"]


def test_fresh_gpu_node_gets_present_pool_and_deploy_labels(load_fixture, pool_config):
    patch = desired_patch(load_fixture("node-a100-fresh"), pool_config)

    expected_labels = {key: "true" for key in CONTAINER_DEPLOY}
    expected_labels.update({
        "nvidia.com/gpu.present": "true",
        "gpu-stack/pool": "a100",
        "nvidia.com/gpu.workload.config": "container",
        "nvidia.com/device-plugin.config": "a100",
    })
    assert patch == {
        "metadata": {
            "labels": expected_labels,
            "annotations": {
                APPLIED: '["gpu-stack/pool","nvidia.com/device-plugin.config","nvidia.com/gpu.workload.config"]'
            },
        }
    }


def test_reconciled_node_needs_no_patch(load_fixture, pool_config):
    # driver=pre-installed was written by the driver manager and must survive.
    node = load_fixture("node-a100-labelled")
    assert node_labels(node)["nvidia.com/gpu.deploy.driver"] == "pre-installed"
    assert desired_patch(node, pool_config) is None


@pytest.mark.parametrize(
    "existing",
    ["false", "pre-installed", "paused-for-driver-upgrade", "paused-for-mig-change", "true_paused-for-driver-upgrade"],
)
def test_existing_non_empty_deploy_value_is_never_overwritten(load_fixture, pool_config, existing):
    node = load_fixture("node-a100-labelled")
    node_labels(node)["nvidia.com/gpu.deploy.device-plugin"] = existing
    assert desired_patch(node, pool_config) is None


def test_missing_or_empty_deploy_label_is_set_to_true(load_fixture, pool_config):
    node = load_fixture("node-a100-labelled")
    del node_labels(node)["nvidia.com/gpu.deploy.dcgm"]
    node_labels(node)["nvidia.com/gpu.deploy.dcgm-exporter"] = ""

    patch = desired_patch(node, pool_config)

    assert patch == {"metadata": {"labels": {
        "nvidia.com/gpu.deploy.dcgm": "true",
        "nvidia.com/gpu.deploy.dcgm-exporter": "true",
    }}}


def test_other_workloads_deploy_labels_are_removed_unless_paused(load_fixture, pool_config):
    node = load_fixture("node-h100-mig-paused")

    patch = desired_patch(node, pool_config)

    assert patch is not None
    changes = patch["metadata"]["labels"]
    # vm workload label with a plain value: removed.
    assert changes["nvidia.com/gpu.deploy.vgpu-manager"] is None
    # vm workload label a manager paused: left for the manager to restore.
    assert "nvidia.com/gpu.deploy.sandbox-device-plugin" not in changes
    # this pool's own deploy labels paused by the MIG manager: untouched.
    for key in ("device-plugin", "gpu-feature-discovery", "dcgm", "dcgm-exporter"):
        assert f"nvidia.com/gpu.deploy.{key}" not in changes
    # the pool owns mig.config and sets it back.
    assert changes == {"nvidia.com/gpu.deploy.vgpu-manager": None, "nvidia.com/mig.config": "all-disabled"}
    assert "annotations" not in patch["metadata"]


def test_operands_false_removes_all_managed_deploy_labels_even_paused(load_fixture, pool_config):
    node = load_fixture("node-a100-operands-off")
    assert node_labels(node)["nvidia.com/gpu.deploy.driver"] == "paused-for-driver-upgrade"

    patch = desired_patch(node, pool_config)

    assert patch is not None
    changes = patch["metadata"]["labels"]
    for key in CONTAINER_DEPLOY:
        assert changes[key] is None
    # The switch itself is the user's; present and the pool labels still apply.
    assert "nvidia.com/gpu.deploy.operands" not in changes
    assert "nvidia.com/gpu.present" not in changes  # already "true"
    assert changes["gpu-stack/pool"] == "a100"
    assert changes["nvidia.com/device-plugin.config"] == "a100"
    assert patch["metadata"]["annotations"][APPLIED] == (
        '["gpu-stack/pool","nvidia.com/device-plugin.config","nvidia.com/gpu.workload.config"]'
    )


def test_operands_false_still_adds_gpu_present(load_fixture, pool_config):
    node = load_fixture("node-a100-fresh")
    node_labels(node)["nvidia.com/gpu.deploy.operands"] = "false"

    changes = desired_patch(node, pool_config)["metadata"]["labels"]

    assert changes["nvidia.com/gpu.present"] == "true"
    assert not any(key.startswith("nvidia.com/gpu.deploy.") for key in changes)


def test_operands_key_listed_as_managed_is_never_touched(load_fixture, pool_config):
    config = copy.deepcopy(pool_config)
    config["managedDeployLabels"].append("nvidia.com/gpu.deploy.operands")
    config["pools"][0]["deployLabels"].append("nvidia.com/gpu.deploy.operands")

    switched_off = load_fixture("node-a100-operands-off")
    assert "nvidia.com/gpu.deploy.operands" not in desired_patch(switched_off, config)["metadata"]["labels"]
    # Without the switch the agent does not invent one either.
    assert "nvidia.com/gpu.deploy.operands" not in desired_patch(load_fixture("node-a100-fresh"), config)["metadata"]["labels"]


@pytest.mark.parametrize(
    ("pool_order", "expected"),
    [(["general", "a100"], "general"), (["a100", "general"], "a100")],
)
def test_first_matching_pool_wins(load_fixture, pool_config, pool_order, expected):
    general = {"name": "general", "nodeSelector": {}, "deployLabels": ["nvidia.com/gpu.deploy.driver"], "labels": {}}
    pools = {"general": general, "a100": pool_config["pools"][0]}
    config = dict(pool_config, pools=[pools[name] for name in pool_order])

    patch = desired_patch(load_fixture("node-a100-fresh"), config)

    assert patch["metadata"]["labels"]["gpu-stack/pool"] == expected


def test_empty_selector_matches_any_gpu_node(load_fixture, pool_config):
    config = dict(pool_config, pools=[{"name": "everything", "nodeSelector": {}, "deployLabels": [], "labels": {}}])
    node = load_fixture("node-g5-unpooled")

    assert desired_patch(node, config)["metadata"]["labels"]["gpu-stack/pool"] == "everything"


def test_unmatched_gpu_node_gets_only_gpu_present(load_fixture, pool_config):
    node = load_fixture("node-a100-fresh")
    node_labels(node)["node.kubernetes.io/instance-type"] = "g5.xlarge"

    assert desired_patch(node, pool_config) == {"metadata": {"labels": {"nvidia.com/gpu.present": "true"}}}


def test_gpu_node_that_left_its_pool_loses_pool_and_deploy_labels(load_fixture, pool_config):
    # g5 was in an "l4" pool that no longer exists in the config.
    node = load_fixture("node-g5-unpooled")

    patch = desired_patch(node, pool_config)

    assert patch == {"metadata": {
        "labels": {
            "gpu-stack/pool": None,
            "nvidia.com/device-plugin.config": None,
            "nvidia.com/gpu.deploy.driver": None,
            "nvidia.com/gpu.deploy.device-plugin": None,
            # mig-manager is paused-for-mig-change: the MIG manager will restore it.
        },
        "annotations": {APPLIED: None},
    }}


def test_non_gpu_node_only_loses_labels_the_agent_applied(load_fixture, pool_config):
    node = load_fixture("node-cpu-stale")

    patch = desired_patch(node, pool_config)

    # deploy.driver and team were never recorded as applied, and nothing is added.
    assert patch == {"metadata": {
        "labels": {"gpu-stack/pool": None, "nvidia.com/device-plugin.config": None},
        "annotations": {APPLIED: None},
    }}


def test_non_gpu_node_without_agent_history_is_left_alone(load_fixture, pool_config):
    node = load_fixture("node-cpu-stale")
    del node["metadata"]["annotations"][APPLIED]

    assert desired_patch(node, pool_config) is None


def test_gpu_detection_accepts_any_listed_label_but_only_true(load_fixture, pool_config):
    node = load_fixture("node-cpu-stale")
    del node["metadata"]["annotations"][APPLIED]
    node_labels(node)["feature.node.kubernetes.io/pci-0300_10de.present"] = "false"
    assert desired_patch(node, pool_config) is None

    node_labels(node)["feature.node.kubernetes.io/pci-0300_10de.present"] = "true"
    assert desired_patch(node, pool_config)["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"


def test_pool_label_dropped_from_config_is_removed_but_unrecorded_keys_stay(load_fixture, pool_config):
    node = load_fixture("node-a100-labelled")
    node_labels(node)["example.com/cost-center"] = "ml-research"  # never applied by the agent
    config = copy.deepcopy(pool_config)
    del config["pools"][0]["labels"]["nvidia.com/device-plugin.config"]

    patch = desired_patch(node, config)

    assert patch == {"metadata": {
        "labels": {"nvidia.com/device-plugin.config": None},
        "annotations": {APPLIED: '["gpu-stack/pool","nvidia.com/gpu.workload.config"]'},
    }}


def test_pool_labels_overwrite_values_the_stack_owns(load_fixture, pool_config):
    node = load_fixture("node-a100-labelled")
    node_labels(node)["nvidia.com/device-plugin.config"] = "hand-edited"

    patch = desired_patch(node, pool_config)

    assert patch == {"metadata": {"labels": {"nvidia.com/device-plugin.config": "a100"}}}


def test_label_already_present_is_recorded_when_the_pool_starts_owning_it(load_fixture, pool_config):
    node = load_fixture("node-a100-labelled")
    del node["metadata"]["annotations"][APPLIED]

    patch = desired_patch(node, pool_config)

    assert patch == {"metadata": {"annotations": {
        APPLIED: '["gpu-stack/pool","nvidia.com/device-plugin.config","nvidia.com/gpu.workload.config"]'
    }}}


def test_unreadable_applied_record_removes_nothing(load_fixture, pool_config):
    node = load_fixture("node-cpu-stale")
    node["metadata"]["annotations"][APPLIED] = "gpu-stack/pool,nvidia.com/device-plugin.config"

    # Only the unreadable record itself is cleared; the labels stay.
    assert desired_patch(node, pool_config) == {"metadata": {"annotations": {APPLIED: None}}}


def test_record_cannot_make_the_agent_remove_present_or_deploy_labels(load_fixture, pool_config):
    node = load_fixture("node-a100-labelled")
    node["metadata"]["annotations"][APPLIED] = json.dumps(
        ["gpu-stack/pool", "nvidia.com/device-plugin.config", "nvidia.com/gpu.deploy.driver",
         "nvidia.com/gpu.present", "nvidia.com/gpu.workload.config"]
    )

    patch = desired_patch(node, pool_config)

    assert set(patch["metadata"]) == {"annotations"}


@pytest.mark.parametrize("fixture_name", NODE_FIXTURES)
def test_applying_the_patch_settles(load_fixture, apply_patch, pool_config, fixture_name):
    node = load_fixture(fixture_name)
    patch = desired_patch(node, pool_config)
    if patch is not None:
        node = apply_patch(node, patch)
    assert desired_patch(node, pool_config) is None


@pytest.mark.parametrize("version", [5, 0, None, "1", "2", "3", True])
def test_unknown_config_version_is_rejected(load_fixture, pool_config, version):
    config = dict(pool_config, version=version)
    if version is None:
        del config["version"]
    with pytest.raises(ConfigError, match="unsupported node-pools config version"):
        desired_patch(load_fixture("node-a100-fresh"), config)


def _pool(**overrides: Any) -> dict[str, Any]:
    pool = {"name": "p", "nodeSelector": {"node.kubernetes.io/instance-type": "p4d.24xlarge"},
            "deployLabels": ["nvidia.com/gpu.deploy.driver"], "labels": {}}
    pool.update(overrides)
    return pool


@pytest.mark.parametrize(
    ("pools", "message"),
    [
        ([_pool(), _pool()], "used by more than one pool"),
        ([_pool(name="not a label value!")], "not a valid Kubernetes label value"),
        ([_pool(deployLabels=["nvidia.com/gpu.deploy.unknown"])], "not in managedDeployLabels"),
        ([_pool(labels={"gpu-stack/pool": "x"})], "may not set"),
        ([_pool(labels={"nvidia.com/gpu.deploy.driver": "true"})], "may not set"),
        ([_pool(nodeSelector={"nvidia.com/gpu.present": "true"})], "nodeSelector uses labels the agent writes"),
        ([_pool(labels={"example.com/tier": "a"}), _pool(name="q", nodeSelector={"example.com/tier": "a"})],
         "nodeSelector uses labels the agent writes"),
        ([_pool(nodeSelector="p4d")], "nodeSelector must be an object"),
    ],
)
def test_config_that_could_not_settle_is_rejected(pool_config, pools, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(dict(pool_config, pools=pools))


def test_config_requires_gpu_node_labels(pool_config):
    with pytest.raises(ConfigError, match="gpuNodeLabels"):
        parse_config(dict(pool_config, gpuNodeLabels=[]))


def test_describe_changes_reports_old_and_new(load_fixture, pool_config):
    node = load_fixture("node-g5-unpooled")
    patch = desired_patch(node, pool_config)

    described = labels.describe_changes(node, patch)

    assert described["labels"]["gpu-stack/pool"] == {"old": "l4", "new": None}
    assert described["annotations"][APPLIED]["new"] is None


# --- version 2: the removal block --------------------------------------------------------------------------


def test_version_1_is_still_accepted_and_applies_every_change_at_once(pool_config):
    assert pool_config["version"] == 1

    assert parse_config(pool_config).removal is None


def test_version_2_carries_the_removal_pace(paced_config):
    assert parse_config(paced_config).removal == labels.Removal(
        max_unavailable=1, drain=False, namespace="gpu-operator")


@pytest.mark.parametrize("budget", [1, 7, "1%", "25%", "100%"])
def test_removal_budget_is_a_count_or_a_percentage(paced_config, budget):
    paced_config["removal"]["maxUnavailable"] = budget

    assert parse_config(paced_config).removal.max_unavailable == budget


@pytest.mark.parametrize(
    ("removal", "message"),
    [
        (None, "removal must be an object"),
        ("1", "removal must be an object"),
        ({"maxUnavailable": 0, "drain": False, "namespace": "gpu-operator"}, "removal.maxUnavailable"),
        ({"maxUnavailable": -1, "drain": False, "namespace": "gpu-operator"}, "removal.maxUnavailable"),
        ({"maxUnavailable": True, "drain": False, "namespace": "gpu-operator"}, "removal.maxUnavailable"),
        ({"maxUnavailable": 1.5, "drain": False, "namespace": "gpu-operator"}, "removal.maxUnavailable"),
        ({"maxUnavailable": "0%", "drain": False, "namespace": "gpu-operator"}, "removal.maxUnavailable"),
        ({"maxUnavailable": "101%", "drain": False, "namespace": "gpu-operator"}, "removal.maxUnavailable"),
        ({"maxUnavailable": "2", "drain": False, "namespace": "gpu-operator"}, "removal.maxUnavailable"),
        ({"maxUnavailable": "12.5%", "drain": False, "namespace": "gpu-operator"}, "removal.maxUnavailable"),
        ({"drain": False, "namespace": "gpu-operator"}, "removal.maxUnavailable"),
        ({"maxUnavailable": 1, "drain": "false", "namespace": "gpu-operator"}, "removal.drain"),
        ({"maxUnavailable": 1, "namespace": "gpu-operator"}, "removal.drain"),
        ({"maxUnavailable": 1, "drain": False, "namespace": "GPU-Operator"}, "removal.namespace"),
        ({"maxUnavailable": 1, "drain": False, "namespace": "gpu.operator"}, "removal.namespace"),
        ({"maxUnavailable": 1, "drain": False, "namespace": "n" * 64}, "removal.namespace"),
        ({"maxUnavailable": 1, "drain": False}, "removal.namespace"),
    ],
)
def test_version_2_with_a_bad_removal_block_is_rejected_naming_the_key(paced_config, removal, message):
    if removal is None:
        del paced_config["removal"]
    else:
        paced_config["removal"] = removal

    with pytest.raises(ConfigError, match=message):
        parse_config(paced_config)


def test_version_2_driver_label_is_a_pool_label_the_agent_applies(load_fixture, paced_config):
    patch = desired_patch(load_fixture("node-a100-labelled"), paced_config)

    assert patch == {"metadata": {
        "labels": {"gpu-stack/driver": "nvidia-driver-daemonset-a100"},
        "annotations": {APPLIED: '["gpu-stack/driver","gpu-stack/pool","nvidia.com/device-plugin.config",'
                                 '"nvidia.com/gpu.workload.config"]'},
    }}


def version3(paced_config: dict[str, Any], **removal: Any) -> dict[str, Any]:
    config = copy.deepcopy(paced_config)
    config["version"] = 3
    config["removal"].update({"driverUpgrade": "rolling", **removal})
    config["drivers"] = {"nvidia-driver-daemonset-a100": "0123abcd"}
    return config


def test_version_3_carries_the_upgrade_settings_and_the_drivers_digests(paced_config):
    config = parse_config(version3(paced_config, maxParallelUpgrades=3, paused=True, gpuPodEviction=False,
                                   drainPodSelector="app=batch", drainTimeoutSeconds=0, nodeReadyTimeoutSeconds=900))

    removal = config.removal
    assert (removal.max_parallel, removal.paused, removal.driver_upgrade, removal.gpu_pod_eviction) == (
        3, True, "rolling", False)
    assert (removal.drain_pod_selector, removal.drain_timeout_seconds, removal.node_ready_timeout_seconds) == (
        "app=batch", 0, 900)
    assert config.drivers == {"nvidia-driver-daemonset-a100": "0123abcd"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"driverUpgrade": "auto"}, "removal.driverUpgrade must be rolling or manual"),
        ({"driverUpgrade": None}, "removal.driverUpgrade must be rolling or manual"),
        ({"maxParallelUpgrades": -1}, "removal.maxParallelUpgrades must be an integer from 0"),
        ({"maxParallelUpgrades": True}, "removal.maxParallelUpgrades must be an integer from 0"),
        ({"paused": "yes"}, "removal.paused must be true or false"),
        ({"gpuPodEviction": 1}, "removal.gpuPodEviction must be true or false"),
        ({"drainPodSelector": "x" * 2000}, "removal.drainPodSelector must be a label selector of at most 1024"),
        ({"drainTimeoutSeconds": 86_401}, "removal.drainTimeoutSeconds must be an integer from 0 to 86400"),
        ({"nodeReadyTimeoutSeconds": 10}, "removal.nodeReadyTimeoutSeconds must be an integer from 60"),
    ],
)
def test_version_3_with_a_bad_upgrade_setting_is_rejected_naming_the_key(paced_config, change, message):
    with pytest.raises(ConfigError, match=message) as caught:
        parse_config(version3(paced_config, **change))
    assert len(str(caught.value)) < 300, "a huge value is not echoed whole"


@pytest.mark.parametrize(
    ("drivers", "message"),
    [
        ([], "drivers must be an object"),
        ({"Not_A_Name": "0123abcd"}, "is not a DaemonSet name"),
        ({"nvidia-driver-daemonset-a100": "not hex"}, "must be a template digest"),
        ({"nvidia-driver-daemonset-a100": 7}, "must be a template digest"),
    ],
)
def test_version_3_with_bad_driver_digests_is_rejected(paced_config, drivers, message):
    config = version3(paced_config)
    config["drivers"] = drivers
    with pytest.raises(ConfigError, match=message):
        parse_config(config)
