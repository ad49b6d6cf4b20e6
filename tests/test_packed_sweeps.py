"""Packed sweeps: ``--ensemble`` and ``ensemble:`` take one positive whole number written plainly;
the dry run plans packs only where the executor runs them; a member whose folder is a file is one
line; a member moved ahead alone is named and trains solo, keeping its checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fabricate import scratch
from posrnn_cli.cli import app
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.settings.profiles import load_profile
from posrnn_cli.sweep import SweepOptions, run_sweep
from posrnn_cli.sweep.jobs import in_step, run_pack
from posrnn_cli.sweep.packing import ensemble_k, pack_jobs, parse_k
from posrnn_cli.sweep.plan import plan

GRID = {"cells": [{"model": "gru", "vocab": 6}], "pe": ["none"], "seeds": [1, 2, 3], "length": 4, "hidden": 8,
        "iterations": 20, "batch": 8, "warmup": 2, "checkpoint_every": 10}


@pytest.mark.parametrize("text", ["[2,2]", " 2", "02", "2.0", "+2", "0", "-1", "2 "])
def test_ensemble_option_takes_one_positive_number_written_plainly(text):
    with pytest.raises(PosrnnError, match="written plainly"):
        parse_k(text)


def test_ensemble_option_cli_refuses_in_one_line(tmp_path, monkeypatch):
    scratch(tmp_path, fig2=GRID)
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["sweep", "fig2", "--dry-run", "--ensemble", " 2"])
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code != 0 and len(lines) == 1 and "written plainly" in lines[0], r.output
    assert parse_k("4") == 4 and parse_k(None) is None


@pytest.mark.parametrize("value", ["2.0", "true", '" 2"', '"[2,2]"', '"2"', "[2, 2]"])
def test_a_profiles_ensemble_is_one_number_written_plainly(tmp_path, value):
    path = scratch(tmp_path, fig2=GRID)
    path.write_text(path.read_text().replace("  t:\n", f"  t:\n    ensemble: {value}\n", 1))
    prof = load_profile(path, "t")
    with pytest.raises(PosrnnError, match="profile 't': ensemble must be .* written plainly"):
        ensemble_k(prof, None, "t")


def test_the_dry_run_refuses_packs_under_slurm_as_the_run_does(tmp_path):
    params = scratch(tmp_path, fig2=GRID)
    with pytest.raises(PosrnnError, match="local executor only"):
        run_sweep(params, "t", ["fig2"], SweepOptions(executor="slurm", ensemble=2, dry_run=True),
                  runs_root=tmp_path / "runs")


def test_a_member_whose_folder_is_a_file_is_one_line(tmp_path):
    params = scratch(tmp_path, fig2=GRID)
    jobs = plan(params, "t", ["fig2"], runs_root=tmp_path / "runs")
    Path(jobs[0].run_dir).parent.mkdir(parents=True)
    Path(jobs[0].run_dir).write_text("a file\n")
    (packed,) = [j for j in pack_jobs(jobs, 3)]
    with pytest.raises(PosrnnError, match="is a file where the run's directory"):
        run_pack(packed)
    assert Path(jobs[0].run_dir).read_text() == "a file\n"


def test_a_member_moved_ahead_alone_is_named_with_the_checkpoints_the_pack_drops(tmp_path, capsys):
    params = scratch(tmp_path, fig2=GRID)
    jobs = plan(params, "t", ["fig2"], runs_root=tmp_path / "runs")
    for j, steps in zip(jobs, ([10], [10], [10, 20])):
        (Path(j.run_dir) / "checkpoints").mkdir(parents=True)
        for s in steps:
            (Path(j.run_dir) / "checkpoints" / f"step_{s:07d}.pt").write_bytes(b"")
    assert in_step(jobs) == jobs  # the pack re-forms at step 10
    err = capsys.readouterr().err
    assert jobs[2].label in err and "step 20" in err and "re-forms at step 10" in err
    assert jobs[0].label not in err and jobs[1].label not in err
