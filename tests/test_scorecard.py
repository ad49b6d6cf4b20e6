"""The reproduction scorecard: each test kind's verdict flips where it should, on fabricated
aggregate tables; claims.yaml is well formed; the scorecard files are written whole."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from posrnn_cli.analysis import scorecard as sc
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.io import write_csv

CLAIMS = {c["id"]: c for c in sc.load_claims()}
R, NR, DO, NM = sc.REPRODUCED, sc.NOT_REPRODUCED, sc.DIRECTION_ONLY, sc.NOT_MEASURED


# ---- fabricated tables ----------------------------------------------------------------------
def ev(model, pe, V, acc, hw=0.01, L=64, H=512, seeds="111 222 333", task="reverse", **extra):
    """One eval-table row (a cell, seeds pooled) with a symmetric 95% CI of half-width ``hw``."""
    n = len(str(seeds).split())
    return {"task": task, "model": model, "pe": pe, "vocab_size": V, "length": L, "min_length": None,
            "rarity": None, "hidden_size": H, "layers": 1, "iterations": 300000, "batch_size": 512,
            "seeds": seeds, "n_seeds": n, "n_sequences": 1024 * n, "token_accuracy": acc,
            "token_accuracy_ci_low": acc - hw, "token_accuracy_ci_high": acc + hw, "sequence_accuracy": 0.0,
            "sequence_accuracy_ci_low": 0.0, "sequence_accuracy_ci_high": 0.0, "damerau_levenshtein": 1.0,
            "damerau_levenshtein_ci_low": 0.9, "damerau_levenshtein_ci_high": 1.1, **extra}


def dual(model, pe, condition, acc, half="all", hw=0.01, V=64):
    return {"task": "reverse", "model": model, "pe": pe, "vocab_size": V, "length": 64, "rarity": 0.125,
            "hidden_size": 512, "iterations": 300000, "batch_size": 512, "condition": condition, "half": half,
            "token_accuracy": acc, "token_accuracy_ci_low": acc - hw, "token_accuracy_ci_high": acc + hw,
            "n_seeds": 5, "n_sequences": 5120}


def stab(model, pe, step, condition, value, hw=0.01, pair="common_target"):
    return {"task": "reverse", "model": model, "pe": pe, "vocab_size": 64, "length": 64, "rarity": 0.125,
            "hidden_size": 512, "iterations": 300000, "batch_size": 512, "step": step, "condition": condition,
            "pair": pair, "stability": value, "ci_low": value - hw, "ci_high": value + hw, "n_seeds": 5,
            "n_triplets": 5120}


def lm(pe, perplexities, model="lstm"):
    return [{"model": model, "pe": pe, "seed": 111 * (i + 1), "hidden_size": 512, "iterations": 300000,
             "batch_size": 512, "vocab_size": 32768, "max_tokens": 1024, "perplexity": p,
             "token_nll": 3.6, "n_tokens": 245000} for i, p in enumerate(perplexities)]


def irie(layers, share, change, pe="none", acc=0.5, hw=0.01, tol=1e-5):
    return {"model": "transformer", "layers": layers, "pe": pe, "vocab_size": 256, "length": 16,
            "seeds": "111 222", "n_seeds": 2, "n_sequences": 2048, "token_accuracy": acc,
            "token_accuracy_ci_low": acc - hw, "token_accuracy_ci_high": acc + hw,
            "permutation_sensitive_share": share, "max_logit_change": change, "tolerance": tol}


def score(tmp_path: Path, claim, **tables) -> dict:
    """Write the tables into a fresh results directory and score one claim (by id or entry)."""
    out = tmp_path / f"r{len(list(tmp_path.iterdir()))}"
    out.mkdir()
    for name, rows in tables.items():
        write_csv(rows, out / f"{name}.csv")
    entry = CLAIMS[claim] if isinstance(claim, str) else claim
    row = sc.scorecard(out, [entry])[0]
    assert row["verdict"] in sc.VERDICTS
    json.dumps(row)  # machine-readable details stay JSON-safe
    return row


def with_params(cid: str, **params) -> dict:
    c = copy.deepcopy(CLAIMS[cid])
    c["params"].update(params)
    return c


# ---- threshold ------------------------------------------------------------------------------
def test_threshold_reproduced_at_paper_setting(tmp_path):
    rows = [ev("gru", "sinusoidal", 32, 0.99), ev("gru", "sinusoidal", 256, 0.96), ev("gru", "none", 256, 0.6),
            ev("gru", "sinusoidal", 512, 0.4)]  # V = 512 lies outside the claim's range
    r = score(tmp_path, "fig2_gru_pe_95", fig2=rows)
    assert r["verdict"] == R
    assert "0.960 [0.950, 0.970]" in r["measured"] and "seeds 111 222 333" in r["measured"]
    assert r["details"]["at_paper_setting"] is True


def test_threshold_below_the_figure_is_direction_only_when_pe_leads(tmp_path):
    rows = [ev("gru", "sinusoidal", 256, 0.90), ev("gru", "none", 256, 0.60)]
    assert score(tmp_path, "fig2_gru_pe_95", fig2=rows)["verdict"] == DO


def test_threshold_not_reproduced_when_pe_does_not_lead(tmp_path):
    rows = [ev("gru", "sinusoidal", 256, 0.90), ev("gru", "none", 256, 0.895)]
    r = score(tmp_path, "fig2_gru_pe_95", fig2=rows)
    assert r["verdict"] == NR and "below 0.95" in r["reason"]


def test_threshold_met_off_the_paper_setting_is_only_direction(tmp_path):
    """≥ 95% at L = 8, H = 64 does not reproduce a figure stated for L = 64, H = 512."""
    rows = [ev("gru", "sinusoidal", 32, 0.99, L=8, H=64), ev("gru", "none", 32, 0.6, L=8, H=64)]
    r = score(tmp_path, "fig2_gru_pe_95", fig2=rows)
    assert r["verdict"] == DO and "no cell at the paper's setting" in r["reason"]
    rows[1] = ev("gru", "none", 32, 0.985, L=8, H=64)  # and without a lead, nothing is shown
    assert score(tmp_path, "fig2_gru_pe_95", fig2=rows)["verdict"] == NR


def test_threshold_not_measured(tmp_path):
    assert score(tmp_path, "fig2_gru_pe_95")["verdict"] == NM
    r = score(tmp_path, "fig2_lstm_pe_95", fig2=[ev("gru", "sinusoidal", 256, 0.99)])
    assert r["verdict"] == NM and "model=lstm" in r["reason"]


# ---- decline --------------------------------------------------------------------------------
@pytest.mark.parametrize("small, large, hw, verdict", [(0.9, 0.5, 0.01, R), (0.60, 0.59, 0.02, DO),
                                                        (0.5, 0.6, 0.01, NR)])
def test_decline(tmp_path, small, large, hw, verdict):
    rows = [ev("gru", "none", 32, small, hw), ev("gru", "none", 64, (small + large) / 2, hw),
            ev("gru", "none", 256, large, hw), ev("gru", "sinusoidal", 256, 0.1)]
    assert score(tmp_path, "fig2_vanilla_degrades", fig2=rows)["verdict"] == verdict


def test_decline_needs_two_vocabularies(tmp_path):
    r = score(tmp_path, "fig2_vanilla_degrades", fig2=[ev("gru", "none", 32, 0.9)])
    assert r["verdict"] == NM and "two vocabulary sizes" in r["reason"]


def test_decline_fails_if_one_model_fails(tmp_path):
    rows = [ev("gru", "none", 32, 0.9), ev("gru", "none", 256, 0.5),
            ev("lstm", "none", 256, 0.5), ev("lstm", "none", 1024, 0.7)]
    assert score(tmp_path, "fig2_vanilla_degrades", fig2=rows)["verdict"] == NR


# ---- ahead ----------------------------------------------------------------------------------
def test_ahead_reads_the_largest_vocabulary(tmp_path):
    small_tie = [ev("gru", "sinusoidal", 32, 0.9), ev("gru", "none", 32, 0.9)]

    def big(pe_acc, none_acc, hw=0.01):
        return [ev("gru", "sinusoidal", 256, pe_acc, hw), ev("gru", "none", 256, none_acc, hw)]

    assert score(tmp_path, "fig2_pe_ahead_largest_v", fig2=small_tie + big(0.9, 0.5))["verdict"] == R
    assert score(tmp_path, "fig2_pe_ahead_largest_v", fig2=small_tie + big(0.61, 0.60, 0.02))["verdict"] == DO
    assert score(tmp_path, "fig2_pe_ahead_largest_v", fig2=small_tie + big(0.5, 0.6))["verdict"] == NR
    assert score(tmp_path, "fig2_pe_ahead_largest_v", fig2=small_tie[:1])["verdict"] == NM


def test_ahead_across_tables_against_several_arms(tmp_path):
    fig2 = [ev("lstm", "sinusoidal", 16384, 0.9), ev("lstm", "none", 16384, 0.3)]
    forms = [ev("lstm", "random", 16384, 0.5, seeds="111"), ev("lstm", "learnable", 16384, 0.6, seeds="111")]
    r = score(tmp_path, "forms_sin_beats_fixed", fig2=fig2, forms=forms)
    assert r["verdict"] == R and len(r["details"]["comparisons"]) == 2
    assert "seeds differ" in r["measured"]
    forms[1] = ev("lstm", "learnable", 16384, 0.95)
    assert score(tmp_path, "forms_sin_beats_fixed", fig2=fig2, forms=forms)["verdict"] == NR
    forms[1] = ev("lstm", "learnable", 16384, 0.895)
    assert score(tmp_path, "forms_sin_beats_fixed", fig2=fig2, forms=forms)["verdict"] == DO
    assert score(tmp_path, "forms_sin_beats_fixed", forms=forms)["verdict"] == NM  # fig2 absent
    other_cell = [ev("lstm", "sinusoidal", 16384, 0.9, H=256)]
    assert score(tmp_path, "forms_sin_beats_fixed", fig2=other_cell, forms=forms)["verdict"] == NM


def test_ahead_on_the_dual_halves(tmp_path):
    rows = [dual("gru", "sinusoidal", "R/R", 0.99, half="second"), dual("gru", "sinusoidal", "R/R", 0.4, half="first"),
            dual("gru", "sinusoidal", "R/R", 0.7, half="all")]
    assert score(tmp_path, "dual_gru_pe_rr_first_half", dual=rows)["verdict"] == R
    rows[1] = dual("gru", "sinusoidal", "R/R", 0.999, half="first")
    assert score(tmp_path, "dual_gru_pe_rr_first_half", dual=rows)["verdict"] == NR
    # an older table without the half column is read as all positions: not measured
    old = [{k: v for k, v in dual("gru", "sinusoidal", c, 0.9).items() if k != "half"} for c in ("F/F", "R/R")]
    assert score(tmp_path, "dual_gru_pe_rr_first_half", dual=old)["verdict"] == NM


def test_ahead_on_transformer_depth(tmp_path):
    rows = [irie(1, 0.0, 0.0, acc=0.1), irie(2, 1.0, 3.0, acc=0.9)]
    assert score(tmp_path, "irie_two_layers_learn_order", irie=rows)["verdict"] == R
    assert score(tmp_path, "irie_one_layer_needs_pe", irie=rows)["verdict"] == NM
    rows.append(irie(1, 1.0, 2.0, pe="sinusoidal", acc=0.105, hw=0.02))
    assert score(tmp_path, "irie_one_layer_needs_pe", irie=rows)["verdict"] == DO


# ---- no_gain --------------------------------------------------------------------------------
def test_no_gain(tmp_path):
    overlap = [ev("gru", "sinusoidal", 2, 0.80, 0.02, L=64), ev("gru", "none", 2, 0.79, 0.02, L=64),
               ev("gru", "sinusoidal", 2, 0.60, L=128), ev("gru", "none", 2, 0.70, L=128)]
    r = score(tmp_path, "length_no_help", length=overlap)
    assert r["verdict"] == R and len(r["details"]["comparisons"]) == 2
    gain = overlap + [ev("gru", "sinusoidal", 2, 0.9, L=256), ev("gru", "none", 2, 0.8, L=256)]
    r = score(tmp_path, "length_no_help", length=gain)
    assert r["verdict"] == NR and "L=256" in r["reason"]
    assert score(tmp_path, with_params("length_no_help", margin=0.2), length=gain)["verdict"] == R
    assert score(tmp_path, "length_no_help", length=overlap[:1])["verdict"] == NM


def test_no_gain_across_tables(tmp_path):
    fig2 = [ev("lstm", "none", 256, 0.6), ev("lstm", "sinusoidal", 256, 0.99)]
    assert score(tmp_path, "double_no_help", fig2=fig2, double=[ev("lstm", "dummy", 256, 0.605)])["verdict"] == R
    assert score(tmp_path, "double_no_help", fig2=fig2, double=[ev("lstm", "dummy", 256, 0.7)])["verdict"] == NR
    assert score(tmp_path, "double_no_help", fig2=fig2)["verdict"] == NM


# ---- gap_contrast ---------------------------------------------------------------------------
def dual_block(model, vff, vfr, pff, pfr, hw=0.01):
    return [dual(model, "none", "F/F", vff, hw=hw), dual(model, "none", "F/R", vfr, hw=hw),
            dual(model, "sinusoidal", "F/F", pff, hw=hw), dual(model, "sinusoidal", "F/R", pfr, hw=hw),
            dual(model, "none", "R/R", 0.1), dual(model, "none", "F/R", 0.99, half="first")]


def test_gap_contrast(tmp_path):
    r = score(tmp_path, "dual_vanilla_fails_fr", dual=dual_block("gru", 0.9, 0.4, 0.95, 0.93))
    assert r["verdict"] == R and r["details"]["comparisons"][0]["gap_a"] == pytest.approx(0.5)
    # gap 0.05 vs 0.01, interval half-width sqrt(4 · 0.03²) = 0.06: larger but not significantly
    overlapping = dual_block("gru", 0.9, 0.85, 0.9, 0.89, hw=0.03)
    assert score(tmp_path, "dual_vanilla_fails_fr", dual=overlapping)["verdict"] == DO
    # separated vanilla rows, gap 0.100 vs 0.085: interval half-width sqrt(4 · 0.01²) = 0.02 > 0.015
    assert score(tmp_path, "dual_vanilla_fails_fr", dual=dual_block("gru", 0.9, 0.8, 0.9, 0.815))["verdict"] == DO
    assert score(tmp_path, "dual_vanilla_fails_fr", dual=dual_block("gru", 0.9, 0.8, 0.9, 0.83))["verdict"] == R
    assert score(tmp_path, "dual_vanilla_fails_fr", dual=dual_block("gru", 0.9, 0.89, 0.95, 0.85))["verdict"] == NR
    # a table from before the half column existed is read as all target positions
    old = [{k: v for k, v in r.items() if k != "half"} for r in dual_block("gru", 0.9, 0.4, 0.95, 0.93)[:5]]
    assert score(tmp_path, "dual_vanilla_fails_fr", dual=old)["verdict"] == R
    both = dual_block("gru", 0.9, 0.4, 0.95, 0.93) + dual_block("lstm", 0.9, 0.89, 0.95, 0.85)
    r = score(tmp_path, "dual_vanilla_fails_fr", dual=both)
    assert r["verdict"] == NR and len(r["details"]["comparisons"]) == 2
    assert score(tmp_path, "dual_vanilla_fails_fr", dual=dual_block("s4d", 0.9, 0.4, 0.95, 0.93))["verdict"] == NM


def test_gap_contrast_separation_is_required_where_declared(tmp_path):
    """Extension lead 0.10 vs scratch 0.00 is significant as a difference of gaps, but the
    extension rows' own CIs overlap (half-width 0.06), which extend_beyond_scratch requires."""
    fig2 = [ev("lstm", "sinusoidal", 512, 0.90, 0.001), ev("lstm", "none", 512, 0.90, 0.001)]

    def ext(hw):
        return [ev("lstm", "sinusoidal", 512, 0.6, hw, iterations=50000, base_vocab=256, extra_vocab=256),
                ev("lstm", "none", 512, 0.5, hw, iterations=50000, base_vocab=256, extra_vocab=256)]

    assert score(tmp_path, "extend_beyond_scratch", fig2=fig2, extend=ext(0.01))["verdict"] == R
    assert score(tmp_path, "extend_beyond_scratch", fig2=fig2, extend=ext(0.06))["verdict"] == DO
    no_pe_from_scratch = [ev("lstm", "none", 512, 0.9)]
    assert score(tmp_path, "extend_beyond_scratch", fig2=no_pe_from_scratch, extend=ext(0.01))["verdict"] == NM


# ---- robust ---------------------------------------------------------------------------------
def gru_dual(pe_fr, none_fr):
    rows = []
    for pe, fr in (("sinusoidal", pe_fr), ("none", none_fr)):
        rows += [dual("gru", pe, "F/F", 0.97), dual("gru", pe, "F/R", fr), dual("gru", pe, "R/F", 0.96),
                 dual("gru", pe, "F/F", 0.97, half="second"), dual("gru", pe, "R/R", 0.95, half="second"),
                 dual("gru", pe, "R/R", 0.30, half="first")]  # the paper's exception: not tested
    return rows


def test_robust(tmp_path):
    assert score(tmp_path, "dual_pe_robust_gru", dual=gru_dual(0.95, 0.5))["verdict"] == R
    assert score(tmp_path, "dual_pe_robust_gru", dual=gru_dual(0.85, 0.5))["verdict"] == DO
    assert score(tmp_path, "dual_pe_robust_gru", dual=gru_dual(0.85, 0.9))["verdict"] == NR
    no_second_half = [r for r in gru_dual(0.95, 0.5) if r["half"] != "second"]
    assert score(tmp_path, "dual_pe_robust_gru", dual=no_second_half)["verdict"] == NM


def test_robust_over_checkpoints(tmp_path):
    def rows(pe_drop_at_5000):
        out = []
        for step in (5000, 10000):
            for pe, drop in (("sinusoidal", pe_drop_at_5000 if step == 5000 else 0.0), ("none", 0.2)):
                out += [stab("gru", pe, step, "F/F", 0.9), stab("gru", pe, step, "F/R", 0.9 - drop),
                        stab("gru", pe, step, "R/F", 0.9), stab("gru", pe, step, "R/R", 0.9 - drop)]
        return out

    assert score(tmp_path, "stab_pe_stays_near", stability=rows(0.02))["verdict"] == R
    assert score(tmp_path, "stab_pe_stays_near", stability=rows(0.1))["verdict"] == DO
    assert score(tmp_path, "stab_pe_stays_near", stability=rows(0.3))["verdict"] == NR
    last_only = with_params("stab_pe_stays_near", steps="last")  # the early drop no longer counts
    assert score(tmp_path, last_only, stability=rows(0.3))["verdict"] == R


# ---- stability_decay ------------------------------------------------------------------------
def decay_rows(model, rare_curve, frequent=0.9, hw=0.01):
    out = []
    for i, v in enumerate(rare_curve):
        step = 5000 * (i + 1)
        out += [stab(model, "none", step, "F/F", frequent, hw), stab(model, "none", step, "F/R", v, hw),
                stab(model, "none", step, "R/F", frequent, hw), stab(model, "none", step, "R/R", v, hw),
                stab(model, "none", step, "F/R", 0.0, hw, pair="common_suffix")]
    return out


GRADUAL = [0.9 - 0.04 * i for i in range(11)]   # 0.90 → 0.50, half the decline at 50% of the span
QUICK = [0.9] + [0.52 - 0.002 * i for i in range(10)]  # half the decline by the second checkpoint


def test_stability_decay_speed(tmp_path):
    assert score(tmp_path, "stab_gru_vanilla_decays_gradually", stability=decay_rows("gru", GRADUAL))["verdict"] == R
    assert score(tmp_path, "stab_gru_vanilla_decays_gradually", stability=decay_rows("gru", QUICK))["verdict"] == DO
    assert score(tmp_path, "stab_lstm_vanilla_decays_quickly", stability=decay_rows("lstm", QUICK))["verdict"] == R
    assert score(tmp_path, "stab_lstm_vanilla_decays_quickly", stability=decay_rows("lstm", GRADUAL))["verdict"] == DO


def test_stability_decay_not_reproduced_or_not_measured(tmp_path):
    flat = decay_rows("gru", [0.9] * 11)
    assert score(tmp_path, "stab_gru_vanilla_decays_gradually", stability=flat)["verdict"] == NR
    above_frequent = decay_rows("gru", GRADUAL, frequent=0.3)
    assert score(tmp_path, "stab_gru_vanilla_decays_gradually", stability=above_frequent)["verdict"] == NR
    overlapping = decay_rows("gru", [0.9, 0.895, 0.89], frequent=0.895, hw=0.02)
    assert score(tmp_path, "stab_gru_vanilla_decays_gradually", stability=overlapping)["verdict"] == DO
    one_step = decay_rows("gru", [0.5])
    r = score(tmp_path, "stab_gru_vanilla_decays_gradually", stability=one_step)
    assert r["verdict"] == NM and "two checkpoints" in r["reason"]
    assert score(tmp_path, "stab_lstm_vanilla_decays_quickly", stability=decay_rows("gru", QUICK))["verdict"] == NM


# ---- lm_no_gain -----------------------------------------------------------------------------
def test_lm_no_gain(tmp_path):
    vanilla = lm("none", [36.83, 37.56, 37.77, 37.77, 38.92])
    paper_pe = lm("sinusoidal", [38.07, 38.4, 38.54, 38.8, 38.89])
    r = score(tmp_path, "lm_no_gain", lm=vanilla + paper_pe)  # the paper's own table
    assert r["verdict"] == R
    assert "36.83/37.77/38.92" in r["measured"] and "seeds 111 222 333 444 555" in r["measured"]
    assert score(tmp_path, "lm_no_gain", lm=vanilla + lm("sinusoidal", [35.0, 35.5]))["verdict"] == NR
    assert score(tmp_path, "lm_no_gain", lm=vanilla + lm("sinusoidal", [40.0, 40.5]))["verdict"] == DO
    assert score(tmp_path, "lm_no_gain", lm=vanilla)["verdict"] == NM
    gru_only = lm("none", [5.0], model="gru") + lm("sinusoidal", [5.0], model="gru")
    assert score(tmp_path, "lm_no_gain", lm=gru_only)["verdict"] == NM


# ---- permutation kinds ----------------------------------------------------------------------
def test_permutation_invariant(tmp_path):
    assert score(tmp_path, "irie_one_layer_invariant", irie=[irie(1, 0.0, 1e-7)])["verdict"] == R
    assert score(tmp_path, "irie_one_layer_invariant", irie=[irie(1, 0.02, 0.3)])["verdict"] == NR
    assert score(tmp_path, "irie_one_layer_invariant", irie=[irie(1, 0.0, 1e-3)])["verdict"] == NR
    assert score(tmp_path, "irie_one_layer_invariant", irie=[irie(2, 1.0, 1.0)])["verdict"] == NM


def test_permutation_sensitive(tmp_path):
    one = irie(1, 0.0, 0.0)
    deep = [one, irie(2, 1.0, 2.0), irie(3, 0.99, 1.0)]
    assert score(tmp_path, "irie_two_layers_sensitive", irie=deep)["verdict"] == R
    assert score(tmp_path, "irie_two_layers_sensitive", irie=[one, irie(2, 0.5, 2.0)])["verdict"] == DO
    assert score(tmp_path, "irie_two_layers_sensitive", irie=[one, irie(2, 0.0, 0.0)])["verdict"] == NR
    assert score(tmp_path, "irie_two_layers_sensitive", irie=[one])["verdict"] == NM


# ---- every claim: absent tables, and the claims file itself ---------------------------------
def test_every_claim_is_unmeasured_without_its_tables(tmp_path):
    rows = sc.scorecard(tmp_path)
    assert [r["id"] for r in rows] == list(CLAIMS)
    for r in rows:
        assert r["verdict"] == NM and r["reason"].endswith(".csv is absent"), r


def test_claims_file_is_well_formed():
    claims = sc.load_claims()
    assert len({c["id"] for c in claims}) == len(claims)
    kinds_with_direction = {"threshold", "decline", "ahead", "gap_contrast", "robust", "stability_decay",
                            "lm_no_gain", "permutation_sensitive"}
    assert set(sc.TESTS) == set(sc.SCHEMAS) == kinds_with_direction | {"no_gain", "permutation_invariant"}
    for c in claims:
        sc.validate_claim(c)
        assert c["kind"] in sc.TESTS and set(c["tables"]) <= set(sc.TABLES)
        # the sentence states the test, including what 'direction only' means (or that there is none)
        assert "reproduced if" in c["test"].lower(), c["id"]
        assert ("Direction only" in c["test"]) == (c["kind"] in kinds_with_direction), c["id"]
    # SPEC §6 and Irie's note, one entry at least per headline
    topics = ["fig2_gru_pe_95", "fig2_lstm_pe_95", "fig2_vanilla_degrades", "dual_vanilla_fails_fr",
              "dual_pe_robust_gru", "dual_pe_robust_lstm", "stab_gru_vanilla_decays_gradually",
              "stab_lstm_vanilla_decays_quickly", "stab_pe_stays_near", "length_no_help", "copy_no_help",
              "sort_helps_a_little", "double_no_help", "forms_sin_beats_fixed", "forms_sin_beats_varlen",
              "forms_varlen_clearer", "s4d_pe_helps", "extend_pe_better", "lm_no_gain",
              "irie_one_layer_invariant", "irie_two_layers_sensitive"]
    assert set(topics) <= set(CLAIMS)


@pytest.mark.parametrize("change", [
    {"kind": "no_such_kind"},
    {"params": {"select": {"model": "gru"}}},                        # threshold lacks required params
    {"tables": ["fig3"]},
    {"test": ""},
    {"extra": 1},
])
def test_malformed_claims_are_refused(change):
    bad = {**copy.deepcopy(CLAIMS["fig2_gru_pe_95"]), **change}
    with pytest.raises(PosrnnError, match="fig2_gru_pe_95"):
        sc.validate_claim(bad)


@pytest.mark.parametrize("params", [
    {"unknown_param": 1},
    {"threshold": "high"},
    {"select": {"vocab_size": {"min": "a"}}},
    {"select": {"model": {"between": 1}}},
    {"baseline": {}},
    {"baseline": {"pe": True}},
])
def test_malformed_params_are_refused(params):
    with pytest.raises(PosrnnError, match="claims.yaml"):
        sc.validate_claim(with_params("fig2_gru_pe_95", **params))


def test_claims_file_errors(tmp_path):
    (tmp_path / "c.yaml").write_text("claims: [")
    with pytest.raises(PosrnnError, match="c.yaml"):
        sc.load_claims(tmp_path / "c.yaml")
    dup = [CLAIMS["lm_no_gain"], CLAIMS["lm_no_gain"]]
    import yaml
    (tmp_path / "d.yaml").write_text(yaml.safe_dump({"claims": dup}))
    with pytest.raises(PosrnnError, match="twice"):
        sc.load_claims(tmp_path / "d.yaml")


# ---- malformed tables -----------------------------------------------------------------------
def test_malformed_tables_name_the_file(tmp_path):
    good = [ev("gru", "sinusoidal", 256, 0.99), ev("gru", "none", 256, 0.5)]
    cases = {
        "binary": lambda p: p.write_bytes(b"\xff\xfe\x00garbage\x81"),
        "missing column": lambda p: write_csv([{k: v for k, v in r.items() if k != "token_accuracy_ci_low"}
                                               for r in good], p),
        "text accuracy": lambda p: write_csv([{**good[0], "token_accuracy": "high"}, good[1]], p),
        "nan accuracy": lambda p: write_csv([{**good[0], "token_accuracy": float("nan")}, good[1]], p),
        "same cell twice": lambda p: write_csv([good[0], good[0], good[1]], p),
        "ragged": lambda p: p.write_text(open_text(good) + "reverse,gru,none,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,"
                                                           "16,17,18,19,20,21,22,23,24\n"),
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
    write_csv([ev("gru", "sinusoidal", 256, 0.99), ev("gru", "none", 256, 0.5), ev("gru", "none", 32, 0.9)],
              tmp_path / "fig2.csv")
    write_csv(lm("none", [37.0, 38.0]) + lm("sinusoidal", [38.0, 38.5]), tmp_path / "lm.csv")
    odd = {**copy.deepcopy(CLAIMS["lm_no_gain"]), "id": "pipe_claim", "claim": "a | b\nwith a line break"}
    claims = sc.load_claims() + [odd]
    rows = sc.write_scorecard(tmp_path, claims)
    assert len(rows) == len(claims)
    data = json.loads((tmp_path / "scorecard.json").read_text())
    assert [r["id"] for r in data["rows"]] == [c["id"] for c in claims]
    assert sum(data["summary"].values()) == len(claims)
    by_id = {r["id"]: r["verdict"] for r in rows}
    assert by_id["fig2_gru_pe_95"] == R and by_id["fig2_vanilla_degrades"] == R and by_id["lm_no_gain"] == R
    md = (tmp_path / "scorecard.md").read_text()
    lines = md.splitlines()
    header = lines.index("| claim | paper | measured (95% CI, seeds) | test | verdict |")
    body = [ln for ln in lines[header + 2:] if ln.startswith("|")]
    assert len(body) == len(claims)
    for ln, r in zip(body, rows):
        cells = re.split(r"(?<!\\)\|", ln)[1:-1]  # split on unescaped pipes
        assert len(cells) == 5 and f"`{r['id']}`" in cells[0] and r["verdict"] in cells[4]
    assert "a \\| b with a line break" in md
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_rich_table_has_one_row_per_claim(tmp_path):
    rows = sc.scorecard(tmp_path)
    table = sc.scorecard_rich_table(rows)
    assert table.row_count == len(rows) and len(table.columns) == 5


def test_the_committed_lite_scorecard_is_what_its_tables_give():
    """The lite scorecard in the repository (and quoted in the README) is recomputed from the
    committed tables by the current claims and code."""
    lite = Path(__file__).resolve().parents[1] / "results" / "lite"
    rows = sc.scorecard(lite / "tables")
    assert len(rows) == len(CLAIMS) and all(r["verdict"] in sc.VERDICTS for r in rows)
    committed = json.loads((lite / "scorecard" / "scorecard.json").read_text())["rows"]
    assert json.dumps(committed, sort_keys=True) == json.dumps(json.loads(json.dumps(rows)), sort_keys=True)


def test_scorecard_imports_no_training_code():
    """The stage that writes the scorecard must depend on result tables only."""
    import ast

    tree = ast.parse(Path(sc.__file__).read_text())
    allowed = {"__future__", "csv", "math", "dataclasses", "pathlib", "typing", "numpy", "yaml", "rich.table",
               "rich.text", "posrnn_cli.common.io", "posrnn_cli.common.errors"}
    found = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    found |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert found <= allowed, found - allowed
