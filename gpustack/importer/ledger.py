"""The per-field ledger of an import: every leaf field of the inputs' specs (the ClusterPolicy's effective spec, each
NVIDIADriver's spec) with what became of it, so a reviewer reads field by field what the stack file holds.

- `carried`: the stack holds it, under `key` (the gpu-stack key it landed on, or the mapping table's key when the
  value equals what that key renders unset); a value gpu-stack renders anyway is carried without a key of its own;
- `reported`: not carried, with the reason (the report's not-carried part);
- `without-effect`: the operator did not act on it (a component it did not deploy, a deprecated no-op), with why.

A field the import read but can name no key for is `silent`: tests/test_import_coverage.py holds a corpus of real
ClusterPolicies and NVIDIADrivers to none. Refused input never reaches the ledger: the import stops with an error
naming the object and field (`run` prints it, as JSON with --format json).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence

from gpustack.importer.common import SECRET_NOT_SHOWN, NotCarried, _show, env_name, looks_like_credential

CARRIED, REPORTED, WITHOUT_EFFECT, SILENT = "carried", "reported", "without-effect", "silent"
STATUSES = (CARRIED, REPORTED, WITHOUT_EFFECT, SILENT)
# The key of a field whose value is exactly what gpu-stack renders without one.
RENDERED_ANYWAY = "(none: gpu-stack renders this value)"


@dataclass(frozen=True)
class FieldOutcome:
    """One leaf field: its path as the report writes it (`spec.driver.version`, `nvidiadriver:NAME/spec.version`),
    its value, what became of it, and the key (carried) or the reason (otherwise, or a note on a carried field)."""

    path: str
    value: Any
    status: str
    key: Optional[str] = None
    reason: Optional[str] = None

    def shown(self) -> str:
        return SECRET_NOT_SHOWN if looks_like_credential(env_name(self.path), self.value) else _show(self.value)

    def render(self) -> str:
        if self.status == CARRIED:
            note = f" ({self.reason})" if self.reason else ""
            return f"{self.path} = {self.shown()} -> {self.key}{note}"
        return f"{self.path} = {self.shown()}: {self.reason}"

    def as_json(self) -> dict[str, Any]:
        shown: Any = SECRET_NOT_SHOWN if looks_like_credential(env_name(self.path), self.value) else self.value
        entry: dict[str, Any] = {"path": self.path, "status": self.status, "value": shown}
        if self.key is not None:
            entry["key"] = self.key
        if self.reason is not None:
            entry["reason"] = self.reason
        return entry


def under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + ".") or path.startswith(prefix + "[")


def leaves(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """Leaf fields as the report names them: mappings by key, env lists by variable name (`env[NAME]`, with any
    field besides name/value as `env[NAME].field`), any other list as one value."""
    if isinstance(value, dict) and value:
        for key, inner in value.items():
            yield from leaves(inner, f"{path}.{key}")
    elif isinstance(value, list) and path.endswith(".env"):
        for i, entry in enumerate(value):
            name = entry.get("name") if isinstance(entry, dict) else None
            if not name:
                yield f"{path}[{i}]", entry
                continue
            if "value" in entry or set(entry) == {"name"}:
                yield f"{path}[{name}]", entry.get("value", "")
            for key in sorted(set(entry) - {"name", "value"}):
                yield from leaves(entry[key], f"{path}[{name}].{key}")
    else:
        yield path, value


def empty(path: str, value: Any) -> bool:
    """An unset field: Go's omitempty drops these, so the operator cannot tell them from an absent field."""
    if path.endswith("]"):
        return False
    return value is None or value == "" or value == [] or value == {}


def _covering(items: Iterable[NotCarried], path: str) -> Optional[NotCarried]:
    """The most specific item about `path` or a subtree holding it; an item without a value (a section that names
    no image, say) is about what the section lacks, not about the fields it holds."""
    found = [item for item in items if item.path == path or (under(path, item.path) and item.value is not None)]
    return max(found, key=lambda item: len(item.path)) if found else None


@dataclass(frozen=True)
class Classifier:
    """What the import recorded, from which each field's outcome follows (`outcome`)."""

    not_carried: Sequence[NotCarried]
    no_effect: Sequence[NotCarried]
    is_used: Callable[[str], bool]
    same_as_gpu_stack: Callable[[str, Any], bool]
    # gpu-stack key -> the input path it came from (the import's origins), and the mapping table's path -> key.
    origins: Mapping[str, str]
    table: Callable[[str], Optional[str]]
    # Outcomes a mapping recorded itself (per-pool NVIDIADriver fields), by path.
    explicit: Mapping[str, "FieldOutcome"]

    def key_of(self, path: str) -> Optional[str]:
        """The key(s) written from exactly this field, else the mapping table's, else those written from a field
        holding it or held by it."""
        exact = sorted({key.split(":", 1)[-1] for key, origin in self.origins.items() if origin == path})
        if exact:
            return ", ".join(exact)
        row = self.table(path)
        if row is not None:
            return row
        near = sorted({key.split(":", 1)[-1] for key, origin in self.origins.items() if under(path, origin) or under(origin, path)})
        return ", ".join(near) if near else None

    def outcome(self, path: str, value: Any, *, spec_path: Optional[str] = None) -> FieldOutcome:
        """The outcome of the field `path` (as reported); `spec_path` is the path the mapping read it under, where
        that differs (an NVIDIADriver field read as the ClusterPolicy's driver section)."""
        read = spec_path or path
        if path in self.explicit:
            return self.explicit[path]
        moot = _covering(self.no_effect, read) or _covering(self.no_effect, path)
        if moot is not None:
            return FieldOutcome(path, value, WITHOUT_EFFECT, reason=moot.reason)
        reported = _covering(self.not_carried, read) or _covering(self.not_carried, path)
        if reported is not None:
            return FieldOutcome(path, value, REPORTED, key=self.key_of(read) if self.is_used(read) else None, reason=reported.reason)
        if self.same_as_gpu_stack(read, value):
            return FieldOutcome(path, value, CARRIED, key=self.key_of(read) or RENDERED_ANYWAY)
        if self.is_used(read):
            key = self.key_of(read)
            if key is not None:
                return FieldOutcome(path, value, CARRIED, key=key)
        return FieldOutcome(path, value, SILENT, reason="read by the import, yet neither carried onto a key nor reported")


def counts(outcomes: Iterable[FieldOutcome]) -> dict[str, int]:
    found = {status: 0 for status in STATUSES}
    for outcome in outcomes:
        found[outcome.status] += 1
    return found
