"""Node-bound writes (components/states/node_write_policy.py): the admission policies rendered for prod-managed, their
CEL evaluated offline on admission requests (tests/admissiontest.py): a token's own node allowed, another node
denied, a request without the node claim denied, other users untouched; labels, annotations, taints, cordons and
status on Nodes, pods created, changed, deleted and evicted, NodeFeature objects. Which ServiceAccounts they name,
and when they are rendered at all."""

from __future__ import annotations

import copy
from typing import Any, Optional

import pytest

from admissiontest import Admission, admit, compile_cel, request
from policytest import edited, messages, registration
from components.states import node_write_policy
from stacktest import STACKS, objects, render, render_stack, stack_config, stack_objects

NS = "gpu-operator"
AGENT = f"system:serviceaccount:{NS}:gpu-stack-node-labeler"
DRIVER = f"system:serviceaccount:{NS}:nvidia-driver"
VALIDATOR = f"system:serviceaccount:{NS}:nvidia-operator-validator"
NFD_WORKER = f"system:serviceaccount:{NS}:node-feature-discovery-worker"
OWN, OTHER = "gpu-a", "gpu-b"


@pytest.fixture(scope="module")
def policies() -> dict[str, dict[str, Any]]:
    return {name: obj["spec"] for name, obj in objects(render_stack("prod-managed"), "ValidatingAdmissionPolicy").items()
            if name.startswith(node_write_policy.POLICY_PREFIX)}


def node(name: str, **changes: Any) -> dict[str, Any]:
    found = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true"},
                                                               "annotations": {}}, "spec": {}}
    for section, value in changes.items():
        found["metadata" if section in ("labels", "annotations") else "spec"].update(
            value if section in ("labels", "annotations") else {section: value})
    return found


def pod(node_name: Optional[str], name: str = "train-0") -> dict[str, Any]:
    spec = {"containers": [{"name": "main", "image": "registry.example/train:1"}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "spec": spec}


def node_feature(node_name: str) -> dict[str, Any]:
    return {"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeature",
            "metadata": {"name": f"{node_name}-gpu-features", "namespace": NS,
                         "labels": {"nfd.node.kubernetes.io/node-name": node_name}}, "spec": {}}


def node_write(policies, target: str, *, username: str = AGENT, claim: Optional[str] = OWN,
               sub_resource: str = "", **changes: Any):
    """An update of Node `target` (a label, annotation, taint or cordon patch arrives as UPDATE)."""
    return admit(policies["gpu-stack-node-bound-nodes"], Admission(
        request("UPDATE", "nodes", target, username=username, node=claim, sub_resource=sub_resource),
        object=node(target, **changes), old_object=node(target)))


CHANGES = {
    "label": {"labels": {"nvidia.com/gpu.deploy.driver": "paused-for-driver-upgrade"}},
    "annotation": {"annotations": {"gpu-stack/drain-request": '{"grant":"g","pods":[]}'}},
    "taint": {"taints": [{"key": "gpu-stack/wait-for-completion", "effect": "NoSchedule"}]},
    "cordon": {"unschedulable": True},
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_node_write_reaches_the_tokens_own_node_only(policies, change):
    assert node_write(policies, OWN, **CHANGES[change]).allowed
    denied = node_write(policies, OTHER, **CHANGES[change])
    assert denied.applies and not denied.allowed
    assert denied.message == f"a token issued on node {OWN} may write only that Node"


def test_node_status_and_deletes_are_node_bound_too(policies):
    assert node_write(policies, OWN, sub_resource="status").allowed
    assert not node_write(policies, OTHER, sub_resource="status").allowed
    spec = policies["gpu-stack-node-bound-nodes"]
    delete = request("DELETE", "nodes", OTHER, username=DRIVER, node=OWN)
    assert not admit(spec, Admission(delete, old_object=node(OTHER))).allowed


def test_a_request_without_the_node_claim_is_denied(policies):
    denied = node_write(policies, OWN, claim=None, **CHANGES["label"])
    assert denied.applies and not denied.allowed and "carries no node" in denied.message


@pytest.mark.parametrize("username", [
    "system:serviceaccount:gpu-operator:node-feature-discovery",  # NFD's master labels every node, off GPU nodes
    "system:serviceaccount:gpu-operator:gpu-stack-upgrade-coordinator",  # grants slots on other nodes
    "system:serviceaccount:kube-system:node-controller",
    "system:node:gpu-a",
    "platform-admin@example.com",
])
def test_every_other_user_is_left_alone(policies, username):
    for claim in (OWN, None):
        decision = node_write(policies, OTHER, username=username, claim=claim, **CHANGES["taint"])
        assert not decision.applies and decision.allowed


def pod_request(policies, operation: str, *, node_name: Optional[str], username: str = VALIDATOR,
                sub_resource: str = "", body: Optional[dict] = None):
    spec = policies["gpu-stack-node-bound-pods"]
    stored = pod(node_name)
    written = body if body is not None else (None if operation == "DELETE" else stored)
    return admit(spec, Admission(request(operation, "pods", "train-0", username=username, node=OWN, namespace=NS,
                                         sub_resource=sub_resource),
                                 object=written, old_object=None if operation == "CREATE" else stored))


def test_a_pod_is_created_only_for_the_tokens_own_node(policies):
    # the validator creates its workload pods with spec.nodeName set to its own node
    assert pod_request(policies, "CREATE", node_name=OWN).allowed
    assert not pod_request(policies, "CREATE", node_name=OTHER).allowed
    assert not pod_request(policies, "CREATE", node_name=None).allowed, "unscheduled: the scheduler would pick"


@pytest.mark.parametrize("operation, sub_resource", [("UPDATE", ""), ("DELETE", ""), ("UPDATE", "status"),
                                                     ("UPDATE", "ephemeralcontainers")])
def test_a_pod_is_changed_or_deleted_only_on_the_tokens_own_node(policies, operation, sub_resource):
    assert pod_request(policies, operation, node_name=OWN, sub_resource=sub_resource, username=AGENT).allowed
    assert not pod_request(policies, operation, node_name=OTHER, sub_resource=sub_resource, username=AGENT).allowed


def test_no_token_on_a_gpu_node_evicts_not_even_on_its_own_node(policies):
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "train-0", "namespace": NS}}
    denied = pod_request(policies, "CREATE", node_name=OWN, sub_resource="eviction", body=eviction, username=DRIVER)
    assert denied.applies and not denied.allowed and "upgrade coordinator" in denied.message


def feature_request(policies, operation: str, *, old: Optional[str], new: Optional[str], username: str = NFD_WORKER):
    spec = policies["gpu-stack-node-bound-nodefeatures"]
    return admit(spec, Admission(
        request(operation, "nodefeatures", "f", group="nfd.k8s-sigs.io", version="v1alpha1", username=username,
                node=OWN, namespace=NS),
        object=node_feature(new) if new else None, old_object=node_feature(old) if old else None))


def test_node_features_are_written_for_the_tokens_own_node_only(policies):
    assert feature_request(policies, "CREATE", old=None, new=OWN).allowed
    assert not feature_request(policies, "CREATE", old=None, new=OTHER).allowed
    assert feature_request(policies, "UPDATE", old=OWN, new=OWN).allowed
    assert not feature_request(policies, "UPDATE", old=OWN, new=OTHER).allowed, "moved to another node"
    assert not feature_request(policies, "UPDATE", old=OTHER, new=OWN).allowed, "taken from another node"
    assert feature_request(policies, "DELETE", old=OWN, new=None).allowed
    assert not feature_request(policies, "DELETE", old=OTHER, new=None).allowed


def test_the_policies_name_every_daemonsets_service_account_and_no_other(policies):
    recording = render_stack("prod-managed")
    accounts = {ds["spec"]["template"]["spec"]["serviceAccountName"] for ds in objects(recording, "DaemonSet").values()}
    expected = [f"'system:serviceaccount:{NS}:{a}'" for a in sorted(accounts)]
    for spec in policies.values():
        [condition] = spec["matchConditions"]
        assert condition["expression"] == f"request.userInfo.username in [{', '.join(expected)}]"
    assert set(policies) == {s.name for s in node_write_policy.SHAPES}
    bindings = objects(recording, "ValidatingAdmissionPolicyBinding")
    for name in policies:
        assert bindings[name]["spec"] == {"policyName": name, "validationActions": ["Deny"]}


def test_every_expression_of_every_rendered_admission_policy_compiles():
    for stack in STACKS:
        for obj in stack_objects(stack):
            if obj["kind"] != "ValidatingAdmissionPolicy":
                continue
            spec = obj["spec"]
            for part in ("matchConditions", "variables", "validations"):
                for item in spec.get(part) or []:
                    compile_cel(item["expression"])
                    if item.get("messageExpression"):
                        compile_cel(item["messageExpression"])


def test_the_dra_drivers_resource_slice_policy_holds_a_plugin_to_its_node():
    [spec] = [o["spec"] for n, o in objects(render_stack("dra"), "ValidatingAdmissionPolicy").items()
              if n == "resourceslices-policy-nvidia-dra-driver"]
    plugin = f"system:serviceaccount:{NS}:nvidia-dra-driver-kubeletplugin"

    def write(slice_node: str) -> bool:
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s"},
                "spec": {"nodeName": slice_node, "driver": "gpu.nvidia.com"}}
        return admit(spec, Admission(request("CREATE", "resourceslices", "s", group="resource.k8s.io", username=plugin,
                                             node=OWN), object=body)).allowed

    assert write(OWN) and not write(OTHER)


@pytest.mark.parametrize("versions, rendered", [(["1.29"], False), (["1.29", "1.30"], False), (["1.30"], True),
                                                (["1.32", "1.33"], True)])
def test_the_policies_are_rendered_only_where_every_declared_version_stamps_the_node_claim(versions, rendered):
    assert node_write_policy.enforceable(versions) is rendered


def test_a_stack_declaring_1_29_renders_none_of_them():
    config = copy.deepcopy(stack_config("prod-managed"))
    config["gpu-stack:cluster"]["kubernetesVersions"] = ["1.29", "1.33"]
    found = objects(render(config), "ValidatingAdmissionPolicy")
    assert not [n for n in found if n.startswith(node_write_policy.POLICY_PREFIX)]


def config_map(name: str, data: dict[str, str], **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS, "labels": labels},
            "data": data}


def config_map_write(policies, operation: str, old: Optional[dict], new: Optional[dict], *, username: str = AGENT):
    name = (new or old)["metadata"]["name"]
    return admit(policies["gpu-stack-node-bound-configmaps"], Admission(
        request(operation, "configmaps", name, username=username, node=OWN, namespace=NS), object=new, old_object=old))


def test_the_mig_managers_config_maps_are_its_own_nodes_only(policies):
    mig = f"system:serviceaccount:{NS}:nvidia-mig-manager"
    own = config_map(f"{OWN}-mig-config", {"config.yaml": "version: v1"}, **{"nvidia.com/node-name": OWN})
    other = config_map(f"{OTHER}-mig-config", {"config.yaml": "version: v1"}, **{"nvidia.com/node-name": OTHER})
    assert config_map_write(policies, "CREATE", None, own, username=mig).allowed
    assert config_map_write(policies, "UPDATE", own, own, username=mig).allowed
    assert not config_map_write(policies, "UPDATE", other, other, username=mig).allowed
    # RBAC lets it write every ConfigMap of the namespace: the agents' document would reach every node
    pools = config_map("gpu-stack-node-pools", {"node-pools.json": "{}"})
    assert not config_map_write(policies, "UPDATE", pools, config_map("gpu-stack-node-pools", {"node-pools.json": "[]"}),
                                username=mig).allowed


def test_an_agent_changes_only_its_own_slot_of_the_budget(policies):
    slots = {OWN: '{"reason":"driver-upgrade"}', OTHER: '{"reason":"label-removal"}'}
    budget = config_map("gpu-stack-upgrade-budget", slots)
    given_back = config_map("gpu-stack-upgrade-budget", {OTHER: slots[OTHER]})
    marked = config_map("gpu-stack-upgrade-budget", {**slots, OWN: '{"reason":"driver-upgrade","failed":"x"}'})
    assert config_map_write(policies, "UPDATE", budget, given_back).allowed
    assert config_map_write(policies, "UPDATE", budget, marked).allowed
    freed_other = config_map("gpu-stack-upgrade-budget", {OWN: slots[OWN]})
    taken = config_map("gpu-stack-upgrade-budget", {**slots, "gpu-c": '{"reason":"driver-upgrade"}'})
    relabelled = config_map("gpu-stack-upgrade-budget", slots, tier="x")
    for forged in (freed_other, taken, relabelled):
        assert not config_map_write(policies, "UPDATE", budget, forged).allowed
    assert not config_map_write(policies, "DELETE", budget, None).allowed


# --- the policy pack -------------------------------------------------------------------------------------------


def test_every_shipped_stack_passes_the_token_policies_and_only_a_version_before_1_30_warns():
    for stack in ("prod-managed", "dra", "kubevirt"):
        recording = render_stack(stack)
        for policy in ("node-bound-tokens", "gpu-node-token-reach", "tokens-only-where-needed"):
            assert messages(recording, policy) == [], (stack, policy)
    config = copy.deepcopy(stack_config("prod-managed"))
    config["gpu-stack:cluster"]["kubernetesVersions"] = ["1.29", "1.33"]
    warned = messages(render(config), "gpu-node-token-reach")
    assert any("gpu-stack-node-labeler, whose token may write nodes, pods of any node" in m for m in warned)
    assert all("1.30 and later" in m for m in warned)


def test_a_daemonset_account_the_node_bound_policies_do_not_name_fails_the_check():
    def forget(broken) -> None:
        spec = registration(broken, "DaemonSet", "nvidia-mig-manager").inputs["spec"]["template"]["spec"]
        spec["serviceAccountName"] = "nvidia-mig-manager-2"

    found = messages(edited(render_stack("prod-managed"), forget), "node-bound-tokens")
    assert len(found) == len(node_write_policy.SHAPES)
    assert all("ServiceAccount gpu-operator/nvidia-mig-manager-2 runs on GPU nodes" in m for m in found)


def test_a_node_bound_policy_without_its_deny_binding_fails_the_check():
    def unbind(broken) -> None:
        registration(broken, "ValidatingAdmissionPolicyBinding", "gpu-stack-node-bound-pods").inputs["spec"][
            "validationActions"] = ["Audit"]

    [found] = messages(edited(render_stack("prod-managed"), unbind), "node-bound-tokens")
    assert "gpu-stack-node-bound-pods has no binding with Deny" in found


def test_manual_upgrades_leave_the_driver_managers_eviction_and_check_warns_of_it():
    config = copy.deepcopy(stack_config("prod-managed"))
    config["gpu-stack:upgrade"] = {"strategy": "manual"}
    warned = messages(render(config), "gpu-node-token-reach")
    assert warned and all("runs as nvidia-driver, whose token (on every node it runs on) may evict any pod" in m
                          for m in warned)


def test_a_pod_mounting_a_token_its_account_has_no_use_for_fails_the_check():
    def mount(broken) -> None:
        del registration(broken, "DaemonSet", "nvidia-dcgm").inputs["spec"]["template"]["spec"]["automountServiceAccountToken"]

    [found] = messages(edited(render_stack("a100-mig"), mount), "tokens-only-where-needed")
    assert "mounts a token of nvidia-dcgm, which holds no rights" in found
