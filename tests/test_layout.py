"""The house stays readable: no function runs longer than a reader holds at once, and no code module grows past the
size a reader takes in (docs/layout.md).

The module cap leaves tests out (a behaviour's cases read best side by side, however many there are); the function
cap holds for tests and benchmarks too."""

from __future__ import annotations

import ast

from stacktest import ROOT

MAX_LINES = 500
# A module whose length is the length of a table read top to bottom, with the cap it keeps instead and why.
LONGER_MODULES = {
    "components/stack.py": (600, "GpuStack: one method per state, in the state order, each under the function cap; "
                                 "split across files (as a mixin did), the order would no longer read in one place"),
}
MAX_FUNCTION_LINES = 80
CODE_DIRS = ("components", "gpustack", "node_images", "policies")
SKIPPED_PARTS = {"tests", "venv", ".venv", "__pycache__"}


def code_modules() -> list:
    modules = [ROOT / "__main__.py"]
    for folder in CODE_DIRS:
        modules += [p for p in (ROOT / folder).rglob("*.py") if not SKIPPED_PARTS & set(p.relative_to(ROOT).parts)]
    return sorted(modules)


def test_the_walk_finds_the_code():
    names = {str(p.relative_to(ROOT)) for p in code_modules()}
    assert {"components/stack.py", "gpustack/__main__.py", "node_images/node-agent/gpustack_agent/inventory/inventory.py",
            "policies/__main__.py"} <= names
    assert not any("/tests/" in name for name in names)


def test_no_code_module_is_over_500_lines():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in code_modules()}
    assert {name: lines for name, lines in sizes.items() if lines > LONGER_MODULES.get(name, (MAX_LINES,))[0]} == {}


def functions_over(limit: int, paths) -> dict[str, int]:
    found = {}
    for path in paths:
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit:
                found[f"{shown}:{node.lineno} {node.name}"] = node.end_lineno - node.lineno + 1
    return found


def all_python() -> list:
    # the project's own folders only: a walk of the whole checkout would read every installed package in .venv
    folders = [*CODE_DIRS, "tests", "benchmarks"]
    return sorted({ROOT / "__main__.py", *(p for folder in folders for p in (ROOT / folder).rglob("*.py")
                                          if not {"venv", ".venv", "__pycache__"} & set(p.relative_to(ROOT).parts))})


def test_no_function_is_over_80_lines():
    assert functions_over(MAX_FUNCTION_LINES, all_python()) == {}


def test_the_function_cap_counts_a_methods_lines_from_def_to_its_last(tmp_path):
    module = tmp_path / "long.py"
    body = "        x = 1\n" * (MAX_FUNCTION_LINES - 1)
    module.write_text(f"class A:\n    def fits(self):\n{body}\n    def over(self):\n{body}        x = 2\n")
    assert functions_over(MAX_FUNCTION_LINES, [module]) == {"long.py:83 over": MAX_FUNCTION_LINES + 1}
