"""Small things of the command line a newcomer meets in the first hour: Ctrl-C before the first
checkpoint, near-miss names, one-line usage errors, completion of names, `posrnn status`."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from posrnn_cli.cli import app, run

runner = CliRunner()
TINY = ["train", "--task", "reverse", "--model", "gru", "--vocab-size", "6", "--length", "4", "--hidden-size", "8",
        "--iterations", "6", "--batch-size", "8", "--seed", "0", "--device", "cpu", "--checkpoint-every", "3",
        "--set", "task.n_test=32"]


def posrnn(argv, capsys):
    """Run the console entry point; return (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as e:
        run(argv)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def test_ctrl_c_before_the_first_checkpoint_advises_the_same_command_not_resume(tmp_path, monkeypatch):
    import posrnn_cli.engine.train as engine

    real = engine.build_run

    def interrupted(cfg):
        raise KeyboardInterrupt  # Ctrl-C while the model is built, before the loop takes the signal

    monkeypatch.setattr(engine, "build_run", interrupted)
    out = tmp_path / "run"
    r = runner.invoke(app, [*TINY, "--out", str(out)])
    assert r.exit_code == 130 and "run the same command again" in r.output and "--resume" not in r.output, r.output
    assert not out.exists()  # nothing to resume: --resume would fail
    monkeypatch.setattr(engine, "build_run", real)
    assert runner.invoke(app, [*TINY, "--out", str(out), "--stop-after", "3", "--json"]).exit_code == 0
    monkeypatch.setattr(engine, "build_run", interrupted)
    r = runner.invoke(app, [*TINY, "--out", str(out), "--resume"])
    assert r.exit_code == 130 and f"posrnn train --out {out} --resume" in r.output, r.output
