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


def test_extend_vocab_explains_its_rows_and_says_when_the_new_ids_were_not_learned(tmp_path):
    from posrnn_cli.engine.extend import TEST_SETS, not_learned

    run = tmp_path / "run"
    assert runner.invoke(app, [*TINY, "--out", str(run), "--json"]).exit_code == 0
    r = runner.invoke(app, ["extend-vocab", str(run), "--extra-vocab", "4", "--iterations", "1", "--out", str(tmp_path / "ext")])
    assert r.exit_code == 0, r.output
    for _, label, about in TEST_SETS:
        assert f"{label}: {about}" in r.output
    assert max(len(line) for line in r.output.splitlines() if not line.startswith(("warning", "threads"))) <= 80
    summary = {"iterations": 1, "new_ids": {"token_accuracy": 0.0}}
    advice = not_learned(summary, "posrnn extend-vocab R --extra-vocab 4 --out E")
    assert "not learned" in advice and "--force --iterations 1000" in advice
    assert not_learned({**summary, "new_ids": {"token_accuracy": 0.01}}, "x") is None
    import json

    acc = json.loads((tmp_path / "ext" / "extend.json").read_text())["new_ids"]["token_accuracy"]
    assert acc == 0  # one iteration: the new rows have not moved (seeded, so always so)
    assert "warning: the new ids were not learned" in r.output
