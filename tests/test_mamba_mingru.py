"""The Mamba and minGRU cores: each parallel (training) path equals its step-by-step recurrence
written out here from the raw parameters, both are causal, the recurrent view's Jacobians agree
with ``torch.autograd.functional.jacobian`` of an explicit unroll, and every command runs on
them (train, eval, compare, stability, extend-vocab, bench) with and without PE. A missing
``mambapy`` is one line naming the install command."""

from __future__ import annotations

import builtins
import json
import subprocess
import sys

import pytest
import torch
from torch.nn import functional as F
from typer.testing import CliRunner

from posrnn_cli.cli import app
from posrnn_cli.common.settings.config import resolve_config
from posrnn_cli.engine.stability import jacobians
from posrnn_cli.models import CORES, build_model
from posrnn_cli.models.mamba import MambaCore
from posrnn_cli.models.mingru import MinGRUCore
from posrnn_cli.tasks import build_task

F64 = torch.float64
NEW = ("mamba", "mingru")
runner = CliRunner()


def make(name: str, seed: int = 0, D: int = 6, H: int = 5, N: int = 3):
    torch.manual_seed(seed)
    core = MambaCore(D, H, N) if name == "mamba" else MinGRUCore(D, H)
    return core.double()


# ---- reference recurrences, written from the papers' equations over the raw parameters -------
def mingru_reference(core: MinGRUCore, x: torch.Tensor, h0: torch.Tensor | None = None) -> torch.Tensor:
    """Feng et al. (2024) §3.1: z = σ(W_z x + b_z), h̃ = g(W_h x + b_h), h_t = (1 − z) h_{t−1} + z h̃."""
    W, b, H = core.linear.weight, core.linear.bias, core.H
    h = x.new_zeros(x.shape[0], H) if h0 is None else h0
    out = []
    for t in range(x.shape[1]):
        k = x[:, t] @ W[:H].T + b[:H]
        v = x[:, t] @ W[H:].T + b[H:]
        h_tilde = torch.where(v >= 0, v + 0.5, torch.sigmoid(v))
        z = torch.sigmoid(k)
        h = (1 - z) * h + z * h_tilde
        out.append(h)
    return torch.stack(out, 1)


def mamba_reference(core: MambaCore, x: torch.Tensor, z0: torch.Tensor | None = None):
    """Gu & Dao (2023), Alg. 2, one step at a time from the block's parameters: the depthwise
    causal convolution over the last d_conv pre-convolution inputs, input-dependent Δ, B, C, the
    ZOH-style update h = exp(ΔA) h + Δ B x, y = C h + D x, gated by SiLU(z). Returns the
    outputs (B, T, H) and the state [h; conv inputs] after every step (B, T, state_dim)."""
    blk, E, N, K = core.block, core.d_inner, core.N, core.d_conv
    r = blk.config.dt_rank
    A = -torch.exp(blk.A_log.to(x.dtype))  # (E N)
    w, cb = blk.conv1d.weight[:, 0], blk.conv1d.bias  # (E K), (E)
    if z0 is None:
        h, window = x.new_zeros(x.shape[0], E, N), x.new_zeros(x.shape[0], E, K - 1)
    else:
        h, window = z0[:, : E * N].reshape(-1, E, N), z0[:, E * N :].reshape(-1, E, K - 1)
    ys, zs = [], []
    for t in range(x.shape[1]):
        xz = x[:, t] @ blk.in_proj.weight.T  # (B 2E), no bias
        u, gate = xz[:, :E], xz[:, E:]
        window = torch.cat([window, u[:, :, None]], 2)  # (B E K): oldest … newest
        c = F.silu((window * w).sum(-1) + cb)  # (B E)
        window = window[:, :, 1:]
        dbc = c @ blk.x_proj.weight.T
        dt, Bm, Cm = dbc[:, :r], dbc[:, r : r + N], dbc[:, r + N :]
        delta = F.softplus(dt @ blk.dt_proj.weight.T + blk.dt_proj.bias)  # (B E), input-dependent
        h = torch.exp(delta[:, :, None] * A) * h + (delta * c)[:, :, None] * Bm[:, None, :]
        y = (h * Cm[:, None, :]).sum(-1) + blk.D.to(x.dtype) * c
        ys.append((y * F.silu(gate)) @ blk.out_proj.weight.T)
        zs.append(torch.cat([h.flatten(1), window.flatten(1)], 1))
    return torch.stack(ys, 1), torch.stack(zs, 1)


def reference(name, core, x, z0=None):
    return mamba_reference(core, x, z0)[0] if name == "mamba" else mingru_reference(core, x, z0)


# ---- the maths --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize("T", [1, 2, 5, 16, 19])
def test_parallel_forward_equals_the_stepped_recurrence(name, T):
    """The training path (mambapy's parallel scan; minGRU's log-space scan) equals the
    recurrence at every step, for lengths that are and are not powers of two."""
    core = make(name, 1)
    x = torch.randn(3, T, 6, dtype=F64)
    assert torch.allclose(core(x), reference(name, core, x), atol=1e-10)


@pytest.mark.parametrize("name", NEW)
def test_recurrent_view_equals_the_parallel_forward(name):
    core = make(name, 2)
    x = torch.randn(4, 9, 6, dtype=F64)
    z1 = core.initial_state(x[:, 0])
    assert z1.shape == (4, core.state_dim)
    for T in (2, 5, 9):
        assert torch.allclose(core.output_from_state(z1, x[:, 1:T]), core(x[:, :T])[:, -1], atol=1e-10)
    if name == "mamba":  # z_1 is the full state: SSM state and convolution window
        assert torch.allclose(z1, mamba_reference(core, x[:, :1])[1][:, 0], atol=1e-12)


@pytest.mark.parametrize("name", NEW)
def test_recurrent_view_from_any_state_equals_the_reference(name):
    """From an arbitrary z_1, not one the inputs produced (for minGRU a positive one, as g keeps it)."""
    core = make(name, 3)
    x_rest = torch.randn(2, 6, 6, dtype=F64)
    z1 = torch.rand(2, core.state_dim, dtype=F64) + 0.1
    assert torch.allclose(core.output_from_state(z1, x_rest), reference(name, core, x_rest, z1)[:, -1], atol=1e-10)


@pytest.mark.parametrize("name", NEW)
def test_recurrent_view_matches_in_float32_over_long_sequences(name):
    torch.manual_seed(4)
    core = MambaCore(16, 32, 16) if name == "mamba" else MinGRUCore(16, 32)
    x = torch.randn(2, 128, 16)
    with torch.no_grad():
        y = core.output_from_state(core.initial_state(x[:, 0]), x[:, 1:])
        assert torch.allclose(y, core(x)[:, -1], atol=1e-4)


@pytest.mark.parametrize("name", NEW)
def test_causal(name):
    core = make(name, 5)
    x = torch.randn(2, 10, 6, dtype=F64)
    y = core(x)
    x2 = x.clone()
    x2[:, 6:] += torch.randn(2, 4, 6, dtype=F64)
    y2 = core(x2)
    assert torch.allclose(y2[:, :6], y[:, :6], atol=1e-12)
    assert (y2[:, 6:] - y[:, 6:]).abs().max() > 1e-4


@pytest.mark.parametrize("name", NEW)
def test_jacobians_agree_with_autograd_functional_on_an_explicit_unroll(name):
    """``stability.jacobians`` (one vmapped backward through the core's recurrent view) against
    ``torch.autograd.functional.jacobian`` of the reference recurrence written out above."""
    core = make(name, 6)
    x = torch.randn(3, 8, 6, dtype=F64)
    J = jacobians(core, x, chunk_size=2)
    assert J.shape == (3, 5, core.state_dim)
    for b in range(3):
        z1 = core.initial_state(x[b : b + 1, 0])[0].detach()
        ref = torch.autograd.functional.jacobian(lambda z: reference(name, core, x[b : b + 1, 1:], z[None])[0, -1], z1)
        assert torch.allclose(J[b], ref, atol=1e-10)
    assert J.abs().max() > 1e-3


def test_mingru_state_jacobian_is_diagonal_and_positive_so_its_stability_is_one():
    """minGRU's gates read the input only, so ∂h_T/∂h_1 = diag(Π_{t≥2} (1 − z_t)): every row has
    one positive entry, and the stability of any two sequences is exactly 1 (by construction,
    not by training)."""
    from posrnn_cli.engine.stability import stability

    core = make("mingru", 9)
    x = torch.randn(4, 7, 6, dtype=F64)
    J = jacobians(core, x)
    k = core.linear(x[:, 1:])[..., : core.H]
    assert torch.allclose(J, torch.diag_embed(torch.sigmoid(-k).prod(1)), atol=1e-12)
    assert torch.allclose(stability(J[:2], J[2:]), torch.ones(2, dtype=F64), atol=1e-12)


def test_mamba_selection_depends_on_the_input():
    """Δ, B and C depend on the input: unlike S4D's, the state Jacobian ∂h_T/∂z_1 changes with
    the tokens after z_1 even for the same z_1."""
    core = make("mamba", 7)
    x = torch.randn(2, 6, 6, dtype=F64)
    x[1, 0] = x[0, 0]
    J = jacobians(core, x)
    assert (J[0] - J[1]).abs().max() > 1e-4


@pytest.mark.parametrize("name", NEW)
def test_gradient_reaches_every_parameter(name):
    core = make(name, 8)
    core(torch.randn(2, 6, 6, dtype=F64)).pow(2).sum().backward()
    for pname, p in core.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, pname


def test_mamba_takes_d_state_from_the_config_and_keeps_a_and_d_undecayed():
    cfg = resolve_config(options={"task.vocab_size": 8, "task.length": 4, "model.name": "mamba", "model.hidden_size": 8,
                                  "model.state_size": 4})
    m = build_model(cfg, build_task(cfg.task))
    assert m.core.block.A_log.shape == (16, 4) and m.core.block.in_proj.in_features == 16  # E·H × N; D = E + P
    assert m.core.block.A_log._optim == {"weight_decay": 0.0} and m.core.block.D._optim == {"weight_decay": 0.0}
    assert m.core.state_dim == 16 * (4 + 3)


# ---- the commands -----------------------------------------------------------------------------
def cli(*args):
    r = runner.invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r.output


@pytest.mark.parametrize("name", NEW + ("xlstm",))  # xlstm's own tests: tests/test_xlstm.py
def test_every_command_runs_on_the_new_cores(name, tmp_path):
    tiny = ["--model", name, "--vocab-size", 8, "--length", 4, "--hidden-size", 8, "--iterations", 20, "--batch-size",
            16,
            "--warmup", 2, "--checkpoint-every", 10, "--device", "cpu", "--set", "task.n_test=64", "--set",
            "model.state_size=4"]
    runs = {}
    for pe in ("sinusoidal", "none"):
        runs[pe] = tmp_path / pe
        assert json.loads(cli("train", *tiny, "--pe", pe, "--out", runs[pe], "--json"))["finished"]
        res = json.loads(cli("eval", runs[pe], "--json"))
        assert (res["model"], res["pe"]) == (name, pe) and 0 <= res["token_accuracy"] <= 1
    rows = json.loads(cli("compare", runs["none"], runs["sinusoidal"], "--device", "cpu", "--json"))
    assert isinstance(rows, list)
    assert [(r["model"], r["pe"]) for r in rows] == [(name, "none"), (name, "sinusoidal")]
    rows = json.loads(cli("stability", runs["sinusoidal"], "--triplets", 8, "--device", "cpu", "--json"))
    assert len(rows) == 2 * 2 and all(abs(r["stability"]) <= 1 + 1e-6 and r["model"] == name for r in rows)
    ext = json.loads(cli("extend-vocab", runs["none"], "--extra-vocab", 4, "--out", tmp_path / "ext", "--iterations",
                         10,
                         "--device", "cpu", "--set", "train.warmup=1", "--json"))
    assert ext["extra_vocab"] == 4
    bench = json.loads(cli("bench", "--model", name, "--vocab-size", 8, "--length", 4, "--hidden-size", 8,
                           "--batch-size", 8,
                           "--device", "cpu", "--threads", 1, "--iters", 3, "--warmup-iters", 1, "--parts", "train",
                           "--no-reference", "--set", "model.state_size=4", "--json"))
    assert bench


@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize("mode", ["concat", "add"])
def test_pe_modes(name, mode, tmp_path):
    cfg = resolve_config(options={"task.vocab_size": 8, "task.length": 4, "model.name": name, "model.hidden_size": 8,
                                  "model.state_size": 4, "model.pe_mode": mode})
    m = build_model(cfg, build_task(cfg.task))
    assert m.encoder.out_dim == (16 if mode == "concat" else 8)
    assert m(torch.randint(8, (2, 8))).shape == (2, 8, 8)


# ---- a missing optional dependency ------------------------------------------------------------
def test_a_missing_mambapy_is_one_line_naming_the_install_command(tmp_path):
    """In a fresh interpreter where ``import mambapy`` fails: train --model mamba exits 1 with
    one line that names the install command, and leaves no run directory."""
    code = f"""
import builtins, sys
real = builtins.__import__
def fake(name, *a, **k):
    if name == "mambapy" or name.startswith("mambapy."):
        raise ImportError("No module named 'mambapy'")
    return real(name, *a, **k)
builtins.__import__ = fake
sys.argv = ["posrnn", "train", "--model", "mamba", "--vocab-size", "8", "--length", "4", "--hidden-size", "8",
            "--iterations", "2", "--device", "cpu", "--out", {str(tmp_path / "run")!r}]
from posrnn_cli.cli import run
run()
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    out = (p.stdout + p.stderr).strip().splitlines()
    assert p.returncode == 1, p.stdout + p.stderr
    assert len(out) == 1 and "mambapy" in out[0] and "pip install" in out[0], out
    assert "Traceback" not in p.stderr and not (tmp_path / "run").exists()


def test_the_registry_lists_both_cores_with_a_recurrent_view():
    for name in NEW:
        assert CORES[name].recurrent_view
    assert builtins  # the module is imported for the subprocess test's code text only


def test_mingru_log_scan_equals_heinsens_form_and_stays_finite_with_saturated_gates():
    """The Hillis–Steele log-space scan equals Feng et al.'s Heinsen form (cumsum +
    logcumsumexp); with gates pushed to ±30 over 300 steps the output and its gradient stay
    finite and match the step-by-step recurrence."""
    from posrnn_cli.models.mingru import log_scan

    log_a, log_b = -torch.rand(3, 37, 4, dtype=F64) * 5, torch.randn(3, 37, 4, dtype=F64) * 3
    a_star = log_a.cumsum(1)
    assert torch.allclose(log_scan(log_a, log_b), a_star + torch.logcumsumexp(log_b - a_star, 1), atol=1e-10)
    core = make("mingru", 10)
    with torch.no_grad():
        core.linear.weight.mul_(30)
    x = torch.randn(2, 300, 6, dtype=F64, requires_grad=True)
    y = core(x)
    y.sum().backward()
    assert torch.isfinite(y).all() and torch.isfinite(x.grad).all()
    assert torch.allclose(y, mingru_reference(core, x.detach()), atol=1e-9)
