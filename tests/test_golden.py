"""Golden renders: the checked-in manifests of each stack are exactly what the program renders today.

A failure here is a change to what lands on clusters. If it is intended, run
`.venv/bin/python tests/regenerate_golden.py` and commit the diff with the change.
"""

from __future__ import annotations

import pytest

from gpustack.render import manifests_yaml
from stacktest import ROOT, STACKS, render_stack


@pytest.mark.parametrize("stack", STACKS)
def test_render_matches_golden(stack):
    golden = ROOT / "tests" / "golden" / stack / "manifests.yaml"
    assert golden.is_file(), f"no golden render for {stack}: run tests/regenerate_golden.py"
    assert manifests_yaml(render_stack(stack)) == golden.read_text()


def test_every_golden_belongs_to_a_stack_or_is_the_driver_pods_per_feature():
    # tests/golden/driver: one golden per feature of the driver pod (tests/driverfeatures.py)
    assert sorted(p.name for p in (ROOT / "tests" / "golden").iterdir() if p.is_dir()) == sorted([*STACKS, "driver"])
