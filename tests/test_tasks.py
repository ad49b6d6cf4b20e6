"""Invariants of every task, PE form and control (issue 3)."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from posrnn_cli.cli import app
from posrnn_cli.config import RunConfig, TaskConfig, resolve_config
from posrnn_cli.errors import PosrnnError
from posrnn_cli.models import PE_FORMS, build_model, count_parameters
from posrnn_cli.tasks import TASKS, HeldOut, build_task, hash_rows

CPU = torch.device("cpu")


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def task(**kw):
    kw.setdefault("n_test", 64)
    return build_task(TaskConfig(**kw))


def test_sort_target_is_the_sorted_input():
    t = task(name="sort", vocab_size=5, length=9)
    b = t.sample(64, gen(), CPU)
    x = b.inputs[:, :9]
    assert torch.equal(b.targets, x.sort(1).values)
    assert (b.targets[:, 1:] >= b.targets[:, :-1]).all()
    rep = t.report(b.targets, b)
    assert rep["non_decreasing_share"] == 1.0
    assert t.report(b.targets.flip(1), b)["non_decreasing_share"] < 0.1


def test_delayed_add_targets_are_correct_mod_v():
    V, L = 7, 6
    b = task(name="delayed-add", vocab_size=V, length=L).sample(64, gen(), CPU)
    x, y = b.inputs[:, :L], b.inputs[:, L:]
    for j in range(L):  # 0-based output step j: (x_{L−j} + y_j) mod V
        assert torch.equal(b.targets[:, j], (x[:, L - 1 - j] + y[:, j]) % V)
    assert (b.inputs[:, L:] < V).all()  # fresh tokens, not the query
    assert torch.equal(b.key, torch.cat([x, y], 1))


def test_predecessor_inputs_are_distinct_and_target_is_the_predecessor():
    V, L = 12, 8
    b = task(name="predecessor", vocab_size=V, length=L).sample(256, gen(), CPU)
    x, probe = b.inputs[:, :L], b.inputs[:, L]
    assert all(len(set(r)) == L for r in x.tolist())
    for row, p, t in zip(x.tolist(), probe.tolist(), b.targets[:, 0].tolist()):
        k = row.index(p)
        assert k >= 1 and row[k - 1] == t
    assert (b.out_index == L).all() and b.targets.shape == (256, 1)
    ks = {row.index(p) for row, p in zip(x.tolist(), probe.tolist())}
    assert ks == set(range(1, L))  # every x_2…x_L gets re-presented


def test_copy_has_blank_hold_phase_then_queries():
    V, L, T = 8, 4, 6
    t = task(name="copy", vocab_size=V, length=L, delay=T)
    b = t.sample(16, gen(), CPU)
    assert b.inputs.shape == (16, 2 * L + T) and t.max_steps == 2 * L + T and t.n_input_ids == V + 2
    assert (b.inputs[:, L : L + T] == V + 1).all() and (b.inputs[:, L + T :] == V).all()
    assert torch.equal(b.targets, b.inputs[:, :L])
    assert torch.equal(b.out_index[0], torch.arange(L + T, 2 * L + T))


def test_variable_length_layout_padding_and_targets():
    t = task(name="reverse", vocab_size=9, length=6, min_length=2, n_test=32)
    b = t.sample(200, gen(), CPU)
    assert set(b.lengths.tolist()) == set(range(2, 7))
    for i in range(40):
        l = int(b.lengths[i])
        x = b.inputs[i, :l]
        assert (b.inputs[i, l : 2 * l] == 9).all() and (b.inputs[i, 2 * l :] == 9).all()
        assert torch.equal(b.targets[i, :l], x.flip(0))
        assert b.mask[i].tolist() == [True] * l + [False] * (6 - l)
        assert torch.equal(b.out_index[i, :l], torch.arange(l, 2 * l))  # positions never restarted
    test = t.test_set()
    assert len(test) == 5 * 32 and all((test.lengths == l).sum() == 32 for l in range(2, 7))
    rep = t.report(test.targets, test)  # perfect predictions
    assert rep["accuracy_by_length"] == {l: 1.0 for l in range(2, 7)}


def test_dual_frequency_sampler_rarity():
    V = 32
    t = task(name="reverse", vocab_size=V, length=8, rarity=0.125)
    x = t.sample(4000, gen(), CPU).inputs[:, :8]
    rare_share = (x >= V // 2).double().mean().item()
    assert abs(rare_share - 0.125) < 0.01
    assert set(x[x < 16].unique().tolist()) == set(range(16)) and set(x[x >= 16].unique().tolist()) == set(range(16, 32))


def test_dual_frequency_grid_one_target_kind_token_at_the_target_position():
    V, L = 16, 6
    t = task(name="reverse", vocab_size=V, length=L, rarity=0.125, n_test=60)
    g = t.test_set()
    half = V // 2
    kinds = ("F", "R")
    seen = set()
    for i in range(len(g)):
        cell, pos = divmod(int(g.group[i]), L)
        tk, dk = divmod(cell, 2)
        x = g.inputs[i, :L]
        is_rare = (x >= half).long()
        assert is_rare[pos] == tk  # the target position holds a target-kind token
        others = torch.cat([is_rare[:pos], is_rare[pos + 1 :]])
        assert (others == dk).all()  # every other position a disturbant-kind token
        assert g.mask[i].sum() == 1 and g.mask[i, L - 1 - pos]  # scored only where x_pos is recalled
        assert g.targets[i, L - 1 - pos] == x[pos]
        seen.add((kinds[tk], kinds[dk], pos))
    assert len(seen) == 4 * L
    rep = t.report(g.targets, g)
    assert rep["dual_frequency"] == {"F/F": 1.0, "F/R": 1.0, "R/F": 1.0, "R/R": 1.0}
    assert len(rep["dual_frequency_by_position"]["F/R"]) == L


def test_dual_frequency_grid_is_held_out_of_training():
    t = task(name="reverse", vocab_size=4, length=8, rarity=0.5, n_test=64)
    g = t.test_set()
    held = HeldOut(g)
    grid_rows = {tuple(r) for r in g.key.tolist()}
    for _ in range(10):
        b = held.sample(t, 256, gen(), CPU)
        assert not any(tuple(r) in grid_rows for r in b.key.tolist())


def test_continuous_tokens_are_unit_vectors_and_loss_is_one_minus_cosine():
    t = task(name="continuous", dim=5, length=4)
    b = t.sample(8, gen(), CPU)
    x = b.inputs[:, :4]
    assert torch.allclose(x.norm(dim=-1), torch.ones(8, 4))
    assert b.query[:, 4:].all() and not b.query[:, :4].any()
    assert torch.allclose(b.targets, x.flip(1))
    assert t.loss(b.targets, b).item() == pytest.approx(0.0, abs=1e-6)
    assert t.loss(-b.targets, b).item() == pytest.approx(2.0, abs=1e-6)
    rep = t.report(b.targets, b)
    assert rep["cosine_quartiles"]["median"] == pytest.approx(1.0, abs=1e-6)


def test_autoregressive_feeds_previous_targets():
    t = task(name="reverse", vocab_size=9, length=5, autoregressive=True)
    b = t.sample(8, gen(), CPU)
    assert (b.inputs[:, 5] == 9).all()  # first output step: the query
    assert torch.equal(b.inputs[:, 6:], b.targets[:, :-1])  # then the previous target


def test_autoregressive_self_feedback_inference():
    """A model that always predicts its last input token: with self-feedback each step sees
    the previous prediction, so the prediction chain is constant after the first step."""

    class EchoLast(torch.nn.Module):
        def forward(self, inputs, out_index, query=None):
            tok = inputs.gather(1, out_index)  # the input at the output step
            return torch.nn.functional.one_hot(tok.clamp(max=8), 10).float()

    t = task(name="reverse", vocab_size=9, length=4, autoregressive=True)
    b = t.sample(4, gen(), CPU)
    pred = t.infer(EchoLast(), b)
    assert (pred[:, 0] == 8).all() and (pred == 8).all()  # query 9 clamps to 8, then fed back forever


@pytest.mark.parametrize(
    "kw, words",
    [
        (dict(name="copy", autoregressive=True), "--autoregressive is not defined"),
        (dict(name="sort", min_length=3), "not defined for task 'sort'"),
        (dict(name="reverse", rarity=1.5), "strictly between 0 and 1"),
        (dict(name="reverse", rarity=0.2, vocab_size=15), "even --vocab-size"),
        (dict(name="reverse", min_length=70), "--min-length must lie"),
        (dict(name="predecessor", vocab_size=4, length=6), "must not exceed"),
        (dict(name="copy", delay=-1), "--delay"),
        (dict(name="continuous", dim=0), "--dim"),
    ],
)
def test_bad_task_combinations(kw, words):
    with pytest.raises(PosrnnError, match=words):
        task(**{"vocab_size": 16, "length": 8, **kw})


def test_every_task_draws_distinct_held_out_sets():
    for name, kw in [("reverse", {}), ("sort", {}), ("delayed-add", {}), ("predecessor", {}), ("copy", {"delay": 2}),
                     ("continuous", {"dim": 3})]:
        t = task(name=name, vocab_size=8, length=5, **kw)
        test = t.test_set()
        assert len(torch.unique(hash_rows(test.key))) == len(test) == 64, name


# ---- PE forms and the double-vanilla control --------------------------------------------------
def model_for(pe, **over):
    sets = {"task.vocab_size": 10, "task.length": 6, "model.name": "gru", "model.hidden_size": 16, "model.pe": pe}
    sets.update(over)
    cfg = resolve_config(options=sets)
    torch.manual_seed(0)
    return build_model(cfg, build_task(cfg.task)), cfg


def test_double_vanilla_has_the_pe_models_parameter_count():
    dummy, _ = model_for("dummy")
    pe, _ = model_for("sinusoidal")
    vanilla, _ = model_for("none")
    assert count_parameters(dummy) == count_parameters(pe) > count_parameters(vanilla)
    x = torch.randint(10, (2, 12))
    e = dummy.encoder(x)
    assert torch.equal(e[..., :16], e[..., 16:])  # the embedding twice, no position information


def test_random_pe_rows_are_unit_norm_fixed_and_saved():
    m, _ = model_for("random")
    table = m.encoder.pe_table
    assert torch.allclose(table.norm(dim=1), torch.ones(len(table)), atol=1e-6)
    assert "encoder.pe_table" in m.state_dict() and not any(p is table for p in m.parameters())


def test_learnable_pe_is_trained():
    m, _ = model_for("learnable")
    assert any(p is m.encoder.pe_table for p in m.parameters())
    assert m.encoder.pe_table.shape == (12, 16)


def test_position_forms_tell_positions_apart_and_controls_do_not():
    for pe in PE_FORMS:
        m, _ = model_for(pe)
        x = torch.full((1, 12), 3)  # the same token at every step
        e = m.encoder(x)[0]
        distinct = len({tuple(r) for r in e.round(decimals=5).tolist()})
        assert (distinct == 12) == PE_FORMS[pe].has_positions, pe


# ---- every task trains and evaluates from the CLI ------------------------------------------------
@pytest.mark.parametrize(
    "args",
    [
        ["--task", "sort", "--autoregressive"],
        ["--task", "reverse", "--min-length", "3", "--max-length", "5"],
        ["--task", "reverse", "--rarity", "0.125", "--vocab-size", "16"],
        ["--task", "delayed-add"],
        ["--task", "predecessor"],
        ["--task", "copy", "--delay", "3"],
        ["--task", "continuous", "--dim", "8"],
        ["--task", "reverse", "--pe", "random"],
        ["--task", "reverse", "--pe", "learnable"],
        ["--task", "reverse", "--pe", "dummy"],
        ["--task", "reverse", "--model", "s4d"],
        ["--task", "reverse", "--model", "transformer", "--layers", "2", "--heads", "2"],
        ["--task", "reverse", "--model", "lstm", "--pe-mode", "add"],
    ],
)
def test_cli_trains_and_evaluates_every_task(args, tmp_path):
    runner = CliRunner()
    base = ["--model", "gru", "--vocab-size", "8", "--length", "5", "--hidden-size", "16", "--iterations", "12",
            "--batch-size", "8", "--warmup", "2", "--device", "cpu", "--set", "task.n_test=64"]
    if "--vocab-size" in args or "continuous" in args:
        base = [a for i, a in enumerate(base) if a != "--vocab-size" and base[i - 1] != "--vocab-size"]
    r = runner.invoke(app, ["train", *base, *args, "--out", str(tmp_path / "r"), "--json"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["eval", str(tmp_path / "r"), "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["step"] == 12
    if "continuous" in args:
        assert "cosine_quartiles" in res
    else:
        assert 0 <= res["token_accuracy"] <= 1


def test_train_help_lists_every_task_model_and_pe():
    r = CliRunner().invoke(app, ["train", "--help"], env={"COLUMNS": "400"})
    for name in [*TASKS, *PE_FORMS, "gru", "lstm", "elman", "s4d", "transformer"]:
        assert f"{name}:" in r.output, name
