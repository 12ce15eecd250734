"""Node labels and annotations the agent reads but cannot make sense of: a warning each, never silence or a crash.

Other writers share these keys (users, NFD, NVIDIA's managers), and a value the agent does not understand changes
what it does without a word: `nvidia.com/gpu.deploy.operands=False` keeps every operand (only `false` turns them
off), a deploy label of `True` is never replaced and matches no operand's `=true` selector. :func:`label_problems`
(pure) names each such value; :class:`Warnings` logs each problem once, when it appears, not on every pass.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from gpustack_agent.model import labels

MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
# What NVIDIA's MIG manager writes to nvidia.com/mig.config.state.
MIG_STATES = frozenset({"pending", "rebooting", "success", "failed"})
# Values of a deploy label the agent understands: its own "true", a user's "false", the driver's "pre-installed";
# values holding labels.PAUSED_MARKER are a manager's and are kept.
DEPLOY_VALUES = frozenset({"true", "false", "pre-installed"})
# NFD and the cloud providers write "true"; "false" is a plain no.
GPU_NODE_VALUES = frozenset({"true", "false"})
# An echoed value is cut to this many characters.
SHOWN_CHARACTERS = 80
# A DaemonSet name (RFC 1123 subdomain).
_OBJECT_NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@dataclass(frozen=True)
class Problem:
    """A label (or annotation) value the agent does not understand, and what it does instead."""

    key: str
    value: str
    why: str
    kind: str = "label"

    def __post_init__(self) -> None:
        # Kept hashable (Warnings keeps sets of problems) whatever the API object held.
        if not isinstance(self.value, str):
            object.__setattr__(self, "value", repr(self.value))

    def as_json(self) -> dict[str, Any]:
        return {self.kind: self.key, "value": shown(self.value), "problem": self.why}


def shown(value: Any) -> str:
    """``value`` for a log line, cut to SHOWN_CHARACTERS."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= SHOWN_CHARACTERS:
        return text
    return f"{text[:SHOWN_CHARACTERS]}... ({len(text)} characters)"


def is_object_name(value: str) -> bool:
    return len(value) <= 253 and _OBJECT_NAME_RE.fullmatch(value) is not None


def _deploy_problem(key: str, value: Any) -> Problem | None:
    if not isinstance(value, str):
        return Problem(key, value, "not a string; the label is left as it is")
    if value in DEPLOY_VALUES or value == "" or labels.PAUSED_MARKER in value:
        return None
    return Problem(key, value, "not true, false, pre-installed or paused-for-*: the agent never overwrites it, and "
                               "the operand (which selects =true) does not run on the node")


def applied_record_problem(annotations: Mapping[str, Any]) -> Problem | None:
    """The applied-labels annotation when it cannot be read (it then counts as empty)."""
    raw = annotations.get(labels.APPLIED_LABELS_ANNOTATION)
    why = labels.read_applied_record(raw)[1]
    if why is None:
        return None
    return Problem(labels.APPLIED_LABELS_ANNOTATION, raw,
                   f"{why}: read as empty, so labels it recorded are not removed", kind="annotation")


def label_problems(node: Mapping[str, Any], config: labels.Config) -> list[Problem]:
    """Every label and annotation of ``node`` that the label loop reads with a value it does not understand."""
    metadata = node.get("metadata") or {}
    node_labels: Mapping[str, Any] = metadata.get("labels") or {}
    problems: list[Problem] = []
    for key in config.gpu_node_labels:
        value = node_labels.get(key)
        if value is not None and value not in GPU_NODE_VALUES:
            problems.append(Problem(key, value, 'neither "true" nor "false": the node is not treated as a GPU node'))
    operands = node_labels.get(labels.OPERANDS_LABEL)
    if operands is not None and operands not in ("true", "false"):
        problems.append(Problem(labels.OPERANDS_LABEL, operands,
                                'neither "true" nor "false": operands stay deployed (only "false" removes them)'))
    for key in sorted(config.managed_deploy_labels):
        if key in node_labels:
            problem = _deploy_problem(key, node_labels[key])
            if problem is not None:
                problems.append(problem)
    driver = node_labels.get(labels.DRIVER_LABEL)
    if driver is not None and not (isinstance(driver, str) and is_object_name(driver)):
        problems.append(Problem(labels.DRIVER_LABEL, driver,
                                "not a DaemonSet name: no driver DaemonSet can serve the node by it"))
    record = applied_record_problem(metadata.get("annotations") or {})
    if record is not None:
        problems.append(record)
    return problems


def mig_state_problems(node: Mapping[str, Any]) -> list[Problem]:
    """The MIG manager's state label, which the inventory loop quotes in its drift, when it is not one NVIDIA's
    MIG manager writes."""
    value = ((node.get("metadata") or {}).get("labels") or {}).get(MIG_CONFIG_STATE_LABEL)
    if value is None or value in MIG_STATES:
        return []
    return [Problem(MIG_CONFIG_STATE_LABEL, value,
                    f"not one of {', '.join(sorted(MIG_STATES))}: quoted in the drift as it is")]


class Warnings:
    """Logs each problem of a node once, when it appears; one that goes away and comes back is logged again."""

    def __init__(self, log: Callable[[dict[str, Any]], None]) -> None:
        self.log = log
        self._seen: dict[str, frozenset[Problem]] = {}

    def report(self, node_name: str, problems: Iterable[Problem]) -> None:
        current = frozenset(problems)
        before = self._seen.get(node_name, frozenset())
        for problem in sorted(current - before, key=lambda p: (p.kind, p.key)):
            self.log({"level": "warning", "event": "label-invalid", "node": node_name, **problem.as_json()})
        self._seen[node_name] = current
