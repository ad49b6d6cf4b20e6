"""The papers are cited from inside the repository: docs/papers.md describes each version, and
the code, the docs and the pipeline files cite a paper section or that page, never a file kept
outside the repository."""

from __future__ import annotations

import re
import subprocess

from conftest import ROOT


def test_papers_md_describes_every_version_and_the_settings():
    text = (ROOT / "docs" / "papers.md").read_text()
    for version in ("000", "001", "002", "003", "004"):
        assert re.search(rf"^\| \*\*{version}\*\* \|", text, re.M), version
        assert re.search(rf"^### .*\b{version}\b", text, re.M), f"no section on {version}"
    assert "## The settings the code follows" in text


def test_no_reference_points_outside_the_repository():
    r = subprocess.run(["grep", "-rn", "SPEC", "posrnn_cli", "docs", "params.yaml", "dvc.yaml"],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.stdout == "", r.stdout
