"""Test support for the policy pack: run one policy the analyzer's way over a render, and break a render copy."""

from __future__ import annotations

import copy
import json
from typing import Callable, Optional

from gpustack.mockrun import Recording, Registration
from gpustack.policyrun import Violation, pack_policies, run_policies

POLICIES = {p.name: p for p in pack_policies()}


def violations(recording: Recording, policy: str, config: Optional[dict] = None) -> list[Violation]:
    """The policy's violations; every one must tell the reader how to fix it (a `fix:` hint)."""
    found = run_policies(recording, [POLICIES[policy]], config or {})
    unhelpful = [v.message for v in found if "fix:" not in v.message.lower()]
    assert not unhelpful, f"{policy} reports without a remediation hint (`fix: ...`): {unhelpful}"
    return found


def messages(recording: Recording, policy: str, config: Optional[dict] = None) -> list[str]:
    return [v.message for v in violations(recording, policy, config)]


def registration(recording: Recording, kind: str, name: str) -> Registration:
    for r in recording.registrations:
        if r.inputs.get("kind") == kind and (r.inputs.get("metadata") or {}).get("name") == name:
            return r
    raise KeyError(f"{kind} {name} is not in the render")


def edited(recording: Recording, edit: Callable[[Recording], None]) -> Recording:
    """A copy of a render with one mistake put in; renders are cached and shared, so never edit in place."""
    broken = copy.deepcopy(recording)
    edit(broken)
    return broken


def pools_document(recording: Recording) -> dict:
    return json.loads(registration(recording, "ConfigMap", "gpu-stack-node-pools").inputs["data"]["node-pools.json"])


def set_pools_document(recording: Recording, document: dict) -> None:
    registration(recording, "ConfigMap", "gpu-stack-node-pools").inputs["data"]["node-pools.json"] = json.dumps(document)


def edit_pools(recording: Recording, edit: Callable[[list[dict]], None]) -> Recording:
    def apply(broken: Recording) -> None:
        document = pools_document(broken)
        edit(document["pools"])
        set_pools_document(broken, document)

    return edited(recording, apply)
