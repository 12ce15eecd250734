"""The node agent's inventory DaemonSet: where it runs, what it may do, and when the stack renders it."""

from __future__ import annotations

import copy

import pytest

from components.config import ConfigError, load_config
from stacktest import bag, container, env_of, objects, render, render_stack, stack_config

NAME = "gpu-stack-node-inventory"


def test_it_reads_nvml_through_the_nvidia_runtime_unprivileged():
    recording = render_stack("prod-managed")
    ds = objects(recording, "DaemonSet")[NAME]
    spec = ds["spec"]["template"]["spec"]
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.deploy.container-toolkit": "true"}
    assert "initContainers" not in spec
    agent = container(ds, "node-inventory")
    assert agent["image"] == "harbor.platform.internal/gpu-stack/node-agent:0.10.0"
    assert agent["args"] == ["inventory"]
    assert {k: v for k, v in env_of(agent).items() if k != "NODE_NAME"} == {
        "CONFIG_FILE": "/etc/gpu-stack/node-pools.json",
        "RESYNC_SECONDS": "900",
        "NVIDIA_VISIBLE_DEVICES": "all",
        "NVIDIA_DRIVER_CAPABILITIES": "utility",
    }
    assert agent["securityContext"]["runAsNonRoot"] is True and agent["securityContext"]["readOnlyRootFilesystem"] is True
    assert [v["configMap"]["name"] for v in spec["volumes"]] == ["gpu-stack-node-pools"]
    role = objects(recording, "ClusterRole")[NAME]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]


def test_it_comes_after_the_operands_it_reports_on():
    assert list(render_stack("prod-managed").outputs["states"]).index("node-inventory") > list(
        render_stack("prod-managed").outputs["states"]
    ).index("state-operator-validation")


def test_it_can_be_switched_off():
    config = stack_config("prod-managed")
    config["gpu-stack:components"] = {"nodeInventory": False}
    assert NAME not in objects(render(config), "DaemonSet")


def test_without_the_labeller_it_is_not_rendered_unless_asked_for_which_is_refused():
    config = stack_config("dev")
    config["gpu-stack:components"] = {"nodeLabeler": False}
    config["gpu-stack:validation"] = {"mode": "off"}
    # Without the labeller's agents nothing would replace a driver pod: driver changes are left to whoever deletes them.
    config["gpu-stack:upgrade"] = {**config.get("gpu-stack:upgrade", {}), "strategy": "manual"}
    assert NAME not in objects(render(config), "DaemonSet")
    config["gpu-stack:components"]["nodeInventory"] = True
    with pytest.raises(ConfigError) as caught:
        load_config(bag(config))
    assert caught.value.problems == [
        (
            "gpu-stack:components.nodeInventory",
            "the inventory compares each node with the pool the node labeller matched it to: set "
            "components.nodeLabeler: true, or nodeInventory: false",
        )
    ]


def test_a_bad_value_names_the_key():
    config = copy.deepcopy(stack_config("prod-managed"))
    config["gpu-stack:components"] = {"nodeInventory": "sometimes"}
    with pytest.raises(ConfigError) as caught:
        load_config(bag(config))
    assert caught.value.problems == [("gpu-stack:components.nodeInventory", "got 'sometimes'; allowed values: true, false")]
