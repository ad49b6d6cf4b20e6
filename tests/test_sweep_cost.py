"""posrnn sweep --dry-run's compute estimate: its FLOP count, its CPU calibration (faked here so
the figures are exact), its GPU table and its assumed share of peak, and how it is labelled."""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from posrnn_cli.measure import bench
from posrnn_cli.cli import app
from posrnn_cli.common.settings.config import resolve_config
from posrnn_cli.models import build_model
from posrnn_cli.measure import cost
from posrnn_cli.sweep.plan import plan
from posrnn_cli.tasks import HeldOut, build_task

sys.path.insert(0, str(Path(__file__).parent))
from fabricate import scratch

GRID = {"cells": [{"model": "gru", "vocab": 8}, {"model": "lstm", "vocab": 16}], "pe": ["none", "sinusoidal"],
        "seeds": [1], "length": 6, "hidden": 16, "iterations": 500, "batch": 32, "warmup": 5}


def _flops(run: str, jobs) -> float:
    return cost.flops_per_iteration(next(j for j in jobs if j.name == run).run_config())


@pytest.mark.parametrize("model", ["gru", "lstm", "elman", "s4d"])
def test_the_flop_count_is_the_benchs(model):
    cfg = resolve_config(options={"model.name": model, "task.vocab_size": 12, "task.length": 5, "model.hidden_size": 8,
                                  "train.batch_size": 4, "task.n_test": 16})
    task = build_task(cfg.task)
    m = build_model(cfg, task)
    batch = HeldOut(task.test_set()).sample(task, 4, torch.Generator().manual_seed(0), torch.device("cpu"))
    if model == "s4d":  # not an RNN: 6 × parameters outside the embedding × tokens, a stated approximation
        body = sum(p.numel() for n, p in m.named_parameters() if "embed" not in n)
        assert cost.flops_per_iteration(cfg) == 6.0 * body * batch.inputs.shape[1] * 4
    else:
        assert cost.flops_per_iteration(cfg) == bench.flops_per_iteration(cfg, task, m, batch)


def test_cpu_estimate_scales_the_calibration_by_each_runs_flops(tmp_path):
    params = scratch(tmp_path, fig2=GRID)
    jobs = plan(params, "t", ["fig2"], runs_root=tmp_path / "runs")
    seen = []
    rate = cost.profile_rate({"device": "cpu", "threads": 1},
                             calibrate=lambda threads: seen.append(threads) or (10.0, 2e9))
    text, secs = cost.summary(jobs, rate)
    assert seen == [1] and rate.unit == "CPU-minutes"
    for j in jobs:
        assert secs[j.label] == pytest.approx(500 * _flops(j.name, jobs) / 2e9)
    total = sum(secs.values())
    head, dev, src, line, start, *warned = text.splitlines()  # a warning follows on a busy machine
    assert start.startswith("  start-up, beside the training: 4 job(s)") and len(warned) <= 1
    with_start = total + sum(cost.startup_seconds(jobs, rate.overheads))
    assert head == ("estimated compute to train every run from step 0 (an estimate, not a measurement): "
                    f"{cost.amount(total / 60)} CPU-minutes, {cost.amount(with_start / 60)} with start-up (below)")
    assert dev.startswith("  device: ") and "1 thread(s) per run" in dev and datetime.date.today().isoformat() in dev
    assert "calibrated here just now" in src and "10.0 ms/iteration" in src and "2.00 GFLOP/s" in src
    assert line.split()[:3] == ["fig2", "4", "run(s),"]


def test_gpu_estimate_without_a_measurement_assumes_a_share_of_peak(tmp_path, monkeypatch):
    params = scratch(tmp_path, fig2={**GRID, "set": {"train.amp": True}}, dual=GRID)
    jobs = plan(params, "t", ["fig2", "dual"], runs_root=tmp_path / "runs")
    monkeypatch.setattr(cost, "gpu_kind", lambda: ("H100", False))
    rate = cost.profile_rate({"device": "cuda"}, table=[])
    text, secs = cost.summary(jobs, rate)
    assert rate.unit == "GPU-hours" and "H100 (assumed: no GPU visible here)" in text
    assert "25% of the dense peak (67 TFLOP/s fp32, 989 bf16 under train.amp), an assumption" in text
    for j in jobs:  # fp32 runs against the fp32 peak, amp runs against the bf16 one
        peak = 989e12 if j.experiment == "fig2" else 67e12
        assert secs[j.label] == pytest.approx(500 * _flops(j.name, jobs) / (0.25 * peak))
    assert "GPU-hours" in text.splitlines()[0] and text.splitlines()[3].split()[:2] == ["experiment", "runs"]
    assert [ln.split()[0] for ln in text.splitlines()[4:6]] == ["fig2", "dual"]


def test_gpu_estimate_uses_the_measured_table_for_its_device_kind(tmp_path, monkeypatch):
    """A recurrence-bound GRU row of the device kind (an A100 row beside it is not read) sets the
    GRU's step and its floor: a smaller GRU cell costs the row's ms per step × its steps, and an
    LSTM cell that step × 4/3 gates, an assumption said so."""
    params = scratch(tmp_path, fig2=GRID)
    jobs = plan(params, "t", ["fig2"], runs_root=tmp_path / "runs")
    row = {"kind": "H200", "device": "NVIDIA H200", "date": "2026-12-01", "torch": "2.11.0+cu130", "amp": False,
           "cuda_graph": False, "model": "gru", "vocab": 32, "length": 64, "hidden": 512, "batch": 512,
           "flops_per_iter": 9.3e11, "ms_per_iter": 12.8, "steps": 128}  # 0.1 ms a step
    monkeypatch.setattr(cost, "gpu_kind", lambda: ("NVIDIA H200", True))
    rate = cost.profile_rate({"device": "cuda"}, table=[row, {**row, "kind": "A100", "ms_per_iter": 99.0}])
    text, secs = cost.summary(jobs, rate)
    assert "measured on NVIDIA H200 (2026-12-01, torch 2.11.0+cu130)" in text and "device: NVIDIA H200;" in text
    head_rate = rate.model.head_rate((False, False))  # no head-bound row: the assumed share of the fp32 peak
    for j in jobs:
        cfg = j.run_config()
        w = cost.run_work(cfg)
        gates = 4 / 3 if cfg.model.name == "lstm" else 1.0
        assert secs[j.label] == pytest.approx(500 * (0.1 * gates * w.steps + w.head_flops / head_rate) / 1000)
    assert "lstm's step under fp32: gru's measured step × 4/3 gates (assumption" in text


def test_small_amounts_keep_two_significant_digits():
    assert [cost.amount(x) for x in (1234.56, 12.34, 0.04213, 0.0)] == ["1,234.6", "12.3", "0.042", "0.0"]


def test_the_committed_table_holds_only_figures_docs_bench_records():
    """Each committed row is a GPU check figure: its device and date, and its ms/iteration
    printed in docs/bench.md's GPU section (to two decimals)."""
    rows = cost.load_table()
    doc = (Path(__file__).resolve().parents[1] / "docs" / "bench.md").read_text()
    gpu = doc[doc.index("## Measured figures (GPU)"):]
    assert rows, "the table was filled from a GPU check"
    for r in rows:
        assert r["device"] in gpu and r["date"] in gpu and f"{r['ms_per_iter']:.2f}" in gpu, r
        assert r["kind"] in r["device"] and r["steps"] == 2 * r["length"]


def test_cpu_calibration_times_configuration_a():
    ms, flops = cost.calibrate_cpu(1, seconds=0.2)
    assert (ms > 0
            and flops == pytest.approx(cost.flops_per_iteration(resolve_config(options=cost.CALIBRATION)) / ms * 1000))


def test_dry_run_prints_the_estimate_beside_the_disk(tmp_path, monkeypatch):
    from posrnn_cli.measure import calibrate

    monkeypatch.setattr(cost, "calibrate_cpu", lambda threads: (10.0, 2e9))
    monkeypatch.setattr(calibrate, "time_step", lambda cfg: 5.0)
    params = scratch(tmp_path, fig2=GRID)
    r = CliRunner().invoke(app, ["sweep", "fig2", "--params", str(params), "--profile", "t", "--dry-run"])
    assert r.exit_code == 0, r.output
    assert ("expected disk use" in r.output and "(an estimate, not a measurement)" in r.output
            and "CPU-minutes" in r.output)
    r = CliRunner().invoke(app, ["sweep", "fig2", "--params", str(params), "--profile", "t", "--dry-run", "--json"])
    rows = json.loads(r.output)
    assert all(row["estimated_compute_s"] > 0 and "calibrated" in row["estimate_source"] for row in rows)
    monkeypatch.setattr(cost, "gpu_kind", lambda: ("H100", False))
    params = scratch(tmp_path, device="cuda", fig2=GRID)
    r = CliRunner().invoke(app, ["sweep", "fig2", "--params", str(params), "--profile", "t", "--dry-run"])
    assert r.exit_code == 0 and "GPU-hours" in r.output and "(assumption" in r.output, r.output


PACKED = {"cells": [{"model": "gru", "vocab": 8}, {"model": "s4d", "vocab": 8}], "pe": ["none"],
          "seeds": [1, 2, 3, 4, 5, 6, 7], "length": 6, "hidden": 16, "iterations": 500, "batch": 32, "warmup": 5}


def test_the_gpu_view_prices_the_sweeps_own_packs(tmp_path, monkeypatch):
    """The packed column is the packs ``packing.pack`` makes (7 GRU seeds: 5 + 2; S4D solo, its
    reason counted), each priced by ``pack_ms``; each column says what it rests on."""
    from posrnn_cli.measure.gpu_plan import pack_ms
    from posrnn_cli.sweep.packing import pack

    jobs = plan(scratch(tmp_path, device="cuda", fig2=PACKED), "t", ["fig2"], runs_root=tmp_path / "runs")
    monkeypatch.setattr(cost, "gpu_kind", lambda: ("NVIDIA H100 80GB HBM3", True))
    rate = cost.profile_rate({"device": "cuda"})
    text, _ = cost.summary(jobs, rate, "t")
    packs = pack(jobs, 5)
    assert sorted(len(p.jobs) for p in packs) == [1] * 7 + [2, 5]
    want = sum(p.jobs[0].run_config().train.iterations * pack_ms(rate.model, cost.run_work(p.jobs[0].run_config()),
                                                                 len(p.jobs)) for p in packs) / 1000 / 3600
    row = next(ln for ln in text.splitlines() if ln.split()[:1] == ["fig2"])
    assert row.split()[-1] == cost.amount(want)
    assert "packing: 7 run(s) in 2 ensemble(s), 7 run(s) solo (the sweep's packer" in text
    assert "solo, 7 run(s): the s4d core has no ensemble path" in text
    assert "priced from the measured rows" in text and "packed: the sweep's packs" in text
    assert "(assumption, not measured on a GPU)" in text
    text3, _ = cost.summary(jobs, rate, "t", ensemble=3)  # --ensemble 3: the packs that sweep would run
    assert "packing: 6 run(s) in 2 ensemble(s), 8 run(s) solo" in text3 and "--ensemble 3" in text3


def test_the_dry_run_summary_fits_100_columns_and_lists_runs_with_verbose(tmp_path, monkeypatch):
    monkeypatch.setattr(cost, "gpu_kind", lambda: ("H100", False))
    params = scratch(tmp_path, device="cuda", fig2=PACKED)
    args = ["sweep", "fig2", "--params", str(params), "--profile", "t", "--dry-run"]
    r = CliRunner().invoke(app, args, terminal_width=200)
    assert r.exit_code == 0, r.output
    assert max(map(len, r.output.splitlines())) <= 100, r.output
    assert "fig2/gru-v8-none-s1" not in r.output and "14 train" in r.output and "--verbose lists each run" in r.output
    assert any(ln.startswith("      ") for ln in r.output.splitlines())  # long lines wrapped, indented under their own
    r = CliRunner().invoke(app, args + ["--verbose"], terminal_width=200)
    assert r.exit_code == 0 and "fig2/gru-v8-none-s1" in r.output and "fig2/s4d-v8-none-s7" in r.output
