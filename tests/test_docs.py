"""The README and docs/ as a reader meets them: short, linked, and every measured number backed by the file the
code wrote (results/published/, checked by tools.published)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tools.published import PUBLISHED_DIR, check_markdown, check_published, unpublished_sections

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
_LINK = re.compile(r"\]\((?!https?://|#)([^)#\s]+)")
MAX_README_LINES = 300


def test_the_readme_is_short():
    assert len(README.read_text().splitlines()) <= MAX_README_LINES


def test_every_readme_number_is_a_published_value_and_none_is_unpublished():
    text = README.read_text()
    assert check_markdown(text, ROOT) == []
    assert unpublished_sections(text) == []


def test_every_published_folder_is_as_its_source_json_lists_it():
    assert [str(p) for p in check_published(ROOT / PUBLISHED_DIR)] == []


@pytest.mark.parametrize("page", DOCS, ids=[p.name for p in DOCS])
def test_every_docs_number_is_published_or_marked_unpublished(page):
    assert [str(p) for p in check_markdown(page.read_text(), ROOT, page=page.name)] == []


@pytest.mark.parametrize("page", [README, *DOCS], ids=["README.md", *[p.name for p in DOCS]])
def test_links_stay_inside_the_repository_and_resolve(page):
    for target in _LINK.findall(page.read_text()):
        resolved = (page.parent / target).resolve()
        assert resolved.is_relative_to(ROOT), f"{page.name} links outside the repository: {target}"
        assert resolved.exists(), f"{page.name} links to a missing file: {target}"


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / t).resolve() for t in _LINK.findall(README.read_text())}
    assert [p.name for p in DOCS if p.resolve() not in linked] == []
