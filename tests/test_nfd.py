"""Node Feature Discovery as the stack's own objects (components/states/nfd.py): what NFD's chart 0.19.0 renders
with the GPU Operator's values, the CRDs it stands on, `nfd.mode: existing`, and the way off the old Helm release."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import pytest
import yaml

from components.catalogs import catalog
from components.config import ConfigError
from components.kit import nfd_chart
from components.states import nfd
from gpustack import changes, nfd_migration, schema
from gpustack.crd_schemas import crd_validator
from gpustack.mockrun import Recording, Registration
from gpustack.policyrun import pack_config
from gpustack.render import kubernetes_object
from policytest import edited, messages, registration
from stacktest import container, env_of, objects, render, render_stack, stack_config

NFD_COMPONENT = "gpu-stack:index:NodeFeatureDiscovery"
NAMESPACE = "gpu-operator"  # prod-managed's
CHART_LABELS = {
    "helm.sh/chart": "node-feature-discovery-0.19.0",
    "app.kubernetes.io/name": "node-feature-discovery",
    "app.kubernetes.io/instance": "node-feature-discovery",
    "app.kubernetes.io/version": "v0.19.0",
    "app.kubernetes.io/managed-by": "gpu-stack",
}
# (kind, name) of everything NFD chart 0.19.0 renders with the operator's values, its crds/ folder included
EXPECTED = {
    ("CustomResourceDefinition", "nodefeatures.nfd.k8s-sigs.io"),
    ("CustomResourceDefinition", "nodefeaturegroups.nfd.k8s-sigs.io"),
    ("CustomResourceDefinition", "nodefeaturerules.nfd.k8s-sigs.io"),
    ("ServiceAccount", "node-feature-discovery"),
    ("ServiceAccount", "node-feature-discovery-worker"),
    ("ServiceAccount", "node-feature-discovery-gc"),
    ("ClusterRole", "node-feature-discovery"),
    ("ClusterRoleBinding", "node-feature-discovery"),
    ("ClusterRole", "node-feature-discovery-gc"),
    ("ClusterRoleBinding", "node-feature-discovery-gc"),
    ("Role", "node-feature-discovery-worker"),
    ("RoleBinding", "node-feature-discovery-worker"),
    ("ConfigMap", "node-feature-discovery-master-conf"),
    ("ConfigMap", "node-feature-discovery-worker-conf"),
    ("Deployment", "node-feature-discovery-master"),
    ("DaemonSet", "node-feature-discovery-worker"),
    ("Deployment", "node-feature-discovery-gc"),
}


def nfd_registrations(recording: Recording) -> list[Registration]:
    component = [r.urn for r in recording.registrations if r.type == NFD_COMPONENT]
    return [r for r in recording.registrations if r.parent in component]


def nfd_objects(recording: Recording) -> dict[tuple[str, str], dict[str, Any]]:
    found = {}
    for r in nfd_registrations(recording):
        obj = kubernetes_object(r)
        found[(obj["kind"], obj["metadata"]["name"])] = obj
    return found


def deploy_config(stack: str) -> dict[str, Any]:
    config = stack_config(stack)
    config["gpu-stack:nfd"] = {"mode": "deploy"}
    return config


@pytest.fixture(scope="module")
def rendered() -> dict[tuple[str, str], dict[str, Any]]:
    return nfd_objects(render_stack("prod-managed"))


def pod(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"]


# --- what is rendered -------------------------------------------------------------------------------------------


def test_deploy_mode_renders_the_charts_objects_under_the_charts_names(rendered):
    assert set(rendered) == EXPECTED
    recording = render_stack("prod-managed")
    assert not [r for r in recording.registrations if "helm.sh" in r.type]
    for (kind, name), obj in rendered.items():
        annotations = obj["metadata"]["annotations"]
        assert annotations["pulumi.com/patchForce"] == "true", (kind, name)
        if kind != "CustomResourceDefinition":
            assert {k: v for k, v in obj["metadata"]["labels"].items() if k != "role"} == CHART_LABELS, (kind, name)
            assert obj["metadata"].get("namespace") in (NAMESPACE, None)


def test_master_worker_and_gc_each_hold_their_own_rights_under_their_own_service_account(rendered):
    # The chart's default names; the operator's values gave all three the master's, cluster-wide node writes and all.
    accounts = {"master": "node-feature-discovery", "worker": "node-feature-discovery-worker", "gc": "node-feature-discovery-gc"}
    for kind, name, role in (("ClusterRoleBinding", "node-feature-discovery", "master"),
                             ("ClusterRoleBinding", "node-feature-discovery-gc", "gc"),
                             ("RoleBinding", "node-feature-discovery-worker", "worker")):
        binding = rendered[(kind, name)]
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": kind[: -len("Binding")], "name": name}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": accounts[role], "namespace": NAMESPACE}]
    for kind, name, role in (("Deployment", "node-feature-discovery-master", "master"),
                             ("DaemonSet", "node-feature-discovery-worker", "worker"),
                             ("Deployment", "node-feature-discovery-gc", "gc")):
        assert pod(rendered[(kind, name)])["serviceAccountName"] == accounts[role]
    gc_rules = rendered[("ClusterRole", "node-feature-discovery-gc")]["rules"]
    assert {"apiGroups": ["nfd.k8s-sigs.io"], "resources": ["nodefeatures"], "verbs": ["delete", "list"]} in gc_rules
    master_rules = rendered[("ClusterRole", "node-feature-discovery")]["rules"]
    assert {"apiGroups": [""], "resources": ["nodes", "nodes/status"], "verbs": ["get", "patch", "update", "list"]} in master_rules
    assert rendered[("Role", "node-feature-discovery-worker")]["rules"] == [
        {"apiGroups": ["nfd.k8s-sigs.io"], "resources": ["nodefeatures"], "verbs": ["create", "get", "update", "delete"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
    ]


def test_selectors_are_the_charts_so_a_migrated_release_is_updated_not_replaced(rendered):
    for kind, name, role in (("Deployment", "node-feature-discovery-master", "master"),
                             ("DaemonSet", "node-feature-discovery-worker", "worker"),
                             ("Deployment", "node-feature-discovery-gc", "gc")):
        obj = rendered[(kind, name)]
        selector = {"app.kubernetes.io/name": "node-feature-discovery", "app.kubernetes.io/instance": "node-feature-discovery", "role": role}
        assert obj["spec"]["selector"] == {"matchLabels": selector}
        assert obj["spec"]["template"]["metadata"]["labels"] == selector
        assert obj["metadata"]["labels"]["role"] == role


def test_the_master_is_the_charts_with_nvidia_com_labels_allowed(rendered):
    master = rendered[("Deployment", "node-feature-discovery-master")]
    assert master["spec"]["replicas"] == 1
    spec = pod(master)
    c = container(master, "master")
    assert c["image"] == "registry.k8s.io/nfd/node-feature-discovery:v0.19.0" and c["imagePullPolicy"] == "IfNotPresent"
    assert c["command"] == ["nfd-master"] and c["args"] == ["-port=8080"]
    assert c["ports"] == [{"containerPort": 8080, "name": "http"}]
    health = {"httpGet": {"path": "/healthz", "port": "http"}}
    assert c["startupProbe"] == {**health, "failureThreshold": 30}
    assert c["livenessProbe"] == health
    assert c["readinessProbe"] == {**health, "failureThreshold": 10}
    assert c["resources"] == {"limits": {"memory": "4Gi"}, "requests": {"cpu": "100m", "memory": "128Mi"}}
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
    }
    assert env_of(c) == {"NODE_NAME": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    assert c["volumeMounts"] == [{"name": "nfd-master-conf", "mountPath": "/etc/kubernetes/node-feature-discovery", "readOnly": True}]
    assert spec["volumes"] == [{"name": "nfd-master-conf", "configMap": {
        "name": "node-feature-discovery-master-conf", "items": [{"key": "nfd-master.conf", "path": "nfd-master.conf"}]}}]
    assert spec["enableServiceLinks"] is False and spec["hostNetwork"] is False and spec["securityContext"] == {}
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet" and spec["priorityClassName"] == "system-node-critical"
    assert spec["tolerations"] == [{"key": "node-role.kubernetes.io/control-plane", "operator": "Equal", "value": "", "effect": "NoSchedule"}]
    preferred = spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred == [{"weight": 1, "preference": {"matchExpressions": [
        {"key": "node-role.kubernetes.io/control-plane", "operator": "In", "values": [""]}]}}]
    assert yaml.safe_load(rendered[("ConfigMap", "node-feature-discovery-master-conf")]["data"]["nfd-master.conf"]) == {
        "extraLabelNs": ["nvidia.com"]
    }
    # awaited, as Helm waited for it: the later states need the labels it publishes
    assert "pulumi.com/skipAwait" not in master["metadata"]["annotations"]


def test_the_workers_config_whitelists_the_operators_pci_classes(rendered):
    text = rendered[("ConfigMap", "node-feature-discovery-worker-conf")]["data"]["nfd-worker.conf"]
    assert yaml.safe_load(text) == {
        "sources": {"pci": {"deviceClassWhitelist": ["02", "0200", "0207", "0300", "0302"], "deviceLabelFields": ["vendor"]}}
    }
    # Helm's toYaml: the classes quoted (they would read as numbers), sequences at their key's indentation
    assert text == 'sources:\n  pci:\n    deviceClassWhitelist:\n    - "02"\n    - "0200"\n    - "0207"\n    - "0300"\n    - "0302"\n' \
                   "    deviceLabelFields:\n    - vendor"


def test_the_worker_reads_the_host_read_only_as_the_chart_mounts_it(rendered):
    worker = rendered[("DaemonSet", "node-feature-discovery-worker")]
    spec = pod(worker)
    c = container(worker, "worker")
    assert c["command"] == ["nfd-worker"] and c["args"] == ["-owner-refs=pod,ds", "-port=8080"]
    assert set(env_of(c)) == {"NODE_NAME", "POD_NAME", "POD_UID"}
    assert env_of(c)["POD_UID"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
    assert c["livenessProbe"] == {"httpGet": {"path": "/healthz", "port": "http"}, "initialDelaySeconds": 10}
    assert c["readinessProbe"] == {"httpGet": {"path": "/healthz", "port": "http"}, "initialDelaySeconds": 5, "failureThreshold": 10}
    assert c["resources"] == {"limits": {"memory": "512Mi"}, "requests": {"cpu": "5m", "memory": "64Mi"}}
    assert c["securityContext"]["runAsNonRoot"] is True and "privileged" not in c["securityContext"]
    host_paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert host_paths == {
        "host-boot": "/boot", "host-os-release": "/etc/os-release", "host-sys": "/sys", "host-usr-lib": "/usr/lib",
        "host-lib": "/lib", "host-proc-swaps": "/proc/swaps", "features-d": "/etc/kubernetes/node-feature-discovery/features.d/",
    }
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts == {
        "host-boot": "/host-boot", "host-os-release": "/host-etc/os-release", "host-sys": "/host-sys",
        "host-usr-lib": "/host-usr/lib", "host-lib": "/host-lib", "host-proc-swaps": "/host-proc/swaps",
        "features-d": "/etc/kubernetes/node-feature-discovery/features.d/", "nfd-worker-conf": "/etc/kubernetes/node-feature-discovery",
    }
    assert all(m["readOnly"] is True for m in c["volumeMounts"])
    assert {v["name"]: v["configMap"]["name"] for v in spec["volumes"] if "configMap" in v} == {"nfd-worker-conf": "node-feature-discovery-worker-conf"}
    # GFD writes features.d/gfd on OpenShift; the worker reads the same host directory
    assert "nodeSelector" not in spec and "affinity" not in spec
    assert spec["tolerations"] == [
        {"key": "node-role.kubernetes.io/control-plane", "operator": "Equal", "value": "", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    ]
    assert worker["spec"]["updateStrategy"] == {"rollingUpdate": {"maxUnavailable": "10%"}}
    assert worker["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"


def test_the_gc_is_the_charts(rendered):
    gc = rendered[("Deployment", "node-feature-discovery-gc")]
    c = container(gc, "gc")
    assert c["command"] == ["nfd-gc"] and c["args"] == ["-gc-interval=1h"]
    assert c["resources"] == {"limits": {"memory": "1Gi"}, "requests": {"cpu": "10m", "memory": "128Mi"}}
    assert c["readinessProbe"] == {"httpGet": {"path": "/healthz", "port": "http"}, "initialDelaySeconds": 5}
    assert "volumes" not in pod(gc) and "annotations" not in gc["spec"]["template"]["metadata"]


def test_config_checksums_are_helms_sha256_of_the_rendered_configmap_template(rendered):
    master_text = (
        "\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: node-feature-discovery-master-conf\n  namespace: gpu-operator\n"
        "  labels:\n    helm.sh/chart: node-feature-discovery-0.19.0\n    app.kubernetes.io/name: node-feature-discovery\n"
        "    app.kubernetes.io/instance: node-feature-discovery\n    app.kubernetes.io/version: \"v0.19.0\"\n"
        "    app.kubernetes.io/managed-by: Helm\ndata:\n  nfd-master.conf: |-\n    extraLabelNs:\n    - nvidia.com\n"
    )
    assert nfd_chart.helm_config_text(nfd_chart.MASTER_CONF, NAMESPACE, nfd_chart.MASTER_CONF_KEY, nfd.MASTER_CONFIG) == master_text
    annotations = rendered[("Deployment", "node-feature-discovery-master")]["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"checksum/config": hashlib.sha256(master_text.encode()).hexdigest()}
    for name, key in ((nfd_chart.MASTER_CONF, nfd_chart.MASTER_CONF_KEY), (nfd_chart.WORKER_CONF, nfd_chart.WORKER_CONF_KEY)):
        # the template text is the ConfigMap the chart applies: same data as gpu-stack's
        as_helm = yaml.safe_load(nfd_chart.helm_config_text(name, NAMESPACE, key, nfd.MASTER_CONFIG if key == nfd_chart.MASTER_CONF_KEY else nfd.WORKER_CONFIG))
        assert as_helm["data"] == rendered[("ConfigMap", name)]["data"]
    worker = rendered[("DaemonSet", "node-feature-discovery-worker")]["spec"]["template"]["metadata"]["annotations"]
    assert worker["checksum/config"] == nfd_chart.config_checksum(nfd_chart.WORKER_CONF, NAMESPACE, nfd_chart.WORKER_CONF_KEY, nfd.WORKER_CONFIG)
    # the namespace is part of the template, so another namespace rolls other pods
    assert nfd_chart.config_checksum(nfd_chart.WORKER_CONF, "other", nfd_chart.WORKER_CONF_KEY, nfd.WORKER_CONFIG) != worker["checksum/config"]


def test_the_crds_are_nfds_own_and_protected(rendered):
    source = {d["metadata"]["name"]: d for d in yaml.safe_load_all(nfd_chart.CRD_FILE.read_text()) if d}
    assert len(source) == 3
    for name, document in source.items():
        crd = rendered[("CustomResourceDefinition", name)]
        assert crd["spec"] == document["spec"]
        assert crd["metadata"]["annotations"]["controller-gen.kubebuilder.io/version"] == "v0.16.3"
    rule_crd = source["nodefeaturerules.nfd.k8s-sigs.io"]["spec"]
    assert rule_crd["scope"] == "Cluster" and rule_crd["names"]["kind"] == "NodeFeatureRule"
    recording = render_stack("prod-managed")
    for r in nfd_registrations(recording):
        if r.inputs.get("kind") == "CustomResourceDefinition":
            assert r.protect and r.retain_on_delete, r.name
        else:
            assert not r.protect, r.name
    assert messages(recording, "protected-objects") == []


def test_workloads_wait_for_their_crds_configmaps_and_rights():
    recording = render_stack("prod-managed")
    urn = {(r.inputs.get("kind"), (r.inputs.get("metadata") or {}).get("name")): r.urn for r in nfd_registrations(recording)}
    crds = {u for (kind, _), u in urn.items() if kind == "CustomResourceDefinition"}
    master = recording.by_urn()[urn[("Deployment", "node-feature-discovery-master")]]
    assert crds | {urn[("ConfigMap", "node-feature-discovery-master-conf")], urn[("ClusterRoleBinding", "node-feature-discovery")]} <= set(master.dependencies)
    worker = recording.by_urn()[urn[("DaemonSet", "node-feature-discovery-worker")]]
    assert crds | {urn[("ConfigMap", "node-feature-discovery-worker-conf")], urn[("RoleBinding", "node-feature-discovery-worker")]} <= set(worker.dependencies)


# --- registry override, versions, config -------------------------------------------------------------------------


def test_the_registry_override_moves_nfds_image_under_the_same_path():
    nfd_objs = nfd_objects(render(deploy_config("onprem-host-driver"), stack="onprem-host-driver"))  # registry.dc2.corp:5000
    images = {c["image"] for obj in nfd_objs.values() if obj["kind"] in ("Deployment", "DaemonSet") for c in pod(obj)["containers"]}
    assert images == {"registry.dc2.corp:5000/nfd/node-feature-discovery:v0.19.0"}
    assert nfd.nfd_image(None) == f"{catalog.NFD_REGISTRY}/nfd/node-feature-discovery:{catalog.NFD_IMAGE[1]}"


def test_no_other_chart_version_can_be_chosen_before_anything_registers():
    config = deploy_config("dev")
    config.setdefault("gpu-stack:versions", {})["nfdChart"] = "0.18.3"
    with pytest.raises(ConfigError, match=r"gpu-stack:versions.nfdChart: .*NFD chart 0.19.0 itself.*remove the key"):
        render(config, stack="dev")
    # a stack that reuses the cluster's own NFD has no use for the key either, so it is refused there too
    config["gpu-stack:nfd"] = {"mode": "existing"}
    with pytest.raises(ConfigError, match=r"gpu-stack:versions.nfdChart"):
        render(config, stack="dev")


def test_the_chart_repository_key_is_refused_by_name():
    config = stack_config("dev")
    config["gpu-stack:nfd"] = {"mode": "deploy", "chartRepository": "oci://harbor.internal/nfd/charts"}
    with pytest.raises(ConfigError) as failure:
        render(config, stack="dev")
    [(path, message)] = failure.value.problems
    assert path == "gpu-stack:nfd.chartRepository"
    assert "this key is gone" in message and "remove it" in message and "registry.override" in message


# --- nfd.mode: existing, and the NodeFeatureRule ----------------------------------------------------------------


def test_existing_mode_renders_nothing_but_the_rule():
    training = render_stack("gpudirect-training")  # nfd.mode: existing, GPUDirect on
    assert [(r.inputs["kind"], r.inputs["metadata"]["name"]) for r in nfd_registrations(training)] == [("NodeFeatureRule", "nvidia-kernel-modules")]
    # the cluster's NFD owns the CRD: nothing of gpu-stack's to wait for
    assert not [d for d in nfd_registrations(training)[0].dependencies if "CustomResourceDefinition" in d]
    assert not [r for r in render_stack("onprem-host-driver").registrations if r.type == NFD_COMPONENT]


def test_the_rule_waits_for_its_crd_when_nfd_is_deployed():
    recording = render(deploy_config("gpudirect-training"), stack="gpudirect-training")
    rule = next(r for r in nfd_registrations(recording) if r.inputs.get("kind") == "NodeFeatureRule")
    crd = next(r for r in nfd_registrations(recording) if (r.inputs.get("metadata") or {}).get("name") == nfd.NODE_FEATURE_RULE_CRD)
    assert crd.urn in rule.dependencies
    obj = kubernetes_object(rule)
    assert schema.validate(obj, "1.33") == []
    assert list(crd_validator("nfd.k8s-sigs.io/v1alpha1", "NodeFeatureRule").iter_errors(obj)) == []


def test_the_rule_is_checked_against_the_schema_its_crd_serves():
    obj = kubernetes_object(next(r for r in nfd_registrations(render_stack("gpudirect-training")) if r.inputs.get("kind") == "NodeFeatureRule"))
    broken = copy.deepcopy(obj)
    broken["spec"]["rules"][0]["matchFeatures"][0]["matchExpressions"]["gdrdrv"] = {"op": "Ge", "value": "1"}
    assert [p.message for p in schema.validate(broken, "1.33")]
    fine = copy.deepcopy(obj)
    fine["spec"]["rules"][0]["matchFeatures"][0]["matchExpressions"]["gdrdrv"] = {"op": "Ge", "type": "version", "value": ["1.0"]}
    assert schema.validate(fine, "1.33") == []


# --- policies ----------------------------------------------------------------------------------------------------


def test_every_stack_policy_passes_nfd_as_rendered():
    recording = render_stack("prod-managed")
    for policy in ("privileged-only-where-needed", "rbac-least-privilege", "one-workload-type-per-node", "images-pinned", "state-order"):
        assert messages(recording, policy, pack_config("prod-managed")) == [], policy


def test_the_worker_gets_only_the_charts_host_access():
    def widen(broken: Recording) -> None:
        spec = registration(broken, "DaemonSet", "node-feature-discovery-worker").inputs["spec"]["template"]["spec"]
        spec["volumes"].append({"name": "etc", "hostPath": {"path": "/etc"}})
        spec["containers"][0]["securityContext"] = {"privileged": True}

    found = messages(edited(render_stack("prod-managed"), widen), "privileged-only-where-needed")
    assert any("mounts host path /etc," in m for m in found) and any("'worker' is privileged" in m for m in found)


@pytest.mark.parametrize("binding, role", [("node-feature-discovery-gc", "nvidia-gpu-feature-discovery"),
                                           ("node-feature-discovery-gc", "node-feature-discovery")])
def test_an_nfd_service_account_bound_to_another_role_is_reported(binding, role):
    """The master's cluster-wide node writes on the gc's (or any other) account: what the operator's shared account
    gave every worker."""
    def borrow(broken: Recording) -> None:
        registration(broken, "ClusterRoleBinding", binding).inputs["roleRef"]["name"] = role

    found = messages(edited(render_stack("prod-managed"), borrow), "rbac-least-privilege")
    assert any(f"binds ServiceAccount '{binding}' to ClusterRole '{role}'" in m for m in found)


# --- the way off the Helm release ---------------------------------------------------------------------------------

RELEASE_URN = ("urn:pulumi:prod::gpu-stack::gpu-stack:index:GpuStack$gpu-stack:index:NodeFeatureDiscovery"
               "$kubernetes:helm.sh/v3:Release::node-feature-discovery")


def stack_export(*extra: dict) -> dict:
    return {"version": 3, "deployment": {"manifest": {}, "resources": [
        {"urn": "urn:pulumi:prod::gpu-stack::pulumi:pulumi:Stack::gpu-stack-prod", "type": "pulumi:pulumi:Stack"},
        {"urn": RELEASE_URN, "type": "kubernetes:helm.sh/v3:Release", "custom": True},
        *extra,
    ]}}


def test_the_migration_marks_only_the_nfd_release_retained(tmp_path, capsys):
    other = {"urn": "urn:pulumi:prod::gpu-stack::kubernetes:helm.sh/v3:Release::node-feature-discovery", "type": "kubernetes:helm.sh/v3:Release"}
    state = stack_export(other)
    assert nfd_migration.retain_nfd_release(state) == [RELEASE_URN]
    resources = state["deployment"]["resources"]
    assert resources[1]["retainOnDelete"] is True and "retainOnDelete" not in resources[2]

    path = tmp_path / "state.json"
    path.write_text(json.dumps(stack_export()))
    assert nfd_migration.main([str(path)]) == 0
    assert json.loads(path.read_text())["deployment"]["resources"][1]["retainOnDelete"] is True
    assert "pulumi stack import" in capsys.readouterr().out
    path.write_text(json.dumps({"version": 3, "deployment": {"resources": []}}))
    assert nfd_migration.main([str(path)]) == 0 and "nothing to migrate" in capsys.readouterr().out
    path.write_text("[]")
    assert nfd_migration.main([str(path)]) == 2 and "not a `pulumi stack export`" in capsys.readouterr().err
    path.write_bytes(b"\xff\xfe\x00binary")
    assert nfd_migration.main([str(path)]) == 2 and "utf-8" in capsys.readouterr().err.lower()


def test_deleting_the_old_release_is_dangerous_unless_retained():
    after = render_stack("prod-managed")
    component = next(r.urn for r in after.registrations if r.type == NFD_COMPONENT)
    release = Registration(
        urn=f"{component}$kubernetes:helm.sh/v3:Release::node-feature-discovery", type="kubernetes:helm.sh/v3:Release",
        name="node-feature-discovery", parent=component, dependencies=[], property_dependencies={}, custom=True,
        provider="", inputs={"name": "node-feature-discovery", "chart": "oci://registry.k8s.io/nfd/charts/node-feature-discovery"},
    )
    before = copy.deepcopy(after)
    before.registrations.append(release)
    found = [m for rule, m in changes.plan(before, after).dangers if rule == "helm-release-deleted"]
    assert len(found) == 1 and "Helm release node-feature-discovery is deleted" in found[0] and "gpustack.nfd_migration" in found[0]
    release.retain_on_delete = True
    assert not [rule for rule, _ in changes.plan(before, after).dangers if rule == "helm-release-deleted"]
