"""Test support: stack config bags, renders of the real program under mocks (cached per input), object lookups."""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import pickle
import sys
from pathlib import Path
from typing import Any, Callable

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from components.config import stack_file_config  # noqa: E402
from gpustack.mockrun import Recording, run_program  # noqa: E402

STACKS = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))


def stack_document(stack: str) -> dict[str, Any]:
    """The stack file as data, a copy of its own (parsed once per process: collection alone reads them hundreds of
    times)."""
    return copy.deepcopy(_parsed(stack))


@functools.lru_cache(maxsize=None)
def _parsed(stack: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())


def stack_config(stack: str) -> dict[str, Any]:
    """The stack's `gpu-stack:` settings as plain data, to be modified by a test and turned into a bag."""
    return copy.deepcopy(_parsed(stack)["config"])


def bag(config: dict[str, Any]) -> dict[str, str]:
    return stack_file_config({"config": config})


def config_problems(config: dict[str, Any]) -> list[tuple[str, str]]:
    """The (key, message) problems load_config refuses `config` with; fails the test if it is accepted."""
    import pytest

    from components.config import ConfigError, load_config

    with pytest.raises(ConfigError) as caught:
        load_config(bag(config))
    return caught.value.problems


def setter(*path: Any, value: Any):
    """An edit that sets `value` at `path` (section keys and list indices) of a config, creating sections."""

    def change(config: dict[str, Any]) -> None:
        node = config
        for key in path[:-1]:
            node = node.setdefault(key, {}) if isinstance(key, str) else node[key]
        node[path[-1]] = value

    return change


_cache: dict[str, Recording] = {}


def render(config: dict[str, Any], *, stack: str = "test", preview: bool = False) -> Recording:
    """The program's render of a stack config, once per run: kept in this process and, for the other test worker,
    in the run's render folder (tests/conftest.py). Callers never edit a render in place (policytest.edited)."""
    return cached_run_program(stack, bag(config), preview=preview)


def cached_run_program(stack: str, bag_: dict[str, str], **options: Any) -> Recording:
    """`run_program` through the run's cache; `gpustack diff` under test renders stack files through it too
    (tests/conftest.py), so a stack file and the same config given to `render` share one render."""
    given = {k: sorted(v) if isinstance(v, (set, frozenset, list, tuple)) else v for k, v in options.items() if v}
    key = json.dumps({"stack": stack, "bag": bag_, "options": given}, sort_keys=True, default=str)
    if key not in _cache:
        _cache[key] = _shared(key, lambda: run_program(stack, bag_, **options))
    return _cache[key]


def _shared(key: str, run: Callable[[], Recording]) -> Recording:
    folder = os.environ.get("GPUSTACK_TEST_RENDER_CACHE")
    if not folder:
        return run()
    path = Path(folder) / f"{hashlib.sha256(key.encode()).hexdigest()}.pickle"
    if path.exists():
        return pickle.loads(path.read_bytes())
    recording = run()
    # Written whole under a temporary name, then renamed: the other worker reads a complete file or none.
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_bytes(pickle.dumps(recording))
    os.replace(partial, path)
    return recording


def render_stack(stack: str, *, preview: bool = False) -> Recording:
    return render(stack_config(stack), stack=stack, preview=preview)


@functools.lru_cache(maxsize=None)
def stack_objects(stack: str) -> tuple[dict[str, Any], ...]:
    """Every Kubernetes object of a shipped stack's render, in apply order (what its golden holds)."""
    from gpustack.render import objects_in_order

    return tuple(obj for _, obj in objects_in_order(render_stack(stack)))


def objects(recording: Recording, kind: str) -> dict[str, dict[str, Any]]:
    """Kubernetes objects of one kind, by name, as the manifests render them."""
    from gpustack.render import kubernetes_object

    found = {}
    for r in recording.registrations:
        if r.is_kubernetes_object and r.inputs.get("kind") == kind:
            obj = kubernetes_object(r)
            found[obj["metadata"]["name"]] = obj
    return found


def container(obj: dict[str, Any], name: str) -> dict[str, Any]:
    spec = obj["spec"]["template"]["spec"]
    for c in [*spec.get("initContainers", []), *spec["containers"]]:
        if c["name"] == name:
            return c
    raise KeyError(f"{obj['metadata']['name']} has no container {name}")


def env_of(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


# The stacks a per-stack check runs on in `make test`; the rest run as `matrix` cases (`make test-all`). Between
# them they cover every driver mode, runtime, sharing strategy, VM flavour and DRA.
REPRESENTATIVE = ("prod-managed", "prod-precompiled", "onprem-host-driver", "dra", "kubevirt")


def per_stack(stacks=None, keep=REPRESENTATIVE):
    """`stacks` (default: every stack) as pytest params, those outside `keep` marked `matrix`."""
    import pytest

    return [s if s in keep else pytest.param(s, marks=pytest.mark.matrix) for s in (stacks or STACKS)]


def stack_files(folder: Path, stack: str, before: dict[str, Any], after: dict[str, Any]) -> tuple[Path, Path]:
    """Two stack files of `stack` (its shipped file with `before`'s and `after`'s config), for `gpustack diff`."""
    paths = []
    for side, config in (("base", before), ("head", after)):
        document = stack_document(stack)
        document["config"] = config
        (folder / side).mkdir(exist_ok=True)
        path = folder / side / f"Pulumi.{stack}.yaml"
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        paths.append(path)
    return paths[0], paths[1]
