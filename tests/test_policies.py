"""Each policy of the pack on real renders: a stack that passes, and the same stack broken in one place.

Stacks are broken either through their configuration (a render of a modified config) or, where the
configuration validator already refuses the mistake, by editing the recorded registrations the way a faulty
component would have rendered them. Every policy runs through the analyzer path (`run_policies`), as under
`pulumi preview --policy-pack`.
"""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from gpustack.mockrun import Recording, Registration
from gpustack.policyrun import pack_config
from policytest import edit_pools, edited, messages, registration, violations
from stacktest import objects, render, render_stack, stack_config
from test_host_paths import moved_config


def pod_spec(recording: Recording, kind: str, name: str) -> dict:
    return registration(recording, kind, name).inputs["spec"]["template"]["spec"]


def container(spec: dict, name: str) -> dict:
    return next(c for c in spec.get("initContainers", []) + spec["containers"] if c["name"] == name)


def set_env(c: dict, name: str, value: str) -> None:
    c["env"] = [e for e in c.get("env", []) if e["name"] != name] + [{"name": name, "value": value}]


def removed(recording: Recording, kind: str, name: str) -> Recording:
    def apply(broken: Recording) -> None:
        broken.registrations.remove(registration(broken, kind, name))

    return edited(recording, apply)


def with_config(stack: str, **sections) -> dict:
    config = stack_config(stack)
    for key, value in sections.items():
        config[f"gpu-stack:{key}"] = value
    return config


def assert_names_resource_and_fix(found: list[str], *fragments: str) -> None:
    assert found, "expected a violation"
    for message in found:
        assert "fix:" in message.lower() or "fix " in message.lower(), message
    joined = "\n".join(found)
    for fragment in fragments:
        assert fragment in joined, f"{fragment!r} not in {joined}"


# --- one-workload-type-per-node ------------------------------------------------------------------------------

DEV_POOL = {"name": "dev-gpu", "nodeSelector": {"gpu-stack.dev/pool": "dev-gpu"}, "gpuModel": "T4", "os": "ubuntu24.04"}
VM_POOL = {"name": "vm-pool", "nodeSelector": {"gpu-stack.dev/zone": "a"}, "gpuModel": "T4", "os": "ubuntu24.04", "workloadType": "vm-passthrough"}


def with_vm_pool() -> Recording:
    """dev with a second pool of VM nodes whose selector does not exclude the dev pool's nodes."""
    return render(with_config("dev", nodePools=[DEV_POOL, VM_POOL]))


def test_pools_of_different_types_that_can_share_a_node_are_refused():
    found = messages(with_vm_pool(), "one-workload-type-per-node")
    assert_names_resource_and_fix(found, "ConfigMap gpu-operator/gpu-stack-node-pools", "'dev-gpu' (container", "'vm-pool' (vm-passthrough")
    assert "first" in found[0] and "reorder" in found[0]


def test_a_more_specific_pool_first_is_an_allowed_exception_and_disagreeing_selectors_never_overlap():
    def vm_exception_first(pools: list[dict]) -> None:
        pools[1]["nodeSelector"] = {**pools[0]["nodeSelector"], "gpu-stack.dev/vm": "true"}
        pools.reverse()

    assert messages(edit_pools(with_vm_pool(), vm_exception_first), "one-workload-type-per-node") == []

    def disagree(pools: list[dict]) -> None:
        pools[1]["nodeSelector"] = {"gpu-stack.dev/pool": "vm"}

    assert messages(edit_pools(with_vm_pool(), disagree), "one-workload-type-per-node") == []


def test_the_broader_pool_first_shadows_the_specific_one():
    def vm_exception_second(pools: list[dict]) -> None:
        pools[1]["nodeSelector"] = {**pools[0]["nodeSelector"], "gpu-stack.dev/vm": "true"}

    assert messages(edit_pools(with_vm_pool(), vm_exception_second), "one-workload-type-per-node")


def test_a_pool_given_the_deploy_labels_of_the_other_workload_type_is_refused():
    def give_vm_labels(pools: list[dict]) -> None:
        pools[0]["deployLabels"].append("nvidia.com/gpu.deploy.vfio-manager")

    found = messages(edit_pools(render_stack("dev"), give_vm_labels), "one-workload-type-per-node")
    assert_names_resource_and_fix(found, "pool 'dev-gpu' is container", "nvidia.com/gpu.deploy.vfio-manager")


def test_a_daemonset_without_a_deploy_label_runs_on_every_workload_type():
    def drop_selector(broken: Recording) -> None:
        pod_spec(broken, "DaemonSet", "nvidia-device-plugin-daemonset").pop("nodeSelector")

    broken = edited(render_stack("dev"), drop_selector)
    found = messages(broken, "one-workload-type-per-node")
    assert_names_resource_and_fix(found, "DaemonSet gpu-operator/nvidia-device-plugin-daemonset selects no")
    allowed = {"workloadAgnosticDaemonSets": ["gpu-stack-node-labeler", "node-feature-discovery-worker", "nvidia-device-plugin-daemonset"]}
    assert messages(broken, "one-workload-type-per-node", {"one-workload-type-per-node": allowed}) == []


def test_a_daemonset_selecting_a_label_both_sides_carry_is_refused():
    def select_client(broken: Recording) -> None:
        pod_spec(broken, "DaemonSet", "nvidia-dcgm-exporter")["nodeSelector"] = {"nvidia.com/gpu.deploy.client": "true"}

    found = messages(edited(render_stack("dev"), select_client), "one-workload-type-per-node")
    assert_names_resource_and_fix(found, "nvidia-dcgm-exporter selects only nvidia.com/gpu.deploy.client", "container and VM nodes")


# --- state-order ---------------------------------------------------------------------------------------------


def test_a_daemonset_applied_before_the_earlier_states_is_refused():
    def forget_order(broken: Recording) -> None:
        # What a component does when it drops its `depends_on`: nothing in the state waits for earlier states.
        state = registration(broken, "DaemonSet", "nvidia-device-plugin-daemonset").parent
        own = [r for r in broken.registrations if r.parent == state]
        for r in own:
            r.dependencies = [d for d in r.dependencies if d in {o.urn for o in own}]

    found = messages(edited(render_stack("prod-managed"), forget_order), "state-order")
    assert_names_resource_and_fix(
        found,
        "DaemonSet gpu-operator/nvidia-device-plugin-daemonset (state state-device-plugin, #7) is applied without waiting "
        "for pre-requisites, node-feature-discovery, node-labeling, state-driver, state-container-toolkit, state-operator-validation;",
    )
    # Later states waited for the earlier ones only through the device plugin, so they are reported too; nothing
    # before it is.
    positions = [int(m.split(", #", 1)[1].split(")", 1)[0]) for m in found]
    assert min(positions) == 7 and len(found) >= 4


def test_a_daemonset_outside_every_state_is_refused():
    def move_out(broken: Recording) -> None:
        stack = next(r for r in broken.registrations if r.type == "gpu-stack:index:GpuStack")
        registration(broken, "DaemonSet", "nvidia-dcgm-exporter").parent = stack.urn

    found = messages(edited(render_stack("dev"), move_out), "state-order")
    assert_names_resource_and_fix(found, "nvidia-dcgm-exporter belongs to no state")


def test_an_awaited_validator_deadlocks_the_device_plugin_it_checks():
    def await_validator(broken: Recording) -> None:
        registration(broken, "DaemonSet", "nvidia-operator-validator").inputs["metadata"]["annotations"].pop("pulumi.com/skipAwait")

    found = messages(edited(render_stack("prod-managed"), await_validator), "state-order")
    assert_names_resource_and_fix(
        found, "DaemonSet gpu-operator/nvidia-device-plugin-daemonset is applied only after DaemonSet gpu-operator/nvidia-operator-validator"
    )
    assert all("nvidia-driver-daemonset is applied" not in m for m in found)  # the driver comes before the validator


def test_an_operand_the_validator_checks_may_not_wait_for_the_validation_gate():
    def toolkit_after_gate(broken: Recording) -> None:
        gate = registration(broken, "Job", "gpu-stack-validation")
        registration(broken, "DaemonSet", "nvidia-container-toolkit-daemonset").dependencies.append(gate.urn)

    found = messages(edited(render_stack("dev"), toolkit_after_gate), "state-order")
    assert_names_resource_and_fix(found, "nvidia-container-toolkit-daemonset is applied only after Job gpu-operator/gpu-stack-validation", "on pools dev-gpu")


def test_a_later_driver_wave_may_wait_for_the_gate_of_other_pools_only():
    stack = render_stack("prod-precompiled")
    wave = next(
        r
        for r in stack.registrations
        if r.inputs.get("kind") == "DaemonSet" and "train-a100" in json.dumps(r.inputs["spec"]["template"]["spec"].get("affinity"))
    )
    gate = registration(stack, "Job", "gpu-stack-gate-canary")
    assert gate.urn in wave.dependencies and messages(stack, "state-order") == []

    def gate_on_the_fleet(broken: Recording) -> None:
        set_env(registration(broken, "Job", "gpu-stack-gate-canary").inputs["spec"]["template"]["spec"]["containers"][0], "POOLS", "canary,train-a100")

    found = messages(edited(stack, gate_on_the_fleet), "state-order")
    assert_names_resource_and_fix(found, f"{wave.name} is applied only after Job gpu-operator/gpu-stack-gate-canary", "pools train-a100")


# --- mig-layout-fits-gpu -------------------------------------------------------------------------------------


def test_custom_and_builtin_layouts_that_fit_pass():
    assert messages(render_stack("onprem-host-driver"), "mig-layout-fits-gpu") == []
    assert messages(render_stack("a100-mig"), "mig-layout-fits-gpu") == []


def test_a_layout_that_does_not_fit_the_gpu_is_refused():
    def overfill(broken: Recording) -> None:
        config_map = registration(broken, "ConfigMap", "gpu-stack-mig-parted-config")
        document = yaml.safe_load(config_map.inputs["data"]["config.yaml"])
        document["mig-configs"]["three-2g"][0]["mig-devices"] = {"2g.10gb": 4}
        config_map.inputs["data"]["config.yaml"] = yaml.safe_dump(document)

    found = messages(edited(render_stack("onprem-host-driver"), overfill), "mig-layout-fits-gpu")
    assert_names_resource_and_fix(found, "pool 'a100' (A100-40GB) gets nvidia.com/mig.config=three-2g", "at most 3 per A100-40GB GPU", "layouts that fit A100-40GB")


def test_a_layout_the_mig_manager_does_not_have_is_refused():
    def unknown_layout(pools: list[dict]) -> None:
        pools[0]["labels"]["nvidia.com/mig.config"] = "all-9g.90gb"

    found = messages(edit_pools(render_stack("a100-mig"), unknown_layout), "mig-layout-fits-gpu")
    assert_names_resource_and_fix(found, "all-9g.90gb, which ConfigMap gpu-stack-mig-parted-config does not define")


def test_mig_on_a_gpu_without_mig_is_refused():
    def mig_on_l4(pools: list[dict]) -> None:
        pools[1]["labels"]["nvidia.com/mig.config"] = "all-1g.10gb"

    found = messages(edit_pools(render_stack("prod-managed"), mig_on_l4), "mig-layout-fits-gpu")
    assert_names_resource_and_fix(found, "pool 'inference-l4' (L4)", "L4 cannot run MIG")


def test_a_layout_without_an_entry_for_the_pools_model_is_refused():
    def other_model(pools: list[dict]) -> None:
        pools[1]["gpuModel"] = "H100-80GB"  # three-2g is rendered for A100-40GB only

    found = messages(edit_pools(render_stack("onprem-host-driver"), other_model), "mig-layout-fits-gpu")
    assert_names_resource_and_fix(found, "no entry of that layout in ConfigMap gpu-stack-mig-parted-config matches H100-80GB")


def test_a_mig_layout_without_a_mig_manager_is_refused():
    found = messages(removed(render_stack("a100-mig"), "DaemonSet", "nvidia-mig-manager"), "mig-layout-fits-gpu")
    assert_names_resource_and_fix(found, "pool 'a100-mig' (A100-80GB) gets nvidia.com/mig.config=all-balanced", "no MIG manager")


# --- images-pinned -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "image, problem",
    [
        ("nvcr.io/nvidia/k8s-device-plugin", "has no tag"),
        ("nvcr.io/nvidia/k8s-device-plugin:latest", "uses the tag latest"),
        ("docker.io/library/busybox:1.36", "outside allowedRegistries"),
        ("busybox:1.36", "comes from docker.io/library"),
        ("nvcr.io.evil.example/nvidia/k8s-device-plugin:v0.20.0", "outside allowedRegistries"),
    ],
)
def test_unpinned_or_foreign_images_are_reported(image, problem):
    def swap(broken: Recording) -> None:
        container(pod_spec(broken, "DaemonSet", "nvidia-device-plugin-daemonset"), "nvidia-device-plugin")["image"] = image

    found = messages(edited(render_stack("prod-managed"), swap), "images-pinned", pack_config("prod-managed"))
    assert_names_resource_and_fix(found, "DaemonSet gpu-operator/nvidia-device-plugin-daemonset: image", problem)


def test_a_digest_pins_an_image_and_a_registry_path_prefix_allows_only_its_subtree():
    digest = "nvcr.io/nvidia/k8s-device-plugin@sha256:" + "a" * 64

    def swap(broken: Recording) -> None:
        container(pod_spec(broken, "DaemonSet", "nvidia-device-plugin-daemonset"), "nvidia-device-plugin")["image"] = digest
        container(pod_spec(broken, "DaemonSet", "gpu-stack-node-labeler"), "node-labeler")["image"] = "harbor.platform.internal/other/agent:1"

    found = messages(edited(render_stack("prod-managed"), swap), "images-pinned", pack_config("prod-managed"))
    assert len(found) == 1 and "gpu-stack-node-labeler" in found[0] and "harbor.platform.internal/other" in found[0]


def test_the_validator_workload_image_counts_once_per_image():
    def latest_everywhere(broken: Recording) -> None:
        for c in pod_spec(broken, "DaemonSet", "nvidia-operator-validator")["initContainers"]:
            c["image"] = "nvcr.io/nvidia/gpu-operator:latest"
            for e in c.get("env", []):
                if e["name"] == "VALIDATOR_IMAGE":
                    e["value"] = "nvcr.io/nvidia/gpu-operator:latest"

    found = messages(edited(render_stack("prod-managed"), latest_everywhere), "images-pinned", pack_config("prod-managed"))
    assert len(found) == 1 and "env VALIDATOR_IMAGE of container 'cuda-validation'" in found[0]


def test_nfds_images_are_judged_like_every_operands():
    assert messages(render_stack("prod-managed"), "images-pinned", pack_config("prod-managed")) == []

    def unpin(broken: Recording) -> None:
        container(pod_spec(broken, "DaemonSet", "node-feature-discovery-worker"), "worker")["image"] = "quay.io/nfd/node-feature-discovery:latest"
        container(pod_spec(broken, "Deployment", "node-feature-discovery-gc"), "gc")["image"] = "registry.k8s.io/nfd/node-feature-discovery"

    found = messages(edited(render_stack("prod-managed"), unpin), "images-pinned", pack_config("prod-managed"))
    assert_names_resource_and_fix(
        found,
        "DaemonSet gpu-operator/node-feature-discovery-worker: image 'quay.io/nfd/node-feature-discovery:latest'",
        "uses the tag latest",
        "outside allowedRegistries",
        "Deployment gpu-operator/node-feature-discovery-gc: image 'registry.k8s.io/nfd/node-feature-discovery' (container 'gc') has no tag",
    )


def test_images_pinned_is_mandatory_in_prod_and_advisory_in_dev():
    def unpin(broken: Recording) -> None:
        container(pod_spec(broken, "DaemonSet", "nvidia-dcgm-exporter"), "nvidia-dcgm-exporter")["image"] = "nvcr.io/nvidia/k8s/dcgm-exporter"

    for stack, level in (("prod-managed", "mandatory"), ("dev", "advisory")):
        found = violations(edited(render_stack(stack), unpin), "images-pinned", pack_config(stack))
        assert [v.enforcement for v in found] == [level]


# --- privileged-only-where-needed ----------------------------------------------------------------------------


def test_the_node_labeller_may_not_be_privileged():
    def escalate(broken: Recording) -> None:
        spec = pod_spec(broken, "DaemonSet", "gpu-stack-node-labeler")
        spec["hostNetwork"] = True
        container(spec, "node-labeler")["securityContext"] = {"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}}

    found = messages(edited(render_stack("dev"), escalate), "privileged-only-where-needed")
    assert len(found) == 3
    assert_names_resource_and_fix(found, "DaemonSet gpu-operator/gpu-stack-node-labeler sets hostNetwork", "container 'node-labeler' is privileged", "adds capabilities SYS_ADMIN")


def test_an_operand_gets_only_its_own_host_access():
    def widen(broken: Recording) -> None:
        spec = pod_spec(broken, "DaemonSet", "nvidia-dcgm-exporter")
        spec["hostIPC"] = True  # hostPID and hostNetwork are the exporter's own options (dcgmExporter.hostPid)
        spec["volumes"].append({"name": "etc", "hostPath": {"path": "/etc"}})

    found = messages(edited(render_stack("prod-managed"), widen), "privileged-only-where-needed")
    assert_names_resource_and_fix(found, "nvidia-dcgm-exporter sets hostIPC", "mounts host path /etc", "entry 'nvidia-dcgm-exporter'")


def test_allowances_hold_only_in_the_gpu_namespace():
    def move(broken: Recording) -> None:
        registration(broken, "DaemonSet", "nvidia-mig-manager").inputs["metadata"]["namespace"] = "kube-system"

    found = messages(edited(render_stack("prod-managed"), move), "privileged-only-where-needed")
    assert_names_resource_and_fix(found, "DaemonSet kube-system/nvidia-mig-manager", "only in the GPU namespace gpu-operator", "deploy it to gpu-operator")


def test_the_gpu_namespace_comes_from_config_or_the_stack_provider():
    onprem = render_stack("onprem-host-driver")  # namespace nvidia-gpu-operator
    assert messages(onprem, "privileged-only-where-needed") == []
    found = messages(onprem, "privileged-only-where-needed", {"privileged-only-where-needed": {"gpuNamespace": "gpu-operator"}})
    assert found and all("nvidia-gpu-operator/" in m for m in found)


def test_a_moved_runtime_socket_is_followed_and_other_paths_need_additional_host_paths():
    k3s = render(with_config("prod-managed", toolkit={"runtimeSocket": "/run/k3s/containerd/containerd.sock"}))
    assert messages(k3s, "privileged-only-where-needed") == []

    def extra(broken: Recording) -> None:
        pod_spec(broken, "DaemonSet", "nvidia-container-toolkit-daemonset")["volumes"].append(
            {"name": "extra", "hostPath": {"path": "/opt/extra"}}
        )

    found = messages(edited(k3s, extra), "privileged-only-where-needed")
    assert_names_resource_and_fix(found, "nvidia-container-toolkit-daemonset: volume 'extra' mounts host path /opt/extra")
    allowed = {"additionalHostPaths": {"nvidia-container-toolkit-daemonset": ["/opt/extra"]}}
    assert messages(edited(k3s, extra), "privileged-only-where-needed", {"privileged-only-where-needed": allowed}) == []


def test_paths_a_distribution_moves_are_followed_by_the_volume_that_carries_them():
    moved = render(moved_config())
    assert messages(moved, "privileged-only-where-needed") == []
    assert messages(render_stack("k0s"), "privileged-only-where-needed", pack_config("k0s")) == []


def _volume(spec: dict, name: str) -> dict:
    return next(v for v in spec["volumes"] if v["name"] == name)


def _half_moved(broken: Recording) -> None:
    validator = pod_spec(broken, "DaemonSet", "nvidia-operator-validator")
    set_env(container(validator, "cuda-validation"), "HOST_ROOT", "/")  # told the old root
    _volume(validator, "host-dev-char")["hostPath"]["path"] = "/elsewhere/dev/char"  # not under the moved root
    toolkit = pod_spec(broken, "DaemonSet", "nvidia-container-toolkit-daemonset")
    set_env(container(toolkit, "driver-validation"), "DRIVER_INSTALL_DIR", "/run/nvidia/driver")
    _volume(toolkit, "containerd-drop-in-config")["hostPath"]["path"] = "/etc/k0s/elsewhere"
    set_env(container(toolkit, "nvidia-container-toolkit-ctr"), "ROOT", "/usr/local/nvidia")
    plugin = pod_spec(broken, "DaemonSet", "nvidia-device-plugin-daemonset")
    _volume(plugin, "device-plugin")["hostPath"]["path"] = "/var/lib/k0s/kubelet/devices"
    dra = pod_spec(broken, "DaemonSet", "nvidia-dra-driver-kubelet-plugin")
    set_env(container(dra, "gpus"), "KUBELET_PLUGINS_DIRECTORY_PATH", "/var/lib/kubelet/plugins")
    # a movable volume on an operand whose asset does not have it is no move at all
    pod_spec(broken, "DaemonSet", "nvidia-dcgm-exporter")["volumes"].append({"name": "host-root", "hostPath": {"path": "/host-fs"}})


def test_a_half_moved_pod_is_refused_naming_the_key_that_moves_it():
    found = messages(edited(render(moved_config()), _half_moved), "privileged-only-where-needed")
    assert len(found) == 8, found
    assert_names_resource_and_fix(
        found,
        "nvidia-operator-validator: volume 'host-root' mounts host path /host-fs as a moved hostPaths.rootFS, but "
        "container 'cuda-validation' has HOST_ROOT=/",
        "volume 'host-dev-char' mounts host path /elsewhere/dev/char as a moved hostPaths.rootFS, but it must be "
        "<host-root>/dev/char (host-root mounts /host-fs)",
        "volume 'driver-install-dir' mounts host path /home/kubernetes/bin/nvidia as a moved hostPaths.driverInstallDir, "
        "but container 'driver-validation' has DRIVER_INSTALL_DIR=/run/nvidia/driver",
        "volume 'containerd-drop-in-config' mounts host path /etc/k0s/elsewhere as a moved toolkit.runtimeDropInConfig, "
        "but the toolkit's RUNTIME_DROP_IN_CONFIG_HOST_PATH is not a file in it (/etc/k0s/containerd.d/99-nvidia.toml)",
        "as a moved toolkit.installDir, but container 'nvidia-container-toolkit-ctr' has ROOT=/usr/local/nvidia",
        "/var/lib/k0s/kubelet/devices as a moved hostPaths.kubeletRootDir, but it must be <kubelet root>/device-plugins",
        "container 'gpus' has KUBELET_PLUGINS_DIRECTORY_PATH=/var/lib/kubelet/plugins",
        "nvidia-dcgm-exporter: volume 'host-root' mounts host path /host-fs, not granted by the allow-list entry",
        "fix: move it with gpu-stack:hostPaths.rootFS",
    )


def test_host_mofed_sources_are_allowed_only_with_use_host_mofed():
    training = stack_config("gpudirect-training")
    training["gpu-stack:gpudirect"]["rdma"]["useHostMofed"] = True
    host_mofed = render(training, stack="gpudirect-training")
    assert messages(host_mofed, "privileged-only-where-needed") == []

    def untold(broken: Recording) -> None:
        for r in broken.registrations:
            if r.inputs.get("kind") == "DaemonSet" and r.inputs["metadata"]["name"].startswith("nvidia-driver-daemonset"):
                for c in r.inputs["spec"]["template"]["spec"].get("initContainers", []) + r.inputs["spec"]["template"]["spec"]["containers"]:
                    c["env"] = [e for e in c.get("env", []) if e["name"] != "USE_HOST_MOFED"]

    found = messages(edited(host_mofed, untold), "privileged-only-where-needed")
    assert_names_resource_and_fix(
        found, "volume 'mlnx-ofed-usr-src' mounts host path /usr/src as a moved gpudirect.rdma.useHostMofed, but no container is told USE_HOST_MOFED=true"
    )


def test_precompiled_driver_daemonsets_share_the_drivers_allowance():
    stack = render_stack("prod-precompiled")
    assert sum(1 for r in stack.registrations if r.name.startswith("nvidia-driver-daemonset-")) >= 2
    assert messages(stack, "privileged-only-where-needed") == []


# --- rbac-least-privilege ------------------------------------------------------------------------------------


def test_wildcards_and_escalating_verbs_are_refused():
    def widen(broken: Recording) -> None:
        registration(broken, "Role", "nvidia-container-toolkit").inputs["rules"].append({"apiGroups": [""], "resources": ["*"], "verbs": ["get"]})
        registration(broken, "ClusterRole", "nvidia-device-plugin").inputs["rules"].append({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["bind", "escalate"]})
        registration(broken, "ClusterRole", "gpu-stack-node-labeler").inputs["aggregationRule"] = {"clusterRoleSelectors": [{"matchLabels": {"x": "y"}}]}

    found = messages(edited(render_stack("dev"), widen), "rbac-least-privilege")
    assert len(found) == 3
    assert_names_resource_and_fix(found, "Role gpu-operator/nvidia-container-toolkit: rules[2].resources ['*']", "ClusterRole nvidia-device-plugin: rules[1] grants bind, escalate", "aggregationRule")


def test_cluster_admin_and_other_components_roles_are_refused():
    def rebind(broken: Recording) -> None:
        registration(broken, "ClusterRoleBinding", "gpu-stack-node-labeler").inputs["roleRef"]["name"] = "cluster-admin"
        binding = registration(broken, "RoleBinding", "nvidia-operator-validator").inputs
        binding["subjects"].append({"kind": "ServiceAccount", "name": "nvidia-device-plugin", "namespace": "gpu-operator"})
        binding["subjects"].append({"kind": "Group", "name": "system:authenticated"})

    found = messages(edited(render_stack("dev"), rebind), "rbac-least-privilege")
    assert_names_resource_and_fix(
        found,
        "ClusterRoleBinding gpu-stack-node-labeler binds cluster-admin",
        "binds ServiceAccount 'nvidia-device-plugin' to Role 'nvidia-operator-validator'",
        "binds Group 'system:authenticated'",
    )


# --- cdi-consistency -----------------------------------------------------------------------------------------


def test_every_runtime_and_cdi_combination_the_config_allows_is_consistent():
    for stack, toolkit in (("prod-managed", {"cdi": False}), ("onprem-host-driver", {"cdi": False})):
        assert messages(render(with_config(stack, toolkit=toolkit)), "cdi-consistency") == []


def test_a_device_plugin_listing_devices_by_envvar_under_cdi_is_refused():
    def envvar(broken: Recording) -> None:
        set_env(container(pod_spec(broken, "DaemonSet", "nvidia-device-plugin-daemonset"), "nvidia-device-plugin"), "DEVICE_LIST_STRATEGY", "envvar")
        set_env(container(pod_spec(broken, "DaemonSet", "nvidia-mig-manager"), "nvidia-mig-manager"), "CDI_ENABLED", "false")
        set_env(container(pod_spec(broken, "DaemonSet", "nvidia-mig-manager"), "nvidia-mig-manager"), "NVIDIA_CDI_HOOK_PATH", "/opt/nvidia/toolkit/nvidia-cdi-hook")

    found = messages(edited(render_stack("prod-managed"), envvar), "cdi-consistency")
    assert_names_resource_and_fix(
        found,
        "nvidia-device-plugin-daemonset: container 'nvidia-device-plugin' has DEVICE_LIST_STRATEGY=envvar",
        "nvidia-mig-manager: container 'nvidia-mig-manager' has CDI_ENABLED=false",
        "/opt/nvidia/toolkit/nvidia-cdi-hook",
    )


def test_cdi_runtime_classes_exist_with_cdi_and_serve_no_operand_without_it():
    found = messages(removed(render_stack("prod-managed"), "RuntimeClass", "nvidia-cdi"), "cdi-consistency")
    assert_names_resource_and_fix(found, "RuntimeClass nvidia-cdi is missing")

    # Without CDI the classes stay (workloads name them; turning CDI off must not delete them), but no operand of
    # the stack may use one: the toolkit configures no handler for it.
    without_cdi = render(with_config("prod-managed", toolkit={"cdi": False}))
    assert {"nvidia-cdi", "nvidia-legacy"} <= set(objects(without_cdi, "RuntimeClass"))
    assert messages(without_cdi, "cdi-consistency") == []

    def use_cdi_class(broken: Recording) -> None:
        pod_spec(broken, "DaemonSet", "nvidia-dcgm-exporter")["runtimeClassName"] = "nvidia-cdi"

    found = messages(edited(without_cdi, use_cdi_class), "cdi-consistency")
    assert_names_resource_and_fix(found, "nvidia-dcgm-exporter uses RuntimeClass nvidia-cdi (handler 'nvidia-cdi')", "toolkit configures nvidia")


def test_crio_in_hook_mode_configures_no_runtime_handler_for_operands():
    hook_mode = render(with_config("onprem-host-driver", toolkit={"cdi": False}))

    def use_runtime_class(broken: Recording) -> None:
        pod_spec(broken, "DaemonSet", "nvidia-dcgm-exporter")["runtimeClassName"] = "nvidia"

    found = messages(edited(hook_mode, use_runtime_class), "cdi-consistency")
    assert_names_resource_and_fix(found, "nvidia-dcgm-exporter uses RuntimeClass nvidia (handler 'nvidia')", "none (cri-o in OCI hook mode)")


# --- sharing-sane --------------------------------------------------------------------------------------------


def replicas(stack: str, pool: str, count: int) -> Recording:
    config = stack_config(stack)
    for entry in config["gpu-stack:nodePools"]:
        if entry["name"] == pool:
            entry["sharing"]["replicas"] = count
    return render(config, stack=stack)


def test_replicas_above_the_stacks_bound_are_mandatory_in_prod_and_advisory_in_dev():
    twelve = replicas("prod-managed", "inference-l4", 12)
    prod = violations(twelve, "sharing-sane", pack_config("prod-managed"))
    assert [v.enforcement for v in prod] == ["mandatory"]
    assert_names_resource_and_fix([v.message for v in prod], "ConfigMap gpu-operator/nvidia-device-plugin-configs", "12 replicas, outside 2..8")
    assert violations(twelve, "sharing-sane", pack_config("dev")) == []  # dev keeps the default bound, 16

    def twenty(broken: Recording) -> None:
        data = registration(broken, "ConfigMap", "nvidia-device-plugin-configs").inputs["data"]
        data["inference-l4"] = data["inference-l4"].replace("replicas: 12", "replicas: 20")

    dev = violations(edited(twelve, twenty), "sharing-sane", pack_config("dev"))
    assert [v.enforcement for v in dev] == ["advisory"] and "20 replicas, outside 2..16" in dev[0].message


def test_mps_replicas_have_their_own_bound():
    found = messages(render_stack("onprem-host-driver"), "sharing-sane", {"sharing-sane": {"maxMpsReplicas": 4}})
    assert_names_resource_and_fix(found, "config 'l40s' shares nvidia.com/gpu by MPS with 8 replicas, outside 2..4")


def test_every_pools_plugin_config_and_the_default_must_exist():
    def drop_keys(broken: Recording) -> None:
        data = registration(broken, "ConfigMap", "nvidia-device-plugin-configs").inputs["data"]
        data.pop("inference-l4")
        data.pop("default")

    found = messages(edited(render_stack("prod-managed"), drop_keys), "sharing-sane")
    assert_names_resource_and_fix(found, "pool 'inference-l4' selects device-plugin config 'inference-l4'", "falls back to config 'default'")
    assert sum("pool 'inference-l4'" in m for m in found) == 1  # the plugin and GFD read one ConfigMap: reported once


def test_a_missing_plugin_config_map_or_config_manager_is_refused():
    found = messages(removed(render_stack("prod-managed"), "ConfigMap", "nvidia-device-plugin-configs"), "sharing-sane")
    assert_names_resource_and_fix(found, "nvidia-device-plugin-daemonset reads its device-plugin config from ConfigMap nvidia-device-plugin-configs")

    def no_config_manager(broken: Recording) -> None:
        for r in broken.registrations:
            if r.inputs.get("kind") == "DaemonSet":
                spec = r.inputs["spec"]["template"]["spec"]
                for c in spec.get("initContainers", []) + spec["containers"]:
                    c["env"] = [e for e in c.get("env", []) if e["name"] != "NODE_LABEL"]

    found = messages(edited(render_stack("prod-managed"), no_config_manager), "sharing-sane")
    assert_names_resource_and_fix(found, "no config-manager reads nvidia.com/device-plugin.config")


def test_mps_on_a_mig_pool_is_refused():
    def mps_on_mig(broken: Recording) -> None:
        data = registration(broken, "ConfigMap", "nvidia-device-plugin-configs").inputs["data"]
        document = yaml.safe_load(data["a100-mig"])
        document["sharing"] = {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}
        data["a100-mig"] = yaml.safe_dump(document)

    found = messages(edited(render_stack("a100-mig"), mps_on_mig), "sharing-sane")
    assert_names_resource_and_fix(found, "pool 'a100-mig' shares by MPS", "MIG layout 'all-balanced'")


# --- gpu-quota -----------------------------------------------------------------------------------------------

PLUGIN_WORKLOAD = with_config("dev", validator={"pluginWorkload": True})


def quota(recording: Recording, hard: dict, namespace: str = "gpu-operator") -> Recording:
    """The render plus a ResourceQuota in `namespace`, as a stack that manages its GPU quota would register it."""

    def add(broken: Recording) -> None:
        root = next(r for r in broken.registrations if r.type == "pulumi:pulumi:Stack")
        provider = registration(broken, "Namespace", namespace).provider
        broken.registrations.append(
            Registration(
                urn=f"urn:pulumi:{broken.stack}::gpu-stack::kubernetes:core/v1:ResourceQuota::gpu-quota",
                type="kubernetes:core/v1:ResourceQuota",
                name="gpu-quota",
                parent=root.urn,
                dependencies=[],
                property_dependencies={},
                custom=True,
                provider=provider,
                inputs={"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu-quota", "namespace": namespace}, "spec": {"hard": hard}},
            )
        )

    return edited(recording, add)


def test_nothing_the_stacks_render_requests_gpus_so_the_policy_does_not_apply():
    assert messages(render_stack("prod-managed"), "gpu-quota") == []


def test_the_validators_plugin_workload_needs_a_gpu_quota_in_its_namespace():
    with_workload = render(PLUGIN_WORKLOAD)
    found = violations(with_workload, "gpu-quota")
    assert [v.enforcement for v in found] == ["advisory"]
    assert_names_resource_and_fix([v.message for v in found], "DaemonSet gpu-operator/nvidia-operator-validator requests nvidia.com/gpu", "requests.nvidia.com/gpu")
    assert messages(quota(with_workload, {"requests.nvidia.com/gpu": "8"}), "gpu-quota") == []
    external = {"gpu-quota": {"externallyManagedQuotaNamespaces": ["gpu-operator"]}}
    assert messages(with_workload, "gpu-quota", external) == []


def test_mig_requests_need_a_mig_quota():
    def mixed(broken: Recording) -> None:
        set_env(container(pod_spec(broken, "DaemonSet", "nvidia-operator-validator"), "plugin-validation"), "MIG_STRATEGY", "mixed")

    with_workload = edited(render(PLUGIN_WORKLOAD), mixed)
    found = messages(quota(with_workload, {"requests.nvidia.com/gpu": "8"}), "gpu-quota")
    assert_names_resource_and_fix(found, "requests nvidia.com/mig-*")
    assert messages(quota(with_workload, {"requests.nvidia.com/mig-1g.10gb": "14"}), "gpu-quota") == []


def test_a_rendered_pod_requesting_gpus_counts_for_its_own_namespace():
    def request(broken: Recording) -> None:
        job = registration(broken, "Job", "gpu-stack-validation").inputs
        job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu.shared"] = "1"

    found = messages(quota(edited(render_stack("dev"), request), {"requests.nvidia.com/gpu": "8"}), "gpu-quota")
    assert_names_resource_and_fix(found, "Job gpu-operator/gpu-stack-validation requests nvidia.com/gpu.shared", "requests.nvidia.com/gpu.shared")


# --- protected-objects ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind, name", [("Namespace", "gpu-operator"), ("RuntimeClass", "nvidia-cdi"), ("DeviceClass", "gpu.nvidia.com")])
def test_what_running_pods_stand_on_must_be_protected(kind, name):
    stack = render_stack("dra")
    assert messages(stack, "protected-objects") == []

    def unprotect(broken: Recording) -> None:
        registration(broken, kind, name).protect = False

    found = messages(edited(stack, unprotect), "protected-objects")
    assert_names_resource_and_fix(found, f"{kind} {name}" if kind != "Namespace" else f"Namespace {name}", "without protect")


def test_the_compute_domain_crds_are_protected_with_the_objects_workloads_create():
    stack = render_stack("dra")
    crds = [r for r in stack.registrations if r.inputs.get("kind") == "CustomResourceDefinition"]
    assert crds and all(r.protect and r.retain_on_delete for r in crds)
