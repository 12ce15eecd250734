"""The state order (components/states/order.py) is the one table of states: GpuStack builds each with the method
named after the state's module, so a state cannot be ordered without a builder, nor a builder left out of the
order (issue 37: order.py named modules that did not exist, beside a builders dict kept in step by hand)."""

from __future__ import annotations

import importlib.util
import inspect

from components.stack import GpuStack
from components.states.order import STATE_ORDER


# Every state module is in components/states/; the driver-like ones (the vGPU manager) in its driver room.
STATE_PACKAGES = ("states", "states.driver")


def test_every_state_names_a_module_that_exists():
    missing = [
        s.name for s in STATE_ORDER
        if not any(importlib.util.find_spec(f"components.{package}.{s.component}") for package in STATE_PACKAGES)
    ]  # fmt: skip
    assert not missing


def test_the_builders_are_exactly_the_states_modules():
    builders = {
        name[1:] for name, method in inspect.getmembers(GpuStack, inspect.isfunction)
        if name.startswith("_") and list(inspect.signature(method).parameters) == ["self", "after"]
    }  # fmt: skip
    assert builders == {s.component for s in STATE_ORDER}
    assert len({s.component for s in STATE_ORDER}) == len(STATE_ORDER) == len({s.name for s in STATE_ORDER})
