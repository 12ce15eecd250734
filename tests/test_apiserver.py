"""The offline API-server rules: each one refuses what the Kubernetes function it mirrors refuses, and lets the
nearest valid object through; every stack's render passes all of them; `gpustack check` reports them.

A case is (rule, what is wrong, a valid object, the same object broken in one field). The valid side sits next to
the boundary where it can (25% next to "1", a 63-character Job name next to a 64-character one), so a rule that
refuses too much fails here as surely as one that refuses too little.
"""

from __future__ import annotations

import pytest

from apiservertest import (
    DELETE,
    NS,
    admission_binding,
    admission_policy,
    binding,
    changed,
    config_map,
    crd,
    daemonset,
    deployment,
    job,
    namespace,
    priority_class,
    role,
    runtime_class,
    secret,
    service,
    service_account,
)
from gpustack import __main__ as cli
from gpustack import apiserver, render
from stacktest import STACKS, per_stack, render_stack

P = "spec.template.spec"
C0 = f"{P}.containers[0]"
I0 = f"{P}.initContainers[0]"
DIGEST = "sha256:" + "0" * 64
DS = daemonset()
RB = "rbac.authorization.k8s.io"


def sidecar_with_hook():
    ds = changed(DS, f"{I0}.restartPolicy", "Always")
    return changed(ds, f"{I0}.lifecycle", {"preStop": {"exec": {"command": ["true"]}}})


CASES = [
    # --- ObjectMeta
    ("object-name", "invalid subdomain", changed(DS, "metadata.name", "plugin-1"), changed(DS, "metadata.name", "Plugin_1")),
    ("object-name", "trailing newline", DS, changed(DS, "metadata.name", "plugin\n")),
    ("object-name", "subdomain over 253", changed(config_map(), "metadata.name", "a" * 253), changed(config_map(), "metadata.name", "a" * 254)),
    ("object-name", "Service name must start with a letter", changed(service(), "metadata.name", "metrics-9400"), changed(service(), "metadata.name", "9400-metrics")),
    ("object-name", "RBAC names are path segments", changed(role(), "metadata.name", "gpu-stack:plugin"), changed(role(), "metadata.name", "gpu-stack/plugin")),
    ("object-name", "Namespace names are DNS labels", namespace(), changed(namespace(), "metadata.name", "gpu.operator")),
    ("object-namespace", "namespaced kind without one", config_map(), changed(config_map(), "metadata.namespace", DELETE)),
    ("object-namespace", "cluster-scoped kind with one", runtime_class(), changed(runtime_class(), "metadata.namespace", NS)),
    ("labels", "value with a space", changed(DS, 'metadata.labels["nvidia.com/gpu.present"]', "true"),
     changed(DS, 'metadata.labels["nvidia.com/gpu.present"]', "yes please")),
    ("labels", "key with an empty name", DS, changed(DS, 'metadata.labels["nvidia.com/"]', "true")),
    ("labels", "template value over 63", changed(DS, f'spec.template.metadata.labels["pool"]', "a" * 63),
     changed(DS, f'spec.template.metadata.labels["pool"]', "a" * 64)),
    ("labels", "selector expression without values", DS,
     changed(DS, "spec.selector.matchExpressions", [{"key": "app", "operator": "In", "values": []}])),
    ("annotations", "key with a space", changed(DS, 'metadata.annotations["gpu-stack/note"]', "x"), changed(DS, 'metadata.annotations["gpu stack"]', "x")),
    ("annotations", "over 256 KiB in all", changed(DS, 'metadata.annotations["big"]', "x" * 200_000),
     changed(DS, 'metadata.annotations["big"]', "x" * 262_144)),
    # --- volumes
    ("volume-names", "duplicate", DS, changed(DS, f"{P}.volumes[1].name", "run-nvidia-validations")),
    ("volume-names", "not a DNS label", DS, changed(DS, f"{P}.volumes", [{"name": "Config", "emptyDir": {}}])),
    ("volume-names", "two sources", DS, changed(DS, f"{P}.volumes[1].emptyDir", {})),
    ("volume-names", "no source", DS, changed(DS, f"{P}.volumes[1].configMap", DELETE)),
    ("host-path", "unknown type", changed(DS, f"{P}.volumes[0].hostPath.type", "Directory"), changed(DS, f"{P}.volumes[0].hostPath.type", "Dir")),
    ("host-path", "backsteps", DS, changed(DS, f"{P}.volumes[0].hostPath.path", "/run/nvidia/../etc")),
    ("volume-items", "mode above 0777", changed(DS, f"{P}.volumes[1].configMap.defaultMode", 0o777),
     changed(DS, f"{P}.volumes[1].configMap.defaultMode", 0o1000)),
    ("volume-items", "item path escapes", DS, changed(DS, f"{P}.volumes[1].configMap.items[0].path", "../config.yaml")),
    ("volume-items", "absolute item path", DS, changed(DS, f"{P}.volumes[1].configMap.items[0].path", "/config.yaml")),
    ("volume-mounts", "names no volume", DS, changed(DS, f"{C0}.volumeMounts[1].name", "configs")),
    ("volume-mounts", "same path twice", DS, changed(DS, f"{C0}.volumeMounts[1].mountPath", "/run/nvidia/validations")),
    ("volume-mounts", "Bidirectional without privilege", DS, changed(DS, f"{C0}.securityContext.privileged", False)),
    ("volume-mounts", "absolute subPath", changed(DS, f"{C0}.volumeMounts[1].subPath", "config.yaml"),
     changed(DS, f"{C0}.volumeMounts[1].subPath", "/config.yaml")),
    # --- containers
    ("container-names", "init and app container share a name", DS, changed(DS, f"{I0}.name", "plugin")),
    ("container-names", "not a DNS label", DS, changed(DS, f"{C0}.name", "Plugin")),
    ("container-names", "no containers", DS, changed(DS, f"{P}.containers", [])),
    ("container-image", "missing", DS, changed(DS, f"{C0}.image", DELETE)),
    ("container-image", "surrounding whitespace", DS, changed(DS, f"{C0}.image", " nvcr.io/nvidia/k8s-device-plugin:v0.19.0")),
    ("container-image", "unknown pull policy", changed(DS, f"{C0}.imagePullPolicy", "Always"), changed(DS, f"{C0}.imagePullPolicy", "Sometimes")),
    ("image-reference", "upper-case repository", changed(DS, f"{C0}.image", "NVCR.io/nvidia/driver:580"),
     changed(DS, f"{C0}.image", "nvcr.io/NVIDIA/driver:580")),
    ("image-reference", "short digest", changed(DS, f"{C0}.image", f"nvcr.io/nvidia/driver@{DIGEST}"),
     changed(DS, f"{C0}.image", "nvcr.io/nvidia/driver@sha256:abc")),
    ("image-reference", "trailing newline", DS, changed(DS, f"{C0}.image", "nvcr.io/nvidia/k8s-device-plugin:v0.19.0\n")),
    ("image-reference", "two tags", DS, changed(DS, f"{C0}.image", "nvcr.io/nvidia/driver:580:ubuntu22.04")),
    ("env-vars", "name starts with a digit", DS, changed(DS, f"{C0}.env[0].name", "1PASS")),
    ("env-vars", "name with '='", DS, changed(DS, f"{C0}.env[0].name", "A=B")),
    ("env-vars", "value and valueFrom", DS, changed(DS, f"{C0}.env[1].value", "node-1")),
    ("env-vars", "unsupported fieldPath", changed(DS, f"{C0}.env[1].valueFrom.fieldRef.fieldPath", "metadata.labels['nvidia.com/gpu.product']"),
     changed(DS, f"{C0}.env[1].valueFrom.fieldRef.fieldPath", "status.phase")),
    ("env-vars", "two sources", DS, changed(DS, f"{C0}.env[1].valueFrom.configMapKeyRef", {"name": "x", "key": "y"})),
    ("list-map-keys", "env name twice", DS, changed(DS, f"{C0}.env[1]", {"name": "PASS_DEVICE_SPECS", "value": "false"})),
    ("list-map-keys", "containerPort twice", DS, changed(DS, f"{C0}.ports[1]", {"name": "other", "containerPort": 9400})),
    ("list-map-keys", "pull secret twice", changed(DS, f"{P}.imagePullSecrets", [{"name": "a"}, {"name": "b"}]),
     changed(DS, f"{P}.imagePullSecrets", [{"name": "a"}, {"name": "a"}])),
    ("container-ports", "port zero", DS, changed(DS, f"{C0}.ports[0].containerPort", 0)),
    ("container-ports", "name over 15", changed(DS, f"{C0}.ports[0].name", "gpu-metrics-9400"[:15]), changed(DS, f"{C0}.ports[0].name", "gpu-metrics-9400")),
    ("container-ports", "unknown protocol", DS, changed(DS, f"{C0}.ports[0].protocol", "HTTP")),
    ("container-ports", "host network with another host port",
     changed(changed(DS, f"{P}.hostNetwork", True), f"{C0}.ports[0].hostPort", 9400),
     changed(changed(DS, f"{P}.hostNetwork", True), f"{C0}.ports[0].hostPort", 9401)),
    ("resources", "unparsable quantity", DS, changed(DS, f'{C0}.resources.requests["cpu"]', "100 m")),
    ("resources", "request above limit", changed(DS, f'{C0}.resources.requests["memory"]', "128Mi"), changed(DS, f'{C0}.resources.requests["memory"]', "129Mi")),
    ("resources", "unqualified resource name", DS, changed(DS, f'{C0}.resources.limits["gpu"]', "1")),
    ("resources", "fractional extended resource",
     changed(changed(DS, f'{C0}.resources.limits["nvidia.com/gpu"]', 1), f'{C0}.resources.requests["nvidia.com/gpu"]', 1),
     changed(changed(DS, f'{C0}.resources.limits["nvidia.com/gpu"]', "1.5"), f'{C0}.resources.requests["nvidia.com/gpu"]', "1.5")),
    ("resources", "extended request without limit", DS, changed(DS, f'{C0}.resources.requests["nvidia.com/gpu"]', 1)),
    ("resources", "claim the pod does not declare",
     changed(changed(DS, f"{P}.resourceClaims", [{"name": "gpu", "resourceClaimTemplateName": "gpu"}]), f"{C0}.resources.claims", [{"name": "gpu"}]),
     changed(DS, f"{C0}.resources.claims", [{"name": "gpu"}])),
    ("probes", "no handler", DS, changed(DS, f"{C0}.readinessProbe.exec", DELETE)),
    ("probes", "two handlers", DS, changed(DS, f"{C0}.readinessProbe.tcpSocket", {"port": 9400})),
    ("probes", "negative period", DS, changed(DS, f"{C0}.readinessProbe.periodSeconds", -1)),
    ("probes", "liveness successThreshold above 1", changed(DS, f"{C0}.readinessProbe.successThreshold", 2),
     changed(DS, f"{C0}.livenessProbe", {"exec": {"command": ["true"]}, "successThreshold": 2})),
    ("probes", "on a plain init container", DS, changed(DS, f"{I0}.readinessProbe", {"exec": {"command": ["true"]}})),
    ("probes", "httpGet port name not IANA", changed(DS, f"{C0}.livenessProbe", {"httpGet": {"port": "metrics"}}),
     changed(DS, f"{C0}.livenessProbe", {"httpGet": {"port": "Metrics_Port"}})),
    ("lifecycle", "hook without handler", DS, changed(DS, f"{C0}.lifecycle.preStop", {})),
    ("lifecycle", "exec without command", DS, changed(DS, f"{C0}.lifecycle.preStop.exec.command", [])),
    ("lifecycle", "on a plain init container", sidecar_with_hook(), changed(DS, f"{I0}.lifecycle", {"preStop": {"exec": {"command": ["true"]}}})),
    ("security-context", "privileged without escalation", DS, changed(DS, f"{C0}.securityContext.allowPrivilegeEscalation", False)),
    ("security-context", "negative user id", DS, changed(DS, f"{C0}.securityContext.runAsUser", -1)),
    # --- pod-level
    ("restart-policy", "Job left to default Always", changed(job(), f"{P}.restartPolicy", "OnFailure"), changed(job(), f"{P}.restartPolicy", DELETE)),
    ("restart-policy", "DaemonSet that never restarts", changed(DS, f"{P}.restartPolicy", "Always"), changed(DS, f"{P}.restartPolicy", "Never")),
    ("restart-policy", "app container with its own", DS, changed(DS, f"{C0}.restartPolicy", "Always")),
    ("restart-policy", "init container other than Always", changed(DS, f"{I0}.restartPolicy", "Always"), changed(DS, f"{I0}.restartPolicy", "OnFailure")),
    ("restart-policy", "DaemonSet with a deadline", DS, changed(DS, f"{P}.activeDeadlineSeconds", 60)),
    ("pod-references", "service account not a subdomain", DS, changed(DS, f"{P}.serviceAccountName", "Plugin")),
    ("pod-references", "priority class with underscore", DS, changed(DS, f"{P}.priorityClassName", "system_node_critical")),
    ("dns-policy", "misspelt", changed(DS, f"{P}.dnsPolicy", "ClusterFirstWithHostNet"), changed(DS, f"{P}.dnsPolicy", "ClusterFirstWithHostNetwork")),
    ("dns-policy", "None without config", DS, changed(DS, f"{P}.dnsPolicy", "None")),
    ("tolerations", "Exists with a value", DS, changed(DS, f"{P}.tolerations[0].value", "true")),
    ("tolerations", "no key but Equal", changed(DS, f"{P}.tolerations", [{"operator": "Exists"}]), changed(DS, f"{P}.tolerations", [{"operator": "Equal"}])),
    ("tolerations", "seconds without NoExecute", changed(DS, f"{P}.tolerations[0]", {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}),
     changed(DS, f"{P}.tolerations[0].tolerationSeconds", 30)),
    ("tolerations", "unknown effect", DS, changed(DS, f"{P}.tolerations[0].effect", "NoRun")),
    ("node-selector", "value with a space", DS, changed(DS, f'{P}.nodeSelector["nvidia.com/gpu.deploy.device-plugin"]', "t rue")),
    ("node-affinity", "In without values",
     changed(DS, f"{P}.affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
         {"matchExpressions": [{"key": "gpu-stack/pool", "operator": "In", "values": ["training"]}]}]}}}),
     changed(DS, f"{P}.affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
         {"matchExpressions": [{"key": "gpu-stack/pool", "operator": "In", "values": []}]}]}}})),
    ("node-affinity", "Gt with a word", DS,
     changed(DS, f"{P}.affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
         {"matchExpressions": [{"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["four"]}]}]}}})),
    ("node-affinity", "no terms", DS,
     changed(DS, f"{P}.affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}})),
    ("pod-resource-claims", "both sources", changed(DS, f"{P}.resourceClaims", [{"name": "gpu", "resourceClaimTemplateName": "gpu"}]),
     changed(DS, f"{P}.resourceClaims", [{"name": "gpu", "resourceClaimTemplateName": "gpu", "resourceClaimName": "gpu"}])),
    ("pod-resource-claims", "duplicate name", DS,
     changed(DS, f"{P}.resourceClaims", [{"name": "gpu", "resourceClaimTemplateName": "a"}, {"name": "gpu", "resourceClaimTemplateName": "b"}])),
    # --- workloads
    ("workload-selector", "does not match the template", DS, changed(DS, "spec.selector.matchLabels", {"app": "plugins"})),
    ("workload-selector", "missing", DS, changed(DS, "spec.selector", DELETE)),
    ("workload-selector", "empty", DS, changed(DS, "spec.selector", {})),
    ("int-or-percent", "the string '1'", changed(DS, "spec.updateStrategy.rollingUpdate.maxUnavailable", "25%"),
     changed(DS, "spec.updateStrategy.rollingUpdate.maxUnavailable", "1")),
    ("int-or-percent", "over 100%", changed(DS, "spec.updateStrategy.rollingUpdate.maxUnavailable", "100%"),
     changed(DS, "spec.updateStrategy.rollingUpdate.maxUnavailable", "101%")),
    ("int-or-percent", "negative", DS, changed(DS, "spec.updateStrategy.rollingUpdate.maxUnavailable", -1)),
    ("int-or-percent", "Deployment maxSurge as a string", deployment(), changed(deployment(), "spec.strategy.rollingUpdate.maxSurge", "1")),
    ("update-strategy", "DaemonSet that cannot move",
     changed(DS, "spec.updateStrategy.rollingUpdate", {"maxUnavailable": 0, "maxSurge": 1}),
     changed(DS, "spec.updateStrategy.rollingUpdate", {"maxUnavailable": 0, "maxSurge": 0})),
    ("update-strategy", "DaemonSet surging and unavailable", DS, changed(DS, "spec.updateStrategy.rollingUpdate.maxSurge", 1)),
    ("update-strategy", "Recreate with a rolling budget", changed(deployment(), "spec.strategy", {"type": "Recreate"}),
     changed(deployment(), "spec.strategy.type", "Recreate")),
    ("update-strategy", "unknown type", changed(DS, "spec.updateStrategy", {"type": "OnDelete"}), changed(DS, "spec.updateStrategy", {"type": "Recreate"})),
    ("workload-counts", "negative replicas", changed(deployment(), "spec.replicas", 0), changed(deployment(), "spec.replicas", -1)),
    ("workload-counts", "deadline not after minReady", changed(changed(deployment(), "spec.minReadySeconds", 10), "spec.progressDeadlineSeconds", 11),
     changed(changed(deployment(), "spec.minReadySeconds", 10), "spec.progressDeadlineSeconds", 10)),
    ("job-spec", "negative backoff", job(), changed(job(), "spec.backoffLimit", -1)),
    ("job-spec", "selector without manualSelector", job(), changed(job(), "spec.selector", {"matchLabels": {"app": "gate"}})),
    ("job-name-label", "name over 63", changed(job(), "metadata.name", "g" * 63), changed(job(), "metadata.name", "g" * 64)),
    # --- ConfigMaps, Secrets, Services
    ("data-keys", "key with a slash", config_map(), changed(config_map(), 'data["configs/config.yaml"]', "x")),
    ("data-keys", "key '..'", changed(config_map(), 'data["a..b"]', "x"), changed(config_map(), 'data[".."]', "x")),
    ("data-keys", "key in data and binaryData", changed(config_map(), 'binaryData["other"]', "eA=="), changed(config_map(), 'binaryData["config.yaml"]', "eA==")),
    ("data-size", "over 1 MiB", changed(config_map(), 'data["config.yaml"]', "x" * (1024 * 1024 - 100)),
     changed(config_map(), 'data["config.yaml"]', "x" * (1024 * 1024 + 1))),
    ("secret-type", "dockerconfigjson without its key", secret(), changed(secret(), "stringData", {"config.json": "{}"})),
    ("secret-type", "dockerconfigjson that is not JSON", secret(), changed(secret(), 'stringData[".dockerconfigjson"]', "{auths")),
    ("service-ports", "two ports without names", service(),
     changed(service(), "spec.ports", [{"port": 9400, "targetPort": 9400}, {"port": 9401, "targetPort": 9401}])),
    ("service-ports", "port zero", service(), changed(service(), "spec.ports[0].port", 0)),
    ("service-ports", "target port name not IANA", changed(service(), "spec.ports[0].targetPort", "metrics"), changed(service(), "spec.ports[0].targetPort", "Metrics_Port")),
    ("service-ports", "same port twice", service(), changed(service(), "spec.ports[1]", {"name": "again", "port": 9400})),
    ("service-ports", "no ports", service(), changed(service(), "spec.ports", [])),
    ("service-spec", "unknown internal traffic policy", service(), changed(service(), "spec.internalTrafficPolicy", "Node")),
    ("service-spec", "external policy on a ClusterIP", changed(changed(service(), "spec.type", "NodePort"), "spec.externalTrafficPolicy", "Local"),
     changed(service(), "spec.externalTrafficPolicy", "Local")),
    # --- RBAC
    ("policy-rules", "no verbs", role(), changed(role(), "rules[0].verbs", [])),
    ("policy-rules", "resources without api groups", role(), changed(role(), "rules[0].apiGroups", DELETE)),
    ("policy-rules", "non-resource URLs in a Role", changed(role("ClusterRole"), "rules", [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]),
     changed(role(), "rules", [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}])),
    ("role-ref", "ClusterRoleBinding to a Role", binding("ClusterRoleBinding"), changed(binding("ClusterRoleBinding"), "roleRef.kind", "Role")),
    ("role-ref", "wrong api group", binding(), changed(binding(), "roleRef.apiGroup", "")),
    ("binding-subjects", "ServiceAccount with an api group", binding(), changed(binding(), "subjects[0].apiGroup", RB)),
    ("binding-subjects", "cluster binding of an account without namespace", binding("ClusterRoleBinding"),
     changed(binding("ClusterRoleBinding"), "subjects[0].namespace", DELETE)),
    ("admission-policy", "unknown failure policy", admission_policy(), changed(admission_policy(), "spec.failurePolicy", "Deny")),
    ("admission-policy", "no match constraints", admission_policy(), changed(admission_policy(), "spec.matchConstraints", DELETE)),
    ("admission-policy", "a rule without operations", admission_policy(),
     changed(admission_policy(), "spec.matchConstraints.resourceRules[0].operations", [])),
    ("admission-policy", "'*' beside another operation", admission_policy(),
     changed(admission_policy(), "spec.matchConstraints.resourceRules[0].operations", ["*", "CREATE"])),
    ("admission-policy", "unknown operation", admission_policy(),
     changed(admission_policy(), "spec.matchConstraints.resourceRules[0].operations", ["PATCH"])),
    ("admission-policy", "a resource with two slashes", admission_policy(),
     changed(admission_policy(), "spec.matchConstraints.resourceRules[0].resources", ["pods/status/x"])),
    ("admission-policy", "match condition name with a space", admission_policy(),
     changed(admission_policy(), "spec.matchConditions[0].name", "from the plugin")),
    ("admission-policy", "variable name not an identifier", admission_policy(),
     changed(admission_policy(), "spec.variables[0].name", "request-node")),
    ("admission-policy", "no validations", admission_policy(), changed(admission_policy(), "spec.validations", [])),
    ("admission-policy", "message with a line break", admission_policy(),
     changed(admission_policy(), "spec.validations[0].message", "no\nnode")),
    ("admission-policy", "unknown reason", changed(admission_policy(), "spec.validations[0].reason", "Forbidden"),
     changed(admission_policy(), "spec.validations[0].reason", "NotAllowed")),
    ("admission-policy-binding", "no actions", admission_binding(), changed(admission_binding(), "spec.validationActions", [])),
    ("admission-policy-binding", "Deny with Warn", changed(admission_binding(), "spec.validationActions", ["Deny", "Audit"]),
     changed(admission_binding(), "spec.validationActions", ["Deny", "Warn"])),
    ("admission-policy-binding", "no policy", admission_binding(), changed(admission_binding(), "spec.policyName", DELETE)),
    ("binding-subjects", "unknown kind", changed(binding(), "subjects[0]", {"kind": "Group", "name": "gpu-admins", "apiGroup": RB}),
     changed(binding(), "subjects[0].kind", "Pod")),
    # --- cluster-scoped kinds
    ("runtime-class", "handler with an underscore", runtime_class(), changed(runtime_class(), "handler", "nvidia_cdi")),
    ("runtime-class", "scheduling toleration Exists with a value", changed(runtime_class(), "scheduling.tolerations", [{"key": "k", "operator": "Exists"}]),
     changed(runtime_class(), "scheduling.tolerations", [{"key": "k", "operator": "Exists", "value": "v"}])),
    ("priority-class", "reserved prefix", changed(changed(priority_class(), "metadata.name", "system-node-critical"), "value", 2_000_001_000),
     changed(priority_class(), "metadata.name", "system-gpu")),
    ("priority-class", "value above user range", changed(priority_class(), "value", 1_000_000_000), changed(priority_class(), "value", 1_000_000_001)),
    ("crd-names", "name is not plural.group", crd(), changed(crd(), "metadata.name", "computedomain.resource.nvidia.com")),
    ("crd-names", "group without a dot", changed(changed(crd(), "spec.group", "nvidia.com"), "metadata.name", "computedomains.nvidia.com"),
     changed(changed(crd(), "spec.group", "nvidia"), "metadata.name", "computedomains.nvidia")),
    ("crd-names", "two storage versions", crd(), changed(crd(), "spec.versions[1]", {"name": "v1", "served": True, "storage": True})),
]

STACK_CASES = [
    ("unique-objects", "two ConfigMaps of one name", [config_map(), changed(config_map(), "metadata.namespace", "other")], [config_map(), config_map()]),
    ("unique-objects", "same name and kind across API versions", [role("ClusterRole"), binding("ClusterRoleBinding")],
     [role("ClusterRole"), changed(role("ClusterRole"), "apiVersion", "rbac.authorization.k8s.io/v1beta1")]),
    ("service-account-exists", "pod names an account the stack lacks", [DS, service_account()], [DS, service_account("other")]),
]


def _rules_of(objects):
    return {p.rule for p in apiserver.validate_all(objects)}


def _with_accounts(objects):
    """Valid workloads run as the fixtures' ServiceAccount; give them one unless the case is about accounts."""
    if any(o["kind"] == "ServiceAccount" for o in objects):
        return objects
    return [*objects, service_account()]


@pytest.mark.parametrize("rule_id, what, valid, broken", CASES, ids=[f"{c[0]}: {c[1]}" for c in CASES])
def test_rule_refuses_what_the_api_server_refuses(rule_id, what, valid, broken):
    assert rule_id in _rules_of(_with_accounts([broken])), what


@pytest.mark.parametrize("rule_id, what, valid, broken", CASES, ids=[f"{c[0]}: {c[1]}" for c in CASES])
def test_the_nearest_valid_object_passes_every_rule(rule_id, what, valid, broken):
    assert [str(p) for p in apiserver.validate_all(_with_accounts([valid]))] == []


@pytest.mark.parametrize("rule_id, what, valid, broken", STACK_CASES, ids=[f"{c[0]}: {c[1]}" for c in STACK_CASES])
def test_stack_rules_judge_objects_together(rule_id, what, valid, broken):
    assert rule_id in _rules_of(broken), what
    assert [str(p) for p in apiserver.validate_all(valid)] == []


def test_every_rule_has_a_failing_and_a_passing_fixture():
    covered = {c[0] for c in CASES} | {c[0] for c in STACK_CASES}
    assert covered == set(apiserver.RULES)


def test_every_rule_names_the_kubernetes_function_it_mirrors():
    for rule_ in apiserver.RULES.values():
        assert rule_.mirrors.startswith(("k8s.io/", "sigs.k8s.io/")), rule_.id


# `make check-stacks` (CI) runs these rules on every stack; here the representative ones, the rest in `make test-all`.
@pytest.mark.parametrize("stack", per_stack())
def test_no_rendered_object_of_any_stack_breaks_a_rule(stack):
    objects = [obj for _, obj in render.objects_in_order(render_stack(stack))]
    assert [str(p) for p in apiserver.validate_all(objects)] == []


def test_a_problem_names_kind_name_field_path_and_rule():
    broken = changed(DS, "spec.updateStrategy.rollingUpdate.maxUnavailable", "1")
    [problem] = apiserver.validate(broken)
    assert (problem.kind, problem.namespace, problem.name) == ("DaemonSet", NS, "plugin")
    assert problem.path == "spec.updateStrategy.rollingUpdate.maxUnavailable" and problem.rule == "int-or-percent"
    assert "ValidatePositiveIntOrPercent" in str(problem) and "'1'" in str(problem)


def test_an_echoed_value_is_cut_short():
    problems = apiserver.validate(changed(config_map(), "metadata.name", "X" * 10_000))
    assert problems and all(len(str(p)) < 600 for p in problems)


def test_check_fails_on_an_object_the_api_server_would_refuse(monkeypatch, capsys):
    real = render.objects_in_order

    def with_a_string_budget(recording):
        for registration, obj in real(recording):
            if obj["kind"] == "DaemonSet" and obj["metadata"]["name"] == "nvidia-device-plugin-daemonset":
                obj = changed(obj, "spec.updateStrategy.rollingUpdate.maxUnavailable", "1")
            yield registration, obj

    monkeypatch.setattr(cli.render, "objects_in_order", with_a_string_budget)
    assert cli.main(["check", "--stack", "dev"]) == cli.EXIT_VIOLATION
    out = capsys.readouterr().out
    assert ("apiserver DaemonSet/gpu-operator/nvidia-device-plugin-daemonset: spec.updateStrategy.rollingUpdate.maxUnavailable: "
            "Invalid value '1'") in out
    assert "[int-or-percent: k8s.io/kubernetes/pkg/apis/apps/validation.ValidatePositiveIntOrPercent" in out
    assert "dev: FAIL" in out and "1 API-server problem(s)" in out
    row = next(line for line in out.splitlines() if line.startswith("DaemonSet") and "nvidia-device-plugin-daemonset" in line)
    assert row.split()[-1] == "FAIL"
