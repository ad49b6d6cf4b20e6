"""Gradient stability: the metric, the explicit cells, the Jacobians, the command."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from posrnn_cli.cli import app
from posrnn_cli.common.config import resolve_config
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.engine.stability import analyze, jacobians, make_triplets, stability
from posrnn_cli.engine.train import train

from posrnn_cli.models.rnn import RNN_CLASSES, RecurrentCore

KINDS = RNN_CLASSES


def test_identical_jacobians_give_exactly_one_and_negated_minus_one():
    J = torch.randn(5, 7, 9, dtype=torch.float64)
    assert torch.equal(stability(J, J), torch.ones(5, dtype=torch.float64))
    assert torch.allclose(stability(J, -J), -torch.ones(5, dtype=torch.float64))


def test_metric_equals_a_hand_computation():
    A = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]]])  # rows a1, a2
    B = torch.tensor([[[1.0, 1.0, 0.0], [0.0, 0.0, 3.0]]])  # rows b1, b2
    # Σ⟨a_i,b_i⟩ = 1 + 0 = 1; Σ‖a_i‖‖b_i‖ = 1·√2 + 2·3 = √2 + 6
    assert stability(A, B).item() == pytest.approx(1 / (2**0.5 + 6))
    Z = torch.zeros(1, 2, 3)
    assert stability(A, Z).item() == 0.0  # zero rows count as zero; 0/0 scores 0
    assert stability(torch.cat([A, Z], 1), torch.cat([A, Z], 1)).item() == pytest.approx(1.0)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_explicit_cells_reproduce_the_modules_forward(kind):
    torch.manual_seed(0)
    core = RecurrentCore(kind, 5, 6).double()
    x = torch.randn(3, 7, 5, dtype=torch.float64)
    ref = core(x)  # (B T H): the module's own forward (cuDNN on GPU)
    z1 = core.initial_state(x[:, 0])
    assert torch.allclose(z1[..., :6], ref[:, 0], atol=1e-12)
    for t in range(1, 7):  # every later step, through the explicit cells
        assert torch.allclose(core.output_from_state(z1, x[:, 1 : t + 1]), ref[:, t], atol=1e-12)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_jacobians_match_autograd_functional(kind):
    torch.manual_seed(1)
    core = RecurrentCore(kind, 4, 5).double()
    x = torch.randn(3, 6, 4, dtype=torch.float64)
    J = jacobians(core, x, chunk_size=2)
    Dz = 10 if kind == "lstm" else 5
    assert J.shape == (3, 5, Dz)
    for b in range(3):
        z1 = core.initial_state(x[b : b + 1, 0])[0]
        ref = torch.autograd.functional.jacobian(lambda z: core.output_from_state(z[None], x[b : b + 1, 1:])[0], z1)
        assert torch.allclose(J[b], ref, atol=1e-10)


class LinearCore(nn.Module):
    """h_t = W h_{t−1} + U x_t: ∂h_T/∂h_1 = W^(T−1) in closed form (via the generic hooks)."""

    def __init__(self, D, H):
        super().__init__()
        self.W = nn.Parameter(torch.randn(H, H, dtype=torch.float64) / H**0.5)
        self.U = nn.Parameter(torch.randn(H, D, dtype=torch.float64))

    def initial_state(self, x1):
        return x1 @ self.U.T

    def output_from_state(self, z1, x_rest):
        h = z1
        for t in range(x_rest.shape[1]):
            h = h @ self.W.T + x_rest[:, t] @ self.U.T
        return h


def test_linear_rnn_jacobian_is_the_matrix_power():
    torch.manual_seed(2)
    core = LinearCore(3, 4)
    x = torch.randn(5, 7, 3, dtype=torch.float64)
    J = jacobians(core, x)
    expected = torch.linalg.matrix_power(core.W.detach(), 6)
    for b in range(5):
        assert torch.allclose(J[b], expected, atol=1e-12)
    assert torch.allclose(stability(J[:1], J[1:2]), torch.ones(1, dtype=torch.float64))  # input-independent


def test_chunk_size_does_not_change_the_result():
    torch.manual_seed(3)
    core = RecurrentCore("gru", 4, 6).double()
    x = torch.randn(7, 5, 4, dtype=torch.float64)
    assert torch.allclose(jacobians(core, x, chunk_size=1), jacobians(core, x, chunk_size=7))


def test_triplets_share_exactly_the_intended_parts():
    tri = make_triplets(50, 6, torch.Generator().manual_seed(0), (0, 8), (8, 16))
    assert torch.equal(tri.xs[:, 0], tri.xs2[:, 0]) and (tri.xs[:, 0] != tri.x2s[:, 0]).all()
    assert torch.equal(tri.xs[:, 1:], tri.x2s[:, 1:])
    assert (tri.xs[:, 0] < 8).all() and (tri.x2s[:, 0] < 8).all() and (tri.xs[:, 1:] >= 8).all()


def small_run(tmp_path, **over):
    sets = {"task.vocab_size": 8, "task.length": 5, "task.n_test": 64, "model.name": "lstm", "model.hidden_size": 8,
            "train.iterations": 20, "train.batch_size": 8, "train.warmup": 2, "train.checkpoint_every": 10,
            "train.device": "cpu"}
    sets.update(over)
    train(resolve_config(options=sets), tmp_path / "run", progress=False)
    return tmp_path / "run"


def test_cli_stability_over_checkpoints_of_a_dual_frequency_run(tmp_path):
    run = small_run(tmp_path, **{"task.rarity": 0.25})
    r = CliRunner().invoke(app, ["stability", str(run), "--triplets", "16", "--device", "cpu", "--plot", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert len(rows) == 2 * 4 * 2  # checkpoints × (F/R)² × pairs
    assert {r["condition"] for r in rows} == {"F/F", "F/R", "R/F", "R/R"}
    assert all(-1 <= r["stability"] <= 1 and r["ci_low"] <= r["stability"] <= r["ci_high"] for r in rows)
    with open(run / "stability.csv") as f:
        assert len(list(csv.DictReader(f))) == 16
    assert (run / "stability.png").stat().st_size > 1000


def test_stability_refuses_runs_it_cannot_analyse(tmp_path):
    run = small_run(tmp_path, **{"task.name": "sort"})
    with pytest.raises(PosrnnError, match="fixed-length reverse"):
        analyze(run, n_triplets=4, device="cpu")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PosrnnError, match="no checkpoints"):
        analyze(tmp_path / "empty", device="cpu")
    r = CliRunner().invoke(app, ["stability", str(run), "--device", "cpu"])
    assert r.exit_code == 1 and "fixed-length reverse" in r.output
    assert not (run / "stability.csv").exists()


def test_stability_of_an_s4d_run_uses_its_recurrent_view(tmp_path):
    run = small_run(tmp_path, **{"model.name": "s4d", "model.state_size": 4})
    rows = analyze(run, n_triplets=8, device="cpu", n_resamples=200)
    assert len(rows) == 2 * 2 and all(-1 <= r["stability"] <= 1 for r in rows)


def test_stability_reads_only_the_checkpoints_of_the_schedule(tmp_path, monkeypatch):
    """A checkpoint taken for the wall clock (train.checkpoint_minutes, a runtime key) is no point
    of the curve, even when a run kept it."""
    from posrnn_cli.engine import train as train_mod
    from posrnn_cli.engine.checkpoint import list_checkpoints
    from posrnn_cli.engine.stability import scheduled_checkpoints, stability_values

    monkeypatch.setattr(train_mod, "drop_unscheduled", lambda *a: 0)  # a run trained before they were removed
    clock = iter(range(0, 10**6, 60))
    monkeypatch.setattr(train_mod.time, "monotonic", lambda: float(next(clock)))
    run = small_run(tmp_path, **{"train.iterations": 12, "train.checkpoint_every": 5, "train.checkpoint_minutes": 1})
    monkeypatch.undo()
    assert [s for s, _ in list_checkpoints(run)] == list(range(1, 13))
    assert [s for s, _ in scheduled_checkpoints(run)] == [5, 10, 12]
    assert sorted({s for s, *_ in stability_values(run, n_triplets=4, device="cpu")}) == [5, 10, 12]
