"""The real program under mocks: what is registered, under which parent, after what, against which cluster."""

from __future__ import annotations

import pytest
import yaml

from components.states.order import STATE_NAMES
from gpustack.mockrun import Recording, Registration
from gpustack.render import effective_dependencies, transitive_dependencies
from stacktest import ROOT, STACKS, per_stack, container, env_of, objects, render, render_stack, stack_config

DAEMONSET = "kubernetes:apps/v1:DaemonSet"


def component_of(recording: Recording, registration: Registration) -> Registration:
    return recording.by_urn()[registration.parent]


def daemonset(recording: Recording, name: str) -> Registration:
    return recording.find(DAEMONSET, name)


def dependency_names(recording: Recording, registration: Registration) -> set[str]:
    by_urn = recording.by_urn()
    return {by_urn[d].name for d in registration.dependencies}


def children_of(recording: Recording, state: str) -> set[str]:
    component = next(r for r in recording.registrations if r.type.startswith("gpu-stack:index:") and r.name == state)
    return {r.urn for r in recording.registrations if r.parent == component.urn}


# A preview is a render of its own: every stack's update, the representative stacks' preview (the rest in test-all).
@pytest.mark.parametrize(
    "stack, preview",
    [*((s, False) for s in STACKS), *(pytest.param(*p.values, True, marks=p.marks) if hasattr(p, "values") else (p, True) for p in per_stack())],
)
def test_every_state_is_applied_after_the_previous_enabled_state(stack, preview):
    recording = render_stack(stack, preview=preview)
    built = recording.outputs["states"]
    assert built == [s for s in STATE_NAMES if s in built]
    assert {"pre-requisites", "state-operator-validation"} <= set(built)
    deps = effective_dependencies(recording)
    by_urn = recording.by_urn()

    def waits_for_a_gate(urn: str) -> bool:
        # a later upgrade wave's driver DaemonSet: by design it waits for the gates at the end of the order
        return any(by_urn[d].type == "kubernetes:batch/v1:Job" for d in by_urn[urn].dependencies if d in by_urn)

    for previous, state in zip(built[:-1], built[1:], strict=True):
        before = {urn for urn in children_of(recording, previous) if not waits_for_a_gate(urn)}
        for child in children_of(recording, state):
            assert before <= deps[child], (state, recording.by_urn()[child].name, previous)


@pytest.mark.parametrize("preview", [False, True], ids=["update", "preview"])
def test_each_daemonset_is_parented_to_its_state_and_depends_on_the_previous_state(preview):
    recording = render_stack("prod-managed", preview=preview)
    chain = [
        ("nvidia-driver-daemonset-canary", "state-driver", "node-labeling", "gpu-stack-node-labeler"),
        ("nvidia-container-toolkit-daemonset", "state-container-toolkit", "state-driver", "nvidia-driver-daemonset-canary"),
        ("nvidia-operator-validator", "state-operator-validation", "state-container-toolkit", "nvidia-container-toolkit-daemonset"),
        ("nvidia-device-plugin-daemonset", "state-device-plugin", "state-operator-validation", "nvidia-operator-validator"),
    ]
    for ds_name, state, previous_state, previous_ds in chain:
        ds = daemonset(recording, ds_name)
        assert component_of(recording, ds).name == state
        # the edge is on the DaemonSet itself, not only on its component
        assert previous_ds in dependency_names(recording, ds), ds_name
        parents_of_deps = {component_of(recording, recording.by_urn()[d]).name for d in ds.dependencies}
        assert previous_state in parents_of_deps


@pytest.mark.parametrize(
    "stack,chain",
    [
        (
            "prod-managed",
            ["nvidia-device-plugin-daemonset", "nvidia-dcgm-exporter", "gpu-feature-discovery", "nvidia-mig-manager"],
        ),
        ("a100-mig", ["nvidia-device-plugin-daemonset", "nvidia-dcgm", "nvidia-dcgm-exporter", "gpu-feature-discovery"]),
        (
            "onprem-host-driver",
            [
                "nvidia-device-plugin-daemonset",
                "nvidia-device-plugin-mps-control-daemon",
                "nvidia-dcgm-exporter",
                "gpu-feature-discovery",
                "nvidia-mig-manager",
                "nvidia-node-status-exporter",
            ],
        ),
    ],
)
def test_later_states_follow_the_operator_order_daemonset_to_daemonset(stack, chain):
    recording = render_stack(stack)
    for previous, name in zip(chain[:-1], chain[1:], strict=True):
        assert previous in dependency_names(recording, daemonset(recording, name)), (name, previous)


def test_daemonsets_wait_for_their_own_rbac_and_configmaps():
    recording = render_stack("prod-managed")
    plugin = dependency_names(recording, daemonset(recording, "nvidia-device-plugin-daemonset"))
    assert {"nvidia-device-plugin", "nvidia-device-plugin-entrypoint", "nvidia-device-plugin-configs"} <= plugin
    driver = dependency_names(recording, daemonset(recording, "nvidia-driver-daemonset-canary"))
    assert {"nvidia-driver", "nvidia-driver-startup-probe"} <= driver


def test_namespace_comes_before_every_namespaced_object():
    recording = render_stack("prod-managed")
    namespace = recording.find("kubernetes:core/v1:Namespace", "gpu-operator")
    deps = transitive_dependencies(recording)
    for r in recording.registrations:
        if r.is_kubernetes_object and (r.inputs.get("metadata") or {}).get("namespace"):
            assert namespace.urn in deps[r.urn], r.name


def test_validation_gate_runs_after_every_state_and_nothing_waits_for_it():
    recording = render_stack("prod-managed")
    gate = recording.find("kubernetes:batch/v1:Job", "gpu-stack-validation")
    deps = effective_dependencies(recording)
    states_before = {component_of(recording, recording.by_urn()[d]).name for d in deps[gate.urn]}
    assert set(recording.outputs["states"]) - {"stack-validation"} <= states_before
    gate_children = {r.urn for r in recording.registrations if component_of_name(recording, r) == "stack-validation"}
    for r in recording.registrations:
        if component_of_name(recording, r) != "stack-validation":
            assert not (deps[r.urn] & gate_children), r.name


def component_of_name(recording: Recording, registration: Registration) -> str:
    parent = recording.by_urn().get(registration.parent)
    return parent.name if parent else ""


def test_the_validator_needs_nothing_that_waits_on_the_validator():
    recording = render_stack("prod-managed")
    deps = effective_dependencies(recording)
    validator = daemonset(recording, "nvidia-operator-validator")
    # the plugin the validator's plugin-validation needs is applied without waiting for validator readiness
    assert (daemonset(recording, "nvidia-device-plugin-daemonset").inputs["metadata"]["annotations"]["pulumi.com/skipAwait"]) == "true"
    assert validator.inputs["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
    gate = recording.find("kubernetes:batch/v1:Job", "gpu-stack-validation")
    assert all(gate.urn not in deps[r.urn] for r in recording.registrations)


@pytest.mark.parametrize("stack", STACKS)
def test_no_daemonset_is_awaited_so_up_cannot_hang_on_nodes(stack):
    for ds in objects(render_stack(stack), "DaemonSet").values():
        assert ds["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"


@pytest.mark.parametrize("stack", STACKS)
def test_every_kubernetes_object_goes_through_the_stacks_own_provider(stack):
    recording = render_stack(stack)
    provider = recording.find("pulumi:providers:kubernetes", "cluster")
    assert provider.inputs["context"] == stack_config(stack)["gpu-stack:cluster"]["context"]
    assert provider.inputs["clusterIdentifier"] == stack_config(stack)["gpu-stack:cluster"]["name"]
    for r in recording.registrations:
        if r.custom and r.type.startswith("kubernetes:"):
            assert r.provider.startswith(provider.urn), r.name


def test_the_ambient_kubeconfig_can_never_receive_an_object():
    """Pulumi.yaml disables the default Kubernetes provider: a resource that forgot the stack's provider fails
    instead of landing on whatever cluster the ambient kubeconfig points at."""
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    assert project["config"]["pulumi:disable-default-providers"] == {"value": ["kubernetes"]}


def test_config_maps_and_secrets_are_edited_in_place():
    """As the operator edits them and as config-manager, the MIG manager and the node agent expect."""
    provider = render_stack("prod-managed").find("pulumi:providers:kubernetes", "cluster")
    assert provider.inputs["enableConfigMapMutable"] == "true" and provider.inputs["enableSecretMutable"] == "true"


def test_switching_stacks_switches_cluster_context():
    contexts = {render_stack(s).find("pulumi:providers:kubernetes", "cluster").inputs["context"] for s in STACKS}
    assert len(contexts) == len(STACKS)


def test_validation_gate_timeout_bounds_the_job():
    job = objects(render_stack("prod-managed"), "Job")["gpu-stack-validation"]
    assert job["spec"]["activeDeadlineSeconds"] == 1200 + 120
    assert job["metadata"]["annotations"]["pulumi.com/timeoutSeconds"] == "1320"
    checker = env_of(container(job, "wait-validated"))
    assert checker["MODE"] == "strict" and checker["TIMEOUT_SECONDS"] == "1200"


def test_validation_off_renders_no_gate():
    config = stack_config("prod-managed")
    config["gpu-stack:validation"] = {"mode": "off"}
    del config["gpu-stack:upgrade"]["waves"]  # waves are judged by validation
    recording = render(config)
    assert "Job" not in {r.inputs.get("kind") for r in recording.registrations if r.is_kubernetes_object}
    assert recording.outputs["validation"] == {"status": "off"}


def test_advisory_result_is_exported():
    outputs = render_stack("dev").outputs
    assert outputs["validation"]["status"] == "unknown"  # no Job ran: offline render
    assert outputs["states"][0] == "pre-requisites"


def test_host_driver_renders_no_driver_and_chain_still_gates_on_driver_validation():
    recording = render_stack("onprem-host-driver")
    daemonsets = objects(recording, "DaemonSet")
    assert not [name for name in daemonsets if name.startswith("nvidia-driver")]
    toolkit = daemonsets["nvidia-container-toolkit-daemonset"]
    assert env_of(container(toolkit, "driver-validation"))["COMPONENT"] == "driver"


def test_managed_driver_image_and_driver_manager():
    ds = objects(render_stack("prod-managed"), "DaemonSet")["nvidia-driver-daemonset-training"]
    driver = container(ds, "nvidia-driver-ctr")
    assert driver["image"] == "nvcr.io/nvidia/driver:595.91.07-ubuntu22.04"
    assert env_of(driver)["KERNEL_MODULE_TYPE"] == "open"
    assert env_of(driver)["OPEN_KERNEL_MODULES_ENABLED"] == "true"
    manager = container(ds, "k8s-driver-manager")
    assert manager["image"] == "nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.12.0"
    assert manager["args"] == ["uninstall_driver"]
    assert env_of(manager)["DRIVER_CONFIG_DIGEST"] == env_of(driver)["DRIVER_CONFIG_DIGEST"]
    assert ds["spec"]["template"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.deploy.driver": "true"}
    assert ds["spec"]["template"]["spec"]["hostPID"] is True


def test_driver_digest_is_used_verbatim():
    config = stack_config("prod-managed")
    digest = "sha256:" + "a" * 64
    config["gpu-stack:versions"] = {"driver": digest}
    ds = objects(render(config), "DaemonSet")["nvidia-driver-daemonset-training"]
    assert container(ds, "nvidia-driver-ctr")["image"] == f"nvcr.io/nvidia/driver@{digest}"


def test_containerd_toolkit_env_and_runtime_mounts():
    ds = objects(render_stack("prod-managed"), "DaemonSet")["nvidia-container-toolkit-daemonset"]
    env = env_of(container(ds, "nvidia-container-toolkit-ctr"))
    assert env["RUNTIME"] == "containerd"
    assert env["CONTAINERD_RUNTIME_CLASS"] == "nvidia"
    assert env["RUNTIME_CONFIG"] == env["CONTAINERD_CONFIG"] == "/runtime/config-dir/config.toml"
    assert env["RUNTIME_DROP_IN_CONFIG_HOST_PATH"] == "/etc/containerd/conf.d/99-nvidia.toml"
    assert env["CONTAINERD_SOCKET"] == "/runtime/sock-dir/containerd.sock"
    assert env["CDI_ENABLED"] == "true" and env["NVIDIA_RUNTIME_SET_AS_DEFAULT"] == "false"
    volumes = {v["name"]: v["hostPath"]["path"] for v in ds["spec"]["template"]["spec"]["volumes"] if "hostPath" in v}
    assert volumes["containerd-config"] == "/etc/containerd"
    assert volumes["containerd-socket"] == "/run/containerd"


def test_k3s_socket_override_moves_the_mount():
    config = stack_config("prod-managed")
    config["gpu-stack:toolkit"] = {"runtimeSocket": "/run/k3s/containerd/containerd.sock"}
    ds = objects(render(config), "DaemonSet")["nvidia-container-toolkit-daemonset"]
    volumes = {v["name"]: v["hostPath"]["path"] for v in ds["spec"]["template"]["spec"]["volumes"] if "hostPath" in v}
    assert volumes["containerd-socket"] == "/run/k3s/containerd"


def test_crio_toolkit_has_no_socket_and_uses_usr_share_hooks():
    ds = objects(render_stack("onprem-host-driver"), "DaemonSet")["nvidia-container-toolkit-daemonset"]
    env = env_of(container(ds, "nvidia-container-toolkit-ctr"))
    assert env["RUNTIME"] == "crio" and env["CRIO_CONFIG"] == "/runtime/config-dir/config.toml"
    assert "RUNTIME_SOCKET" not in env and "CONTAINERD_RUNTIME_CLASS" not in env
    volumes = {v["name"]: v["hostPath"]["path"] for v in ds["spec"]["template"]["spec"]["volumes"] if "hostPath" in v}
    assert volumes["crio-hooks"] == "/usr/share/containers/oci/hooks.d"
    assert volumes["crio-drop-in-config"] == "/etc/crio/crio.conf.d"


def test_crio_without_cdi_uses_the_oci_hook_and_no_runtime_class():
    config = stack_config("onprem-host-driver")
    config["gpu-stack:toolkit"] = {"cdi": False}
    recording = render(config)
    daemonsets = objects(recording, "DaemonSet")
    assert env_of(container(daemonsets["nvidia-container-toolkit-daemonset"], "nvidia-container-toolkit-ctr"))["CRIO_CONFIG_MODE"] == "hook"
    assert "runtimeClassName" not in daemonsets["nvidia-operator-validator"]["spec"]["template"]["spec"]
    # the classes stay for the workloads that name them, though no operand uses one in hook mode
    assert set(objects(recording, "RuntimeClass")) == {"nvidia", "nvidia-cdi", "nvidia-legacy"}
    assert env_of(container(daemonsets["nvidia-device-plugin-daemonset"], "nvidia-device-plugin"))["DEVICE_LIST_STRATEGY"] == "envvar"


def test_cdi_runtime_classes_and_plugin_env():
    recording = render_stack("prod-managed")
    assert set(objects(recording, "RuntimeClass")) == {"nvidia", "nvidia-cdi", "nvidia-legacy"}
    plugin = objects(recording, "DaemonSet")["nvidia-device-plugin-daemonset"]
    env = env_of(container(plugin, "nvidia-device-plugin"))
    assert env["DEVICE_LIST_STRATEGY"] == "cdi-annotations,cdi-cri"
    assert env["NVIDIA_CDI_HOOK_PATH"] == "/usr/local/nvidia/toolkit/nvidia-cdi-hook"
    assert env["NVIDIA_MIG_MONITOR_DEVICES"] == "all"
    assert plugin["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia"


def test_mig_strategy_env_only_where_no_config_file_carries_it():
    # The plugin family lets MIG_STRATEGY override the config file, so with per-pool configs it must be unset.
    for stack, expected in (("dev", "single"), ("prod-managed", None), ("a100-mig", None)):
        recording = render_stack(stack)
        for ds, ctr in (("nvidia-device-plugin-daemonset", "nvidia-device-plugin"), ("gpu-feature-discovery", "gpu-feature-discovery")):
            env = env_of(container(objects(recording, "DaemonSet")[ds], ctr))
            assert env.get("MIG_STRATEGY") == expected, (stack, ds)
            assert env["NVIDIA_MIG_MONITOR_DEVICES"] == "all"


def test_validator_init_order_and_plugin_check_follows_the_device_plugin():
    recording = render_stack("prod-managed")
    validator = objects(recording, "DaemonSet")["nvidia-operator-validator"]
    names = [c["name"] for c in validator["spec"]["template"]["spec"]["initContainers"]]
    assert names == ["driver-validation", "toolkit-validation", "cuda-validation", "plugin-validation"]
    cuda = env_of(container(validator, "cuda-validation"))
    assert cuda["VALIDATOR_IMAGE"] == "nvcr.io/nvidia/gpu-operator:v26.7.0"
    assert cuda["VALIDATOR_IMAGE_PULL_SECRETS"] == "ngc-pull" and cuda["VALIDATOR_RUNTIME_CLASS"] == "nvidia"
    for c in validator["spec"]["template"]["spec"]["initContainers"]:
        assert c["securityContext"]["runAsUser"] == 0
    config = stack_config("prod-managed")
    config["gpu-stack:components"] = {"devicePlugin": False}
    config["gpu-stack:operands"].pop("devicePlugin")  # an override of an operand the stack does not deploy is refused
    for pool in config["gpu-stack:nodePools"]:
        pool.pop("sharing", None)
    no_plugin = objects(render(config), "DaemonSet")
    assert "nvidia-device-plugin-daemonset" not in no_plugin
    names = [c["name"] for c in no_plugin["nvidia-operator-validator"]["spec"]["template"]["spec"]["initContainers"]]
    assert names == ["driver-validation", "toolkit-validation", "cuda-validation"]


def test_device_plugin_config_only_when_a_pool_shares():
    shared = render_stack("prod-managed")
    plugin = objects(shared, "DaemonSet")["nvidia-device-plugin-daemonset"]
    assert [c["name"] for c in plugin["spec"]["template"]["spec"]["containers"]] == ["nvidia-device-plugin", "config-manager"]
    assert [c["name"] for c in plugin["spec"]["template"]["spec"]["initContainers"]] == ["toolkit-validation", "config-manager-init"]
    assert plugin["spec"]["template"]["spec"]["shareProcessNamespace"] is True
    sidecar = env_of(container(plugin, "config-manager"))
    assert sidecar["NODE_LABEL"] == "nvidia.com/device-plugin.config" and sidecar["SIGNAL"] == "1"
    assert sidecar["DEFAULT_CONFIG"] == "default" and sidecar["FALLBACK_STRATEGIES"] == "empty"
    configs = objects(shared, "ConfigMap")["nvidia-device-plugin-configs"]["data"]
    assert set(configs) == {"default", "inference-l4"}
    assert "replicas: 4" in configs["inference-l4"] and "sharing" not in configs["default"]

    plain = objects(render_stack("dev"), "DaemonSet")["nvidia-device-plugin-daemonset"]
    assert [c["name"] for c in plain["spec"]["template"]["spec"]["containers"]] == ["nvidia-device-plugin"]
    assert "shareProcessNamespace" not in plain["spec"]["template"]["spec"]


def test_registry_override_and_pull_secrets_reach_every_operand():
    recording = render_stack("onprem-host-driver")
    for name, ds in objects(recording, "DaemonSet").items():
        spec = ds["spec"]["template"]["spec"]
        assert spec["imagePullSecrets"] == [{"name": "dc2-mirror"}], name
        for c in [*spec.get("initContainers", []), *spec["containers"]]:
            assert c["image"].startswith("registry.dc2.corp:5000/"), (name, c["image"])


def test_nfd_is_the_operators_chart_rendered_natively_or_nothing():
    """No Helm release anywhere: NFD's objects are the stack's own (tests/test_nfd.py has the details)."""
    deployed = render_stack("prod-managed")
    assert not [r for r in deployed.registrations if "helm" in r.type]
    assert set(objects(deployed, "Deployment")) >= {"node-feature-discovery-master", "node-feature-discovery-gc"}
    assert "node-feature-discovery-worker" in objects(deployed, "DaemonSet")
    existing = render_stack("onprem-host-driver")
    assert not [r for r in existing.registrations if "helm" in r.type or "NodeFeatureDiscovery" in r.type]


WAIT_HOLD = {"effect": "NoSchedule", "key": "gpu-stack/wait-for-completion", "operator": "Exists"}


def test_daemonset_settings_apply_to_every_operand():
    config = stack_config("prod-managed")
    del config["gpu-stack:operands"]  # per-operand overrides win over these (tests/test_operand_overrides.py)
    config["gpu-stack:daemonsets"] = {
        "priorityClassName": "gpu-critical",
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
        "updateStrategy": "RollingUpdate",
        "maxUnavailable": "25%",
        "labels": {"team": "platform"},
    }
    daemonsets = objects(render(config), "DaemonSet")
    # NFD's worker is the chart's, not an operand: the priority class and GPU tolerations, after the control plane's
    nfd_worker = daemonsets.pop("node-feature-discovery-worker")["spec"]["template"]["spec"]
    assert nfd_worker["priorityClassName"] == "gpu-critical"
    assert [t["key"] for t in nfd_worker["tolerations"]] == ["node-role.kubernetes.io/control-plane", "dedicated"]
    for name, ds in daemonsets.items():
        spec = ds["spec"]["template"]["spec"]
        assert spec["priorityClassName"] == "gpu-critical"
        assert spec["tolerations"][0] == {"effect": "NoSchedule", "key": "dedicated", "operator": "Equal", "value": "gpu"}
        # prod-managed waits for jobs before a driver swap: the driver pods also tolerate that wait's own hold.
        extra = [WAIT_HOLD] if name.startswith("nvidia-driver-daemonset") else []
        assert spec["tolerations"][1:] == extra
        assert ds["spec"]["template"]["metadata"]["labels"]["team"] == "platform"
        if not name.startswith("nvidia-driver-daemonset"):  # the driver rolls as gpu-stack:upgrade says (tests/test_driver.py)
            assert ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == "25%"


def test_preview_and_update_register_the_same_resources():
    update = sorted((r.type, r.name) for r in render_stack("prod-managed").registrations)
    preview = sorted((r.type, r.name) for r in render_stack("prod-managed", preview=True).registrations)
    assert update == preview
