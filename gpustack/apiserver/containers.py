"""Containers of a pod template: names, images, env, ports, resources, probes, lifecycle hooks, security context
(pkg/apis/core/validation: validateContainers, validateInitContainers and what they call)."""

from __future__ import annotations

import re
from typing import Any, Mapping

from gpustack.apiserver import formats
from gpustack.apiserver.engine import WORKLOAD_KINDS, Obj, Report, containers, mapping, pod_specs, rule

PULL_POLICIES = ("Always", "IfNotPresent", "Never")
PROTOCOLS = ("TCP", "UDP", "SCTP")
# validEnvDownwardAPIFieldPathExpressions, plus the subscripted label and annotation forms.
ENV_FIELD_PATHS = (
    "metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName", "spec.serviceAccountName",
    "status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs",
)
_SUBSCRIPTED_FIELD = re.compile(r"metadata\.(labels|annotations)\['[^']+'\]")
ENV_SOURCES = ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef", "fileKeyRef")
STANDARD_CONTAINER_RESOURCES = ("cpu", "memory", "ephemeral-storage")
PROBE_HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")
LIFECYCLE_HANDLERS = ("exec", "httpGet", "tcpSocket", "sleep")
# IsValidUserID / IsValidGroupID
MAX_ID = 2_147_483_647


def _each_container(obj: Obj):
    for path, pod in pod_specs(obj):
        for c_path, container, is_init in containers(pod, path):
            yield pod, c_path, container, is_init


@rule("container-names", "k8s.io/kubernetes/pkg/apis/core/validation.validateContainers/validateInitContainers (name: IsDNS1123Label, unique across init and app containers)",
      kinds=WORKLOAD_KINDS)
def container_names(obj: Obj, report: Report) -> None:
    for path, pod in pod_specs(obj):
        seen: set[str] = set()
        if not pod.get("containers"):
            report(f"{path}.containers", "Required value")
        for c_path, container, _ in containers(pod, path):
            name = container.get("name") or ""
            if not name:
                report(f"{c_path}.name", "Required value")
                continue
            for message in formats.is_dns1123_label(name):
                report(f"{c_path}.name", f"Invalid value {name[:80]!r}: {message}")
            if name in seen:
                report(f"{c_path}.name", f"Duplicate value: {name!r}")
            seen.add(name)


@rule("container-image", "k8s.io/kubernetes/pkg/apis/core/validation.validateContainerCommon (image required, no surrounding whitespace; imagePullPolicy)",
      kinds=WORKLOAD_KINDS)
def container_image(obj: Obj, report: Report) -> None:
    for _, c_path, container, _ in _each_container(obj):
        image = container.get("image")
        if not image:
            report(f"{c_path}.image", "Required value")
        elif image != image.strip():
            report(f"{c_path}.image", "Invalid value: must not have leading or trailing whitespace")
        policy = container.get("imagePullPolicy")
        if policy is not None and policy not in PULL_POLICIES:
            report(f"{c_path}.imagePullPolicy", f"Unsupported value {policy!r}: supported values: {', '.join(PULL_POLICIES)}")


@rule("image-reference", "k8s.io/kubernetes/pkg/kubelet/images.applyDefaultImageTag (github.com/distribution/reference.ParseNormalizedNamed; else InvalidImageName)",
      kinds=WORKLOAD_KINDS)
def image_reference(obj: Obj, report: Report) -> None:
    for _, c_path, container, _ in _each_container(obj):
        image = container.get("image")
        if isinstance(image, str) and image:
            problem = formats.image_problem(image)
            if problem:
                report(f"{c_path}.image", f"Invalid value {image[:80]!r}: {problem}")


def _env_source(source: Mapping[str, Any], here: str, report: Report) -> None:
    used = [k for k in ENV_SOURCES if source.get(k) is not None]
    if len(used) != 1:
        report(here, f"Invalid value: must specify exactly one of: {', '.join(ENV_SOURCES)}")
        return
    field_ref = source.get("fieldRef")
    if field_ref is not None:
        field_path = field_ref.get("fieldPath") or ""
        if field_path not in ENV_FIELD_PATHS and not _SUBSCRIPTED_FIELD.fullmatch(field_path):
            report(f"{here}.fieldRef.fieldPath", f"Unsupported value {field_path!r}: supported values: {', '.join(ENV_FIELD_PATHS)}")
        if field_ref.get("apiVersion") not in (None, "v1"):
            report(f"{here}.fieldRef.apiVersion", f"Unsupported value {field_ref.get('apiVersion')!r}: supported values: v1")
    for key_ref in ("configMapKeyRef", "secretKeyRef"):
        ref = source.get(key_ref)
        if ref is not None:
            for message in formats.is_config_map_key(ref.get("key") or ""):
                report(f"{here}.{key_ref}.key", f"Invalid value {str(ref.get('key'))[:80]!r}: {message}")
            if not ref.get("name"):
                report(f"{here}.{key_ref}.name", "Required value")


@rule("env-vars", "k8s.io/kubernetes/pkg/apis/core/validation.ValidateEnv (name: IsEnvVarName; value or one valueFrom source)",
      kinds=WORKLOAD_KINDS)
def env_vars(obj: Obj, report: Report) -> None:
    for _, c_path, container, _ in _each_container(obj):
        for j, var in enumerate(container.get("env") or []):
            here = f"{c_path}.env[{j}]"
            name = var.get("name") or ""
            if not name:
                report(f"{here}.name", "Required value")
            for message in formats.is_env_var_name(name) if name else []:
                report(f"{here}.name", f"Invalid value {name[:80]!r}: {message}")
            source = var.get("valueFrom")
            if source is not None:
                if var.get("value"):
                    report(f"{here}.valueFrom", "Invalid value: may not be specified when `value` is not empty")
                _env_source(source, f"{here}.valueFrom", report)


@rule("list-map-keys", "sigs.k8s.io/structured-merge-diff (server-side apply refuses duplicate list-map keys: env name, "
      "containerPort/protocol, volume name, mountPath, imagePullSecrets name)", kinds=WORKLOAD_KINDS)
def list_map_keys(obj: Obj, report: Report) -> None:
    """pulumi-kubernetes applies server-side; a list whose merge key repeats is refused outright ("duplicate
    entries for key"), where a client-side apply would have let the last entry win in silence."""
    for path, pod in pod_specs(obj):
        _unique(pod.get("imagePullSecrets") or [], lambda s: s.get("name"), f"{path}.imagePullSecrets", report)
        for c_path, container, _ in containers(pod, path):
            _unique(container.get("env") or [], lambda e: e.get("name"), f"{c_path}.env", report)
            _unique(container.get("ports") or [], lambda p: (p.get("containerPort"), p.get("protocol", "TCP")), f"{c_path}.ports", report)


def _unique(items: list, key, path: str, report: Report) -> None:
    seen: set = set()
    for i, item in enumerate(items):
        value = key(item)
        if value in seen:
            report(f"{path}[{i}]", f"Duplicate value: {value!r} (server-side apply: duplicate entries for key)")
        seen.add(value)


@rule("container-ports", "k8s.io/kubernetes/pkg/apis/core/validation.validateContainerPorts, AccumulateUniqueHostPorts, validateHostNetwork",
      kinds=WORKLOAD_KINDS)
def container_ports(obj: Obj, report: Report) -> None:
    for path, pod in pod_specs(obj):
        host_ports: set[tuple] = set()
        for c_path, container, _ in containers(pod, path):
            names: set[str] = set()
            for j, port in enumerate(container.get("ports") or []):
                here = f"{c_path}.ports[{j}]"
                name = port.get("name")
                if name:
                    for message in formats.is_port_name(name):
                        report(f"{here}.name", f"Invalid value {name[:80]!r}: {message}")
                    if name in names:
                        report(f"{here}.name", f"Duplicate value: {name!r}")
                    names.add(name)
                number = port.get("containerPort")
                for message in formats.is_port_number(number):
                    report(f"{here}.containerPort", f"Invalid value {number!r}: {message}")
                host = port.get("hostPort")
                if host not in (None, 0):
                    for message in formats.is_port_number(host):
                        report(f"{here}.hostPort", f"Invalid value {host!r}: {message}")
                    key = (host, port.get("protocol", "TCP"), port.get("hostIP", ""))
                    if key in host_ports:
                        report(f"{here}.hostPort", f"Duplicate value: {host!r}/{key[1]}")
                    host_ports.add(key)
                    if pod.get("hostNetwork") and host != number:
                        report(f"{here}.hostPort", f"Invalid value {host!r}: must match `containerPort` when `hostNetwork` is true")
                protocol = port.get("protocol", "TCP")
                if protocol not in PROTOCOLS:
                    report(f"{here}.protocol", f"Unsupported value {protocol!r}: supported values: {', '.join(PROTOCOLS)}")


def _resource_name_problem(name: str) -> str | None:
    if name in STANDARD_CONTAINER_RESOURCES or name.startswith("hugepages-"):
        return None
    if "/" not in name:
        return "must be a standard resource for containers (cpu, memory, ephemeral-storage, hugepages-*) or a fully-qualified extended resource"
    problems = formats.is_qualified_name(name)
    return "; ".join(problems) if problems else None


def _is_extended(name: str) -> bool:
    return "/" in name and not name.startswith("kubernetes.io/") and not name.startswith("requests.")


@rule("resources", "k8s.io/kubernetes/pkg/apis/core/validation.ValidateContainerResourceRequirements (names, quantities, requests <= limits)",
      kinds=WORKLOAD_KINDS)
def resources(obj: Obj, report: Report) -> None:
    for pod, c_path, container, _ in _each_container(obj):
        here = f"{c_path}.resources"
        spec = mapping(container.get("resources"))
        parsed: dict[str, dict[str, Any]] = {"limits": {}, "requests": {}}
        for part in ("limits", "requests"):
            for name, raw in mapping(spec.get(part)).items():
                where = f"{here}.{part}[{name}]"
                problem = _resource_name_problem(str(name))
                if problem:
                    report(where, f"Invalid value {str(name)[:80]!r}: {problem}")
                value = formats.quantity(raw)
                if value is None:
                    report(where, f"Invalid value {str(raw)[:80]!r}: quantities must match the regular expression "
                                  "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
                    continue
                if value < 0:
                    report(where, f"Invalid value {raw!r}: must be greater than or equal to 0")
                if _is_extended(str(name)) and value != value.to_integral_value():
                    report(where, f"Invalid value {raw!r}: must be an integer")
                parsed[part][str(name)] = value
        limits, requests = parsed["limits"], parsed["requests"]
        for name, request in requests.items():
            if name in limits and request > limits[name]:
                report(f"{here}.requests[{name}]", f"Invalid value: must be less than or equal to {name} limit of {limits[name]}")
            if _is_extended(name) and limits.get(name) != request:
                report(f"{here}.requests[{name}]", f"Invalid value: must be equal to {name} limit (extended resources are not overcommitted)")
        claims = {c.get("name") for c in (pod.get("resourceClaims") or [])}
        for j, claim in enumerate(spec.get("claims") or []):
            if claim.get("name") not in claims:
                report(f"{here}.claims[{j}].name", f"Not found: {claim.get('name')!r} (no spec.resourceClaims entry of that name)")


def _port_or_name(port: Any, path: str, report: Report) -> None:
    """ValidatePortNumOrName: an IntOrString port is a number 1..65535 or an IANA port name."""
    if isinstance(port, str):
        for message in formats.is_port_name(port):
            report(path, f"Invalid value {port[:80]!r}: {message}")
    else:
        for message in formats.is_port_number(port):
            report(path, f"Invalid value {port!r}: {message}")


def _handler(handler: Mapping[str, Any], kinds: tuple[str, ...], here: str, report: Report) -> None:
    used = [k for k in kinds if handler.get(k) is not None]
    if not used:
        report(here, "Required value: must specify a handler type")
    elif len(used) > 1:
        report(here, "Forbidden: may not specify more than 1 handler type")
    if "exec" in used and not mapping(handler["exec"]).get("command"):
        report(f"{here}.exec.command", "Required value")
    if "httpGet" in used:
        action = mapping(handler["httpGet"])
        _port_or_name(action.get("port"), f"{here}.httpGet.port", report)
        if action.get("scheme", "HTTP") not in ("HTTP", "HTTPS"):
            report(f"{here}.httpGet.scheme", f"Unsupported value {action.get('scheme')!r}: supported values: HTTP, HTTPS")
    if "tcpSocket" in used:
        _port_or_name(mapping(handler["tcpSocket"]).get("port"), f"{here}.tcpSocket.port", report)
    if "grpc" in used:
        for message in formats.is_port_number(mapping(handler["grpc"]).get("port")):
            report(f"{here}.grpc.port", message)


@rule("probes", "k8s.io/kubernetes/pkg/apis/core/validation.validateProbe (one handler, non-negative numbers; liveness and startup successThreshold 1)",
      kinds=WORKLOAD_KINDS)
def probes(obj: Obj, report: Report) -> None:
    for _, c_path, container, is_init in _each_container(obj):
        sidecar = is_init and container.get("restartPolicy") == "Always"
        for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
            probe = container.get(kind)
            if probe is None:
                continue
            here = f"{c_path}.{kind}"
            if is_init and not sidecar:
                report(here, "Forbidden: may not be set for init containers without restartPolicy=Always")
                continue
            _handler(probe, PROBE_HANDLERS, here, report)
            for field in ("initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold"):
                value = probe.get(field)
                if value is not None and (not formats.is_int(value) or value < 0):
                    report(f"{here}.{field}", f"Invalid value {value!r}: must be greater than or equal to 0")
            if kind != "readinessProbe" and probe.get("successThreshold") not in (None, 0, 1):
                report(f"{here}.successThreshold", f"Invalid value {probe['successThreshold']!r}: must be 1")
            grace = probe.get("terminationGracePeriodSeconds")
            if grace is not None and (not formats.is_int(grace) or grace <= 0):
                report(f"{here}.terminationGracePeriodSeconds", f"Invalid value {grace!r}: must be greater than 0")


@rule("lifecycle", "k8s.io/kubernetes/pkg/apis/core/validation.validateLifecycle (one handler per hook; none on plain init containers)",
      kinds=WORKLOAD_KINDS)
def lifecycle(obj: Obj, report: Report) -> None:
    for _, c_path, container, is_init in _each_container(obj):
        hooks = mapping(container.get("lifecycle"))
        if not hooks:
            continue
        if is_init and container.get("restartPolicy") != "Always":
            report(f"{c_path}.lifecycle", "Forbidden: may not be set for init containers without restartPolicy=Always")
            continue
        for hook in ("postStart", "preStop"):
            if hooks.get(hook) is not None:
                _handler(hooks[hook], LIFECYCLE_HANDLERS, f"{c_path}.lifecycle.{hook}", report)


def _ids(context: Mapping[str, Any], here: str, report: Report, fields: tuple[str, ...]) -> None:
    for field in fields:
        value = context.get(field)
        if value is not None and (not formats.is_int(value) or not 0 <= value <= MAX_ID):
            report(f"{here}.{field}", f"Invalid value {value!r}: must be between 0 and {MAX_ID}, inclusive")


@rule("security-context", "k8s.io/kubernetes/pkg/apis/core/validation.ValidateSecurityContext and validatePodSecurityContext",
      kinds=WORKLOAD_KINDS)
def security_context(obj: Obj, report: Report) -> None:
    for path, pod in pod_specs(obj):
        _ids(mapping(pod.get("securityContext")), f"{path}.securityContext", report, ("runAsUser", "runAsGroup", "fsGroup"))
        for c_path, container, _ in containers(pod, path):
            context = mapping(container.get("securityContext"))
            here = f"{c_path}.securityContext"
            _ids(context, here, report, ("runAsUser", "runAsGroup"))
            if context.get("allowPrivilegeEscalation") is False:
                if context.get("privileged"):
                    report(here, "Invalid value: cannot set `allowPrivilegeEscalation` to false and `privileged` to true")
                if "CAP_SYS_ADMIN" in (mapping(context.get("capabilities")).get("add") or []):
                    report(here, "Invalid value: cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN")
