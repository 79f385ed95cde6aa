"""Every relative link in README.md and docs/*.md points at a file that exists, and every
``page.md#anchor`` at a heading of that page (GitHub's anchor rule)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """The text outside fenced code blocks and inline code spans."""
    kept, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            kept.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(kept)


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces to hyphens."""
    found: set[str] = set()
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if fenced or not re.match(r"#{1,6} ", line):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        name, n = slug, 1
        while name in found:
            name, n = f"{slug}-{n}", n + 1
        found.add(name)
    return found


def links(page: Path) -> list[str]:
    return [
        t for t in LINK.findall(prose(page.read_text(encoding="utf-8"))) if not re.match(r"[a-z][a-z0-9+.-]*:", t)
    ]  # http:, https:, mailto: are not checked


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert not broken, broken


def test_the_anchor_rule_matches_githubs():
    page = ROOT / "docs" / "GPU.md"
    assert "the-updates-memory-measured-on-the-cpu" in anchors(page)
    assert "will-it-fit-a-15-gb-t4-the-arithmetic" in anchors(page)
