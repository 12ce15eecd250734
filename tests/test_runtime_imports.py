"""A deployment installs requirements.txt only: the Pulumi program must not import anything else."""

from __future__ import annotations

import ast
import sys

from stacktest import ROOT

# Import names of the packages pinned in requirements.txt (pulumi-policy serves the policy pack, not the program).
# `components` and `node_images` are the project's own packages, found next to __main__.py.
RUNTIME = {"pulumi", "pulumi_kubernetes", "pydantic", "yaml", "kubernetes_validate", "components", "node_images"}


def imported_top_level_names(path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_program_imports_only_runtime_requirements_and_the_standard_library():
    program = [ROOT / "__main__.py", *sorted((ROOT / "components").glob("*.py")), ROOT / "node_images" / "catalog.py"]
    for path in program:
        foreign = imported_top_level_names(path) - RUNTIME - set(sys.stdlib_module_names) - {"__future__"}
        assert not foreign, f"{path.relative_to(ROOT)} imports {sorted(foreign)}, which requirements.txt does not install"
