"""Run the CrossGuard pack in `policies/` over a Recording through pulumi-policy's own analyzer.

`pulumi preview --policy-pack policies` starts the pack's analyzer (pulumi-policy's `_PolicyAnalyzerServicer`,
behind gRPC) and the engine calls it: `GetAnalyzerInfo`, then `Configure` with the pack config, `Analyze` for
every resource (inputs) and `AnalyzeStack` once with every resource, its parent and dependencies. This module
plays the engine's part against the same servicer, in-process, so enforcement levels, config, not-applicable
results and unknown values during preview behave exactly as under the CLI; only the gRPC transport is left out.

Configuration follows the engine (`ReconcilePolicyPackConfig`): each policy starts from its own level (or the
pack default) and its schema defaults; an `all` level applies next, then each policy's entry from the stack's
file (`policies/config/<stack>.json`, what a user passes as --policy-pack-config); the result is validated
against each policy's JSON schema. One deliberate difference: a key a policy does not declare, or a stack file
naming a policy the pack does not have, is an error here, where the CLI ignores it, so a misspelt setting fails
CI instead of silently doing nothing.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import jsonschema
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.runtime import proto
from pulumi_policy import EnforcementLevel, Policy
from pulumi_policy.policy import _PolicyAnalyzerServicer

from gpustack.mockrun import PROJECT_DIR, Recording, Registration
from node_images.inputfiles import POLICY_CONFIG_MAX_BYTES, InputFileError, load_json

POLICY_DIR = PROJECT_DIR / "policies"
CONFIG_DIR = POLICY_DIR / "config"
# PolicyPack reports this version whatever PulumiPolicy.yaml says; diagnostics carry it.
PACK_VERSION = "0.0.1"
ALL_POLICIES = "all"

_LEVEL_TO_WIRE = {
    EnforcementLevel.ADVISORY: proto.ADVISORY,
    EnforcementLevel.MANDATORY: proto.MANDATORY,
    EnforcementLevel.REMEDIATE: proto.REMEDIATE,
    EnforcementLevel.DISABLED: proto.DISABLED,
}
_WIRE_TO_LEVEL = {wire: level for level, wire in _LEVEL_TO_WIRE.items()}


class PolicyConfigError(Exception):
    """The pack config cannot be used; the message names the file, policy and key."""


@dataclass(frozen=True)
class Violation:
    policy: str
    enforcement: str
    urn: str
    message: str
    # The field of the object the violation is about, as the policy reported it (a JSON pointer,
    # policies/gpu_stack_policies/fields.py); "" when it named none.
    field: str = ""

    def as_json(self) -> dict[str, str]:
        return {"policy": self.policy, "enforcement": self.enforcement, "urn": self.urn, "message": self.message,
                **({"field": self.field} if self.field else {})}


def _import_pack() -> Any:
    if str(POLICY_DIR) not in sys.path:
        sys.path.insert(0, str(POLICY_DIR))
    import gpu_stack_policies

    return gpu_stack_policies


def pack_policies() -> list[Policy]:
    return list(_import_pack().POLICIES)


def config_path(stack: str, config_dir: Path = CONFIG_DIR) -> Path:
    return config_dir / f"{stack}.json"


def pack_config(stack: str, config_dir: Path = CONFIG_DIR, path: Optional[Path] = None) -> dict[str, Any]:
    """The stack's --policy-pack-config document, or {} when the stack has none."""
    path = path or config_path(stack, config_dir)
    if not path.exists():
        return {}
    try:
        document = load_json(path, POLICY_CONFIG_MAX_BYTES, "POLICY_CONFIG_MAX_BYTES")
    except InputFileError as error:
        raise PolicyConfigError(str(error)) from None
    if not isinstance(document, dict):
        raise PolicyConfigError(f"{path}: expected an object keyed by policy name")
    known = {p.name for p in pack_policies()}
    unknown = sorted(set(document) - known - {ALL_POLICIES})
    if unknown:
        raise PolicyConfigError(f"{path}: the pack has no policy {', '.join(unknown)} (policies: {', '.join(sorted(known))})")
    return document


def _level(value: Any, where: str) -> EnforcementLevel:
    try:
        return EnforcementLevel(value)
    except ValueError:
        allowed = ", ".join(level.value for level in EnforcementLevel)
        raise PolicyConfigError(f"{where}: enforcement level {value!r} is not one of {allowed}") from None


def reconcile_config(info: Any, config: dict[str, Any]) -> dict[str, tuple[EnforcementLevel, dict[str, Any]]]:
    """Each policy's effective level and properties, as the engine computes them before `Configure`."""
    schemas = {}
    result: dict[str, tuple[EnforcementLevel, dict[str, Any]]] = {}
    for policy in info.policies:
        schema = json_format.MessageToDict(policy.configSchema, preserving_proto_field_name=True)
        properties = schema.get("properties", {})
        schemas[policy.name] = {"type": "object", "properties": properties, "required": schema.get("required", [])}
        defaults = {key: spec["default"] for key, spec in properties.items() if "default" in spec}
        result[policy.name] = (_WIRE_TO_LEVEL[policy.enforcementLevel], defaults)

    problems = []
    everything = config.get(ALL_POLICIES)
    all_level = everything.get("enforcementLevel") if isinstance(everything, dict) else everything
    if all_level is not None:
        level = _level(all_level, ALL_POLICIES)
        result = {name: (level, properties) for name, (_, properties) in result.items()}
    for name, entry in config.items():
        if name == ALL_POLICIES:
            continue
        if name not in result:
            continue  # a policy this run leaves out (tests run subsets); pack_config checks names against the pack
        level, properties = result[name]
        if isinstance(entry, str):
            level = _level(entry, name)
        elif isinstance(entry, dict):
            given = dict(entry)
            if "enforcementLevel" in given:
                level = _level(given.pop("enforcementLevel"), name)
            declared = schemas[name]["properties"]
            for key in sorted(set(given) - set(declared)):
                problems.append(f"{name}: unknown key {key!r} (known: {', '.join(sorted(declared)) or 'none'})")
            properties = {**properties, **given}
        else:
            problems.append(f"{name}: expected an enforcement level or an object, got {entry!r}")
            continue
        result[name] = (level, properties)
    for name, (_, properties) in result.items():
        validator = jsonschema.Draft7Validator(schemas[name])
        for error in sorted(validator.iter_errors(properties), key=lambda e: [str(p) for p in e.absolute_path]):
            path = ".".join(str(p) for p in error.absolute_path)
            problems.append(f"{name}{'.' + path if path else ''}: {error.message}")
    if problems:
        raise PolicyConfigError("invalid policy pack config:\n  " + "\n  ".join(problems))
    return result


def _struct(value: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(value)
    return struct


def _options(registration: Registration) -> proto.AnalyzerResourceOptions:
    """The options the engine hands a policy (pulumi's analyzer.proto has no retainOnDelete)."""
    return proto.AnalyzerResourceOptions(
        parent=registration.parent or "",
        protect=registration.protect,
        deleteBeforeReplace=registration.delete_before_replace,
        deleteBeforeReplaceDefined=registration.delete_before_replace,
        aliases=[a for a in registration.aliases],
    )


def _provider(registration: Registration, by_urn: dict[str, Registration]) -> Optional[proto.AnalyzerProviderResource]:
    # A provider reference is "<urn>::<id>"; the engine sends the provider's inputs along.
    provider = by_urn.get(registration.provider.rsplit("::", 1)[0]) if registration.provider else None
    if provider is None:
        return None
    properties = _struct(provider.inputs)
    return proto.AnalyzerProviderResource(type=provider.type, properties=properties, urn=provider.urn, name=provider.name)


def _violations(response: Any, default_urn: str, heard: Sequence[tuple[str, str]] = ()) -> list[Violation]:
    """The diagnostics of one answer; `heard` holds (message, field) of each violation the pack reported for it, which
    gives each diagnostic its field (CrossGuard's diagnostics carry none)."""
    fields = list(heard)
    found = []
    for diagnostic in response.diagnostics:
        message = diagnostic.message
        # The analyzer prefixes the policy's description; the report keeps what the policy said.
        prefix = diagnostic.description + "\n"
        if diagnostic.description and message.startswith(prefix):
            message = message[len(prefix) :]
        level = _WIRE_TO_LEVEL[diagnostic.enforcementLevel].value
        field = next((i for i, (said, _) in enumerate(fields) if said == message), None)
        found.append(Violation(diagnostic.policyName, level, diagnostic.urn or default_urn, message,
                               fields.pop(field)[1] if field is not None else ""))
    return found


@dataclass(frozen=True)
class AnalyzerRequests:
    """What the engine sends a pack for one stack: its config, one AnalyzeRequest per resource, then the stack."""

    configure: Any
    resources: list[Any]
    stack: Any


def analyzer_requests(recording: Recording, info: Any, config: Optional[dict[str, Any]] = None) -> AnalyzerRequests:
    """The requests for `recording`, with `config` reconciled against the pack's GetAnalyzerInfo answer `info`."""
    effective = reconcile_config(info, config or {})
    configure = proto.ConfigureAnalyzerRequest(
        policyConfig={
            name: proto.PolicyConfig(enforcementLevel=_LEVEL_TO_WIRE[level], properties=_struct(properties))
            for name, (level, properties) in effective.items()
        }
    )
    by_urn = recording.by_urn()
    requests, stack_resources = [], []
    for r in recording.registrations:
        provider, properties = _provider(r, by_urn), _struct(r.inputs)
        requests.append(
            proto.AnalyzeRequest(type=r.type, properties=properties, urn=r.urn, name=r.name, options=_options(r), provider=provider)
        )
        stack_resources.append(
            proto.AnalyzerResource(
                type=r.type,
                properties=properties,
                urn=r.urn,
                name=r.name,
                options=_options(r),
                provider=provider,
                parent=r.parent,
                dependencies=list(dict.fromkeys(r.dependencies)),
                propertyDependencies={k: proto.AnalyzerPropertyDependencies(urns=v) for k, v in r.property_dependencies.items()},
            )
        )
    return AnalyzerRequests(configure, requests, proto.AnalyzeStackRequest(resources=stack_resources))


def responses_to_violations(
    requests: AnalyzerRequests,
    resource_responses: Sequence[Any],
    stack_response: Any,
    heard: Optional[Sequence[Sequence[tuple[str, str]]]] = None,
) -> list[Violation]:
    """Violations from the pack's answers, resource policies first in registration order, then stack policies;
    `heard` holds what the pack reported for each answer (`run_policies`), stack last."""
    heard = heard or [()] * (len(resource_responses) + 1)
    violations: list[Violation] = []
    for request, response, reported in zip(requests.resources, resource_responses, heard):
        violations += _violations(response, request.urn, reported)
    return violations + _violations(stack_response, "", heard[-1])


def run_policies(recording: Recording, policies: Sequence[Policy], config: Optional[dict[str, Any]] = None) -> list[Violation]:
    """Every violation the pack reports for the recorded stack: resource policies first, in registration order,
    then stack policies."""
    if not policies:
        return []
    pack = _import_pack()
    servicer = _PolicyAnalyzerServicer(pack.PACK_NAME, PACK_VERSION, list(policies), pack.PACK_ENFORCEMENT)
    requests = analyzer_requests(recording, servicer.GetAnalyzerInfo(empty_pb2.Empty(), None), config)
    servicer.Configure(requests.configure, None)
    heard: list[list[tuple[str, str]]] = []

    def answer(call: Any, request: Any) -> Any:
        reported: list[tuple[str, str]] = []
        with pack.fields.listening(lambda message, field: reported.append((message, field))):
            result = call(request, None)
        heard.append(reported)
        return result

    answers = [answer(servicer.Analyze, request) for request in requests.resources]
    stack_answer = answer(servicer.AnalyzeStack, requests.stack)
    return responses_to_violations(requests, answers, stack_answer, heard)


def has_mandatory(violations: Sequence[Violation]) -> bool:
    return any(v.enforcement == EnforcementLevel.MANDATORY.value for v in violations)


ENFORCEMENT_TABLE_BEGIN = "<!-- enforcement table: generated by `python -m gpustack docs` from the pack and policies/config/*.json -->"
ENFORCEMENT_TABLE_END = "<!-- end of enforcement table -->"


SETTINGS_BEGIN = "<!-- stack settings: generated by `python -m gpustack docs` from policies/config/*.json -->"
SETTINGS_END = "<!-- end of stack settings -->"


def _effective(config_dir: Path) -> tuple[list[str], dict[str, dict[str, tuple[EnforcementLevel, dict[str, Any]]]]]:
    """The stacks with a config file, and each one's effective level and settings per policy, as `pulumi preview
    --policy-pack-config` would apply them."""
    pack = _import_pack()
    servicer = _PolicyAnalyzerServicer(pack.PACK_NAME, PACK_VERSION, pack_policies(), pack.PACK_ENFORCEMENT)
    info = servicer.GetAnalyzerInfo(empty_pb2.Empty(), None)
    stacks = sorted(p.stem for p in config_dir.glob("*.json"))
    return stacks, {stack: reconcile_config(info, pack_config(stack, config_dir)) for stack in stacks}


def enforcement_table(config_dir: Path = CONFIG_DIR) -> str:
    """One Markdown table: each policy's severity, its pack default and its effective level in every stack's
    policies/config/<stack>.json."""
    stacks, levels = _effective(config_dir)
    rows = [
        "| policy | severity | pack default | " + " | ".join(stacks) + " |",
        "| --- | --- | --- | " + " | ".join("---" for _ in stacks) + " |",
    ]
    for policy in pack_policies():
        severity = policy.description[1:].split("]", 1)[0] if policy.description.startswith("[") else ""
        cells = [levels[stack][policy.name][0].value for stack in stacks]
        rows.append(f"| `{policy.name}` | {severity} | {policy.enforcement_level.value} | " + " | ".join(cells) + " |")
    return "\n".join([ENFORCEMENT_TABLE_BEGIN, *rows, ENFORCEMENT_TABLE_END])


def _listed(names: Sequence[str]) -> str:
    quoted = [f"`{n}`" for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def settings_summary(config_dir: Path = CONFIG_DIR) -> str:
    """Where the stacks differ: for each policy whose level or settings are not the same in every stack, which
    stacks hold it at which level with which settings. Lists (each stack's own registries) are left out: they
    differ by design, and the prose says so."""
    stacks, levels = _effective(config_dir)
    lines = [SETTINGS_BEGIN]
    for policy in pack_policies():
        groups: dict[tuple[str, tuple[tuple[str, Any], ...]], list[str]] = {}
        for stack in stacks:
            level, settings = levels[stack][policy.name]
            # Schema defaults arrive as floats (protobuf Struct), a file's numbers as ints: 16.0 and 16 are one value.
            shown = tuple((k, int(v) if isinstance(v, float) and v.is_integer() else v)
                          for k, v in sorted(settings.items()) if isinstance(v, (str, int, float, bool)))
            groups.setdefault((level.value, shown), []).append(stack)
        if len(groups) < 2:
            continue
        parts = []
        for (level, shown), members in sorted(groups.items(), key=lambda item: len(item[1])):
            settings = ", ".join(f"`{key}` {value}" for key, value in shown)
            parts.append(f"{level} in {_listed(members)}" + (f" ({settings})" if settings else ""))
        lines.append(f"- `{policy.name}`: " + "; ".join(parts))
    return "\n".join([*lines, SETTINGS_END])


def _replaced(page: str, begin_marker: str, end_marker: str, fresh: str) -> str:
    begin, end = page.find(begin_marker), page.find(end_marker)
    if begin < 0 or end < begin:
        raise ValueError(f"the page has no {begin_marker!r} ... {end_marker!r} markers")
    return page[:begin] + fresh + page[end + len(end_marker):]


def with_enforcement_table(page: str) -> str:
    """`page` with the enforcement table and the per-stack settings between their markers made afresh; a page
    without the markers is an error, so a page that lost them is noticed rather than left stale."""
    page = _replaced(page, ENFORCEMENT_TABLE_BEGIN, ENFORCEMENT_TABLE_END, enforcement_table())
    return _replaced(page, SETTINGS_BEGIN, SETTINGS_END, settings_summary())
