"""The stack file: the result checked by load_config (naming the input each refused key came from), written as
YAML under a comment header that carries the report, and the policy-pack config the stack needs to pass
`gpustack check` (host paths the pack cannot follow on its own)."""

from __future__ import annotations

from typing import Any, Mapping, Optional

import yaml

from components.config import ConfigError, StackConfig, load_config, stack_file_config
from components.config.monitoring import DEFAULT_JOB_MAPPING_DIR
from gpustack.importer.common import ImportResult
from gpustack.importer.output import count_line, per_source


def validate(result: ImportResult) -> StackConfig:
    """load_config on the result, with each refused key's source named (ConfigError otherwise)."""
    try:
        return load_config(stack_file_config(result.document()))
    except ConfigError as exc:
        problems = []
        for path, message in exc.problems:
            origin = _origin(path, result.origins)
            problems.append((f"{path} (from {origin})" if origin else path, message))
        raise ConfigError(problems) from None


def _origin(path: str, origins: Mapping[str, str]) -> Optional[str]:
    best = None
    for key, origin in origins.items():
        if path == key or path.startswith(key + ".") or path.startswith(key + "["):
            if best is None or len(key) > len(best[0]):
                best = (key, origin)
    return best[1] if best else None


def stack_yaml(result: ImportResult, command: str) -> str:
    lines = [f"# Imported from ClusterPolicy {result.source} by `{command}`."]
    lines += [f"# {count_line(source, found)}" for source, found in per_source(result)]
    lines.append("# Review before `pulumi up`; not carried over from the operator's configuration:")
    # One comment line per item: a newline inside a value would end the comment and start YAML.
    lines += [f"#   {' '.join(item.render().splitlines())}" for item in result.not_carried] or ["#   (nothing)"]
    if result.no_effect:
        lines.append("# Without effect in the operator, so not carried either:")
        lines += [f"#   {' '.join(item.render().splitlines())}" for item in result.no_effect]
    body = yaml.safe_dump(result.document(), sort_keys=False, default_flow_style=False, width=120)
    return "\n".join(lines) + "\n" + body


PRIVILEGED_POLICY = "privileged-only-where-needed"
IMAGES_POLICY = "images-pinned"
# The pack's own default for images-pinned (policies/gpu_stack_policies/images.py DEFAULT_ALLOWED_REGISTRIES).
PACK_DEFAULT_REGISTRIES = ("nvcr.io", "registry.k8s.io")


def _registry_of(image: str) -> str:
    """host[:port]/path of an image reference, without its last path segment, tag or digest."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        name = name[: name.rindex(":")]
    return name.rsplit("/", 1)[0]


def policy_config(cfg: StackConfig) -> dict[str, Any]:
    """The policies/config/<stack>.json an imported stack needs to pass `gpustack check` cleanly: the registries
    its images come from (the node agent's, a mirror, operands' own repositories), and host paths the imported keys
    add that the pack does not follow by itself (it follows hostPaths.*, the toolkit's install and runtime paths,
    not the exporter's job-mapping directory)."""
    document: dict[str, Any] = {}
    registries = list(PACK_DEFAULT_REGISTRIES)
    sources = [cfg.registry.override, _registry_of(cfg.node_agent.image) if cfg.node_agent.image else None]
    sources += [o.repository for o in _operand_overrides(cfg)]
    for source in sorted({s.rstrip("/") for s in sources if s}, key=len):
        # A prefix already listed allows its paths (the pack matches registry prefixes).
        if not any(source == r or source.startswith(r + "/") for r in registries):
            registries.append(source)
    if registries != list(PACK_DEFAULT_REGISTRIES):
        document[IMAGES_POLICY] = {"allowedRegistries": registries}
    extra: dict[str, list[str]] = {}
    jobs = cfg.dcgm_exporter.hpc_job_mapping
    if cfg.components.dcgm_exporter and jobs.enabled and jobs.directory != DEFAULT_JOB_MAPPING_DIR:
        extra["nvidia-dcgm-exporter"] = [jobs.directory]
    if extra:
        document[PRIVILEGED_POLICY] = {"additionalHostPaths": extra}
    return document


def _operand_overrides(cfg: StackConfig) -> list[Any]:
    operands = cfg.operands
    return [getattr(operands, name) for name in type(operands).model_fields if getattr(operands, name) is not None]
