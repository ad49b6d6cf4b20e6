"""Gated DeltaNet's full layer and Hawk's recurrent block: each training path equals its layer
written out here from the paper's equations over the raw parameters; Gated DeltaNet's also equals
the flash-linear-attention-style recurrence (state keys × values, log decay g, query scale on q),
written here from those equations, in float64 and within float32 rounding; both are causal, the
gradient reaches every parameter, and a run trains on each."""

from __future__ import annotations

import json

import pytest
import torch
from torch.nn import functional as F
from typer.testing import CliRunner

from posrnn_cli.cli import app
from posrnn_cli.models import CORES
from posrnn_cli.models.gdn_layer import GatedDeltaNetLayer
from posrnn_cli.models.hawk import HawkCore
from posrnn_cli.models.rglru import C

F64 = torch.float64
FULL = ("gated_deltanet_layer", "hawk")


def make(name: str, seed: int = 0, conv: bool = True, D: int = 6, H: int = 8, heads: int = 2):
    torch.manual_seed(seed)
    core = GatedDeltaNetLayer(D, H, heads, conv) if name == "gated_deltanet_layer" else HawkCore(D, H, conv)
    with torch.no_grad():  # bias the convolutions away from their init so that a missed tap would show
        for p in core.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return core.double()


def causal_conv(x: torch.Tensor, conv) -> torch.Tensor:
    """y_t[c] = Σ_{j<w} W[c, j] x_{t−w+1+j}[c] + b[c], zeros before step 0; the identity when off."""
    if isinstance(conv, torch.nn.Identity):
        return x
    W, b = conv.conv.weight[:, 0], conv.conv.bias  # (C w)
    w = W.shape[1]
    pad = torch.cat([x.new_zeros(x.shape[0], w - 1, x.shape[2]), x], 1)
    y = sum(W[:, j] * pad[:, j : j + x.shape[1]] for j in range(w))
    return y if b is None else y + b


def gdn_projections(core: GatedDeltaNetLayer, x: torch.Tensor):
    """q (scaled), k, v per head, α, β: Yang et al. (2025) §3 with the released layer's
    short convolutions (SiLU after each) and L2-normalised q and k."""
    n, dk, dv = core.heads, core.dk, core.dv
    q = F.silu(causal_conv(x @ core.q_proj.weight.T, core.q_conv)).unflatten(-1, (n, dk))
    k = F.silu(causal_conv(x @ core.k_proj.weight.T, core.k_conv)).unflatten(-1, (n, dk))
    v = F.silu(causal_conv(x @ core.v_proj.weight.T, core.v_conv)).unflatten(-1, (n, dv))
    q = q / torch.sqrt((q**2).sum(-1, keepdim=True) + 1e-6) * dk**-0.5
    k = k / torch.sqrt((k**2).sum(-1, keepdim=True) + 1e-6)
    a, b = (x @ core.ab.weight.T).chunk(2, -1)
    log_alpha = -torch.exp(core.A_log) * F.softplus(a + core.dt_bias)  # (B T n)
    return q, k, v, log_alpha, torch.sigmoid(b)


def gdn_output(core: GatedDeltaNetLayer, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
    """W_o [RMSNorm(o) w ⊙ SiLU(W_g x)] per head."""
    o = o / torch.sqrt((o**2).mean(-1, keepdim=True) + 1e-5) * core.norm_weight
    g = F.silu(x @ core.g_proj.weight.T).unflatten(-1, (core.heads, core.dv))
    return (o * g).flatten(-2) @ core.o_proj.weight.T


def gdn_paper(core: GatedDeltaNetLayer, x: torch.Tensor) -> torch.Tensor:
    """§3.1 with an explicit identity: S_t = S_{t−1}(α_t(I − β_t k_t k_tᵀ)) + β_t v_t k_tᵀ, o_t = S_t q_t."""
    q, k, v, log_alpha, beta = gdn_projections(core, x)
    S = x.new_zeros(x.shape[0], core.heads, core.dv, core.dk)
    eye, outs = torch.eye(core.dk, dtype=x.dtype), []
    for t in range(x.shape[1]):
        al, be, kt = log_alpha[:, t].exp()[..., None, None], beta[:, t][..., None, None], k[:, t]
        S = S @ (al * (eye - be * kt[..., :, None] * kt[..., None, :])) + be * v[:, t][..., :, None] * kt[..., None, :]
        outs.append((S @ q[:, t][..., None])[..., 0])
    return gdn_output(core, x, torch.stack(outs, 1))


def gdn_fla_style(core: GatedDeltaNetLayer, x: torch.Tensor) -> torch.Tensor:
    """The reference recurrence in flash-linear-attention's form, written from its equations:
    h (keys × values) ← h·exp(g_t); u = β_t (v_t − hᵀ k_t); h ← h + k_t uᵀ; o_t = hᵀ q_t."""
    q, k, v, g, beta = gdn_projections(core, x)
    h = x.new_zeros(x.shape[0], core.heads, core.dk, core.dv)
    outs = []
    for t in range(x.shape[1]):
        h = h * g[:, t].exp()[..., None, None]
        u = (v[:, t] - (h * k[:, t][..., None]).sum(-2)) * beta[:, t][..., None]
        h = h + k[:, t][..., None] * u[..., None, :]
        outs.append((q[:, t][..., None] * h).sum(-2))
    return gdn_output(core, x, torch.stack(outs, 1))


def hawk_paper(core: HawkCore, x: torch.Tensor) -> torch.Tensor:
    """Griffin §2.4, Figure 2(c): y = GeLU(W_y x), x̃ = Conv(W_x x), r = σ(W_a x̃ + b_a),
    i = σ(W_x' x̃ + b_x'), a_t = σ(Λ)^{c r}, h_t = a_t h_{t−1} + √(1 − a_t²)(i x̃), out = W_out(h ⊙ y)."""
    H = core.H
    y = F.gelu(x @ core.linear_y.weight.T + core.linear_y.bias, approximate="tanh")
    xt = causal_conv(x @ core.linear_x.weight.T + core.linear_x.bias, core.conv)
    Wg, bg = core.gates.weight, core.gates.bias
    h, out = x.new_zeros(x.shape[0], H), []
    for t in range(x.shape[1]):
        r = torch.sigmoid(xt[:, t] @ Wg[:H].T + bg[:H])
        i = torch.sigmoid(xt[:, t] @ Wg[H:].T + bg[H:])
        a = torch.sigmoid(core.Lambda) ** (C * r)
        h = a * h + torch.sqrt(1 - a**2) * (i * xt[:, t])
        out.append(h)
    return (torch.stack(out, 1) * y) @ core.linear_out.weight.T + core.linear_out.bias


@pytest.mark.parametrize("conv", [True, False])
@pytest.mark.parametrize("T", [1, 3, 9])
def test_gated_deltanet_layer_equals_the_paper_and_the_fla_style_recurrence(conv, T):
    core = make("gated_deltanet_layer", 1, conv)
    x = torch.randn(3, T, 6, dtype=F64)
    y = core(x)
    assert torch.allclose(y, gdn_paper(core, x), atol=1e-10)
    assert torch.allclose(y, gdn_fla_style(core, x), atol=1e-10)


def test_gated_deltanet_layer_matches_the_fla_style_recurrence_within_float32_rounding():
    torch.manual_seed(3)
    core = GatedDeltaNetLayer(16, 32, 4)
    x = torch.randn(2, 64, 16)
    with torch.no_grad():
        err = (core(x) - gdn_fla_style(core, x)).abs().max().item()
    assert err < 1e-5, err


@pytest.mark.parametrize("conv", [True, False])
@pytest.mark.parametrize("T", [1, 3, 9])
def test_hawk_block_equals_the_papers_block(conv, T):
    core = make("hawk", 2, conv)
    x = torch.randn(3, T, 6, dtype=F64)
    assert torch.allclose(core(x), hawk_paper(core, x), atol=1e-10)


def test_the_layers_have_their_authors_widths_and_parts():
    g = GatedDeltaNetLayer(6, 8, 2)
    assert (g.dk, g.dv, g.v_proj.out_features, g.g_proj.out_features, g.o_proj.in_features) == (4, 8, 16, 16, 16)
    assert g.q_conv.width == 4 and g.q_conv.conv.bias is None  # fla: conv_size 4, no conv bias
    h = HawkCore(6, 8)
    assert h.conv.width == 4 and h.conv.conv.bias is not None  # recurrentgemma's Conv1D has a bias
    for core in (GatedDeltaNetLayer(6, 8, 2, conv=False), HawkCore(6, 8, conv=False)):
        assert not any("conv" in n for n, _ in core.named_parameters())


@pytest.mark.parametrize("name", FULL)
def test_causal_and_every_parameter_gets_a_gradient(name):
    core = make(name, 5)
    x = torch.randn(2, 10, 6, dtype=F64)
    y = core(x)
    x2 = x.clone()
    x2[:, 6:] += 1.0
    assert torch.allclose(core(x2)[:, :6], y[:, :6], atol=1e-12)
    y.square().sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in core.parameters())
    assert not CORES[name].recurrent_view and CORES[name].conv


@pytest.mark.parametrize("name", FULL)
def test_a_run_trains_and_evaluates_on_each(name, tmp_path):
    runner = CliRunner()
    tiny = ["--model", name, "--vocab-size", 8, "--length", 4, "--hidden-size", 8, "--heads", 2, "--iterations", 6,
            "--batch-size", 8, "--warmup", 1, "--device", "cpu", "--set", "task.n_test=16", "--json"]
    for extra in ([], ["--no-conv"]):
        out = tmp_path / f"run{len(extra)}"
        r = runner.invoke(app, ["train", *map(str, tiny), *extra, "--out", str(out)])
        assert r.exit_code == 0, r.output
        r = runner.invoke(app, ["eval", str(out), "--json"])
        assert r.exit_code == 0 and json.loads(r.output)["model"] == name
