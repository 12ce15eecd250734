"""What every part of the import shares: the error, the facts and result types, reading `kubectl`/`helm` YAML, and
the small value conversions the operator's own parsers imply."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import yaml


class ImportInputError(Exception):
    """Input gpu-stack cannot import; the message names the file or field."""


@dataclass(frozen=True)
class NotCarried:
    """One field of the operator's configuration the stack file does not hold, and why.

    `path` is the ClusterPolicy path (`spec.driver.licensingConfig.secretName`, env entries as `env[NAME]`), a
    Helm values key (`helm:nfd.nodefeaturerules`), a ConfigMap key (`configmap:NAME/KEY`) or a node label
    (`node:NAME/LABEL`)."""

    path: str
    value: Any
    reason: str

    def render(self) -> str:
        return f"{self.path} = {_show(self.value)}: {self.reason}"


def _show(value: Any) -> str:
    """A value as YAML writes it inline: what a reader of the stack file and of the ClusterPolicy sees."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text[:-3].strip() if text.endswith("...") else text


@dataclass(frozen=True)
class ClusterFacts:
    """What a ClusterPolicy does not say about its cluster."""

    context: str
    node_agent_image: str
    cluster_name: Optional[str] = None
    kubernetes_versions: tuple[str, ...] = ()
    namespace: Optional[str] = None
    container_runtime: Optional[str] = None
    # (label selector, model); a None selector names the model of GPU nodes whose labels do not say it.
    gpu_models: tuple[tuple[Optional[tuple[str, str]], str], ...] = ()
    os: Optional[str] = None
    pool_labels: tuple[str, ...] = ()


@dataclass
class ImportResult:
    config: dict[str, Any]
    not_carried: list[NotCarried]
    notes: list[str]
    # gpu-stack key -> the input it came from, to name the source when load_config refuses a value.
    origins: dict[str, str]
    source: str = "cluster-policy"
    # Fields without effect in the operator (a component it did not deploy, a deprecated no-op), by path.
    no_effect: list[NotCarried] = field(default_factory=list)

    def document(self) -> dict[str, Any]:
        return {"config": self.config}


def read_yaml(path: str, what: str) -> Any:
    file = Path(path)
    if not file.is_file():
        raise ImportInputError(f"{what} file {path} does not exist")
    try:
        documents = [d for d in yaml.safe_load_all(file.read_text()) if d is not None]
    except yaml.YAMLError as exc:
        raise ImportInputError(f"{path}: not valid YAML: {exc}") from None
    if len(documents) != 1:
        raise ImportInputError(f"{path}: expected one YAML document, found {len(documents)}")
    return documents[0]


def objects_of(document: Any, kinds: Sequence[str], path: str) -> list[dict]:
    """The objects of a `kubectl get -o yaml` document: one object, or the items of a List."""
    if not isinstance(document, dict):
        raise ImportInputError(f"{path}: expected a Kubernetes object or a List, got {type(document).__name__}")
    kind = document.get("kind")
    if kind == "List" or (isinstance(kind, str) and kind.endswith("List") and "items" in document):
        items = document.get("items") or []
        if not isinstance(items, list):
            raise ImportInputError(f"{path}: `items` must be a list")
        found = []
        for i, item in enumerate(items):
            item_kind = item.get("kind") if isinstance(item, dict) else None
            if item_kind not in kinds:
                raise ImportInputError(f"{path}: items[{i}] is kind {item_kind!r}; expected {' or '.join(kinds)}")
            found.append(item)
        return found
    if kind not in kinds:
        raise ImportInputError(f"{path}: kind {kind!r} is not {' or '.join(kinds)} (nor a List of them)")
    return [document]


def int_or_percent(value: Any) -> Any:
    """The operator reads ClusterPolicy's string budgets with intstr.Parse, so "1" meant one node; a stack says it
    as the number, since the API server refuses the string "1" in a DaemonSet."""
    text = str(value).strip()
    return int(text) if re.fullmatch(r"[0-9]+", text) else text


def truthy(value: str) -> bool:
    """A boolean env value as k8s-driver-manager's flag parsing (strconv.ParseBool) reads it."""
    return value.strip().lower() in ("1", "t", "true")


def _slug(value: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9]+", "-", value.lower())).strip("-")
