"""Relabel configs of the ServiceMonitor endpoints, as the Prometheus Operator's RelabelConfig types them and as
Prometheus checks them (model/relabel `Config.Validate`, which the Prometheus Operator repeats before it accepts a
ServiceMonitor). The API server's CRD schema lets far more through than Prometheus takes, and a ServiceMonitor
with one refused relabeling is dropped whole by the Prometheus Operator, so its targets silently stop being
scraped: every such config is refused here, with its key, before anything renders."""

from __future__ import annotations

import re
from typing import Literal, Optional

from pydantic import Field, StrictInt, field_validator, model_validator

from components.config import limits
from components.config.base import _Model, shown

# Prometheus' label name grammar (model.LabelName.IsValid, legacy validation); `__meta_*` names are label names too.
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# A replace target may name its label with the regex's groups ($1, ${name}): Prometheus' relabelTarget
# `^(?:(?:[a-zA-Z_]|\$(?:\{\w+\}|\w+))+\w*)+$`, rewritten to match the same strings without its nested quantifiers,
# which backtrack exponentially in Python's engine (Go's is linear). Go's \w is ASCII, hence the flag.
RELABEL_TARGET = re.compile(r"^(?:[a-zA-Z_]|\$\{\w+\}|\$\w)(?:\w|\$\{\w+\}|\$\w)*$", re.ASCII)
# Python syntax Go's RE2 lacks: lookahead/lookbehind, named and numbered backreferences.
RE2_UNSUPPORTED = re.compile(r"\(\?<?[=!]|\(\?P=|\\[1-9]")


def re2_problem(value: str) -> Optional[str]:
    """Why Go's regexp (RE2), which Prometheus and the DCGM exporter compile with, would refuse `value`; None if
    it would not. Python's `re` is close enough to RE2 to catch a syntax error; what RE2 lacks on top is checked
    after."""
    try:
        re.compile(value)
    except re.error as error:
        return f"is not a regular expression: {error}"
    if RE2_UNSUPPORTED.search(value):
        return "uses a lookaround or backreference, which Go's regexp (RE2) rejects"
    return None
# Both spellings, as the ServiceMonitor CRD's enum has them (gpustack/crd_schemas.py); Prometheus takes either.
RelabelAction = Literal[
    "replace", "Replace", "keep", "Keep", "drop", "Drop", "hashmod", "HashMod", "labelmap", "LabelMap",
    "labeldrop", "LabelDrop", "labelkeep", "LabelKeep", "lowercase", "Lowercase", "uppercase", "Uppercase",
    "keepequal", "KeepEqual", "dropequal", "DropEqual",
]
# Prometheus' defaults (relabel.DefaultRelabelConfig): a field holding one of these is as good as unset.
DEFAULT_SEPARATOR = ";"
DEFAULT_REGEX = "(.*)"
DEFAULT_REPLACEMENT = "$1"
MAX_RELABEL_TEXT = 1024

# Actions whose result is written to targetLabel, so Prometheus needs one.
_NEEDS_TARGET = ("replace", "hashmod", "lowercase", "uppercase", "keepequal", "dropequal")
# Actions that compare or transform the label as it is: no replacement to make.
_NO_REPLACEMENT = ("lowercase", "uppercase", "keepequal", "dropequal")


class RelabelConfig(_Model):
    """One relabeling of a scrape target (prometheus-operator RelabelConfig), applied before the scrape."""

    source_labels: Optional[list[str]] = Field(
        default=None,
        max_length=limits.MAX_RELABEL_SOURCE_LABELS,
        description="Labels whose values, joined by separator, the regex is matched against (`__meta_kubernetes_pod_node_name`, `job`).",
    )
    separator: Optional[str] = Field(default=None, max_length=64, description="Joins the source label values; Prometheus' default `;`.")
    target_label: Optional[str] = Field(
        default=None,
        max_length=MAX_RELABEL_TEXT,
        description="The label the result is written to; required for replace, hashmod, lowercase, uppercase, keepequal and dropequal.",
    )
    regex: Optional[str] = Field(
        default=None,
        min_length=1,
        max_length=MAX_RELABEL_TEXT,
        description="A regular expression (Go RE2, anchored at both ends) matched against the joined source values; Prometheus' default `(.*)`.",
    )
    modulus: Optional[StrictInt] = Field(default=None, ge=1, le=2**63 - 1, description="The hashmod modulus; required for, and only for, hashmod.")
    replacement: Optional[str] = Field(
        default=None,
        max_length=MAX_RELABEL_TEXT,
        description="What replace writes (`$1`, `${name}` name regex groups); Prometheus' default `$1`.",
    )
    action: Optional[RelabelAction] = Field(default=None, description="The relabel action; unset is replace, as the CRD defaults it.")

    @field_validator("source_labels")
    @classmethod
    def _source_labels(cls, values: Optional[list[str]]) -> Optional[list[str]]:
        for i, value in enumerate(values or []):
            if not LABEL_NAME.fullmatch(value):
                raise ValueError(f"entry {i} ({shown(value)}) is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)")
        return values

    @field_validator("target_label")
    @classmethod
    def _target_label(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not RELABEL_TARGET.fullmatch(value):
            raise ValueError(f"{shown(value)} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, or $1 / ${{name}} groups for replace)")
        return value

    @field_validator("regex")
    @classmethod
    def _regex(cls, value: Optional[str]) -> Optional[str]:
        if value is None:
            return value
        problem = re2_problem(value)
        if problem:
            raise ValueError(f"{shown(value)} {problem}")
        return value

    @property
    def effective_action(self) -> str:
        return (self.action or "replace").lower()

    @model_validator(mode="after")
    def _as_prometheus_checks(self) -> "RelabelConfig":
        action = self.effective_action
        if action in _NEEDS_TARGET and not self.target_label:
            raise ValueError(f"targetLabel is required for action {action}")
        if action != "replace" and self.target_label and not LABEL_NAME.fullmatch(self.target_label):
            # Only replace expands regex groups in the target.
            raise ValueError(f"targetLabel {shown(self.target_label)} is not a plain label name, which action {action} needs")
        if (action == "hashmod") != (self.modulus is not None):
            raise ValueError("modulus is required for action hashmod" if action == "hashmod" else f"modulus is for action hashmod only, not {action}")
        replacement = self.replacement not in (None, DEFAULT_REPLACEMENT)
        if action in _NO_REPLACEMENT and replacement:
            raise ValueError(f"replacement cannot be set for action {action}")
        if action == "labelmap" and self.replacement is not None and not RELABEL_TARGET.fullmatch(self.replacement):
            raise ValueError(f"replacement {shown(self.replacement)} is not a label name (or $1 / ${{name}} groups), which labelmap writes")
        if action in ("keepequal", "dropequal"):
            if self.regex not in (None, DEFAULT_REGEX) or self.separator not in (None, DEFAULT_SEPARATOR):
                raise ValueError(f"action {action} takes sourceLabels and targetLabel only (no regex or separator)")
        if action in ("labeldrop", "labelkeep"):
            if self.source_labels or self.target_label or self.separator not in (None, DEFAULT_SEPARATOR) or replacement:
                raise ValueError(f"action {action} takes regex only (no sourceLabels, targetLabel, separator or replacement)")
        return self

    def rendered(self) -> dict[str, object]:
        """The endpoint's relabeling as the CRD spells it: only the fields set."""
        return self.model_dump(by_alias=True, exclude_none=True)
