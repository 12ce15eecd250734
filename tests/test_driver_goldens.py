"""The driver pod, one golden per feature (tests/driverfeatures.py): built by the pure planners the program uses,
so a change to one feature of the driver pod shows in that feature's golden, reviewable in a few dozen lines."""

from __future__ import annotations

import difflib

import pytest
import yaml

from driverfeatures import FEATURES, GOLDEN, golden_path, rendered
from stacktest import stack_objects


@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_the_driver_pod_of_each_feature_is_its_golden(feature):
    want = golden_path(feature).read_text()
    got = rendered(feature)
    diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), f"golden/{feature}", "rendered", n=2))
    assert got == want, f"{feature}: the driver pod changed; if intended, run `python tests/regenerate_golden.py`\n{diff[:6000]}"


def test_every_golden_is_a_feature():
    assert {p.stem for p in GOLDEN.glob("*.yaml")} == set(FEATURES)


@pytest.mark.parametrize("feature, stack", [("base", None), ("openshift-driver-toolkit", "openshift"), ("vgpu-manager", "kubevirt")])
def test_the_pure_plan_is_what_the_program_registers(feature, stack):
    """The planners are the program's own: a shipped stack's registered DaemonSet is its feature golden's."""
    stack = stack or "dev"
    registered = {o["metadata"]["name"]: o for o in stack_objects(stack) if o["kind"] == "DaemonSet"}
    for document in yaml.safe_load_all(golden_path(feature).read_text()):
        name = document["metadata"]["name"]
        assert registered[name]["spec"] == document["spec"], name
        assert registered[name]["metadata"]["labels"] == document["metadata"]["labels"], name
