"""Every object of every stack, validated strictly against every Kubernetes version the stack declares."""

from __future__ import annotations

import pytest

from components.config import load_config
from gpustack import schema
from gpustack.render import objects_in_order
from stacktest import bag, per_stack, render_stack, stack_config


# `make check-stacks` (CI) validates every stack; here the representative ones, the rest in `make test-all`.
@pytest.mark.parametrize("stack", per_stack())
def test_every_object_is_schema_valid_for_each_declared_version(stack):
    versions = load_config(bag(stack_config(stack))).cluster.kubernetes_versions
    problems = [p for _, obj in objects_in_order(render_stack(stack)) for v in versions for p in schema.validate(obj, v)]
    assert problems == []


def test_daemonsets_are_valid_on_the_oldest_and_newest_supported_kubernetes():
    for _, obj in objects_in_order(render_stack("prod-managed")):
        for version in ("1.25", "1.37"):
            if version == "1.25" and obj["kind"].startswith("ValidatingAdmissionPolicy"):
                continue  # the node-bound policies: rendered only when every declared version is 1.30 or later
            assert schema.validate(obj, version) == [], (obj["kind"], obj["metadata"]["name"], version)
