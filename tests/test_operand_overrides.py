"""`gpu-stack:operands.<operand>`: the per-operand overrides ClusterPolicy's component sections carry (env, args,
resources, pull policy and secrets, repository/image/version, pod annotations, labels, priority and tolerations),
validated once and applied to the operand's own pods and containers."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest

from components.catalogs import operand_overrides as targets
from components.config import ConfigError, OperandOverrides, load_config
from components.config.overrides import parse_quantity
from components.states.driver.targets import gpudirect_sidecars, plan_targets, sidecar_images
from components.kit.stack_inputs import operands
from stacktest import bag, container, env_of, objects, render, stack_config
from test_overrides_by_operand import openshift_with_vm_pools

PROD = stack_config("prod-managed")
TRAINING = stack_config("gpudirect-training")
OPENSHIFT = stack_config("openshift")
OPENSHIFT_VM = openshift_with_vm_pools()
HARBOR = "harbor.platform.internal/nvidia"


def with_operands(base: dict[str, Any], overrides: dict[str, Any], **extra: Any) -> dict[str, Any]:
    config = copy.deepcopy(base)
    config["gpu-stack:operands"] = overrides
    for key, value in extra.items():
        config[f"gpu-stack:{key}"] = value
    return config


def problems(config: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as caught:
        load_config(bag(config))
    return caught.value.problems


def test_catalog_and_model_name_the_same_operands():
    assert tuple(f.alias for f in OperandOverrides.model_fields.values()) == targets.OPERAND_KEYS
    assert targets.OPERAND_KEYS == (
        "driver", "driverManager", "toolkit", "validator", "devicePlugin", "mpsControlDaemon", "gfd", "dcgm",
        "dcgmExporter", "migManager", "nodeStatusExporter", "vgpuManager", "vgpuDeviceManager", "vfioManager",
        "sandboxValidator", "sandboxDevicePlugin", "kataSandboxDevicePlugin", "ccManager", "gds", "gdrcopy", "peermem",
        "draDriver", "vfioManagerDriverManager", "vgpuManagerDriverManager",
    )  # fmt: skip


@pytest.mark.parametrize(
    "value, expected",
    [("100m", "0.1"), ("1", "1"), ("0.5", "0.5"), ("128Mi", 128 * 2**20), ("1e3", 1000), ("2k", 2000), (".5Gi", 2**29), ("+3n", "0.000000003")],
)
def test_quantities_follow_the_api_servers_grammar(value, expected):
    assert parse_quantity(value) == Decimal(expected)


@pytest.mark.parametrize("value", ["1.2.3", "12XB", "Mi", "1 Gi", "", "1mi", "0x10"])
def test_bad_quantities_are_none(value):
    assert parse_quantity(value) is None


BAD = [
    # (operands block, base, key path, fragment of the message)
    ({"devicePlugn": {}}, PROD, "gpu-stack:operands.devicePlugn", "allowed keys: ccManager, dcgm, dcgmExporter"),
    ({"devicePlugin": {"env": [{"name": "1BAD", "value": "x"}]}}, PROD, "gpu-stack:operands.devicePlugin.env[0].name", "C identifier"),
    ({"devicePlugin": {"env": [{"name": "A-B"}]}}, PROD, "gpu-stack:operands.devicePlugin.env[0].name", "not an env var name"),
    ({"devicePlugin": {"env": [{"name": "X", "value": "1"}, {"name": "X", "value": "2"}]}}, PROD, "gpu-stack:operands.devicePlugin.env", "X is set twice"),
    ({"toolkit": {"env": [{"name": "CDI_ENABLED", "value": "false"}]}}, PROD, "gpu-stack:operands.toolkit.env", "CDI_ENABLED is set by toolkit.cdi"),
    ({"toolkit": {"env": [{"name": "RUNTIME_CONFIG", "value": "/x"}]}}, PROD, "gpu-stack:operands.toolkit.env", "toolkit.runtimeConfig"),
    ({"devicePlugin": {"env": [{"name": "MIG_STRATEGY", "value": "mixed"}]}}, PROD, "gpu-stack:operands.devicePlugin.env", "nodePools[].sharing / devicePlugin.migStrategy"),
    ({"gfd": {"env": [{"name": "NODE_NAME", "value": "n"}]}}, PROD, "gpu-stack:operands.gfd.env", "gpu-stack (downward API)"),
    ({"driverManager": {"env": [{"name": "DRAIN_USE_FORCE", "value": "true"}]}}, PROD, "gpu-stack:operands.driverManager.env", "upgrade.drain.force"),
    ({"driver": {"env": [{"name": "KERNEL_MODULE_TYPE", "value": "proprietary"}]}}, PROD, "gpu-stack:operands.driver.env", "KERNEL_MODULE_TYPE is set by driver.kernelModuleType (or nodePools[].driver.kernelModuleType); change that key instead"),
    # what gpu-stack derives from cluster.openshift, refused in the same words
    ({"driver": {"env": [{"name": "OPENSHIFT_VERSION", "value": "4.99"}]}}, OPENSHIFT, "gpu-stack:operands.driver.env", "OPENSHIFT_VERSION is set by cluster.openshift.version; change that key instead"),
    ({"driver": {"env": [{"name": "HTTPS_PROXY", "value": "http://other.proxy:3128"}]}}, OPENSHIFT, "gpu-stack:operands.driver.env", "HTTPS_PROXY is set by cluster.openshift.proxy; change that key instead"),
    ({"driver": {"env": [{"name": "no_proxy", "value": ".internal"}]}}, OPENSHIFT, "gpu-stack:operands.driver.env", "no_proxy is set by cluster.openshift.proxy; change that key instead"),
    ({"vgpuManager": {"env": [{"name": "OPENSHIFT_VERSION", "value": "4.99"}]}}, OPENSHIFT_VM, "gpu-stack:operands.vgpuManager.env", "OPENSHIFT_VERSION is set by cluster.openshift.version"),
    ({"vgpuManager": {"env": [{"name": "http_proxy", "value": "http://other.proxy:3128"}]}}, OPENSHIFT_VM, "gpu-stack:operands.vgpuManager.env", "http_proxy is set by cluster.openshift.proxy"),
    ({"gfd": {"env": [{"name": "USE_NODE_FEATURE_API", "value": "true"}]}}, OPENSHIFT, "gpu-stack:operands.gfd.env", "USE_NODE_FEATURE_API is set by cluster.platform"),
    ({"devicePlugin": {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]}}, PROD, "gpu-stack:operands.devicePlugin.env", "NVIDIA_VISIBLE_DEVICES is set by gpu-stack (fixed by the operand's asset)"),
    ({"dcgmExporter": {"resources": {"limits": {"memory": "12XB"}}}}, PROD, "gpu-stack:operands.dcgmExporter.resources.limits", "not a Kubernetes quantity"),
    ({"dcgmExporter": {"resources": {"requests": {"cpu": True}}}}, PROD, "gpu-stack:operands.dcgmExporter.resources.requests", "expected a quantity"),
    ({"dcgmExporter": {"resources": {"requests": {"gpu": "1"}}}}, PROD, "gpu-stack:operands.dcgmExporter.resources.requests", "not a container resource"),
    ({"dcgmExporter": {"resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "512Mi"}}}}, PROD, "gpu-stack:operands.dcgmExporter.resources", "requests.memory (1Gi) is above limits.memory (512Mi)"),
    ({"dcgmExporter": {"resources": {"requests": {"example.com/foo": "1"}}}}, PROD, "gpu-stack:operands.dcgmExporter.resources", "not overcommitted"),
    ({"dcgmExporter": {"resources": {"requests": {"hugepages-2Mi": "4Mi"}, "limits": {"hugepages-2Mi": "8Mi"}}}}, PROD, "gpu-stack:operands.dcgmExporter.resources", "not overcommitted"),
    ({"gfd": {"imagePullPolicy": "Sometimes"}}, PROD, "gpu-stack:operands.gfd.imagePullPolicy", "allowed values: 'Always', 'IfNotPresent', 'Never'"),
    ({"gfd": {"labels": {"-bad": "x"}}}, PROD, "gpu-stack:operands.gfd.labels", "label key '-bad'"),
    ({"gfd": {"labels": {"team": "x" * 64}}}, PROD, "gpu-stack:operands.gfd.labels", "not a label value"),
    ({"gfd": {"labels": {"app": "mine"}}}, PROD, "gpu-stack:operands.gfd.labels", "selects the operand's pods"),
    ({"gfd": {"annotations": {"Bad.Prefix/x": "1"}}}, PROD, "gpu-stack:operands.gfd.annotations", "DNS subdomain"),
    ({"gfd": {"priorityClassName": "Bad_Name"}}, PROD, "gpu-stack:operands.gfd.priorityClassName", "DNS-1123 subdomain"),
    ({"gfd": {"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}}, PROD, "gpu-stack:operands.gfd.tolerations[0]", "Exists takes no value"),
    ({"gfd": {"tolerations": [{"operator": "Equal", "value": "v"}]}}, PROD, "gpu-stack:operands.gfd.tolerations[0]", "without a key must use operator Exists"),
    ({"gfd": {"tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 30}]}}, PROD, "gpu-stack:operands.gfd.tolerations[0]", "NoExecute only"),
    ({"gfd": {"imagePullSecrets": ["Not_A_Secret"]}}, PROD, "gpu-stack:operands.gfd.imagePullSecrets", "not a valid Secret name"),
    ({"gfd": {"version": "latest"}}, PROD, "gpu-stack:operands.gfd.version", "'latest' is not a reviewable version"),
    ({"gfd": {"image": "Upper/Case"}}, PROD, "gpu-stack:operands.gfd.image", "neither an image name"),
    ({"gfd": {"image": "gfd:v1"}}, PROD, "gpu-stack:operands.gfd.image", "names its registry"),
    ({"gfd": {"image": "harbor.example.com/gfd"}}, PROD, "gpu-stack:operands.gfd.image", "starts with a registry host"),
    ({"gfd": {"image": "harbor.example.com/gfd:v1", "version": "v2"}}, PROD, "gpu-stack:operands.gfd.image", "takes no repository or version"),
    ({"gfd": {"repository": "https://harbor"}}, PROD, "gpu-stack:operands.gfd.repository", "not a registry path"),
    ({"dcgm": {"args": ["-v"]}}, PROD, "gpu-stack:operands.dcgm", "this stack does not deploy dcgm"),
    ({"driver": {"version": "550.90.07"}}, PROD, "gpu-stack:operands.driver.version", "versions.driver (or nodePools[].driver.version)"),
    ({"driver": {"image": "harbor.example.com/driver:550.90.07"}}, PROD, "gpu-stack:operands.driver.image", "the node's OS is appended"),
    ({"driverManager": {"priorityClassName": "high"}}, PROD, "gpu-stack:operands.driverManager", "a container in the pods of operands.driver / operands.vgpuManager / operands.vfioManager"),
    ({"toolkit": {"version": "v1.19.0"}}, with_operands(PROD, {}, versions={"toolkit": "v1.18.0"}), "gpu-stack:operands.toolkit.version", "versions.toolkit is set too"),
    ({"peermem": {"repository": HARBOR}}, TRAINING, "gpu-stack:operands.peermem", "set by operands.driver"),
]


@pytest.mark.parametrize("overrides, base, path, fragment", BAD, ids=[f"{p.split(':')[1]}-{i}" for i, (_, _, p, _) in enumerate(BAD)])
def test_bad_override_names_the_key_and_what_is_allowed(overrides, base, path, fragment):
    found = problems(with_operands(base, overrides))
    assert any(p == path and fragment in m for p, m in found), found


def test_off_openshift_the_driver_may_be_given_a_proxy():
    """gpu-stack renders no proxy there; operands.driver.env is how NVIDIA documents giving the driver one."""
    proxy = [{"name": name, "value": "http://proxy.internal:3128"} for name in ("HTTP_PROXY", "https_proxy")]
    cfg = load_config(bag(with_operands(PROD, {"driver": {"env": proxy}})))
    assert [var.name for var in cfg.operands.by_key()["driver"].env] == ["HTTP_PROXY", "https_proxy"]


def test_an_operand_image_is_resolved_with_the_operators_image_path_rules():
    digest = "sha256:" + "a" * 64
    cfg = load_config(
        bag(
            with_operands(
                PROD,
                {
                    "toolkit": {"repository": HARBOR, "version": "v1.20.1"},
                    "devicePlugin": {"version": digest},
                    # borrows the device plugin's image, then changes what it sets
                    "gfd": {"image": "harbor.platform.internal/gfd/custom:v9"},
                    "validator": {"image": "gpu-operator-validator"},
                    "driver": {"repository": "harbor.platform.internal/vgpu", "image": "vgpu-guest-driver"},
                },
            )
        )
    )
    ops = operands(cfg)
    assert ops.images.toolkit == f"{HARBOR}/container-toolkit:v1.20.1"
    assert ops.images.device_plugin == f"nvcr.io/nvidia/k8s-device-plugin@{digest}"
    assert ops.images.gfd == "harbor.platform.internal/gfd/custom:v9"
    assert ops.images.validator == "nvcr.io/nvidia/gpu-operator-validator:v26.7.0"
    assert ops.images.dcgm_exporter == "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless"
    # the driver keeps its rule: the pool's version, then the node's OS
    images = {t.daemonset: t.image for t in plan_targets(cfg, ops.images.driver_repository)}
    assert set(images.values()) == {"harbor.platform.internal/vgpu/vgpu-guest-driver:595.91.07-ubuntu22.04"}


def test_an_operand_that_borrows_an_image_starts_from_its_owners_override():
    config = with_operands(
        stack_config("onprem-host-driver"),
        {"devicePlugin": {"repository": HARBOR}, "mpsControlDaemon": {"version": "v0.20.1"}, "nodeStatusExporter": {"image": "node-status"}},
    )
    images = operands(load_config(bag(config))).operand_images
    assert images["mpsControlDaemon"] == f"{HARBOR}/k8s-device-plugin:v0.20.1"
    # the stack mirrors nvcr.io (registry.override); the parts the override leaves are the stack's
    assert images["nodeStatusExporter"] == "registry.dc2.corp:5000/nvidia/node-status:v26.7.0"


def test_gpudirect_sidecar_overrides_keep_the_os_tag():
    cfg = load_config(bag(with_operands(TRAINING, {"gds": {"repository": HARBOR, "version": "2.30.0"}, "gdrcopy": {"image": "gdrdrv-custom"}})))
    target = plan_targets(cfg, operands(cfg).images.driver_repository, gpudirect_sidecars(cfg))[0]
    assert sidecar_images(target) == {
        "nvidia-fs-ctr": f"{HARBOR}/nvidia-fs:2.30.0-ubuntu22.04",
        "nvidia-gdrcopy-ctr": "nvcr.io/nvidia/cloud-native/gdrdrv-custom:v2.6-ubuntu22.04",
    }


# One render of the GPUDirect stack with overrides on most of its operands at once.
RENDERED = with_operands(
    TRAINING,
    {
        "driver": {
            "repository": "harbor.platform.internal/vgpu",
            "image": "driver",
            "labels": {"team": "ml-platform"},
            "annotations": {"example.com/owner": "ml-platform"},
            "priorityClassName": "gpu-driver-critical",
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoExecute", "tolerationSeconds": 60}],
            "imagePullSecrets": ["vgpu-pull"],
            "env": [{"name": "DRIVER_DEBUG", "value": "1"}],
        },
        "driverManager": {"env": [{"name": "ENABLE_GPU_POD_EVICTION_DEBUG", "value": "true"}], "imagePullPolicy": "Always"},
        "gds": {"resources": {"requests": {"cpu": "10m"}, "limits": {"memory": "64Mi"}}, "imagePullSecrets": ["ngc-pull", "gds-pull"]},
        "peermem": {"args": ["reload_nvidia_peermem", "--verbose"]},
        "devicePlugin": {"env": [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}, {"name": "LOG_LEVEL", "value": "debug"}]},
        "validator": {"version": "v26.7.1", "imagePullPolicy": "Always", "imagePullSecrets": ["validator-pull"]},
        "dcgm": {"resources": {"requests": {"cpu": 1, "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}}},
    },
)


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict[str, Any]]:
    return objects(render(RENDERED), "DaemonSet")


def test_pod_level_overrides_reach_every_driver_daemonset(rendered):
    for name in ("nvidia-driver-daemonset-h100", "nvidia-driver-daemonset-h200"):
        template = rendered[name]["spec"]["template"]
        spec = template["spec"]
        assert template["metadata"]["labels"]["team"] == "ml-platform"
        assert rendered[name]["metadata"]["labels"]["team"] == "ml-platform"  # the DaemonSet itself too
        assert template["metadata"]["labels"]["app"] == name  # the selector stays
        assert template["metadata"]["annotations"]["example.com/owner"] == "ml-platform"
        assert spec["priorityClassName"] == "gpu-driver-critical"
        assert spec["tolerations"] == [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoExecute", "tolerationSeconds": 60},
        ]
        # the stack's, the driver's, then the sidecar's (named once)
        assert [s["name"] for s in spec["imagePullSecrets"]] == ["ngc-pull", "vgpu-pull", "gds-pull"]


def test_container_overrides_reach_only_their_own_container(rendered):
    ds = rendered["nvidia-driver-daemonset-h100"]
    driver = container(ds, "nvidia-driver-ctr")
    assert driver["image"] == "harbor.platform.internal/vgpu/driver:595.91.07-ubuntu22.04"
    assert env_of(driver)["DRIVER_DEBUG"] == "1" and env_of(driver)["GDS_ENABLED"] == "true"
    manager = container(ds, "k8s-driver-manager")
    assert manager["imagePullPolicy"] == "Always" and env_of(manager)["ENABLE_GPU_POD_EVICTION_DEBUG"] == "true"
    assert "DRIVER_DEBUG" not in env_of(manager)
    assert container(ds, "nvidia-fs-ctr")["resources"] == {"requests": {"cpu": "10m"}, "limits": {"memory": "64Mi"}}
    assert "resources" not in container(ds, "nvidia-gdrcopy-ctr")
    assert container(ds, "nvidia-peermem-ctr")["args"] == ["reload_nvidia_peermem", "--verbose"]
    # peermem runs from the driver image, overridden or not
    assert container(ds, "nvidia-peermem-ctr")["image"] == driver["image"]
    assert container(rendered["nvidia-dcgm"], "nvidia-dcgm-ctr")["resources"] == {
        "requests": {"cpu": "1", "memory": "1Gi"},
        "limits": {"cpu": "2", "memory": "2Gi"},
    }


def test_env_overrides_replace_in_place_and_append_new_names(rendered):
    plugin = container(rendered["nvidia-device-plugin-daemonset"], "nvidia-device-plugin")
    names = [e["name"] for e in plugin["env"]]
    values = env_of(plugin)
    assert values["FAIL_ON_INIT_ERROR"] == "false" and names.index("FAIL_ON_INIT_ERROR") == 1
    assert names[-1] == "LOG_LEVEL" and values["LOG_LEVEL"] == "debug"
    assert names.count("FAIL_ON_INIT_ERROR") == 1


def test_validator_image_follows_everywhere_it_runs(rendered):
    image = "nvcr.io/nvidia/gpu-operator:v26.7.1"
    validator = rendered["nvidia-operator-validator"]
    main = container(validator, "nvidia-operator-validator")
    assert main["image"] == image and main["imagePullPolicy"] == "Always"
    # the gates in front of other operands run the validator image too, with their own pull policy
    gate = container(rendered["nvidia-device-plugin-daemonset"], "toolkit-validation")
    assert gate["image"] == image and gate["imagePullPolicy"] == "IfNotPresent"
    # the workload pods the validator spawns pull it the same way
    plugin_check = env_of(container(validator, "plugin-validation"))
    assert plugin_check["VALIDATOR_IMAGE"] == image and plugin_check["VALIDATOR_IMAGE_PULL_POLICY"] == "Always"
    assert plugin_check["VALIDATOR_IMAGE_PULL_SECRETS"] == "ngc-pull,validator-pull"
    assert [s["name"] for s in validator["spec"]["template"]["spec"]["imagePullSecrets"]] == ["ngc-pull", "validator-pull"]


def test_operands_without_overrides_are_unchanged(rendered):
    toolkit = rendered["nvidia-container-toolkit-daemonset"]["spec"]["template"]["spec"]
    assert toolkit["priorityClassName"] == "system-node-critical"
    assert [s["name"] for s in toolkit["imagePullSecrets"]] == ["ngc-pull"]
    assert container(rendered["nvidia-container-toolkit-daemonset"], "nvidia-container-toolkit-ctr")["imagePullPolicy"] == "IfNotPresent"


def test_a_daemonset_names_an_operand_key_or_none():
    from components.kit.builders import operand_daemonset_parts

    ops = operands(load_config(bag(PROD)))
    with pytest.raises(ValueError, match="nvidia-device-plugin-daemonset: 'devicePlugn' is no gpu-stack:operands key"):
        operand_daemonset_parts("nvidia-device-plugin-daemonset", ops, operand="devicePlugn", deploy_component="device-plugin",
                                service_account="nvidia-device-plugin", containers=[], volumes=[])


def test_a_mount_of_a_volume_the_pod_lacks_is_refused_before_anything_registers():
    from pulumi_kubernetes.core.v1 import ContainerArgs

    from components.kit.builders import host_path, mount, operand_daemonset_parts

    ops = operands(load_config(bag(PROD)))
    plugin = ContainerArgs(name="nvidia-device-plugin", image="x", volume_mounts=[mount("device-plugin", "/var/lib/kubelet"),
                                                                                   mount("cdi-root", "/var/run/cdi")])
    with pytest.raises(ValueError, match="container nvidia-device-plugin mounts 'cdi-root', which is no volume of its pod"):
        operand_daemonset_parts("nvidia-device-plugin-daemonset", ops, operand="devicePlugin", deploy_component="device-plugin",
                                service_account="nvidia-device-plugin", containers=[plugin],
                                volumes=[host_path("device-plugin", "/var/lib/kubelet/device-plugins")])


def test_containers_are_matched_to_their_operand_inside_other_operands_pods():
    # each VM manager's pod has a key of its own for its k8s-driver-manager (falling back to operands.driverManager)
    assert targets.container_operand("k8s-driver-manager", "vfioManager") == "vfioManagerDriverManager"
    assert targets.container_operand("k8s-driver-manager", "vgpuManager") == "vgpuManagerDriverManager"
    assert targets.container_operand("k8s-driver-manager", "driver") == "driverManager"
    assert targets.container_operand("nvidia-vfio-manager", "vfioManager") == "vfioManager"
    # the validation gates in front of an operand are gpu-stack's, not the operand's
    assert targets.container_operand("toolkit-validation", "devicePlugin") is None


def test_replaced_resources_keep_a_dra_flavours_claim():
    from pulumi_kubernetes.core.v1 import ContainerArgs, ResourceClaimArgs, ResourceRequirementsArgs

    from components.config import OperandOverride
    from components.kit.operand_overrides import apply_to_container

    exporter = ContainerArgs(name="nvidia-dcgm-exporter-dra", resources=ResourceRequirementsArgs(claims=[ResourceClaimArgs(name="gpus")]))
    override = OperandOverride.model_validate({"resources": {"limits": {"memory": "1Gi"}}})
    changed = apply_to_container(exporter, override, None)
    assert changed.resources.limits == {"memory": "1Gi"} and [c.name for c in changed.resources.claims] == ["gpus"]
    assert exporter.resources.limits is None  # the state's own object is left as it was
