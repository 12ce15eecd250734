"""README.md stays short and sends readers to docs/; every relative link and anchor in them resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from stacktest import ROOT

from gpustack.docs import slug

README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE = re.compile(r"``.*?``|`[^`\n]*`")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


def links(page: Path) -> list[str]:
    return LINK.findall(CODE.sub("", FENCE.sub("", page.read_text())))


def test_the_readme_stays_a_front_page():
    assert len(README.read_text().splitlines()) <= 250


def test_the_readme_links_every_docs_page():
    linked = {target.split("#")[0] for target in links(README)}
    assert {f"docs/{page.name}" for page in PAGES} <= linked
    assert "docs/stack.schema.json" in linked


def test_the_readme_keeps_the_two_commands_on_a_fresh_machine():
    text = README.read_text()
    assert "make render     # builds .venv from the pinned requirements, renders the `dev` stack into out/dev/" in text
    assert "make test       # builds .venv if needed, runs the test suite (what .ci/run runs)" in text


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_and_anchors_resolve(page):
    broken = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_the_readme_states_the_limits_the_config_enforces():
    from components.config import limits

    text = " ".join((ROOT / "README.md").read_text().split())
    stated = {
        f"{limits.MAX_NODE_POOLS} node pools", f"{limits.MAX_WAVES} waves", f"{limits.MAX_MIG_LAYOUTS} MIG layouts",
        f"at most {limits.MAX_MIG_LAYOUT_ENTRIES} per-GPU entries", f"{limits.MAX_PULL_SECRETS} pull secrets",
        f"{limits.MAX_TOLERATIONS} tolerations", f"{limits.MAX_ENV} env vars", f"{limits.MAX_ARGS} args per operand",
        f"{limits.MAX_MAP_ENTRIES} entries in any label", f"{limits.ANNOTATIONS_MAX_BYTES // 1024} KiB of annotations",
        f"{limits.MAX_EXTRA_METRICS} extra DCGM metrics", f"at most {limits.MAX_UNAVAILABLE_COUNT}",
    }
    assert not {s for s in stated if s not in text}, "README.md's limits differ from components/config/limits.py"
