"""`posrnn compare`: the paired difference B − A with its 95% interval and one sentence saying what
it means — on the same test sequences for one run a side, per seed (runs paired by seed, the
Student-t interval the scorecard reads) for several — in 80 columns."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from posrnn_cli.analysis import compare as cmp
from posrnn_cli.cli import app
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.results.stats import bootstrap_ci, t_interval

runner = CliRunner()
from conftest import tiny_train

TINY = tiny_train(length=5, iterations=20, batch_size=16, warmup=2, threads=1, seed=None, checkpoint_every=None,
                  n_test=64)


def cli(*argv, columns: int = 80):
    r = runner.invoke(app, [str(a) for a in argv], env={"COLUMNS": str(columns)})
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    out = {}
    for pe in ("none", "sinusoidal"):
        for seed in (1, 2, 3):
            out[pe, seed] = root / f"a-long-directory-name-for-the-{pe}-run-of-seed-{seed}"
            code, text, err = cli("train", *TINY, "--pe", pe, "--seed", seed, "--out", out[pe, seed], "--json")
            assert code == 0, err
    return out


# ---- the library -------------------------------------------------------------------------------------
def test_per_sequence_is_the_paired_bootstrap_of_b_minus_a():
    rng = np.random.default_rng(0)
    a, b = rng.random(200), rng.random(200) + 0.1
    d = cmp.per_sequence(a, b, n_resamples=2000)
    assert d["mean"] == pytest.approx(float((b - a).mean()))
    assert (d["ci_low"], d["ci_high"]) == pytest.approx(bootstrap_ci(b - a, n_resamples=2000))
    assert d["over"] == "sequences" and d["n"] == 200
    with pytest.raises(PosrnnError, match="different numbers of test sequences"):
        cmp.per_sequence(a, b[:10])


def test_per_seed_is_the_t_interval_over_seeds():
    d = cmp.per_seed([1, 2, 3], [0.50, 0.52, 0.49], [0.55, 0.56, 0.55])
    mean, lo, hi = t_interval([0.05, 0.04, 0.06])
    assert d["by_seed"] == pytest.approx([0.05, 0.04, 0.06])
    assert (d["mean"], d["ci_low"], d["ci_high"]) == pytest.approx((mean, lo, hi))
    one = cmp.per_seed([1], [0.5], [0.6])
    assert one["ci_low"] is None and "one seed gives no interval" in cmp.meaning(one, cmp.SCORES["accuracy"], "A", "B")


def test_pairing_by_seed_refuses_mismatched_or_repeated_seeds():
    assert cmp.pair_by_seed([(2, "a2"), (1, "a1")], [(1, "b1"), (2, "b2")]) == [(1, "a1", "b1"), (2, "a2", "b2")]
    with pytest.raises(PosrnnError, match=r"seeds differ \(A: 1 2; B: 1 3\)"):
        cmp.pair_by_seed([(1, "a"), (2, "a")], [(1, "b"), (3, "b")])
    with pytest.raises(PosrnnError, match="two runs of seed 1"):
        cmp.pair_by_seed([(1, "a"), (1, "a")], [(1, "b"), (2, "b")])


@pytest.mark.parametrize("mean,lo,hi,score,words", [
    (0.048, 0.035, 0.061, "accuracy", "PE ahead of vanilla by +0.048 [+0.035, +0.061] token accuracy over 3 seeds: "
                                      "the interval excludes 0"),
    (-0.048, -0.061, -0.035, "accuracy", "PE behind vanilla by -0.048"),
    (0.01, -0.02, 0.04, "accuracy", "PE and vanilla cannot be told apart: PE − vanilla = +0.010 [-0.020, +0.040]"),
    (-0.2, -0.3, -0.1, "perplexity", "PE ahead of vanilla by -0.200"),  # a lower NLL is better
])
def test_the_meaning_says_who_is_ahead_and_whether_the_interval_excludes_zero(mean, lo, hi, score, words):
    d = {"over": "seeds", "n": 3, "mean": mean, "ci_low": lo, "ci_high": hi}
    assert words in cmp.meaning(d, cmp.SCORES[score], "vanilla", "PE")


def test_vs_splits_the_sides_and_quoted_globs_expand(tmp_path):
    for name in ("pe-s1", "pe-s2", "van-s1", "van-s2"):
        (tmp_path / name).mkdir()
    a, b = cmp.expand([str(tmp_path / "van-s*"), "vs", str(tmp_path / "pe-s*")])
    assert [p.name for p in a] == ["van-s1", "van-s2"] and [p.name for p in b] == ["pe-s1", "pe-s2"]
    assert cmp.expand(["x", "y"]) == ([cmp.Path("x"), cmp.Path("y")], [])
    for bad, words in ((["x", "vs"], "needs runs on both sides"), (["x", "vs", "y", "vs", "z"], "appears 2 times"),
                       ([str(tmp_path / "nothing*")], "no run directory matches")):
        with pytest.raises(PosrnnError, match=words):
            cmp.expand(bad)


# ---- the command ---------------------------------------------------------------------------------------
def test_compare_two_runs_prints_the_per_sequence_difference_in_80_columns(runs):
    a, b = runs["none", 1], runs["sinusoidal", 1]
    code, out, err = cli("compare", a, b, "--device", "cpu")
    assert code == 0, err
    assert max(len(line) for line in out.splitlines()) <= 80, out
    assert "runs differing in model.pe" in out and "token acc" in out  # the table users know, kept
    runs_column = "".join(line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│"))
    assert f"{a}{b}" in runs_column, out  # the run names fold, never cut
    ra, rb = (json.loads((r / "eval.json").read_text()) for r in (a, b))
    diff = rb["token_accuracy"] - ra["token_accuracy"]
    flat = " ".join(out.split())
    assert f"PE (sinusoidal) − vanilla = {diff:+.3f}" in flat or f"by {diff:+.3f}" in flat, out
    assert "on 64 paired test sequences" in flat and "95% paired bootstrap over the test sequences" in flat
    assert any(line.count("[") == line.count("]") == 1 for line in out.splitlines()), "the interval split across lines"
    code, js, err = cli("compare", a, b, "--device", "cpu", "--json")
    rows = json.loads(js)  # still the list of evaluations, the second one carrying its difference from the first
    assert [r["pe"] for r in rows] == ["none", "sinusoidal"] and "difference" not in rows[0]
    assert rows[1]["difference"]["mean"] == pytest.approx(diff) and rows[1]["difference"]["over"] == "sequences"


def test_compare_seeds_vs_seeds_prints_the_t_interval_over_seeds(runs):
    a = [runs["none", s] for s in (1, 2, 3)]
    b = [runs["sinusoidal", s] for s in (3, 1, 2)]  # paired by seed, not by position
    code, js, err = cli("compare", *a, "vs", *b, "--device", "cpu", "--json")
    assert code == 0, err
    d = json.loads(js)["difference"]
    acc = {(pe, s): json.loads((runs[pe, s] / "eval.json").read_text())["token_accuracy"] for pe, s in runs}
    per_seed = [acc["sinusoidal", s] - acc["none", s] for s in (1, 2, 3)]
    assert d["seeds"] == [1, 2, 3] and d["by_seed"] == pytest.approx(per_seed)
    assert (d["mean"], d["ci_low"], d["ci_high"]) == pytest.approx(t_interval(per_seed))
    code, out, err = cli("compare", *a, "vs", *b, "--device", "cpu")
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 80, out
    assert "over 3 seeds" in " ".join(out.split()) and "95% Student t over seeds" in " ".join(out.split())


def test_compare_warns_when_the_runs_differ_in_more_than_the_compared_setting(runs, tmp_path):
    """The tour's trap: one side resumed to a larger budget differs in PE *and* iterations."""
    a = runs["none", 1]
    code, out, err = cli("compare", a, runs["sinusoidal", 1], "--device", "cpu")
    assert code == 0 and "warning" not in out, out  # one setting apart: no warning
    longer = tmp_path / "pe-longer"
    args = list(TINY)
    args[args.index("--iterations") + 1] = "24"
    assert cli("train", *args, "--pe", "sinusoidal", "--seed", 1, "--out", longer, "--json")[0] == 0
    code, out, err = cli("compare", a, longer, "--device", "cpu")
    flat = " ".join(out.split())
    assert code == 0 and "warning: the runs differ in 2 settings (model.pe, train.iterations)" in flat, out
    assert all(len(line) <= 80 for line in out.splitlines() if "/" not in line), out  # only run paths may not fold
    code, js, err = cli("compare", a, longer, "--device", "cpu", "--json")
    assert "train.iterations" in json.loads(js)[1]["difference"]["warning"]


def test_one_run_a_side_says_its_interval_covers_these_two_seeds_only():
    d = {"over": "sequences", "n": 64, "mean": 0.05, "ci_low": 0.02, "ci_high": 0.08, "seeds": [0, 111]}
    words = cmp.meaning(d, cmp.SCORES["accuracy"], "vanilla", "PE")
    assert "the interval covers the test sequences of these two runs (seeds 0 and 111) only, not seeds" in words
    assert "posrnn compare A1 A2 … vs B1 B2 …" in words
    assert "(seed 3 each)" in cmp.meaning({**d, "seeds": [3, 3]}, cmp.SCORES["accuracy"], "vanilla", "PE")
    over_seeds = cmp.meaning({**d, "over": "seeds", "n": 3}, cmp.SCORES["accuracy"], "vanilla", "PE")
    assert "covers the test sequences" not in over_seeds


def test_the_differ_warning_names_differing_seeds():
    assert cmp.differ_warning(["model.pe"], [1, 1]) is None
    warning = cmp.differ_warning(["model.pe"], [0, 111])
    assert warning.startswith("the runs differ in 2 settings (model.pe, train.seed 0 vs 111)")
    assert cmp.differ_warning(["model.pe", "train.iterations"]).startswith("the runs differ in 2 settings")


def test_compare_one_run_a_side_names_its_seeds_and_what_seeds_need(runs):
    code, out, err = cli("compare", runs["none", 1], runs["sinusoidal", 2], "--device", "cpu")
    flat = " ".join(out.split())
    assert code == 0 and "warning: the runs differ in 2 settings (model.pe, train.seed 1 vs 2)" in flat, out
    assert "these two runs (seeds 1 and 2) only, not seeds" in flat and "A1 A2 … vs B1 B2 …" in flat, out
    code, js, err = cli("compare", runs["none", 1], runs["sinusoidal", 2], "--device", "cpu", "--json")
    assert json.loads(js)[1]["difference"]["seeds"] == [1, 2]


def test_compare_refuses_mismatched_seeds_in_one_line_before_evaluating(runs):
    a = [runs["none", 1], runs["none", 2]]
    b = [runs["sinusoidal", 1], runs["sinusoidal", 3]]
    before = {p: sorted(x.name for x in p.iterdir()) for p in a + b}
    code, out, err = cli("compare", *a, "vs", *b, "--device", "cpu")
    assert (code == 1 and err.startswith("error: the sides' seeds differ (A: 1 2; B: 1 3)")
            and len(err.splitlines()) == 1)
    assert before == {p: sorted(x.name for x in p.iterdir()) for p in a + b}


def test_piped_tables_are_80_columns_without_columns_and_follow_it(runs, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    r = runner.invoke(app, ["compare", str(runs["none", 1]), str(runs["sinusoidal", 2]), "--device", "cpu"])
    assert r.exit_code == 0 and max(len(line) for line in r.stdout.splitlines()) <= 80
    code, out, _ = cli("compare", runs["none", 1], runs["sinusoidal", 2], "--device", "cpu", columns=60)
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 60, out


def test_compare_takes_threads_as_eval_does(runs):
    import torch

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        code, out, err = cli("compare", runs["none", 1], runs["sinusoidal", 1], "--device", "cpu", "--threads", "1")
        assert code == 0, err
        assert torch.get_num_threads() == 1
        code, out, err = cli("compare", runs["none", 1], runs["sinusoidal", 1], "--threads", "0")
        assert code == 2 and "--threads" in err  # a usage error (one line through the console entry point)
    finally:
        torch.set_num_threads(before)
