"""Gradient stability: the metric, the explicit cells, the Jacobians, the command."""

from __future__ import annotations

import csv
import json

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from posrnn_cli.cli import app
from posrnn_cli.common.settings.config import resolve_config
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.engine.stability import analyze, jacobians, make_triplets, stability
from posrnn_cli.engine.train import train
from posrnn_cli.models import CORES, build_model
from posrnn_cli.models.rnn import RNN_CLASSES, RecurrentCore
from posrnn_cli.tasks import build_task

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

    def state_after(self, x_prefix):
        return self.output_from_state(self.initial_state(x_prefix[:, 0]), x_prefix[:, 1:])

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


def test_stability_of_a_core_at_one_by_construction_says_so(tmp_path):
    run = small_run(tmp_path,
                    **{"model.name": "mingru", "train.iterations": 4, "train.checkpoint_every": 4, "train.warmup": 1})
    r = CliRunner().invoke(app, ["stability", str(run), "--triplets", "4", "--device", "cpu"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "mingru's stability is 1 for every pair by construction" in r.output, r.output
    assert "skipped" not in r.output


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
    from posrnn_cli.common.files.rundir import list_checkpoints
    from posrnn_cli.engine.stability import scheduled_checkpoints, stability_values

    monkeypatch.setattr(train_mod, "drop_unscheduled", lambda *a: 0)  # a run trained before they were removed
    clock = iter(range(0, 10**6, 60))
    monkeypatch.setattr(train_mod.time, "monotonic", lambda: float(next(clock)))
    run = small_run(tmp_path, **{"train.iterations": 12, "train.checkpoint_every": 5, "train.checkpoint_minutes": 1})
    monkeypatch.undo()
    assert [s for s, _ in list_checkpoints(run)] == list(range(1, 13))
    assert [s for s, _ in scheduled_checkpoints(run)] == [5, 10, 12]
    assert sorted({s for s, *_ in stability_values(run, n_triplets=4, device="cpu")}) == [5, 10, 12]
    r = CliRunner().invoke(app, ["stability", str(run), "--triplets", "4", "--device", "cpu", "--out",
                                 str(tmp_path / "s.csv")], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "skipped the checkpoints at step 1, 2, 3, 4, 6, 7, 8, 9, 11: off the run's schedule" in r.output
    assert "by construction" not in r.output  # an LSTM's stability measures something


# ---- the target placed at t > 1 (002 §4.3's S4D set-up) -------------------------------------
def old_jacobians(core, x):
    """The analysis before the target position existed: J = ∂h_T/∂z_1, z_1 = initial_state(x_1)."""
    out = []
    for b in range(x.shape[0]):
        z1 = core.initial_state(x[b : b + 1, 0]).detach().requires_grad_(True)
        with torch.enable_grad():
            h = core.output_from_state(z1, x[b : b + 1, 1:])
            rows = [torch.autograd.grad(h[0, i], z1, retain_graph=True)[0][0] for i in range(h.shape[1])]
        out.append(torch.stack(rows))
    return torch.stack(out)


def old_triplets(n, L, gen, target, disturbant):
    t0, t1 = target
    x = torch.randint(t0, t1, (n, 1), generator=gen)
    shift = torch.randint(1, max(2, t1 - t0), (n, 1), generator=gen)
    x2 = t0 + (x - t0 + shift) % (t1 - t0)
    s = torch.randint(*disturbant, (n, L - 1), generator=gen)
    s2 = torch.randint(*disturbant, (n, L - 1), generator=gen)
    return torch.cat([x, s], 1), torch.cat([x, s2], 1), torch.cat([x2, s], 1)


def tiny_core(name):
    torch.manual_seed(4)
    cfg = resolve_config(options={"model.name": name, "model.hidden_size": 5, "model.state_size": 4})
    return CORES[name].build(3, cfg.model).double()


@pytest.mark.parametrize("name", ["lstm", "s4d"])
def test_target_position_one_is_the_analysis_it_always_was(name):
    core = tiny_core(name)
    x = torch.randn(4, 7, 3, dtype=torch.float64)
    assert torch.allclose(jacobians(core, x, target_position=1), old_jacobians(core, x), atol=1e-12)
    assert torch.equal(jacobians(core, x, target_position=1), jacobians(core, x))
    tri = make_triplets(20, 6, torch.Generator().manual_seed(5), (0, 8), (8, 16), target_position=1)
    old = old_triplets(20, 6, torch.Generator().manual_seed(5), (0, 8), (8, 16))
    assert all(torch.equal(a, b) for a, b in zip((tri.xs, tri.xs2, tri.x2s), old))


@pytest.mark.parametrize("name", ["gru", "s4d"])
def test_a_later_target_shares_its_prefix_and_the_states_up_to_it(name):
    cfg = resolve_config(options={"task.vocab_size": 16, "task.length": 6, "task.rarity": 0.25, "model.name": name,
                                  "model.hidden_size": 6, "model.state_size": 4, "model.pe": "sinusoidal"})
    task = build_task(cfg.task)
    torch.manual_seed(6)
    model = build_model(cfg, task).double()
    t = 4
    tri = make_triplets(30, 6, torch.Generator().manual_seed(0), (0, 8), (8, 16), target_position=t)
    seqs = (tri.xs, tri.xs2, tri.x2s)
    assert all(torch.equal(s[:, : t - 1], tri.xs[:, : t - 1]) for s in seqs)  # one prefix for all three
    assert all((s[:, : t - 1] >= 8).all() and (s[:, t:] >= 8).all() for s in seqs)  # disturbants both sides
    assert torch.equal(tri.xs[:, t - 1], tri.xs2[:, t - 1]) and (tri.xs[:, t - 1] != tri.x2s[:, t - 1]).all()
    assert torch.equal(tri.xs[:, t:], tri.x2s[:, t:]) and not torch.equal(tri.xs[:, t:], tri.xs2[:, t:])
    enc = [model.encoder(torch.cat([s, torch.full_like(s, task.query_id)], 1)).double() for s in seqs]
    with torch.no_grad():
        hidden = [model.core(e) for e in enc]
        for e in enc[1:]:  # the model's state is the same up to the target, whatever follows it
            assert torch.equal(model.core.state_after(e[:, : t - 1]), model.core.state_after(enc[0][:, : t - 1]))
        assert all(torch.allclose(h[:, : t - 1], hidden[0][:, : t - 1], atol=1e-12) for h in hidden)
        assert torch.equal(model.core.state_after(enc[1][:, :t]), model.core.state_after(enc[0][:, :t]))
        assert not torch.allclose(hidden[2][:, t - 1], hidden[0][:, t - 1])  # then the targets part them


@pytest.mark.parametrize("name", ["gru", "s4d"])
def test_the_jacobian_at_the_target_matches_autograd(name):
    core, t = tiny_core(name), 3
    x = torch.randn(3, 8, 3, dtype=torch.float64)
    J = jacobians(core, x, chunk_size=2, target_position=t)
    assert J.shape == (3, 5, core.state_dim)
    for b in range(3):
        zt = core.state_after(x[b : b + 1, :t])[0].detach()
        ref = torch.autograd.functional.jacobian(lambda z: core.output_from_state(z[None], x[b : b + 1, t:])[0], zt)
        assert torch.allclose(J[b], ref, atol=1e-10)
    if name == "gru":  # and a finite difference through the module's own forward from h_t
        eps, h_t = 1e-6, core.state_after(x[:, :t]).detach()
        fd = torch.stack([(core.rnn(x[:, t:], (h_t + eps * e)[None])[0][:, -1] -
                           core.rnn(x[:, t:], (h_t - eps * e)[None])[0][:, -1]) / (2 * eps)
                          for e in torch.eye(5, dtype=torch.float64)], -1)
        assert torch.allclose(J, fd.detach(), atol=1e-7)


def test_a_linear_rnn_jacobian_at_the_target_is_the_remaining_matrix_power():
    torch.manual_seed(2)
    core = LinearCore(3, 4)
    x = torch.randn(2, 7, 3, dtype=torch.float64)
    for t in (1, 3, 6):
        assert torch.allclose(jacobians(core, x, target_position=t)[0],
                              torch.linalg.matrix_power(core.W.detach(), 7 - t))


def test_a_target_position_outside_the_sequence_is_one_line_and_writes_nothing(tmp_path):
    for t in (6, 7):  # at t = L (6) no suffix follows the target
        with pytest.raises(PosrnnError, match=r"must lie in 1 … 5"):
            make_triplets(4, 6, torch.Generator(), (0, 8), (8, 16), target_position=t)
    run = small_run(tmp_path, **{"task.rarity": 0.25})
    (run / "stability.csv").write_text("model,pe,step,condition,pair,stability,old\n")
    for bad in ("0", "5", "6"):
        r = CliRunner().invoke(app,
                               ["stability", str(run), "--target-position", bad, "--triplets", "4", "--device", "cpu"])
        assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1, r.output
        assert "must lie in 1 … 4" in r.output and f"got {bad}" in r.output
        assert (run / "stability.csv").read_text() == "model,pe,step,condition,pair,stability,old\n"


def test_the_target_position_is_recorded_by_the_command_the_sweep_and_the_table(tmp_path):
    from posrnn_cli.analysis.aggregate import table_stability
    from posrnn_cli.sweep import jobs
    from posrnn_cli.sweep.plan import Job

    run = small_run(tmp_path, **{"task.rarity": 0.25, "model.name": "s4d", "model.state_size": 4})
    r = CliRunner().invoke(app, ["stability", str(run), "--target-position", "3", "--triplets", "8", "--device", "cpu",
                                 "--checkpoint", "20", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert {x["target_position"] for x in rows} == {3}
    with open(run / "stability.csv") as f:
        assert {x["target_position"] for x in csv.DictReader(f)} == {"3"}
    tables = {}
    for t in (1, 3):
        out = tmp_path / f"t{t}"
        out.mkdir()
        opts = {"source": str(run), "triplets": 8, "chunk_size": 8, "seed": 0, "device": "cpu", "target_position": t}
        jobs.run_stability(Job("stability", "c", "stability", str(out), None, opts))
        assert json.loads((out / "stability_meta.json").read_text())["target_position"] == t
        tables[t] = table_stability([out], n_resamples=100)
    assert {x["target_position"] for x in tables[3]} == {3}
    assert all("target_position" not in x for x in tables[1])  # the first token: the table as it always was
    assert [x["stability"] for x in tables[3]] != [x["stability"] for x in tables[1]]
    meta = tmp_path / "t1" / "stability_meta.json"  # a record from before the option: read as t = 1
    meta.write_text(json.dumps({k: v for k, v in json.loads(meta.read_text()).items() if k != "target_position"}))
    assert table_stability([tmp_path / "t1"], n_resamples=100) == tables[1]


@pytest.mark.parametrize("t, words", [(2, None), (4, "stability.target_position must lie in 1 … 3 (before the last "
                                                     "token of the dual runs' task.length 4), got 4"),
                                      (0, "stability.target_position must be at least 1, got 0")])
def test_the_sweep_passes_the_sections_target_position_and_refuses_one_outside_the_runs(tmp_path, t, words):
    from posrnn_cli.sweep.plan import plan
    from fabricate import scratch

    dual = {"cells": [{"model": "s4d", "vocab": 8}], "pe": ["none"], "seeds": [1], "length": 4, "hidden": 8,
            "rarity": 0.25, "iterations": 20, "batch": 8, "warmup": 2, "keep_checkpoints": "all"}
    params = scratch(tmp_path, dual=dual, stability={"triplets": 8, "target_position": t})
    if words is None:
        assert [j.options["target_position"] for j in plan(params, "t", ["stability"])] == [t]
        return
    with pytest.raises(PosrnnError) as e:
        plan(params, "t", ["stability"])
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_stability_section_can_name_the_cores_it_analyses(tmp_path):
    """stability_mid analyses the S4D at t > 1 while the RNNs keep t = 1: ``models`` picks the
    source runs' cores, [] none, and a value that is not a list of names is one line."""
    from posrnn_cli.sweep.plan import plan
    from fabricate import scratch

    dual = {"cells": [{"model": "s4d", "vocab": 8}, {"model": "gru", "vocab": 8}], "pe": ["none"], "seeds": [1],
            "length": 4, "hidden": 8, "rarity": 0.25, "iterations": 20, "batch": 8, "warmup": 2,
            "keep_checkpoints": "all"}
    for models, names in ((["s4d"], ["s4d-v8-none-s1"]), ([], []), (None, ["s4d-v8-none-s1", "gru-v8-none-s1"])):
        sec = {"triplets": 8, "target_position": 2, **({} if models is None else {"models": models})}
        params = scratch(tmp_path, dual=dual, stability_mid=sec)
        jobs = plan(params, "t", ["stability_mid"])
        assert sorted(j.name for j in jobs) == sorted(names) and all("models" not in j.options for j in jobs)
    params = scratch(tmp_path, dual=dual, stability_mid={"models": "s4d"})
    with pytest.raises(PosrnnError) as e:
        plan(params, "t", ["stability_mid"])
    assert "stability_mid.models must list core names" in str(e.value) and "\n" not in str(e.value)
