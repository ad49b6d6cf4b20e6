"""The README and docs speak of the tool: no work-item numbers or words about how it was built,
every time carries its machine, and every local link resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_no_words_about_how_the_project_was_built(path):
    text = path.read_text()
    for pattern in (r"\bissue #?\d+", r"\bsession\b", r"\blent\b", r"\bwork item", r"\bprevious session"):
        assert not re.search(pattern, text, re.I), f"{path.name}: {pattern}"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_local_links_resolve(path):
    for target in re.findall(r"\]\(([^)#]+)\)", path.read_text()):
        if "://" in target:
            continue
        resolved = (path.parent / target).resolve()
        assert resolved.is_relative_to(ROOT) and resolved.exists(), f"{path.name} links to {target}, outside the repository or missing"
