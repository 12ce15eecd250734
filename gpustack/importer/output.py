"""The migration report `gpustack import` prints (or writes with --report): per field of the inputs' specs, carried
(to which key), not carried (why) or without effect in the operator (why), then what else the import did not carry
(ConfigMap keys, node labels, Helm values) and its notes; as text for a reader, or as JSON (--format json) for a
reviewer's tooling. An import that stops prints its refusal in the same format (`refusal`)."""

from __future__ import annotations

from typing import Any

from gpustack.importer.common import ImportResult, NotCarried, SECRET_NOT_SHOWN, env_name, looks_like_credential
from gpustack.importer.ledger import CARRIED, REPORTED, WITHOUT_EFFECT, counts

REPORT_VERSION = 1


def _source(path: str) -> str:
    """Which input a ledger path belongs to: the ClusterPolicy, or one NVIDIADriver."""
    return path.split("/", 1)[0] if path.startswith("nvidiadriver:") else "clusterpolicy"


def _item(item: NotCarried) -> dict[str, Any]:
    value = SECRET_NOT_SHOWN if looks_like_credential(env_name(item.path), item.value) else item.value
    return {"path": item.path, "value": value, "reason": item.reason}


def json_report(result: ImportResult, written: list[str]) -> dict[str, Any]:
    by_source: dict[str, list] = {}
    for outcome in result.fields:
        by_source.setdefault(_source(outcome.path), []).append(outcome)
    in_ledger = {f.path for f in result.fields}
    return {
        "version": REPORT_VERSION,
        "status": "written",
        "source": result.source,
        "written": written,
        "counts": {source: counts(outcomes) for source, outcomes in by_source.items()},
        "fields": [f.as_json() for f in result.fields],
        # What the ledger does not hold: ConfigMap keys, node labels, Helm values, whole subtrees.
        "notCarried": [_item(i) for i in result.not_carried if i.path not in in_ledger],
        "withoutEffect": [_item(i) for i in result.no_effect],
        "notes": list(result.notes),
    }


def refusal(message: str) -> dict[str, Any]:
    return {"version": REPORT_VERSION, "status": "refused", "reason": message}


def per_source(result: ImportResult) -> list[tuple[str, dict[str, int]]]:
    """The ledger's counts per input, the ClusterPolicy first."""
    sources = sorted({_source(f.path) for f in result.fields}, key=lambda s: (s != "clusterpolicy", s))
    return [(source, counts([f for f in result.fields if _source(f.path) == source])) for source in sources]


def count_line(source: str, found: dict[str, int]) -> str:
    return (f"{source}: {found[CARRIED]} field(s) carried, {found[REPORTED]} not carried, "
            f"{found[WITHOUT_EFFECT]} without effect in the operator")


def text_report(result: ImportResult, written: list[str]) -> str:
    lines = list(written)
    lines += [count_line(source, found) for source, found in per_source(result)]
    carried = [f for f in result.fields if f.status == CARRIED]
    lines.append(f"carried ({len(carried)}):")
    lines += [f"  {f.render()}" for f in carried]
    lines.append(f"not carried ({len(result.not_carried)}):")
    lines += [f"  {' '.join(item.render().splitlines())}" for item in result.not_carried]
    if result.no_effect:
        lines.append(f"without effect in the operator ({len(result.no_effect)}):")
        lines += [f"  {' '.join(item.render().splitlines())}" for item in result.no_effect]
    if result.notes:
        lines.append("notes:")
        lines += [f"  {note}" for note in result.notes]
    return "\n".join(lines) + "\n"
