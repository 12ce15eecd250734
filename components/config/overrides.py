"""Per-operand overrides, `gpu-stack:operands.<operand>`: what ClusterPolicy lets every component section set
(env, args, resources, imagePullPolicy, imagePullSecrets, repository/image/version) plus the pod template's
annotations, labels, priorityClassName and extra tolerations.

What each key addresses (DaemonSets, containers, image, env gpu-stack owns) is data in
components/catalogs/operand_overrides.py. An override for an operand the stack does not deploy is an error:
it would silently do nothing, and a reviewer reading the stack file would believe it applies.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from typing import Literal, Optional, Union

from pydantic import Field, field_validator, model_validator

from components.catalogs import operand_overrides as operand_targets
from components.config import limits
from components.config.base import (
    DIGEST,
    DNS_SUBDOMAIN,
    IMAGE_TAG,
    LABEL_KEY,
    LABEL_VALUE,
    REGISTRY,
    Toleration,
    _annotation_map,
    _image_version,
    _Model,
    _pinned_image,
    dns_subdomain_problem,
    label_value_problem,
    parse_image,
    secret_names,
    qualified_name_problem,
    shown,
)
from components.config.cluster import registry_problem


# A C identifier, as the API server takes env names in practice (IsEnvVarName allows more, but a shell does not).
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# resource.ParseQuantity's grammar (k8s.io/apimachinery/pkg/api/resource/quantity.go): a signed decimal number,
# then a binary SI suffix, a decimal SI suffix or a decimal exponent.
QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# A container resource name: a standard one, or a domain-prefixed extended resource (IsStandardContainerResourceName,
# validateContainerResourceName).
STANDARD_RESOURCES = ("cpu", "memory", "ephemeral-storage")
HUGEPAGES = re.compile(r"^hugepages-[0-9]+(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
# An image name below a repository: lower-case path components (distribution/reference's path grammar).
IMAGE_NAME = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")
# Pod labels the DaemonSet selector and the operator's bookkeeping depend on (never overridden by the operator).
RESERVED_LABELS = ("app", "app.kubernetes.io/part-of")
ANNOTATIONS_MAX_BYTES = limits.ANNOTATIONS_MAX_BYTES

# What the validators below check, as JSON Schema keywords, so editors and the generated reference show it.
_QUANTITY_VALUE = {"anyOf": [{"type": "number", "minimum": 0}, {"type": "string", "pattern": QUANTITY.pattern}]}
_PRIORITY_CLASS = {"pattern": DNS_SUBDOMAIN.pattern, "maxLength": 253}
_VERSION = {"pattern": f"^(?:{IMAGE_TAG.pattern[1:-1]}|{DIGEST.pattern[1:-1]})$", "not": {"const": "latest"}}


def parse_quantity(value: str) -> Optional[Decimal]:
    """The quantity's value, or None when the API server would refuse it."""
    match = QUANTITY.fullmatch(value)
    if not match:
        return None
    number, suffix = match.group(1), match.group(2) or ""
    try:
        base = Decimal(number)
    except InvalidOperation:
        return None
    if suffix in _BINARY:
        return base * _BINARY[suffix]
    if suffix in _DECIMAL:
        return base.scaleb(_DECIMAL[suffix])
    return base.scaleb(int(suffix[1:]))


def _shown(value: object) -> str:
    return shown(value)


class EnvVar(_Model):
    name: str = Field(
        description="Variable name: a C identifier (letters, digits, '_'; not starting with a digit).",
        json_schema_extra={"pattern": ENV_NAME.pattern},
    )
    value: str = Field(default="", description="Literal value (a string; quote numbers and booleans in YAML).")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not ENV_NAME.fullmatch(value):
            raise ValueError(f"{_shown(value)} is not an env var name (a C identifier such as LOG_LEVEL)")
        return value


def _quantities(values: dict[str, Union[int, float, str]]) -> dict[str, str]:
    checked: dict[str, str] = {}
    if len(values) > limits.MAX_MAP_ENTRIES:
        raise ValueError(f"{len(values)} resources; at most {limits.MAX_MAP_ENTRIES} (limits.MAX_MAP_ENTRIES)")
    for resource, raw in values.items():
        if not isinstance(resource, str):
            raise ValueError(f"{_shown(resource)} is not a resource name")
        if resource not in STANDARD_RESOURCES and not HUGEPAGES.fullmatch(resource) and "/" not in resource:
            raise ValueError(
                f"{_shown(resource)} is not a container resource: use cpu, memory, ephemeral-storage, hugepages-<size> "
                "or a domain-prefixed extended resource such as example.com/foo"
            )
        if "/" in resource and qualified_name_problem(resource):
            raise ValueError(f"{_shown(resource)} is not a resource name ({qualified_name_problem(resource)})")
        if isinstance(raw, bool) or not isinstance(raw, (int, float, str)) or isinstance(raw, float) and not math.isfinite(raw):
            raise ValueError(f"{resource}: got {_shown(raw)}; expected a quantity such as 100m, 1 or 256Mi")
        text = str(raw)
        quantity = parse_quantity(text)
        if quantity is None:
            raise ValueError(f"{resource}: {_shown(text)} is not a Kubernetes quantity (e.g. 100m, 0.5, 1, 256Mi, 2Gi)")
        if quantity < 0:
            raise ValueError(f"{resource}: {_shown(text)} is negative")
        checked[resource] = text
    return checked


class Resources(_Model):
    requests: dict[str, str] = Field(
        default={},
        description="Resource name -> quantity the scheduler reserves, e.g. {cpu: 100m, memory: 128Mi}.",
        json_schema_extra={"additionalProperties": _QUANTITY_VALUE},
    )
    limits: dict[str, str] = Field(
        default={},
        description="Resource name -> quantity the container may not exceed.",
        json_schema_extra={"additionalProperties": _QUANTITY_VALUE},
    )

    @field_validator("requests", "limits", mode="before")
    @classmethod
    def _parse(cls, values: object) -> object:
        return _quantities(values) if isinstance(values, dict) else values

    @model_validator(mode="after")
    def _requests_within_limits(self) -> "Resources":
        # ValidateResourceRequirements: a request never above its limit; hugepages and extended resources are not
        # overcommitted, so a request needs a limit of the same quantity.
        for resource, request in self.requests.items():
            limit = self.limits.get(resource)
            wanted, allowed = parse_quantity(request), parse_quantity(limit) if limit is not None else None
            if allowed is not None and wanted > allowed:  # type: ignore[operator]
                raise ValueError(f"requests.{resource} ({request}) is above limits.{resource} ({limit})")
            if ("/" in resource or HUGEPAGES.fullmatch(resource)) and wanted != allowed:
                raise ValueError(f"requests.{resource}: {resource} is not overcommitted; give it a limit equal to the request")
        return self


# daemonsets.tolerations and operands.<x>.tolerations take the same, fully checked toleration.
OperandToleration = Toleration


def _resources_description() -> str:
    """Said from the catalog, so the reference names every container that takes another operand's resources."""
    sized = {}
    for key, target in operand_targets.OPERANDS.items():
        for container in target.resources_also_reach:
            sized.setdefault(container, []).append(f"`{key}`")
    extra = "".join(
        f"; those of {' and '.join(keys)} also size `{container}` in their pods, as NVIDIA's NVIDIADriver does"
        for container, keys in sized.items()
    )
    return f"Replaces the requests and limits of the operand's own container(s){extra}."


class OperandOverride(_Model):
    """Settings of one operand, as ClusterPolicy's component sections carry them."""

    env: list[EnvVar] = Field(
        default=[],
        max_length=limits.MAX_ENV,
        description=(
            "Env vars merged over NVIDIA's env on the operand's own container(s): a name it already sets takes this "
            "value, a new one is appended. Names gpu-stack derives from another key are refused with that key."
        ),
    )
    args: list[str] = Field(
        default=[],
        max_length=limits.MAX_ARGS,
        description="Replaces the arguments of the operand's own container(s).",
        json_schema_extra={"items": {"type": "string", "maxLength": limits.MAX_ARG_LENGTH}},
    )
    resources: Optional[Resources] = Field(default=None, description=_resources_description())
    image_pull_policy: Optional[Literal["Always", "IfNotPresent", "Never"]] = Field(
        default=None, description="Pull policy of the operand's own container(s) (default IfNotPresent)."
    )
    image_pull_secrets: list[str] = Field(
        default=[],
        max_length=limits.MAX_PULL_SECRETS,
        description="Secret names added to the stack's registry.pullSecrets in the operand's pods.",
        json_schema_extra={"items": {"type": "string", **_PRIORITY_CLASS}},
    )
    repository: Optional[str] = Field(
        default=None,
        description="Registry and path the image lives under (e.g. harbor.example.com/nvidia); default the stack's registry.",
        json_schema_extra={"pattern": REGISTRY.pattern},
    )
    image: Optional[str] = Field(
        default=None,
        description=(
            "Image name below the repository (e.g. k8s-device-plugin), or alone a full pinned reference "
            "(host/path/name:tag or @sha256:...) used as is."
        ),
    )
    version: Optional[str] = Field(
        default=None,
        description="Tag, or sha256:<digest> (rendered as repository/image@sha256:...); 'latest' is refused.",
        json_schema_extra=_VERSION,
    )
    annotations: dict[str, str] = Field(
        default={},
        description="Added to the pod template's annotations.",
        json_schema_extra={"propertyNames": {"pattern": LABEL_KEY.pattern}},
    )
    labels: dict[str, str] = Field(
        default={},
        description="Added to the labels of the operand's DaemonSet and of its pod template (not app or app.kubernetes.io/part-of).",
        json_schema_extra={
            "propertyNames": {"pattern": LABEL_KEY.pattern},
            "additionalProperties": {"type": "string", "pattern": LABEL_VALUE.pattern},
        },
    )
    priority_class_name: Optional[str] = Field(
        default=None,
        description="Replaces daemonsets.priorityClassName for this operand's pods.",
        json_schema_extra=_PRIORITY_CLASS,
    )
    tolerations: list[OperandToleration] = Field(
        default=[],
        max_length=limits.MAX_TOLERATIONS,
        description="Appended to daemonsets.tolerations for this operand's pods.",
    )

    @field_validator("version")
    @classmethod
    def _version(cls, value: Optional[str]) -> Optional[str]:
        return value if value is None else _image_version(value)

    @field_validator("env")
    @classmethod
    def _unique_env(cls, values: list[EnvVar]) -> list[EnvVar]:
        seen: set[str] = set()
        for var in values:
            if var.name in seen:
                raise ValueError(f"{var.name} is set twice")
            seen.add(var.name)
        return values

    @field_validator("args")
    @classmethod
    def _args(cls, values: list[str]) -> list[str]:
        for i, arg in enumerate(values):
            if len(arg) > limits.MAX_ARG_LENGTH:
                raise ValueError(f"args[{i}] has {len(arg)} characters; at most {limits.MAX_ARG_LENGTH} (limits.MAX_ARG_LENGTH)")
        return values

    _secret_names = field_validator("image_pull_secrets")(secret_names)

    @field_validator("repository")
    @classmethod
    def _repository(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and registry_problem(value):
            raise ValueError(f"{_shown(value)} is not a registry path such as nvcr.io/nvidia or harbor.example.com:5000/gpu")
        return value

    @field_validator("image")
    @classmethod
    def _image(cls, value: Optional[str]) -> Optional[str]:
        if value is None:
            return value
        if IMAGE_NAME.fullmatch(value):
            first = value.split("/")[0]
            if "/" in value and ("." in first or first == "localhost"):
                raise ValueError(
                    f"{_shown(value)} starts with a registry host: give it as repository, or give a full pinned reference"
                )
            return value
        if ":" in value or "@" in value:
            if parse_image(value).domain is None:
                # the kubelet would pull a name without a registry host from Docker Hub
                raise ValueError(f"{_shown(value)}: a full reference names its registry, e.g. harbor.example.com/nvidia/gfd:v1")
            return _pinned_image(value)
        raise ValueError(f"{_shown(value)} is neither an image name (lower-case path) nor a full pinned image reference")

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, values: dict[str, str]) -> dict[str, str]:
        return _annotation_map(values)

    @field_validator("labels")
    @classmethod
    def _labels(cls, values: dict[str, str]) -> dict[str, str]:
        if len(values) > limits.MAX_MAP_ENTRIES:
            raise ValueError(f"{len(values)} labels; at most {limits.MAX_MAP_ENTRIES} (limits.MAX_MAP_ENTRIES)")
        for key, value in values.items():
            problem = qualified_name_problem(key)
            if problem:
                raise ValueError(f"label key {problem}")
            if label_value_problem(value):
                raise ValueError(f"label {_shown(key)}: {label_value_problem(value)}")
            if key in RESERVED_LABELS:
                raise ValueError(f"label {shown(key)} selects the operand's pods; it cannot be overridden")
        return values

    @field_validator("priority_class_name")
    @classmethod
    def _priority_class(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and dns_subdomain_problem(value):
            raise ValueError(f"{_shown(value)} is not a PriorityClass name (DNS-1123 subdomain)")
        return value

    @property
    def pod_level(self) -> bool:
        return bool(self.annotations or self.labels or self.priority_class_name or self.tolerations)

    @property
    def sets_image(self) -> bool:
        return any(v is not None for v in (self.repository, self.image, self.version))

    @property
    def full_reference(self) -> bool:
        return self.image is not None and not IMAGE_NAME.fullmatch(self.image)


def _operand_field(key: str) -> Optional[OperandOverride]:
    target = operand_targets.OPERANDS[key]
    if target.falls_back_to is not None:
        pods = " and ".join(f"`{pod}`" for pod in target.runs_in)
        return Field(default=None, description=f"Overrides for `{', '.join(target.containers)}` in the pods of {pods} alone; "
                     f"unset, `operands.{target.falls_back_to}` applies there.")
    return Field(default=None, description=f"Overrides for the `{key}` operand ({', '.join(target.containers)}).")


class OperandOverrides(_Model):
    """Per-operand overrides, as ClusterPolicy's component sections carry them: one block per operand key. Pod
    settings (annotations, labels, priorityClassName, tolerations, imagePullSecrets) go to the operand's pods,
    container settings (env, args, resources, imagePullPolicy, image) to its own containers only; an operand the
    stack does not deploy cannot be overridden."""

    driver: Optional[OperandOverride] = _operand_field("driver")
    driver_manager: Optional[OperandOverride] = _operand_field("driverManager")
    toolkit: Optional[OperandOverride] = _operand_field("toolkit")
    validator: Optional[OperandOverride] = _operand_field("validator")
    device_plugin: Optional[OperandOverride] = _operand_field("devicePlugin")
    mps_control_daemon: Optional[OperandOverride] = _operand_field("mpsControlDaemon")
    gfd: Optional[OperandOverride] = _operand_field("gfd")
    dcgm: Optional[OperandOverride] = _operand_field("dcgm")
    dcgm_exporter: Optional[OperandOverride] = _operand_field("dcgmExporter")
    mig_manager: Optional[OperandOverride] = _operand_field("migManager")
    node_status_exporter: Optional[OperandOverride] = _operand_field("nodeStatusExporter")
    vgpu_manager: Optional[OperandOverride] = _operand_field("vgpuManager")
    vgpu_device_manager: Optional[OperandOverride] = _operand_field("vgpuDeviceManager")
    vfio_manager: Optional[OperandOverride] = _operand_field("vfioManager")
    sandbox_validator: Optional[OperandOverride] = _operand_field("sandboxValidator")
    sandbox_device_plugin: Optional[OperandOverride] = _operand_field("sandboxDevicePlugin")
    kata_sandbox_device_plugin: Optional[OperandOverride] = _operand_field("kataSandboxDevicePlugin")
    cc_manager: Optional[OperandOverride] = _operand_field("ccManager")
    gds: Optional[OperandOverride] = _operand_field("gds")
    gdrcopy: Optional[OperandOverride] = _operand_field("gdrcopy")
    peermem: Optional[OperandOverride] = _operand_field("peermem")
    dra_driver: Optional[OperandOverride] = _operand_field("draDriver")
    vfio_manager_driver_manager: Optional[OperandOverride] = _operand_field("vfioManagerDriverManager")
    vgpu_manager_driver_manager: Optional[OperandOverride] = _operand_field("vgpuManagerDriverManager")

    def by_key(self) -> dict[str, OperandOverride]:
        """The overrides that are set, by operand key (camelCase, as in the stack file)."""
        fields = type(self).model_fields
        return {fields[name].alias or name: value for name, value in self if value is not None}


# The catalog and the model must list the same operands.
assert tuple(f.alias for f in OperandOverrides.model_fields.values()) == operand_targets.OPERAND_KEYS
