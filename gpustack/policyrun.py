"""Run the CrossGuard pack in `policies/` over a Recording, the way `pulumi preview --policy-pack` would.

Resource policies see each registration's inputs; stack policies see every resource with parent and
dependencies resolved to objects. Enforcement follows pulumi-policy's precedence: the stack's pack config
(`policies/config/<stack>.json`, the file a user passes as --policy-pack-config) over the policy's own level
over the pack default (advisory).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.policy import _NotApplicableError

from gpustack.mockrun import PROJECT_DIR, Recording, Registration

POLICY_DIR = PROJECT_DIR / "policies"
PACK_DEFAULT = EnforcementLevel.ADVISORY


@dataclass(frozen=True)
class Violation:
    policy: str
    enforcement: str
    urn: str
    message: str

    def as_json(self) -> dict[str, str]:
        return {"policy": self.policy, "enforcement": self.enforcement, "urn": self.urn, "message": self.message}


def pack_policies() -> list[Policy]:
    if str(POLICY_DIR) not in sys.path:
        sys.path.insert(0, str(POLICY_DIR))
    from gpu_stack_policies import POLICIES

    return list(POLICIES)


def pack_config(stack: str, config_dir: Path = POLICY_DIR / "config") -> dict[str, Any]:
    path = config_dir / f"{stack}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _level(policy: Policy, config: dict[str, Any]) -> EnforcementLevel:
    entry = config.get(policy.name, config.get("all"))
    if isinstance(entry, str):
        return EnforcementLevel(entry)
    if isinstance(entry, dict) and "enforcementLevel" in entry:
        return EnforcementLevel(entry["enforcementLevel"])
    return policy.enforcement_level or PACK_DEFAULT


def _policy_config(policy: Policy, config: dict[str, Any]) -> dict[str, Any]:
    entry = config.get(policy.name)
    return {k: v for k, v in entry.items() if k != "enforcementLevel"} if isinstance(entry, dict) else {}


def _options(registration: Registration) -> PolicyResourceOptions:
    return PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [], parent=registration.parent or None)


def _call(validate: Any, args: Any, report: Any) -> None:
    result = validate(args, report)
    if inspect.isawaitable(result):
        asyncio.new_event_loop().run_until_complete(result)


def _validators(policy: Policy) -> list[Any]:
    validate = getattr(policy, "validate", None)
    if validate is None:
        return []
    return list(validate) if isinstance(validate, list) else [validate]


def run_policies(recording: Recording, policies: Sequence[Policy], config: Optional[dict[str, Any]] = None) -> list[Violation]:
    config = config or {}
    violations: list[Violation] = []
    stack_resources = _stack_resources(recording)
    for policy in policies:
        level = _level(policy, config)
        if level == EnforcementLevel.DISABLED:
            continue
        settings = _policy_config(policy, config)
        if isinstance(policy, ResourceValidationPolicy):
            for registration in recording.registrations:
                args = ResourceValidationArgs(
                    registration.type, registration.inputs, registration.urn, registration.name, _options(registration), None, settings
                )

                def report(
                    message: str, urn: Optional[str] = None, _r: Registration = registration, _p: Policy = policy, _l: EnforcementLevel = level
                ) -> None:
                    violations.append(Violation(_p.name, _l.value, _r.urn, message))

                for validate in _validators(policy):
                    try:
                        _call(validate, args, report)
                    except _NotApplicableError:
                        pass
        elif isinstance(policy, StackValidationPolicy):
            args = StackValidationArgs(stack_resources, settings)

            def report_stack(message: str, urn: Optional[str] = None, _p: Policy = policy, _l: EnforcementLevel = level) -> None:
                violations.append(Violation(_p.name, _l.value, urn or "", message))

            for validate in _validators(policy):
                try:
                    _call(validate, args, report_stack)
                except _NotApplicableError:
                    pass
    return violations


def _stack_resources(recording: Recording) -> list[PolicyResource]:
    resources: dict[str, PolicyResource] = {}
    for r in recording.registrations:
        resources[r.urn] = PolicyResource(r.type, r.inputs, r.urn, r.name, _options(r), None, None, [], {})
    for r in recording.registrations:
        resource = resources[r.urn]
        resource.parent = resources.get(r.parent)
        resource.dependencies = [resources[d] for d in r.dependencies if d in resources]
        resource.property_dependencies = {k: [resources[d] for d in v if d in resources] for k, v in r.property_dependencies.items()}
    return list(resources.values())


def has_mandatory(violations: Sequence[Violation]) -> bool:
    return any(v.enforcement == EnforcementLevel.MANDATORY.value for v in violations)
