"""What `gpustack check` found, each traced back to the stack-file keys that cause it, so that a code-scanning
annotation lands on the line a reviewer has to change (`check --format sarif`).

A finding names the keys it says to change (`keys`: the first written, or the nearest written parent of one, wins:
a key at its default is added there) and the keys that decide it (`context`: the first written wins, else the
nearest parent); gpustack/keylines.py resolves them. Where they come from:
- a configuration problem names its own key;
- a policy violation: the keys its message tells the user to change (`fix: set gpu-stack:...`), then the keys that
  decide what the policy judges (POLICY_KEYS), each for the pools the violating object serves or the message names;
- a schema or API-server problem in an operand's pod template: the operand override that sets the field
  (`gpu-stack:operands.<operand>.env` for a container's env, ...), then the operand's override block, then the
  stack key of the object's state (STATE_KEYS).
Whatever traces to no written key is reported on the stack file as a whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Optional

from components.catalogs import operand_overrides as operands
from components.config import ConfigError
from gpustack import graph
from gpustack.apiserver.engine import ApiProblem
from gpustack.keylines import ANY_POOL
from gpustack.mockrun import Recording, Registration
from gpustack.policyrun import Violation
from gpustack.schema import SchemaProblem

CONFIG_RULE, STACK_FILE_RULE, SCHEMA_RULE = "stack-config", "stack-file", "kubernetes-schema"
APISERVER_PREFIX, POLICY_PREFIX = "apiserver/", "policy/"

# The stack keys that decide what each policy judges, most specific first.
POLICY_KEYS: dict[str, tuple[str, ...]] = {
    "one-workload-type-per-node": (f"{ANY_POOL}.workloadType", f"{ANY_POOL}.nodeSelector", ANY_POOL),
    "state-order": ("gpu-stack:components",),
    "mig-layout-fits-gpu": (f"{ANY_POOL}.sharing.migLayout", f"{ANY_POOL}.gpuModel", "gpu-stack:migLayouts"),
    "images-pinned": ("gpu-stack:versions", "gpu-stack:registry.override", "gpu-stack:registry"),
    "privileged-only-where-needed": ("gpu-stack:hostPaths", "gpu-stack:toolkit.installDir", "gpu-stack:operands"),
    "rbac-least-privilege": ("gpu-stack:components",),
    "scc-as-nvidia-ships-them": ("gpu-stack:cluster.openshift", "gpu-stack:cluster.platform"),
    "cdi-consistency": ("gpu-stack:toolkit.cdi", "gpu-stack:toolkit", "gpu-stack:devicePlugin"),
    "sharing-sane": (f"{ANY_POOL}.sharing.replicas", f"{ANY_POOL}.sharing", "gpu-stack:devicePlugin"),
    "gpu-quota": ("gpu-stack:validator.pluginWorkload", "gpu-stack:validator"),
    "driver-supports-gpu": (f"{ANY_POOL}.driver.branch", f"{ANY_POOL}.driver.version", f"{ANY_POOL}.driver.kernelModuleType",
                            f"{ANY_POOL}.driver", "gpu-stack:driver.kernelModuleType", "gpu-stack:driver.branch",
                            "gpu-stack:versions.driver", f"{ANY_POOL}.gpuModel"),
    "precompiled-image-exists": (f"{ANY_POOL}.nodeImage", f"{ANY_POOL}.os", f"{ANY_POOL}.driver", "gpu-stack:driver.mode"),
    "single-driver-per-node": (f"{ANY_POOL}.nodeSelector", f"{ANY_POOL}.driver.mode", ANY_POOL),
    "single-device-allocator": (f"{ANY_POOL}.allocation", f"{ANY_POOL}.nodeSelector", "gpu-stack:dra"),
    "upgrade-safety": ("gpu-stack:upgrade.maxUnavailable", "gpu-stack:upgrade.waves", "gpu-stack:upgrade"),
    "protected-objects": ("gpu-stack:components",),
}

# The stack key behind each state's objects, for a problem no narrower key explains.
STATE_KEYS: dict[str, tuple[str, ...]] = {
    "pre-requisites": ("gpu-stack:cluster",),
    "node-feature-discovery": ("gpu-stack:nfd",),
    "node-labeling": ("gpu-stack:nodeAgent", ANY_POOL),
    "state-driver": (f"{ANY_POOL}.driver", "gpu-stack:driver"),
    "state-container-toolkit": ("gpu-stack:toolkit",),
    "state-operator-validation": ("gpu-stack:validator",),
    "state-device-plugin": ("gpu-stack:devicePlugin",),
    "state-dra-driver": ("gpu-stack:dra",),
    "state-dra-validation": ("gpu-stack:dra",),
    "state-mps-control-daemon": (f"{ANY_POOL}.sharing",),
    "state-dcgm": ("gpu-stack:components",),
    "state-dcgm-exporter": ("gpu-stack:dcgmExporter",),
    "gpu-feature-discovery": ("gpu-stack:components",),
    "state-mig-manager": ("gpu-stack:migManager",),
    "state-node-status-exporter": ("gpu-stack:components",),
    "node-inventory": ("gpu-stack:nodeAgent",),
    "state-vgpu-manager": ("gpu-stack:vgpu",),
    "state-vgpu-device-manager": ("gpu-stack:vgpu",),
    "state-sandbox-validation": ("gpu-stack:sandboxWorkloads",),
    "state-vfio-manager": ("gpu-stack:sandboxWorkloads",),
    "state-sandbox-device-plugin": ("gpu-stack:sandboxWorkloads",),
    "state-kata-device-plugin": ("gpu-stack:sandboxWorkloads",),
    "state-cc-manager": ("gpu-stack:sandboxWorkloads",),
    "kubevirt-host-devices": ("gpu-stack:sandboxWorkloads",),
    "stack-monitoring": ("gpu-stack:monitoring",),
    "driver-waves": ("gpu-stack:upgrade.waves", "gpu-stack:upgrade"),
    "stack-validation": ("gpu-stack:validation",),
}

# A key path a policy message tells the user to set (`[]` stands for the pool the finding is about).
_NAMED_KEY = re.compile(r"gpu-stack:[A-Za-z][A-Za-z0-9]*(?:(?:\[\])?\.[A-Za-z][A-Za-z0-9]*)*(?:\[\])?")
# Pod-template fields an operand override sets: container fields under `containers[i]`, the others on the pod.
_CONTAINER_FIELDS: dict[str, tuple[str, ...]] = {
    "env": ("env",), "args": ("args",), "resources": ("resources",), "imagePullPolicy": ("imagePullPolicy",),
    "image": ("image", "version", "repository"),
}
_POD_FIELDS = {"tolerations": "tolerations", "priorityClassName": "priorityClassName", "imagePullSecrets": "imagePullSecrets"}
_CONTAINER_AT = re.compile(r"spec\.template\.spec\.(?:initContainers|containers)[.\[](\d+)\]?\.?([A-Za-z]*)")


@dataclass(frozen=True)
class Finding:
    rule: str
    level: str  # SARIF's: error, warning, note
    message: str
    stack: str
    # the keys the finding says to change, then the keys that decide it (KeyLines.locate)
    keys: tuple[str, ...] = ()
    context: tuple[str, ...] = ()
    pools: tuple[str, ...] = ()
    # where the loader itself stopped (a stack file that does not parse): no key to look up
    line: Optional[int] = None
    # what the finding is about, so that a fingerprint survives a reworded message
    subject: str = field(default="", compare=False)


def config_findings(stack: str, error: ConfigError) -> list[Finding]:
    return [Finding(CONFIG_RULE, "error", f"{path}: {message}", stack, keys=(path,), subject=path)
            for path, message in error.problems]


def _pools_named(message: str, pools: Iterable[str]) -> list[str]:
    return [p for p in pools if p and re.search(rf"(?<![\w.-]){re.escape(p)}(?![\w.-])", message)]


def _pools_served(registration: Optional[Registration]) -> list[str]:
    if registration is None or registration.inputs.get("kind") != "DaemonSet":
        return []
    return graph.pools_of(registration)


LEVELS = {"mandatory": "error", "advisory": "warning", "remediate": "note"}


def violation_finding(stack: str, violation: Violation, recording: Recording, pools: list[str]) -> Finding:
    registration = recording.by_urn().get(violation.urn)
    named = tuple(dict.fromkeys(_NAMED_KEY.findall(violation.message)))
    served = _pools_served(registration)
    return Finding(
        POLICY_PREFIX + violation.policy, LEVELS.get(violation.enforcement, "warning"), violation.message, stack,
        keys=named, context=POLICY_KEYS.get(violation.policy, ()),
        pools=tuple(dict.fromkeys(served + _pools_named(violation.message, pools))),
        subject=violation.urn.rsplit("::", 1)[-1],
    )


def _object_keys(registration: Optional[Registration], state: Optional[str], path: str) -> tuple[str, ...]:
    """The operand override that sets the field at `path` of a rendered object, then the broader keys."""
    keys: list[str] = []
    if registration is not None and registration.inputs.get("kind") == "DaemonSet":
        name = (registration.inputs.get("metadata") or {}).get("name", "")
        driver = state in ("state-driver", "driver-waves")
        operand = operands.daemonset_operand(name, operands.DRIVER_DEPLOY_COMPONENT if driver else None)
        if operand is not None:
            container = _CONTAINER_AT.match(path)
            spec = ((registration.inputs.get("spec") or {}).get("template") or {}).get("spec") or {}
            if container:
                listed = spec.get("initContainers" if ".initContainers" in path else "containers") or []
                index, field_name = int(container.group(1)), container.group(2)
                own = listed[index].get("name") if index < len(listed) else None
                key = operands.container_operand(own, operand) if own else None
                if key is not None:
                    keys += [f"gpu-stack:operands.{key}.{name}" for name in _CONTAINER_FIELDS.get(field_name, ())]
                    keys.append(f"gpu-stack:operands.{key}")
            else:
                for pod_field, key_field in _POD_FIELDS.items():
                    if f"spec.template.spec.{pod_field}" in path:
                        keys.append(f"gpu-stack:operands.{operand}.{key_field}")
                for meta in ("labels", "annotations"):
                    if f"spec.template.metadata.{meta}" in path:
                        keys.append(f"gpu-stack:operands.{operand}.{meta}")
                keys.append(f"gpu-stack:operands.{operand}")
    return tuple(keys) + STATE_KEYS.get(state or "", ())


class ObjectIndex:
    """Rendered objects of one recording by (kind, namespace, name), with their state."""

    def __init__(self, recording: Recording):
        states = graph.states_by_urn(recording)
        self._by_object: dict[tuple[str, str], tuple[Registration, Optional[str]]] = {}
        for r in recording.registrations:
            if r.is_kubernetes_object:
                meta = r.inputs.get("metadata") or {}
                self._by_object.setdefault((str(r.inputs.get("kind")), str(meta.get("name"))), (r, states.get(r.urn)))

    def find(self, kind: str, name: str) -> tuple[Optional[Registration], Optional[str]]:
        return self._by_object.get((kind, name), (None, None))


def schema_finding(stack: str, problem: SchemaProblem, index: ObjectIndex) -> Finding:
    registration, state = index.find(problem.kind, problem.name)
    path = problem.message.split(":", 1)[0]
    return Finding(SCHEMA_RULE, "error", f"Kubernetes {problem.kubernetes_version} {problem.kind}/{problem.name}: {problem.message}",
                   stack, context=_object_keys(registration, state, path), pools=tuple(_pools_served(registration)),
                   subject=f"{problem.kind}/{problem.name}:{path}")


def api_finding(stack: str, problem: ApiProblem, index: ObjectIndex) -> Finding:
    registration, state = index.find(problem.kind, problem.name)
    return Finding(APISERVER_PREFIX + problem.rule, "error", str(problem), stack,
                   context=_object_keys(registration, state, problem.path), pools=tuple(_pools_served(registration)),
                   subject=f"{problem.kind}/{problem.name}:{problem.path}")


def from_check(stack: str, recording: Recording, problems: Iterable[SchemaProblem], refused: Iterable[ApiProblem],
               violations: Iterable[Violation], pools: list[str]) -> list[Finding]:
    """Every finding of one stack's check, in the text format's order: schema, API server, policies."""
    index = ObjectIndex(recording)
    return ([schema_finding(stack, p, index) for p in problems] + [api_finding(stack, p, index) for p in refused]
            + [violation_finding(stack, v, recording, pools) for v in violations])
