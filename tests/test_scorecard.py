"""The reproduction scorecard: each test kind's verdict flips where it should, on fabricated
aggregate tables with per-seed values; every rule that guards a verdict (seed sets, budgets,
regime, models, seeds, baseline effects, power, checkpoints) flips it; claims.yaml is well
formed; the scorecard files are written whole."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from posrnn_cli.analysis import scorecard as sc
from posrnn_cli.common.results import stats
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.files.io import write_csv

from fabricate import (CLAIMS, DO, FEW, INC, LITE, NM, NR, R, UP, at, dual, ev, ind, irie,
                       lm, score, stab, with_params)


# ---- statistics -----------------------------------------------------------------------------
def test_t_interval_and_its_quantiles():
    assert stats.t975(2) == pytest.approx(4.303) and stats.t975(1000) == pytest.approx(1.9623, abs=0.001)
    m, lo, hi = stats.t_interval([1.0, 2.0, 3.0])
    assert m == 2.0 and hi - m == pytest.approx(4.303 / math.sqrt(3), rel=1e-4) and m - lo == pytest.approx(hi - m)
    assert math.isnan(stats.t_interval([1.0])[1])


def test_hierarchical_bootstrap_includes_seed_spread():
    rng = np.random.default_rng(0)
    seeds = [rng.binomial(1, p, size=1024).astype(float) for p in (0.6, 0.7, 0.8)]
    h = stats.hierarchical(seeds, n_resamples=2000)
    pooled = stats.bootstrap_ci(np.concatenate(seeds), n_resamples=2000)
    assert h["n_seeds"] == 3 and len(h["by_seed"]) == 3 and h["ci_low"] <= h["mean"] <= h["ci_high"]
    assert (h["ci_high"] - h["ci_low"]) > 3 * (pooled[1] - pooled[0])  # seeds, not just sequences
    one = stats.hierarchical(seeds[:1], n_resamples=2000)
    assert one["ci_high"] - one["ci_low"] == pytest.approx(
        np.subtract(*stats.bootstrap_ci(seeds[0], n_resamples=2000)[::-1]), rel=0.25)


# ---- threshold ------------------------------------------------------------------------------
def test_a_cell_in_its_authors_full_block_says_so():
    """A full-block row's cell names its block, so a measured string cannot pass it off as the
    core alone; a mixer row (no block column, or "mixer") reads as before."""
    from posrnn_cli.analysis.scorecard.core import cell_label

    row = {"model": "hawk", "vocab_size": 16, "length": 12, "hidden_size": 48}
    assert cell_label(row) == "Hawk V=16 L=12 H=48"
    assert cell_label({**row, "block": "mixer"}) == "Hawk V=16 L=12 H=48"
    assert cell_label({**row, "block": "full"}) == "Hawk (full block) V=16 L=12 H=48"
    assert cell_label({**row, "block": "full"}, skip=("block",)) == "Hawk V=16 L=12 H=48"


def test_threshold_verdicts(tmp_path):
    def fig2(pe_acc, none_acc, spread=0.005):
        return [ev("gru", "sinusoidal", 64, pe_acc, spread=spread), ev("gru", "none", 64, none_acc, spread=spread)]

    assert at(score(tmp_path, "fig2_gru_pe_95", fig2=fig2(0.99, 0.6))) == R
    assert at(score(tmp_path, "fig2_gru_pe_95", fig2=fig2(0.90, 0.6))) == DO     # ahead, below 0.95
    assert at(score(tmp_path, "fig2_gru_pe_95", fig2=fig2(0.90, 0.95))) == NR    # behind vanilla
    assert at(score(tmp_path, "fig2_gru_pe_95", fig2=fig2([0.93, 0.96, 0.98], [0.955, 0.95, 0.96]))) == INC


def test_off_regime_cells_give_an_indication_only(tmp_path):
    row = score(tmp_path, "fig2_gru_pe_95", fig2=[ev("gru", "sinusoidal", 64, 0.99, at=LITE),
                                                  ev("gru", "none", 64, 0.6, at=LITE)])
    assert at(row) == NM and "no cell at the papers' regime" in row["at_regime"]["reason"]
    assert ind(row) == R
    # a cell outside the paper's V range is off-regime too
    row = score(tmp_path, "fig2_gru_pe_95", fig2=[ev("gru", "sinusoidal", 16, 0.99), ev("gru", "none", 16, 0.6)])
    assert at(row) == NM and ind(row) == R


def test_arms_on_different_seeds_are_not_compared(tmp_path):
    row = score(tmp_path, "fig2_pe_ahead_largest_v",
                fig2=[ev("gru", "sinusoidal", 64, 0.9), ev("gru", "none", 64, 0.5, seeds=(444, 555, 666))])
    assert at(row) == NM and "different seeds" in row["at_regime"]["reason"]


def test_arms_with_different_budgets_are_not_compared(tmp_path):
    c = with_params("fig2_pe_ahead_largest_v", match=["model", "vocab_size", "length", "hidden_size"])
    row = score(tmp_path, c, fig2=[ev("gru", "sinusoidal", 64, 0.9), ev("gru", "none", 64, 0.5, iterations=1000)])
    assert at(row) == NM and "budgets differ" in row["at_regime"]["reason"]


def test_a_kind_reads_through_the_reading_it_is_given(tmp_path):
    """A kind takes its context as an argument: the Reading traces each comparison, forces the
    sides it names (the seeds an open verdict needs) and reads unrejected ones as open (Holm);
    the claim's budget_varies lets arms differ in the budget it names."""
    out = tmp_path / "r"
    out.mkdir()
    write_csv([ev("gru", "sinusoidal", 64, 0.9), ev("gru", "none", 64, 0.5, iterations=1000)], out / "fig2.csv")
    c = with_params("fig2_pe_ahead_largest_v", match=["model", "vocab_size", "length", "hidden_size"])
    ts = sc.TableSet(out)
    with pytest.raises(sc.NotMeasured, match="budgets differ"):
        sc.KINDS[c["kind"]].test(c, ts, sc.Reading.of(c))
    c = with_params("fig2_pe_ahead_largest_v", match=["model", "vocab_size", "length", "hidden_size"],
                    budget_varies=["iterations"])
    trace: list = []
    assert sc.KINDS[c["kind"]].test(c, ts, sc.Reading.of(c, trace)).verdict == sc.REPRODUCED
    (kind, lead, bound, side), = trace
    assert (kind, bound, side) == ("side", 0.0, "above") and lead.mean == pytest.approx(0.4)
    key = sc.sort_key(lead, bound)
    assert sc.KINDS[c["kind"]].test(c, ts, sc.Reading.of(c, force={key: "below"})).verdict == sc.NOT_REPRODUCED
    assert sc.KINDS[c["kind"]].test(c, ts, sc.Reading.of(c, rejected=frozenset())).verdict == sc.INCONCLUSIVE
    assert sc.KINDS[c["kind"]].test(c, ts, sc.Reading.of(c, rejected=frozenset({key}))).verdict == sc.REPRODUCED


def test_fewer_than_three_seeds_is_never_reproduced(tmp_path):
    two = (111, 222)
    row = score(tmp_path, "fig2_pe_ahead_largest_v",
                fig2=[ev("gru", "sinusoidal", 64, 0.9, seeds=two), ev("gru", "none", 64, 0.5, seeds=two)])
    assert (at(row) == FEW and "fewer than 3" in row["at_regime"]["reason"]
            and "reproduced" in row["at_regime"]["reason"])


def test_a_missing_model_makes_the_claim_partial(tmp_path):
    rows = [ev("gru", "sinusoidal", 64, 0.9), ev("gru", "none", 64, 0.5)]
    row = score(tmp_path, "fig2_pe_ahead_largest_v", fig2=rows)
    assert at(row) == R and row["at_regime"]["partial"] and row["at_regime"]["missing"] == ["lstm"]
    both = rows + [ev("lstm", "sinusoidal", 1024, 0.9), ev("lstm", "none", 1024, 0.5)]
    row = score(tmp_path, "fig2_pe_ahead_largest_v", fig2=both)
    assert at(row) == R and not row["at_regime"]["partial"]
    # one model failing fails the claim
    worse = rows + [ev("lstm", "sinusoidal", 1024, 0.5), ev("lstm", "none", 1024, 0.9)]
    assert at(score(tmp_path, "fig2_pe_ahead_largest_v", fig2=worse)) == NR
    summary = sc.summarize([score(tmp_path, "fig2_pe_ahead_largest_v", fig2=rows)])
    assert summary["papers"]["at_regime"][R] == 0 and summary["papers"]["at_regime"]["partial"] == {R: 1}


# ---- decline, ahead, trend -------------------------------------------------------------------
@pytest.mark.parametrize("small,large,verdict", [
    (0.9, 0.5, R),
    ([0.9, 0.5, 0.7], [0.5, 0.9, 0.7], INC),
    (0.5, 0.9, NR),
])
def test_decline(tmp_path, small, large, verdict):
    rows = [ev("gru", "none", 32, small), ev("gru", "none", 256, large)]
    assert at(score(tmp_path, "fig2_vanilla_degrades", fig2=rows)) == verdict


def test_decline_needs_two_vocabularies(tmp_path):
    assert at(score(tmp_path, "fig2_vanilla_degrades", fig2=[ev("gru", "none", 32, 0.9)])) == NM


def test_ahead_reads_the_largest_vocabulary_per_seed(tmp_path):
    small = [ev("gru", "sinusoidal", 32, 0.5), ev("gru", "none", 32, 0.9)]
    # PE ahead on every seed at the largest V, by varying amounts
    big = [ev("gru", "sinusoidal", 256, [0.80, 0.85, 0.90]), ev("gru", "none", 256, [0.70, 0.74, 0.79])]
    assert at(score(tmp_path, "fig2_pe_ahead_largest_v", fig2=small + big)) == R
    # ahead on the mean, behind on one seed: the interval crosses 0
    mixed = [ev("gru", "sinusoidal", 256, [0.80, 0.85, 0.70]), ev("gru", "none", 256, [0.70, 0.74, 0.79])]
    assert at(score(tmp_path, "fig2_pe_ahead_largest_v", fig2=small + mixed)) == INC


def test_ahead_lower_is_better_and_several_arms(tmp_path):
    rows = [ev("gru", "sinusoidal", 256, 0.9, dl=1.0), ev("gru", "none", 256, 0.5, dl=5.0)]
    assert at(score(tmp_path, "fig2_dl_improves", fig2=rows)) == R
    rows = [ev("gru", "sinusoidal", 256, 0.9, dl=5.0), ev("gru", "none", 256, 0.5, dl=1.0)]
    assert at(score(tmp_path, "fig2_dl_improves", fig2=rows)) == NR
    q = {"q1": 0.5, "q2": 0.8, "q3": 0.85, "q4": 0.9}
    rows = [dual("lstm", "none", c, acc, half=h, V=1024) for c in ("F/R", "R/R") for h, acc in q.items()]
    assert at(score(tmp_path, "dual_lstm_first_quarter", dual=rows)) == R
    rows = [dual("lstm", "none", c, 0.95 if h == "q1" else acc, half=h, V=1024) for c in ("F/R", "R/R")
            for h, acc in q.items()]
    assert at(score(tmp_path, "dual_lstm_first_quarter", dual=rows)) == NR


def test_ahead_min_difference_gives_direction_only(tmp_path):
    c = with_params("fig2_pe_ahead_largest_v", min_difference=0.2)
    rows = [ev("gru", "sinusoidal", 256, 0.6), ev("gru", "none", 256, 0.5)]
    assert at(score(tmp_path, c, fig2=rows)) == DO


def test_trend_of_the_lead(tmp_path):
    grows = [ev("gru", "sinusoidal", 32, 0.99), ev("gru", "none", 32, 0.97),
             ev("gru", "sinusoidal", 256, 0.95), ev("gru", "none", 256, 0.5)]
    assert at(score(tmp_path, "fig2_pe_lead_grows", fig2=grows)) == R
    shrinks = [ev("gru", "sinusoidal", 32, 0.9), ev("gru", "none", 32, 0.8),
               ev("gru", "sinusoidal", 256, 0.52), ev("gru", "none", 256, 0.5)]
    assert at(score(tmp_path, "fig2_pe_lead_grows", fig2=shrinks)) == NR


# ---- null claims -----------------------------------------------------------------------------
def length_rows(pe_acc, none_acc, spread=0.004):
    return [ev("lstm", pe, 2, a, at={"length": 128, "hidden_size": 512}, spread=spread)
            for pe, a in (("sinusoidal", pe_acc), ("none", none_acc))]


def test_no_gain_with_margin_and_power_guard(tmp_path):
    assert at(score(tmp_path, "length_no_help", length=length_rows(0.80, 0.80))) == R
    assert at(score(tmp_path, "length_no_help", length=length_rows(0.70, 0.80))) == R   # PE worse: no gain
    assert at(score(tmp_path, "length_no_help", length=length_rows(0.90, 0.80))) == NR  # a gain
    # both arms at chance (V = 2): the reference learned nothing, so silence proves nothing
    row = score(tmp_path, "length_no_help", length=length_rows(0.50, 0.50))
    assert at(row) == NM and "power guard" in row["at_regime"]["reason"]
    # seeds too spread for the margin: measured, shown, and underpowered (never "not measured")
    row = score(tmp_path, "length_no_help", length=[
        ev("lstm", "sinusoidal", 2, [0.7, 0.9, 0.8], at={"length": 128, "hidden_size": 512}),
        ev("lstm", "none", 2, [0.9, 0.7, 0.8], at={"length": 128, "hidden_size": 512})])
    assert at(row) == UP and "narrower than the margin" in row["at_regime"]["reason"]
    assert "gain +0.000" in row["at_regime"]["measured"]
    needs = row["at_regime"]["seeds_needed"]
    assert needs["now"] == 3 and needs["clear"] > 3 and needs["power80"] >= needs["clear"]
    # a wide interval wholly above the margin still refutes the null claim
    row = score(tmp_path, "length_no_help", length=[
        ev("lstm", "sinusoidal", 2, [0.95, 0.99, 0.85], at={"length": 128, "hidden_size": 512}),
        ev("lstm", "none", 2, [0.70, 0.72, 0.68], at={"length": 128, "hidden_size": 512})])
    assert at(row) == NR and row["at_regime"]["seeds_needed"] is None


def test_double_vanilla_against_fig2(tmp_path):
    fig2 = [ev("lstm", "none", 1024, 0.6)]
    assert at(score(tmp_path, "double_no_help", double=[ev("lstm", "dummy", 1024, 0.6)], fig2=fig2)) == R
    assert at(score(tmp_path, "double_no_help", double=[ev("lstm", "dummy", 1024, 0.7)], fig2=fig2)) == NR
    # double vanilla on other seeds than vanilla: not compared
    row = score(tmp_path, "double_no_help", double=[ev("lstm", "dummy", 1024, 0.6, seeds=(111, 222, 444))], fig2=fig2)
    assert at(row) == NM and "different seeds" in row["at_regime"]["reason"]


def test_lm_no_gain(tmp_path):
    row = score(tmp_path, "lm_no_gain", lm=[lm("none", [37.0, 37.5, 38.0]), lm("sinusoidal", [38.0, 38.5, 38.7])])
    assert at(row) == R
    assert at(score(tmp_path, "lm_no_gain",
                    lm=[lm("none", [40.0, 40.2, 40.4]), lm("sinusoidal", [36.0, 36.2, 36.4])])) == NR
    # the shipped mini corpus (1,000 pieces, 256 tokens) is outside the regime
    row = score(tmp_path, "lm_no_gain", lm=[lm("none", [37.0, 37.5, 38.0], V=1000, tokens=256),
                                            lm("sinusoidal", [38.0, 38.5, 38.7], V=1000, tokens=256)])
    assert at(row) == NM and "regime" in row["at_regime"]["reason"] and ind(row) == R
    row = score(tmp_path, "lm_no_gain", lm=[lm("none", [30.0, 40.0, 50.0]), lm("sinusoidal", [50.0, 30.0, 40.0])])
    assert (at(row) == UP and "power guard" in row["at_regime"]["reason"]
            and "relative gain" in row["at_regime"]["reason"])
    assert row["at_regime"]["seeds_needed"]["clear"] > 3


# ---- contrasts -------------------------------------------------------------------------------
def dual_block(model, vff, vfr, pff, pfr, V=64):
    return [dual(model, "none", "F/F", vff, V=V), dual(model, "none", "F/R", vfr, V=V),
            dual(model, "sinusoidal", "F/F", pff, V=V), dual(model, "sinusoidal", "F/R", pfr, V=V)]


def test_gap_contrast(tmp_path):
    rows = dual_block("gru", 0.95, 0.6, 0.99, 0.97) + dual_block("lstm", 0.95, 0.7, 0.99, 0.97, V=1024)
    assert at(score(tmp_path, "dual_vanilla_fails_fr", dual=rows)) == R
    # vanilla does not fail F/R: its gap is not shown, nor is it shown smaller than PE's: open
    rows = dual_block("gru", 0.95, 0.95, 0.99, 0.99) + dual_block("lstm", 0.95, 0.7, 0.99, 0.97, V=1024)
    assert at(score(tmp_path, "dual_vanilla_fails_fr", dual=rows)) == INC
    # the refutation route: gap a not shown, but shown smaller than gap b, goes against the hypothesis
    rows = dual_block("gru", 0.95, 0.95, 0.99, 0.97) + dual_block("lstm", 0.95, 0.7, 0.99, 0.97, V=1024)
    assert at(score(tmp_path, "dual_vanilla_fails_fr", dual=rows)) == NR
    # PE fails more than vanilla
    rows = dual_block("gru", 0.95, 0.8, 0.99, 0.5) + dual_block("lstm", 0.95, 0.7, 0.99, 0.97, V=1024)
    assert at(score(tmp_path, "dual_vanilla_fails_fr", dual=rows)) == NR


def robust_rows(pe_drop, none_drop, model="gru", V=64):
    out = []
    for pe, drop in (("sinusoidal", pe_drop), ("none", none_drop)):
        out += [dual(model, pe, "F/F", 0.98, V=V), dual(model, pe, "F/R", 0.98 - drop, V=V),
                dual(model, pe, "R/F", 0.98, V=V), dual(model, pe, "F/F", 0.98, half="second", V=V),
                dual(model, pe, "R/R", 0.98 - drop, half="second", V=V)]
    return out


def test_robust_needs_the_baseline_effect(tmp_path):
    assert at(score(tmp_path, "dual_pe_robust_gru", dual=robust_rows(0.01, 0.3))) == R
    assert at(score(tmp_path, "dual_pe_robust_gru", dual=robust_rows(0.1, 0.3))) == DO
    assert at(score(tmp_path, "dual_pe_robust_gru", dual=robust_rows(0.3, 0.1))) == NR  # PE drops more than vanilla
    # vanilla stays near too: PE staying near says nothing
    row = score(tmp_path, "dual_pe_robust_gru", dual=robust_rows(0.01, 0.01))
    assert at(row) == NM and "baseline effect is not shown" in row["at_regime"]["reason"]


def decay_rows(model, pe, rare_curve, frequent=0.9, steps=(0, 1, 2, 3, 4), spread=0.01):
    out = []
    for s, v in zip(steps, rare_curve):
        for fc, rc in (("F/F", "F/R"), ("R/F", "R/R")):
            out += [stab(model, pe, s * 1000, fc, frequent, spread=spread),
                    stab(model, pe, s * 1000, rc, v, spread=spread)]
    return out


def test_stability_decay_speed(tmp_path):
    gradual = [0.9, 0.85, 0.8, 0.6, 0.4]
    quick = [0.9, 0.45, 0.42, 0.41, 0.4]
    assert at(score(tmp_path, "stab_gru_vanilla_decays_gradually", stability=decay_rows("gru", "none", gradual))) == R
    assert at(score(tmp_path, "stab_gru_vanilla_decays_gradually", stability=decay_rows("gru", "none", quick))) == DO
    assert at(score(tmp_path, "stab_lstm_vanilla_decays_quickly", stability=decay_rows("lstm", "none", quick))) == R
    assert at(score(tmp_path, "stab_lstm_vanilla_decays_quickly",
                    stability=decay_rows("lstm", "none", [0.4, 0.5, 0.6, 0.8, 0.95]))) == NR


def test_stability_decay_needs_five_checkpoints_from_step_0(tmp_path):
    four = decay_rows("gru", "none", [0.9, 0.8, 0.6, 0.4], steps=(0, 1, 2, 3))
    row = score(tmp_path, "stab_gru_vanilla_decays_gradually", stability=four)
    assert at(row) == NM and "at least 5 checkpoints" in row["at_regime"]["reason"]
    late = decay_rows("gru", "none", [0.9, 0.85, 0.8, 0.6, 0.4], steps=(1, 2, 3, 4, 5))
    row = score(tmp_path, "stab_gru_vanilla_decays_gradually", stability=late)
    assert at(row) == NM and "step 0" in row["at_regime"]["reason"]


def test_stab_pe_stays_near_needs_vanilla_to_decay(tmp_path):
    pe = decay_rows("gru", "sinusoidal", [0.9, 0.89, 0.88, 0.88, 0.88])
    row = score(tmp_path, "stab_pe_stays_near", stability=pe + decay_rows("gru", "none", [0.9, 0.89, 0.88, 0.88, 0.88]))
    assert at(row) == NM and "baseline effect" in row["at_regime"]["reason"]
    row = score(tmp_path, "stab_pe_stays_near", stability=pe + decay_rows("gru", "none", [0.9, 0.8, 0.6, 0.5, 0.4]))
    assert at(row) == R and row["at_regime"]["partial"]  # the LSTM is not measured


# ---- Irie ------------------------------------------------------------------------------------
def test_permutation_kinds(tmp_path):
    one, two = irie(1, 0.0, 1e-7), irie(2, 1.0, 0.5)
    assert at(score(tmp_path, "irie_one_layer_invariant", irie=[one, two])) == R
    assert at(score(tmp_path, "irie_one_layer_invariant", irie=[irie(1, 0.01, 0.2), two])) == NR
    assert at(score(tmp_path, "irie_two_layers_sensitive", irie=[one, two])) == R
    assert at(score(tmp_path, "irie_two_layers_sensitive", irie=[one, irie(2, 0.5, 0.5)])) == DO
    assert at(score(tmp_path, "irie_two_layers_sensitive", irie=[one])) == NM
    assert at(score(tmp_path, "irie_one_layer_invariant", irie=[irie(1, 0.0, 1e-7, seeds=(111,)), two])) == FEW


# ---- every claim: absent tables, the claims file itself ----------------------------------------
def test_every_claim_is_unmeasured_without_its_tables(tmp_path):
    rows = sc.scorecard(tmp_path)
    assert [r["id"] for r in rows] == list(CLAIMS)
    for r in rows:
        for scope in sc.SCOPES:
            assert r[scope]["verdict"] == NM, r
            assert (r[scope]["reason"].startswith("cannot be scored")
                    or re.search(r"\.csv (is|are) absent", r[scope]["reason"])), r


def test_no_claim_waits_for_a_profile(tmp_path):
    """Every claim of the papers has a test kind and tables some profile makes; any left unscored
    would name a model posrnn lacks, never a missing profile (none is left: Irie's non-causal and
    linear Transformers are cores)."""
    rows = {r["id"]: r for r in sc.scorecard(tmp_path)}
    left = [c for c in sc.load_claims() if "unscored" in c]
    assert {c["id"] for c in left} == set()
    for c in left:
        assert "profile" not in c["unscored"].lower(), c["id"]
        assert rows[c["id"]]["at_regime"]["reason"].startswith("cannot be scored: "), c["id"]


def test_delayed_addition_and_the_predecessor_query_read_their_own_tables(tmp_path):
    at16 = {"length": 16, "hidden_size": 512}
    for cid, table, task, vs in (("delayed_add_pe_helps", "delayed", "delayed-add", (896, 1088)),
                                 ("predecessor_pe_helps", "predecessor", "predecessor", (512, 1024))):
        def rows(lead):
            return [ev("lstm", pe, v, acc + (lead if pe == "sinusoidal" and v == vs[-1] else 0), at=at16, task=task)
                    for v in vs for pe, acc in (("sinusoidal", 0.6), ("none", 0.6))]
        assert at(score(tmp_path, cid, **{table: rows(0.2)})) == R, cid     # ahead at the largest V
        assert at(score(tmp_path, cid, **{table: rows(-0.2)})) == NR, cid   # behind there
        assert at(score(tmp_path, cid, fig2=rows(0.2))) == NM, cid          # fig2 is not its table


def test_the_pattern_count_orders_the_lead_along_the_diagonal(tmp_path):
    def rows(leads):  # (K, L) with K^L fixed, PE's lead at each; above recall-last (0.501 at K = 2)
        out = []
        for (k, L), lead in zip(((2, 768), (8, 256), (4096, 64)), leads):
            at_kl = {"length": L, "hidden_size": 512}
            out += [ev("lstm", "sinusoidal", k, 0.6 + lead, at=at_kl), ev("lstm", "none", k, 0.6, at=at_kl)]
        return out
    row = score(tmp_path, "pattern_count_vocab_over_length", patterns=rows((0.0, 0.1, 0.3)))
    assert at(row) == R and "V=2, length=768" in row["at_regime"]["measured"]
    assert at(score(tmp_path, "pattern_count_vocab_over_length", patterns=rows((0.3, 0.1, 0.0)))) == NR
    # without the diagonal each (K, L) pair would be its own group: nothing to compare
    plain = with_params("pattern_count_vocab_over_length")
    del plain["params"]["diagonal"]
    assert at(score(tmp_path, plain, patterns=rows((0.0, 0.1, 0.3)))) == NM


def test_the_vanilla_control_compares_twice_the_budget_with_the_profiles(tmp_path):
    ref = [ev("gru", "none", 256, 0.6), ev("gru", "sinusoidal", 256, 0.95)]
    for cid, changed in (("vanilla_more_training_no_help", {"iterations": 600000}),
                         ("vanilla_larger_batch_no_help", {"batch_size": 1024})):
        same = [{**ev("gru", "none", 256, 0.6, spread=0.004), **changed}]
        better = [{**ev("gru", "none", 256, 0.7, spread=0.004), **changed}]
        assert at(score(tmp_path, cid, budget=same, fig2=ref)) == R, cid
        assert at(score(tmp_path, cid, budget=better, fig2=ref)) == NR, cid
    # the CPU profile's budget: twice its 3,000 iterations, against fig2 at 3,000
    cpu = [{**ev("gru", "none", 64, 0.6, at=LITE, iterations=3000), "batch_size": 128}]
    more = [{**ev("gru", "none", 64, 0.6, at=LITE, iterations=6000, spread=0.004), "batch_size": 128}]
    assert ind(score(tmp_path, "vanilla_more_training_no_help", budget=more, fig2=cpu)) == R


def test_double_vanilla_on_sorting_is_read_against_vanilla_sorting(tmp_path):
    sort = [ev("lstm", "none", 1024, 0.8, task="sort"), ev("lstm", "sinusoidal", 1024, 0.85, task="sort")]
    no_help = [ev("lstm", "dummy", 1024, 0.8, task="sort", spread=0.004),
               ev("lstm", "dummy", 1024, 0.9, task="reverse")]  # reverse dummy rows are double_no_help's
    assert at(score(tmp_path, "double_no_help_sort", double=no_help, sort=sort)) == R
    helps = [ev("lstm", "dummy", 1024, 0.9, task="sort", spread=0.004)]
    assert at(score(tmp_path, "double_no_help_sort", double=helps, sort=sort)) == NR
    # and double_no_help reads the reverse rows only
    fig2 = [ev("lstm", "none", 1024, 0.9, spread=0.004)]
    assert at(score(tmp_path, "double_no_help", double=no_help, fig2=fig2)) == R


def test_the_vanilla_s4d_retrieves_mid_sequence_targets_worst(tmp_path):
    def rows(q2):
        return [dual("s4d", "none", cond, q2 if half == "q2" else 0.8, half=half)
                for cond in ("F/R", "R/R") for half in ("q1", "q2", "q3", "q4")]
    assert at(score(tmp_path, "s4d_worst_mid_sequence", dual=rows(0.5))) == R
    assert at(score(tmp_path, "s4d_worst_mid_sequence", dual=rows(0.9))) == NR


def test_the_s4d_stability_is_read_with_the_target_inside_the_input(tmp_path):
    def rows(pe_value, position=23):
        return [{**stab("s4d", pe, 300000, cond, v, spread=0.004), "target_position": position}
                for cond in ("F/R", "R/R") for pe, v in (("sinusoidal", pe_value), ("none", 0.9))]
    assert at(score(tmp_path, "s4d_stability", stability=rows(0.9))) == R
    assert at(score(tmp_path, "s4d_stability", stability=rows(0.99))) == NR
    # the analysis after the first token answers another question: not scored
    assert at(score(tmp_path, "s4d_stability", stability=rows(0.9, position=1))) == NM


def test_claims_file_is_well_formed():
    claims = sc.load_claims()
    cited = [c["id"] for c in claims if c.get("section", "papers") == "papers"
             and not any(n in re.findall(sc.PAPER_NUMBER, c["paper"]) for n in sc.AUTHORS)]
    assert not cited, f"these claims of the papers cite no paper by its number (docs/papers.md): {cited}"
    assert len({c["id"] for c in claims}) == len(claims)
    for c in claims:
        sc.validate_claim(c)
        assert isinstance(c["regime"], dict) and set(c["tables"]) <= set(sc.TABLES)
        if "unscored" not in c:
            assert c["kind"] in sc.TESTS and "reproduced if" in c["test"].lower(), c["id"]
    # the papers' claims, those added from a full read included
    topics = ["fig2_gru_pe_95", "fig2_lstm_pe_95", "fig2_vanilla_degrades", "fig2_pe_ahead_largest_v",
              "fig2_pe_lead_grows", "fig2_dl_improves", "elman_pe_helps", "dual_vanilla_fails_fr",
              "dual_disturbant_not_target", "dual_pe_robust_gru", "dual_pe_robust_lstm", "dual_lstm_first_quarter",
              "s4d_dual_pe_resilient", "stab_gru_vanilla_decays_gradually", "stab_lstm_vanilla_decays_quickly",
              "stab_pe_stays_near", "s4d_stability", "length_no_help", "length_gru_pe_worse", "copy_no_help",
              "sort_helps_a_little", "sort_predictions_sorted", "double_no_help", "forms_sin_beats_fixed",
              "forms_all_beat_vanilla", "forms_sin_beats_varlen", "varlen_pe_beats_vanilla", "forms_varlen_clearer",
              "s4d_pe_helps", "extend_pe_better", "extend_beyond_scratch", "lm_no_gain", "lm_pe_faster_early",
              "irie_one_layer_invariant", "irie_two_layers_sensitive", "delayed_add_pe_helps", "predecessor_pe_helps",
              "pattern_count_vocab_over_length", "autoregression_self_feedback_low", "continuous_no_effect"]
    assert set(topics) <= set(CLAIMS)
    # claims naming several models list them all
    for cid in ("fig2_vanilla_degrades", "fig2_pe_ahead_largest_v", "dual_vanilla_fails_fr", "stab_pe_stays_near"):
        assert CLAIMS[cid]["models"] == ["gru", "lstm"], cid
    # null claims state their margin, and the beyond section is apart
    assert all("margin" in c["params"] for c in claims if c.get("kind") in ("no_gain", "lm_no_gain"))
    assert {c["id"] for c in claims if c.get("section") == "beyond"} >= {"beyond_pe_helps_mamba_vocab"}


@pytest.mark.parametrize("change", [
    {"kind": "no_such_kind"},
    {"params": {"select": {"model": "gru"}}},                        # threshold lacks required params
    {"tables": ["fig3"]},
    {"test": ""},
    {"extra": 1},
    {"regime": "L = 64"},
    {"models": []},
    {"section": "elsewhere"},
])
def test_malformed_claims_are_refused(change):
    bad = {**copy.deepcopy(CLAIMS["fig2_gru_pe_95"]), **change}
    with pytest.raises(PosrnnError, match="fig2_gru_pe_95"):
        sc.validate_claim(bad)
    no_regime = {k: v for k, v in CLAIMS["fig2_gru_pe_95"].items() if k != "regime"}
    with pytest.raises(PosrnnError, match="regime"):
        sc.validate_claim(no_regime)


@pytest.mark.parametrize("params", [
    {"unknown_param": 1},
    {"threshold": "high"},
    {"select": {"vocab_size": {"min": "a"}}},
    {"select": {"model": {"between": 1}}},
    {"baseline": {}},
    {"baseline": {"pe": True}},
    {"baseline": {"conv": 0}},
])
def test_malformed_params_are_refused(params):
    with pytest.raises(PosrnnError, match="claims.yaml"):
        sc.validate_claim(with_params("fig2_gru_pe_95", **params))


def test_null_claims_need_a_margin():
    c = copy.deepcopy(CLAIMS["length_no_help"])
    del c["params"]["margin"]
    with pytest.raises(PosrnnError, match="margin"):
        sc.validate_claim(c)


def test_claims_file_errors(tmp_path):
    (tmp_path / "c.yaml").write_text("claims: [")
    with pytest.raises(PosrnnError, match="c.yaml"):
        sc.load_claims(tmp_path / "c.yaml")
    dup = [CLAIMS["lm_no_gain"], CLAIMS["lm_no_gain"]]
    import yaml
    (tmp_path / "d.yaml").write_text(yaml.safe_dump({"claims": dup}))
    with pytest.raises(PosrnnError, match="twice"):
        sc.load_claims(tmp_path / "d.yaml")


def test_the_scorecard_reads_the_claims_file_once(tmp_path, monkeypatch):
    """With no claims passed, the registry read for the claims also serves the power section's
    ids (it was read a second time for them)."""
    from posrnn_cli.analysis.scorecard import score

    real, reads = score.load_claims, []
    monkeypatch.setattr(score, "load_claims", lambda *a: reads.append(a) or real(*a))
    power = {"pilot": "lite", "seeds_needed": {"lm_no_gain": 6}}
    rows = score.scorecard(tmp_path, power=power)
    assert len(reads) == 1 and [r["id"] for r in rows] == [c["id"] for c in real()]
    with pytest.raises(PosrnnError, match="no claim 'lm_no_gian' \\(did you mean 'lm_no_gain'\\?\\)"):
        score.scorecard(tmp_path, power={"pilot": "lite", "seeds_needed": {"lm_no_gian": 6}})


# ---- malformed tables -----------------------------------------------------------------------
def test_malformed_tables_name_the_file(tmp_path):
    good = [ev("gru", "sinusoidal", 256, 0.99), ev("gru", "none", 256, 0.5)]
    cases = {
        "binary": lambda p: p.write_bytes(b"\xff\xfe\x00garbage\x81"),
        "empty": lambda p: p.write_bytes(b""),
        "header only": lambda p: p.write_text(open_text(good).splitlines()[0] + "\n"),
        "missing column": lambda p: write_csv([{k: v for k, v in r.items() if k != "token_accuracy_ci_low"}
                                               for r in good], p),
        "no per-seed values": lambda p: write_csv([{k: v for k, v in r.items() if k != "token_accuracy_by_seed"}
                                                   for r in good], p),
        "per-seed values of other seeds": lambda p: write_csv([{**good[0], "token_accuracy_by_seed": "0.9 0.9"},
                                                              good[1]], p),
        "swapped CI": lambda p: write_csv([{**good[0], "token_accuracy_ci_low": 1.0, "token_accuracy_ci_high": 0.5},
                                           good[1]], p),
        "repeated seed": lambda p: write_csv([{**good[0], "seeds": "111 111 333"}, good[1]], p),
        "text accuracy": lambda p: write_csv([{**good[0], "token_accuracy": "high"}, good[1]], p),
        "nan accuracy": lambda p: write_csv([{**good[0], "token_accuracy": float("nan")}, good[1]], p),
        "same cell twice": lambda p: write_csv([good[0], good[0], good[1]], p),
        "ragged": lambda p: p.write_text(open_text(good) + ",".join(["1"] * (len(good[0]) + 3)) + "\n"),
    }
    for i, (name, write) in enumerate(cases.items()):
        d = tmp_path / f"bad{i}"
        d.mkdir()
        write(d / "fig2.csv")
        with pytest.raises(PosrnnError, match=r"fig2\.csv") as e:
            sc.scorecard(d, [CLAIMS["fig2_gru_pe_95"]])
        assert "\n" not in str(e.value) and "aggregate" in str(e.value), name


def open_text(rows) -> str:
    import csv
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def test_missing_results_directory(tmp_path):
    with pytest.raises(PosrnnError, match="does not exist"):
        sc.scorecard(tmp_path / "nope")


# ---- the files ------------------------------------------------------------------------------
def test_write_scorecard_writes_both_files(tmp_path):
    write_csv([ev("gru", "sinusoidal", 256, 0.99), ev("gru", "none", 256, 0.5), ev("gru", "none", 32, 0.9),
               ev("gru", "sinusoidal", 32, 0.99)], tmp_path / "fig2.csv")
    write_csv([lm("none", [37.0, 37.5, 38.0]), lm("sinusoidal", [38.0, 38.5, 38.7])], tmp_path / "lm.csv")
    odd = {**copy.deepcopy(CLAIMS["lm_no_gain"]), "id": "pipe_claim", "claim": "a | b\nwith a line break"}
    claims = sc.load_claims() + [odd]
    rows = sc.write_scorecard(tmp_path, claims)
    assert len(rows) == len(claims)
    data = json.loads((tmp_path / "scorecard.json").read_text())
    assert [r["id"] for r in data["rows"]] == [c["id"] for c in claims]
    papers = data["summary"]["papers"]
    for scope in sc.SCOPES:
        counted = sum(papers[scope][v] for v in sc.VERDICTS) + sum(papers[scope]["partial"].values())
        assert counted == papers[scope]["claims"] == len([c for c in claims if c.get("section", "papers") == "papers"])
    by_id = {r["id"]: r for r in rows}
    assert at(by_id["fig2_gru_pe_95"]) == R and at(by_id["fig2_vanilla_degrades"]) == R and at(by_id["lm_no_gain"]) == R
    assert by_id["fig2_vanilla_degrades"]["at_regime"]["partial"]
    md = (tmp_path / "scorecard.md").read_text()
    header = "| claim | paper | regime | at the {} regime | indication off the regime |"
    # the papers' claims, and beyond them
    assert md.count(header.format("papers'")) == 1 and md.count(header.format("hypothesis's")) == 1
    body = [ln for ln in md.splitlines() if ln.startswith("| `")]
    assert len(body) == len(claims)
    for ln in body:
        assert len(re.split(r"(?<!\\)\|", ln)[1:-1]) == 5  # split on unescaped pipes
    assert "a \\| b with a line break" in md
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_the_detailed_view_has_one_block_per_claim(tmp_path):
    from rich.text import Text
    rows = sc.scorecard(tmp_path)
    heads = [t.plain.split()[0] for t in sc.scorecard_rich_table(rows, counts=False).renderables
             if isinstance(t, Text) and t.plain]
    assert heads == [r["id"] for r in rows]


@pytest.mark.parametrize("profile", ["lite", "lite_extra", "lite_seeds", "lite_round2", "beyond", "beyond2", "beyond3",
                                     "beyond_map", "beyond_irie", "beyond_map_long", "beyond_map_xlstm",
                                     "beyond_map_block"])
def test_the_committed_scorecard_is_what_its_tables_give(profile):
    """The lite and beyond scorecards in the repository (and quoted in docs/results.md) are recomputed
    from the committed tables by the current claims, code and profile design (its ``power``)."""
    import yaml
    root = Path(__file__).resolve().parents[1]
    lite = root / "results" / profile
    from posrnn_cli.analysis.scorecard.design import design_as_stated
    power = yaml.safe_load((root / "params.yaml").read_text())["profiles"][profile]["power"]
    rows = sc.scorecard(lite / "tables", power=design_as_stated(power, profile, root)[0])
    assert len(rows) == len(CLAIMS)
    committed = json.loads((lite / "scorecard" / "scorecard.json").read_text())["rows"]
    assert json.dumps(committed, sort_keys=True) == json.dumps(json.loads(json.dumps(rows)), sort_keys=True)


def test_lite_scores_nothing_at_the_papers_regime_it_did_not_run():
    """Lite runs L = 8 cells on a CPU: the Fig. 2 threshold and the WikiText-103 claim are not
    measured at the papers' regime; what lite shows of them is an indication."""
    lite = Path(__file__).resolve().parents[1] / "results" / "lite" / "tables"
    rows = {r["id"]: r for r in sc.scorecard(lite)}
    for cid in ("fig2_gru_pe_95", "lm_no_gain"):
        assert at(rows[cid]) == NM and "no cell at the papers' regime" in rows[cid]["at_regime"]["reason"]


def test_scorecard_imports_no_training_code():
    """The stage that writes the scorecard must depend on result tables only."""
    import ast

    trees = [ast.parse(f.read_text()) for f in Path(sc.__file__).parent.glob("*.py")]
    allowed = {"__future__", "contextvars", "csv", "math", "re", "dataclasses", "pathlib", "typing", "numpy", "yaml",
               "rich.table",
               "rich.text", "rich.console", "rich.padding", "posrnn_cli.common", "posrnn_cli.common.files.io",
               "posrnn_cli.common.results", "posrnn_cli.common.stages",  # the experiment registry
               "posrnn_cli.tasks",  # floors: each task's floor lines, beside it, torch-free (test_house.py)
               "posrnn_cli.common.errors",
               "posrnn_cli.common.results.stats",
               "posrnn_cli.common.results.tables",  # tables: the result-table checks io reads too
               "posrnn_cli.common.settings.keys",  # the table of config keys (which columns hold True/False)
               "subprocess"}  # design.py reads the git history: was the design committed before the results?
    found = {a.name for tree in trees for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    found |= {n.module for tree in trees for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0}
    assert found <= allowed, found - allowed


def test_a_baseline_core_at_another_h_is_found_through_baseline_ignores(tmp_path):
    """The beyond cores are matched on parameters, so the vanilla GRU baseline (H = 64) sits at
    another H than vanilla Mamba (H = 58): ``baseline_ignores: [hidden_size]`` pairs them by the
    task cell; without it no baseline row is found and the claim is not measured."""
    mamba_at, gru_at = {"length": 8, "hidden_size": 58}, {"length": 8, "hidden_size": 64}

    def drop_rows(model, at_, drop):
        return [dual(model, "none", "F/F", 0.9, V=32, at=at_), dual(model, "none", "F/R", 0.9 - drop, V=32, at=at_)]

    claim = CLAIMS["beyond_mamba_vanilla_keeps_fr"]
    assert claim["params"]["baseline_ignores"] == ["hidden_size"]
    rows = drop_rows("mamba", mamba_at, 0.01) + drop_rows("gru", gru_at, 0.3)
    assert at(score(tmp_path, "beyond_mamba_vanilla_keeps_fr", dual=rows)) == R
    rows = drop_rows("mamba", mamba_at, 0.3) + drop_rows("gru", gru_at, 0.3)
    assert at(score(tmp_path, "beyond_mamba_vanilla_keeps_fr", dual=rows)) == NR
    blind = {**claim, "params": {k: v for k, v in claim["params"].items() if k != "baseline_ignores"}}
    row = score(tmp_path, blind, dual=drop_rows("mamba", mamba_at, 0.01) + drop_rows("gru", gru_at, 0.3))
    assert at(row) == NM and "no baseline row" in row["at_regime"]["reason"]


def test_the_first_count_line_is_moritas_claims_at_the_papers_regime():
    """Every committed scorecard counts Morita's claims first, at the papers' regime, even when
    none is measured there; Irie's, the checks of the implementation and the project's hypotheses
    are counted apart, each group from the claims' data (section, implementation, the paper cited)."""
    from posrnn_cli.analysis import report

    root = Path(__file__).resolve().parents[1]
    names = sorted(p.parent.parent.name for p in root.glob("results/*/scorecard/scorecard.json"))
    assert names
    for name, rows in report.committed_scorecards(root, names).items():
        summary = sc.summarize(rows)
        lines = sc.count_lines("papers", summary["papers"])
        assert lines[0].startswith("Morita's claims at the papers' regime ("), (name, lines[0])
        md = (root / "results" / name / "scorecard" / "scorecard.md").read_text()
        assert md.split("\n- ", 1)[1].startswith("Morita's claims at the papers' regime"), name
        groups = {g: c["at_regime"]["claims"] for sec in summary.values() for g, c in sec["groups"].items()}
        assert sum(groups.values()) == len(rows) and groups["morita"] > 0, (name, groups)
    claims = sc.load_claims()
    cited = [c["id"] for c in claims if c.get("section", "papers") == "papers"
             and not any(n in re.findall(sc.PAPER_NUMBER, c["paper"]) for n in sc.AUTHORS)]
    assert not cited, f"these claims of the papers cite no paper by its number (docs/papers.md): {cited}"
    assert {c["id"] for c in claims if sc.claim_group(c) == "irie"} and all(
        "004" in c["paper"] and not c.get("implementation") for c in claims if sc.claim_group(c) == "irie")
    assert sc.claim_group({"paper": "x (004 §3)", "implementation": True}) == "implementation"
    assert sc.claim_group({"paper": "x (004 §3)", "section": "beyond"}) == "hypotheses"
    assert sc.claim_group({"paper": "x (004 §3; 002 §4.1)"}) == "morita"
    assert sc.claim_group({"paper": "600,000 iterations (004, Abstract)"}) == "irie"
