"""images-pinned: every image the stack runs is pinned and comes from a registry the stack trusts.

Checked on every object with a pod template (containers, init and ephemeral containers; Node Feature Discovery's
included, which gpu-stack renders itself) and on env values named `*_IMAGE` (the validator spawns its workload
pods from `VALIDATOR_IMAGE`). An image is pinned when it has a digest (`@sha256:...`) or an explicit tag other than
`latest`; a reference without a tag means `latest`.

Registries are matched by prefix at a path boundary: `harbor.example/gpu-stack` allows
`harbor.example/gpu-stack/node-agent:0.1.0` but not `harbor.example/other/x:1`. A reference without a registry
host is Docker Hub (`docker.io`).
"""

from __future__ import annotations

import re
from typing import Any, Iterator, Mapping, Optional

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)

from gpu_stack_policies import objects
from gpu_stack_policies.fields import report_at

NAME = "images-pinned"
DEFAULT_ALLOWED_REGISTRIES = ["nvcr.io", "registry.k8s.io"]
REGISTRY_PREFIX = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]([-a-z0-9._]*[a-z0-9])?)*$"
DIGEST = re.compile(r"@[a-z0-9]+([+._-][a-z0-9]+)*:[a-fA-F0-9]{32,}$")

CONFIG_SCHEMA = PolicyConfigSchema(
    properties={
        "allowedRegistries": {
            "type": "array",
            "description": "Registry hosts, optionally with a path prefix, images may come from (host[:port][/path]).",
            "items": {"type": "string", "pattern": REGISTRY_PREFIX},
            "minItems": 1,
            "uniqueItems": True,
            "default": DEFAULT_ALLOWED_REGISTRIES,
        },
    }
)


def repository(image: str) -> str:
    """The image without tag or digest, with Docker Hub's implicit host written out."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name = name[: len(name) - len(last)] + last.split(":", 1)[0]
    first = name.split("/", 1)[0]
    if "/" not in name or not ("." in first or ":" in first or first == "localhost"):
        name = f"docker.io/{name}" if "/" in name else f"docker.io/library/{name}"
    return name


def tag(image: str) -> Optional[str]:
    last = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def pin_problem(image: str) -> Optional[str]:
    if DIGEST.search(image):
        return None
    found = tag(image)
    if found is None:
        return "has no tag, so the node pulls :latest"
    if found == "latest":
        return "uses the tag latest"
    return None


def registry_allowed(image: str, allowed: list[str]) -> bool:
    name = repository(image)
    return any(name == prefix or name.startswith(prefix.rstrip("/") + "/") for prefix in allowed)


def images_of(kind: Optional[str], props: Mapping) -> Iterator[tuple[str, str, str]]:
    """(where, image, its field's JSON pointer) for every image reference of an object."""
    spec = objects.pod_spec(kind, props)
    if spec is None:
        return
    at = objects.pod_spec_pointer(kind)
    for container in objects.containers(spec):
        if container.image:
            yield f"{'init container' if container.init else 'container'} {container.name!r}", container.image, f"{at}{container.at}/image"
        for variable, value in container.env.items():
            if variable.endswith("_IMAGE") and value:
                yield f"env {variable} of container {container.name!r}", value, f"{at}{container.env_at(variable)}"


def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
    config: Mapping[str, Any] = args.get_config()
    allowed = [str(r) for r in config.get("allowedRegistries", DEFAULT_ALLOWED_REGISTRIES)]
    kind = objects.kind_of(args.resource_type)
    # One report per image and problem: the validator names its own image in five containers and two env vars.
    places: dict[str, list[str]] = {}
    fields: dict[str, str] = {}
    for where, image, field in images_of(kind, args.props):
        places.setdefault(image, []).append(where)
        fields.setdefault(image, field)
    for image, where in places.items():
        what = f"{objects.describe(kind or '?', args.props, args.name)}: image {image!r} ({', '.join(where)})"
        problem = pin_problem(image)
        if problem:
            # the part of the reference at fault (components/config/images.py tags each part with its key)
            report_at(report, f"{fields[image]}#/version",
                      f"{what} {problem}; fix: pin a version tag or a sha256 digest (gpu-stack:versions.*, nodeAgent.image)")
        if not registry_allowed(image, allowed):
            report_at(
                report, f"{fields[image]}#/repository",
                f"{what} comes from {repository(image).rsplit('/', 1)[0]}, outside allowedRegistries "
                f"({', '.join(allowed)}); fix: pull it through an allowed registry (gpu-stack:registry.override, "
                "nodeAgent.image) or allow the registry in this stack's policies/config/<stack>.json"
            )


POLICY = ResourceValidationPolicy(
    name=NAME,
    description="[medium: supply chain] Every image is pinned by tag (not latest) or digest and comes from an allowed registry.",
    enforcement_level=EnforcementLevel.ADVISORY,
    validate=validate,
    config_schema=CONFIG_SCHEMA,
)
