"""Valid objects of every kind the API-server rules judge, and a way to change one field of a copy."""

from __future__ import annotations

import copy
import re
from typing import Any

NS = "gpu-operator"
IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.19.0"


def pod_spec() -> dict[str, Any]:
    return {
        "serviceAccountName": "plugin",
        "priorityClassName": "system-node-critical",
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "nodeSelector": {"nvidia.com/gpu.deploy.device-plugin": "true"},
        "initContainers": [
            {
                "name": "toolkit-validation",
                "image": IMAGE,
                "command": ["sh", "-c"],
                "args": ["until [ -f /run/nvidia/validations/toolkit-ready ]; do sleep 5; done"],
                "securityContext": {"privileged": True},
                "volumeMounts": [{"name": "run-nvidia-validations", "mountPath": "/run/nvidia/validations", "mountPropagation": "HostToContainer"}],
            }
        ],
        "containers": [
            {
                "name": "plugin",
                "image": IMAGE,
                "imagePullPolicy": "IfNotPresent",
                "env": [
                    {"name": "PASS_DEVICE_SPECS", "value": "true"},
                    {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                ],
                "ports": [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}],
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
                "readinessProbe": {"exec": {"command": ["test", "-f", "/run/ready"]}, "periodSeconds": 10},
                "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "rm -f /run/ready"]}}},
                "securityContext": {"privileged": True, "runAsUser": 0},
                "volumeMounts": [
                    {"name": "run-nvidia-validations", "mountPath": "/run/nvidia/validations", "mountPropagation": "Bidirectional"},
                    {"name": "config", "mountPath": "/config", "readOnly": True},
                ],
            }
        ],
        "volumes": [
            {"name": "run-nvidia-validations", "hostPath": {"path": "/run/nvidia/validations", "type": "DirectoryOrCreate"}},
            {"name": "config", "configMap": {"name": "plugin-config", "items": [{"key": "config.yaml", "path": "config.yaml"}], "defaultMode": 0o644}},
        ],
    }


def daemonset() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "plugin", "namespace": NS, "labels": {"app": "plugin"}, "annotations": {"pulumi.com/skipAwait": "true"}},
        "spec": {
            "selector": {"matchLabels": {"app": "plugin"}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {"metadata": {"labels": {"app": "plugin"}}, "spec": pod_spec()},
        },
    }


def deployment() -> dict[str, Any]:
    ds = daemonset()
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {**ds["metadata"]},
        "spec": {
            "replicas": 1,
            "selector": ds["spec"]["selector"],
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": 1}},
            "template": ds["spec"]["template"],
        },
    }


def job() -> dict[str, Any]:
    pod = pod_spec()
    pod["restartPolicy"] = "Never"
    del pod["containers"][0]["readinessProbe"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "gpu-stack-validation", "namespace": NS},
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": 900, "template": {"metadata": {"labels": {"app": "gate"}}, "spec": pod}},
    }


def service_account(name: str = "plugin") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": NS}}


def config_map() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plugin-config", "namespace": NS}, "data": {"config.yaml": "version: v1\n"}}


def secret() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "gpu-stack-registry-credentials", "namespace": NS},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": '{"auths": {}}'},
    }


def service() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "nvidia-dcgm-exporter", "namespace": NS},
        "spec": {"selector": {"app": "nvidia-dcgm-exporter"}, "internalTrafficPolicy": "Local",
                 "ports": [{"name": "gpu-metrics", "port": 9400, "targetPort": 9400, "protocol": "TCP"}]},
    }


def role(kind: str = "Role") -> dict[str, Any]:
    meta = {"name": "plugin", "namespace": NS} if kind == "Role" else {"name": "plugin"}
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta,
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]}


def binding(kind: str = "RoleBinding") -> dict[str, Any]:
    meta = {"name": "plugin", "namespace": NS} if kind == "RoleBinding" else {"name": "plugin"}
    ref_kind = "Role" if kind == "RoleBinding" else "ClusterRole"
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": ref_kind, "name": "plugin"},
            "subjects": [{"kind": "ServiceAccount", "name": "plugin", "namespace": NS}]}


def runtime_class() -> dict[str, Any]:
    return {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia-cdi"}, "handler": "nvidia-cdi"}


def priority_class() -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "gpu-operands"}, "value": 1_000_000}


def crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "computedomains.resource.nvidia.com"},
        "spec": {
            "group": "resource.nvidia.com",
            "scope": "Namespaced",
            "names": {"plural": "computedomains", "singular": "computedomain", "kind": "ComputeDomain", "listKind": "ComputeDomainList"},
            "versions": [{"name": "v1beta1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {"type": "object"}}}],
        },
    }


def admission_policy() -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "node-bound"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                    "operations": ["CREATE", "UPDATE"], "resources": ["pods", "pods/*"]}]},
            "matchConditions": [{"name": "from-the-plugin", "expression": "request.userInfo.username == 'x'"}],
            "variables": [{"name": "requestNode", "expression": "'n'"}],
            "validations": [{"expression": "variables.requestNode != ''", "message": "no node"}],
        },
    }


def admission_binding() -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": "node-bound"}, "spec": {"policyName": "node-bound", "validationActions": ["Deny"]}}


def namespace() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}


_TOKEN = re.compile(r'\.?([A-Za-z0-9_-]+)|\[(\d+)\]|\["([^"]+)"\]')


def changed(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of `obj` with the field at `path` set (removed, for DELETE; appended, for the index after a list's
    last item). Paths read like the API server's:
    spec.template.spec.containers[0].env[1].name, metadata.labels["nvidia.com/gpu.present"]."""
    result = copy.deepcopy(obj)
    keys: list[Any] = []
    for match in _TOKEN.finditer(path):
        name, index, quoted = match.groups()
        keys.append(int(index) if index is not None else (quoted if quoted is not None else name))
    node = result
    for key in keys[:-1]:
        node = node[key] if isinstance(key, int) else node.setdefault(key, {})
    if value is DELETE:
        del node[keys[-1]]
    elif isinstance(node, list) and keys[-1] == len(node):
        node.append(value)
    else:
        node[keys[-1]] = value
    return result


DELETE = object()
