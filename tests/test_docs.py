"""Every local link in the README and docs points at a file inside the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_local_links_resolve(path):
    for target in re.findall(r"\]\(([^)#]+)\)", path.read_text()):
        if "://" in target:
            continue
        resolved = (path.parent / target).resolve()
        assert resolved.is_relative_to(ROOT) and resolved.exists(), f"{path.name} links to {target}, outside the repository or missing"
