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


def test_extend_vocab_explains_its_rows_and_says_when_the_new_ids_were_not_learned(tmp_path, monkeypatch):
    import posrnn_cli.engine.extend as extend
    from posrnn_cli.engine.extend import TEST_SETS, not_learned

    run = tmp_path / "run"
    assert runner.invoke(app, [*TINY, "--out", str(run), "--json"]).exit_code == 0
    scores = {"token_accuracy": 0.5, "token_accuracy_ci": [0.4, 0.6], "sequence_accuracy": 0.1, "damerau_levenshtein": 1.0}

    def fake(*args, **kw):  # what an extension returns; its new ids scored 0 (or not)
        return {"vocab_size": 6, "extra_vocab": 4, "model": "gru", "pe": "none", "iterations": 20,
                **{key: dict(scores) for key, _, _ in TEST_SETS}, "new_ids": {**scores, "token_accuracy": fake.new}}

    monkeypatch.setattr(extend, "extend_vocab", fake)
    argv = ["extend-vocab", str(run), "--extra-vocab", "4", "--out", str(tmp_path / "ext")]
    for fake.new in (0.0, 0.25):
        r = runner.invoke(app, argv)
        assert r.exit_code == 0, r.output
        for _, label, about in TEST_SETS:
            assert f"{label}: {about}" in r.output
        assert max(len(line) for line in r.output.splitlines() if not line.startswith("warning")) <= 80
        assert ("warning: the new ids were not learned" in r.output) == (fake.new == 0), r.output
    advice = not_learned({"iterations": 20, "new_ids": {"token_accuracy": 0.0}}, "posrnn extend-vocab R --out E")
    assert advice.endswith("posrnn extend-vocab R --out E --force --iterations 1000")
