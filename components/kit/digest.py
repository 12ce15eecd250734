"""A digest of rendered Kubernetes inputs, computed by the program before anything is registered.

The node agent performs driver upgrades itself (driver DaemonSets are OnDelete): it must know which template a
driver DaemonSet should have, to tell a DaemonSet that `pulumi up` already updated from one it has not reached
yet. The program gives it `gpu-stack/template-digest`, a digest of the DaemonSet's pod template exactly as it is
rendered, on the DaemonSet's metadata and in the node-pools document; both come from `template_digest`, called
once per DaemonSet.

`plain` turns pulumi input types (`...Args` classes), dicts, lists and primitives into plain JSON values under the
names Kubernetes uses (the input types' pulumi names: `initContainers`, `exec`), dropping unset (None) fields as
the engine does. A `pulumi.Output` has no value yet, so it cannot be digested: it is refused, never awaited or
skipped, since a digest that left it out would not change when it does.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping

import pulumi
from pulumi import _types as pulumi_types

DIGEST_CHARS = 16


class UndigestableInput(TypeError):
    """An input the digest cannot see the value of (an Output, a Resource) or cannot write as JSON."""


def plain(value: Any, where: str = "template") -> Any:
    """`value` as plain JSON data: dicts with string keys, lists, strings, numbers, booleans, None."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        # Whole floats are how counts travel through some callers; the API server stores them as integers.
        return int(value) if value.is_integer() else value
    if isinstance(value, (pulumi.Output, pulumi.Resource)) or hasattr(value, "__await__"):
        raise UndigestableInput(
            f"{where} is a pulumi {type(value).__name__}, whose value is not known while the program runs: a template digest "
            "needs every field as a plain value"
        )
    if pulumi_types.is_input_type(type(value)):
        value = pulumi_types.input_type_to_dict(value)
    if isinstance(value, Mapping):
        result = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise UndigestableInput(f"{where} has a key {key!r} that is not a string")
            if item is not None:
                result[key] = plain(item, f"{where}.{key}")
        return result
    if isinstance(value, (list, tuple)):
        return [plain(item, f"{where}[{i}]") for i, item in enumerate(value)]
    raise UndigestableInput(f"{where} is a {type(value).__name__}, which has no JSON form")


def canonical_json(value: Any) -> str:
    """One text per value: sorted keys, no whitespace, non-ASCII kept as is."""
    return json.dumps(plain(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def template_digest(template: Any) -> str:
    """16 hex characters of the sha256 of the pod template's canonical JSON."""
    return hashlib.sha256(canonical_json(template).encode()).hexdigest()[:DIGEST_CHARS]
