"""Invariants of every task: targets, layouts, test grids, held-out sets, reports."""

from __future__ import annotations

import pytest
import torch

from posrnn_cli.common.settings.config import TaskConfig
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.tasks import HeldOut, Task, build_task, hash_rows

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
    assert (set(x[x < 16].unique().tolist()) == set(range(16))
            and set(x[x >= 16].unique().tolist()) == set(range(16, 32)))


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
        (dict(name="copy", delay=-1), "task.delay must be at least 0"),
        (dict(name="continuous", dim=1), r"task.dim must be at least 2, got 1 \(R\^1 holds only two unit vectors"),
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


# every task variant, tiny: (name, TaskConfig overrides); spaces small enough that raw draws hit the test set
VARIANTS = {
    "reverse": dict(name="reverse", vocab_size=3, length=5),
    "sort": dict(name="sort", vocab_size=3, length=5),
    "delayed-add": dict(name="delayed-add", vocab_size=2, length=4),
    "predecessor": dict(name="predecessor", vocab_size=6, length=4),
    "copy": dict(name="copy", vocab_size=3, length=5, delay=2),
    "variable-length": dict(name="reverse", vocab_size=4, length=5, min_length=4),
    "dual-frequency": dict(name="reverse", vocab_size=4, length=8, rarity=0.25, n_test=16),
    "autoregressive": dict(name="sort", vocab_size=3, length=5, autoregressive=True),
    "continuous": dict(name="continuous", dim=3, length=4),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_sampling_is_a_pure_function_of_the_generator(variant):
    t = task(**VARIANTS[variant])
    a, b, c = t.sample(32, gen(5), CPU), t.sample(32, gen(5), CPU), t.sample(32, gen(6), CPU)
    for name, x in a._tensors().items():
        assert torch.equal(x, getattr(b, name)), name
    assert not torch.equal(a.key, c.key)
    assert a.inputs.shape[1] <= t.max_steps and (a.out_index < a.inputs.shape[1]).all()
    if not t.continuous:
        assert 0 <= int(a.inputs.min()) and int(a.inputs.max()) < t.n_input_ids
        assert 0 <= int(a.targets.min()) and int(a.targets.max()) < t.V


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != "continuous"])
def test_training_batches_never_hold_a_test_sequence(variant):
    t = task(**VARIANTS[variant])
    test = t.test_set()
    held = HeldOut(test)
    assert held.contains(t.sample(512, gen(1), CPU)).any()  # raw draws do hit the test set here …
    for seed in range(3):
        assert not held.contains(held.sample(t, 512, gen(seed), CPU)).any()  # … the sampler never lets one through


def test_output_phase_start_per_task():
    assert task(name="reverse", vocab_size=8, length=5).output_start == 5
    assert task(name="copy", vocab_size=8, length=5, delay=7).output_start == 12
    assert task(name="predecessor", vocab_size=8, length=5).output_start == 5
    assert task(name="delayed-add", vocab_size=8, length=5).output_start == 5
    # moves per sequence
    assert task(name="reverse", vocab_size=8, length=5, min_length=3, n_test=8).output_start is None
    for v in VARIANTS.values():
        t = task(**v)
        b = t.sample(4, gen(), CPU)
        if t.output_start is not None:
            assert int(b.out_index.min()) == t.output_start  # the first scored step opens the output phase


def test_dual_frequency_grid_has_the_papers_sixteen_sequences_per_cell():
    """n_test sequences per (target kind, disturbant kind), spread evenly over the L target
    positions: at the paper's n_test = 1,024 and L = 64 that is 16 per (kinds, position)
    cell and 4,096 in all, as in the paper's Fig. 3 caption."""
    t = task(name="reverse", vocab_size=64, length=64, rarity=0.125, n_test=1024)
    g = t.test_set()
    assert len(g) == 4096
    assert torch.equal(torch.bincount(g.group, minlength=4 * 64), torch.full((4 * 64,), 16))


class EchoInput(torch.nn.Module):
    """A fake model: at each read step it predicts the token it is fed there (clamped to V−1)."""

    def __init__(self, V):
        super().__init__()
        self.V = V

    def forward(self, inputs, out_index, query=None):
        return torch.nn.functional.one_hot(inputs.gather(1, out_index).clamp(max=self.V - 1), self.V).float()


@pytest.mark.parametrize("kw",
                         [dict(name="sort", vocab_size=3, length=6),
                          dict(name="reverse", vocab_size=4, length=8, rarity=0.5)])
def test_autoregressive_reports_self_and_ground_truth_feedback(kw):
    """With self-feedback the echo model predicts V−1 (the clamped query) at every step; with the
    ground truth fed back, step j predicts target j−1. The one evaluation path scores both modes
    on the same test sequences, and each must be exactly that."""
    from posrnn_cli.engine.evaluate import evaluate_model

    t = task(**kw, autoregressive=True, n_test=64)
    test = t.test_set()
    m = EchoInput(t.V)
    pred = t.infer(m, test)
    assert (pred == t.V - 1).all()
    mask = test.mask if test.mask is not None else torch.ones_like(test.targets, dtype=torch.bool)
    rep = t.report(pred, test)
    ok = (test.targets == t.V - 1) & mask
    assert rep["self_feedback_token_accuracy"] == pytest.approx(ok.sum().item() / mask.sum().item())
    assert rep["self_feedback_sequence_accuracy"] == pytest.approx((ok | ~mask).all(1).double().mean().item())
    summary, per_seq = evaluate_model(t, m, torch.device("cpu"), batch_size=16, n_resamples=50)
    shifted = torch.cat([torch.full_like(test.targets[:, :1], t.V - 1), test.targets[:, :-1]], 1)
    for prefix, right in (("", ok), ("truth_feedback_", (shifted == test.targets) & mask)):
        per_token = (right.sum(1) / mask.sum(1).clamp_min(1)).double().numpy()
        assert per_seq[f"{prefix}token_accuracy"] == pytest.approx(per_token)
        assert per_seq[f"{prefix}sequence_accuracy"] == pytest.approx((right | ~mask).all(1).double().numpy())
        assert summary[f"{prefix}token_accuracy"] == pytest.approx(per_token.mean())
    assert (0 < summary["truth_feedback_token_accuracy"] < 1
            and summary["token_accuracy"] != summary["truth_feedback_token_accuracy"])


def test_only_an_autoregressive_task_takes_ground_truth_feedback():
    """A task without autoregression scores one mode and refuses the other in one line."""
    from posrnn_cli.engine.evaluate import evaluate_model

    t = task(name="reverse", vocab_size=4, length=5, n_test=16)
    assert (t.feedback_modes == ("self",)
            and task(name="sort", vocab_size=4, length=5, autoregressive=True).feedback_modes == ("self", "truth"))
    with pytest.raises(PosrnnError, match="feedback 'truth' is not defined for task 'reverse'; use one of: self"):
        t.infer(EchoInput(4), t.test_set(), "truth")
    _, per_seq = evaluate_model(t, EchoInput(4), torch.device("cpu"), batch_size=8, n_resamples=20)
    assert not any(k.startswith("truth_") for k in per_seq)


class PlusOne(torch.nn.Module):
    """A stand-in model: at each read step it predicts (the token fed at that step + 1) mod V."""

    def __init__(self, V: int):
        super().__init__()
        self.V = V

    def forward(self, inputs, out_index=None, query=None):
        fed = inputs.gather(1, out_index)  # (B K)
        return torch.nn.functional.one_hot((fed + 1) % self.V, self.V).float()


@pytest.mark.parametrize("name", ["reverse", "sort"])
def test_autoregressive_inference_feeds_back_predictions_and_training_the_targets(name):
    """Self-feedback: output step j is fed the prediction of step j−1, so the stand-in model
    counts 1, 2, 3, … from the query whatever the input; teacher forcing feeds the targets."""
    V, L = 7, 5
    task = build_task(TaskConfig(name=name, vocab_size=V, length=L, autoregressive=True, n_test=8))
    b = task.sample(6, torch.Generator().manual_seed(0), torch.device("cpu"))
    model = PlusOne(V)
    counted = (torch.arange(1, L + 1) + V) % V  # the query id V, then each prediction, each + 1
    assert torch.equal(task.infer(model, b), counted.expand(6, L))
    forced = torch.cat([torch.full((6, 1), V), b.targets[:, :-1]], 1)  # the query, then the targets
    assert torch.equal(Task.infer(task, model, b), (forced + 1) % V)
