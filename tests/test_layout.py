"""The house stays readable in `ls`: no code module grows past the size a reader takes in at once (docs/layout.md).

Tests are left out: a behaviour's cases read best side by side, however many there are."""

from __future__ import annotations

from stacktest import ROOT

MAX_LINES = 500
CODE_DIRS = ("components", "gpustack", "node_images", "policies")
SKIPPED_PARTS = {"tests", "venv", ".venv", "__pycache__"}


def code_modules() -> list:
    modules = [ROOT / "__main__.py"]
    for folder in CODE_DIRS:
        modules += [p for p in (ROOT / folder).rglob("*.py") if not SKIPPED_PARTS & set(p.relative_to(ROOT).parts)]
    return sorted(modules)


def test_the_walk_finds_the_code():
    names = {str(p.relative_to(ROOT)) for p in code_modules()}
    assert {"components/stack.py", "gpustack/__main__.py", "node_images/node-agent/gpustack_agent/inventory.py",
            "policies/__main__.py"} <= names
    assert not any("/tests/" in name for name in names)


def test_no_code_module_is_over_500_lines():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in code_modules()}
    assert {name: lines for name, lines in sizes.items() if lines > MAX_LINES} == {}
