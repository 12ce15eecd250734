"""`python -m gpustack graph --stack S`: the state order and the `depends_on` edges between the states as a Mermaid
flowchart, which GitHub and GitLab draw in markdown, with each driver DaemonSet and upgrade gate inside its state.

The picture comes from a render, so it is what `pulumi up` would wait for:
- one node per state the stack builds (components/states/order.py), in state order;
- an edge from state A to state B where something of B depends on something of A, with the edges that other
  edges already imply left out (the transitive reduction), so the state order reads top to bottom;
- inside `state-driver`, one node per driver DaemonSet with the pools it serves; inside `driver-waves`, one node
  per gate. The edges between them are the waves: a gate waits for its pools' DaemonSets, and the DaemonSets of
  the next wave wait for the gate.

`mermaid(recording, changed=...)` marks the states a change touches (the markdown diff of issue 25 embeds it).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Iterable, Optional

from components.states.order import STATE_NAMES
from gpustack import generated
from gpustack.mockrun import PROJECT_DIR, Recording, Registration, run_program

STACK_TYPE = "gpu-stack:index:GpuStack"
DRIVER_STATE, WAVES_STATE = "state-driver", "driver-waves"
POOL_LABEL = "gpu-stack/pool"


def _label(text: str) -> str:
    # Mermaid quotes labels with "; a quote inside is written as an entity.
    return text.replace('"', "#quot;")


def pools_of(daemonset: Registration) -> list[str]:
    terms = (((daemonset.inputs.get("spec") or {}).get("template") or {}).get("spec") or {})
    affinity = ((terms.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    for term in affinity.get("nodeSelectorTerms") or []:
        for expression in term.get("matchExpressions") or []:
            if expression.get("key") == POOL_LABEL:
                return list(expression.get("values") or [])
    return []


def _reduced(edges: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """The edges no path of other edges implies (the graph is acyclic: Pulumi refuses cycles)."""
    after: dict[str, set[str]] = {}
    for a, b in edges:
        after.setdefault(a, set()).add(b)

    def reachable(start: str, skip: tuple[str, str]) -> set[str]:
        seen, pending = set(), [start]
        while pending:
            node = pending.pop()
            for nxt in after.get(node, ()):
                if (node, nxt) != skip and nxt not in seen:
                    seen.add(nxt)
                    pending.append(nxt)
        return seen

    return {(a, b) for a, b in edges if b not in reachable(a, (a, b))}


def states_by_urn(recording: Recording) -> dict[str, Optional[str]]:
    """Every resource's state: the component right under the GpuStack that it sits in (None outside any)."""
    by_urn = recording.by_urn()
    stack = next((r for r in recording.registrations if r.type == STACK_TYPE), None)
    found: dict[str, Optional[str]] = {}
    for r in recording.registrations:
        chain, current = [], by_urn.get(r.urn)
        while current is not None and stack is not None and current.parent != stack.urn and current.urn not in found:
            chain.append(current.urn)
            current = by_urn.get(current.parent)
        if current is not None and current.urn in found:
            state = found[current.urn]
        else:
            state = current.name if current is not None and stack is not None and not current.custom else None
            if current is not None:
                chain.append(current.urn)
        for urn in chain:
            found[urn] = state
    return found


def mermaid(recording: Recording, changed: Iterable[str] = ()) -> str:
    stack = next((r for r in recording.registrations if r.type == STACK_TYPE), None)
    if stack is None:
        raise ValueError("the render holds no GpuStack")
    states = [r for r in recording.registrations if r.parent == stack.urn and not r.custom]
    owner = states_by_urn(recording).get

    states.sort(key=lambda r: STATE_NAMES.index(r.name) if r.name in STATE_NAMES else len(STATE_NAMES))
    ids = {state.name: f"s{i}" for i, state in enumerate(states)}
    members = {
        state.name: [
            r for r in recording.registrations if r.parent == state.urn and r.inputs.get("kind") in ("DaemonSet", "Job")
        ]
        for state in states
        if state.name in (DRIVER_STATE, WAVES_STATE)
    }
    for name, inside in members.items():
        for j, member in enumerate(inside):
            ids[member.urn] = f"{ids[name]}_{j}"
    edges: set[tuple[str, str]] = set()
    for r in recording.registrations:
        mine = owner(r.urn)
        for dependency in r.dependencies:
            theirs = owner(dependency)
            # Between the driver DaemonSets and the gates the waves are drawn member by member (below); as states
            # they wait for each other both ways.
            if mine and theirs and mine != theirs and {mine, theirs} != {DRIVER_STATE, WAVES_STATE}:
                edges.add((theirs, mine))

    lines = ["flowchart TD"]
    for state in states:
        sid = ids[state.name]
        if state.name not in members:
            lines.append(f'  {sid}["{_label(state.name)}"]')
            continue
        lines.append(f'  subgraph {sid}["{_label(state.name)}"]')
        for member in members[state.name]:
            name = (member.inputs.get("metadata") or {}).get("name") or member.name
            pools = pools_of(member) if member.inputs.get("kind") == "DaemonSet" else []
            text = f"{name}<br/>pools: {', '.join(pools)}" if pools else name
            lines.append(f'    {ids[member.urn]}["{_label(text)}"]')
        lines.append("  end")
    order = {sid: i for i, sid in enumerate(ids.values())}
    lines += [f"  {ids[a]} --> {ids[b]}" for a, b in sorted(_reduced(edges), key=lambda e: (order[ids[e[0]]], order[ids[e[1]]]))]
    # The waves: a gate waits for its pools' driver DaemonSets; the next wave's DaemonSets wait for the gate.
    inner = {
        (ids[dependency], ids[member.urn])
        for inside in members.values()
        for member in inside
        for dependency in member.dependencies
        if dependency in ids and dependency != member.urn
    }
    lines += [f"  {a} --> {b}" for a, b in sorted(inner, key=lambda e: (order[e[0]], order[e[1]]))]
    marked = [ids[name] for name in changed if name in ids]
    if marked:
        lines.append("  classDef changed fill:#fde68a,stroke:#b45309,stroke-width:2px")
        lines.append(f"  class {','.join(marked)} changed")
    return "\n".join(lines) + "\n"


CONCEPTS_PAGE = PROJECT_DIR / "docs" / "concepts.md"
CONCEPTS_STACK = "prod-managed"
BEGIN = f"<!-- graph: generated by `python -m gpustack docs` from `python -m gpustack graph --stack {CONCEPTS_STACK}` -->"
END = "<!-- end of graph -->"


def concepts_text(path: Path = CONCEPTS_PAGE) -> str:
    """docs/concepts.md with the shipped stack's graph, fresh, between its markers."""
    from components.config import stack_file_config, stack_file_secret_keys
    from node_images.inputfiles import load_stack_file

    document = load_stack_file(PROJECT_DIR / "stacks" / f"Pulumi.{CONCEPTS_STACK}.yaml")
    recording = run_program(CONCEPTS_STACK, stack_file_config(document), secret_keys=stack_file_secret_keys(document))
    text = path.read_text(encoding="utf-8")
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return f"{text[:start]}{BEGIN}\n\n```mermaid\n{mermaid(recording)}```\n\n{END}{text[end:]}"


def concepts_stale(path: Path = CONCEPTS_PAGE) -> bool:
    return generated.stale(path, concepts_text(path))


def write_concepts(path: Path = CONCEPTS_PAGE) -> bool:
    return generated.write(path, concepts_text(path))


def add_parser(sub: argparse._SubParsersAction, run) -> None:
    parser = sub.add_parser("graph", help="the state order and each state's depends_on edges, as a Mermaid flowchart")
    parser.add_argument("--stack", required=True, help="stack name (stacks/Pulumi.<name>.yaml) or path")
    parser.add_argument("--out", metavar="FILE", help="write the flowchart here instead of stdout")
    parser.set_defaults(run=run)
