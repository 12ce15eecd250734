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
