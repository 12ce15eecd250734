"""`gpustack diff --format markdown|json`: the plan where reviewers read it.

- `json`: one document, versioned (`schemaVersion: gpustack.diff/v1`), described by docs/diff.schema.json, which
  `python -m gpustack docs` writes from `SCHEMA` below and tests/test_diff_formats.py holds reports to.
- `markdown`: a pull-request comment body. The verdict comes first (SAFE, or what is dangerous and the `--allow`
  that would accept it), then the counts, one row per changed resource (kind, name, fields, the stack keys whose new
  value it comes from), the driver
  DaemonSets the change creates, updates or deletes with their pools and upgrade waves, the notes, and the state
  graph with the changed states marked. Long lists are folded in `<details>`. The first line is a marker naming
  the stack, so a CI job finds and updates its own comment instead of adding one per push.

Exit codes are the text format's: 0 safe, 1 dangerous, 2 bad input.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional, Sequence

from components.states.validation_gate import EXPECTED_NODES_ENV
from gpustack import changes, graph
from gpustack.mockrun import Recording, Registration

SCHEMA_VERSION = "gpustack.diff/v1"
MARKER = "<!-- gpustack-diff:{stack} -->"
# The body's last line, for the CI job that posts it (gpustack/pr_comment.py): a plan with no changes is not worth a
# new comment, only an update of one already there.
STATUS = "<!-- gpustack-diff-status: changes={changes} verdict={verdict} -->"
FOLD_AFTER = 15
ACTION_SYMBOL = {"create": "+", "update": "~", "replace": "±", "rerun": "↻", "delete": "−"}

_STRINGS = {"type": "array", "items": {"type": "string"}}
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://gpu-stack/docs/diff.schema.json",
    "title": "gpustack diff --format json",
    "type": "object",
    "additionalProperties": False,
    "required": ["schemaVersion", "stack", "base", "head", "verdict", "exitCode", "counts", "changes", "blocked",
                 "dangers", "notes", "driverRollout"],
    "properties": {
        "schemaVersion": {"const": SCHEMA_VERSION},
        "stack": {"type": "string"},
        "base": {"type": "string", "description": "the git ref or stack file compared against"},
        "head": {"type": "string"},
        "verdict": {"enum": ["safe", "dangerous"]},
        "exitCode": {"enum": [0, 1]},
        "counts": {"type": "object", "additionalProperties": False, "required": list(changes.ACTIONS),
                   "properties": {a: {"type": "integer", "minimum": 0} for a in changes.ACTIONS}},
        "changes": {"type": "array", "items": {
            "type": "object", "additionalProperties": False,
            "required": ["action", "kind", "name", "namespace", "urn", "fields", "reasons", "sameResourceNewUrn", "state",
                         "because"],
            "properties": {
                "action": {"enum": list(changes.ACTIONS)},
                "kind": {"type": ["string", "null"]},
                "name": {"type": "string"},
                "namespace": {"type": ["string", "null"]},
                "urn": {"type": "string"},
                "fields": _STRINGS,
                "reasons": _STRINGS,
                "sameResourceNewUrn": {"type": "boolean"},
                "state": {"type": ["string", "null"], "description": "the state (components/states/order.py) it belongs to"},
                "because": {**_STRINGS, "description": "the stack keys whose new value the change comes from, by the "
                                                       "renders' source maps (gpustack/causes.py)"},
            },
        }},
        "blocked": _STRINGS,
        "dangers": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["rule", "message", "allowed"],
            "properties": {"rule": {"type": "string"}, "message": {"type": "string"}, "allowed": {"type": "boolean"}},
        }},
        "notes": {"type": "array", "items": {
            "type": "object", "additionalProperties": False, "required": ["topic", "message"],
            "properties": {"topic": {"type": "string"}, "message": {"type": "string"}},
        }},
        "driverRollout": {"type": "array", "description": "driver DaemonSets the change creates, updates (pod template) or deletes, with their upgrade wave", "items": {
            "type": "object", "additionalProperties": False, "required": ["daemonSet", "action", "pools", "wave", "nodes"],
            "properties": {
                "daemonSet": {"type": "string"},
                "action": {"enum": list(changes.ACTIONS)},
                "pools": _STRINGS,
                "wave": {"type": "integer", "minimum": 1},
                "nodes": {"type": ["integer", "null"], "minimum": 0,
                          "description": "the nodes of its pools, where every one declares nodePools[].expectedNodes; "
                                         "null where one does not (an offline render sees no nodes)"},
            },
        }},
    },
}


def _waves(recording: Recording) -> dict[str, int]:
    """Driver DaemonSet URN -> its upgrade wave (1 first): a DaemonSet that waits for a gate comes one wave after
    the DaemonSets that gate waits for."""
    by_urn = recording.by_urn()
    drivers = {r.urn: r for r in recording.registrations if _is_driver(r)}
    memo: dict[str, int] = {}

    def wave(urn: str) -> int:
        if urn not in memo:
            memo[urn] = 1
            gates = [by_urn[d] for d in drivers[urn].dependencies if d in by_urn and by_urn[d].inputs.get("kind") == "Job"]
            earlier = [wave(d) for gate in gates for d in gate.dependencies if d in drivers]
            memo[urn] = 1 + max(earlier, default=0)
        return memo[urn]

    return {urn: wave(urn) for urn in drivers}


def _declared_nodes(recording: Recording) -> dict[str, int]:
    """Pool -> nodePools[].expectedNodes, as the gate Jobs are told it (EXPECTED_NODES=pool=N,...)."""
    declared: dict[str, int] = {}
    for r in recording.registrations:
        if r.inputs.get("kind") != "Job":
            continue
        pod = ((((r.inputs.get("spec") or {}).get("template") or {}).get("spec")) or {})
        for container in pod.get("containers") or []:
            for variable in container.get("env") or []:
                if variable.get("name") == EXPECTED_NODES_ENV and variable.get("value"):
                    for entry in str(variable["value"]).split(","):
                        pool, _, count = entry.partition("=")
                        if count.isdigit():
                            declared[pool] = int(count)
    return declared


def _is_driver(r: Registration) -> bool:
    return r.inputs.get("kind") == "DaemonSet" and ((r.inputs.get("metadata") or {}).get("name") or "").startswith("nvidia-driver-daemonset")


def report(stack: str, base: str, head: str, plan: changes.Plan, before: Recording, after: Recording,
           allowed: Sequence[str], because: Optional[Mapping[str, Sequence[str]]] = None) -> dict[str, Any]:
    states = {**graph.states_by_urn(before), **graph.states_by_urn(after)}
    by_urn = {**before.by_urn(), **after.by_urn()}
    refused = [(rule, message) for rule, message in plan.dangers if rule == "blocked" or rule not in allowed]
    rows = []
    for change in sorted(plan.changes, key=lambda c: (changes.ACTIONS.index(c.action), c.label)):
        parts = (change.identity or "").split("/")
        rows.append({
            "action": change.action,
            "kind": change.kind,
            "name": parts[-1] if change.identity else change.label,
            "namespace": parts[1] if len(parts) == 3 else None,
            "urn": change.urn,
            "fields": list(change.fields),
            "reasons": list(change.reasons),
            "sameResourceNewUrn": change.aliased,
            "state": states.get(change.urn),
            "because": list((because or {}).get(change.urn, ())),
        })
    waves = {**_waves(before), **_waves(after)}
    declared = {**_declared_nodes(before), **_declared_nodes(after)}
    rollout = []
    for change in plan.changes:
        registration = by_urn.get(change.urn)
        if registration is None or not _is_driver(registration) or change.action == "rerun":
            continue
        if change.action == "update" and not any(f.startswith("spec.template") for f in change.fields):
            continue  # metadata alone restarts no driver pod
        pools = graph.pools_of(registration)
        rollout.append({
            "daemonSet": (registration.inputs.get("metadata") or {}).get("name"),
            "action": change.action,
            "pools": pools,
            "wave": waves.get(change.urn, 1),
            "nodes": sum(declared[p] for p in pools) if pools and all(p in declared for p in pools) else None,
        })
    rollout.sort(key=lambda r: (r["wave"], r["daemonSet"]))
    return {
        "schemaVersion": SCHEMA_VERSION,
        "stack": stack,
        "base": base,
        "head": head,
        "verdict": "dangerous" if refused else "safe",
        "exitCode": 1 if refused else 0,
        "counts": changes.summary(plan),
        "changes": rows,
        "blocked": list(plan.blocked),
        "dangers": [{"rule": rule, "message": message, "allowed": rule != "blocked" and rule in allowed}
                    for rule, message in plan.dangers],
        "notes": [{"topic": topic, "message": message} for topic, message in plan.notes],
        "driverRollout": rollout,
    }


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _folded(summary: str, lines: list[str]) -> list[str]:
    if len(lines) <= FOLD_AFTER + 2:  # a table's header and rule
        return lines
    return [f"<details><summary>{summary}</summary>", "", *lines, "", "</details>"]


def markdown(data: dict[str, Any], after: Recording) -> str:
    stack = data["stack"]
    out = [MARKER.format(stack=stack)]
    if data["verdict"] == "safe":
        allowed = [d["rule"] for d in data["dangers"] if d["allowed"]]
        out.append(f"### ✅ `{stack}`: SAFE" + (f" (accepted: {', '.join(f'`{a}`' for a in allowed)})" if allowed else ""))
    else:
        rules = sorted({d["rule"] for d in data["dangers"] if not d["allowed"] and d["rule"] != "blocked"})
        out.append(f"### ⚠️ `{stack}`: DANGEROUS")
        out.append("")
        for blocked in data["blocked"]:
            out.append(f"- **`pulumi up` would fail:** {blocked}")
        for danger in data["dangers"]:
            if not danger["allowed"] and danger["rule"] != "blocked":
                out.append(f"- **{danger['rule']}:** {danger['message']}")
        if rules:
            out.append("")
            out.append(f"Accept with `gpustack diff ... {' '.join(f'--allow {r}' for r in rules)}` once reviewed.")
    out.append("")
    out.append(f"`{data['base']}` → `{data['head']}`: " + (", ".join(f"{n} {a}" for a, n in data["counts"].items() if n) or "no changes"))
    if data["changes"]:
        table = ["| | action | kind | name | changed | because |", "|---|---|---|---|---|---|"]
        for row in data["changes"]:
            detail = ", ".join(f"`{f}`" for f in row["fields"][:6]) or "; ".join(row["reasons"])
            if row["sameResourceNewUrn"]:
                detail += " (same resource, new URN)"
            name = f"{row['namespace']}/{row['name']}" if row["namespace"] else row["name"]
            why = changes.because_text([f"`{key.split(':', 1)[-1]}`" for key in row["because"]]) or "–"
            table.append(f"| {ACTION_SYMBOL[row['action']]} | {row['action']} | {row['kind'] or 'component'} | "
                         f"`{_cell(name)}` | {_cell(detail)} | {_cell(why)} |")
        out += ["", *_folded(f"{len(data['changes'])} changed resources", table)]
    if data["driverRollout"]:
        out += ["", "**Driver DaemonSets this changes**, by upgrade wave (the node agents move their nodes within the "
                "fleet's disruption budget):", ""]
        table = ["| wave | DaemonSet | pools | nodes | |", "|---|---|---|---|---|"]
        for row in data["driverRollout"]:
            nodes = "–" if row["nodes"] is None else str(row["nodes"])
            table.append(f"| {row['wave']} | `{row['daemonSet']}` | {', '.join(f'`{p}`' for p in row['pools']) or '–'} | "
                         f"{nodes} | {row['action']} |")
        out += _folded(f"{len(data['driverRollout'])} driver DaemonSets", table)
        if any(row["nodes"] is None for row in data["driverRollout"]):
            out += ["", "Nodes show where each pool declares `nodePools[].expectedNodes`; the offline plan sees no cluster."]
    if data["notes"]:
        out += ["", *[f"- note ({n['topic']}): {_cell(n['message'])}" for n in data["notes"]]]
    changed_states = sorted({row["state"] for row in data["changes"] if row["state"]})
    if after.registrations:
        out += ["", "<details><summary>State order, changed states marked</summary>", "", "```mermaid",
                graph.mermaid(after, changed=changed_states).rstrip(), "```", "", "</details>"]
    out += ["", STATUS.format(changes=sum(data["counts"].values()), verdict=data["verdict"])]
    return "\n".join(out) + "\n"


def schema_text() -> str:
    return json.dumps(SCHEMA, indent=2) + "\n"
