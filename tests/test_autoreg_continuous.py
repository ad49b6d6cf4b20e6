"""The autoregression and continuous ("infinite vocabulary") experiments: their table forms on
hand-made runs, the evaluation scores they read, and one micro sweep each through plan → run →
aggregate → figure."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from fabricate import scored_run
from posrnn_cli.analysis.aggregate import aggregate, headline_autoreg, headline_cosine, table_autoreg, table_cosine
from posrnn_cli.analysis.figkit import spread
from posrnn_cli.analysis.plots import draw_all
from posrnn_cli.common.settings.config import RunConfig, TaskConfig
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.stages.experiments import required_columns
from posrnn_cli.common.files.io import read_json
from posrnn_cli.common.results.stats import hierarchical, t975
from posrnn_cli.tasks import build_task

from conftest import ROOT


def autoreg_run(root: Path, seed: int, self_acc: list, truth_acc: list, task: str = "reverse",
                autoregressive=True) -> Path:
    cfg = RunConfig()
    cfg.task.name, cfg.task.vocab_size, cfg.task.length, cfg.task.autoregressive = task, 8, 4, autoregressive
    cfg.model.name, cfg.model.pe, cfg.train.seed = "lstm", "none", seed
    s, t = np.asarray(self_acc, float), np.asarray(truth_acc, float)
    scores = {"token_accuracy": s, "sequence_accuracy": (s == 1).astype(float), "damerau_levenshtein": 4 * (1 - s),
              "truth_feedback_token_accuracy": t, "truth_feedback_sequence_accuracy": (t == 1).astype(float),
              "truth_feedback_damerau_levenshtein": 4 * (1 - t)}
    return scored_run(root / f"{task}-lstm-v8-none-s{seed}", cfg, scores)


def test_the_autoreg_table_holds_both_feedback_modes_per_seed(tmp_path):
    runs = [autoreg_run(tmp_path, 2, [1, 1, 1, 0], [1, 1, 1, 1]),
            autoreg_run(tmp_path, 1, [1, 0, 1, 0], [1, 1, 0.5, 0.5])]
    rows = table_autoreg(runs, n_resamples=200)
    assert [r["feedback"] for r in rows] == ["self", "truth"]
    assert set(rows[0]) >= set(required_columns("autoreg"))
    self_row, truth_row = rows
    assert self_row["seeds"] == truth_row["seeds"] == "1 2"  # the same seeds, so the modes pair by seed
    assert self_row["token_accuracy_by_seed"] == "0.5 0.75" and truth_row["token_accuracy_by_seed"] == "0.75 1"
    assert self_row["token_accuracy"] == pytest.approx(0.625) and truth_row["token_accuracy"] == pytest.approx(0.875)
    assert truth_row["sequence_accuracy_by_seed"] == "0.5 1" and self_row["damerau_levenshtein_by_seed"] == "2 1"
    h = hierarchical([np.array([1, 0, 1, 0.]), np.array([1, 1, 1, 0.])], n_resamples=200)
    assert (self_row["token_accuracy_ci_low"],
            self_row["token_accuracy_ci_high"]) == pytest.approx((h["ci_low"], h["ci_high"]))
    # the figure's (and the verdicts') interval: Student's t over the two seeds, 0.625 ± t(1) · 0.125
    s = spread(self_row, "token_accuracy")
    assert s.kind == "t" and (s.lo, s.hi) == pytest.approx((0.625 - t975(1) * 0.125, 0.625 + t975(1) * 0.125))
    assert headline_autoreg(rows) == {"none": 0.625, "none_truth": 0.875}


def test_the_scorecard_compares_the_feedback_modes_paired_by_seed(tmp_path):
    """An ``ahead`` claim with better = {feedback: truth}, worse = {feedback: self} reads the
    autoreg table's two rows of a cell and pairs them by seed."""
    from posrnn_cli.analysis.scorecard import TableSet
    from posrnn_cli.analysis.scorecard.score import evaluate_claim

    for seed, s, t in ((1, [1, 0, 1, 0], [1, 1, 1, 0]), (2, [0, 0, 1, 0], [1, 1, 0, 1]),
                       (3, [1, 0, 0, 0], [1, 1, 1, 1])):
        autoreg_run(tmp_path / "runs" / "autoreg", seed, s, t)
    aggregate(tmp_path / "runs", tmp_path / "tables", n_resamples=50)
    claim = {"id": "x", "claim": "c", "paper": "p", "tables": ["autoreg"], "regime": {}, "models": ["lstm"],
             "kind": "ahead",
             "params": {"better": {"feedback": "truth"}, "worse": {"feedback": "self"}}}
    (cmp,) = evaluate_claim(claim,
                            TableSet(tmp_path / "tables"))["at_regime"]["models"]["lstm"]["details"]["comparisons"]
    assert cmp["lead"]["seeds"] == [1, 2, 3] and cmp["lead"]["by_seed"] == pytest.approx([0.25, 0.5, 0.75])


def test_the_autoreg_table_refuses_a_run_without_autoregression(tmp_path):
    run = autoreg_run(tmp_path, 1, [1, 0], [1, 1], autoregressive=False)
    with pytest.raises(PosrnnError, match="is not autoregressive"):
        table_autoreg([run], n_resamples=20)


def cosine_run(root: Path, seed: int, cosine: list, q: tuple, dim: int = 8) -> Path:
    cfg = RunConfig()
    cfg.task.name, cfg.task.dim, cfg.model.name, cfg.model.pe, cfg.train.seed = "continuous", dim, "gru", "none", seed
    summary = {f"cosine_q{p}": v for p, v in zip((10, 50, 90), q)}
    return scored_run(root / f"gru-d{dim}-none-s{seed}", cfg, {"cosine": np.asarray(cosine, float)}, summary=summary)


def test_the_cosine_table_holds_each_seeds_mean_and_quantiles(tmp_path):
    runs = [cosine_run(tmp_path, 7, [0.5, 0.7], (0.1, 0.6, 0.9)), cosine_run(tmp_path, 3, [0.2, 0.2], (-0.2, 0.2, 0.5))]
    (row,) = table_cosine(runs, n_resamples=200)
    assert set(row) >= set(required_columns("continuous"))
    assert ((row["dim"], row["seeds"], row["n_seeds"], row["n_sequences"]) == (8, "3 7", 2, 4)
            and "vocab_size" not in row)
    assert row["cosine_by_seed"] == "0.2 0.6" and row["cosine"] == pytest.approx(0.4)
    assert (row["cosine_q10_by_seed"], row["cosine_q50_by_seed"], row["cosine_q90_by_seed"]) == ("-0.2 0.1", "0.2 0.6",
                                                                                                 "0.5 0.9")
    assert row["cosine_q90"] == pytest.approx(0.7)
    s = spread(row, "cosine")  # 0.4 ± t(1) · 0.2
    assert (s.lo, s.hi) == pytest.approx((0.4 - t975(1) * 0.2, 0.4 + t975(1) * 0.2))
    assert headline_cosine([row]) == {"none": 0.4}
    bare = scored_run(tmp_path / "old", RunConfig.from_dict({**RunConfig().to_dict(), "task": {"name": "continuous"}}),
                      {"cosine": np.array([0.5])})
    with pytest.raises(PosrnnError, match="has no cosine_q10"):
        table_cosine([bare], n_resamples=20)


def test_a_continuous_evaluation_reports_the_per_token_cosine_quantiles():
    t = build_task(TaskConfig(name="continuous", dim=3, length=4, n_test=8))
    b = t.sample(5, torch.Generator().manual_seed(0), torch.device("cpu"))
    pred = b.targets + 0.7 * torch.randn(b.targets.shape, generator=torch.Generator().manual_seed(1))
    cos = torch.nn.functional.cosine_similarity(pred, b.targets, dim=-1).flatten().double().numpy()  # 20 tokens
    rep = t.report(pred, b)
    for p in (10, 50, 90):
        assert rep[f"cosine_q{p}"] == pytest.approx(np.percentile(cos, p))
    assert rep["cosine_q10"] < rep["cosine_q50"] < rep["cosine_q90"]


# ---- planning and micro sweeps ------------------------------------------------------------------
TINY = {"length": 3, "hidden": 8, "iterations": 6, "batch": 4, "warmup": 1, "checkpoint_every": 6}


def params_with(tmp_path: Path, sections: dict) -> Path:
    base = yaml.safe_load((ROOT / "params.yaml").read_text())
    profile = {"device": "cpu", "threads": 1, "n_test": 16, **sections}
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({k: base[k] for k in ("task", "model", "train")}
                                     | {"profile": ["t"], "profiles": {"t": profile}}, sort_keys=False))
    return params


def test_the_experiments_plan_their_fixed_keys_and_a_task_per_cell(tmp_path):
    from posrnn_cli.sweep.plan import plan

    cells = [{"task": "reverse", "model": "gru", "vocab": 4}, {"task": "sort", "model": "gru", "vocab": 4}]
    params = params_with(tmp_path, {"autoreg": {"cells": cells, "pe": ["none"], "seeds": [1], **TINY},
                                    "continuous": {"cells": [{"model": "gru", "dim": 4}], "pe": ["none"], "seeds": [1],
                                                   **TINY}})
    jobs = plan(params, "t", ["autoreg", "continuous"], tmp_path / "runs")
    got = [(Path(j.run_dir).name, j.run_config().task.name, j.run_config().task.autoregressive) for j in jobs]
    assert got == [("reverse-gru-v4-none-s1", "reverse", True), ("sort-gru-v4-none-s1", "sort", True),
                   ("gru-d4-none-s1", "continuous", False)]
    assert jobs[2].run_config().task.dim == 4
    for sections, words in (({"autoreg": {"cells": cells, "pe": ["none"], "seeds": [1], "autoregressive": False}},
                             "every autoreg run has task.autoregressive = True, but the profile sets False"),
                            ({"continuous": {"cells": [{"task": "reverse"}], "pe": ["none"], "seeds": [1]}},
                             "every continuous run has task.name = 'continuous', but the profile sets 'reverse'")):
        with pytest.raises(PosrnnError, match=words):
            plan(params_with(tmp_path, sections), "t", list(sections), tmp_path / "runs")


def test_an_empty_grid_plans_sweeps_and_aggregates_nothing(tmp_path, monkeypatch):
    from posrnn_cli.sweep import SweepOptions, run_sweep
    from posrnn_cli.sweep.plan import plan

    monkeypatch.chdir(tmp_path)
    params = params_with(tmp_path, {"autoreg": {"cells": []}, "continuous": {"cells": []}})
    assert plan(params, "t", ["autoreg", "continuous"]) == []
    run_sweep(params, "t", ["autoreg", "continuous"], SweepOptions(workers=1))
    assert aggregate(tmp_path / "runs" / "t", tmp_path / "results" / "tables", n_resamples=20) == {}


@pytest.mark.parametrize("name, section, form", [
    ("autoreg", {"cells": [{"task": "sort", "model": "gru", "vocab": 4}]}, "autoreg"),
    ("continuous", {"cells": [{"model": "gru", "dim": 4}]}, "cosine"),
])
def test_a_micro_sweep_makes_the_table_headline_and_figure(tmp_path, monkeypatch, name, section, form):
    from posrnn_cli.sweep import SweepOptions, run_sweep

    monkeypatch.chdir(tmp_path)
    params = params_with(tmp_path, {name: {**section, "pe": ["none"], "seeds": [1, 2], **TINY}})
    run_sweep(params, "t", [name], SweepOptions(workers=1))
    runs = tmp_path / "runs" / "t" / name
    assert read_json(runs / "sweep.json")["table"] == form
    tables = aggregate(tmp_path / "runs" / "t", tmp_path / "results" / "tables", n_resamples=50)
    rows = tables[name]
    assert set(rows[0]) >= set(required_columns(name)) and all(r["seeds"] == "1 2" for r in rows)
    evals = [read_json(p) for p in sorted(runs.glob("*-s[12]/eval.json"))]  # seeds 1, 2: the table's order
    assert len(evals) == 2
    key = "token_accuracy" if form == "autoreg" else "cosine"
    first = rows[0]
    assert [float(v) for v in first[f"{key}_by_seed"].split()] == pytest.approx([e[key] for e in evals], abs=1e-5)
    if form == "autoreg":
        assert [r["feedback"] for r in rows] == ["self", "truth"]
        assert [float(v) for v in rows[1]["token_accuracy_by_seed"].split()] == pytest.approx(
            [e["truth_feedback_token_accuracy"] for e in evals], abs=1e-5)
    else:
        assert [float(v)
                for v in first["cosine_q50_by_seed"].split()] == pytest.approx([e["cosine_q50"] for e in evals],
                                                                               abs=1e-5)
    (metrics,) = read_json(tmp_path / "results" / "metrics" / f"{name}.json")[name].values()
    assert metrics and all(type(v) in (int, float) for v in metrics.values())
    drawn = draw_all(tmp_path / "results" / "tables", tmp_path / "figs")
    assert len(drawn) == 1 and drawn[0].read_bytes()[:4] == b"\x89PNG"
