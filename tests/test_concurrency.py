"""Commands beside a run that another process writes, and interrupted command lines: extend-vocab
never extends a run still training, eval names a checkpoint deleted under it for what it is, a
read-only run is analysed with --out elsewhere, and Ctrl-C while posrnn loads is one line."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posrnn_cli.cli import app
from posrnn_cli.common.settings.config import resolve_config
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.engine import evaluate as ev
from posrnn_cli.common.files.rundir import list_checkpoints
from posrnn_cli.engine.extend import extend_vocab
from posrnn_cli.engine.lock import LockBusy, run_lock
from posrnn_cli.engine.train import train

from conftest import ROOT
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def tiny(**over):
    sets = {"task.vocab_size": 8, "task.length": 4, "task.n_test": 32, "model.name": "gru", "model.hidden_size": 8,
            "train.iterations": 10, "train.batch_size": 8, "train.warmup": 2, "train.checkpoint_every": 5,
            "train.log_every": 5, "train.seed": 3, "train.device": "cpu"}
    return resolve_config(options={**sets, **over})


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("c") / "run"
    train(tiny(), run, progress=False)
    return run


# ---- extend-vocab and a run still training --------------------------------------------------------------
def test_extend_vocab_refuses_a_run_another_process_holds(trained, tmp_path):
    code = "import sys, time\nfrom posrnn_cli.engine.lock import run_lock\n" \
           "with run_lock(sys.argv[1], 'posrnn train --out run'):\n    print('held', flush=True)\n    time.sleep(60)\n"
    p = subprocess.Popen([sys.executable, "-c", code, str(trained)], env=ENV, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        with pytest.raises(LockBusy, match=rf"pid {p.pid}: posrnn train --out run"):
            extend_vocab(trained, 4, tmp_path / "ext", iterations=4, device="cpu", progress=False)
    finally:
        p.kill()
        p.wait()
    assert not (tmp_path / "ext").exists()


def test_extend_vocab_refuses_an_unfinished_run_but_takes_a_checkpoint_file_named_explicitly(tmp_path):
    run = tmp_path / "run"
    train(tiny(), run, progress=False, stop_after=5)
    with pytest.raises(PosrnnError, match=r"is not finished \(step 5 of 10\); finish it first \(posrnn train --out "
                                          r".* --resume\)"):
        extend_vocab(run, 4, tmp_path / "ext", iterations=4, device="cpu", progress=False)
    assert not (tmp_path / "ext").exists()
    out = extend_vocab(list_checkpoints(run)[-1][1], 4, tmp_path / "ext", iterations=4, device="cpu", progress=False,
                       sets=["task.n_test=32"])
    assert out["extended_from"].endswith("step_0000005.pt")


# ---- eval while a run keeping only its last checkpoint moves on ---------------------------------------------
def test_eval_follows_a_checkpoint_replaced_while_it_was_opened(trained, tmp_path, monkeypatch):
    """The sweep writes step 10 and deletes step 5 between eval listing the run and opening step 5."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(trained, run)
    ten = run / "checkpoints" / "step_0000010.pt"
    ten.rename(tmp_path / "later.pt")
    real, calls = ev.load_checkpoint, []

    def sweep_moves_on(path, *a, **k):
        if not calls:
            (tmp_path / "later.pt").rename(ten)
            (run / "checkpoints" / "step_0000005.pt").unlink()
        calls.append(Path(path).name)
        return real(path, *a, **k)

    monkeypatch.setattr(ev, "load_checkpoint", sweep_moves_on)
    assert ev.evaluate(run, device="cpu", n_resamples=10)["step"] == 10
    assert calls == ["step_0000005.pt", "step_0000010.pt"]


def test_eval_names_a_run_whose_checkpoints_keep_vanishing_for_the_process_writing_it(trained, tmp_path, monkeypatch):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(trained, run)
    real = ev.load_checkpoint

    def vanish(path, *a, **k):  # each one listed is gone by the time it is opened, and a newer one is there
        step = int(Path(path).stem.split("_")[1])
        Path(path).rename(Path(path).with_name(f"step_{step + 5:07d}.pt"))
        return real(path, *a, **k)

    monkeypatch.setattr(ev, "load_checkpoint", vanish)
    with run_lock(run, "posrnn sweep job run"):  # (this process stands for the sweep)
        with pytest.raises(PosrnnError) as e:
            ev.evaluate(run, device="cpu", n_resamples=10)
    message = str(e.value)
    assert "was deleted while it was being read" in message and f"pid {os.getpid()}: posrnn sweep job run" in message
    assert "keeps only its latest checkpoint" in message and "\n" not in message


# ---- a read-only run ---------------------------------------------------------------------------------------
def test_a_read_only_run_is_analysed_with_out_elsewhere(trained, tmp_path, monkeypatch):
    real_open = os.open

    def read_only(path, flags, *a, **kw):  # (as root, chmod cannot make a directory read-only)
        if Path(path).parent == trained and flags & (os.O_CREAT | os.O_WRONLY | os.O_RDWR):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *a, **kw)

    monkeypatch.setattr(os, "open", read_only)
    before = sorted(os.listdir(trained))
    r = CliRunner().invoke(app, ["stability", str(trained), "--triplets", "4", "--device", "cpu",
                                 "--out", str(tmp_path / "s.csv")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "s.csv").is_file() and sorted(os.listdir(trained)) == before


# ---- Ctrl-C while posrnn loads -------------------------------------------------------------------------------
INTERRUPT_AT_TYPER = """
import runpy, sys
class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == "typer":
            raise KeyboardInterrupt
sys.meta_path.insert(0, CtrlC())
sys.argv = ["posrnn", "--version"]
"""


@pytest.mark.parametrize("start", ["runpy.run_module('posrnn_cli', run_name='__main__')",
                                   "from posrnn_cli.cli import run; run()"])
def test_ctrl_c_while_the_command_line_loads_is_one_line(start):
    r = subprocess.run([sys.executable, "-c", INTERRUPT_AT_TYPER + start], env=ENV, capture_output=True, text=True)
    assert r.returncode != 0 and r.stderr == "stopped: interrupted\n", r.stderr
