"""Tables fit the terminal: piped output is as wide as `COLUMNS` says (80 without it), identifiers
are never cut, and the scorecard's terminal view is one line per claim with the detail behind
--detail. Read from the committed lite tables (nothing is trained here)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from posrnn_cli.cli import app

from conftest import ROOT  # noqa: E402 - the repository
TABLES = ROOT / "results" / "lite" / "tables"
runner = CliRunner()


def cli(*argv, columns=80) -> str:
    env = {} if columns is None else {"COLUMNS": str(columns)}
    r = runner.invoke(app, [str(a) for a in argv], env=env)
    assert r.exit_code == 0, r.output
    return r.stdout


def widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


@pytest.fixture(scope="module")
def rows():
    return json.loads(cli("scorecard", "lite", "--results", TABLES, "--json"))


@pytest.mark.parametrize("columns", [80, 100])
def test_the_scorecard_is_one_line_per_claim_within_columns(rows, columns):
    out = cli("scorecard", "lite", "--results", TABLES, columns=columns)
    assert widest(out) <= columns, out
    lines = out.splitlines()
    for r in rows:  # each claim on one line: its whole id first, then both verdicts in words
        (line,) = [ln for ln in lines if ln.split(" ", 1)[0] == r["id"]]
        words = " ".join(line.split()[1:])
        assert words.startswith(r["at_regime"]["verdict"]) and r["indication"]["verdict"] in words, line
        needs = r["at_regime"]["seeds_needed"] or r["indication"]["seeds_needed"]
        if needs and needs["clear"] is not None and needs["power80"] is not None:
            assert line.rstrip().endswith(f"{needs['clear']:,}/{needs['power80']:,}"), line
    assert len(lines) < len(rows) + 30  # not hundreds of lines
    assert "--detail" in out and "scorecard.md" in out  # where the rest is


def test_the_scorecard_piped_without_columns_is_80_wide(rows, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    assert widest(cli("scorecard", "lite", "--results", TABLES, columns=None)) <= 80


def test_the_detailed_scorecard_fits_and_never_cuts_a_claim_id(rows):
    out = cli("scorecard", "lite", "--results", TABLES, "--detail")
    assert widest(out) <= 80
    blocks, block = [], []
    for line in out.splitlines():  # the claim column of each row, its folded lines joined
        if line.startswith(("├", "└")) and block:
            blocks.append("".join(block))
            block = []
        elif line.startswith("│"):
            block.append(line.split("│")[1].strip())
    assert [b[:len(r["id"])] for b, r in zip(blocks, rows)] == [r["id"] for r in rows]


def test_listings_wrap_to_columns():
    for argv in (["profile", "list", "--params", ROOT / "params.yaml"], ["sweep", "--list"]):
        out = cli(*argv, columns=70)
        assert widest(out) <= 70, out
