"""Puts the project root and this folder on sys.path; the shared helpers live in stacktest.py. Gives the test
workers of one run a shared folder for renders (stacktest.render): a stack config one worker rendered, the other
reads instead of rendering again."""

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

RENDER_CACHE_ENV = "GPUSTACK_TEST_RENDER_CACHE"

HERE = Path(__file__).resolve().parent
for path in (HERE.parent, HERE):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))


@pytest.fixture(autouse=True, scope="session")
def _cli_renders_through_the_run_cache():
    """The CLI under test (`check`, `render`, `diff`, `graph`, the generated pages) renders the same stack configs
    test after test: a render depends on the stack name, its config and the run options only, so each is run once.
    Real processes (`python -m gpustack ...` in a subprocess, a git ref's own program) still render for real."""
    import gpustack.__main__ as cli_module
    import gpustack.checking as checking_module
    import gpustack.diff as diff_module
    import gpustack.graph as graph_module
    import gpustack.security as security_module
    from stacktest import cached_run_program

    modules = (cli_module, checking_module, diff_module, graph_module, security_module)
    originals = [module.run_program for module in modules]
    for module in modules:
        module.run_program = cached_run_program
    yield
    for module, original in zip(modules, originals, strict=True):
        module.run_program = original


def pytest_configure(config):
    # The controller (or a run without workers) makes the folder; workers inherit it through the environment.
    if not hasattr(config, "workerinput") and RENDER_CACHE_ENV not in os.environ:
        config._render_cache = tempfile.mkdtemp(prefix="gpustack-renders-")
        os.environ[RENDER_CACHE_ENV] = config._render_cache


def pytest_unconfigure(config):
    folder = getattr(config, "_render_cache", None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop(RENDER_CACHE_ENV, None)
