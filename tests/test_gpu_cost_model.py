"""The GPU cost model (posrnn_cli/measure/gpu_model.py, gpu_plan.py): it holds every committed
measured row, never prices the faster switches above fp32, keeps each row to its own switches,
gives parallel cores no floor, prices the language model at its real tokens, and refuses a plan
whose run cannot fit the device."""

from __future__ import annotations

import re
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posrnn_cli.cli import app
from posrnn_cli.common.settings.config import resolve_config
from posrnn_cli.models.head import HEAD_CHUNK_TOKENS
from posrnn_cli.measure import cost
from posrnn_cli.measure.gpu_model import GATES, Work, row_work
from posrnn_cli.measure.gpu_plan import pack_ms, priced_packs
from posrnn_cli.sweep.plan import Job
from posrnn_cli.measure.lm_tokens import lm_tokens

sys.path.insert(0, str(Path(__file__).parent))
from fabricate import scratch

H100 = "NVIDIA H100 80GB HBM3"


def _model(rows=None):
    return cost.gpu_rate(H100, True, cost.load_table() if rows is None else rows).model


def test_the_model_holds_every_committed_measured_row_within_ten_percent():
    model = _model()
    rows = cost.load_table()
    assert rows
    for r in rows:
        assert model.ms_per_iter(row_work(r)) == pytest.approx(r["ms_per_iter"], rel=0.10), r


def _grid():
    for core in (*GATES, "s4d", "transformer"):
        for steps in (16, 128, 1536):
            for step_flops in (1e7, 7e9, 1e11):
                for head in (0.0, 3e9, 1.6e12, 2e13):
                    rec = step_flops * steps if core in GATES else 0.0
                    yield Work(core, steps, rec, head, rec + head if core in GATES else step_flops * steps + head)


def test_amp_and_the_graph_never_price_a_cell_above_its_fp32_price():
    model = _model()
    for w in _grid():
        fp32 = model.ms_per_iter(w)
        for sw in ((True, False), (True, True), (False, True)):
            assert model.ms_per_iter(replace(w, amp=sw[0], cuda_graph=sw[1])) <= fp32 * (1 + 1e-12), (w, sw)


def test_a_gru_cell_at_small_v_is_priced_by_the_gru_row_not_the_head_bound_lstm_row():
    """The only amp + graph row is head-bound (the V = 16,384 LSTM): it sets the head's rate
    under those switches, not the recurrence's floor, so fig2's GRU at V = 32 costs less than
    its measured fp32 12.08 ms there."""
    model = _model()
    gru = next(r for r in cost.load_table() if r["model"] == "gru")
    w = row_work(gru)
    amp = model.ms_per_iter(replace(w, amp=True, cuda_graph=True))
    assert amp < gru["ms_per_iter"] and amp == pytest.approx(gru["ms_per_iter"] / 1.2, rel=0.01)
    assert any("amp: the recurrence 1.2× faster than fp32 (assumption" in n for n in model.notes)


def test_each_row_is_read_under_its_own_switches_only():
    gru = next(r for r in cost.load_table() if r["model"] == "gru")
    model = _model([{**gru, "amp": True, "ms_per_iter": 5.0}])  # an amp row alone: fp32 has nothing measured
    w = row_work(gru)
    assert model.ms_per_iter(replace(w, amp=True)) == pytest.approx(5.0, rel=0.01)  # its small head priced on top
    assert model.ms_per_iter(w) == pytest.approx(w.total_flops / model.assumed_rate(False))
    assert any("25% of the dense peak" in n for n in model.notes)


def test_cores_without_sequential_steps_get_no_floor():
    model = _model()
    tiny = Work("s4d", 1536, 0.0, 1e6, 1e8)
    assert model.ms_per_iter(tiny) == pytest.approx(1e8 / model.assumed_rate(False))
    rnn = Work("gru", 1536, 1e8, 1e6, 1e8 + 1e6)  # the same FLOPs as a GRU: the floor holds it up
    assert model.ms_per_iter(rnn) > 1536 * 0.09


def test_the_priced_packs_are_the_sweeps_and_other_cores_stay_solo():
    """The dry run prices the packs ``packing.pack`` makes (seeds of one shape, up to k); a core
    without an ensemble path is priced solo, with the packer's reason."""
    from posrnn_cli.sweep.packing import pack

    def job(core, v, s):
        return Job("fig2", f"{core}-v{v}-s{s}", "train", f"runs/{core}{v}{s}",
                   {"model": {"name": core}, "task": {"vocab_size": v}, "train": {"seed": s}})

    jobs = [job(c, v, s) for c in ("gru", "s4d") for v in (8, 16) for s in range(7)]
    packs = priced_packs(jobs, 5)
    assert [[j.label for j in p.jobs] for p in packs] == [[j.label for j in p.jobs] for p in pack(jobs, 5)]
    gru = [p for p in packs if p.jobs[0].config["model"]["name"] == "gru"]
    assert [len(p.jobs) for p in gru] == [5, 2, 5, 2]
    assert all(len({j.config["task"]["vocab_size"] for j in p.jobs}) == 1 for p in gru)
    s4d = [p for p in packs if p.jobs[0].config["model"]["name"] == "s4d"]
    assert len(s4d) == 14 and all(p.solo and p.reason == "the s4d core has no ensemble path" for p in s4d)
    model = _model()
    w = row_work(next(r for r in cost.load_table() if r["model"] == "gru"))
    solo = model.ms_per_iter(replace(w, amp=True, cuda_graph=True))
    assert solo < pack_ms(model, w, 5) < 5 * solo


def _lm_cfg(data=None, **train):
    return resolve_config(options={"task.name": "lm", "task.data": data or "/nonexistent/enc", "task.vocab_size": 32768,
                                   "task.length": 1024, "model.name": "lstm", "model.hidden_size": 512,
                                   "train.batch_size": 512, "train.device": "cuda",
                                   **{f"train.{k}": v for k, v in train.items()}})


def test_the_language_model_is_priced_at_its_real_tokens_and_fits_80_gb_with_the_chunked_head():
    """B = 512, T = 1,024, V = 32,768: the head sees the real tokens of the assumed paragraph
    lengths, the recurrence the padded batch; the head's FLOPs count its chunks' logits twice
    (recomputed in backward); the step's peak fits in 80 GB with the chunked head and not with the
    plain one (its logits alone are 68.7 GB)."""
    cfg = _lm_cfg()
    toks = lm_tokens(None, 1024, 512)
    assert 100 < toks.real_per_paragraph < 300 and toks.padded_steps > 1000 and "assumed" in toks.source
    w = cost.run_work(cfg)
    assert w.head_flops == pytest.approx(4 * 2 * 512 * 32768 * toks.real_per_paragraph * 512)
    assert w.chunked and w.peak_bytes < 80e9
    plain = w.peak_bytes - 12 * 32768 * HEAD_CHUNK_TOKENS + 12 * 32768 * 512 * 1023
    assert plain > 80e9 and 4 * 512 * 1023 * 32768 > 68e9


def test_the_dry_run_refuses_in_one_line_a_plan_whose_run_cannot_fit(tmp_path, monkeypatch):
    monkeypatch.setattr(cost, "gpu_kind", lambda: ("H100", False))
    grid = {"cells": [{"model": "gru", "vocab": 65536}], "pe": ["none"], "seeds": [1], "length": 64, "hidden": 16,
            "iterations": 10, "batch": 4096, "warmup": 1}
    params = scratch(tmp_path, device="cuda", fig2=grid)
    r = CliRunner().invoke(app, ["sweep", "fig2", "--params", str(params), "--profile", "t", "--dry-run"])
    assert r.exit_code != 0 and "Traceback" not in r.output, r.output
    line = [x for x in r.output.splitlines() if "needs about" in x]
    assert len(line) == 1 and "train.batch_size" in line[0] and "torchrun" in line[0] and "in chunks" in line[0]


def test_the_lm_is_priced_at_the_encoded_corpus_own_lengths_where_it_exists(tmp_path):
    root = Path(__file__).resolve().parents[1]
    for argv in (["lm", "prepare", "--data-dir", str(root / "data/wikitext-mini"), "--out", str(tmp_path / "txt")],
                 ["lm", "tokenizer", "--data", str(tmp_path / "txt"), "--out", str(tmp_path / "tok"), "--vocab-size",
                  "300"],
                 ["lm", "encode", "--data", str(tmp_path / "txt"), "--tokenizer", str(tmp_path / "tok"), "--out",
                  str(tmp_path / "enc"), "--max-tokens", "48"]):
        r = CliRunner().invoke(app, argv)
        assert r.exit_code == 0, r.output
    from posrnn_cli.lm.encode import LMCorpus

    lengths = LMCorpus(tmp_path / "enc", "train").lengths
    toks = lm_tokens(str(tmp_path / "enc"), 48, 8)
    assert "measured from the encoded corpus" in toks.source
    assert toks.real_per_paragraph == pytest.approx(float((lengths - 1).mean()))
    assert lengths.max() - 1 >= toks.padded_steps > (lengths - 1).mean()


# ---- the factors nothing measured yet: priced over their ranges, gone once their rows exist ------
def _range_line(text: str, name: str) -> list[tuple[float, float]]:
    start = text.index("  range over them")
    line = next(ln for ln in text[start:].splitlines() if ln.startswith(f"  {name} "))
    return [tuple(float(x.replace(",", "")) for x in cell.split("–")) for cell in line.split()[-3:]]


def _paper_core_jobs():
    from posrnn_cli.sweep.plan import plan

    return plan(Path(__file__).resolve().parents[1] / "params.yaml", "paper_core", ["fig2", "dual", "extend", "lm"])


def test_the_dry_run_prices_each_unmeasured_factor_over_its_range_and_names_it():
    from posrnn_cli.measure.gpu_model import FACTORS

    rate = cost.gpu_rate("H100", False, cost.load_table(), ensemble=[])
    text, _ = cost.summary(_paper_core_jobs(), rate)
    assert rate.model.used == {"pack_gain", "amp_gain", "lstm_step"}  # no Elman run in paper_core
    for name in ("pack_gain", "amp_gain", "lstm_step"):
        f = FACTORS[name]
        assert f"    {f.words}: {f.low:g}–{f.high:g}, assumed {f.shown or format(f.assumed, 'g')} (" in text
    assert FACTORS["elman_step"].words not in text
    central = re.search(r"synthetic tasks +[\d,]+ +([\d,.]+) +([\d,.]+) +([\d,.]+)\n", text).groups()
    for (lo, hi), mid in zip(_range_line(text, "synthetic tasks"), central):
        assert lo < float(mid.replace(",", "")) < hi
    (_, _), (amp_lo, amp_hi), (pk_lo, pk_hi) = _range_line(text, "synthetic tasks")
    assert pk_lo < amp_lo and pk_hi == amp_hi  # at g = 1 a pack costs its runs alone
    head = text.splitlines()[0]
    assert "at the assumed factors," in head and "over their plausible ranges (below)" in head


def test_a_factor_drops_out_of_the_range_once_its_row_is_measured():
    """Rows of the format the GPU check writes (made up here: no GPU) replace the factors: a
    recurrence-bound GRU row under amp + cuda_graph, LSTM rows and the packing gains."""
    gru = next(r for r in cost.load_table() if r["model"] == "gru")
    lstm = {**gru, "model": "lstm", "vocab": 256, "flops_per_iter": 1.2e12, "ms_per_iter": 15.0}
    rows = cost.load_table() + [{**gru, "amp": True, "cuda_graph": True, "ms_per_iter": 7.0},
                                {**gru, "amp": True, "ms_per_iter": 8.0}, lstm,
                                {**lstm, "amp": True, "cuda_graph": True, "ms_per_iter": 9.0}]
    ens = [{**gru, "amp": True, "cuda_graph": True, "k": k, "gain": g} for k, g in ((1, 0.9), (4, 2.5), (8, 3.0))]
    rate = cost.gpu_rate("H100", False, rows, ensemble=ens)
    text, _ = cost.summary(_paper_core_jobs(), rate)
    assert rate.model.used == set() and "range over them" not in text and "plausible ranges" not in text
    assert rate.model.pack_gain(5) == pytest.approx(2.5 + 0.5 / 4) and rate.model.pack_gain(1) == 0.9
    assert rate.model.pack_gain(16) == 3.0 and "packed: the gain measured at K = 1, 4, 8" in text
    assert "priced by the measured packing gain" in text and "not measured on a GPU" not in text
    w = row_work(gru)
    assert rate.model.ms_per_iter(replace(w, amp=True, cuda_graph=True)) == pytest.approx(7.0, rel=0.02)
    only_amp = cost.gpu_rate("H100", False, rows[:-1], ensemble=ens).model  # no LSTM amp + graph row
    only_amp.ms_per_iter(replace(row_work(lstm), amp=True, cuda_graph=True))
    assert only_amp.used == {"lstm_step"}  # the GRU's measured amp + graph step × the LSTM's factor


def test_the_factors_ranges_hold_their_assumed_values():
    from posrnn_cli.measure.gpu_model import FACTORS

    for f in FACTORS.values():
        assert f.low <= f.assumed <= f.high and f.low < f.high and f.why
        assert f.end(True) != f.end(False)


def test_length_buckets_price_the_lm_at_a_shorter_padded_batch_and_the_same_real_tokens():
    """Each batch from one of n equal-count length buckets: the recurrence runs to the bucket's
    longest draw (1,022 steps unbucketed at B = 512; a fifth of that at 16 buckets), the head sees
    the same real tokens; each bucket holds 1/n of the paragraphs, in order of length."""
    from posrnn_cli.measure.lm_tokens import assumed_pmf, bucket_pmfs

    plain = lm_tokens(None, 1024, 512)
    steps = [lm_tokens(None, 1024, 512, n).padded_steps for n in (1, 2, 4, 16, 64)]
    assert steps[0] == pytest.approx(plain.padded_steps) and plain.padded_steps > 1000
    assert all(a > b for a, b in zip(steps, steps[1:])) and steps[3] < 250
    assert lm_tokens(None, 1024, 512, 16).real_per_paragraph == pytest.approx(plain.real_per_paragraph)
    parts = bucket_pmfs(assumed_pmf(1024), 4)
    assert all(sum(p) == pytest.approx(1.0) for p in parts)
    tops = [max(n for n, p in enumerate(part) if p > 0) for part in parts]
    lows = [min(n for n, p in enumerate(part) if p > 0) for part in parts]
    assert all(t <= lo for t, lo in zip(tops, lows[1:]))  # buckets in order of length, touching at most
    assert sum(q / 4 for part in parts for q in part[:200]) == pytest.approx(sum(assumed_pmf(1024)[:200]))
    tour = " ".join((Path(__file__).resolve().parents[1] / "docs" / "tour.md").read_text().split())
    assert (f"about {plain.padded_steps:,.0f} recurrence steps for about {plain.real_per_paragraph:,.0f} real tokens"
            in tour and f"at about {steps[3]:,.0f} padded steps" in tour)
    cfg = _lm_cfg()
    bucketed = resolve_config(options={**{k: v for k, v in cfg.flat().items() if k != "train.betas"},
                                       "task.length_buckets": 16})
    w, wb = cost.run_work(cfg), cost.run_work(bucketed)
    assert wb.steps < w.steps / 4 and wb.head_flops == pytest.approx(w.head_flops) and wb.rec_flops < w.rec_flops
