"""NaN in any analysis is an error naming the checkpoint, never a number: stability (a NaN
Jacobian used to score 0.000 [0, 0]), evaluation and the permutation analysis."""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from posrnn_cli.cli import app
from posrnn_cli.common.settings.config import resolve_config
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.engine import evaluate as evaluate_mod
from posrnn_cli.engine import permutation as permutation_mod
from posrnn_cli.engine import stability as stability_mod
from posrnn_cli.engine.train import train

SETS = {"task.vocab_size": 8, "task.length": 5, "task.n_test": 32, "model.name": "gru", "model.hidden_size": 8,
        "train.iterations": 4, "train.batch_size": 8, "train.warmup": 1, "train.checkpoint_every": 2,
        "train.device": "cpu"}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("nonfinite") / "run"
    train(resolve_config(options=SETS), out, progress=False)
    return out


def test_a_nan_jacobian_is_an_error_naming_the_checkpoint(run, monkeypatch):
    """The last checkpoint's Jacobians are NaN: the analysis stops there, naming it, and writes nothing."""
    real_jacobians, real_load = stability_mod.jacobians, stability_mod.load_run
    loading = {}

    def load(path, **kw):
        loading["name"] = path.name
        return real_load(path, **kw)

    def jacobians(core, x, chunk_size=64, target_position=1):
        J = real_jacobians(core, x, chunk_size, target_position)
        return J * math.nan if loading["name"] == "step_0000004.pt" else J

    monkeypatch.setattr(stability_mod, "jacobians", jacobians)
    monkeypatch.setattr(stability_mod, "load_run", load)
    r = CliRunner().invoke(app, ["stability", str(run), "--triplets", "4", "--device", "cpu"])
    assert r.exit_code != 0 and "Traceback" not in r.output
    assert "step_0000004.pt (step 4" in r.output and "non-finite Jacobian" in r.output
    assert not (run / "stability.csv").exists()
    monkeypatch.undo()
    assert CliRunner().invoke(app, ["stability", str(run), "--triplets", "4", "--device", "cpu"]).exit_code == 0


def test_non_finite_scores_are_an_error_and_nothing_is_written(run, monkeypatch):
    real = evaluate_mod.evaluate_model

    def nan_scores(*a, **kw):
        summary, per_seq = real(*a, **kw)
        per_seq["token_accuracy"] = per_seq["token_accuracy"] * math.nan
        return summary, per_seq

    monkeypatch.setattr(evaluate_mod, "evaluate_model", nan_scores)
    with pytest.raises(PosrnnError, match=r"evaluating .*step_0000004.pt \(step 4\) gave non-finite scores "
                                          r"\(token_accuracy\)"):
        evaluate_mod.evaluate(run, device="cpu")
    assert not (run / "eval.json").exists() and not (run / "eval_sequences.npz").exists()


def test_non_finite_logits_stop_the_permutation_analysis(tmp_path, monkeypatch):
    out = tmp_path / "tf"
    train(resolve_config(options={**SETS, "model.name": "transformer", "model.pe": "none", "model.heads": 2}), out,
          progress=False)
    real = permutation_mod.load_run

    def nan_model(*a, **kw):
        loaded = real(*a, **kw)
        forward = loaded.model.forward
        loaded.model.forward = lambda *x: forward(*x) * math.nan
        return loaded

    monkeypatch.setattr(permutation_mod, "load_run", nan_model)
    with pytest.raises(PosrnnError, match=r"permutation analysis of .*step_0000004.pt \(step 4\) met non-finite "
                                          r"logits"):
        permutation_mod.permutation_report(out, device="cpu")
    monkeypatch.undo()
    assert math.isfinite(permutation_mod.permutation_report(out, device="cpu")["max_logit_change"])
