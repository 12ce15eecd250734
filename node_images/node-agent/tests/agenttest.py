"""Fakes the agent's tests share: Kubernetes API objects and clients, a stop() that ends loops, a log recorder."""

from __future__ import annotations

import itertools
import json
from typing import Any, Callable
from unittest import mock

from kubernetes import client


def model(obj: Any, kind: str) -> Any:
    return client.ApiClient().deserialize(json.dumps(obj), kind, "application/json")


def fake_api() -> mock.MagicMock:
    api = mock.MagicMock()
    api.api_client = client.ApiClient()
    return api


def stop_after(calls: int) -> Callable[[], bool]:
    """stop() that says False for the first `calls` checks, then True."""
    answers = itertools.chain([False] * calls, itertools.repeat(True))
    return lambda: next(answers)


class Recorder:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def __call__(self, record: dict[str, Any]) -> None:
        self.records.append(record)

    def events(self) -> list[str]:
        return [r["event"] for r in self.records]
