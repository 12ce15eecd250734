"""PromQL analysis for the tests: which metrics an expression reads, by a real parser (`promql-parser`, a
development requirement), so every alert, recording rule and dashboard panel is held to series something exports."""

from __future__ import annotations

from typing import Any

import promql_parser


def _children(node: Any) -> list[Any]:
    if isinstance(node, promql_parser.BinaryExpr):
        return [node.lhs, node.rhs]
    if isinstance(node, promql_parser.AggregateExpr):
        return [node.expr] + ([node.param] if node.param is not None else [])
    if isinstance(node, promql_parser.Call):
        return list(node.args)
    if isinstance(node, (promql_parser.ParenExpr, promql_parser.UnaryExpr, promql_parser.SubqueryExpr)):
        return [node.expr]
    if isinstance(node, promql_parser.MatrixSelector):
        return [node.vector_selector]
    return []


def _selector_names(selector: Any) -> set[str]:
    if selector.name:
        return {selector.name}
    matchers = list(selector.matchers.matchers)
    for group in selector.matchers.or_matchers or []:
        matchers.extend(group)
    return {m.value for m in matchers if m.name == "__name__" and m.op == promql_parser.MatchOp.Equal}


def promql_metric_names(expr: str) -> set[str]:
    """Metric names of every vector/matrix selector in `expr` (ValueError from the parser if it is not PromQL).

    Only names given literally (`foo{...}` or `{__name__="foo"}`) count; a regex `__name__` matcher names none.
    """
    names: set[str] = set()
    stack = [promql_parser.parse(expr)]
    while stack:
        node = stack.pop()
        if isinstance(node, promql_parser.VectorSelector):
            names |= _selector_names(node)
        stack.extend(_children(node))
    return names
