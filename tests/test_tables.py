"""One table check for every reader: a result table whose types, ranges, per-seed values, mean,
interval or key cells are wrong is refused by plot and by the scorecard alike (so plot never
draws what the scorecard refuses), and by aggregation before it writes one."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from posrnn_cli.analysis.plots import draw_all
from posrnn_cli.analysis.scorecard import load_table
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.files.io import read_csv
from posrnn_cli.common.results.tables import check_table

from conftest import ROOT
LITE = ROOT / "results" / "lite" / "tables"


def edited(tmp_path: Path, name: str, edit) -> Path:
    """A copy of lite's ``name`` table with ``edit(rows)`` applied (rows of strings, header kept)."""
    out = tmp_path / "tables"
    out.mkdir(exist_ok=True)
    with open(LITE / f"{name}.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    edit(rows)
    with open(out / f"{name}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return out


def first(**cells):
    def edit(rows):
        rows[0].update(cells)
    return edit


CASES = [
    ("fig2", first(token_accuracy_by_seed="0.9 0.9 0.9"), "but their mean over the seeds' values"),
    ("fig2", first(token_accuracy="0.7"), "but their mean over the seeds' values"),
    ("fig2", first(token_accuracy_by_seed="0.653687 0.577759"), "not one finite number per seed (3)"),
    ("fig2", first(token_accuracy_by_seed="1.2 0.5 0.1", token_accuracy="0.6", token_accuracy_ci_high="1.2"),
     "token_accuracy_by_seed = 1.2 lies outside [0, 1]"),
    ("fig2", first(sequence_accuracy="-0.1"), "sequence_accuracy = -0.1 lies outside [0, 1]"),
    ("fig2", first(pe=" none"), "with a stray space"),
    ("fig2", first(model="gru "), "with a stray space"),
    ("fig2", first(pe="sinusodial"), "not a pe posrnn knows"),
    ("fig2", first(n_seeds="2"), "n_seeds = 2 but 3 seeds are listed"),
    ("fig2", first(seeds="111 111 333"), "not distinct integers"),
    ("fig2", first(n_sequences="many"), "not a positive count"),
    ("fig2", first(token_accuracy_ci_low="0.62", token_accuracy_ci_high="0.6"), "outside its CI"),
    ("fig2", lambda rows: rows.append(dict(rows[0])), "describe the same cell"),
    ("lm", first(perplexity_min="30"), "perplexity_min = 30, but their least"),
    ("lm", first(perplexity_by_seed="0.5 0.7 0.9", perplexity="0.7", perplexity_min="0.5", perplexity_max="0.9"),
     "lies outside [1, inf]"),
    ("stability", first(stability_by_seed="1.5 1.5 1.5", stability="1.5", ci_high="1.6"), "lies outside [-1, 1]"),
]


@pytest.mark.parametrize("name, edit, words", CASES)
def test_plot_and_scorecard_refuse_the_same_tables(tmp_path, name, edit, words):
    tables = edited(tmp_path, name, edit)
    with pytest.raises(PosrnnError) as e:
        check_table(read_csv(tables / f"{name}.csv"), tables / f"{name}.csv")
    assert words in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(PosrnnError, match="line|lines"):
        draw_all(tables, tmp_path / "figs")
    assert not (tmp_path / "figs").exists()
    with pytest.raises(PosrnnError, match="line|lines"):
        load_table(tables, name)


def test_every_committed_lite_table_passes_the_check(tmp_path):
    for path in sorted(LITE.glob("*.csv")):
        check_table(read_csv(path), path)
    shutil.copytree(LITE, tmp_path / "t")
    assert load_table(tmp_path / "t", "fig2") is not None


def test_the_one_check_refuses_an_empty_measure_and_a_ragged_row(tmp_path):
    """What the scorecard once checked again on its own (a required measure left empty, a row
    longer than its header) is in the one table check, for plot and scorecard alike."""
    tables = edited(tmp_path, "fig2", first(token_accuracy=""))
    rows = read_csv(tables / "fig2.csv")
    with pytest.raises(PosrnnError, match="token_accuracy is None, not a finite number"):
        check_table(rows, tables / "fig2.csv", ["token_accuracy"])
    check_table(rows[1:], tables / "fig2.csv", ["token_accuracy"])
    with pytest.raises(PosrnnError, match="line 2: token_accuracy is None"):
        load_table(tables, "fig2")
    ragged = [{**rows[1], None: ["9", "9"]}]  # as csv.DictReader gives a row longer than its header
    with pytest.raises(PosrnnError, match="line 2 has more cells than the header"):
        check_table(ragged, tables / "fig2.csv")
