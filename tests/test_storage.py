"""What a sweep keeps and what it knows about the runs it keeps: the ``keep_checkpoints`` policy
and the disk use ``--dry-run`` predicts, the identity of the code that trained each run (stale
runs shown, ``--retrain-stale``, extensions redone when their source changes), and the local
executor's GPU mask, thread limit and Ctrl-C."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from posrnn_cli.cli import app
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.files.rundir import list_checkpoints
from posrnn_cli.sweep import SweepOptions, run_sweep
from posrnn_cli.sweep.plan import plan
from posrnn_cli.sweep.storage import checkpoint_bytes, checkpoints_kept, estimate

from conftest import ROOT
from fabricate import scratch

TINY = {"cells": [{"model": "gru", "vocab": 4}], "pe": ["none", "sinusoidal"], "seeds": [1], "length": 4, "hidden": 8,
        "iterations": 40, "batch": 8, "warmup": 2, "checkpoint_every": 10}


def steps(run: Path) -> list[int]:
    return [s for s, _ in list_checkpoints(run)]


# ---- keep_checkpoints ------------------------------------------------------------------------------
def test_the_policy_comes_from_the_registry_and_the_section(tmp_path):
    params = scratch(tmp_path, fig2=TINY, dual={**TINY, "rarity": 0.25},
                     forms={"like": "dual", "cells": [{"model": "gru", "vocab": 4}], "pe": ["random"], "seeds": [1]},
                     double={**TINY, "keep_checkpoints": "all"})
    keep = {j.experiment: j.options["keep_checkpoints"] for j in plan(params, "t", ["fig2", "dual", "forms", "double"])}
    assert keep == {"fig2": "last", "dual": "all", "forms": "last", "double": "all"}  # like: does not carry it


@pytest.mark.parametrize("sections, exps, words", [
    ({"fig2": {**TINY, "keep_checkpoints": "some"}}, ["fig2"], "fig2: keep_checkpoints must be one of last, all, got "
                                                               "'some'"),
    ({"dual": {**TINY, "keep_checkpoints": "last"}, "stability": {}}, ["stability"],
     "stability reads every checkpoint of the dual runs, and dual.keep_checkpoints keeps only the last"),
])
def test_a_bad_policy_is_one_line(tmp_path, sections, exps, words):
    with pytest.raises(PosrnnError) as e:
        plan(scratch(tmp_path, **sections), "t", exps)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_sweep_keeps_the_last_checkpoint_or_all_as_the_policy_says(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    grid = {**TINY, "set": {"train.checkpoint_initial": True}}
    params = scratch(tmp_path, fig2=grid, dual={**grid, "cells": [{"model": "gru", "vocab": 4}]},
                     extend={"cells": [{"model": "gru", "vocab": 4}], "pe": ["none"], "seeds": [1], "extra_vocab": 4,
                             "iterations": 20})
    run_sweep(params, "t", ["fig2", "dual", "extend"], SweepOptions(workers=2))
    runs = tmp_path / "runs" / "t"
    for pe in ("none", "sinusoidal"):
        assert steps(runs / "fig2" / f"gru-v4-{pe}-s1") == [40]
        assert steps(runs / "dual" / f"gru-v4-{pe}-s1") == [0, 10, 20, 30, 40]
    assert steps(runs / "extend" / "gru-v4-none-s1") == [20]
    assert (runs / "fig2" / "gru-v4-none-s1" / "eval.json").is_file()
    # a run finished under another policy (here: every checkpoint) is brought to it by the next sweep
    kept = runs / "dual" / "gru-v4-none-s1"
    for s, p in list_checkpoints(kept)[:-1]:
        (runs / "fig2" / "gru-v4-none-s1" / "checkpoints" / p.name).write_bytes(p.read_bytes())
    assert len(steps(runs / "fig2" / "gru-v4-none-s1")) == 5
    out = run_sweep(params, "t", ["fig2"], SweepOptions(workers=2))
    assert all(o.result["training"] == "skipped (finished)" for o in out)
    assert steps(runs / "fig2" / "gru-v4-none-s1") == [40]


def test_a_run_interrupted_under_last_keeps_one_checkpoint_to_resume_from(tmp_path):
    from posrnn_cli.common.settings.config import resolve_config
    from posrnn_cli.engine.train import train

    cfg = resolve_config(options={"task.vocab_size": 4, "task.length": 4, "task.n_test": 8, "model.name": "gru",
                                  "model.hidden_size": 4, "train.iterations": 30, "train.batch_size": 2,
                                  "train.warmup": 1,
                                  "train.checkpoint_every": 5, "train.device": "cpu"})
    train(cfg, tmp_path / "r", progress=False, stop_after=12, keep_checkpoints="last")
    assert steps(tmp_path / "r") == [12]
    train(cfg, tmp_path / "r", resume=True, progress=False, keep_checkpoints="last")
    assert steps(tmp_path / "r") == [30]


def test_the_disk_estimate_matches_the_checkpoints_written(tmp_path, monkeypatch):
    """The size predicted from the model built on the meta device equals the checkpoints a sweep
    writes, within 1% (GRU and S4D here; Transformers and LSTMs the same way), and the count
    follows the policy."""
    monkeypatch.chdir(tmp_path)
    grid = {**TINY, "cells": [{"model": "gru", "vocab": 16, "hidden": 32}, {"model": "s4d", "vocab": 8, "hidden": 16}],
            "pe": ["none"], "length": 6}
    params = scratch(tmp_path, fig2=grid, dual={**grid, "cells": [{"model": "gru", "vocab": 16, "hidden": 32}]})
    jobs = plan(params, "t", ["fig2", "dual"])
    est = estimate(jobs)
    run_sweep(params, "t", ["fig2", "dual"], SweepOptions(workers=2))
    for j in jobs:
        ckpts = list_checkpoints(Path(j.run_dir))
        assert est[j.label].checkpoints == len(ckpts)
        for _, p in ckpts:
            assert abs(p.stat().st_size - est[j.label].checkpoint_bytes) <= 0.01 * p.stat().st_size, (j.label, p)
    assert checkpoints_kept(jobs[-1].run_config(), "all") == 4


def test_the_paper_profile_dry_run_prints_its_disk_use(monkeypatch):
    """The figure docs/pipeline.md quotes; the LSTM at V = 16,384, H = 512 is the largest checkpoint
    (227 MB without PE, 239 MB with the sinusoidal form concatenated: 19.9 M parameters × 12 bytes)."""
    monkeypatch.chdir(ROOT)
    r = CliRunner().invoke(app, ["sweep", "--dry-run", "--profile", "paper"], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert max(map(len, r.output.splitlines())) <= 100  # a summary, not the 1,341-row table (--verbose)
    assert "fig2/gru-v32-none-s111" not in r.output and "packing: " in r.output and "  all " in r.output
    line = next(ln for ln in r.output.splitlines() if ln.startswith("expected disk use"))
    assert line.endswith("GB") and 20 < float(line.split()[-2]) < 500
    assert "dual" in r.output and "(largest checkpoint 239.3 MB)" in r.output
    big = [checkpoint_bytes(j.run_config()) for j in plan(ROOT / "params.yaml", "paper", ["fig2"])
           if j.config["task"]["vocab_size"] == 16384 and j.config["model"]["name"] == "lstm"]
    assert 220e6 < min(big) and max(big) < 245e6
    r = CliRunner().invoke(app, ["sweep", "fig2", "dual", "--dry-run", "--profile", "paper", "--json"])
    rows = json.loads(r.output)
    assert {row["checkpoints_kept"] for row in rows if row["run"].startswith("fig2/")} == {1}
    assert {row["checkpoints_kept"] for row in rows if row["run"].startswith("dual/")} == {61}


# ---- stale work ------------------------------------------------------------------------------------
def test_runs_trained_by_other_code_are_shown_and_retrained_on_request(tmp_path, monkeypatch):
    import torch

    from posrnn_cli.common.numerics import identity

    monkeypatch.chdir(tmp_path)
    params = scratch(tmp_path, fig2=TINY)
    run_sweep(params, "t", ["fig2"], SweepOptions(workers=2))
    runs = tmp_path / "runs" / "t" / "fig2"
    a, b = runs / "gru-v4-none-s1", runs / "gru-v4-sinusoidal-s1"
    (job,) = [j for j in plan(params, "t", ["fig2"]) if j.name == a.name]
    rec = json.loads((a / "code.json").read_text())
    assert rec == identity(job.run_config(), ("loop",), "cpu")
    (a / "code.json").write_text(json.dumps({**rec, "libraries": {"torch": "0.4.1"}}))  # trained under another torch
    (b / "code.json").unlink()  # a run trained before runs recorded their code
    before = {p: p.read_bytes() for p in (a / "checkpoints").iterdir()}
    weights = lambda: {n: t.tolist()
                       for n, t in torch.load(list_checkpoints(a)[-1][1], weights_only=True)["model"].items()}
    trained = weights()

    r = CliRunner().invoke(app, ["sweep", "fig2", "--params", str(params), "--dry-run", "--json"])
    assert {row["run"]: (row["would"], row["code"]) for row in json.loads(r.output)} == {
        "fig2/gru-v4-none-s1": ("done", "other"), "fig2/gru-v4-sinusoidal-s1": ("done", "unknown")}
    r = CliRunner().invoke(app, ["sweep", "fig2", "--params", str(params), "--dry-run"], env={"COLUMNS": "200"})
    assert "skip (finished; trained by other code; --retrain-stale retrains)" in r.output
    assert "skip (finished; trained by unknown code)" in r.output
    r = CliRunner().invoke(app, ["sweep", "fig2", "--params", str(params), "--dry-run", "--verbose"],
                           env={"COLUMNS": "200"})
    assert "fig2/gru-v4-none-s1" in r.output  # --verbose names them
    r = CliRunner().invoke(app, ["sweep", "fig2", "--params", str(params), "--dry-run", "--retrain-stale"],
                           env={"COLUMNS": "200"})
    assert "retrain (trained by other code)" in r.output

    out = io.StringIO()
    done = run_sweep(params, "t", ["fig2"], SweepOptions(workers=2), out=out)
    assert {o.result["training"] for o in done} == {"skipped (finished)"}
    assert ("1 run(s) were trained by other code than this (--dry-run --verbose names them; --retrain-stale retrains "
            "them); 1 by unknown code") in out.getvalue()
    assert {p: p.read_bytes() for p in (a / "checkpoints").iterdir()} == before  # kept as it was

    done = run_sweep(params, "t", ["fig2"], SweepOptions(workers=2, retrain_stale=True), out=io.StringIO())
    assert {o.job.name: o.result["training"] for o in done} == {"gru-v4-none-s1": "replaced",
                                                                 "gru-v4-sinusoidal-s1": "skipped (finished)"}
    assert {o.job.name: o.result["code"] for o in done} == {"gru-v4-none-s1": "current",
                                                            "gru-v4-sinusoidal-s1": "unknown"}
    assert weights() == trained  # the same code retrains the same weights (in a new run, with a new run id)
    assert not (b / "code.json").exists()  # unknown code is never retrained for it


def test_the_stale_note_counts_each_kind_of_code():
    from posrnn_cli.sweep import stale_note
    from posrnn_cli.sweep.plan import JobOutcome
    from posrnn_cli.sweep.plan import Job

    def outs(*codes):
        return [JobOutcome(Job("e", str(i), "train", "d"), "done", 0.0, result={"code": c})
                for i, c in enumerate(codes)]

    assert stale_note(outs("current", None)) is None
    assert stale_note(outs("unknown", "unknown", "current")) == ("2 run(s) were trained by unknown code (trained "
                                                                 "before runs recorded it; kept as they are)")
    assert stale_note(outs("other")).startswith("1 run(s) were trained by other code than this")


def test_an_extension_and_stability_are_redone_when_their_source_checkpoint_changes(tmp_path, monkeypatch):
    import torch

    from posrnn_cli.engine.checkpoint import save_checkpoint

    monkeypatch.chdir(tmp_path)
    one = {**TINY, "pe": ["none"]}
    params = scratch(tmp_path, fig2=one, dual=one, stability={"triplets": 4, "chunk_size": 4},
                     extend={"cells": [{"model": "gru", "vocab": 4}], "pe": ["none"], "seeds": [1], "extra_vocab": 4,
                             "iterations": 10})
    run_sweep(params, "t", ["fig2", "dual", "extend", "stability"], SweepOptions(workers=2))
    again = run_sweep(params, "t", ["extend", "stability"], SweepOptions(workers=2))
    assert {o.job.experiment: o.result.get("training") or o.result.get("stability") for o in again} == {
        "extend": "skipped (finished)", "stability": "skipped (up to date)"}

    for exp in ("fig2", "dual"):  # the source runs change (as a retraining by other code would change them)
        run = tmp_path / "runs" / "t" / exp / "gru-v4-none-s1"
        step, path = list_checkpoints(run)[-1]
        ckpt = torch.load(path, weights_only=True)
        ckpt["model"] = {k: v + 0.01 for k, v in ckpt["model"].items()}
        state = {k: v for k, v in ckpt.items() if k not in ("format", "version", "step", "identity")}
        save_checkpoint(run, step, state)
    redone = run_sweep(params, "t", ["extend", "stability"], SweepOptions(workers=2))
    assert {o.job.experiment: o.result.get("training") or o.result.get("stability") for o in redone} == {
        "extend": "replace (its source run changed)", "stability": "8 arrays"}


def test_every_stage_that_trains_lists_the_profile_settings_its_runs_read():
    """n_test and device reach every training run's config, so each stage that trains reads the
    profile they sit in (the whole profile: dvc.yaml is generated, common.stages.pipeline_yaml)."""
    from posrnn_cli.common.stages.experiments import EXPERIMENTS

    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    training = {e.stage for e in EXPERIMENTS.values() if e.trains and e.kind != "extend"}
    assert training == {"train", "lm"}
    for stage in training:
        keys = {p for p in stages[stage]["do"]["params"] if isinstance(p, str)}  # and numerics.json's versions
        assert {"profiles.${item}", "task", "model", "train"} <= keys, stage


# ---- the local executor ------------------------------------------------------------------------------
def test_workers_are_pinned_to_the_gpus_of_an_existing_mask(tmp_path, monkeypatch):
    from posrnn_cli.sweep.local import run_local, slot_env, visible_gpus
    from posrnn_cli.sweep.plan import Job

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert visible_gpus(2) == ["2", "3"] and slot_env(3, 2, 2)["CUDA_VISIBLE_DEVICES"] == "3"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aa, GPU-bb")
    assert visible_gpus(2) == ["GPU-aa", "GPU-bb"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert visible_gpus(2) == ["0", "1"]
    # through real workers (jobs of a kind that fails at once: no GPU is touched)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    jobs = [Job("e", f"j{i}", "nothing", str(tmp_path / f"j{i}")) for i in range(2)]
    out = run_local(jobs, workers=2, logs=tmp_path / "logs", gpus=2, runs_per_gpu=1)
    assert {o.status for o in out} == {"failed"}
    pinned = sorted(line.split("CUDA_VISIBLE_DEVICES=")[1].split(",")[0]
                    for o in out for line in Path(o.log).read_text().splitlines() if "CUDA_VISIBLE_DEVICES=" in line)
    assert pinned == ["2", "3"]


def test_every_job_kind_runs_under_its_thread_limit(tmp_path, monkeypatch):
    """The limit is applied by ``execute`` before the job's code loads, whatever its kind (the
    stability jobs ran on every core before)."""
    import torch

    from posrnn_cli.sweep import jobs as jobs_mod

    seen = {}

    def probe(job):
        seen.update(threads=torch.get_num_threads(), omp=os.environ.get("OMP_NUM_THREADS"),
                    mkl=os.environ.get("MKL_NUM_THREADS"))
        return {}

    params = scratch(tmp_path, dual={**TINY, "set": {"train.threads": 1}}, stability={})
    job = next(j for j in plan(params, "t", ["stability"], runs_root=tmp_path / "runs"))
    for var in jobs_mod.THREAD_ENV:
        monkeypatch.setenv(var, "7")
    monkeypatch.setattr(jobs_mod, "resolve", lambda ref: probe)
    torch.set_num_threads(2)
    try:
        jobs_mod.execute(job)
    finally:
        torch.set_num_threads(1)
    assert seen == {"threads": 1, "omp": "1", "mkl": "1"}


def _ignores_term(path):
    import signal as sig
    import time as t

    sig.signal(sig.SIGTERM, sig.SIG_IGN)
    Path(path).write_text("up")
    t.sleep(60)


def _saves_on_term(path):
    import signal as sig
    import sys as s
    import time as t

    def term(*_):
        Path(path).write_text("saved")
        s.exit(0)

    sig.signal(sig.SIGTERM, term)
    Path(path).write_text("up")
    t.sleep(60)


def _started(*paths):
    import time as t

    deadline = t.time() + 20
    while t.time() < deadline and not all(Path(p).exists() for p in paths):
        t.sleep(0.02)


def test_stopping_workers_terms_then_kills_and_a_second_ctrl_c_kills_at_once(tmp_path):
    import multiprocessing as mp
    import signal
    import threading
    import time

    from posrnn_cli.sweep.local import stop_workers

    ctx = mp.get_context("fork")
    saver = ctx.Process(target=_saves_on_term, args=(tmp_path / "a",))
    stubborn = ctx.Process(target=_ignores_term, args=(tmp_path / "b",))
    saver.start(), stubborn.start()
    _started(tmp_path / "a", tmp_path / "b")
    said = []
    t0 = time.monotonic()
    stop_workers([saver, stubborn], grace=1.5, gently=True, say=said.append)
    took = time.monotonic() - t0
    assert (tmp_path / "a").read_text() == "saved" and saver.exitcode == 0  # SIGTERM: it saved and left
    assert stubborn.exitcode == -signal.SIGKILL and 1.4 < took < 10  # killed once the grace period ran out
    assert "each saves a checkpoint at its current step" in said[0] and "Ctrl-C again" in said[0]

    stubborn = ctx.Process(target=_ignores_term, args=(tmp_path / "c",))
    stubborn.start()
    _started(tmp_path / "c")
    # Ctrl-C raises KeyboardInterrupt here even where this process inherited SIGINT ignored (a
    # shell's background job): the sweep's own process is the one a user presses Ctrl-C in
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()  # the second Ctrl-C
        t0 = time.monotonic()
        stop_workers([stubborn], grace=60, gently=True, say=said.append)
    finally:
        signal.signal(signal.SIGINT, before)
    assert stubborn.exitcode == -signal.SIGKILL and time.monotonic() - t0 < 10 and said[-1] == "killing the workers now"


@pytest.mark.slow
def test_ctrl_c_makes_the_workers_checkpoint_at_their_current_step(tmp_path):
    """SIGINT to `posrnn sweep`: each worker gets SIGTERM and saves its run at the step it reached
    (here no periodic checkpoint is due before the end), and a re-run resumes from there."""
    import signal
    import subprocess
    import sys
    import time

    grid = {**TINY, "pe": ["none"], "iterations": 200_000, "checkpoint_every": 100_000, "set": {"train.log_every": 50}}
    scratch(tmp_path, fig2=grid)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-c", "from posrnn_cli.cli import run; run()", "sweep", "fig2", "--profile",
                          "t"],
                         cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as from a terminal
    metrics = tmp_path / "runs" / "t" / "fig2" / "gru-v4-none-s1" / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and not (metrics.is_file() and metrics.read_text().count("\n") >= 2):
        time.sleep(0.1)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "each saves a checkpoint at its current step" in err
    (step, _), = list_checkpoints(metrics.parent)
    assert 100 <= step < 100_000
    log = (tmp_path / "runs" / "t" / ".logs" / "fig2" / "gru-v4-none-s1.log").read_text()
    assert f"SIGTERM: stopped at step {step} of 200000 with a checkpoint there" in log


@pytest.mark.parametrize("iterations, every, initial", [(40, 10, False), (41, 10, True), (7, 10, False), (1, 1, True)])
def test_the_checkpoints_counted_are_the_ones_the_schedule_names(iterations, every, initial):
    from posrnn_cli.common.settings.config import RunConfig

    cfg = RunConfig()
    cfg.train.iterations, cfg.train.checkpoint_every, cfg.train.checkpoint_initial = iterations, every, initial
    assert checkpoints_kept(cfg, "all") == sum(cfg.train.scheduled(s) for s in range(iterations + 1))


def test_a_dry_run_costs_what_its_runs_cost_not_their_checkpoints(tmp_path):
    """10^12 scheduled checkpoints are counted, not listed: under a 1.5 GB address-space limit the
    dry run prints its estimate (listing them took memory without bound)."""
    import subprocess
    import sys

    params = scratch(tmp_path, fig2={**TINY, "iterations": 10**12, "checkpoint_every": 1, "keep_checkpoints": "all"})
    code = ("import resource, sys\nresource.setrlimit(resource.RLIMIT_AS, (1_500_000_000, 1_500_000_000))\n"
            "from posrnn_cli.cli import run\nsys.argv = ['posrnn', 'sweep', 'fig2', '--dry-run', '--profile', 't', "
            f"'--params', {str(params)!r}, '--json']\nrun()\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert {row["checkpoints_kept"] for row in json.loads(r.stdout)} == {10**12}
