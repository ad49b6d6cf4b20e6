"""The CLI end to end: train → eval through Typer, help texts, one-line errors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from posrnn_cli.cli import app, run

runner = CliRunner()
from conftest import tiny_train

TINY = tiny_train(length=5, hidden_size=16, iterations=30, batch_size=16, warmup=3, checkpoint_every=10, n_test=64)


def posrnn(argv, capsys):
    """Run the console entry point; return (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as e:
        run(argv)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def test_train_then_eval_json(tmp_path):
    out = tmp_path / "run"
    r = runner.invoke(app, ["train", *TINY, "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output)
    assert summary["finished"] and summary["step"] == 30
    r = runner.invoke(app, ["eval", str(out), "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    for key in ("token_accuracy", "sequence_accuracy", "damerau_levenshtein", "token_accuracy_ci"):
        assert key in res
    assert 0 <= res["token_accuracy"] <= 1 and res["n_test"] == 64 and res["step"] == 30
    assert json.loads((out / "eval.json").read_text())["token_accuracy"] == res["token_accuracy"]
    r = runner.invoke(app, ["eval", str(out / "checkpoints" / "step_0000010.pt"), "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["step"] == 10
    assert (out / "eval_step0000010.json").is_file()
    r = runner.invoke(app, ["eval", str(out)])  # the rich table
    assert r.exit_code == 0 and "token acc" in r.output
    r = runner.invoke(app, ["compare", str(out), str(out)])
    assert r.exit_code == 0 and "runs with the same config" in r.output and "vanilla vs positional" not in r.output


def test_resume_through_the_cli(tmp_path):
    out = str(tmp_path / "run")
    assert runner.invoke(app, ["train", *TINY, "--out", out, "--stop-after", "10", "--json"]).exit_code == 0
    r = runner.invoke(app, ["train", *TINY, "--out", out, "--resume", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["step"] == 30


@pytest.mark.parametrize(
    "argv, words, code",
    [
        (["train", "--model", "rnnn", "--out", "x"], "'rnnn' is not one of", 2),
        (["train", "--task", "revers", "--out", "x"], "'revers' is not one of", 2),
        (["train", "--pe", "cosine", "--out", "x"], "'cosine' is not one of", 2),
        (["train", "--vocab-size", "abc", "--out", "x"], "--vocab-size", 2),
        (["train", *TINY, "--vocab-size", "1", "--out", "x"], "vocab_size must be at least 2", 1),
        (["train", *TINY, "--length", "0", "--out", "x"], "length must be at least 1", 1),
        (["train", *TINY, "--embed-size", "7", "--out", "x"], "must be even", 1),
        (["train", *TINY, "--set", "model.nope=1", "--out", "x"], "unknown key", 1),
        (["eval", "does/not/exist"], "neither a run directory nor a checkpoint", 1),
    ],
)
def test_bad_input_is_one_line_without_traceback(argv, words, code, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = posrnn(argv, capsys)
    assert rc == code
    assert err.startswith("error: ") and words in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err + out
    assert not (tmp_path / "x").exists()


def test_corrupt_checkpoint_and_occupied_out_dir(tmp_path, capsys):
    out = tmp_path / "run"
    assert runner.invoke(app, ["train", *TINY, "--out", str(out)]).exit_code == 0
    before = sorted(p.name for p in out.rglob("*"))
    rc, _, err = posrnn(["train", *TINY, "--hidden-size", "8", "--out", str(out)], capsys)
    assert rc == 1 and "already holds a different run" in err and "--force" in err
    rc, _, err = posrnn(["train", *TINY, "--hidden-size", "8", "--out", str(out), "--resume"], capsys)
    assert rc == 1 and "contradicts the saved run" in err
    assert sorted(p.name for p in out.rglob("*")) == before
    ck = out / "checkpoints" / "step_0000030.pt"
    ck.write_bytes(b"\x00garbage")
    rc, _, err = posrnn(["eval", str(out)], capsys)
    assert rc == 1 and "corrupt" in err and len(err.strip().splitlines()) == 1
    rc, _, err = posrnn(["train", *TINY, "--out", str(out), "--resume"], capsys)
    assert rc == 1 and "corrupt" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    rc, _, err = posrnn(["eval", str(empty)], capsys)
    assert rc == 1 and "no checkpoints" in err
