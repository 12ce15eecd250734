"""Rewrite tests/golden/<stack>/manifests.yaml for every stack, and tests/golden/driver/<feature>.yaml for every
feature of the driver pod: `.venv/bin/python tests/regenerate_golden.py`.

Run it after an intended change and commit the diff: the reviewer reads the effect on the cluster there.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from driverfeatures import FEATURES, golden_path, rendered  # noqa: E402
from gpustack.render import manifests_yaml  # noqa: E402
from stacktest import STACKS, render_stack  # noqa: E402

GOLDEN = ROOT / "tests" / "golden"


def main() -> None:
    for stack in STACKS:
        target = GOLDEN / stack / "manifests.yaml"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(manifests_yaml(render_stack(stack)))
        print(f"wrote {target.relative_to(ROOT)}")
    for feature in FEATURES:
        target = golden_path(feature)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(rendered(feature))
        print(f"wrote {target.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
