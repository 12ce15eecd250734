"""The labeller's ConfigMap, fed to the node agent's own logic: what a node of each pool ends up labelled."""

from __future__ import annotations

import json
import sys

from stacktest import ROOT, objects, render_stack

sys.path.insert(0, str(ROOT / "node_images" / "node-agent"))

from gpustack_agent.model.labels import desired_patch, parse_config  # noqa: E402


def agent_config(stack: str) -> dict:
    data = objects(render_stack(stack), "ConfigMap")["gpu-stack-node-pools"]["data"]
    return json.loads(data["node-pools.json"])


def gpu_node(labels: dict[str, str]) -> dict:
    return {"metadata": {"name": "n1", "resourceVersion": "1", "labels": {"feature.node.kubernetes.io/pci-10de.present": "true", **labels}, "annotations": {}}}


def labels_after(node: dict, config: dict) -> dict[str, str]:
    patch = desired_patch(node, config) or {"metadata": {"labels": {}}}
    merged = dict(node["metadata"]["labels"])
    for key, value in patch["metadata"].get("labels", {}).items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def test_rendered_config_is_accepted_by_the_agent():
    for stack in ("dev", "prod-managed", "onprem-host-driver", "a100-mig"):
        parse_config(agent_config(stack))


def test_a100_pool_gets_container_deploy_labels_mig_manager_and_default_plugin_config():
    labels = labels_after(gpu_node({"node.kubernetes.io/instance-type": "p4de.24xlarge"}), agent_config("prod-managed"))
    assert labels["nvidia.com/gpu.present"] == "true"
    for component in ("driver", "container-toolkit", "operator-validator", "device-plugin", "mig-manager"):
        assert labels[f"nvidia.com/gpu.deploy.{component}"] == "true"
    assert "nvidia.com/gpu.deploy.vfio-manager" not in labels
    assert labels["nvidia.com/gpu.workload.config"] == "container"
    assert labels["nvidia.com/device-plugin.config"] == "default"
    assert labels["nvidia.com/mig.config"] == "all-disabled"


def test_time_sliced_pool_selects_its_own_plugin_config_and_no_mig():
    labels = labels_after(gpu_node({"node.kubernetes.io/instance-type": "g6.12xlarge"}), agent_config("prod-managed"))
    assert labels["nvidia.com/device-plugin.config"] == "inference-l4"
    assert "nvidia.com/gpu.deploy.mig-manager" not in labels and "nvidia.com/mig.config" not in labels


def test_run_time_values_of_the_driver_manager_survive():
    node = gpu_node({"node.kubernetes.io/instance-type": "p4de.24xlarge", "nvidia.com/gpu.deploy.driver": "pre-installed"})
    assert labels_after(node, agent_config("prod-managed"))["nvidia.com/gpu.deploy.driver"] == "pre-installed"


def test_no_plugin_config_label_when_no_pool_shares():
    labels = labels_after(gpu_node({"gpu-stack.dev/pool": "dev-gpu"}), agent_config("dev"))
    assert "nvidia.com/device-plugin.config" not in labels
    assert labels["nvidia.com/gpu.deploy.device-plugin"] == "true"


def test_mig_pool_nodes_select_their_layout_and_their_plugin_config():
    config = agent_config("a100-mig")
    a100 = labels_after(gpu_node({"node.kubernetes.io/instance-type": "p4de.24xlarge"}), config)
    assert a100["nvidia.com/mig.config"] == "all-balanced"
    assert a100["nvidia.com/device-plugin.config"] == "a100-mig"
    assert a100["nvidia.com/gpu.deploy.mig-manager"] == "true"
    assert a100["gpu-stack/pool"] == "a100-mig"


def test_mig_capable_pool_that_time_slices_keeps_mig_off():
    h100 = labels_after(gpu_node({"node.kubernetes.io/instance-type": "p5.48xlarge"}), agent_config("a100-mig"))
    assert h100["nvidia.com/mig.config"] == "all-disabled"
    assert h100["nvidia.com/device-plugin.config"] == "h100-shared"


def test_custom_layout_and_mps_pools_on_prem():
    config = agent_config("onprem-host-driver")
    a100 = labels_after(gpu_node({"dc2.corp/gpu": "a100"}), config)
    assert a100["nvidia.com/mig.config"] == "three-2g"
    l40s = labels_after(gpu_node({"dc2.corp/gpu": "l40s"}), config)
    assert l40s["nvidia.com/device-plugin.config"] == "l40s"
    assert "nvidia.com/mig.config" not in l40s  # L40S has no MIG
