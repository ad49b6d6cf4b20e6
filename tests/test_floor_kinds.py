"""The test kinds whose prediction is about a floor line (``learns``, ``needs``): Irie's claims
by training read the predecessor task's order-blind line (1/7 at L = 8) themselves, so the floor
guard, which makes any comparison with an arm at its floor not testable, leaves them alone."""

from __future__ import annotations

import pytest

from posrnn_cli.analysis import scorecard as sc
from fabricate import NT, R, SEEDS, at, measure, score, vals

LINE = 1 / 7  # the order-blind line of the predecessor task at L = 8
NEEDS, LEARNS = "irie_noncausal_needs_pe_to_learn", "irie_linear_learns_without_pe"


def row(model, pe, acc, layers=2, spread=0.01):
    per = vals(acc, spread)
    return {"task": "predecessor", "model": model, "pe": pe, "vocab_size": 16, "length": 8, "hidden_size": 32,
            "layers": layers, "iterations": 3000, "batch_size": 128, "seeds": " ".join(map(str, SEEDS)),
            "n_seeds": len(SEEDS), "n_sequences": 3072, "permutation_sensitive_share": 1.0,
            "permutation_sensitive_share_by_seed": "1 1 1", "max_logit_change": 1.0, "tolerance": 1e-4,
            "permutations": 8, **measure("token_accuracy", per, SEEDS)}


def verdict(tmp_path, claim, rows):
    return score(tmp_path, claim, irie=rows)


def test_needs_reads_learning_with_and_the_floor_without(tmp_path):
    x = verdict(tmp_path, NEEDS, [row("noncausal_transformer", "sinusoidal", 0.9),
                                  row("noncausal_transformer", "none", LINE, spread=0.005)])
    assert x["at_regime"]["verdict"] == R, x["at_regime"]
    assert "order-blind line 0.143" in x["at_regime"]["measured"]
    # without PE shown above the line: the model read order without it
    x = verdict(tmp_path, NEEDS, [row("noncausal_transformer", "sinusoidal", 0.9),
                                  row("noncausal_transformer", "none", 0.40)])
    assert at(x) == sc.NOT_REPRODUCED
    # with PE not shown above the line: nothing shows a need
    x = verdict(tmp_path, NEEDS, [row("noncausal_transformer", "sinusoidal", LINE + 0.001),
                                  row("noncausal_transformer", "none", LINE, spread=0.005)])
    assert at(x) == NT and "not shown above its floor line" in x["at_regime"]["reason"]
    # without PE neither at the line (within 0.02) nor shown above it
    x = verdict(tmp_path, NEEDS, [row("noncausal_transformer", "sinusoidal", 0.9),
                                  {**row("noncausal_transformer", "none", 0.2), **measure(
                                      "token_accuracy", [0.12, 0.16, 0.30], SEEDS)}])
    assert at(x) == sc.INCONCLUSIVE


def test_needs_is_not_read_by_the_floor_guard_while_ahead_is(tmp_path):
    """The same arms scored by an ``ahead`` claim (PE ahead of vanilla) read not testable: an arm
    sits at its floor. The ``needs`` claim predicts exactly that arm's place."""
    rows = [row("noncausal_transformer", "sinusoidal", 0.9), row("noncausal_transformer", "none", LINE, spread=0.005)]
    ahead = {"id": "x_ahead", "claim": "PE ahead", "paper": "test", "tables": ["irie"], "regime": {}, "kind": "ahead",
             "params": {"select": {"model": "noncausal_transformer"}, "better": {"pe": "sinusoidal"},
                        "worse": {"pe": "none"}}, "test": "t"}
    assert at(score(tmp_path, ahead, irie=rows)) == NT
    assert at(verdict(tmp_path, NEEDS, rows)) == R


def test_learns_reads_the_arm_against_its_line(tmp_path):
    assert at(verdict(tmp_path, LEARNS, [row("linear_transformer", "none", 0.6)])) == R
    near = row("linear_transformer", "none", LINE + 0.005, spread=0.003)
    assert at(verdict(tmp_path, LEARNS, [near])) == sc.NOT_REPRODUCED
    wide = {**row("linear_transformer", "none", 0.2), **measure("token_accuracy", [0.10, 0.20, 0.30], SEEDS)}
    assert at(verdict(tmp_path, LEARNS, [wide])) == sc.INCONCLUSIVE
    # one layer is outside the claim's cells: not measured
    assert at(verdict(tmp_path, LEARNS, [row("linear_transformer", "none", 0.6, layers=1)])) == sc.NOT_MEASURED


def test_the_floor_kinds_validate_their_parameters():
    base = next(c for c in sc.load_claims() if c["id"] == NEEDS)
    bad = {**base, "params": {**base["params"], "margin": 2}}
    with pytest.raises(Exception):
        sc.validate_claim(bad)
    bad = {**base, "params": {k: v for k, v in base["params"].items() if k != "without"}}
    with pytest.raises(Exception):
        sc.validate_claim(bad)
