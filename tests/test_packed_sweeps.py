"""Packed sweeps: ``--ensemble`` and ``ensemble:`` take one positive whole number written plainly;
under SLURM the dry run packs by a task's memory, a pack is one array task recorded under each
member's run directory and reattached as one task, and its members land as solo runs do; a member
whose folder is a file is one line; a member moved ahead alone is named and trains solo, keeping
its checkpoints."""

from __future__ import annotations

import json
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


def test_the_dry_run_packs_under_slurm_by_what_a_tasks_memory_holds(tmp_path):
    params = scratch(tmp_path, fig2=GRID, slurm={"mem_gb": 64})
    out = run_sweep(params, "t", ["fig2"], SweepOptions(executor="slurm", ensemble=2, dry_run=True),
                    runs_root=tmp_path / "runs")
    assert [o.result["pack"]["runs"] for o in out][:2] == [[j.job.label for j in out[:2]]] * 2
    assert out[2].result["pack"]["solo_reason"] == "no other run of its shape is left to pack with"
    tiny = SweepOptions(executor="slurm", ensemble=2, dry_run=True, slurm={"mem_gb": 1e-9})
    out = run_sweep(params, "t", ["fig2"], tiny, runs_root=tmp_path / "runs")
    assert all(len(o.result["pack"]["runs"]) == 1 for o in out)
    assert "a SLURM task (mem_gb: 1e-09)" in out[0].result["pack"]["solo_reason"]


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


def test_a_pack_is_one_recorded_task_reattached_as_one_pack(tmp_path, monkeypatch):
    from posrnn_cli.sweep import slurm, slurm_record
    from posrnn_cli.sweep.packing import PACK_KIND, members_of

    root = tmp_path / "runs"
    jobs = plan(scratch(tmp_path, fig2=GRID), "t", ["fig2"], runs_root=root)
    packed = pack_jobs(jobs, 2)
    assert [j.kind for j in packed] == [PACK_KIND, "train"]
    folder = root / slurm_record.SUBMITIT_DIR
    root.mkdir()
    slurm_record.add_to_record(root, "7", "slurm", folder,
                               {f"7_{i}": slurm._record_entry(j) for i, j in enumerate(packed)})
    recorded = slurm_record.recorded_tasks(root)
    assert [recorded[str(Path(j.run_dir).resolve())][0] for j in jobs] == ["7_0", "7_0", "7_1"]
    asked = []
    monkeypatch.setattr(slurm, "slurm_states", lambda ids: asked.append(ids) or {i: "RUNNING" for i in ids})
    _, _, tasks = slurm._in_flight(jobs, root, slurm.SlurmSweep())
    assert asked == [["7_0", "7_1"]] and [t.job_id for t in tasks] == ["7_0", "7_1"]
    assert [m.label for m in members_of(tasks[0].job)] == [j.label for j in jobs[:2]]
    assert tasks[1].job.label == jobs[2].label


def test_a_pack_under_submitit_is_one_array_task_whose_members_land_as_solo_runs(tmp_path):
    pytest.importorskip("submitit")
    from ensembles import FLOAT32_TOL, mismatches

    params = scratch(tmp_path, fig2=GRID, slurm={"timeout_min": 5, "cpus_per_task": 1})
    run_sweep(params, "t", ["fig2"], SweepOptions(workers=2), runs_root=tmp_path / "solo")
    out = run_sweep(params, "t", ["fig2"], SweepOptions(executor="submitit-local", ensemble=2),
                    runs_root=tmp_path / "packed")
    assert [o.status for o in out] == ["done"] * 3
    assert [o.result["training"] for o in out][:2] == ["trained as one of an ensemble of 2"] * 2
    assert len(list((tmp_path / "packed" / ".submitit").rglob("*_result.pkl"))) == 2  # one task for the pack
    for j in plan(params, "t", ["fig2"], runs_root=tmp_path / "packed"):
        solo = tmp_path / "solo" / j.experiment / j.name
        assert mismatches(Path(j.run_dir), solo, FLOAT32_TOL) == []
        assert sorted(p.name for p in Path(j.run_dir).rglob("*")) == sorted(p.name for p in solo.rglob("*"))
        code, solo_code = (json.loads((d / "code.json").read_text()) for d in (Path(j.run_dir), solo))
        assert {k: v for k, v in code.items() if k != "ensemble"} == solo_code  # a member names its ensemble
