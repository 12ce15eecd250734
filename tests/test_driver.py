"""Driver modes and lifecycle: which driver DaemonSets a stack renders, what they select, how they roll out, and
the order of upgrade waves."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from components.config import load_config
from components.kit import naming
from components.states.driver.targets import plan_targets
from components.states.driver.state import DAEMONSET
from gpustack.render import graph, manifests_yaml
from node_images import catalog as node_image_catalog
from driverfeatures import driver_daemonsets as planned_drivers
from stacktest import STACKS, bag, container, env_of, objects, render, render_stack, stack_config

NVIDIA = "nvcr.io/nvidia/driver"
POOL_LABEL = "gpu-stack/pool"
DRIVER_LABEL = "gpu-stack/driver"
KERNEL_LABEL = "feature.node.kubernetes.io/kernel-version.full"


def driver_daemonsets(recording) -> dict[str, dict[str, Any]]:
    return {name: ds for name, ds in objects(recording, "DaemonSet").items() if name.startswith(DAEMONSET)}


OS_ID = "feature.node.kubernetes.io/system-os_release.ID"
OS_VERSION = "feature.node.kubernetes.io/system-os_release.VERSION_ID"
OS_MAJOR = "feature.node.kubernetes.io/system-os_release.VERSION_ID.major"


def served_pools(ds: dict[str, Any]) -> set[str] | None:
    """The pools a driver DaemonSet's node affinity admits; None when it admits every pool. Its nodes are those the
    agent labelled gpu-stack/driver=<its name>, or, not yet labelled so, those of its pools."""
    affinity = ds["spec"]["template"]["spec"].get("affinity", {}).get("nodeAffinity")
    if affinity is None:
        return None
    assigned, by_pool = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert assigned["matchExpressions"] == [{"key": DRIVER_LABEL, "operator": "In", "values": [ds["metadata"]["name"]]}]
    unassigned, requirement, *os_release = by_pool["matchExpressions"]
    assert unassigned == {"key": DRIVER_LABEL, "operator": "DoesNotExist"}
    assert requirement["key"] == POOL_LABEL and requirement["operator"] == "In"
    # A node not labelled yet is one this DaemonSet's driver is built for: NFD says it runs its OS.
    assert {e["key"] for e in os_release} in ({OS_ID, OS_VERSION}, {OS_ID, OS_MAJOR}), os_release
    return set(requirement["values"])


def could_select_the_same_node(a: dict[str, Any], b: dict[str, Any]) -> bool:
    selector_a = a["spec"]["template"]["spec"]["nodeSelector"]
    selector_b = b["spec"]["template"]["spec"]["nodeSelector"]
    if any(key in selector_b and selector_b[key] != value for key, value in selector_a.items()):
        return False
    pools_a, pools_b = served_pools(a), served_pools(b)
    return pools_a is None or pools_b is None or bool(pools_a & pools_b)


def precompiled_config(entry: node_image_catalog.NodeImage, branch: str) -> dict[str, Any]:
    config = stack_config("prod-precompiled")
    config["gpu-stack:driver"]["branch"] = branch
    config["gpu-stack:upgrade"].pop("waves")
    config["gpu-stack:nodePools"] = [
        {"name": "pool", "nodeSelector": {"pool": "a"}, "gpuModel": "H100-80GB", "nodeImage": entry.name}
    ]
    return config


def unpinned(config: dict[str, Any]) -> dict[str, Any]:
    """The stack as a new user writes it: no pool pins the name its driver shipped under."""
    for pool in config["gpu-stack:nodePools"]:
        driver = pool.get("driver", {})
        driver.pop("daemonSetName", None)
        if "driver" in pool and not driver:
            del pool["driver"]
    return config


CATALOG = node_image_catalog.load_catalog()


# --- precompiled: each pool's DaemonSet selects its kernel and is tagged as the operator tags it -------------------


@pytest.mark.parametrize(
    "entry,branch",
    [(e, b) for e in CATALOG for b in CATALOG.branches],
    ids=[f"{e.name}@{b}" for e in CATALOG for b in CATALOG.branches],
)
def test_every_catalog_image_resolves_to_its_published_or_private_tag(entry, branch):
    (target,) = plan_targets(load_config(bag(precompiled_config(entry, branch))), NVIDIA)
    tag = f"{branch}-{entry.kernel}-{entry.os_tag}"
    expected = f"{NVIDIA}:{tag}" if node_image_catalog.is_published(entry, branch) else f"{entry.private_image}:{tag}"
    assert target.image == expected
    assert target.daemonset == "nvidia-driver-daemonset-pool"
    assert target.kernel == entry.kernel


def test_a_registry_mirror_serves_published_images_but_not_private_ones():
    config = stack_config("prod-precompiled")
    config["gpu-stack:registry"]["override"] = "registry.dc1.platform.internal/nvcr"
    images = {t.pools: t.image for t in plan_targets(load_config(bag(config)), "registry.dc1.platform.internal/nvcr/driver")}
    assert images[("canary",)] == "registry.dc1.platform.internal/nvcr/driver:580-5.15.0-139-generic-ubuntu22.04"
    assert images[("train-a100",)] == "harbor.platform.internal/gpu-stack/driver:580-6.5.0-45-generic-ubuntu22.04"


def test_prod_precompiled_renders_one_daemonset_per_pool_under_the_names_it_shipped():
    daemonsets = driver_daemonsets(render_stack("prod-precompiled"))
    expected = {
        "nvidia-driver-daemonset-canary-5.15.0-139-generic-ubuntu22.04": (
            "nvcr.io/nvidia/driver:580-5.15.0-139-generic-ubuntu22.04", "5.15.0-139-generic", {"canary"}),
        "nvidia-driver-daemonset-fleet-6.5.0-45-generic-ubuntu22.04": (
            "harbor.platform.internal/gpu-stack/driver:580-6.5.0-45-generic-ubuntu22.04", "6.5.0-45-generic", {"train-a100"}),
        # a pool on an older branch NVIDIA published precompiled images for
        "nvidia-driver-daemonset-fleet-6.8.0-79-generic-ubuntu24.04": (
            "nvcr.io/nvidia/driver:570-6.8.0-79-generic-ubuntu24.04", "6.8.0-79-generic", {"infer-l40s"}),
    }
    assert set(daemonsets) == set(expected)
    for name, (image, kernel, pools) in expected.items():
        ds = daemonsets[name]
        spec = ds["spec"]["template"]["spec"]
        assert container(ds, "nvidia-driver-ctr")["image"] == image
        assert spec["nodeSelector"] == {"nvidia.com/gpu.deploy.driver": "true", KERNEL_LABEL: kernel}
        assert served_pools(ds) == pools
        assert ds["spec"]["template"]["metadata"]["labels"]["nvidia.com/precompiled"] == "true"
        assert ds["spec"]["selector"]["matchLabels"] == {"app": name}
        # precompiled images only load modules: probed after 5 s, not 60 s
        assert container(ds, "nvidia-driver-ctr")["startupProbe"]["initialDelaySeconds"] == 5


def test_a_new_stack_names_each_pools_daemonset_after_the_pool():
    targets = plan_targets(load_config(bag(unpinned(stack_config("prod-precompiled")))), NVIDIA)
    assert [(t.daemonset, t.pools) for t in targets] == [
        ("nvidia-driver-daemonset-canary", ("canary",)),
        ("nvidia-driver-daemonset-train-a100", ("train-a100",)),
        ("nvidia-driver-daemonset-infer-l40s", ("infer-l40s",)),
    ]


def test_pools_that_pin_one_name_share_its_daemonset():
    config = stack_config("prod-precompiled")
    config["gpu-stack:nodePools"][2]["nodeImage"] = "ubuntu22.04-6.5.0-45-generic-amd64"
    config["gpu-stack:nodePools"][2]["driver"]["daemonSetName"] = "nvidia-driver-daemonset-fleet-6.5.0-45-generic-ubuntu22.04"
    config["gpu-stack:nodePools"][2]["driver"].pop("branch")  # one DaemonSet runs one branch
    targets = plan_targets(load_config(bag(config)), NVIDIA)
    assert [(t.daemonset, t.pools) for t in targets] == [
        ("nvidia-driver-daemonset-canary-5.15.0-139-generic-ubuntu22.04", ("canary",)),
        ("nvidia-driver-daemonset-fleet-6.5.0-45-generic-ubuntu22.04", ("train-a100", "infer-l40s")),
    ]


# --- managed: one DaemonSet per pool, whatever its OS or wave -----------------------------------------------------


def without_waves(stack: str) -> dict[str, Any]:
    config = stack_config(stack)
    del config["gpu-stack:upgrade"]["waves"]
    return config


def test_without_the_node_labeller_one_daemonset_keeps_the_operator_name_and_selects_every_driver_node():
    config = unpinned(without_waves("prod-managed"))
    config["gpu-stack:components"] = {"nodeLabeler": False, "nodeInventory": False}
    config["gpu-stack:validation"]["mode"] = "off"
    # No labeller, no agents to replace driver pods: the stack leaves that to whoever deletes them.
    config["gpu-stack:upgrade"] = {"strategy": "manual"}
    ds = planned_drivers(config)
    assert list(ds) == ["nvidia-driver-daemonset"]
    assert container(ds["nvidia-driver-daemonset"], "nvidia-driver-ctr")["image"] == "nvcr.io/nvidia/driver:595.91.07-ubuntu22.04"
    assert served_pools(ds["nvidia-driver-daemonset"]) is None


def test_prod_managed_rolls_the_inference_canary_before_training():
    daemonsets = driver_daemonsets(render_stack("prod-managed"))
    assert {name: served_pools(ds) for name, ds in daemonsets.items()} == {
        "nvidia-driver-daemonset-canary": {"inference-l4"},
        "nvidia-driver-daemonset-training": {"training-a100"},
    }


def test_hybrid_stack_renders_one_daemonset_per_os_and_one_for_the_pinned_pool():
    daemonsets = driver_daemonsets(render_stack("hybrid"))
    assert {name: (container(ds, "nvidia-driver-ctr")["image"], served_pools(ds)) for name, ds in daemonsets.items()} == {
        "nvidia-driver-daemonset-canary-ubuntu24.04": ("nvcr.io/nvidia/driver:595.91.07-ubuntu24.04", {"l40s"}),
        "nvidia-driver-daemonset-rest-a10-legacy-rhel9": ("nvcr.io/nvidia/driver:580.126.20-rhel9", {"a10-legacy"}),
    }
    pinned = env_of(container(daemonsets["nvidia-driver-daemonset-rest-a10-legacy-rhel9"], "nvidia-driver-ctr"))
    assert pinned["KERNEL_MODULE_TYPE"] == "proprietary" and "OPEN_KERNEL_MODULES_ENABLED" not in pinned


def test_a_pools_os_changes_its_daemonsets_image_not_its_name():
    base = {t.daemonset: t for t in plan_targets(load_config(bag(unpinned(without_waves("prod-managed")))), NVIDIA)}
    config = unpinned(without_waves("prod-managed"))
    config["gpu-stack:nodePools"][1]["os"] = "ubuntu24.04"
    moved = {t.daemonset: t for t in plan_targets(load_config(bag(config)), NVIDIA)}
    assert set(moved) == set(base) == {"nvidia-driver-daemonset-training-a100", "nvidia-driver-daemonset-inference-l4"}
    assert moved["nvidia-driver-daemonset-inference-l4"].image == "nvcr.io/nvidia/driver:595.91.07-ubuntu24.04"
    assert moved["nvidia-driver-daemonset-training-a100"] == base["nvidia-driver-daemonset-training-a100"]


def test_host_driver_pools_get_no_driver_deploy_label_and_no_daemonset():
    recording = render_stack("hybrid")
    import json

    pools = {
        p["name"]: p
        for p in json.loads(objects(recording, "ConfigMap")["gpu-stack-node-pools"]["data"]["node-pools.json"])["pools"]
    }
    assert "nvidia.com/gpu.deploy.driver" not in pools["dgx-h100"]["deployLabels"]
    assert "nvidia.com/gpu.deploy.driver" in pools["l40s"]["deployLabels"]
    # the rest of the container stack still lands on host-driver nodes
    assert "nvidia.com/gpu.deploy.container-toolkit" in pools["dgx-h100"]["deployLabels"]
    for ds in driver_daemonsets(recording).values():
        assert "dgx-h100" not in served_pools(ds)


def test_long_names_are_cut_to_a_label_value_and_stay_unique():
    name = naming.driver_daemonset("p" * 40, None, per_pool=True)
    assert len(name) <= 63 and name.startswith(f"{DAEMONSET}-ppp")
    assert name != naming.driver_daemonset("p" * 39 + "q", None, per_pool=True)


# --- no node is selected by two driver DaemonSets -----------------------------------------------------------------


def adversarial_config() -> dict[str, Any]:
    """Pools that share kernels and OS across waves, pin their own drivers and mix modes."""
    config = stack_config("prod-precompiled")
    pools = config["gpu-stack:nodePools"]
    pools.append({"name": "canary-2", "nodeSelector": {"x": "2"}, "gpuModel": "L40S", "nodeImage": "ubuntu22.04-5.15.0-139-generic-amd64"})
    pools.append({"name": "pinned", "nodeSelector": {"x": "3"}, "gpuModel": "L40S", "nodeImage": "ubuntu22.04-5.15.0-139-generic-amd64", "driver": {"branch": "595"}})
    pools.append({"name": "managed", "nodeSelector": {"x": "4"}, "gpuModel": "L4", "os": "ubuntu22.04", "driver": {"mode": "managed"}})
    pools.append({"name": "host", "nodeSelector": {"x": "5"}, "gpuModel": "L4", "os": "ubuntu22.04", "driver": {"mode": "host"}})
    config["gpu-stack:upgrade"]["waves"] = [
        {"name": "canary", "pools": ["canary", "canary-2"]},
        {"name": "fleet", "pools": ["train-a100", "infer-l40s", "pinned"]},
        {"name": "last", "pools": ["managed"]},
    ]
    return config


@pytest.mark.parametrize("stack", [*STACKS, "adversarial"])
def test_driver_daemonset_selectors_are_disjoint(stack):
    recording = render(adversarial_config()) if stack == "adversarial" else render_stack(stack)
    daemonsets = driver_daemonsets(recording)
    for (name_a, a), (name_b, b) in itertools.combinations(daemonsets.items(), 2):
        assert not could_select_the_same_node(a, b), f"{name_a} and {name_b} can both land on one node"


def test_adversarial_stack_gives_each_pool_exactly_one_daemonset():
    daemonsets = planned_drivers(adversarial_config())
    served = sorted(pool for ds in daemonsets.values() for pool in served_pools(ds))
    assert served == sorted(["canary", "canary-2", "train-a100", "infer-l40s", "pinned", "managed"])
    pinned = daemonsets["nvidia-driver-daemonset-pinned"]
    assert container(pinned, "nvidia-driver-ctr")["image"] == "nvcr.io/nvidia/driver:595-5.15.0-139-generic-ubuntu22.04"
    managed = daemonsets["nvidia-driver-daemonset-managed"]
    assert container(managed, "nvidia-driver-ctr")["image"] == "nvcr.io/nvidia/driver:595.91.07-ubuntu22.04"


# --- upgrade policy -> k8s-driver-manager env and update strategy -------------------------------------------------


def manager_env(ds: dict[str, Any]) -> dict[str, Any]:
    return env_of(container(ds, "k8s-driver-manager"))


def test_upgrade_policy_is_rendered_into_the_driver_manager_env_which_never_evicts_with_rolling_upgrades():
    recording = render_stack("prod-precompiled")
    for ds in driver_daemonsets(recording).values():
        env = manager_env(ds)
        # The node agents' drain (the coordinator evicting) empties a node before its driver pod goes.
        assert {k: env[k] for k in env if k.startswith(("ENABLE_", "DRAIN_"))} == {
            "ENABLE_GPU_POD_EVICTION": "false",
            "ENABLE_AUTO_DRAIN": "false",
            "DRAIN_USE_FORCE": "false",
            "DRAIN_POD_SELECTOR_LABEL": "gpu-stack.io/drain!=never",
            "DRAIN_TIMEOUT_SECONDS": "900s",
            "DRAIN_DELETE_EMPTYDIR_DATA": "true",
        }
        assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
        # The node agents roll it within the fleet budget; the DaemonSet controller never replaces a driver pod.
        assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}
    resources = {r for rule in objects(recording, "ClusterRole")["nvidia-driver"]["rules"] for r in rule["resources"]}
    assert "pods/eviction" not in resources, "a token on every GPU node must not evict pods of other nodes"


def test_default_upgrade_policy_evicts_gpu_pods_one_node_at_a_time():
    recording = render_stack("dev")
    ds = objects(recording, "DaemonSet")["nvidia-driver-daemonset"]
    env = manager_env(ds)
    # the agents evict (through the coordinator), the driver manager does not
    assert (env["ENABLE_GPU_POD_EVICTION"], env["ENABLE_AUTO_DRAIN"], env["DRAIN_TIMEOUT_SECONDS"]) == ("false", "false", "300s")
    assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}
    removal = json.loads(objects(recording, "ConfigMap")["gpu-stack-node-pools"]["data"]["node-pools.json"])["removal"]
    assert removal == {
        "maxUnavailable": 1, "maxParallelUpgrades": 0, "paused": False, "drain": False, "drainPodSelector": "",
        "drainTimeoutSeconds": 300, "gpuPodEviction": True, "driverUpgrade": "rolling", "nodeReadyTimeoutSeconds": 1800,
        "namespace": "gpu-operator",
    }


def test_manual_strategy_leaves_driver_pods_until_someone_deletes_them():
    config = stack_config("prod-managed")
    config["gpu-stack:upgrade"] = {"strategy": "manual", "gpuPodEviction": False, "drain": {"force": True, "timeoutSeconds": 0}}
    ds = planned_drivers(config)["nvidia-driver-daemonset-training"]
    assert ds["spec"]["updateStrategy"] == {"type": "OnDelete"}
    env = manager_env(ds)
    assert (env["ENABLE_GPU_POD_EVICTION"], env["DRAIN_USE_FORCE"], env["DRAIN_TIMEOUT_SECONDS"]) == ("false", "true", "0s")


def test_with_manual_upgrades_the_driver_manager_evicts_and_keeps_the_grant_as_nvidias_does():
    config = stack_config("prod-managed")
    config["gpu-stack:upgrade"] = {"strategy": "manual"}
    recording = render(config)
    env = manager_env(objects(recording, "DaemonSet")["nvidia-driver-daemonset-training"])
    assert env["ENABLE_GPU_POD_EVICTION"] == "true", "nothing else drains a node whose driver pod someone deletes"
    rules = objects(recording, "ClusterRole")["nvidia-driver"]["rules"]
    assert {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]} in rules


def test_other_operands_keep_the_daemonsets_update_strategy():
    config = stack_config("prod-managed")
    config["gpu-stack:daemonsets"] = {"maxUnavailable": "25%"}
    daemonsets = objects(render(config), "DaemonSet")
    assert daemonsets["nvidia-driver-daemonset-canary"]["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert daemonsets["nvidia-device-plugin-daemonset"]["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == "25%"


def test_the_node_pools_document_carries_the_fleet_budget_and_every_driver_template():
    config = stack_config("prod-precompiled")
    config["gpu-stack:upgrade"].update(maxUnavailable="20%", maxParallelUpgrades=3, paused=True, nodeReadyTimeoutSeconds=900)
    recording = render(config)
    document = json.loads(objects(recording, "ConfigMap")["gpu-stack-node-pools"]["data"]["node-pools.json"])
    assert document["version"] == 4
    assert document["removal"] == {
        "maxUnavailable": "20%", "maxParallelUpgrades": 3, "paused": True, "drain": True,
        "drainPodSelector": "gpu-stack.io/drain!=never", "drainTimeoutSeconds": 900, "gpuPodEviction": True,
        "driverUpgrade": "rolling", "nodeReadyTimeoutSeconds": 900, "namespace": "gpu-operator",
    }
    assert document["drivers"] == {
        name: ds["metadata"]["annotations"]["gpu-stack/template-digest"] for name, ds in driver_daemonsets(recording).items()
    }


# --- waves: order in graph.json -----------------------------------------------------------------------------------


def closure(resources: dict[str, dict[str, Any]], urn: str) -> set[str]:
    """Every resource `urn` waits for, directly or through its dependencies."""
    seen: set[str] = set()
    todo = list(resources[urn]["dependencies"])
    while todo:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            todo += resources[current]["dependencies"]
    return seen


@pytest.fixture(scope="module")
def precompiled_graph() -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    resources = {r["urn"]: r for r in graph(render_stack("prod-precompiled"))["resources"]}
    by_name = {r["name"]: urn for urn, r in resources.items() if r["custom"]}
    return resources, by_name


CANARY = "nvidia-driver-daemonset-canary-5.15.0-139-generic-ubuntu22.04"
FLEET = ("nvidia-driver-daemonset-fleet-6.5.0-45-generic-ubuntu22.04", "nvidia-driver-daemonset-fleet-6.8.0-79-generic-ubuntu24.04")
GATE = "gpu-stack-gate-canary"


def test_fleet_daemonsets_wait_for_the_canary_gate_which_waits_for_the_canary_and_the_validator(precompiled_graph):
    resources, by_name = precompiled_graph
    for fleet in FLEET:
        assert by_name[GATE] in resources[by_name[fleet]]["dependencies"]
    gate_waits_for = closure(resources, by_name[GATE])
    assert {by_name[CANARY], by_name["nvidia-operator-validator"], by_name["nvidia-device-plugin-daemonset"]} <= gate_waits_for
    assert not {by_name[f] for f in FLEET} & gate_waits_for


def test_nothing_the_validator_needs_waits_for_a_wave_gate(precompiled_graph):
    resources, by_name = precompiled_graph
    for name in (CANARY, "nvidia-operator-validator", "nvidia-container-toolkit-daemonset", "nvidia-device-plugin-daemonset"):
        assert by_name[GATE] not in closure(resources, by_name[name]), name


def test_stack_validation_waits_for_the_last_wave(precompiled_graph):
    resources, by_name = precompiled_graph
    assert {by_name[f] for f in FLEET} <= closure(resources, by_name["gpu-stack-validation"])


def test_the_canary_gate_judges_the_canary_pools_and_daemonsets_strictly():
    job = objects(render_stack("prod-precompiled"), "Job")[GATE]
    env = env_of(job["spec"]["template"]["spec"]["containers"][0])
    assert (env["MODE"], env["POOLS"], env["DRIVER_DAEMONSETS"], env["TIMEOUT_SECONDS"]) == ("strict", "canary", CANARY, "2700")
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == "gpu-stack-wave-gate"
    role = objects(render_stack("prod-precompiled"), "Role")["gpu-stack-wave-gate"]
    daemonset_rule = next(r for r in role["rules"] if r["resources"] == ["daemonsets"])
    # its wave's drivers, and the validator whose rollout must be done before its pods vouch for a node
    assert daemonset_rule == {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get"],
                              "resourceNames": [CANARY, "nvidia-operator-validator"]}
    assert env["VALIDATOR_DAEMONSETS"] == "nvidia-operator-validator"


def test_the_gate_reruns_exactly_when_its_pools_daemonset_changes():
    def gate_digest(config: dict[str, Any]) -> str:
        return objects(render(config), "Job")[GATE]["metadata"]["annotations"]["gpu-stack/gate-digest"]

    base = stack_config("prod-precompiled")
    branch_bump = stack_config("prod-precompiled")
    branch_bump["gpu-stack:driver"]["branch"] = "595"
    fleet_only = stack_config("prod-precompiled")
    fleet_only["gpu-stack:nodePools"][2]["nodeImage"] = "ubuntu22.04-5.15.0-139-generic-amd64"
    assert gate_digest(branch_bump) != gate_digest(base)
    assert gate_digest(fleet_only) == gate_digest(base)


def test_one_wave_needs_no_gate():
    config = stack_config("prod-precompiled")
    config["gpu-stack:upgrade"]["waves"] = [{"name": "all", "pools": ["canary", "train-a100", "infer-l40s"]}]
    recording = render(config)
    assert not [name for name in objects(recording, "Job") if name.startswith(naming.GATE_PREFIX)]
    assert len(driver_daemonsets(recording)) == 3


def test_manifests_list_the_fleet_after_the_canary_gate():
    text = manifests_yaml(render_stack("prod-precompiled"))
    assert text.index(f"name: {CANARY}") < text.index(f"name: {GATE}") < text.index(f"name: {FLEET[0]}")


def test_a_driver_pod_is_ready_only_once_its_node_validated():
    """So a rolling update counts a node as unavailable until it can run GPU work again."""
    for stack in STACKS:
        gpudirect = {"gpudirect-training": ["nvidia-fs-ready", "gdrcopy-ready", "nvidia-peermem-ready"], "openshift": ["gdrcopy-ready"]}.get(stack, [])
        for name, ds in driver_daemonsets(render_stack(stack)).items():
            # DRA pools' drivers are vouched for by the DRA validator (tests/test_dra_stack.py)
            validated = ["dra-ready"] if name.endswith("-dra") else ["cuda-ready", "plugin-ready"]
            files = ["driver-ready", *gpudirect, "toolkit-ready", *validated]
            probe = container(ds, "nvidia-driver-ctr")["readinessProbe"]
            assert probe["exec"]["command"] == ["sh", "-c", " && ".join(f"test -f /run/nvidia/validations/{f}" for f in files)]
    config = stack_config("dev")
    config["gpu-stack:components"] = {"devicePlugin": False}
    probe = container(planned_drivers(config)["nvidia-driver-daemonset"], "nvidia-driver-ctr")["readinessProbe"]
    # without a device plugin the validator has no plugin check, so it never writes plugin-ready
    assert "plugin-ready" not in probe["exec"]["command"][2]


def test_every_driver_daemonset_belongs_to_state_driver_whatever_its_wave():
    """So moving a pool to another wave, or reordering waves, never changes a DaemonSet's URN."""
    for stack in STACKS:
        for r in graph(render_stack(stack))["resources"]:
            if r["type"] == "kubernetes:apps/v1:DaemonSet" and r["name"].startswith(DAEMONSET):
                assert "gpu-stack:index:Driver$" in r["urn"], (stack, r["urn"])


def test_a_driver_daemonset_answers_to_where_later_waves_used_to_live():
    recording = render_stack("prod-managed")
    training = recording.find("kubernetes:apps/v1:DaemonSet", "nvidia-driver-daemonset-training")
    assert (
        "urn:pulumi:prod-managed::gpu-stack::gpu-stack:index:GpuStack$gpu-stack:index:DriverWaves"
        "$kubernetes:apps/v1:DaemonSet::nvidia-driver-daemonset-training"
    ) in training.aliases


def test_a_removed_driver_daemonset_leaves_its_pods_for_the_node_agent_to_hand_over():
    for ds in driver_daemonsets(render_stack("prod-managed")).values():
        assert ds["metadata"]["annotations"]["pulumi.com/deletionPropagationPolicy"] == "orphan"
        assert "gpu-stack/upgrade-wave" not in ds["spec"]["template"]["metadata"]["labels"]
