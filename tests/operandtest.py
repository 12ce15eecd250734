"""Test support for operand fidelity tests: a DaemonSet's pod spec, host paths, mounts and RBAC as comparable data."""

from __future__ import annotations

from stacktest import objects


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
