"""Requeue and preemption that lose nothing, without SLURM: the signal holders, training stopped
at the step in progress, evaluation finished and written, stability stopped after a checkpoint
and resumed, a SLURM task that leaves without a result (requeueing itself on SIGUSR2), and the
time-based checkpoint interval. The same on a real one-node SLURM: tests/test_slurm_cluster.py."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np
import pytest
import torch

from posrnn_cli.common.settings.config import RunConfig, config_diff, resolve_config
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.files.io import read_json, read_npz
from posrnn_cli.common.host.signals import Stopped, stop_requests, task_signals
from posrnn_cli.engine import train as train_mod
from posrnn_cli.engine.checkpoint import load_checkpoint
from posrnn_cli.common.settings.config import config_digest
from posrnn_cli.common.files.rundir import list_checkpoints
from posrnn_cli.common.files.rundir import run_state
from posrnn_cli.engine.lifecycle import Interrupted
from posrnn_cli.engine.train import train
from posrnn_cli.sweep import jobs, slurm
from posrnn_cli.sweep.plan import Job

SETS = {"task.vocab_size": 8, "task.length": 5, "task.n_test": 64, "model.name": "lstm", "model.hidden_size": 8,
        "train.iterations": 40, "train.batch_size": 8, "train.warmup": 2, "train.checkpoint_every": 1000,
        "train.log_every": 5, "train.seed": 3, "train.device": "cpu", "train.threads": 1}


def cfg_of(**over) -> RunConfig:
    return resolve_config(options={**SETS, **over})


def weights(run: Path) -> dict:
    return load_checkpoint(list_checkpoints(run)[-1][1])["model"]


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def signal_at(monkeypatch, step: int, *signums: int) -> None:
    """Send ``signums`` to this process while the update after ``step`` runs."""
    real = train_mod.Trainer.train_step

    def train_step(self, batch):
        if self.step == step:
            for s in signums:
                os.kill(os.getpid(), s)
        return real(self, batch)

    monkeypatch.setattr(train_mod.Trainer, "train_step", train_step)


# ---- the signal holders ----------------------------------------------------------------------------
def test_outside_a_task_the_first_signal_sets_the_flag_and_a_second_stops_at_once():
    before = signal.getsignal(signal.SIGTERM)
    with stop_requests() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.signal == "SIGTERM"
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is before


def test_in_a_task_signals_never_abort_and_sigusr2_wins_in_either_order():
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR2)}
    for order in ((signal.SIGTERM, signal.SIGUSR2, signal.SIGTERM), (signal.SIGUSR2, signal.SIGTERM)):
        with task_signals() as flag:
            with stop_requests() as stop:  # a loop inside the task reads the task's flag
                assert stop is flag
                for s in order:
                    os.kill(os.getpid(), s)
            assert flag.signal == "SIGUSR2" and flag.count == len(order)
    assert {s: signal.getsignal(s) for s in before} == before


# ---- training, evaluation, stability inside a task ------------------------------------------------------
def test_sigusr2_in_a_task_checkpoints_the_step_in_progress_and_the_run_resumes_bit_exactly(tmp_path, monkeypatch):
    cfg = cfg_of()
    train(cfg, tmp_path / "straight", progress=False)
    signal_at(monkeypatch, 17, signal.SIGTERM, signal.SIGUSR2)  # both, as a preemption may send them
    with task_signals() as flag, pytest.raises(Interrupted) as e:
        train(cfg, tmp_path / "run", progress=False)
    # the update in progress (the 18th) finishes, and the checkpoint is at its step, not at a periodic one
    assert (e.value.step, e.value.signal, flag.signal) == (18, "SIGUSR2", "SIGUSR2")
    assert [s for s, _ in list_checkpoints(tmp_path / "run")] == [18]
    assert isinstance(e.value, Stopped)  # what a SLURM task catches to leave without a result
    monkeypatch.undo()
    assert jobs.ensure_trained(Job("e", "c", "train", str(tmp_path / "run"), cfg.to_dict())) == "resumed from step 18"
    assert same(weights(tmp_path / "run"), weights(tmp_path / "straight"))


def test_sigterm_in_a_task_during_evaluation_finishes_and_writes_it(tmp_path, monkeypatch):
    cfg = cfg_of()
    train(cfg, tmp_path / "run", progress=False)
    from posrnn_cli.engine import evaluate as ev

    real = ev.evaluate_model

    def evaluate_model(*a, **k):
        os.kill(os.getpid(), signal.SIGTERM)  # SLURM's requeue arrives while the test set is scored
        return real(*a, **k)

    monkeypatch.setattr(ev, "evaluate_model", evaluate_model)
    with task_signals() as flag:
        out = jobs.run_train(Job("e", "c", "train", str(tmp_path / "run"), cfg.to_dict()))
    assert flag.signal == "SIGTERM" and out["training"] == "skipped (finished)"
    assert read_json(tmp_path / "run" / "eval.json")["token_accuracy"] == out["token_accuracy"]


def test_stability_in_a_task_stops_after_a_checkpoint_and_goes_on_from_there(tmp_path, monkeypatch):
    cfg = cfg_of(**{"train.iterations": 30, "train.checkpoint_every": 10})
    train(cfg, tmp_path / "src", progress=False)
    opts = {"source": str(tmp_path / "src"), "triplets": 8, "chunk_size": 4, "seed": 0, "device": "cpu"}
    straight = Job("s", "c", "stability", str(tmp_path / "straight"), None, opts)
    (tmp_path / "straight").mkdir()
    jobs.run_stability(straight)
    from posrnn_cli.engine import stability as st

    real, calls, kill = st.pair_stabilities, [], [signal.SIGTERM]

    def pair_stabilities(*a, **k):
        calls.append(1)
        if kill:
            os.kill(os.getpid(), kill.pop())
        return real(*a, **k)

    monkeypatch.setattr(st, "pair_stabilities", pair_stabilities)
    job = Job("s", "c", "stability", str(tmp_path / "run"), None, opts)
    (tmp_path / "run").mkdir()
    with task_signals(), pytest.raises(Stopped, match="SIGTERM: stability .* stopped after 1 of 3 checkpoints"):
        jobs.run_stability(job)
    assert calls == [1] and not (tmp_path / "run" / "stability_values.npz").exists()
    assert {k.split("|")[0] for k in read_npz(tmp_path / "run" / "stability_partial.npz")} == {"10"}
    calls.clear()
    jobs.run_stability(job)  # the requeued task: only the two checkpoints left
    assert len(calls) == 2 and not (tmp_path / "run" / "stability_partial.npz").exists()
    a, b = read_npz(tmp_path / "run" / "stability_values.npz"), read_npz(tmp_path / "straight" / "stability_values.npz")
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


# ---- the SLURM task: leave without a result, requeue on SIGUSR2 ---------------------------------------
class FakeSubmititHandler:
    """Stands in for submitit's SIGUSR2 handler (``SignalHandler.checkpoint_and_try_requeue``)."""

    class env:
        cluster = "local"

    def __init__(self):
        self.calls = 0

    def checkpoint_and_try_requeue(self, signum, frame):
        self.calls += 1
        raise SystemExit(-1)


@pytest.mark.parametrize("signums, requeued", [((signal.SIGUSR2,), True), ((signal.SIGTERM,), False)])
def test_a_stopped_slurm_task_leaves_without_a_result(tmp_path, monkeypatch, signums, requeued):
    cfg = cfg_of()
    fake = FakeSubmititHandler()
    previous = signal.signal(signal.SIGUSR2, fake.checkpoint_and_try_requeue)
    monkeypatch.setattr(slurm, "USR2_GRACE_S", 0.2)
    signal_at(monkeypatch, 6, *signums)
    job = Job("e", "c", "train", str(tmp_path / "run"), cfg.to_dict())
    try:
        with pytest.raises(SystemExit) as e:  # not an Exception: submitit writes no error result
            slurm.SweepTask()(job.to_dict())
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert fake.calls == int(requeued) and e.value.code == (-1 if requeued else slurm.STOPPED_EXIT)
    assert [s for s, _ in list_checkpoints(tmp_path / "run")] == [7]
    assert signal.getsignal(signal.SIGTERM) is not None and signal.getsignal(signal.SIGUSR2) is previous


def test_requeue_survives_the_sigterm_slurm_sends_meanwhile(tmp_path, monkeypatch):
    """The child ``scontrol`` ignores SIGTERM and SIGUSR2 (SLURM signals every process of the
    step), and a failing call is retried, then one line."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\nkill -TERM $$\nkill -USR2 $$\necho \"$@\" >> {log}\n"
                                      f"[ $(wc -l < {log}) -ge 2 ]\n")
    (bin_dir / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(slurm.time, "sleep", lambda s: None)
    slurm.requeue("12_3")
    assert log.read_text().splitlines() == ["requeue 12_3", "requeue 12_3"]
    log.write_text("")
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho 'Invalid job id specified' >&2\nexit 1\n")
    with pytest.raises(PosrnnError, match=r"^scontrol requeue 12_3 failed 3 times \(Invalid job id specified\);"):
        slurm.requeue("12_3")


# ---- train.checkpoint_minutes -------------------------------------------------------------------------
def test_checkpoint_minutes_adds_checkpoints_by_wall_time_and_changes_nothing_else(tmp_path, monkeypatch):
    """A timed checkpoint is kept until a later one is written: a finished run holds the checkpoints
    of its schedule only (the ones the disk estimate counts), whatever the wall clock did."""
    from posrnn_cli.sweep.storage import checkpoints_kept

    cfg = cfg_of(**{"train.iterations": 12, "train.checkpoint_every": 5})
    train(cfg, tmp_path / "straight", progress=False)
    assert [s for s, _ in list_checkpoints(tmp_path / "straight")] == [5, 10, 12]
    clock = iter(range(0, 10**6, 60))  # a minute passes at every look at the clock
    monkeypatch.setattr(train_mod.time, "monotonic", lambda: float(next(clock)))
    timed = cfg_of(**{"train.iterations": 12, "train.checkpoint_every": 5, "train.checkpoint_minutes": 1})
    seen = []
    real_save = train_mod.save_checkpoint
    monkeypatch.setattr(train_mod, "save_checkpoint", lambda *a: seen.append(a[1]) or real_save(*a))
    train(timed, tmp_path / "run", progress=False, stop_after=7)
    assert [s for s, _ in list_checkpoints(tmp_path / "run")] == [5, 7]  # the latest timed one is there to resume from
    train(timed, tmp_path / "run", resume=True, progress=False)
    monkeypatch.undo()
    assert seen == list(range(1, 13))  # a checkpoint at every step was written
    assert [s for s, _ in list_checkpoints(tmp_path / "run")] == [5, 10, 12] == [
        s for s, _ in list_checkpoints(tmp_path / "straight")]
    assert checkpoints_kept(timed, "all") == 3
    assert same(weights(tmp_path / "run"), weights(tmp_path / "straight"))
    with pytest.raises(PosrnnError, match="train.checkpoint_minutes must be positive, got 0"):
        train(cfg_of(**{"train.checkpoint_minutes": 0}), tmp_path / "bad", progress=False)


def test_a_finished_run_from_before_checkpoint_minutes_is_still_done(tmp_path):
    """A run trained by code without the field (its config.yaml lacks it) is done for the default
    and for any interval: the interval says when to save, not what the run computes."""
    cfg = cfg_of(**{"train.iterations": 10})
    run = tmp_path / "run"
    train(cfg, run, progress=False)
    text = (run / "config.yaml").read_text()
    assert "checkpoint_minutes: null" in text
    (run / "config.yaml").write_text("".join(ln for ln in text.splitlines(True) if "checkpoint_minutes" not in ln))
    assert run_state(run, cfg).state == "done"
    assert run_state(run, cfg_of(**{"train.iterations": 10, "train.checkpoint_minutes": 30})).state == "done"
    assert config_diff(cfg, cfg_of(**{"train.iterations": 10, "train.checkpoint_minutes": 5})) == []
    assert config_digest(cfg.to_dict()) == config_digest({s: {k: v for k, v in sec.items() if k != "checkpoint_minutes"}
                                                         for s, sec in cfg.to_dict().items()})
    assert jobs.ensure_trained(Job("e", "c", "train", str(run), cfg.to_dict())) == "skipped (finished)"
