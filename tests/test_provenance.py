"""Results that prove whose they are: aggregation pools only scores stamped with the run's
latest checkpoint and current config, and refuses, in one line naming the file and
`posrnn eval`, scores of an earlier step, of another run, or cut, ragged, copied or unstamped."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from fabricate import scored_run
from typer.testing import CliRunner

from posrnn_cli.analysis.aggregate import aggregate, table_eval, table_extend
from posrnn_cli.cli import app
from posrnn_cli.common.settings.config import RunConfig, dump_yaml
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.files.io import read_npz, write_npz
from posrnn_cli.common.results.provenance import eval_digest

METRICS = ("token_accuracy", "sequence_accuracy", "damerau_levenshtein")


def cfg(seed: int = 1, iterations: int = 100) -> RunConfig:
    c = RunConfig()
    c.task.vocab_size, c.task.length, c.model.pe, c.train.seed, c.train.iterations = 16, 8, "none", seed, iterations
    return c


def scores(n: int = 20, seed: int = 0) -> dict:
    t = np.random.default_rng(seed).random(n)
    return {"token_accuracy": t, "sequence_accuracy": (t > 0.5).astype(float), "damerau_levenshtein": 1 - t}


@pytest.fixture
def runs(tmp_path):
    return [scored_run(tmp_path / "fig2" / f"r{s}", cfg(s), scores(seed=s)) for s in (1, 2)]


def refused(runs, match: str, table=table_eval) -> str:
    with pytest.raises(PosrnnError, match=match) as e:
        table(runs, 50)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_stamped_runs_aggregate(runs):
    (row,) = table_eval(runs, 50)
    assert row["seeds"] == "1 2" and row["n_sequences"] == 40


def test_scores_of_an_earlier_step_are_refused_after_training_on(runs):
    """`train --resume --iterations N` writes a later checkpoint and a new config.yaml; the old
    scores must not be written under the new config."""
    run = runs[0]
    (run / "config.yaml").write_text(dump_yaml(cfg(1, 200)))
    (run / "checkpoints" / "step_0000200.pt").write_bytes(b"later weights")
    msg = refused(runs, "scores step 100, not the run's latest checkpoint")
    assert f"posrnn eval {run}" in msg


def test_scores_under_a_changed_config_are_refused(runs):
    c = cfg(1)
    c.train.lr = 0.5
    (runs[0] / "config.yaml").write_text(dump_yaml(c))
    refused(runs, "another config")


def test_a_copied_score_file_is_refused(runs):
    shutil.copy(runs[1] / "eval_sequences.npz", runs[0] / "eval_sequences.npz")
    refused(runs, "scores another checkpoint")


def test_cut_or_ragged_scores_are_refused_even_restamped(runs):
    path = runs[0] / "eval_sequences.npz"
    good = read_npz(path)
    write_npz(path, {**good, "token_accuracy": good["token_accuracy"][:5]})  # ragged, stamps kept
    refused(runs, "not the file its eval.json recorded")
    e = json.loads((runs[0] / "eval.json").read_text())  # and with eval.json made to agree: still ragged
    from posrnn_cli.common.results.provenance import file_sha256

    e["sequences_sha256"] = file_sha256(path)
    e["digest"] = eval_digest(e)
    (runs[0] / "eval.json").write_text(json.dumps(e))
    refused(runs, "ragged or cut")
    write_npz(path, {k: (v[:5] if v.ndim else v) for k, v in good.items()})  # every array cut to 5 of 20
    e["sequences_sha256"] = file_sha256(path)
    e["digest"] = eval_digest(e)
    (runs[0] / "eval.json").write_text(json.dumps(e))
    refused(runs, "for 20 test sequences")


def test_unstamped_scores_and_an_old_eval_json_are_refused_with_the_fix(runs):
    e = json.loads((runs[0] / "eval.json").read_text())
    for k in ("digest", "checkpoint_sha256"):
        e.pop(k)
    (runs[0] / "eval.json").write_text(json.dumps(e))
    assert "posrnn eval" in refused(runs, "older posrnn and records no checkpoint digest")
    (runs[0] / "eval.json").unlink()
    refused(runs, "is missing")
    scored_run(runs[0], cfg(1), scores(seed=1))
    write_npz(runs[0] / "eval_sequences.npz", scores(seed=1))  # no stamps at all
    refused(runs, "records no checkpoint or config digest")


def test_a_run_without_a_checkpoint_proves_nothing(runs):
    shutil.rmtree(runs[0] / "checkpoints")
    refused(runs, "has no checkpoint")


def test_an_extension_score_file_must_carry_its_stamps(tmp_path):
    c = cfg(1)
    c.model.frozen_vocab, c.task.vocab_size = 16, 22
    run = scored_run(tmp_path / "extend" / "r1", c, scores(), name="extend_sequences.npz")
    (row,) = table_extend([run], 50)
    assert row["extra_vocab"] == 6
    other = scored_run(tmp_path / "extend" / "r2", c, scores(seed=3), name="extend_sequences.npz")
    shutil.copy(other / "extend_sequences.npz", run / "extend_sequences.npz")
    refused([run], "scores another checkpoint", table_extend)


def test_train_on_without_eval_then_aggregate_is_refused_until_evaluated(tmp_path):
    """The whole path through the CLI: train, eval, train on with --resume --iterations, aggregate."""
    runner = CliRunner()
    run = tmp_path / "runs" / "fig2" / "r1"
    tiny = ["--task", "reverse", "--model", "gru", "--vocab-size", "6", "--length", "4", "--hidden-size", "8",
            "--batch-size", "8", "--checkpoint-every", "10", "--device", "cpu", "--set", "task.n_test=32"]
    for argv in (["train", *tiny, "--iterations", "10", "--out", str(run)], ["eval", str(run), "--device", "cpu"]):
        r = runner.invoke(app, argv)
        assert r.exit_code == 0, r.output
    assert aggregate(tmp_path / "runs", tmp_path / "t", n_resamples=20)["fig2"][0]["iterations"] == 10
    r = runner.invoke(app, ["train", "--out", str(run), "--resume", "--iterations", "20", "--device", "cpu"])
    assert r.exit_code == 0, r.output
    before = (tmp_path / "t" / "fig2.csv").read_bytes()
    with pytest.raises(PosrnnError, match="scores step 10, not the run's latest checkpoint"):
        aggregate(tmp_path / "runs", tmp_path / "t", n_resamples=20)
    assert (tmp_path / "t" / "fig2.csv").read_bytes() == before
    assert runner.invoke(app, ["eval", str(run), "--device", "cpu"]).exit_code == 0
    assert aggregate(tmp_path / "runs", tmp_path / "t", n_resamples=20)["fig2"][0]["iterations"] == 20
