"""Multi-query associative recall (tasks/mqar.py): the layout of a sample, the power-law placement
of the queries, the settings refused in one line, every command on a tiny GRU, and a tiny GRU
recalling above both floors (chance, and what position alone reaches), a guard that a model
guessing from position fails."""

from __future__ import annotations

import csv
import json
import re

import pytest
import torch
from typer.testing import CliRunner

from posrnn_cli.analysis.aggregate import aggregate
from posrnn_cli.cli import app, run
from posrnn_cli.common.settings.config import RunConfig, TaskConfig
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.sweep import SweepOptions, run_sweep
from posrnn_cli.tasks import HeldOut, MQARTask, build_task, hash_rows

from conftest import tiny_train
from fabricate import scratch

runner = CliRunner()
CPU = torch.device("cpu")


def mqar(V=32, L=24, P=4, n_test=64) -> MQARTask:
    return build_task(TaskConfig(name="mqar", vocab_size=V, length=L, pairs=P, n_test=n_test))


def draw(task, n, seed=0):
    return task.sample(n, torch.Generator().manual_seed(seed), CPU)


# ---- the layout -----------------------------------------------------------------------------
def test_pairs_then_each_key_asked_once_and_its_value_is_the_target():
    V, L, P, n = 32, 24, 4, 500
    task = mqar(V, L, P)
    b = draw(task, n)
    assert b.inputs.shape == (n, L) and b.targets.shape == b.out_index.shape == (n, P)
    assert (task.max_steps, task.output_start, task.n_input_ids, task.n_outputs) == (L, 2 * P, V + 1, V)
    keys, values = b.inputs[:, 0:2 * P:2], b.inputs[:, 1:2 * P:2]
    assert ((1 <= keys) & (keys < V // 2)).all() and ((V // 2 <= values) & (values < V)).all()
    for row in range(n):
        assert len(set(keys[row].tolist())) == P and len(set(values[row].tolist())) == P
        at = b.out_index[row]
        assert (at[1:] > at[:-1]).all(), "read in time order, each step once"
        assert ((at >= 2 * P) & (at < L) & ((at - 2 * P) % 2 == 0)).all(), "queries on the region's even slots"
        asked = b.inputs[row, at]
        assert sorted(asked.tolist()) == sorted(keys[row].tolist()), "every key asked exactly once"
        value_of = dict(zip(keys[row].tolist(), values[row].tolist()))
        assert b.targets[row].tolist() == [value_of[k] for k in asked.tolist()]
    # the other steps of the query region hold random ids of the whole vocabulary
    filler = torch.ones(n, L, dtype=torch.bool)
    filler[:, :2 * P] = False
    filler.scatter_(1, b.out_index, False)
    ids = b.inputs[filler]
    assert ids.min() == 0 and ids.max() == V - 1 and len(ids.unique()) == V


def test_the_placement_is_seeded_and_follows_the_power_law_over_the_whole_region():
    task = mqar(V=64, L=44, P=4)  # S = 18 slots
    a, b, c = draw(task, 4000, seed=3), draw(task, 4000, seed=3), draw(task, 4000, seed=4)
    assert all(torch.equal(x, y) for x, y in ((a.inputs, b.inputs), (a.out_index, b.out_index), (a.targets, b.targets)))
    assert not torch.equal(a.out_index, c.out_index)
    slot = (a.out_index - 2 * task.P) // 2  # (B P)
    counts = torch.bincount(slot.flatten(), minlength=task.slots)
    assert len(counts) == task.slots and (counts > 0).all(), "every slot of the region is used"
    assert counts[0] > counts[task.slots // 2] > 0 and counts[0] > 4 * counts[-1], "mostly soon after the pairs"
    # the first pair's key takes the first slot drawn: P(slot i) = w_i / Σw exactly
    first = task.draw_slots(20_000, torch.Generator().manual_seed(0), CPU)[:, 0]
    w = task.slot_weights(CPU)
    freq = torch.bincount(first, minlength=task.slots).double() / len(first)
    assert torch.allclose(freq, w / w.sum(), atol=0.012), (freq, w / w.sum())


def test_the_test_set_is_distinct_and_never_trained_on():
    task = mqar(V=10, L=8, P=2, n_test=256)
    test = task.test_set()
    assert len(hash_rows(test.key).unique()) == 256
    held = HeldOut(test)
    b = held.sample(task, 2000, torch.Generator().manual_seed(1), CPU)
    assert not held.contains(b).any()
    assert held.contains(test).all()


# ---- bad settings: one line, the fix named, nothing written ------------------------------------
@pytest.mark.parametrize("opts, words", [
    ({"vocab_size": 15}, "--vocab-size must be even"),
    ({"vocab_size": 16, "pairs": 8}, "raise --vocab-size to at least 18 or lower --pairs"),
    ({"length": 15, "pairs": 2}, "even --length of at least 4·pairs = 8"),
    ({"length": 12, "pairs": 4}, "set --length 16 or lower --pairs"),
    ({"pairs": 0}, "task.pairs must be at least 1"),
    ({"pairs": None}, "mqar needs --pairs P"),
    ({"task": "reverse"}, "--pairs (key-value pairs) is not defined for task 'reverse'; drop it"),
])
def test_impossible_settings_are_refused_with_one_line(opts, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    base = {"task": "mqar", "vocab_size": 32, "length": 16, "pairs": 2, **opts}
    with pytest.raises(SystemExit) as e:
        run(["train", *tiny_train(**base), "--out", "x"])
    captured = capsys.readouterr()
    assert e.value.code == 1
    assert captured.err.startswith("error: ") and words in captured.err, captured.err
    assert len(captured.err.strip().splitlines()) == 1 and "Traceback" not in captured.err + captured.out
    assert not (tmp_path / "x").exists()
    with pytest.raises(PosrnnError, match=re.escape(words)):
        build_task(TaskConfig(name=base["task"], **{k: v for k, v in base.items() if k != "task"}))


# ---- every command ------------------------------------------------------------------------------
MQAR = {"task": "mqar", "vocab_size": 16, "length": 12, "pairs": 3}


def one_line_refusal(result, words):
    assert result.exit_code == 1 and words in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_train_eval_and_the_refusing_commands_on_a_tiny_gru(tmp_path):
    out = tmp_path / "run"
    r = runner.invoke(app, ["train", *tiny_train(**MQAR, pe="phase"), "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["finished"]
    r = runner.invoke(app, ["eval", str(out), "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["n_test"] == 32 and 0 <= res["token_accuracy"] <= 1
    one_line_refusal(runner.invoke(app, ["stability", str(out), "--triplets", "4", "--device", "cpu"]),
                     "stability analysis is defined for fixed-length reverse runs")
    one_line_refusal(runner.invoke(app,
                                   ["extend-vocab", str(out), "--extra-vocab", "4", "--out", str(tmp_path / "ext")]),
                     "vocabulary extension is defined for the fixed-length reverse task")
    assert not (tmp_path / "ext").exists()
    # bench takes no --task: a task set otherwise is refused
    bench = ["bench", "--model", "gru", "--vocab-size", "16", "--length", "12", "--hidden-size", "8", "--batch-size",
             "8",
             "--device", "cpu", "--iters", "1", "--set", "task.name=mqar", "--set", "task.pairs=3"]
    one_line_refusal(runner.invoke(app, bench), "posrnn bench measures the paper's fixed-length reverse task")


def test_a_sweep_trains_an_mqar_cell_and_its_table_names_the_pairs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    grid = {"cells": [{"pairs": 4, "vocab": 256}], "model": "gru", "pe": ["sinusoidal"], "seeds": [1],
            "length": 32, "hidden": 8, "iterations": 6, "batch": 8, "warmup": 1, "checkpoint_every": 6}
    # the experiment fixes the task
    out = run_sweep(scratch(tmp_path, mqar=grid), "t", ["mqar"], SweepOptions(workers=1))
    assert [o.status for o in out] == ["done"]
    runs = sorted(p.parent.name for p in (tmp_path / "runs" / "t" / "mqar").glob("*/config.yaml"))
    assert runs == ["p4-v256-sinusoidal-s1"]
    aggregate(tmp_path / "runs" / "t", tmp_path / "tables", n_resamples=20)
    with open(tmp_path / "tables" / "mqar.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["task"], r["pairs"], r["vocab_size"], r["length"]) for r in rows] == [("mqar", "4", "256", "32")]


# ---- it can be learnt --------------------------------------------------------------------------
def recall_above_baselines(acc: float, sequences: int, task: MQARTask) -> bool:
    """Recall shown: the token accuracy's lower 95% bound lies above both floors of the task
    (``tasks.floors``): chance, a guess among the P values in context, and what position alone
    reaches. The bound counts sequences, not queries: a sequence's queries rise and fall together
    (at L = 4P one slot drawn out of order puts two answers wrong)."""
    low = acc - 1.96 * (acc * (1 - acc) / sequences) ** 0.5
    return low > max(task.chance_line, task.position_line)


def position_guess(task: MQARTask, batch) -> torch.Tensor:
    """(B P) what a model that reads only each query's step answers: the value of the pair most
    likely asked at that slot (``floors.mqar_slot_probs``), copied from the context."""
    from posrnn_cli.tasks import floors

    q = torch.tensor(floors.mqar_slot_probs(task.slots, task.P))  # (S P)
    pair = q.argmax(dim=1)[(batch.out_index - 2 * task.P) // 2]  # (B P): the likeliest pair per query slot
    return batch.inputs.gather(1, 2 * pair + 1)


def test_a_model_that_only_guesses_from_position_shows_no_recall():
    """The guard the learning test applies fails on a model that reads only the step of each
    query: it reaches the position line (0.665 at P = 2, L = 8), not above it."""
    task = mqar(V=10, L=8, P=2)
    n = 4096
    test = draw(task, n, seed=1)
    acc = (position_guess(task, test) == test.targets).double().mean().item()
    assert abs(acc - task.position_line) < 0.03  # it does reach the line
    assert acc > task.chance_line  # above chance: the old 3/16 bar would pass it
    assert not recall_above_baselines(acc, n, task)
    # a guess among the values in context fails too
    gen = torch.Generator().manual_seed(0)
    guess = test.inputs[:, 1:2 * task.P:2].gather(1, torch.randint(task.P, test.targets.shape, generator=gen))
    assert not recall_above_baselines((guess == test.targets).double().mean().item(), n, task)


def test_a_tiny_gru_with_pe_learns_it_above_chance(tmp_path):
    """300 steps of a GRU (H 32) on V 10, L 8, P 2 (V > L, as the Zoology harness asks) recall
    above both floors: chance (a guess among the 2 values in context, 0.5) and the position line
    (0.665); it reaches about 0.78."""
    from posrnn_cli.engine.evaluate import evaluate
    from posrnn_cli.engine.train import train

    cfg = RunConfig()
    cfg.task.name, cfg.task.vocab_size, cfg.task.length, cfg.task.pairs, cfg.task.n_test = "mqar", 10, 8, 2, 256
    cfg.model.name, cfg.model.hidden_size, cfg.model.pe = "gru", 32, "sinusoidal"
    t = cfg.train
    t.iterations, t.batch_size, t.lr, t.device, t.threads, t.checkpoint_every = 300, 64, 1e-2, "cpu", 1, 300
    train(cfg, tmp_path / "run", progress=False)
    acc = evaluate(tmp_path / "run", device="cpu", n_resamples=100)["token_accuracy"]
    assert recall_above_baselines(acc, cfg.task.n_test, build_task(cfg.task)), acc


# ---- runs recorded before task.pairs existed ---------------------------------------------------
def test_a_config_without_task_pairs_keeps_its_digest_and_a_set_one_changes_it():
    """A run's config.yaml from before the key (read back with the default filled in) proves the
    scores recorded under the digest of the config as it was written; only a set value counts."""
    from posrnn_cli.common.settings.config import config_digest

    now = RunConfig().to_dict()
    before = {s: {k: v for k, v in sec.items() if f"{s}.{k}" != "task.pairs"} for s, sec in now.items()}
    assert config_digest(RunConfig.from_dict(before).to_dict()) == config_digest(before)
    now["task"]["pairs"] = 8
    assert config_digest(now) != config_digest(before)
