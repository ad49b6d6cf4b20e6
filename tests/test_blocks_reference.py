"""The full blocks (``model.block: full``) against their authors' code, in float64.

Hawk's: posrnn's weights are loaded into ``recurrentgemma``'s own ``ResidualBlock`` (1.0.1, its
PyTorch code; ``make setup`` installs it with --no-deps), which must give the same outputs, and
the initialisation is compared with that block's. Gated DeltaNet's: flash-linear-attention's
layer runs its recurrence in Triton kernels only (no CPU), so the block is compared with a port of
its forward (``fla_block`` below: each function names the file and function of
flash-linear-attention / fla-core 0.6.0 it ports) fed with posrnn's weights under fla's names; and,
where fla and triton are installed (not by ``make setup``: triton is a 286 MB wheel), with fla's own
``GatedDeltaNet`` layer and ``GatedMLP`` loaded with those weights, their Triton kernels replaced by
fla's torch references (float32, as those references compute).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import math
import sys
import types
from functools import partial
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

from posrnn_cli.models.gdn_layer import GatedDeltaNetBlock, mlp_width
from posrnn_cli.models.hawk import EXPANSION, HawkBlock
from posrnn_cli.models.rglru import lru_coefficients
from posrnn_cli.models.shortconv import ShortConv

F64 = torch.float64


def recurrentgemma_torch():
    """recurrentgemma's ``layers``, ``modules`` and ``common``, skipping when it is not installed. Its
    package ``__init__`` imports its JAX code; the PyTorch modules need only einops and jaxtyping, so
    the two packages are entered without running their ``__init__``."""
    if "recurrentgemma" not in sys.modules:
        spec = importlib.util.find_spec("recurrentgemma")
        if spec is None:
            pytest.skip("recurrentgemma is not installed (make setup installs it)")
        pytest.importorskip("einops")
        pytest.importorskip("jaxtyping")
        root = Path(next(iter(spec.submodule_search_locations)))
        for name, path in (("recurrentgemma", root), ("recurrentgemma.torch", root / "torch")):
            pkg = types.ModuleType(name)
            pkg.__path__ = [str(path)]
            sys.modules[name] = pkg
    from recurrentgemma import common
    from recurrentgemma.torch import layers, modules

    return layers, modules, common


def reference_hawk(block: HawkBlock):
    """recurrentgemma's ResidualBlock (one head: its block-diagonal gates are then dense) holding
    ``block``'s weights, float64."""
    layers, modules, common = recurrentgemma_torch()
    H, core, mlp = block.H, block.mixer, block.mlp
    E = EXPANSION * H
    ref = modules.ResidualBlock(width=H, mlp_expanded_width=E, num_heads=1, attention_window_size=4,
                                temporal_block_type=common.TemporalBlockType.RECURRENT, lru_width=H,
                                final_w_init_variance_scale=2.0, dtype=F64)
    if isinstance(core.conv, ShortConv):
        conv_w, conv_b = core.conv.conv.weight[:, 0, :].T, core.conv.conv.bias  # w[j] multiplies x_{t−(3−j)}
    else:  # the identity: only the current step, no bias
        conv_w, conv_b = torch.zeros(4, H, dtype=F64), torch.zeros(H, dtype=F64)
        conv_w[-1] = 1.0
    rb = "recurrent_block."
    state = {"temporal_pre_norm.scale": block.mixer_norm.weight, "channel_pre_norm.scale": block.mlp_norm.weight,
             rb + "linear_y.weight": core.linear_y.weight, rb + "linear_y.bias": core.linear_y.bias,
             rb + "linear_x.weight": core.linear_x.weight, rb + "linear_x.bias": core.linear_x.bias,
             rb + "linear_out.weight": core.linear_out.weight, rb + "linear_out.bias": core.linear_out.bias,
             rb + "conv_1d.w": conv_w, rb + "conv_1d.b": conv_b, rb + "rg_lru.a_param": -core.Lambda,
             rb + "rg_lru.a_gate.w": core.gates.weight[:H].T[None], rb + "rg_lru.a_gate.b": core.gates.bias[None, :H],
             rb + "rg_lru.input_gate.w": core.gates.weight[H:].T[None],
             rb + "rg_lru.input_gate.b": core.gates.bias[None, H:],
             "mlp_block.ffw_up.w": mlp.up.weight.view(2, E, H).transpose(1, 2),
             "mlp_block.ffw_up.b": mlp.up.bias.view(2, 1, 1, E),
             "mlp_block.ffw_down.weight": mlp.down.weight, "mlp_block.ffw_down.bias": mlp.down.bias}
    ref.load_state_dict({k: v.detach().clone() for k, v in state.items()}, strict=True)
    return ref, layers


@pytest.mark.parametrize("conv", [True, False])
@pytest.mark.parametrize("D, T", [(12, 7), (8, 1)])
def test_hawk_block_equals_recurrentgemmas_residual_block(monkeypatch, conv, D, T):
    torch.manual_seed(0)
    block = HawkBlock(D, 8, conv).double()
    with torch.no_grad():  # away from the initialisation: norm gains and biases that are not 0
        for p in block.parameters():
            p.add_(0.1 * torch.randn_like(p))
    ref, layers = reference_hawk(block)
    # its scan accumulates in float32 by default (rnn_scan's acc_dtype): float64 here, as everything else
    monkeypatch.setattr(layers, "rnn_scan", partial(layers.rnn_scan, acc_dtype=F64))
    x = torch.randn(3, T, D, dtype=F64)
    segment_pos = torch.arange(T).expand(3, T)  # one document a sequence: position 0 is its start
    with torch.no_grad():
        want, _ = ref(block.proj(x), segment_pos, return_cache=False)
        got = block(x)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_hawk_block_starts_as_recurrentgemma_initialises_its_block():
    layers, modules, common = recurrentgemma_torch()
    H = 128
    torch.manual_seed(1)
    ref = modules.ResidualBlock(width=H, mlp_expanded_width=EXPANSION * H, num_heads=1, attention_window_size=4,
                                temporal_block_type=common.TemporalBlockType.RECURRENT, lru_width=H,
                                final_w_init_variance_scale=2.0)
    block = HawkBlock(H, H)
    core, mlp, rg = block.mixer, block.mlp, ref.recurrent_block
    pairs = {"linear_x": (core.linear_x.weight, rg.linear_x.weight),
             "linear_y": (core.linear_y.weight, rg.linear_y.weight),
             "linear_out": (core.linear_out.weight, rg.linear_out.weight),
             "a_gate": (core.gates.weight[:H], rg.rg_lru.a_gate.w), "input_gate": (core.gates.weight[H:],
                                                                                  rg.rg_lru.input_gate.w),
             "conv": (core.conv.conv.weight, rg.conv_1d.w), "ffw_up": (mlp.up.weight, ref.mlp_block.ffw_up.w),
             "ffw_down": (mlp.down.weight, ref.mlp_block.ffw_down.weight)}
    for name, (ours, theirs) in pairs.items():
        ours, theirs = ours.detach(), theirs.detach()
        assert abs(float(ours.std()) / float(theirs.std()) - 1) < 0.1, name
        assert abs(float(ours.mean())) < 4 * float(theirs.std()) / math.sqrt(ours.numel()), name
    for b in (core.linear_x.bias, core.linear_y.bias, core.linear_out.bias, core.gates.bias, core.conv.conv.bias,
              mlp.up.bias, mlp.down.bias, block.mixer_norm.weight, block.mlp_norm.weight):
        assert not b.any()  # recurrentgemma's biases and norm scales start at 0 (its gain is 1 + scale)
    ours, theirs = F.softplus(-core.Lambda.detach()), F.softplus(rg.rg_lru.a_param.detach())
    lo, hi = -0.5 * math.log(0.999**2 + 1e-8), -0.5 * math.log(0.9**2 + 1e-8)
    for a_param in (ours, theirs):
        assert lo <= float(a_param.min()) and float(a_param.max()) <= hi
    assert abs(float(ours.mean()) - float(theirs.mean())) < 0.01  # the same law: a² ~ U[0.81, 0.998]


def test_hawk_block_scales_no_first_step_as_recurrentgemma_resets_a_document():
    """At a document's first step recurrentgemma's RG-LRU input is i_0 ⊙ x̃_0, not √(1 − a_0²)·i_0 ⊙ x̃_0:
    with a ≈ 1 the full block's first output reads x̃_0 almost whole, the mixer's almost nothing."""
    torch.manual_seed(2)
    block = HawkBlock(8, 8).double()
    with torch.no_grad():
        block.mixer.Lambda.fill_(12.0)  # a = σ(12): √(1 − a^{2cr}) ≈ 0.02
    core = block.mixer
    x = torch.randn(2, 3, 8, dtype=F64)
    with torch.no_grad():
        xt = core.conv(core.linear_x(x))
        _, b_full = lru_coefficients(core.gates, core.Lambda, xt, reset_first=True)
        _, b_mixer = lru_coefficients(core.gates, core.Lambda, xt)
        _, i = torch.sigmoid(core.gates(xt)).chunk(2, dim=-1)
    torch.testing.assert_close(b_full[:, 0], i[:, 0] * xt[:, 0])
    torch.testing.assert_close(b_full[:, 1:], b_mixer[:, 1:])
    assert float((b_mixer[:, 0] / b_full[:, 0]).abs().max()) < 0.1


# ---- a port of flash-linear-attention 0.6.0's GatedDeltaNetBlock forward (fuse_norm = fuse_swiglu = False) ----
# Each function is the torch form of the reference code it names, kept in its input's dtype (the references
# compute in float32) so that the comparison runs in float64.

def fla_rms_norm(x, weight, eps):
    """torch.nn.RMSNorm, the block's attn_norm and mlp_norm with fuse_norm = False."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def fla_short_conv(x, weight):
    """fla/modules/causal_conv1d/ops.py ShortConvolution (an nn.Conv1d, padding K − 1, groups = channels,
    no bias) with its activation 'silu', the first T outputs."""
    y = F.conv1d(x.transpose(1, 2), weight, padding=weight.shape[-1] - 1, groups=x.shape[-1])
    return F.silu(y[..., : x.shape[1]].transpose(1, 2))


def fla_l2norm(x, eps=1e-6):
    """fla/modules/norm/l2norm.py l2norm_fwd_kernel: x · 1/√(Σx² + ε)."""
    return x * (1 / torch.sqrt((x * x).sum(-1, keepdim=True) + eps))


def fla_gate(g, A_log, dt_bias):
    """fla/ops/gated_delta_rule/gate.py naive_gdn_gate: −exp(A_log) · softplus(g + dt_bias)."""
    return -A_log.exp() * F.softplus(g + dt_bias)


def fla_naive_recurrent(q, k, v, beta, g, scale):
    """fla/ops/gated_delta_rule/naive.py naive_recurrent_gated_delta_rule (no initial state), in the
    input's dtype: q, k (B, T, h, K), v (B, T, h, V), beta, g (B, T, h) → o (B, T, h, V)."""
    q, k, v, beta, g = (t.transpose(1, 2) for t in (q, k, v, beta, g))
    B, H, T, K, V = *k.shape, v.shape[-1]
    o, h = v.new_zeros(B, H, T, V), v.new_zeros(B, H, K, V)
    q = q * scale
    for i in range(T):
        h = h * g[:, :, i].exp()[..., None, None]
        b_v = (v[:, :, i] - (h * k[:, :, i, :, None]).sum(-2)) * beta[:, :, i, None]
        h = h + k[:, :, i].unsqueeze(-1) * b_v.unsqueeze(-2)
        o[:, :, i] = torch.einsum("bhd,bhdm->bhm", q[:, :, i], h)
    return o.transpose(1, 2)


def fla_gated_deltanet(p, x, heads, conv, eps):
    """fla/layers/gated_deltanet.py GatedDeltaNet.forward (no cache, no mask; chunk_gated_delta_rule with
    use_qk_l2norm_in_kernel, use_beta_sigmoid_in_kernel and use_gate_in_kernel, default scale K^−½, as
    fla/ops/gated_delta_rule/chunk.py computes it; the output FusedRMSNormGated of
    fla/modules/norm/fused_norm_gate.py, activation 'swish': x̂ · w · g · σ(g))."""
    def lin(name, t):
        return t @ p[name].T

    if conv:
        q, k, v = (fla_short_conv(lin(f"attn.{n}_proj.weight", x), p[f"attn.{n}_conv1d.weight"]) for n in "qkv")
    else:
        q, k, v = (F.silu(lin(f"attn.{n}_proj.weight", x)) for n in "qkv")
    dk = q.shape[-1] // heads
    q, k, v = (t.unflatten(-1, (heads, -1)) for t in (q, k, v))
    beta = torch.sigmoid(lin("attn.b_proj.weight", x))
    g = fla_gate(lin("attn.a_proj.weight", x), p["attn.A_log"], p["attn.dt_bias"])
    o = fla_naive_recurrent(fla_l2norm(q), fla_l2norm(k), v, beta, g, dk**-0.5)
    gate = lin("attn.g_proj.weight", x).unflatten(-1, (heads, -1))
    o = fla_rms_norm(o, p["attn.o_norm.weight"], eps) * gate * torch.sigmoid(gate)
    return lin("attn.o_proj.weight", o.flatten(-2))


def fla_block(p, x, heads, conv, eps=1e-6):
    """fla/models/gated_deltanet/modeling_gated_deltanet.py GatedDeltaNetBlock.forward with fuse_norm = False
    (the layer gets the config's norm_eps), its MLP fla/modules/mlp.py GatedMLP.forward with
    fuse_swiglu = False: down_proj(swiglu(gate_proj x, up_proj x)), swiglu(a, b) = a · σ(a) · b."""
    residual = x
    x = residual + fla_gated_deltanet(p, fla_rms_norm(x, p["attn_norm.weight"], eps), heads, conv, eps)
    h = fla_rms_norm(x, p["mlp_norm.weight"], eps)
    gate, up = h @ p["mlp.gate_proj.weight"].T, h @ p["mlp.up_proj.weight"].T
    return x + (gate * torch.sigmoid(gate) * up) @ p["mlp.down_proj.weight"].T


def fla_params(block: GatedDeltaNetBlock) -> dict:
    """``block``'s weights under the names of fla's GatedDeltaNetBlock state dict."""
    layer, mlp = block.mixer, block.mlp
    a, b = layer.ab.weight.chunk(2, dim=0)
    p = {"attn_norm.weight": block.mixer_norm.weight, "mlp_norm.weight": block.mlp_norm.weight,
         "attn.q_proj.weight": layer.q_proj.weight, "attn.k_proj.weight": layer.k_proj.weight,
         "attn.v_proj.weight": layer.v_proj.weight, "attn.a_proj.weight": a, "attn.b_proj.weight": b,
         "attn.A_log": layer.A_log, "attn.dt_bias": layer.dt_bias, "attn.g_proj.weight": layer.g_proj.weight,
         "attn.o_norm.weight": layer.norm_weight, "attn.o_proj.weight": layer.o_proj.weight,
         "mlp.gate_proj.weight": mlp.gate_proj.weight, "mlp.up_proj.weight": mlp.up_proj.weight,
         "mlp.down_proj.weight": mlp.down_proj.weight}
    if isinstance(layer.q_conv, ShortConv):
        p.update({f"attn.{n}_conv1d.weight": getattr(layer, f"{n}_conv").conv.weight for n in "qkv"})
    return p


@pytest.mark.parametrize("conv", [True, False])
@pytest.mark.parametrize("D, T", [(12, 7), (8, 1)])
def test_gated_deltanet_block_equals_a_port_of_flas_block(conv, D, T):
    torch.manual_seed(0)
    heads = 2
    block = GatedDeltaNetBlock(D, 8, heads, conv).double()
    with torch.no_grad():  # away from the initialisation: norm gains that are not 1, larger weights
        for p in block.parameters():
            p.add_(0.1 * torch.randn_like(p))
    p = fla_params(block)
    proj = sum(q.numel() for q in block.proj.parameters())
    assert sum(t.numel() for t in p.values()) + proj == sum(q.numel() for q in block.parameters())  # all mapped
    x = torch.randn(3, T, D, dtype=F64)
    with torch.no_grad():
        torch.testing.assert_close(block(x), fla_block(p, block.proj(x), heads, conv), rtol=1e-10, atol=1e-12)
        assert block.mixer.norm_eps == 1e-6  # the block's norm_eps reaches the layer's output norm


def test_gated_deltanet_block_starts_as_flas_init_weights():
    torch.manual_seed(3)
    block = GatedDeltaNetBlock(96, 64, 4)
    convs = [m for m in block.modules() if isinstance(m, torch.nn.Conv1d)]
    linears = [m for m in block.modules() if isinstance(m, torch.nn.Linear)]
    assert len(convs) == 3 and len(linears) == 10  # W_in; q, k, v, ab, g, o; the MLP's three
    for m in (*convs, *linears):
        assert m.bias is None and abs(float(m.weight.detach().std()) / 0.02 - 1) < 0.1
    assert torch.equal(block.mixer_norm.weight, torch.ones(64)) and torch.equal(block.mlp_norm.weight, torch.ones(64))
    layer = block.mixer
    assert torch.equal(layer.norm_weight, torch.ones(32))
    A = layer.A_log.detach().exp()
    dt = F.softplus(layer.dt_bias.detach())
    assert float(A.min()) >= 0 and float(A.max()) <= 16 and float(dt.min()) >= 1e-3 - 1e-9 and float(dt.max()) <= 0.1
    assert all(getattr(q, "_optim", None) == {"weight_decay": 0.0} for q in (layer.A_log, layer.dt_bias))


@pytest.mark.parametrize("H, width", [(8, 256), (64, 256), (96, 256), (128, 512), (512, 1536), (2048, 5632)])
def test_the_mlp_width_is_flas_gated_mlp_rule(H, width):
    """fla/modules/mlp.py GatedMLP: int(H · 4 · 2/3) rounded up to a multiple of 256."""
    assert mlp_width(H) == width
    if H <= 128:
        assert GatedDeltaNetBlock(H, H, 4).mlp.up_proj.out_features == width


# ---- fla's own layer and MLP, where flash-linear-attention, fla-core and triton are installed ----

def fla_modules():
    """fla 0.6.0's ``fla.layers.gated_deltanet`` and ``fla.modules.mlp``, skipping unless installed
    (``pip install --no-deps triton==3.9.0 fla-core==0.6.0 flash-linear-attention==0.6.0 einops``: triton
    imports on a CPU, its kernels do not run there). The ``fla`` and ``fla.layers`` packages' ``__init__``
    import every model, which needs transformers: both are entered without running it."""
    pytest.importorskip("triton")
    pytest.importorskip("einops")
    if "fla" not in sys.modules:
        spec = importlib.util.find_spec("fla")
        if spec is None or not (Path(next(iter(spec.submodule_search_locations))) / "layers").is_dir():
            pytest.skip("flash-linear-attention and fla-core are not installed")
        root = Path(next(iter(spec.submodule_search_locations)))
        for name, path in (("fla", root), ("fla.layers", root / "layers")):
            pkg = types.ModuleType(name)
            pkg.__path__ = [str(path)]
            pkg.__version__ = importlib.metadata.version("fla-core")
            sys.modules[name] = pkg
    import fla.layers.gated_deltanet as layer
    import fla.modules.mlp as mlp
    from fla.modules.norm import fused_norm_gate, layernorm_gated
    from fla.ops.gated_delta_rule import gate, naive

    return layer, mlp, fused_norm_gate, layernorm_gated, gate, naive


def cpu_kernels(monkeypatch, layer, mlp, fused_norm_gate, layernorm_gated, gate, naive) -> None:
    """fla's Triton kernels replaced by its own torch references: the gated delta rule by
    ``naive_recurrent_gated_delta_rule`` after ``naive_gdn_gate`` and the kernel's L2 norm and sigmoid,
    the gated output norm by ``layernorm_gated.rms_norm_ref``, SwiGLU and the short convolution written out."""
    def rule(q, k, v, g, beta, use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False,
             use_gate_in_kernel=False, A_log=None, dt_bias=None, scale=None, **_):
        assert use_qk_l2norm_in_kernel and use_beta_sigmoid_in_kernel and use_gate_in_kernel
        g, beta = gate.naive_gdn_gate(g, A_log, dt_bias), torch.sigmoid(beta)
        return naive.naive_recurrent_gated_delta_rule(fla_l2norm(q), fla_l2norm(k), v, beta, g, scale=scale)

    def conv1d(x, weight, bias=None, **_):
        return fla_short_conv(x, weight[:, None]), None

    monkeypatch.setattr(layer, "chunk_gated_delta_rule", rule)
    monkeypatch.setattr(layer, "fused_recurrent_gated_delta_rule", rule)
    monkeypatch.setattr(layer, "causal_conv1d", conv1d)
    monkeypatch.setattr(mlp, "swiglu", lambda a, b: F.silu(a) * b)
    def gated_norm(self, x, g, *_, **__):
        return layernorm_gated.rms_norm_ref(x, self.weight, None, z=g, eps=self.eps)

    monkeypatch.setattr(fused_norm_gate.FusedRMSNormGated, "forward", gated_norm)


@pytest.mark.parametrize("conv", [True, False])
def test_gated_deltanet_block_equals_flas_own_layer_and_mlp_on_their_torch_kernels(monkeypatch, conv):
    modules = fla_modules()
    cpu_kernels(monkeypatch, *modules)
    layer_module, mlp_module = modules[:2]
    torch.manual_seed(0)
    H, heads = 16, 2
    block = GatedDeltaNetBlock(12, H, heads, conv)
    with torch.no_grad():
        for p in block.parameters():
            p.add_(0.1 * torch.randn_like(p))
    p = {k: v.detach().clone() for k, v in fla_params(block).items()}
    attn = layer_module.GatedDeltaNet(hidden_size=H, expand_v=2, head_dim=H // heads, num_heads=heads,
                                      use_short_conv=conv, norm_eps=1e-6).eval()
    attn.load_state_dict({k[5:]: v for k, v in p.items() if k.startswith("attn.")}, strict=True)
    mlp = mlp_module.GatedMLP(H, hidden_ratio=4, fuse_swiglu=False)
    mlp.load_state_dict({k[4:]: v for k, v in p.items() if k.startswith("mlp.")}, strict=True)
    norms = [torch.nn.RMSNorm(H, eps=1e-6) for _ in range(2)]
    for norm, key in zip(norms, ("attn_norm.weight", "mlp_norm.weight")):
        norm.load_state_dict({"weight": p[key]})
    x = torch.randn(3, 7, 12)
    with torch.no_grad():
        u = block.proj(x)
        r = u + attn(norms[0](u))[0]  # GatedDeltaNetBlock.forward with fuse_norm = False
        torch.testing.assert_close(block(x), r + mlp(norms[1](r)), rtol=1e-5, atol=1e-5)
