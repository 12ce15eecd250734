"""The digest of a stack's configuration, which the validation gate's Job carries (components/states/validation_gate.py):
a new digest re-runs the gate after `pulumi up`, the same one leaves the finished Job alone."""

from __future__ import annotations

import hashlib
import json

from components.config import StackConfig
from components.config.digest_keys import without_added_defaults


def stack_digest(cfg: StackConfig) -> str:
    # warnings off: a tagged number inside the union of a MIG layout (components/config/keys.py) makes pydantic-core
    # warn while it writes the same value
    dumped = cfg.model_dump(mode="json", by_alias=True, warnings=False)
    # keys added since stacks were deployed stay out while at their defaults (components/config/digest_keys.py)
    kept = without_added_defaults(StackConfig, dumped)
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]
