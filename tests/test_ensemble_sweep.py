"""Sweeps pack runs (``sweep.packing``): same-shape runs (a cell's seeds) into ensembles of up to
K, every other run solo with its reason; a packed sweep gives each run what its solo sweep
gives (within float32 rounding), the dry run shows the packing, and a packed sweep killed -9
while its ensemble trains, then run again, ends bit-identical to one never interrupted."""

from __future__ import annotations

import os
import subprocess

import pytest
from typer.testing import CliRunner

from conftest import ROOT
from ensembles import FLOAT32_TOL, mismatches
from fabricate import scratch
from posrnn_cli.cli import app
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.sweep import SweepOptions, run_sweep
from posrnn_cli.common.host.memory import member_parts, members_that_fit
from posrnn_cli.sweep.packing import default_k, describe, ensemble_k, measured_rows, pack
from posrnn_cli.sweep.storage import member_bytes, member_fit
from posrnn_cli.sweep.plan import plan
from sweeps import POSRNN, kill_sweep_while_training, results, same

GRID = {"cells": [{"model": "gru", "vocab": 6}], "pe": ["none"], "seeds": [1, 2], "length": 4, "hidden": 8,
        "iterations": 40, "batch": 8, "warmup": 2, "checkpoint_every": 10}


def test_pack_groups_a_cells_seeds_and_says_why_a_run_stays_solo(tmp_path):
    grid = {**GRID, "cells": [{"model": "gru", "vocab": 6}, {"model": "s4d", "vocab": 6}], "seeds": [1, 2, 3]}
    jobs = plan(scratch(tmp_path, fig2=grid), "t", ["fig2"], runs_root=tmp_path / "runs")
    packs = pack(jobs, 2)
    got = [([j.name for j in p.jobs], p.reason) for p in packs]
    assert got[0] == (["gru-v6-none-s1", "gru-v6-none-s2"], None)
    assert (["gru-v6-none-s3"], "no other run of its shape is left to pack with") in got
    assert (["s4d-v6-none-s1"], "the s4d core has no ensemble path") in got
    assert sorted(j.name for p in packs for j in p.jobs) == sorted(j.name for j in jobs)  # every run once
    assert all(p.solo and p.reason == "--ensemble 1 (no packing)" for p in pack(jobs, 1) if p.jobs[0].name[:3] == "gru")
    with pytest.raises(PosrnnError, match="positive number"):
        pack(jobs, 0)


def test_k_is_the_option_else_the_profile_else_measured_else_1():
    rows = [{"kind": "H100", "model": "gru", "vocab": 32, "k": 8},
            {"kind": "H100", "model": "lstm", "vocab": 16384, "k": 4}]
    assert default_k("cpu", rows, "NVIDIA H100 80GB HBM3") == 1 and default_k("cuda", [], "NVIDIA H100 80GB HBM3") == 1
    assert default_k("cuda", rows, "NVIDIA H100 80GB HBM3") == 4 and default_k("cuda", rows, "NVIDIA H200") == 1
    assert measured_rows() == []  # nothing measured yet: no packing unless asked
    gains = [{"kind": "H100", "model": "gru", "vocab": 32, "amp": True, "cuda_graph": True, "k": k, "gain": g}
             for k, g in ((1, 1.0), (2, 1.6), (4, 2.4), (8, 2.4))]  # as the GPU check writes them
    assert default_k("cuda", gains, "NVIDIA H100 80GB HBM3") == 4  # the highest gain, the smaller K on a tie
    assert default_k("cuda", gains + rows, "NVIDIA H100 80GB HBM3") == 4 and default_k("cuda", gains[:2], "H100") == 2
    assert ensemble_k({"device": "cuda"}, None, "p") == 1
    assert ensemble_k({"ensemble": 4}, None, "p") == 4 and ensemble_k({"ensemble": 4}, 2, "p") == 2
    with pytest.raises(PosrnnError, match="profile 'p': ensemble must be"):
        ensemble_k({"ensemble": "many"}, None, "p")


def test_a_packed_sweep_gives_each_run_its_solo_sweeps_result(tmp_path):
    solo_root, packed_root = tmp_path / "solo", tmp_path / "packed"
    params = scratch(tmp_path, fig2=GRID)
    run_sweep(params, "t", ["fig2"], SweepOptions(workers=2), runs_root=solo_root)
    out = run_sweep(params, "t", ["fig2"], SweepOptions(workers=2, ensemble=2), runs_root=packed_root)
    assert [o.status for o in out] == ["done", "done"]
    assert all(o.result["training"] == "trained as one of an ensemble of 2" for o in out)
    for seed in (1, 2):
        name = f"fig2/gru-v6-none-s{seed}"
        assert mismatches(packed_root / name, solo_root / name, FLOAT32_TOL) == []
        assert (packed_root / name / "eval.json").is_file()
    again = run_sweep(params, "t", ["fig2"], SweepOptions(workers=2, ensemble=2), runs_root=packed_root)
    assert [o.result["training"] for o in again] == ["skipped (finished)"] * 2


def test_the_dry_run_shows_the_packing(tmp_path, monkeypatch):
    grid = {**GRID, "cells": [{"model": "gru", "vocab": 6}, {"model": "s4d", "vocab": 6}]}
    scratch(tmp_path, fig2=grid)
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["sweep", "fig2", "--dry-run", "--ensemble", "4"], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert "packing: 2 run(s) in 1 ensemble(s), 2 run(s) solo" in r.output
    assert "solo, 2 run(s): the s4d core has no ensemble path" in r.output and "ensemble of 2" not in r.output
    r = CliRunner().invoke(app, ["sweep", "fig2", "--dry-run", "--ensemble", "4", "--verbose"], terminal_width=200)
    assert "ensemble of 2: fig2/gru-v6-none-s1, fig2/gru-v6-none-s2" in r.output
    assert "solo: fig2/s4d-v6-none-s1 (the s4d core has no ensemble path)" in r.output
    assert "packing" not in CliRunner().invoke(app, ["sweep", "fig2", "--dry-run"], terminal_width=200).output


def test_the_packer_plans_no_ensemble_whose_members_exceed_the_devices_memory(tmp_path):
    grid = {**GRID, "seeds": [1, 2, 3, 4, 5]}
    jobs = plan(scratch(tmp_path, fig2=grid), "t", ["fig2"], runs_root=tmp_path / "runs")
    member, shared = member_bytes(jobs[0].run_config())
    fit = member_fit(shared + 2 * member + 1, "a device")
    assert fit(jobs[0])[0] == 2
    packs = pack(jobs, 5, fit)
    assert [len(p.jobs) for p in packs] == [2, 2, 1]
    assert "fit" in packs[0].note and "a member of fig2's shape needs about" in packs[0].note
    assert any(line.startswith("  smaller ensembles, 2: a member of fig2's shape") for line in describe(packs))
    assert [len(p.jobs) for p in pack(jobs, 5, member_fit(10**15, "a large device"))] == [5]
    assert [len(p.jobs) for p in pack(jobs, 5, member_fit(1, "no memory"))] == [1] * 5


def test_a_members_estimate_at_the_papers_lstm_cell_limits_the_pack_on_one_gpu():
    """The LSTM at V = 16,384 (L = 64, H = 512, B = 512): a member's logits alone are gigabytes."""
    from posrnn_cli.common.settings.config import RunConfig

    cfg = RunConfig.from_dict({"task": {"name": "reverse", "vocab_size": 16_384, "length": 64},
                               "model": {"name": "lstm", "hidden_size": 512}, "train": {"batch_size": 512}})
    member, shared = member_parts(cfg, 129, 64, 16_384, 16_384, 1024, 4)
    assert 4e9 < member < 20e9  # a batch's logits with their gradients: 6.4 GB
    assert members_that_fit(16, member, shared, int(80e9)) < 16 and members_that_fit(16, member, shared, None) == 16


@pytest.mark.slow
def test_a_packed_sweep_killed_while_its_ensemble_trains_ends_bit_identical(tmp_path):
    """kill -9 of `posrnn sweep --ensemble 2` (and so of the worker training the ensemble) at five
    random moments; between kills every member's checkpoints load whole, and each member alone
    resumes; the re-run ends with the weights and scores of a packed sweep never interrupted."""
    from posrnn_cli.engine.checkpoint import load_checkpoint
    from posrnn_cli.common.files.rundir import list_checkpoints

    grid = {**GRID, "iterations": 3000, "checkpoint_every": 100, "set": {"train.log_every": 50}}
    ref = tmp_path / "ref"
    ref.mkdir()
    run_sweep(scratch(ref, fig2=grid), "t", ["fig2"], SweepOptions(workers=1, ensemble=2), runs_root=ref / "runs" / "t")
    work = tmp_path / "work"
    work.mkdir()
    scratch(work, fig2=grid)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rng = __import__("random").Random(1)
    for _ in range(5):  # killed while the worker trains the pack
        kill_sweep_while_training(work, ["fig2", "--profile", "t", "--ensemble", "2"], env, rng.uniform(0.5, 2.0))
        for run in (work / "runs" / "t" / "fig2").glob("*/"):
            for _, path in list_checkpoints(run):  # whatever a loader sees is whole, and resumable alone
                assert load_checkpoint(path)["optimizer"]["state"]
    r = subprocess.run([*POSRNN, "sweep", "fig2", "--profile", "t", "--ensemble", "2"], cwd=work, env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert same(results(ref / "runs" / "t"), results(work / "runs" / "t"))
