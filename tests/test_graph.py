"""`python -m gpustack graph`: the state order and the depends_on edges as Mermaid, from a render."""

from __future__ import annotations

import re

import pytest

import gpustack.__main__ as cli
from components.states.order import STATE_NAMES
from gpustack import graph
from stacktest import per_stack, render_stack

NODE = re.compile(r'^\s+(?:subgraph )?(s\d+(?:_\d+)?)\["([^"]*)"\]$', re.M)
EDGE = re.compile(r"^\s+(\S+) --> (\S+)$", re.M)


def parsed(text: str) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Nodes (subgraphs included) in the order they are drawn, and the edges."""
    return dict(NODE.findall(text)), EDGE.findall(text)


def test_prod_managed_reads_top_to_bottom_in_state_order_with_its_waves():
    recording = render_stack("prod-managed")
    nodes, edges = parsed(graph.mermaid(recording))
    states = [label for i, label in nodes.items() if "_" not in i]
    assert states == sorted(states, key=STATE_NAMES.index)
    assert states == [s for s in STATE_NAMES if s in recording.outputs["states"]]
    by_label = {label.split("<br/>")[0]: i for i, label in nodes.items()}
    # each state waits for the one before it, and nothing else is drawn between states
    chain = [(by_label[a], by_label[b]) for a, b in zip(states, states[1:])]
    assert [e for e in edges if "_" not in e[0] and "_" not in e[1]] == chain
    # the waves: the canary pool's DaemonSet, then its gate, then the training pool's DaemonSet
    canary, gate, training = (by_label[n] for n in (
        "nvidia-driver-daemonset-canary", "gpu-stack-gate-inference-l4", "nvidia-driver-daemonset-training"))
    assert (canary, gate) in edges and (gate, training) in edges
    assert nodes[canary] == "nvidia-driver-daemonset-canary<br/>pools: inference-l4"


@pytest.mark.parametrize("stack", per_stack())
def test_every_edge_runs_forward_and_every_state_is_drawn(stack):
    recording = render_stack(stack)
    nodes, edges = parsed(graph.mermaid(recording))
    order = list(nodes)
    states = {label for i, label in nodes.items() if "_" not in i}
    assert states == set(recording.outputs["states"])
    assert all(order.index(a) < order.index(b) or "_" in a or "_" in b for a, b in edges), edges
    assert all(a in nodes and b in nodes for a, b in edges)


def test_changed_states_are_marked():
    text = graph.mermaid(render_stack("prod-managed"), changed=["state-driver", "no-such-state"])
    nodes, _ = parsed(text)
    driver = next(i for i, label in nodes.items() if label == "state-driver")
    assert text.rstrip().endswith(f"class {driver} changed")
    assert "classDef changed" in text and "class " not in graph.mermaid(render_stack("prod-managed"))


def test_the_cli_prints_or_writes_the_flowchart_and_refuses_an_unknown_stack(tmp_path, capsys):
    assert cli.main(["graph", "--stack", "prod-managed"]) == cli.EXIT_OK
    printed = capsys.readouterr().out
    assert printed.startswith("flowchart TD\n")
    out = tmp_path / "graph.mmd"
    assert cli.main(["graph", "--stack", "prod-managed", "--out", str(out)]) == cli.EXIT_OK
    assert out.read_text() == printed
    assert cli.main(["graph", "--stack", "no-such-stack"]) == cli.EXIT_CONFIG
    error = capsys.readouterr().err.strip()
    assert error.endswith("Pulumi.no-such-stack.yaml does not exist") and "\n" not in error


def test_the_concepts_page_shows_the_shipped_stacks_graph_fresh():
    assert not graph.concepts_stale(), "docs/concepts.md's graph is stale: run python -m gpustack docs"
