"""Makes gpu-stack's pure-data modules importable from the pack.

The Pulumi CLI runs the pack from `policies/` in its own virtualenv (pulumi, pulumi-policy and PyYAML only), so
`components` is not on its path. The pack reads the same facts the program is built from instead of a copy
that could drift: the GPU model catalog, the MIG geometry, the deploy labels per workload type and the state
order. Those modules (`components/catalogs/catalog.py`, `mig_catalog.py`, `consts.py`, `order.py`) import nothing but
the standard library and each other; modules that need pulumi_kubernetes or pydantic are never imported here.
"""

from __future__ import annotations

import sys
from pathlib import Path

# policies/gpu_stack_policies/_project.py -> the repository root, wherever the checkout lives.
REPOSITORY_ROOT = Path(__file__).resolve().parents[2]

if str(REPOSITORY_ROOT) not in sys.path:
    sys.path.append(str(REPOSITORY_ROOT))
