"""A view says what it is: ``scorecard --claim`` (some claims) is never written where a whole
scorecard goes (``--out``, ``--page``), and a page's generated blocks are found only by markers
outside code fences, paired and not nested; a page refused is left byte-identical, and one that is
not a regular file is never opened."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posrnn_cli.analysis import report
from posrnn_cli.cli import app
from posrnn_cli.common.errors import PosrnnError

from conftest import ROOT

ROWS = json.loads((ROOT / "results" / "lite" / "scorecard" / "scorecard.json").read_text())["rows"]
ARGS = ["scorecard", "lite", "--results", str(ROOT / "results" / "lite" / "tables"), "--params",
        str(ROOT / "params.yaml")]


def lines_of(r) -> list[str]:
    return [ln for ln in r.output.splitlines() if ln.strip()]


def test_claim_with_out_is_refused_and_writes_nothing(tmp_path):
    claim = ROWS[0]["id"]
    r = CliRunner().invoke(app, [*ARGS, "--claim", claim, "--out", str(tmp_path / "card")])
    assert r.exit_code != 0 and len(lines_of(r)) == 1 and "--claim" in r.output, r.output
    assert not (tmp_path / "card").exists()


def test_claim_with_page_is_refused_and_leaves_the_page(tmp_path):
    page = tmp_path / "results.md"
    page.write_text("# r\n\n<!-- results:lite -->\nold\n<!-- /results:lite -->\n")
    before = page.read_bytes()
    r = CliRunner().invoke(app, [*ARGS, "--claim", ROWS[0]["id"], "--page", str(page)])
    assert r.exit_code != 0 and len(lines_of(r)) == 1 and page.read_bytes() == before, r.output


FENCED = "```markdown\n<!-- results:lite -->\nan example of the markers\n<!-- /results:lite -->\n```\n"


def test_markers_inside_a_code_fence_are_text_not_a_block(tmp_path):
    page = tmp_path / "p.md"
    page.write_text(f"# p\n\n{FENCED}\n<!-- results:lite -->\nold\n<!-- /results:lite -->\n\n~~~\n"
                    "<!-- results:lite -->\n~~~\n")
    assert report.update_readme(page, ROWS, "lite") is True
    text = page.read_text()
    assert FENCED in text and "old" not in text and text.endswith("~~~\n<!-- results:lite -->\n~~~\n")
    only_fenced = tmp_path / "q.md"
    only_fenced.write_text(FENCED)
    with pytest.raises(PosrnnError, match="no results block for lite"):
        report.update_readme(only_fenced, ROWS, "lite")
    assert only_fenced.read_text() == FENCED


@pytest.mark.parametrize("text, words", [
    ("<!-- results:lite -->\n<!-- results:findings-lite -->\nx\n<!-- /results:findings-lite -->\n"
     "<!-- /results:lite -->\n", "do not nest"),
    ("<!-- results:lite -->\na\n<!-- results:lite -->\nb\n<!-- /results:lite -->\n", "do not nest"),
    ("<!-- results:lite -->\nold\n", "never closed"),
    ("old\n<!-- /results:lite -->\n", "not open"),
    ("<!-- results:lite -->\na\n<!-- /results:other -->\n<!-- /results:lite -->\n", "not open"),
    ("<!-- results:lite -->\na\n<!-- /results:lite -->\n<!-- results:lite -->\nb\n<!-- /results:lite -->\n",
     "second time"),
])
def test_nested_unbalanced_or_repeated_markers_are_refused_and_change_nothing(tmp_path, text, words):
    page = tmp_path / "p.md"
    page.write_text(text)
    r = CliRunner().invoke(app, [*ARGS, "--page", str(page), "--quiet"])
    assert r.exit_code != 0 and len(lines_of(r)) == 1 and words in r.output, r.output
    assert page.read_text() == text


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "directory"])
@pytest.mark.parametrize("option", [[], ["--across"]])
def test_a_page_that_is_not_a_regular_file_is_never_opened(tmp_path, kind, option):
    page = tmp_path / "page.md"
    if kind == "fifo":
        os.mkfifo(page)
    elif kind == "directory":
        page.mkdir()
    else:
        page = Path("/dev/zero")

    def boom(*_):
        raise AssertionError("the page was opened")
    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(60)
    try:
        r = CliRunner().invoke(app, [*ARGS, *option, "--page", str(page)])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert r.exit_code != 0 and len(lines_of(r)) == 1 and "not a regular file" in r.output, r.output
