"""No dead code: vulture finds no unused function, class, variable or attribute in the project's code, beyond the
names tests/vulture_allowlist.py lists with a reason."""

from __future__ import annotations

import subprocess
import sys

from components.states.order import STATE_ORDER
from stacktest import ROOT

SCOPE = ("__main__.py", "components", "gpustack", "policies", "node_images", "benchmarks")
# Tests are not scanned, so a helper only a test calls shows as unused; the policy pack's fact modules are generated
# copies of the catalogs (`python -m gpustack pack-facts`), scanned as their originals.
EXCLUDED = ("node_images/node-agent/tests", "*/facts/*")
# 60 is vulture's default: every unused name it can see; what it cannot see is in the allow-list.
MIN_CONFIDENCE = 60
# Registered by decorator, called by their registry: pydantic's validators, the API-server rules.
DECORATORS = ("@field_validator", "@model_validator", "@rule", "@stack_rule")


def vulture(*paths: str) -> subprocess.CompletedProcess:
    # GpuStack builds each state with the method named after the module order.py gives it: derived, not listed.
    builders = ",".join(f"_{state.component}" for state in STATE_ORDER)
    return subprocess.run(
        [sys.executable, "-m", "vulture", *paths, "tests/vulture_allowlist.py", "--exclude", ",".join(EXCLUDED),
         "--min-confidence", str(MIN_CONFIDENCE), "--ignore-decorators", ",".join(DECORATORS),
         "--ignore-names", builders],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )


def test_vulture_finds_no_dead_code():
    result = vulture(*SCOPE)
    assert result.stdout == "" and result.returncode == 0, result.stdout + result.stderr


def test_vulture_would_see_a_function_nobody_calls(tmp_path):
    module = tmp_path / "orphan.py"
    module.write_text("def used():\n    return 1\n\n\ndef orphan():\n    return 2\n\n\nused()\n")
    result = vulture(str(module))
    assert "unused function 'orphan'" in result.stdout and "'used'" not in result.stdout


def test_every_allowed_name_is_still_in_the_code():
    """A stale entry would hide the next unused name spelt the same way."""
    import re

    allowed = re.findall(r"^_\.(\w+)", (ROOT / "tests" / "vulture_allowlist.py").read_text(), flags=re.M)
    code = "\n".join(p.read_text() for folder in SCOPE[1:] for p in (ROOT / folder).rglob("*.py")
                     if "/tests/" not in str(p) and "/facts/" not in str(p) and ".venv" not in p.parts)
    assert [name for name in allowed if not re.search(rf"\b{name}\b", code)] == []
