"""Shared test helpers for the node agent.

The agent is not an installed package (the image copies it next to the entrypoint),
so its directory goes on sys.path here. Fixtures are recorded API objects; helpers
are exposed as pytest fixtures because importing this conftest by name could pick
up another conftest.py in the repository.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

AGENT_DIR = Path(__file__).resolve().parents[1]
FIXTURES_DIR = Path(__file__).resolve().parent / "fixtures"

if str(AGENT_DIR) not in sys.path:
    sys.path.insert(0, str(AGENT_DIR))


def _load(name: str) -> Any:
    with open(FIXTURES_DIR / f"{name}.json", encoding="utf-8") as handle:
        return json.load(handle)


def _apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies it, on a copy."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _apply_merge_patch(result.get(key), value)
    return result


@pytest.fixture
def load_fixture() -> Callable[[str], Any]:
    """Fresh copy of tests/fixtures/<name>.json on every call, so tests may mutate it."""
    return _load


@pytest.fixture
def apply_patch() -> Callable[[Any, Any], Any]:
    return _apply_merge_patch


@pytest.fixture
def pool_config() -> dict[str, Any]:
    return _load("config-node-pools")
