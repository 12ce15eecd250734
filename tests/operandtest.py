"""Test support for operand fidelity tests: a DaemonSet's pod spec, host paths, mounts and RBAC as comparable data."""

from __future__ import annotations

from stacktest import env_of, objects

# What NVIDIA's assets and the v26.7.0 release pin, as the rendered objects must carry them.
VALIDATOR_IMAGE = "nvcr.io/nvidia/gpu-operator:v26.7.0"
DRIVER_MANAGER_IMAGE = "nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.12.0"
NODE_NAME = {"fieldRef": {"fieldPath": "spec.nodeName"}}
NAMESPACE_FIELD = {"fieldRef": {"fieldPath": "metadata.namespace"}}


def pod_spec(ds: dict) -> dict:
    return ds["spec"]["template"]["spec"]


def host_paths(ds: dict) -> dict[str, tuple[str, str | None]]:
    return {v["name"]: (v["hostPath"]["path"], v["hostPath"].get("type")) for v in pod_spec(ds)["volumes"] if "hostPath" in v}


def mounts(c: dict) -> list[tuple]:
    return [(m["name"], m["mountPath"], m.get("readOnly", False), m.get("mountPropagation")) for m in c.get("volumeMounts", [])]


def names(items: list[dict]) -> list[str]:
    return [i["name"] for i in items]


def rules(role: dict) -> set[tuple]:
    return {
        (tuple(r.get("apiGroups", [])), tuple(r["resources"]), tuple(sorted(r["verbs"])), tuple(r.get("resourceNames", [])))
        for r in role["rules"]
    }


SCC = (("security.openshift.io",), ("securitycontextconstraints",), ("use",), ("privileged",))
VALIDATIONS = ("run-nvidia-validations", "/run/nvidia/validations")


def rbac(recording, name: str) -> tuple[set, set]:
    """(Role rules, ClusterRole rules), after checking both bindings bind the component's own SA only."""
    assert name in objects(recording, "ServiceAccount")
    for binding_kind, role_kind in (("RoleBinding", "Role"), ("ClusterRoleBinding", "ClusterRole")):
        binding = objects(recording, binding_kind)[name]
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": name}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": "gpu-operator"}]
    return rules(objects(recording, "Role")[name]), rules(objects(recording, "ClusterRole")[name])


def assert_vm_driver_manager(manager: dict) -> None:
    """The `k8s-driver-manager` init container of the VM operands (VFIO manager, vGPU manager): it unloads any
    driver with the asset's values, not the stack's upgrade policy, because VM pools roll no container driver."""
    assert manager["image"] == DRIVER_MANAGER_IMAGE and manager["imagePullPolicy"] == "IfNotPresent"
    assert manager["command"] == ["driver-manager"] and manager["args"] == ["uninstall_driver"]
    assert [e["name"] for e in manager["env"]] == [
        "NODE_NAME",
        "NVIDIA_VISIBLE_DEVICES",
        "ENABLE_GPU_POD_EVICTION",
        "ENABLE_AUTO_DRAIN",
        "OPERATOR_NAMESPACE",
    ]
    assert env_of(manager) == {
        "NODE_NAME": NODE_NAME,
        "NVIDIA_VISIBLE_DEVICES": "void",
        "ENABLE_GPU_POD_EVICTION": "false",
        "ENABLE_AUTO_DRAIN": "false",
        "OPERATOR_NAMESPACE": NAMESPACE_FIELD,
    }
    assert manager["securityContext"] == {"privileged": True}
    assert mounts(manager) == [
        ("run-nvidia", "/run/nvidia", False, "Bidirectional"),
        ("host-root", "/host", True, "HostToContainer"),
        ("host-sys", "/sys", False, None),
    ]
