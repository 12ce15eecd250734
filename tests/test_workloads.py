"""Workload types per pool: which DaemonSets can land on a node of each type, and KubeVirt's permission to hand
the passthrough GPUs to VMs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from components.catalogs.catalog import kubevirt_resource_name
from components.states.kubevirt import permitted_mediated_devices
from components.config import ConfigError, load_config
from stacktest import bag, objects, render, render_stack, stack_config

NFD_GPU = {"feature.node.kubernetes.io/pci-10de.present": "true"}


def node_of(pool: dict[str, Any]) -> dict[str, str]:
    """The labels a node of `pool` carries once the node agent labelled it: running the node image of its pool's
    first driver DaemonSet (NFD's labels), whose name the agent writes as gpu-stack/driver."""
    labels = {**NFD_GPU, **pool["nodeSelector"], "gpu-stack/pool": pool["name"], **pool["labels"],
              **{label: "true" for label in pool["deployLabels"]}}
    for image in pool.get("driverImages", [])[:1]:
        labels.update({**image["nodeLabels"], "gpu-stack/driver": image["daemonSet"]})
    return labels


def lands_on(ds: dict[str, Any], labels: dict[str, str]) -> bool:
    spec = ds["spec"]["template"]["spec"]
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    terms = (((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")
    if not terms:
        return True
    return any(all(holds(e, labels) for e in term["matchExpressions"]) for term in terms)


def holds(requirement: dict[str, Any], labels: dict[str, str]) -> bool:
    present = requirement["key"] in labels
    return {
        "In": present and labels.get(requirement["key"]) in requirement.get("values", ()),
        "NotIn": not present or labels[requirement["key"]] not in requirement.get("values", ()),
        "Exists": present,
        "DoesNotExist": not present,
    }[requirement["operator"]]


def daemonsets_by_pool(recording) -> dict[str, set[str]]:
    pools = json.loads(objects(recording, "ConfigMap")["gpu-stack-node-pools"]["data"]["node-pools.json"])["pools"]
    daemonsets = objects(recording, "DaemonSet")
    return {pool["name"]: {name for name, ds in daemonsets.items() if lands_on(ds, node_of(pool))} for pool in pools}


def test_each_workload_type_gets_exactly_its_daemonsets():
    assert daemonsets_by_pool(render_stack("kubevirt")) == {
        "containers-l40s": {
            "gpu-stack-node-labeler",
            "node-feature-discovery-worker",  # NFD labels every node, whatever its type
            "gpu-stack-node-inventory",
            "nvidia-driver-daemonset",
            "nvidia-container-toolkit-daemonset",
            "nvidia-operator-validator",
            "nvidia-device-plugin-daemonset",
            "nvidia-dcgm-exporter",
            "gpu-feature-discovery",
        },
        "vm-a100": {
            "gpu-stack-node-labeler",
            "node-feature-discovery-worker",  # NFD labels every node, whatever its type
            "nvidia-sandbox-validator",
            "nvidia-vfio-manager",
            "nvidia-sandbox-device-plugin-daemonset",
        },
        "vgpu-a10": {
            "gpu-stack-node-labeler",
            "node-feature-discovery-worker",  # NFD labels every node, whatever its type
            "nvidia-vgpu-manager-daemonset",
            "nvidia-vgpu-device-manager",
            "nvidia-sandbox-validator",
            "nvidia-sandbox-device-plugin-daemonset",
        },
    }


def test_a_vgpu_pool_names_its_vgpu_config_on_its_nodes():
    pools = json.loads(objects(render_stack("kubevirt"), "ConfigMap")["gpu-stack-node-pools"]["data"]["node-pools.json"])["pools"]
    labels = {p["name"]: p["labels"] for p in pools}
    assert labels["vgpu-a10"]["nvidia.com/vgpu.config"] == "A10-12Q"
    assert "nvidia.com/vgpu.config" not in labels["vm-a100"]


def test_container_stacks_render_no_vm_operands():
    for stack in ("prod-managed", "dev", "hybrid"):
        names = set(objects(render_stack(stack), "DaemonSet"))
        assert not names & {"nvidia-sandbox-validator", "nvidia-vfio-manager", "nvidia-sandbox-device-plugin-daemonset"}


# --- KubeVirt permittedHostDevices --------------------------------------------------------------------------------


def kubevirt_patches(recording) -> list:
    return [r for r in recording.registrations if r.type == "kubernetes:kubevirt.io/v1:KubeVirtPatch"]


def test_the_kubevirt_cr_is_patched_with_the_passthrough_gpus_and_the_vgpu_types():
    (patch,) = kubevirt_patches(render_stack("kubevirt"))
    inputs = patch.inputs
    assert (inputs["apiVersion"], inputs["kind"]) == ("kubevirt.io/v1", "KubeVirt")
    assert inputs["metadata"]["name"] == "kubevirt" and inputs["metadata"]["namespace"] == "kubevirt"
    # server-side apply under gpu-stack's own field manager: it owns these entries and nothing else of the CR
    assert inputs["metadata"]["annotations"]["pulumi.com/patchFieldManager"] == "gpu-stack"
    assert inputs["spec"] == {
        "configuration": {
            "permittedHostDevices": {
                "pciHostDevices": [
                    {"pciVendorSelector": "10DE:20B2", "resourceName": "nvidia.com/GA100_A100_SXM4_80GB", "externalResourceProvider": True},
                    {"pciVendorSelector": "10DE:20B5", "resourceName": "nvidia.com/GA100_A100_PCIE_80GB", "externalResourceProvider": True},
                ],
                # the vm-vgpu pool splits its A10s by A10-12Q
                "mediatedDevices": [
                    {"mdevNameSelector": "NVIDIA A10-12Q", "resourceName": "nvidia.com/NVIDIA_A10-12Q", "externalResourceProvider": True},
                ],
            }
        }
    }


@pytest.mark.parametrize(
    ("model", "config", "expected"),
    [
        # Turing and older boards publish `GRID <type>`, Ampere on `NVIDIA <type>` (KubeVirt's and OpenShift's docs)
        ("T4", "default", [("GRID T4-8Q", "nvidia.com/GRID_T4-8Q")]),
        ("T4", "T4-2Q", [("GRID T4-2Q", "nvidia.com/GRID_T4-2Q")]),
        ("L40S", "L40S-24Q", [("NVIDIA L40S-24Q", "nvidia.com/NVIDIA_L40S-24Q")]),
        # a config made for another board creates nothing on this one, so nothing is permitted
        ("L40S", "A10-12Q", []),
    ],
)
def test_mediated_device_entries_name_the_types_the_config_creates(model, config, expected):
    assert [(d.mdev_name_selector, d.resource_name) for d in permitted_mediated_devices([(model, config)])] == expected


def test_a_stack_of_only_vgpu_pools_still_patches_kubevirt():
    config = stack_config("kubevirt")
    config["gpu-stack:nodePools"] = [p for p in config["gpu-stack:nodePools"] if p.get("workloadType") != "vm-passthrough"]
    (patch,) = kubevirt_patches(render(config))
    assert set(patch.inputs["spec"]["configuration"]["permittedHostDevices"]) == {"mediatedDevices"}


def test_the_patch_names_another_kubevirt_install_and_can_be_left_to_its_owner():
    config = stack_config("kubevirt")
    config["gpu-stack:sandboxWorkloads"]["kubevirt"] = {"name": "kubevirt-hyperconverged", "namespace": "openshift-cnv"}
    (patch,) = kubevirt_patches(render(config))
    assert patch.inputs["metadata"]["namespace"] == "openshift-cnv"
    config["gpu-stack:sandboxWorkloads"]["kubevirt"]["permitHostDevices"] = False
    assert kubevirt_patches(render(config)) == []


@pytest.mark.parametrize(
    "pci_id,resource",
    [
        ("0x1EB8", "nvidia.com/TU104GL_TESLA_T4"),  # upper-cased, brackets dropped (not TU104GL_Tesla_T4)
        ("0x2335", "nvidia.com/GH100_H200_SXM_141GB"),
        ("0x2321", "nvidia.com/GH100_H100L_94GB"),
        ("0x26B9", "nvidia.com/AD102GL_L40S"),
        ("0x2901", "nvidia.com/GB100_B200"),
        ("0x2348", None),  # no checked pci.ids name: never permitted
    ],
)
def test_resource_names_follow_the_kubevirt_device_plugin(pci_id, resource):
    assert kubevirt_resource_name(pci_id) == resource


def test_a_passthrough_pool_of_a_gpu_without_a_known_resource_name_is_refused():
    config = stack_config("kubevirt")
    config["gpu-stack:nodePools"][1]["gpuModel"] = "GH200"
    with pytest.raises(ConfigError) as caught:
        load_config(bag(config))
    ((path, message),) = caught.value.problems
    assert path == "gpu-stack:nodePools[1].gpuModel"
    assert "knows no KubeVirt resource name for the GH200's PCI ids" in message and "vm-passthrough models: A10, A100-40GB" in message


@pytest.mark.parametrize("key,value,fragment", [
    ("name", "KubeVirt", "DNS-1123 label"),
    ("namespace", "kube_virt", "DNS-1123 label"),
    ("permitHostDevices", "yes", "true, false"),
    ("owner", "x", "unknown key 'owner'"),
])
def test_bad_kubevirt_settings_name_the_key(key, value, fragment):
    config = stack_config("kubevirt")
    config["gpu-stack:sandboxWorkloads"]["kubevirt"] = {key: value}
    with pytest.raises(ConfigError) as caught:
        load_config(bag(config))
    assert any(path == f"gpu-stack:sandboxWorkloads.kubevirt.{key}" and fragment in message for path, message in caught.value.problems), caught.value.problems
