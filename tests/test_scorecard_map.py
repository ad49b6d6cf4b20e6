"""The kinds that score Irie's two Transformer claims (permutation_split, and permutation_invariant
on the non-causal core) and the map's four hypotheses per core (ahead, gap_contrast and the
additive kind), on fabricated tables: each verdict where the numbers put it, and the earlier
L = 8 Mamba runs left out."""

from __future__ import annotations

from posrnn_cli.analysis.scorecard.claims import validate_claim

from fabricate import CLAIMS, DO, INC, NM, NR, R, at, ev, irie, score

MAP = {"length": 12, "hidden_size": 58}


def t(model, layers, share, change, pe="none"):
    return {**irie(layers, share, change, pe=pe), "model": model}


def test_the_linear_transformer_split(tmp_path):
    cid, lt = "irie_linear_transformer_same", "linear_transformer"
    softmax = [irie(1, 1.0, 0.5), irie(2, 0.0, 0.0)]  # the softmax Transformer's rows are not read
    assert at(score(tmp_path, cid, irie=[t(lt, 1, 0.0, 1e-7), t(lt, 2, 1.0, 0.4), *softmax])) == R
    assert at(score(tmp_path, cid, irie=[t(lt, 1, 0.3, 0.2), t(lt, 2, 1.0, 0.4)])) == NR
    assert at(score(tmp_path, cid, irie=[t(lt, 1, 0.0, 1e-7), t(lt, 2, 0.5, 0.4)])) == DO
    assert at(score(tmp_path, cid, irie=[t(lt, 2, 1.0, 0.4)])) == NM  # no one-layer row
    assert at(score(tmp_path, cid, irie=softmax)) == NM


def test_the_noncausal_transformer_invariance(tmp_path):
    cid, nc = "irie_noncausal_needs_pe", "noncausal_transformer"
    with_pe = t(nc, 2, 1.0, 0.4, pe="sinusoidal")  # with PE it may change: not read
    assert at(score(tmp_path, cid, irie=[t(nc, 1, 0.0, 1e-7), t(nc, 2, 0.0, 1e-7), with_pe])) == R
    assert at(score(tmp_path, cid, irie=[t(nc, 1, 0.0, 1e-7), t(nc, 2, 0.2, 0.1)])) == NR
    assert at(score(tmp_path, cid, irie=[irie(1, 0.0, 1e-7)])) == NM


def grid(model, acc, at_=MAP, vocabs=(16, 64, 256)):
    """mamba_conv rows: acc(conv, pe) per cell, the same at every V."""
    return [ev(model, pe, V, acc(conv, pe), at=at_, conv=conv, iterations=1000)
            for V in vocabs for conv in (True, False) for pe in ("none", "sinusoidal")]


def test_the_maps_hypotheses(tmp_path):
    for core, short in (("mamba", "mamba"), ("gated_deltanet_layer", "gdn_layer"), ("hawk", "hawk"),
                        ("xlstm", "xlstm")):
        ids = [f"map_pe_on_{short}", f"map_pe_more_off_{short}", f"map_conv_beats_pe_{short}",
               f"map_pe_conv_add_{short}"]
        for cid in ids:
            validate_claim(CLAIMS[cid])
        # the convolution worth 0.3, PE 0.2 without it and 0.05 with it: the first three hold, no additivity
        sub = grid(core, lambda conv, pe: 0.3 + 0.3 * conv + (0.05 if conv else 0.2) * (pe == "sinusoidal"))
        assert [at(score(tmp_path, cid, mamba_conv=sub)) for cid in ids] == [R, R, R, NR]
        # the two add up exactly: additive; PE no more help without the convolution (a zero difference: inconclusive)
        add = grid(core, lambda conv, pe: 0.3 + 0.1 * conv + 0.15 * (pe == "sinusoidal"))
        assert [at(score(tmp_path, cid, mamba_conv=add)) for cid in ids] == [R, INC, NR, R]
        # the same cells at L = 8 (beyond2's Mamba runs predate these hypotheses): not read
        early = grid(core, lambda conv, pe: 0.3 + 0.3 * conv, at_={"length": 8, "hidden_size": 58})
        assert {at(score(tmp_path, cid, mamba_conv=early)) for cid in ids} == {NM}


def test_additivity_is_inconclusive_where_the_interaction_is_noisy(tmp_path):
    cid = "map_pe_conv_add_hawk"
    noisy = {(True, "sinusoidal"): [0.5, 0.7, 0.6], (True, "none"): [0.4, 0.4, 0.4],
             (False, "sinusoidal"): [0.3, 0.3, 0.3], (False, "none"): [0.2, 0.2, 0.2]}
    rows = grid("hawk", lambda conv, pe: noisy[(conv, pe)])
    assert at(score(tmp_path, cid, mamba_conv=rows)) == INC
