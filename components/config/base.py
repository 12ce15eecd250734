"""What every area of the stack configuration shares: the `gpu-stack` namespace, the error type, the base model,
and the patterns and validators more than one area uses."""

from __future__ import annotations

import functools
import re
from typing import Optional, Union

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel
from pulumi.errors import RunError

from node_images import catalog as node_image_catalog

NAMESPACE = "gpu-stack"

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
IMAGE_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")
K8S_VERSION = re.compile(r"^v?1\.(\d+)(\.\d+)?$")
# NFD reports the OS as ID + VERSION_ID; the driver image tag is their concatenation (fact sheet §4.1).
OS_TAG = re.compile(r"^(ubuntu\d{2}\.\d{2}|rhel\d+|rocky\d+|ol\d+|rhcos\d+\.\d+|sles\d+(\.\d+)?|sl-micro\d+\.\d+|debian\d+)$")
BRANCH = re.compile(r"^\d{3}$")
FULL_DRIVER_VERSION = re.compile(r"^\d{3}\.\d+(\.\d+)?$")
REGISTRY = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?(:\d+)?(/[a-z0-9._-]+)*$")
LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


class ConfigError(RunError):
    """Invalid stack configuration; `problems` holds (key path, message) pairs, all of them.

    A RunError, so the Pulumi CLI prints the message alone and stops before any resource is registered."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = problems
        super().__init__(self.render())

    def render(self) -> str:
        lines = [f"invalid stack configuration ({len(self.problems)} problem(s)):"]
        lines += [f"  {path}: {message}" for path, message in self.problems]
        return "\n".join(lines)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=False, frozen=True)


def _dns_label(value: str) -> str:
    if not DNS_LABEL.match(value) or len(value) > 63:
        raise ValueError(f"{value!r} is not a DNS-1123 label (lower-case letters, digits and '-', at most 63)")
    return value


def _image_version(value: str) -> str:
    if not (IMAGE_TAG.match(value) or DIGEST.match(value)):
        raise ValueError(f"{value!r} is neither an image tag nor a sha256:<64 hex> digest")
    if value == "latest":
        raise ValueError("'latest' is not a reviewable version; pin a tag or a digest")
    return value


def _driver_branch(value: Optional[str]) -> Optional[str]:
    if value is not None and not BRANCH.match(value):
        raise ValueError(f"{value!r} is not a driver branch such as 580 or 595")
    return value


def _full_driver_version(value: Optional[str]) -> Optional[str]:
    if value is None or DIGEST.match(value) or FULL_DRIVER_VERSION.match(value):
        return value
    raise ValueError(f"{value!r} is not a driver version such as 595.91.07 (or a sha256 digest)")


def _label_map(labels: dict[str, str]) -> dict[str, str]:
    for key, value in labels.items():
        if not LABEL_KEY.match(key) or not LABEL_VALUE.match(value):
            raise ValueError(f"{key}={value!r} is not a valid Kubernetes label")
    return labels


def _pinned_image(value: Optional[str]) -> Optional[str]:
    if value is None or "@sha256:" in value:
        return value
    name, _, tag = value.rpartition(":")
    if not name or "/" in tag or not tag:
        raise ValueError(f"{value!r} has no tag; pin it, e.g. harbor.platform.internal/gpu-stack/node-agent:0.4.0")
    _image_version(tag)
    return value


def _count_or_percent(value: Union[int, str]) -> Union[int, str]:
    """An IntOrString budget as the API server takes it: a whole number, or a string only as a percentage. A string
    of digits ("1") is refused there (ValidatePositiveIntOrPercent), so it is refused here, before anything renders."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if isinstance(value, str) and re.fullmatch(r"([1-9][0-9]?|100)%", value):
        return value
    if isinstance(value, str) and re.fullmatch(r"[0-9]+", value):
        raise ValueError(
            f"got the string {value!r}: Kubernetes takes a count as a number ({int(value)}, unquoted) and a string only "
            "as a percentage such as '25%'"
        )
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
    raise ValueError(f"{shown} is not a positive count or a percentage from 1% to 100% such as '25%'")


def _set_aliases(model: BaseModel) -> set[str]:
    fields = type(model).model_fields
    return {fields[name].alias or name for name in model.model_fields_set}


@functools.lru_cache(maxsize=1)
def node_images() -> node_image_catalog.Catalog:
    """node_images/catalog.yaml, read once per process."""
    return node_image_catalog.load_catalog()
