"""A replaced run is never hidden: whatever moment kills a ``--force``, the next command on the
run restores the old run (or, once the new run had finished, finishes deleting it)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.engine import replace
from posrnn_cli.engine.replace import REPLACED, Replacement
from posrnn_cli.engine.lock import run_lock

from conftest import ROOT
POSRNN = [sys.executable, "-m", "posrnn_cli"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
SMALL = ["--model", "gru", "--vocab-size", "6", "--length", "4", "--hidden-size", "8", "--batch-size", "8",
         "--device", "cpu", "--threads", "1", "--set", "task.n_test=32"]


class Killed(BaseException):
    """Stands for kill -9: nothing after it runs, no rollback."""


def snapshot(run: Path) -> dict[str, bytes]:
    """Every file of ``run`` (relative path → bytes), the lock excepted."""
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()
            and p.name != ".lock"}


def old_run(run: Path) -> dict[str, bytes]:
    """A fake finished run with an unrelated file beside it."""
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("old config\n")
    (run / "metrics.jsonl").write_text('{"step": 5}\n')
    (run / "checkpoints" / "step_0000005.pt").write_bytes(b"old weights")
    (run / "notes.txt").write_text("not posrnn's\n")
    return snapshot(run)


def new_run_writes(run: Path) -> None:
    (run / "checkpoints").mkdir(exist_ok=True)
    (run / "config.yaml").write_text("new config\n")
    (run / "code.json").write_text("{}\n")
    (run / "checkpoints" / "step_0000001.pt").write_bytes(b"new weights")


def kill_at_rename(monkeypatch, n: int) -> None:
    """Make the ``n``-th os.rename from now on (0-based) the moment the process dies."""
    real, count = os.rename, [0]

    def rename(a, b):
        if count[0] == n:
            raise Killed()
        count[0] += 1
        return real(a, b)

    monkeypatch.setattr(os, "rename", rename)


def next_command(run: Path, capsys) -> str:
    with run_lock(run, "the next command"):
        pass
    return capsys.readouterr().err


@pytest.mark.parametrize("moves", [-1, 0, 1, 2])  # -1: before it recorded what it moves
def test_killed_while_moving_the_old_run_aside_the_next_command_restores_it(tmp_path, monkeypatch, capsys, moves):
    before = old_run(tmp_path)
    if moves < 0:
        monkeypatch.setattr(replace, "atomic_write_text", lambda *a: (_ for _ in ()).throw(Killed()))
    else:
        kill_at_rename(monkeypatch, moves)
    with pytest.raises(Killed):
        Replacement(tmp_path, REPLACED).start()
    monkeypatch.undo()
    next_command(tmp_path, capsys)
    assert snapshot(tmp_path) == before and not replace.leftovers(tmp_path)


def test_killed_while_the_new_run_trains_the_next_command_restores_the_old_one(tmp_path, capsys):
    before = old_run(tmp_path)
    r = Replacement(tmp_path, REPLACED)
    r.start()
    new_run_writes(tmp_path)  # … and then kill -9: neither commit nor rollback runs
    err = next_command(tmp_path, capsys)
    assert snapshot(tmp_path) == before and not replace.leftovers(tmp_path)
    assert f"restored the run in {tmp_path}" in err and r.aside.name in err


@pytest.mark.parametrize("moves", range(3))
def test_a_restore_cut_short_is_finished_by_the_command_after(tmp_path, monkeypatch, capsys, moves):
    before = old_run(tmp_path)
    Replacement(tmp_path, REPLACED).start()
    new_run_writes(tmp_path)
    kill_at_rename(monkeypatch, moves)
    with pytest.raises(Killed):
        next_command(tmp_path, capsys)
    monkeypatch.undo()
    next_command(tmp_path, capsys)
    assert snapshot(tmp_path) == before and not replace.leftovers(tmp_path)


def test_killed_while_deleting_the_replaced_run_the_new_run_stays(tmp_path, monkeypatch, capsys):
    old_run(tmp_path)
    r = Replacement(tmp_path, REPLACED)
    r.start()
    new_run_writes(tmp_path)
    after = snapshot(tmp_path)
    monkeypatch.setattr(replace.shutil, "rmtree", lambda *a, **k: (_ for _ in ()).throw(Killed()))
    with pytest.raises(Killed):
        r.commit()
    monkeypatch.undo()
    next_command(tmp_path, capsys)
    assert not replace.leftovers(tmp_path)
    assert snapshot(tmp_path) == {k: v for k, v in after.items() if not k.startswith(replace.ASIDE)}


def test_two_replacements_by_one_pid_never_share_a_folder(tmp_path):
    old_run(tmp_path)
    first = Replacement(tmp_path, REPLACED)
    first.start()
    new_run_writes(tmp_path)
    second = Replacement(tmp_path, REPLACED)  # the same pid again (a process of a recycled pid)
    second.start()
    assert first.aside != second.aside and first.aside.is_dir() and second.aside.is_dir()


def test_a_folder_aside_without_its_record_is_named_never_guessed(tmp_path):
    (tmp_path / f"{replace.ASIDE}4242").mkdir()  # e.g. left by a version that kept no record
    (tmp_path / f"{replace.ASIDE}4242" / "config.yaml").write_text("old config\n")
    with pytest.raises(PosrnnError, match=r"holds files .* no replacing.json.*move them back .* by hand"):
        with run_lock(tmp_path):
            pass
    assert (tmp_path / f"{replace.ASIDE}4242" / "config.yaml").read_text() == "old config\n"


# ---- kill -9 of the real commands at random moments ---------------------------------------------------------
def train_argv(run: Path, *extra: str) -> list[str]:
    return [*POSRNN, "train", *SMALL, "--out", str(run), *extra]


@pytest.mark.slow
def test_train_force_killed_at_random_moments_never_hides_the_old_run(tmp_path):
    """kill -9 of `train --force` at seeded random moments after it moved the old run aside: the
    next command restores the old run byte-identical (eval), or continues the old run
    (--resume), unless the new run had finished first."""
    run = tmp_path / "run"
    assert subprocess.run(train_argv(run, "--iterations", "5", "--seed", "1"), env=ENV,
                          stdout=subprocess.DEVNULL).returncode == 0
    before = snapshot(run)
    rng = random.Random(7)
    for then in (["eval", str(run), "--device", "cpu"], ["train", "--out", str(run), "--resume", "--iterations", "8"]):
        p = subprocess.Popen(train_argv(run, "--iterations", "3000", "--checkpoint-every", "200", "--force"), env=ENV,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while time.time() < deadline and p.poll() is None and not replace.leftovers(run):
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.6))
        p.kill()
        p.wait()
        r = subprocess.run([*POSRNN, *then], env=ENV, capture_output=True, text=True)
        assert r.returncode == 0 and not replace.leftovers(run), r.stderr
        if p.returncode == 0:  # the new run finished first: it replaced the old one
            assert b"iterations: 3000" in (run / "config.yaml").read_bytes()
            return
        assert "restored the run" in r.stderr, r.stderr
        after = snapshot(run)
        if then[0] == "eval":
            assert ({k: after[k] for k in before} == before
                    and set(after) - set(before) <= {"eval.json", "eval_sequences.npz"})
        else:  # the old run (seed 1, 5 iterations) went on to 8, never the killed replacement
            assert b"seed: 1" in after["config.yaml"] and b"iterations: 8" in after["config.yaml"]
            assert after["checkpoints/step_0000005.pt"] == before["checkpoints/step_0000005.pt"]


@pytest.mark.slow
def test_extend_vocab_force_killed_while_training_never_hides_the_old_extension(tmp_path):
    base, ext = tmp_path / "base", tmp_path / "ext"
    assert subprocess.run(train_argv(base, "--iterations", "5"), env=ENV, stdout=subprocess.DEVNULL).returncode == 0
    extend = [*POSRNN, "extend-vocab", str(base), "--extra-vocab", "4", "--out", str(ext), "--device", "cpu",
              "--set", "task.n_test=32"]
    assert subprocess.run([*extend, "--iterations", "3"], env=ENV, stdout=subprocess.DEVNULL).returncode == 0
    before = snapshot(ext)
    p = subprocess.Popen([*extend, "--iterations", "100000", "--force"], env=ENV, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and p.poll() is None and not replace.leftovers(ext):
        time.sleep(0.005)
    time.sleep(0.2)
    p.kill()
    p.wait()
    assert replace.leftovers(ext)  # killed with the old extension aside …
    r = subprocess.run([*POSRNN, "eval", str(ext), "--device", "cpu"], env=ENV, capture_output=True, text=True)
    assert r.returncode == 0 and "restored the run" in r.stderr, r.stderr  # … which the next command puts back
    after = snapshot(ext)
    assert {k: after[k] for k in before} == before and not replace.leftovers(ext)
