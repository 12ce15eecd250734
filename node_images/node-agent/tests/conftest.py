"""Shared test helpers for the node agent.

The agent is not an installed package (the image copies it next to the entrypoint),
so its directory goes on sys.path here. Fixtures are recorded API objects; helpers
are exposed as pytest fixtures because importing this conftest by name could pick
up another conftest.py in the repository.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

AGENT_DIR = Path(__file__).resolve().parents[1]
FIXTURES_DIR = Path(__file__).resolve().parent / "fixtures"

if str(AGENT_DIR) not in sys.path:
    sys.path.insert(0, str(AGENT_DIR))

from agenttest import apply_merge_patch  # noqa: E402


def _load(name: str) -> Any:
    with open(FIXTURES_DIR / f"{name}.json", encoding="utf-8") as handle:
        return json.load(handle)


@pytest.fixture
def load_fixture() -> Callable[[str], Any]:
    """Fresh copy of tests/fixtures/<name>.json on every call, so tests may mutate it."""
    return _load


@pytest.fixture
def apply_patch() -> Callable[[Any, Any], Any]:
    return apply_merge_patch


@pytest.fixture
def pool_config() -> dict[str, Any]:
    return _load("config-node-pools")


@pytest.fixture(autouse=True)
def termination_log(tmp_path, monkeypatch) -> Path:
    """Where a gate run through `__main__` writes its termination message: never the real /dev/termination-log
    of the machine running the tests."""
    from gpustack_agent.api import kube

    path = tmp_path / "termination-log"
    monkeypatch.setattr(kube, "DEFAULT_TERMINATION_MESSAGE_PATH", str(path))
    return path


@pytest.fixture
def paced_config() -> dict[str, Any]:
    """The pools of config-node-pools.json as a version 2 document, the shape Pulumi renders now: removals paced
    one node at a time in gpu-operator without draining, and each container pool assigned its driver DaemonSet."""
    config = _load("config-node-pools")
    config["version"] = 2
    config["removal"] = {"maxUnavailable": 1, "drain": False, "namespace": "gpu-operator"}
    drivers = {"a100": "nvidia-driver-daemonset-a100", "h100": "nvidia-driver-daemonset-h100"}
    for pool in config["pools"]:
        if pool["name"] in drivers:
            pool["labels"]["gpu-stack/driver"] = drivers[pool["name"]]
    return config
