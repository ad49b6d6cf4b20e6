"""posrnn sweep: planning a profile's grids, the local worker pool, submitit's local executor
(the SLURM code path), a real one-node SLURM, kill -9 and a re-run, a failing cell, and the
profile switch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from posrnn_cli.cli import app
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.settings.profiles import active_profiles, use_profile
from posrnn_cli.sweep import SweepOptions, run_sweep, status, waves
from posrnn_cli.sweep.plan import plan

from conftest import ROOT
from fabricate import scratch
from sweeps import (POSRNN, cluster_env, kill_sweep_while_training, results, same, stop_sweeps, tasks_submitted_from,
                    wait_for)
TINY = {"cells": [{"model": "gru", "vocab": 4}, {"model": "gru", "vocab": 6}], "pe": ["none", "sinusoidal"],
        "seeds": [1], "length": 4, "hidden": 8, "iterations": 40, "batch": 8, "warmup": 2, "checkpoint_every": 10}


# ---- planning ---------------------------------------------------------------------------------
def test_plan_expands_cells_pe_and_seeds_and_follows_like(tmp_path):
    params = scratch(tmp_path, fig2=TINY, forms={"like": "fig2", "cells": [{"model": "gru", "vocab": 6}],
                                                  "pe": ["random"], "seeds": [1, 2]})
    jobs = plan(params, "t", ["fig2", "forms"], runs_root=tmp_path / "runs")
    assert [j.name for j in jobs] == ["gru-v4-none-s1", "gru-v4-sinusoidal-s1", "gru-v6-none-s1",
                                      "gru-v6-sinusoidal-s1",
                                      "gru-v6-random-s1", "gru-v6-random-s2"]
    cfg = jobs[-1].run_config()
    assert (cfg.task.vocab_size, cfg.task.length, cfg.model.hidden_size, cfg.train.iterations, cfg.model.pe,
            cfg.train.seed, cfg.task.n_test, cfg.train.device) == (6, 4, 8, 40, "random", 2, 32, "cpu")
    assert jobs[-1].run_dir == str(tmp_path / "runs" / "forms" / "gru-v6-random-s2")
    assert all(status(j) == "new" for j in jobs)


@pytest.mark.parametrize("sections, exps, words", [
    ({"fig2": {**TINY, "hiden": 8}}, ["fig2"], "unknown key 'hiden'"),
    ({"fig2": TINY}, ["fig3"], "unknown experiment 'fig3'"),
    ({"fig2": {**TINY, "like": "fig2"}}, ["fig2"], "loops"),
    ({"fig2": TINY,
      "extend": {"cells": [{"model": "gru", "vocab": 8}], "pe": ["none"], "seeds": [1], "extra_vocab": 4}},
     ["extend"], "has no fig2 run to extend"),
    ({"fig2": {**TINY, "seeds": ["one"]}}, ["fig2"], "seeds must be integers"),
    ({"fig2": {**TINY, "seeds": [1, 1]}}, ["fig2"], "seeds lists 1 more than once"),
    ({"fig2": {**TINY, "set": {"train.lr": "fast"}}}, ["fig2"], "train.lr must be of type float"),
    ({"fig3": TINY}, ["fig2"], "unknown section(s) fig3"),
    ({"dual": TINY, "stability": {"triplets": 1}}, ["stability"], "stability.triplets must be at least 2, got 1"),
    ({"dual": TINY, "stability": {"chunk": 8}}, ["stability"], "unknown key(s) chunk; use triplets, chunk_size, seed"),
    ({"fig2": TINY, "extend": {"cells": [{"model": "gru", "vocab": 4}], "pe": ["none"], "seeds": [1]}}, ["extend"],
     "missing extra_vocab"),
    ({"lm_data": {"data_dir": "x", "vocab_size": 300}}, ["lm_data"], "missing max_tokens"),
    ({"lm_data": {"data_dir": "x", "vocab_size": 70_000, "max_tokens": 64, "threads": 1}}, ["lm_data"],
     "vocab_size must lie in 2 … 65,536"),
    ({"lm_data": {"data_dir": "x", "vocab_size": 300, "max_tokens": 64}}, ["lm_data"], "missing threads"),
    ({"lm_data": {"data_dir": "x", "vocab_size": 300, "max_tokens": 64, "threads": 0}}, ["lm_data"],
     "threads must be at least 1"),
])
def test_plan_refuses_bad_profiles_with_one_line(tmp_path, sections, exps, words):
    with pytest.raises(PosrnnError, match=None) as e:
        plan(scratch(tmp_path, **sections), "t", exps)
    assert words in str(e.value) and "\n" not in str(e.value)


GRU4 = {"model": "gru", "vocab": 4}


@pytest.mark.parametrize("fig2, words", [
    ({"pe": ["../../escape"]}, "run name 'gru-v4-../../escape-s1' (made from the grid's values) is not a plain "
                               "directory"),
    ({"cells": [{"model": "gru/x", "vocab": 4}]}, "is not a plain directory name"),
    ({"cells": [{**GRU4, "set": {"model.pe_mode": "a/b"}}]}, "is not a plain directory name"),
    ({"cells": [{"model": "..", "vocab": 4}]}, "is not a plain directory name"),
    ({"cells": [GRU4, GRU4]}, "two runs are both named 'gru-v4-none-s1'"),
    ({"cells": [GRU4, {"vocab": 4, "model": "gru"}]}, "gru-v4-none-s1 and v4-gru-none-s1 are the same cell with the "
                                                      "same seed"),
    ({"cells": [GRU4, {**GRU4, "checkpoint_every": 5}]}, "are the same cell with the same seed"),
])
def test_grid_values_become_run_names_only_when_plain_and_unique(tmp_path, monkeypatch, fig2, words):
    """A value with / or .. would write outside runs/<profile>; a cell listed twice would be
    trained twice, then refused by aggregation. Both are refused at the plan, before any write."""
    monkeypatch.chdir(tmp_path)
    params = scratch(tmp_path, fig2={**TINY, "pe": ["none"], **fig2})
    with pytest.raises(PosrnnError) as e:
        plan(params, "t", ["fig2"])
    assert words in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(PosrnnError):
        run_sweep(params, "t", ["fig2"], SweepOptions(workers=1))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


def test_waves_run_an_experiment_after_its_source():
    assert waves(["lm", "lm_data", "fig2", "extend"]) == [["lm_data", "fig2"], ["lm", "extend"]]
    assert waves(["extend"]) == [["extend"]]  # its source is not part of this sweep: already on disk


# ---- the local executor ---------------------------------------------------------------------
def test_local_sweep_with_two_workers_then_nothing_to_do(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    params = scratch(tmp_path, fig2=TINY)
    out = run_sweep(params, "t", ["fig2"], SweepOptions(workers=2))
    assert sorted(o.status for o in out) == ["done"] * 4
    assert {o.slot for o in out} == {0, 1}  # both workers were used
    assert all(o.result["training"] == "trained" for o in out)
    manifest = yaml.safe_load((tmp_path / "runs" / "t" / "fig2" / "sweep.json").read_text())
    assert [c["name"] for c in manifest["cells"]] == [j.name for j in plan(params, "t", ["fig2"])]
    assert (manifest["experiment"], manifest["kind"], manifest["table"]) == ("fig2", "train", "eval")
    first = results(tmp_path / "runs" / "t")
    again = run_sweep(params, "t", ["fig2"], SweepOptions(workers=2))
    assert all(o.result["training"] == "skipped (finished)" for o in again)
    assert same(first, results(tmp_path / "runs" / "t"))
    # a larger grid trains only the new cells
    more = {**TINY, "seeds": [1, 2]}
    third = run_sweep(scratch(tmp_path, fig2=more), "t", ["fig2"], SweepOptions(workers=2))
    assert sorted(o.result["training"] for o in third) == ["skipped (finished)"] * 4 + ["trained"] * 4


def test_a_different_config_is_refused_unless_forced(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_sweep(scratch(tmp_path, fig2=TINY), "t", ["fig2"], SweepOptions(workers=2))
    before = results(tmp_path / "runs" / "t")
    params = scratch(tmp_path, fig2={**TINY, "hidden": 12})
    assert all(status(j) == "different" for j in plan(params, "t", ["fig2"]))
    with pytest.raises(PosrnnError, match="4 of 4 runs failed"):
        run_sweep(params, "t", ["fig2"], SweepOptions(workers=2))
    assert same(before, results(tmp_path / "runs" / "t"))  # nothing was touched
    out = run_sweep(params, "t", ["fig2"], SweepOptions(workers=2, force=True))
    assert all(o.result["training"] == "replaced" for o in out)
    cfg = yaml.safe_load((tmp_path / "runs" / "t" / "fig2" / "gru-v4-none-s1" / "config.yaml").read_text())
    assert cfg["model"]["hidden_size"] == 12


def test_an_impossible_grid_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad = {**TINY, "cells": [{"model": "gru", "vocab": 4}, {"model": "gru", "vocab": 2, "length": 3}]}  # 2^3 < 2·32
    with pytest.raises(PosrnnError, match=r"^fig2/gru-v2-l3-none-s1: task 'reverse' with vocab_size=2, length=3 has "
                                          r"only"):
        run_sweep(scratch(tmp_path, fig2=bad), "t", ["fig2"], SweepOptions(workers=2))
    assert not (tmp_path / "runs").exists()


def test_a_failing_cell_does_not_stop_the_others(tmp_path, monkeypatch, capsys):
    """A run that fails while training (its loss turns non-finite) is reported with its log; the
    other runs of the sweep finish."""
    monkeypatch.chdir(tmp_path)
    bad = {**TINY, "cells": [{"model": "gru", "vocab": 4}, {"model": "gru", "vocab": 6, "lr": 1e37}]}
    with pytest.raises(PosrnnError, match="2 of 4 runs failed") as e:
        run_sweep(scratch(tmp_path, fig2=bad), "t", ["fig2"], SweepOptions(workers=2))
    assert "\n" not in str(e.value)
    err = capsys.readouterr().err
    for name in ("gru-v6-lr1e+37-none-s1", "gru-v6-lr1e+37-sinusoidal-s1"):
        log = tmp_path / "runs" / "t" / ".logs" / "fig2" / f"{name}.log"
        assert f"failed: fig2/{name}: non-finite loss or gradient at step" in err
        assert str(Path("runs") / "t" / ".logs" / "fig2" / f"{name}.log") in err and "non-finite" in log.read_text()
    assert all((tmp_path / "runs" / "t" / "fig2" / f"gru-v4-{pe}-s1" / "eval.json").is_file()
               for pe in ("none", "sinusoidal"))


@pytest.mark.slow
def test_sweep_killed_at_random_moments_then_rerun_gives_the_same_runs(tmp_path):
    """kill -9 of `posrnn sweep` (and so of its workers) at ten random moments while it trains;
    a re-run finishes the same weights and scores, bit for bit, as a sweep never interrupted,
    and no partial file is ever left where a loader would read it."""
    from posrnn_cli.engine.checkpoint import load_checkpoint
    from posrnn_cli.common.files.rundir import list_checkpoints

    grid = {**TINY, "cells": [{"model": "gru", "vocab": 6}], "iterations": 4000, "checkpoint_every": 100,
            "set": {"train.log_every": 50}}
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    run_sweep(scratch(ref_dir, fig2=grid), "t", ["fig2"], SweepOptions(workers=2), runs_root=ref_dir / "runs" / "t")
    reference = results(ref_dir / "runs" / "t")
    work = tmp_path / "work"
    work.mkdir()
    scratch(work, fig2=grid)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rng = __import__("random").Random(0)
    for _ in range(10):  # killed while a worker trains a job
        kill_sweep_while_training(work, ["fig2", "--profile", "t"], env, rng.uniform(0.0, 1.0))
        for run in (work / "runs" / "t" / "fig2").glob("*/"):
            for _, path in list_checkpoints(run):  # whatever a loader sees is whole
                load_checkpoint(path)
    r = subprocess.run([*POSRNN, "sweep", "fig2", "--profile", "t"], cwd=work, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert same(reference, results(work / "runs" / "t"))


# ---- submitit: its local executor, and a real one-node SLURM -----------------------------------
submitit = pytest.importorskip("submitit")


@pytest.mark.slow
def test_submitit_local_executor_gives_the_same_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    params = scratch(tmp_path, fig2={**TINY, "cells": [{"model": "gru", "vocab": 4}]},
                     slurm={"timeout_min": 5, "cpus_per_task": 1})
    local = run_sweep(params, "t", ["fig2"], SweepOptions(workers=2), runs_root=tmp_path / "a")
    sub = run_sweep(params, "t", ["fig2"], SweepOptions(executor="submitit-local"), runs_root=tmp_path / "b")
    assert [o.status for o in sub] == ["done", "done"] and [o.status for o in local] == ["done", "done"]
    assert same(results(tmp_path / "a"), results(tmp_path / "b"))
    assert any((tmp_path / "b" / ".submitit").rglob("*_log.out"))


def test_slurm_missing_submitit_or_sbatch_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    scratch(tmp_path, fig2=TINY)
    import posrnn_cli.sweep.slurm as slurm

    monkeypatch.setattr(slurm, "submitit", None)
    r = CliRunner().invoke(app, ["sweep", "fig2", "--executor", "slurm"])
    assert (r.exit_code == 1 and r.output.startswith("error: --executor slurm needs submitit")
            and r.output.count("\n") == 1)
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    r = CliRunner().invoke(app, ["sweep", "fig2", "--executor", "slurm"])
    assert r.exit_code == 1 and "no `sbatch` or `srun` on PATH" in r.output
    assert not (tmp_path / "runs" / "t" / "fig2" / "gru-v4-none-s1").exists()


def tree(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def test_a_refused_submission_leaves_the_tree_as_it_was(tmp_path, monkeypatch):
    """sbatch refuses the array: no manifest, no pickle, no directory is left behind."""
    monkeypatch.chdir(tmp_path)
    scratch(tmp_path, fig2=TINY)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\necho 'sbatch: error: invalid partition specified' >&2\nexit 1\n")
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")
    for b in ("sbatch", "srun"):
        (bin_dir / b).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    before = tree(tmp_path)
    r = CliRunner().invoke(app, ["sweep", "fig2", "--executor", "slurm"])
    ours = [ln for ln in r.output.splitlines() if ln.startswith("error:")]  # sbatch's own words may come first
    assert r.exit_code == 1 and len(ours) == 1 and "submitting to SLURM failed" in ours[0], r.output
    assert "Traceback" not in r.output
    assert tree(tmp_path) == before


def test_a_second_sweep_on_the_same_runs_gets_one_line_naming_the_first(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    params = scratch(tmp_path, fig2=TINY)
    runs = tmp_path / "runs" / "t"
    runs.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom posrnn_cli.engine.lock import run_lock\n"
        "with run_lock(sys.argv[1], 'posrnn sweep --profile t'):\n    print('held', flush=True)\n    time.sleep(60)\n"),
        str(runs)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(PosrnnError) as e:
            run_sweep(params, "t", ["fig2"], SweepOptions(workers=1))
        assert "posrnn sweep --profile t" in str(e.value) and str(holder.pid) in str(e.value)
        assert "\n" not in str(e.value) and not (runs / "fig2").exists()
    finally:
        holder.kill()
        holder.wait()


sys.path.insert(0, str(Path(__file__).parent))
from slurm_cluster import slurm_cluster  # noqa: F401 - the fixture


def test_sweep_through_a_real_slurm_array(slurm_cluster, tmp_path, monkeypatch):
    """`posrnn sweep --executor slurm` on a one-node SLURM started for the test: a 2-task array,
    the same runs as the local executor."""
    monkeypatch.chdir(tmp_path)
    for k, v in slurm_cluster.env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    params = scratch(tmp_path, fig2={**TINY, "cells": [{"model": "gru", "vocab": 4}]},
                     slurm={"partition": slurm_cluster.partition, "timeout_min": 5, "cpus_per_task": 1, "mem_gb": 1})
    r = subprocess.run([*POSRNN, "sweep", "fig2", "--executor", "slurm"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "submitted 2 task(s) as job array" in r.stdout and r.stdout.count("] done fig2/") == 2
    run_sweep(params, "t", ["fig2"], SweepOptions(workers=2), runs_root=tmp_path / "local")
    assert same(results(tmp_path / "runs" / "t"), results(tmp_path / "local"))


# ---- profiles and bad input ----------------------------------------------------------------------
def test_profile_use_rewrites_one_line(tmp_path):
    text = (ROOT / "params.yaml").read_text()
    p = tmp_path / "params.yaml"
    p.write_text(text)
    assert active_profiles(p) == ["lite"]
    use_profile(p, ["micro"])
    new = p.read_text()
    assert active_profiles(p) == ["micro"]
    assert [a for a, b in zip(text.splitlines(), new.splitlines()) if a != b] == ["- lite"]
    names = ", ".join(yaml.safe_load(text)["profiles"])  # every profile, in the file's order
    with pytest.raises(PosrnnError, match=f"unknown profile 'huge'; choose one of: {names}$"):
        use_profile(p, ["huge"])
    assert active_profiles(p) == ["micro"]


@pytest.mark.parametrize("argv, words", [
    (["sweep", "fig3"], "unknown experiment 'fig3'"),
    (["sweep", "fig2", "--profile", "huge"], "unknown profile 'huge'"),
    (["sweep", "fig2", "--executor", "cloud"], "unknown executor 'cloud'"),
    (["sweep", "--stage", "plots"], "unknown stage 'plots'"),
    (["sweep", "fig2", "--profile", "paper"], "runs on a GPU"),
    (["sweep", "fig2", "--workers", "0"], "--workers must be a positive number"),
    (["profile", "use", "huge"], "unknown profile 'huge'"),
])
def test_sweep_bad_input_is_one_line_and_touches_nothing(tmp_path, monkeypatch, argv, words):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    import posrnn_cli.sweep.local as local

    monkeypatch.setattr(local, "gpu_count", lambda: 0)
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 1 and r.output.startswith("error: ") and words in r.output, r.output
    assert r.output.count("\n") == 1
    assert (not (tmp_path / "runs").exists()
            and (tmp_path / "params.yaml").read_text() == (ROOT / "params.yaml").read_text())


def test_bench_sweep_reports_runs_per_hour_for_each_worker_count():
    r = CliRunner().invoke(app, ["bench-sweep", "--workers", "1,2", "--runs", "2", "--iterations", "5", "--json"])
    assert r.exit_code == 0, r.output
    rows = __import__("json").loads(r.output)
    assert [x["workers"] for x in rows] == [1, 2] and all(x["runs"] == 2 and x["runs_per_hour"] > 0 for x in rows)
    assert rows[0]["speedup_vs_1"] == 1.0
    r = CliRunner().invoke(app, ["bench-sweep", "--workers", "one"])
    assert r.exit_code == 1 and r.output.startswith("error: --workers takes counts")


def test_every_job_kind_runs_with_its_runs_thread_limit(tmp_path):
    """A stability job (not only training) takes its run's train.threads before it starts, so a
    pool of one single-threaded run per core is not oversubscribed by the analysis stage."""
    from posrnn_cli.sweep.jobs import execute
    from posrnn_cli.sweep.plan import Job

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        job = Job("stability", "x", "stability", str(tmp_path / "stab"), {"train": {"threads": 1}},
                  {"source": str(tmp_path / "missing"), "triplets": 4, "chunk_size": 4, "seed": 0})
        with pytest.raises(PosrnnError, match="no checkpoints"):
            execute(job)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


# ---- SLURM sweeps: watching tasks, reattaching, one-line causes -------------------------------------
def _fake_tasks(tmp_path: Path, n: int) -> list:
    from posrnn_cli.sweep.plan import Job
    from posrnn_cli.sweep.slurm_watch import Task

    return [Task(Job("fig2", f"r{i}", "train", str(tmp_path / f"r{i}")), f"77_{i}", tmp_path / f"77_{i}_0_result.pkl",
                 tmp_path / f"77_{i}_0_log.err") for i in range(n)]


def test_watch_reports_states_as_they_change_and_each_end_with_its_cause(tmp_path):
    """Task states as SLURM reports them, poll by poll (a fake squeue/sacct and clock): each
    change is an event, a failure carries the message of the posrnn error its traceback ends with
    (a subclass too), a cancel is a cancel, and a task SLURM stops listing without a result is
    lost after the grace period, not waited on forever."""
    import pickle

    from posrnn_cli.sweep.slurm_watch import watch

    tasks = _fake_tasks(tmp_path, 4)
    trace = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
             "posrnn_cli.engine.lifecycle.TrainingStopped: non-finite loss or gradient at step 2: "
             "the run stopped there\n")
    polls = [
        {"77_0": "PENDING", "77_1": "PENDING", "77_2": "PENDING", "77_3": "PENDING"},
        {"77_0": "RUNNING", "77_1": "RUNNING", "77_2": "RUNNING", "77_3": "PENDING"},
        {"77_0": "COMPLETED", "77_1": "FAILED", "77_2": "RUNNING", "77_3": "CANCELLED"},
        {"77_2": "RUNNING"}, {}, {}, {},
    ]
    writes = {2: [(tasks[0].result, ("success", {"training": "trained"})), (tasks[1].result, ("error", trace))]}
    now = [0.0]
    calls = [0]

    def query(ids):
        i = min(calls[0], len(polls) - 1)
        for path, value in writes.get(i, []):
            path.write_bytes(pickle.dumps(value))
        calls[0] += 1
        return {k: v for k, v in polls[i].items() if k in ids}

    def sleep(s):
        now[0] += s

    events = []
    out = watch(tasks, query,
                lambda kind, t, what: events.append((kind, t.job_id, what if kind == "state" else what.status)),
                poll_s=10.0, lost_after_s=25.0, sleep=sleep, clock=lambda: now[0])
    assert [o.status for o in out] == ["done", "failed", "lost", "cancelled"]
    assert out[1].error == "non-finite loss or gradient at step 2: the run stopped there"
    assert out[1].log.endswith("77_1_0_log.err") and "lost" in out[2].error
    assert events[:4] == [("state", f"77_{i}", "PENDING") for i in range(4)]
    assert ("state", "77_0", "RUNNING") in events and ("end", "77_1", "failed") in events
    assert now[0] >= 25.0 and calls[0] <= 8  # lost after the grace, then no more polls


def test_watch_timeout_names_the_arrays_and_how_to_cancel(tmp_path):
    from posrnn_cli.sweep.slurm_watch import Timeout, watch

    now = [0.0]
    with pytest.raises(Timeout) as e:
        watch(_fake_tasks(tmp_path, 2), lambda ids: {i: "RUNNING" for i in ids}, lambda *a: None, poll_s=5.0,
              deadline=12.0, sleep=lambda s: now.__setitem__(0, now[0] + s), clock=lambda: now[0])
    assert "2 task(s) still in flight (job array 77)" in str(e.value) and "scancel 77" in str(e.value)
    assert "run the same command again to reattach" in str(e.value) and e.value.exit_code == 124


def test_an_unreadable_array_record_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    scratch(tmp_path, fig2=TINY, executor={"kind": "slurm"})
    (tmp_path / "runs" / "t").mkdir(parents=True)
    (tmp_path / "runs" / "t" / ".slurm-arrays.json").write_text('{"arrays": [{"ar')
    r = CliRunner().invoke(app, ["sweep", "fig2", "--dry-run"])
    assert r.exit_code == 1 and r.output.startswith("error: ") and ".slurm-arrays.json is not readable JSON" in r.output
    assert r.output.count("\n") == 1


def test_a_killed_slurm_sweep_is_reattached_never_submitted_twice(slurm_cluster, tmp_path):
    """A SLURM sweep is killed -9 while its array is in flight (submitted held, so it cannot
    finish first: the test does not depend on timing). A second sweep reattaches to the tasks
    instead of submitting them again; a third, started while the second holds the runs, waits on
    the same tasks. The array is then released: both end 0 with no failure, SLURM saw one array
    only, and the weights equal a local sweep's bit for bit. A fourth sweep evaluates the
    finished runs in its own process and submits nothing."""
    from posrnn_cli.sweep.slurm_record import read_record

    env = cluster_env(slurm_cluster)
    grid = {**TINY, "cells": [{"model": "gru", "vocab": 4}]}  # two runs: one task per core
    params = scratch(tmp_path, fig2=grid, executor={"kind": "slurm"},
                     slurm={"partition": slurm_cluster.partition, "timeout_min": 5, "cpus_per_task": 1, "mem_gb": 1,
                            "extra": {"hold": True}})
    runs = tmp_path / "runs" / "t"
    logs = {k: tmp_path / f"{k}.out" for k in "abc"}
    cmd = [*POSRNN, "sweep", "fig2", "--timeout", "10m"]  # generous: 2 cores may be shared

    def start(k):
        with open(logs[k], "w") as f:
            return subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=f, stderr=subprocess.STDOUT)

    procs = []
    array = None
    try:
        a = start("a")
        procs.append(a)
        wait_for(lambda: (runs / ".slurm-arrays.json").is_file(), 120, "the first sweep recorded no array", [a])
        a.kill()  # kill -9: no handler runs
        a.wait()
        [rec] = read_record(runs)
        array = rec["array"]
        assert sorted(t["run"] for t in rec["tasks"].values()) == ["fig2/gru-v4-none-s1", "fig2/gru-v4-sinusoidal-s1"]
        b = start("b")
        procs.append(b)
        wait_for(lambda: "reattached to 2 task(s) still in flight" in logs["b"].read_text(), 120,
                  "the second sweep did not reattach", [b])
        c = start("c")
        procs.append(c)
        wait_for(lambda: "held by another SLURM sweep" in logs["c"].read_text(), 120,
                  "the third sweep did not wait on the second", [c])
        assert slurm_cluster.run("scontrol", "release", array).returncode == 0
        assert b.wait(timeout=660) == 0, logs["b"].read_text()
        assert c.wait(timeout=660) == 0, logs["c"].read_text()
    finally:
        stop_sweeps(slurm_cluster, procs, array)
    for k in "bc":
        text = logs[k].read_text()
        assert "] failed" not in text and "did not finish" not in text and "as job array" not in text, text
    assert logs["c"].read_text().count("] done fig2/") == 2  # it watched the tasks end, then took over
    assert [r["array"] for r in read_record(runs)] == [array]
    mine = tasks_submitted_from(slurm_cluster, tmp_path)
    assert len(mine) == 2 and all(j.startswith(f"{array}_") for j in mine), mine  # one array: nothing submitted twice
    r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=660)
    assert r.returncode == 0 and "evaluating 2 finished run(s) in this process" in r.stdout, r.stdout + r.stderr
    assert "as job array" not in r.stdout and [x["array"] for x in read_record(runs)] == [array]
    run_sweep(params, "t", ["fig2"], SweepOptions(executor="local", workers=2), runs_root=tmp_path / "local")
    assert same(results(runs), results(tmp_path / "local"))


def test_a_non_finite_loss_in_a_slurm_task_reaches_the_sweep_as_its_cause(slurm_cluster, tmp_path):
    env = cluster_env(slurm_cluster)
    scratch(tmp_path, fig2={**TINY, "cells": [{"model": "gru", "vocab": 4}], "pe": ["none"], "lr": 1e37,
                            "checkpoint_every": 1}, executor={"kind": "slurm"},
            slurm={"partition": slurm_cluster.partition, "timeout_min": 5, "cpus_per_task": 1, "mem_gb": 1})
    r = subprocess.run([*POSRNN, "sweep", "fig2", "--timeout", "10m"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=660)
    assert r.returncode == 1, r.stdout + r.stderr
    [line] = [ln for ln in r.stdout.splitlines() if "] failed fig2/gru-v4-none-s1" in ln]
    assert "non-finite loss or gradient at step" in line and "(log: " in line and "_log.err)" in line
    assert r.stderr.strip().splitlines()[-1].startswith("error: 1 of 1 runs failed (each named above with its log)")
    assert "Traceback" not in r.stdout + r.stderr


def test_dry_run_test_only_asks_sbatch_about_the_array(slurm_cluster, tmp_path):
    """`--dry-run --test-only`: sbatch --test-only on the array the sweep would submit; what
    SLURM says is printed (a refusal is one line), and nothing is written."""
    env = cluster_env(slurm_cluster)
    scratch(tmp_path, fig2=TINY, executor={"kind": "slurm"},
            slurm={"partition": slurm_cluster.partition, "timeout_min": 5, "cpus_per_task": 1, "mem_gb": 1,
                   "gres": None, "setup": ["export POSRNN_PROBE=1"], "extra": {"comment": "posrnn test"}})
    before = tree(tmp_path)
    r = subprocess.run([*POSRNN, "sweep", "fig2", "--dry-run", "--test-only"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    [line] = [ln for ln in r.stdout.splitlines() if ln.startswith("sbatch --test-only (4 task(s)): ")]
    assert "to start at" in line and slurm_cluster.partition in line, line
    r = subprocess.run([*POSRNN, "sweep", "fig2", "--dry-run", "--test-only", "--partition", "nope"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and r.stderr.startswith("error: sbatch --test-only refused the array: ") and \
        r.stderr.count("\n") == 1, r.stderr
    assert tree(tmp_path) == before


def test_ctrl_c_of_a_slurm_sweep_says_the_array_keeps_running_and_how_to_cancel(tmp_path, monkeypatch):
    """Ctrl-C while a SLURM sweep waits: one line saying that the array keeps running, the
    scancel that cancels it, and that the same command reattaches (sbatch and the wait are
    stand-ins here; the real cluster tests submit for real)."""
    import posrnn_cli.sweep.slurm as S
    from posrnn_cli.sweep.slurm_record import read_record

    monkeypatch.chdir(tmp_path)
    scratch(tmp_path, fig2=TINY, executor={"kind": "slurm"})
    monkeypatch.setattr(S, "check_available", lambda cluster: None)

    def submit(jobs, folder, params, cluster="slurm"):
        return S.Submission(_fake_tasks(tmp_path, len(jobs)), "77")

    def wait(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(S, "submit", submit)
    monkeypatch.setattr(S, "_watch_tasks", wait)
    r = CliRunner().invoke(app, ["sweep", "fig2"])
    assert r.exit_code == 130, r.output
    last = r.output.strip().splitlines()[-1]
    assert last.startswith("stopped: interrupted: job array 77 keeps running on SLURM") and "`scancel 77`" in last
    assert "run the same command again to reattach" in last
    assert [a["array"] for a in read_record(tmp_path / "runs" / "t")] == ["77"]
