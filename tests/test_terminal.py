"""Tables fit the terminal: piped output is as wide as `COLUMNS` says (80 without it), identifiers
are never cut, and the scorecard's terminal view is one line per claim measured somewhere (the rest counted in one
line), with the detail behind --detail. Read from the committed lite tables (nothing is trained here)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from posrnn_cli.cli import app

from conftest import ROOT
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
    nowhere = [r for r in rows if r["at_regime"]["verdict"] == r["indication"]["verdict"] == "not measured"]
    assert lines[0].startswith("Scorecard of profile lite")  # the header names the profile
    assert f"{len(nowhere)} of {len(rows)} claims measured nowhere in this profile" in " ".join(out.split())
    for r in rows:  # each claim measured somewhere on one line: its whole id first, then both verdicts in words
        found = [ln for ln in lines if ln.split(" ", 1)[0] == r["id"]]
        if r in nowhere:  # behind the count line
            assert not found, found
            continue
        (line,) = found
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
    """--detail: one block a claim, its id whole on the block's first line, wrapped at words."""
    out = cli("scorecard", "lite", "--results", TABLES, "--detail")
    assert widest(out) <= 80
    heads = [ln.split()[0] for ln in out.splitlines() if ln and not ln.startswith(" ") and "[" in ln]
    assert heads == [r["id"] for r in rows]
    assert len(out.splitlines()) < 25 * len(rows)


def test_listings_wrap_to_columns():
    for argv in (["profile", "list", "--params", ROOT / "params.yaml"], ["sweep", "--list"]):
        out = cli(*argv, columns=70)
        assert widest(out) <= 70, out


def test_one_claim_is_asked_for_by_id_and_wraps_at_word_boundaries(rows):
    """``--claim ID`` prints that claim alone, in full; every line breaks at a space, so each
    word of the claim's text and its id come out whole; a near-miss id gets a one-line error."""
    r = next(r for r in rows if len(r["indication"]["measured"]) > 200)
    out = cli("scorecard", "lite", "--results", TABLES, "--claim", r["id"], columns=60)
    assert widest(out) <= 60
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    assert lines[0].split()[0] == r["id"] and not any(o["id"] in out for o in rows if o["id"] != r["id"]
                                                         and not o["id"].startswith(r["id"]))
    words = set(" ".join(lines).split())
    assert set(r["claim"].split()) <= words and set(r["indication"]["measured"].split()) <= words
    bad = runner.invoke(app, ["scorecard", "lite", "--results", str(TABLES), "--claim", r["id"][:-1] + "x"])
    assert (bad.exit_code == 1 and f"did you mean {r['id']!r}" in bad.output
            and len(bad.output.strip().splitlines()) == 1)
