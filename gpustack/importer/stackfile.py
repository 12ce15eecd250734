"""The stack file: the result checked by load_config (naming the input each refused key came from), and written as
YAML under a comment header that carries the not-carried report."""

from __future__ import annotations

from typing import Mapping, Optional

import yaml

from components.config import ConfigError, StackConfig, load_config, stack_file_config
from gpustack.importer.common import ImportResult


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
    lines = [
        f"# Imported from ClusterPolicy {result.source} by `{command}`.",
        "# Review before `pulumi up`; not carried over from the operator's configuration:",
    ]
    # One comment line per item: a newline inside a value would end the comment and start YAML.
    lines += [f"#   {' '.join(item.render().splitlines())}" for item in result.not_carried] or ["#   (nothing)"]
    body = yaml.safe_dump(result.document(), sort_keys=False, default_flow_style=False, width=120)
    return "\n".join(lines) + "\n" + body
