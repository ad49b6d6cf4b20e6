"""The RG-LRU and Gated DeltaNet cores: each training path equals its recurrence written out here
from the papers' equations over the raw parameters, both are causal, the recurrent view's
Jacobians agree with ``torch.autograd.functional.jacobian`` of an explicit unroll, the gradient
reaches every parameter, and every command runs on them with and without PE."""

from __future__ import annotations

import json

import pytest
import torch
from torch.nn import functional as F
from typer.testing import CliRunner

from posrnn_cli.cli import app
from posrnn_cli.common import catalog
from posrnn_cli.common.settings.config import resolve_config
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.engine.stability import jacobians
from posrnn_cli.models import CORES, build_model, count_parameters
from posrnn_cli.models.gated_deltanet import GatedDeltaNetCore
from posrnn_cli.models.rglru import C, RGLRUCore
from posrnn_cli.tasks import build_task

F64 = torch.float64
NEW = ("rglru", "gated_deltanet")
runner = CliRunner()


def make(name: str, seed: int = 0, D: int = 6, H: int = 8, heads: int = 2):
    torch.manual_seed(seed)
    core = RGLRUCore(D, H) if name == "rglru" else GatedDeltaNetCore(D, H, heads)
    return core.double()


# ---- reference recurrences, written from the papers' equations over the raw parameters -------
def rglru_reference(core: RGLRUCore, x: torch.Tensor, h0: torch.Tensor | None = None) -> torch.Tensor:
    """Griffin §2.4: x̃ = W x + b, r = σ(W_a x̃ + b_a), i = σ(W_x x̃ + b_x), a_t = σ(Λ)^{c r},
    h_t = a_t h_{t−1} + √(1 − a_t²)(i x̃)."""
    H = core.H
    Wg, bg = core.gates.weight, core.gates.bias
    h = x.new_zeros(x.shape[0], H) if h0 is None else h0
    out = []
    for t in range(x.shape[1]):
        xt = x[:, t] @ core.proj.weight.T + core.proj.bias
        r = torch.sigmoid(xt @ Wg[:H].T + bg[:H])
        i = torch.sigmoid(xt @ Wg[H:].T + bg[H:])
        a = torch.sigmoid(core.Lambda) ** (C * r)
        h = a * h + torch.sqrt(1 - a**2) * (i * xt)
        out.append(h)
    return torch.stack(out, 1)


def gdn_reference(core: GatedDeltaNetCore, x: torch.Tensor, z0: torch.Tensor | None = None):
    """Yang et al. (2025) §3.1 per head, with an explicit identity: S_t = S_{t−1}(α_t(I − β_t k_t k_tᵀ))
    + β_t v_t k_tᵀ, o_t = S_t q_t; q, k, v = SiLU(W x) with q, k L2-normalised; α_t =
    exp(−exp(A_log)·softplus(w_α·x + dt_bias)), β_t = σ(w_β·x); out = W_o (o d^{−½}). Returns the
    outputs (B, T, H) and the flattened states (B, T, heads·d²)."""
    n, d, H = core.heads, core.d, core.H
    W, Wab = core.qkv.weight, core.ab.weight
    S = x.new_zeros(x.shape[0], n, d, d) if z0 is None else z0.reshape(-1, n, d, d)
    eye = torch.eye(d, dtype=x.dtype)
    ys, zs = [], []
    for t in range(x.shape[1]):
        xt = x[:, t]
        q, k, v = (F.silu(xt @ W[j * H : (j + 1) * H].T).reshape(-1, n, d) for j in range(3))
        q = q / torch.sqrt((q**2).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k**2).sum(-1, keepdim=True) + 1e-6)
        alpha = torch.exp(-torch.exp(core.A_log) * F.softplus(xt @ Wab[:n].T + core.dt_bias))  # (B n)
        beta = torch.sigmoid(xt @ Wab[n:].T)
        kk = k[..., :, None] * k[..., None, :]  # k kᵀ (B n d d)
        S = S @ (alpha[..., None, None] * (eye - beta[..., None, None] * kk)) + beta[..., None, None] * (
            v[..., :, None] * k[..., None, :])
        o = (S @ q[..., None])[..., 0]  # (B n d)
        ys.append(o.reshape(-1, H) * d**-0.5 @ core.out.weight.T)
        zs.append(S.flatten(1))
    return torch.stack(ys, 1), torch.stack(zs, 1)


def reference(name, core, x, z0=None):
    return rglru_reference(core, x, z0) if name == "rglru" else gdn_reference(core, x, z0)[0]


# ---- the maths --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize("T", [1, 2, 5, 16])
def test_forward_equals_the_papers_recurrence(name, T):
    core = make(name, 1)
    x = torch.randn(3, T, 6, dtype=F64)
    assert torch.allclose(core(x), reference(name, core, x), atol=1e-10)


@pytest.mark.parametrize("name", NEW)
def test_recurrent_view_equals_the_forward(name):
    core = make(name, 2)
    x = torch.randn(4, 9, 6, dtype=F64)
    z1 = core.initial_state(x[:, 0])
    assert z1.shape == (4, core.state_dim)
    for T in (2, 5, 9):
        assert torch.allclose(core.output_from_state(z1, x[:, 1:T]), core(x[:, :T])[:, -1], atol=1e-10)
    if name == "gated_deltanet":  # z_1 is the matrix state S_1 of every head
        assert torch.allclose(z1, gdn_reference(core, x[:, :1])[1][:, 0], atol=1e-12)


@pytest.mark.parametrize("name", NEW)
def test_recurrent_view_from_any_state_equals_the_reference(name):
    core = make(name, 3)
    x_rest = torch.randn(2, 6, 6, dtype=F64)
    z1 = torch.randn(2, core.state_dim, dtype=F64)
    assert torch.allclose(core.output_from_state(z1, x_rest), reference(name, core, x_rest, z1)[:, -1], atol=1e-10)


@pytest.mark.parametrize("name", NEW)
def test_recurrent_view_matches_in_float32_over_long_sequences(name):
    torch.manual_seed(4)
    core = RGLRUCore(16, 32) if name == "rglru" else GatedDeltaNetCore(16, 32, 4)
    x = torch.randn(2, 128, 16)
    with torch.no_grad():
        assert torch.allclose(core.output_from_state(core.initial_state(x[:, 0]), x[:, 1:]), core(x)[:, -1], atol=1e-4)


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
    core = make(name, 6)
    x = torch.randn(3, 8, 6, dtype=F64)
    J = jacobians(core, x, chunk_size=2)
    assert J.shape == (3, 8, core.state_dim)
    for b in range(3):
        z1 = core.initial_state(x[b : b + 1, 0])[0].detach()
        ref = torch.autograd.functional.jacobian(lambda z: reference(name, core, x[b : b + 1, 1:], z[None])[0, -1], z1)
        assert torch.allclose(J[b], ref, atol=1e-10)
    assert J.abs().max() > 1e-3


@pytest.mark.parametrize("name", NEW)
def test_gradient_reaches_every_parameter(name):
    core = make(name, 8)
    core(torch.randn(2, 6, 6, dtype=F64)).pow(2).sum().backward()
    for pname, p in core.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, pname


def test_rglru_initialises_a_to_the_c_uniform_in_the_papers_range():
    torch.manual_seed(0)
    ac = torch.sigmoid(RGLRUCore(1, 1024).Lambda.double()) ** C
    assert 0.9 - 1e-5 <= ac.min() < 0.902 and 0.997 < ac.max() <= 0.999 + 1e-5
    assert abs(ac.mean().item() - 0.9495) < 0.004  # uniform: the mean is the midpoint


def test_rglru_state_jacobian_is_the_product_of_the_decays():
    """The gates read the input only, so ∂h_T/∂h_1 = diag(Π_{t≥2} a_t)."""
    core = make("rglru", 9)
    x = torch.randn(4, 7, 6, dtype=F64)
    J = jacobians(core, x)
    a, _ = core.coefficients(x[:, 1:])
    assert torch.allclose(J, torch.diag_embed(a.prod(1)), atol=1e-12)


def test_rglru_gradient_stays_finite_when_the_recurrence_gate_closes():
    """r_t = 0 (gate pre-activation −200 underflows in float32) makes a_t = 1 and √(1 − a_t²) = 0,
    whose plain derivative is infinite: the capped one keeps every gradient finite."""
    torch.manual_seed(10)
    core = RGLRUCore(6, 8)
    with torch.no_grad():
        core.gates.weight.zero_()
        core.gates.bias[:8] = -200.0
    y = core(torch.randn(2, 5, 6))
    y.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in core.parameters())


def test_gated_delta_rule_writes_v_at_k():
    """With β = 1 and ‖k‖ = 1 the step stores v at k whatever α and S were: S_t k_t = v_t."""
    torch.manual_seed(11)
    S = torch.randn(3, 2, 4, 4, dtype=F64)
    k = F.normalize(torch.randn(3, 2, 4, dtype=F64), dim=-1)
    v, q = torch.randn(3, 2, 4, dtype=F64), torch.randn(3, 2, 4, dtype=F64)
    o, S1 = GatedDeltaNetCore.update(S, q, k, v, torch.rand(3, 2, dtype=F64), torch.ones(3, 2, dtype=F64))
    assert torch.allclose((S1 @ k[..., None])[..., 0], v, atol=1e-12)
    assert torch.allclose(o, (S1 @ q[..., None])[..., 0])


def test_gated_deltanet_takes_heads_from_the_config_and_refuses_heads_that_do_not_divide_h():
    cfg = resolve_config(options={"task.vocab_size": 8, "task.length": 4, "model.name": "gated_deltanet",
                                  "model.hidden_size": 12, "model.heads": 3})
    m = build_model(cfg, build_task(cfg.task))
    assert (m.core.heads, m.core.d, m.core.state_dim) == (3, 4, 48)
    assert m.core.A_log._optim == {"weight_decay": 0.0} and m.core.dt_bias._optim == {"weight_decay": 0.0}
    cfg = resolve_config(options={"task.vocab_size": 8, "task.length": 4, "model.name": "gated_deltanet",
                                  "model.hidden_size": 12, "model.heads": 5})
    with pytest.raises(PosrnnError, match="must divide"):
        build_model(cfg, build_task(cfg.task))


def test_core_parameters_match_the_grus_at_the_matched_sizes():
    """With a concatenated sinusoidal PE (D = 2H): the RG-LRU at H = 96 has exactly the GRU's
    37,248 core parameters at H = 64; Gated DeltaNet at H = 72 with 4 heads is within 1%."""
    def core_params(name, H, heads=8):
        cfg = resolve_config(options={"task.vocab_size": 32, "task.length": 8, "model.name": name,
                                      "model.hidden_size": H,
                                      "model.heads": heads, "model.pe": "sinusoidal"})
        return count_parameters(build_model(cfg, build_task(cfg.task)).core)

    gru = core_params("gru", 64)
    assert gru == 37_248 and core_params("rglru", 96) == gru
    assert abs(core_params("gated_deltanet", 72, 4) / gru - 1) < 0.01


def test_the_registry_lists_both_with_a_recurrent_view_and_a_catalogue_line():
    for name in NEW:
        assert CORES[name].recurrent_view and catalog.CORES[name].description and catalog.CORES[name].label


# ---- the commands -----------------------------------------------------------------------------
def cli(*args):
    r = runner.invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r.output


@pytest.mark.parametrize("name", NEW)
def test_every_command_runs_on_the_new_cores(name, tmp_path):
    tiny = ["--model", name, "--vocab-size", 8, "--length", 4, "--hidden-size", 8, "--heads", 2, "--iterations", 20,
            "--batch-size", 16, "--warmup", 2, "--checkpoint-every", 10, "--device", "cpu", "--set", "task.n_test=64"]
    runs = {}
    for pe in ("sinusoidal", "none"):
        runs[pe] = tmp_path / pe
        assert json.loads(cli("train", *tiny, "--pe", pe, "--out", runs[pe], "--json"))["finished"]
        res = json.loads(cli("eval", runs[pe], "--json"))
        assert (res["model"], res["pe"]) == (name, pe) and 0 <= res["token_accuracy"] <= 1
    rows = json.loads(cli("stability", runs["sinusoidal"], "--triplets", 8, "--device", "cpu", "--json"))
    assert len(rows) == 2 * 2 and all(abs(r["stability"]) <= 1 + 1e-6 and r["model"] == name for r in rows)
    ext = json.loads(cli("extend-vocab", runs["none"], "--extra-vocab", 4, "--out", tmp_path / "ext", "--iterations",
                         10,
                         "--device", "cpu", "--set", "train.warmup=1", "--json"))
    assert ext["extra_vocab"] == 4
    assert json.loads(cli("bench", "--model", name, "--vocab-size", 8, "--length", 4, "--hidden-size", 8, "--set",
                          "model.heads=2", "--batch-size", 8, "--device", "cpu", "--threads", 1, "--iters", 3,
                          "--warmup-iters", 1, "--parts", "train", "--no-reference", "--json"))


def test_heads_that_do_not_divide_h_are_one_line_and_no_run(tmp_path):
    r = runner.invoke(app,
                      ["train", "--model", "gated_deltanet", "--hidden-size", "10", "--heads", "4", "--vocab-size", "8",
                            "--length", "4", "--iterations", "2", "--device", "cpu", "--out", str(tmp_path / "run")])
    assert r.exit_code != 0 and "must divide" in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize("mode", ["concat", "add"])
def test_pe_modes(name, mode):
    cfg = resolve_config(options={"task.vocab_size": 8, "task.length": 4, "model.name": name, "model.hidden_size": 8,
                                  "model.heads": 2, "model.pe_mode": mode})
    m = build_model(cfg, build_task(cfg.task))
    assert m.encoder.out_dim == (16 if mode == "concat" else 8)
    assert m(torch.randint(8, (2, 8))).shape == (2, 8, 8)
