"""Every field of the driver's config says what a change to it does to a node (components/config/driver_fields.py):
reinstalls the driver (it moves DRIVER_CONFIG_DIGEST) or replaces the pod and keeps the driver (it does not). Issue
37: the digest's fields were a hand-kept list, so a new `driver.*` key would never have reinstalled the driver."""

from __future__ import annotations

import copy
import inspect
import typing
from typing import Any

import pytest
from pydantic import BaseModel

from components.config import driver_extensions, load_config
from components.config.driver_fields import DIGESTED, DRIVER_FIELDS, POOL_DRIVER_FIELDS, Effect
from components.config.drivers import Driver, PoolDriver
from components.states.driver.targets import config_digest, plan_targets
from stacktest import bag, stack_config

BASE = stack_config("prod-managed")
DRIVER = "gpu-stack:driver"


def test_every_field_of_the_driver_config_is_classified():
    assert set(DRIVER_FIELDS) == set(Driver.model_fields)
    assert set(POOL_DRIVER_FIELDS) == set(PoolDriver.model_fields)


def _models_in(annotation: Any) -> set[type]:
    found = set()
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        found.add(annotation)
        for field in annotation.model_fields.values():
            found |= _models_in(field.annotation)
    for arg in typing.get_args(annotation):
        found |= _models_in(arg)
    return found


def test_every_driver_extension_model_sits_inside_a_classified_field():
    """A field's class covers its whole value: no extension model may hold settings outside the Driver fields."""
    reachable = set().union(*(_models_in(Driver.model_fields[name].annotation) for name in DRIVER_FIELDS))
    defined = [c for _, c in inspect.getmembers(driver_extensions, inspect.isclass)
               if issubclass(c, BaseModel) and c.__module__ == driver_extensions.__name__]
    assert defined
    for model in defined:  # the private bases count through their subclasses
        assert any(issubclass(used, model) for used in reachable), f"{model.__name__} is in no field of Driver"


# A value for each Driver field other than the stack's own: enough for load_config to accept it.
CHANGES: dict[str, tuple[str, Any]] = {
    "kernel_module_type": ("kernelModuleType", "proprietary"),
    "licensing_config": ("licensingConfig", {"configMapName": "gridd"}),
    "repo_config": ("repoConfig", {"configMapName": "apt-mirror", "files": ["a.list"]}),
    "cert_config": ("certConfig", {"name": "internal-ca", "files": ["root.crt"]}),
    "kernel_module_config": ("kernelModuleConfig", {"name": "module-params", "files": ["nvidia.conf"]}),
    "virtual_topology_config": ("virtualTopologyConfig", "vgpu-topology"),
    "secret_env": ("secretEnv", "driver-proxy"),
    "extra_volumes": ("extraVolumes", [{"name": "tuning", "mountPath": "/etc/tuning", "configMap": {"name": "tuning"}}]),
    "startup_probe": ("startupProbe", {"periodSeconds": 5}),
    "readiness_probe": ("readinessProbe", {"timeoutSeconds": 9}),
    "liveness_probe": ("livenessProbe", {}),
    "host_network": ("hostNetwork", True),
}
# `mode` and `branch` change the image itself (the precompiled tests pin those digests).
UNCHANGED_HERE = {"mode", "branch"}


def digests(config: dict[str, Any]) -> dict[str, str]:
    cfg = load_config(bag(config))
    return {t.daemonset: config_digest(t) for t in plan_targets(cfg, "r/driver")}


@pytest.mark.parametrize("field", sorted(CHANGES))
def test_a_change_moves_the_digest_exactly_when_the_field_reinstalls_the_driver(field):
    key, value = CHANGES[field]
    changed = copy.deepcopy(BASE)
    changed[DRIVER][key] = value
    moved = digests(changed) != digests(BASE)
    assert moved == (DRIVER_FIELDS[field] is not Effect.REPLACES_POD), f"{field}: {DRIVER_FIELDS[field].value}"


def test_every_driver_field_has_a_change_here():
    assert set(CHANGES) | UNCHANGED_HERE == set(DRIVER_FIELDS)
    assert DIGESTED <= set(CHANGES)
