"""What every area of the stack configuration shares: the `gpu-stack` namespace, the error type, the base model,
and the patterns and validators more than one area uses."""

from __future__ import annotations

import functools
import re
from typing import Literal, NamedTuple, Optional, Union

from docker_image import digest as image_digest
from docker_image import reference as image_reference
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel
from pulumi.errors import RunError

from components.config import limits
from node_images import catalog as node_image_catalog

NAMESPACE = "gpu-stack"

# Every pattern below is for JSON Schema too (stack_schema.py), so it keeps its `^...$` anchors; in Python each is
# matched with `fullmatch`, because Python's `$` also matches before a trailing newline ("gpu\n" would pass `.match`).
# Lengths are part of the patterns where a schema can say them; the checks below name them in their errors.
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_PART = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
DNS_SUBDOMAIN = re.compile(rf"^{_DNS_PART}(\.{_DNS_PART})*$")
IMAGE_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")
K8S_VERSION = re.compile(r"^v?1\.([0-9]+)(\.[0-9]+)?$")
# NFD reports the OS as ID + VERSION_ID; the driver image tag is their concatenation (fact sheet §4.1).
OS_TAG = re.compile(r"^(ubuntu[0-9]{2}\.[0-9]{2}|rhel[0-9]+|rocky[0-9]+|ol[0-9]+|rhcos[0-9]+\.[0-9]+|sles[0-9]+(\.[0-9]+)?|sl-micro[0-9]+\.[0-9]+|debian[0-9]+)$")
BRANCH = re.compile(r"^[0-9]{3}$")
FULL_DRIVER_VERSION = re.compile(r"^[0-9]{3}\.[0-9]+(\.[0-9]+)?$")
REGISTRY = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9._-]+)*$")
# IsQualifiedName: an optional DNS-subdomain prefix and '/', then a name of at most 63.
LABEL_KEY = re.compile(rf"^({_DNS_PART}(\.{_DNS_PART})*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{{0,61}}[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_QUALIFIED_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")

# The API server's length limits (k8s.io/apimachinery/pkg/util/validation).
DNS_LABEL_MAX = 63
DNS_SUBDOMAIN_MAX = 253
QUALIFIED_NAME_MAX = 63
LABEL_VALUE_MAX = 63
# At most this much of a value is ever echoed in an error.
SHOWN_MAX = 80


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


def shown(value: object) -> str:
    """A value as an error may echo it: its repr, cut to SHOWN_MAX characters with an ellipsis and its full length,
    so a 10 MB value costs a line, not a terminal."""
    text = repr(value)
    if len(text) <= SHOWN_MAX:
        return text
    size = len(value) if isinstance(value, str) else len(text)
    return f"{text[: SHOWN_MAX - 1]}\u2026 ({size} characters)"


def dns_label_problem(value: str, limit: int = DNS_LABEL_MAX) -> Optional[str]:
    """Why `value` is not a DNS-1123 label of at most `limit` characters (IsDNS1123Label), or None."""
    if len(value) > limit or not DNS_LABEL.fullmatch(value):
        return f"{shown(value)} is not a DNS-1123 label (lower-case letters, digits and '-', at most {limit})"
    return None


def dns_subdomain_problem(value: str, limit: int = DNS_SUBDOMAIN_MAX) -> Optional[str]:
    """Why `value` is not a DNS-1123 subdomain of at most `limit` characters (IsDNS1123Subdomain), or None."""
    if len(value) > limit or not DNS_SUBDOMAIN.fullmatch(value):
        return f"{shown(value)} is not a DNS-1123 subdomain (dot-separated lower-case labels, at most {limit})"
    return None


def secret_names(names: list[str]) -> list[str]:
    """A list of Secret names a pod's imagePullSecrets take: each a DNS-1123 subdomain, none twice."""
    for name in names:
        if dns_subdomain_problem(name):
            raise ValueError(f"{shown(name)} is not a valid Secret name (DNS-1123 subdomain, at most 253)")
    if len(set(names)) != len(names):
        raise ValueError("a Secret is named twice")
    return names


def qualified_name_problem(key: str) -> Optional[str]:
    """Why `key` is not a Kubernetes qualified name (label and annotation keys: IsQualifiedName), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > DNS_SUBDOMAIN_MAX or not DNS_SUBDOMAIN.fullmatch(prefix)):
        return f"{shown(key)}: the prefix before '/' must be a DNS subdomain of at most {DNS_SUBDOMAIN_MAX} characters"
    if not name or len(name) > QUALIFIED_NAME_MAX or not _QUALIFIED_NAME.fullmatch(name):
        return (
            f"{shown(key)}: the name must be 1-{QUALIFIED_NAME_MAX} characters of letters, digits, '-', '_' and '.', "
            "alphanumeric at both ends"
        )
    return None


def label_value_problem(value: object) -> Optional[str]:
    """Why `value` is not a label value (IsValidLabelValue: empty or at most 63 characters), or None."""
    if not isinstance(value, str) or len(value) > LABEL_VALUE_MAX or not LABEL_VALUE.fullmatch(value):
        return f"{shown(value)} is not a label value (at most {LABEL_VALUE_MAX} of A-Z a-z 0-9 - _ ., alphanumeric at both ends)"
    return None


def _dns_label(value: str) -> str:
    problem = dns_label_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def _image_version(value: str) -> str:
    if not (IMAGE_TAG.fullmatch(value) or DIGEST.fullmatch(value)):
        raise ValueError(f"{shown(value)} is neither an image tag nor a sha256:<64 hex> digest (a tag: at most 128 of A-Z a-z 0-9 _ . -)")
    if value == "latest":
        raise ValueError("'latest' is not a reviewable version; pin a tag or a digest")
    return value


def _driver_branch(value: Optional[str]) -> Optional[str]:
    if value is not None and not BRANCH.fullmatch(value):
        raise ValueError(f"{shown(value)} is not a driver branch such as 580 or 595")
    return value


def _full_driver_version(value: Optional[str]) -> Optional[str]:
    if value is None or DIGEST.fullmatch(value) or FULL_DRIVER_VERSION.fullmatch(value):
        return value
    raise ValueError(f"{shown(value)} is not a driver version such as 595.91.07 (or a sha256 digest)")


def label_map_problem(labels: dict[str, str], what: str = "label") -> Optional[str]:
    """Why `labels` is not a map of label keys to label values (also node selectors), or None."""
    if len(labels) > limits.MAX_MAP_ENTRIES:
        return f"{len(labels)} entries; at most {limits.MAX_MAP_ENTRIES} (limits.MAX_MAP_ENTRIES)"
    for key, value in labels.items():
        problem = qualified_name_problem(key)
        if problem:
            return f"not a valid Kubernetes {what}: key {problem}"
        problem = label_value_problem(value)
        if problem:
            return f"not a valid Kubernetes {what}: {shown(key)}: value {problem}"
    return None


def _label_map(labels: dict[str, str]) -> dict[str, str]:
    problem = label_map_problem(labels)
    if problem:
        raise ValueError(problem)
    return labels


def annotation_map_problem(annotations: dict[str, str]) -> Optional[str]:
    """Why `annotations` would be refused by the API server (ValidateAnnotations: qualified-name keys, 256 KiB in
    all), or None."""
    if len(annotations) > limits.MAX_MAP_ENTRIES:
        return f"{len(annotations)} entries; at most {limits.MAX_MAP_ENTRIES} (limits.MAX_MAP_ENTRIES)"
    for key in annotations:
        problem = qualified_name_problem(key)
        if problem:
            return f"annotation key {problem}"
    if sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items()) > limits.ANNOTATIONS_MAX_BYTES:
        return f"annotations total more than {limits.ANNOTATIONS_MAX_BYTES // 1024} KiB"
    return None


def _annotation_map(annotations: dict[str, str]) -> dict[str, str]:
    problem = annotation_map_problem(annotations)
    if problem:
        raise ValueError(problem)
    return annotations


def foreign_key_problem(key: str) -> Optional[str]:
    """Why a config key outside the `gpu-stack:` namespace is refused, or None for another project's namespace
    (`kubernetes:`, `pulumi:`, ...), which Pulumi legitimately hands every program. A key with no namespace, or one
    whose namespace is a misspelling of this project's, would otherwise be silently ignored."""
    namespace, colon, name = key.partition(":")
    if not colon:
        return f"a key without a namespace is never read; gpu-stack's keys are written `{NAMESPACE}:<key>`"
    if namespace != NAMESPACE and re.sub(r"[^a-z0-9]", "", namespace.lower()) == re.sub(r"[^a-z0-9]", "", NAMESPACE):
        return f"namespace {shown(namespace)} is never read: this project's keys are written `{NAMESPACE}:<key>`"
    return None


class ImageRef(NamedTuple):
    """An image reference as distribution/reference parses it: repository name, tag and digest (either may be
    None)."""

    name: str
    tag: Optional[str]
    digest: Optional[str]

    @property
    def domain(self) -> Optional[str]:
        """The registry host[:port], when the first path component names one as distribution/reference decides
        (splitDockerDomain: a '.' or ':', localhost, or upper-case letters); None for a Docker Hub name."""
        first, slash, _ = self.name.partition("/")
        if slash and ("." in first or ":" in first or first == "localhost" or first.lower() != first):
            return first
        return None


def parse_image(value: str) -> ImageRef:
    """Parse an image reference with the docker_image package's reference grammar (registry/repository:tag@digest,
    lower-case repository, a known digest algorithm of its length); ValueError naming what is wrong."""
    # The library's own patterns end in `$`, which lets a trailing newline through: no whitespace at all here.
    if not value or any(c.isspace() or not c.isprintable() for c in value):
        raise ValueError(f"{shown(value)} is not an image reference (it is empty or holds whitespace)")
    try:
        # The kubelet normalises every image with ParseNormalizedNamed (a first component without '.', ':' or
        # "localhost" is a Docker Hub path, so it must be lower-case too); the parts come from the plain parse.
        image_reference.Reference.parse_normalized_named(value)
        ref = image_reference.Reference.parse(value)
    except (image_reference.InvalidReference, image_digest.InvalidDigest, ValueError) as exc:
        raise ValueError(f"{shown(value)} is not an image reference ({exc})") from None
    name = ref["name"]
    if not name:
        raise ValueError(f"{shown(value)} is not an image reference (no repository name)")
    return ImageRef(name, ref["tag"], ref["digest"])


def _pinned_image(value: Optional[str]) -> Optional[str]:
    """A full image reference pinned by a tag (not 'latest') or a digest."""
    if value is None:
        return value
    ref = parse_image(value)
    if ref.digest is None:
        if ref.tag is None:
            raise ValueError(f"{shown(value)} has no tag; pin it, e.g. harbor.platform.internal/gpu-stack/node-agent:0.10.0")
        _image_version(ref.tag)
    return value


def _count_or_percent(value: Union[int, str]) -> Union[int, str]:
    """An IntOrString budget as the API server takes it: a whole number, or a string only as a percentage. A string
    of digits ("1") is refused there (ValidatePositiveIntOrPercent), so it is refused here, before anything renders."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= limits.MAX_UNAVAILABLE_COUNT:
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value > limits.MAX_UNAVAILABLE_COUNT:
        raise ValueError(f"got {value}; at most {limits.MAX_UNAVAILABLE_COUNT} nodes (limits.MAX_UNAVAILABLE_COUNT), or a percentage such as '25%'")
    if isinstance(value, str) and re.fullmatch(r"([1-9][0-9]?|100)%", value):
        return value
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,9}", value):
        raise ValueError(
            f"got the string {shown(value)}: Kubernetes takes a count as a number ({int(value)}, unquoted) and a string only "
            "as a percentage such as '25%'"
        )
    raise ValueError(f"{shown(value)} is not a positive count or a percentage from 1% to 100% such as '25%'")


class Toleration(_Model):
    """A pod toleration, checked as validateTolerations (pkg/apis/core/validation/validation.go) checks it."""

    key: Optional[str] = Field(
        default=None,
        description="Taint key (a qualified name); empty with operator Exists tolerates every taint.",
        json_schema_extra={"pattern": LABEL_KEY.pattern},
    )
    operator: Literal["Exists", "Equal"] = Field(default="Equal", description="Exists (any value) or Equal (value must match).")
    value: Optional[str] = Field(
        default=None,
        description="Taint value (a label value), with operator Equal only.",
        json_schema_extra={"pattern": LABEL_VALUE.pattern},
    )
    effect: Optional[Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]] = Field(
        default=None, description="Taint effect tolerated; empty tolerates every effect."
    )
    toleration_seconds: Optional[int] = Field(
        default=None,
        ge=0,
        le=2**31 - 1,
        description="How long a NoExecute taint is tolerated before eviction; NoExecute only.",
    )

    @model_validator(mode="after")
    def _combination(self) -> "Toleration":
        if self.key and qualified_name_problem(self.key):
            raise ValueError(f"key {qualified_name_problem(self.key)}")
        if not self.key and self.operator != "Exists":
            raise ValueError("a toleration without a key must use operator Exists (it then tolerates every taint)")
        if self.operator == "Exists" and self.value:
            raise ValueError("operator Exists takes no value; use operator Equal to match a value")
        if self.value and label_value_problem(self.value):
            raise ValueError(f"value {label_value_problem(self.value)}")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds applies to effect NoExecute only")
        return self


def _set_aliases(model: BaseModel) -> set[str]:
    fields = type(model).model_fields
    return {fields[name].alias or name for name in model.model_fields_set}


@functools.lru_cache(maxsize=1)
def node_images() -> node_image_catalog.Catalog:
    """node_images/catalog.yaml, read once per process."""
    return node_image_catalog.load_catalog()


# GPU indices a per-GPU MIG layout or vGPU config entry may name (nvidia-smi's index on the node).
MAX_GPU_INDEX = 63
ALL_DEVICES = "all"  # mig-parted's and the vGPU device manager's word for every GPU of the node


def gpu_devices(value: object) -> object:
    """An entry's `devices`: `all`, or a list of distinct GPU indices 0..MAX_GPU_INDEX."""
    if value == ALL_DEVICES:
        return value
    indices = value if isinstance(value, list) else None
    if not indices or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i <= MAX_GPU_INDEX for i in indices):
        raise ValueError(f"got {shown(value)}; allowed values: 'all' or a list of GPU indices 0..{MAX_GPU_INDEX} such as [0, 1]")
    if len(set(indices)) != len(indices):
        raise ValueError(f"GPU indices {shown(indices)} name a GPU twice")
    return value
