"""What every part of the import shares: the error, the facts and result types, reading `kubectl`/`helm` YAML, and
the small value conversions the operator's own parsers imply."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import yaml

from components.config.base import SHOWN_MAX
from node_images.inputfiles import IMPORT_INPUT_MAX_BYTES, InputFileError, load_yaml, load_yaml_text


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
        shown = SECRET_NOT_SHOWN if looks_like_credential(env_name(self.path), self.value) else _show(self.value)
        return f"{self.path} = {shown}: {self.reason}"


def _show(value: Any) -> str:
    """A value as YAML writes it inline: what a reader of the stack file and of the ClusterPolicy sees, cut to
    SHOWN_MAX characters with its full length (a report line, not a dump)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    text = text[:-3].strip() if text.endswith("...") else text
    return text if len(text) <= SHOWN_MAX else f"{text[: SHOWN_MAX - 1]}\u2026 ({len(text)} characters)"


# What the report prints instead of a value that looks like a credential.
SECRET_NOT_SHOWN = "(secret value not shown)"
# Env names that hold a credential by their name, and values that are one by their shape (an NGC API key, a JWT,
# a PEM private key, common cloud and forge tokens): never copied into a stack file (kept in git in plain text)
# nor printed in the report.
_CREDENTIAL_NAME = re.compile(r"TOKEN|PASSWORD|PASSWD|SECRET|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL", re.IGNORECASE)
_CREDENTIAL_VALUE = re.compile(
    r"nvapi-[A-Za-z0-9_-]{8,}|eyJ[A-Za-z0-9_-]{8,}\.eyJ|-----BEGIN [A-Z ]*PRIVATE KEY-----|"
    r"\b(ghp|gho|ghs|glpat|xox[abp])[-_][A-Za-z0-9_-]{8,}|\bAKIA[0-9A-Z]{16}\b"
)


def env_name(path: str) -> Optional[str]:
    """The variable of an env entry's path (`spec.driver.env[NAME]`), None for any other field."""
    match = re.search(r"\.env\[([^\]]+)\]$", path)
    return match.group(1) if match else None


def looks_like_credential(name: Optional[str], value: Any) -> bool:
    """An env entry named like a credential, or any value shaped like one (anywhere inside it)."""
    if name is not None and _CREDENTIAL_NAME.search(name) and value not in (None, ""):
        return True
    if isinstance(value, dict):
        entry = value.get("name")  # an env entry {name, value}
        if isinstance(entry, str) and looks_like_credential(entry, value.get("value")):
            return True
        return any(looks_like_credential(None, v) for v in value.values())
    if isinstance(value, list):
        return any(looks_like_credential(None, v) for v in value)
    return isinstance(value, str) and bool(_CREDENTIAL_VALUE.search(value))


def _credential_keys(value: Any) -> bool:
    """A mapping anywhere inside with a key named like a credential (`token: ...`): an error about a malformed
    input does not need to show it."""
    if isinstance(value, dict):
        return any((isinstance(k, str) and _CREDENTIAL_NAME.search(k)) or _credential_keys(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_credential_keys(v) for v in value)
    return False


def shown_input(value: Any) -> str:
    """An input value as an error may echo it: never one that looks like a credential, anything else cut to
    SHOWN_MAX characters with its full length."""
    if looks_like_credential(None, value) or _credential_keys(value):
        return SECRET_NOT_SHOWN
    text = repr(value)
    return text if len(text) <= SHOWN_MAX else f"{text[: SHOWN_MAX - 1]}\u2026 ({len(text)} characters)"


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
    # OpenShift (gpustack/importer/openshift.py): its version, the driver-toolkit ImageStream and the cluster Proxy.
    openshift_version: Optional[str] = None
    imagestream: Optional[Any] = None
    proxy: Optional[Any] = None


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
    # Every leaf field of the inputs' specs with what became of it (gpustack/importer/ledger.py FieldOutcome).
    fields: list[Any] = field(default_factory=list)

    def document(self) -> dict[str, Any]:
        return {"config": self.config}


def read_yaml(path: str, what: str) -> Any:
    """One YAML document of an import input, through the guarded loader (node_images/inputfiles.py)."""
    file = Path(path)
    if not file.is_file():
        raise ImportInputError(f"{what} file {path} does not exist")
    try:
        documents = [d for d in load_yaml(file, IMPORT_INPUT_MAX_BYTES, "IMPORT_INPUT_MAX_BYTES", multi=True) if d is not None]
    except InputFileError as exc:
        raise ImportInputError(str(exc)) from None
    if len(documents) != 1:
        raise ImportInputError(f"{path}: expected one YAML document, found {len(documents)}")
    return documents[0]


def embedded_yaml(value: Any, source: str) -> Any:
    """A YAML document held in a string (a ConfigMap's data value), through the same guarded loader; `source`
    names it in errors (`configmap NAME, key KEY`), lines counted within the value."""
    if not isinstance(value, str):
        raise ImportInputError(f"{source}: expected a string holding YAML, got {type(value).__name__}")
    try:
        return load_yaml_text(value, source)
    except InputFileError as exc:
        raise ImportInputError(str(exc)) from None


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
                raise ImportInputError(f"{path}: items[{i}] is kind {shown_input(item_kind)}; expected {' or '.join(kinds)}")
            found.append(item)
        return found
    if kind not in kinds:
        raise ImportInputError(f"{path}: kind {shown_input(kind)} is not {' or '.join(kinds)} (nor a List of them)")
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
