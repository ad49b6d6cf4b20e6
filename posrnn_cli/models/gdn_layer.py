"""Gated DeltaNet's full layer, as its authors ship it (Yang, Kautz & Hatamizadeh, ICLR 2025,
"Gated Delta Networks: Improving Mamba2 with Delta Rule", §3 and their Figure 1's block; the
released layer is ``fla.layers.GatedDeltaNet``, which NVlabs/GatedDeltaNet builds on).

With h = ``model.heads`` heads of key width d_k = H / h and value width d_v = 2·d_k (the
layer's ``expand_v = 2``):

    q, k = SiLU(Conv_4(W_q x)), SiLU(Conv_4(W_k x))     (D → H each, no bias; depthwise causal, no bias)
    v    = SiLU(Conv_4(W_v x))                          (D → h·d_v = 2H)
    q, k ← q / √(‖q‖² + ε), k / √(‖k‖² + ε)  per head   (ε = 10⁻⁶); q ← q · d_k^{−½}
    α_t = exp(−exp(A_log) · softplus(w_α·x_t + dt_bias)),  β_t = σ(w_β·x_t)     (one each per head)
    S_t = S_{t−1} (α_t (I − β_t k_t k_tᵀ)) + β_t v_t k_tᵀ,  o_t = S_t q_t          (S_t: d_v × d_k)
    y_t = W_o [RMSNorm(o_t) ⊙ w ⊙ SiLU(W_g x_t)]  per head (RMS over d_v, ε = 10⁻⁵; W_g: D → 2H)

— the recurrence is ``GatedDeltaNetCore``'s (``models/gated_deltanet.py``, the recurrence-only
form, registered as ``gated_deltanet``); this layer adds the three short convolutions, the
wider value head, the output gate and the per-head norm (the ``gated_deltanet_layer`` core).
``model.conv = False`` (``--no-conv``) puts the identity in each convolution's place and keeps
the SiLU after it, which is what the released layer does with ``use_short_conv = False``.

What differs from the released layer: the core maps the encoder width D to H (the layer maps a
width to itself); its keys span H in all (d_k = H / heads; fla's configurations take
num_heads · head_dim = 0.75 · hidden_size, its default 6 heads of 256); and its training path is
the sequential recurrence, not the chunked WY form (Triton kernels only, no CPU). With
``model.block = "mixer"`` (the default) the core is the layer alone, as the GRU core is the cell
alone, its linear layers and convolutions under PyTorch's default initialisation. No recurrent
view (the gradient-stability analysis does not run on it).

``model.block = "full"`` (``--block full``, ``GatedDeltaNetBlock``) runs it as
``flash-linear-attention`` ships it (0.6.0, ``fla/models/gated_deltanet/modeling_gated_deltanet.py``'s
``GatedDeltaNetBlock`` with ``fuse_norm = fuse_swiglu = False``; ``models/blocks.py`` draws the
residual block):

    u = W_in x (D → H, no bias; none when D = H)
    r = u + GatedDeltaNet(RMSNorm(u)),   out = r + W_down (SiLU(W_gate r̂) ⊙ W_up r̂),   r̂ = RMSNorm(r)

with the block's ε = 10⁻⁶ in both RMSNorms (gain initialised to 1) and in the layer's output norm
(the block passes its ``norm_eps`` to the layer), the MLP's hidden width fla's ``GatedMLP`` rule
(hidden_ratio 4: ⌈int(8H/3) / 256⌉ · 256, so 256 at H ≤ 96) and no biases, and fla's
``_init_weights``: every linear layer and convolution (W_in included) N(0, 0.02) (no biases to
zero), A_log and dt_bias as the layer draws them (the same law as ``decay_parameters``), neither
weight-decayed. The embedding's N(0, 0.02) is not taken over: the encoder is posrnn's for every
core. A test checks the block against a port of the released block's forward (its recurrence on
CPU is fla's ``naive_recurrent_gated_delta_rule``; the layer's own kernels are Triton's) in float64,
and, where fla and triton are installed, against fla's own layer and MLP holding its weights, their
kernels swapped for fla's torch references.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .blocks import ResidualBlock
from .gated_deltanet import GatedDeltaNetCore, decay_parameters, l2_normalise
from .shortconv import short_conv

#: the value head's width over the key head's (fla's ``expand_v``)
EXPAND_V = 2
#: the ε of the output RMSNorm (the layer's own default ``norm_eps``)
NORM_EPS = 1e-5
#: the ε of the full block's RMSNorms and of its layer's output norm (``GatedDeltaNetConfig.norm_eps``)
BLOCK_NORM_EPS = 1e-6
#: the std of fla's ``_init_weights`` for linear layers and convolutions (``initializer_range``)
INIT_STD = 0.02
#: fla's ``GatedMLP``: hidden_ratio, and the multiple its hidden width is rounded up to
HIDDEN_RATIO, MULTIPLE = 4, 256


class GatedDeltaNetLayer(nn.Module):
    """Gated DeltaNet's layer: (B, T, in_dim) → (B, T, H); ``heads`` must divide H."""

    def __init__(self, in_dim: int, hidden_size: int, heads: int, conv: bool = True, norm_eps: float = NORM_EPS):
        super().__init__()
        self.norm_eps = norm_eps
        if hidden_size % heads:
            raise ValueError(f"heads ({heads}) must divide hidden_size ({hidden_size})")
        self.H, self.heads, self.dk = hidden_size, heads, hidden_size // heads
        self.dv, vdim = EXPAND_V * self.dk, EXPAND_V * hidden_size
        self.q_proj = nn.Linear(in_dim, hidden_size, bias=False)
        self.k_proj = nn.Linear(in_dim, hidden_size, bias=False)
        self.v_proj = nn.Linear(in_dim, vdim, bias=False)
        self.q_conv, self.k_conv = short_conv(hidden_size, conv), short_conv(hidden_size, conv)
        self.v_conv = short_conv(vdim, conv)
        self.ab = nn.Linear(in_dim, 2 * heads, bias=False)  # [w_α; w_β] per head
        self.A_log, self.dt_bias = decay_parameters(heads)
        self.g_proj = nn.Linear(in_dim, vdim, bias=False)
        self.norm_weight = nn.Parameter(torch.ones(self.dv))
        self.norm_weight._optim = {"weight_decay": 0.0}
        self.o_proj = nn.Linear(vdim, hidden_size, bias=False)

    def inputs(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """q, k (B, T, heads, d_k), v (B, T, heads, d_v), α, β (B, T, heads) of x (B, T, in_dim)."""
        q = F.silu(self.q_conv(self.q_proj(x))).unflatten(-1, (self.heads, self.dk))
        k = F.silu(self.k_conv(self.k_proj(x))).unflatten(-1, (self.heads, self.dk))
        v = F.silu(self.v_conv(self.v_proj(x))).unflatten(-1, (self.heads, self.dv))
        a, b = self.ab(x).chunk(2, dim=-1)
        alpha = torch.exp(-torch.exp(self.A_log) * F.softplus(a + self.dt_bias))
        return l2_normalise(q) * self.dk**-0.5, l2_normalise(k), v, alpha, torch.sigmoid(b)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v, alpha, beta = self.inputs(x)
        S = x.new_zeros(x.shape[0], self.heads, self.dv, self.dk)
        outs = []
        for t in range(x.shape[1]):
            o, S = GatedDeltaNetCore.update(S, q[:, t], k[:, t], v[:, t], alpha[:, t], beta[:, t])
            outs.append(o)
        o = torch.stack(outs, 1)  # (B T heads d_v)
        o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + self.norm_eps) * self.norm_weight
        g = F.silu(self.g_proj(x)).unflatten(-1, (self.heads, self.dv))
        return self.o_proj((o * g).flatten(-2))  # (B T H)


def mlp_width(hidden_size: int) -> int:
    """fla's ``GatedMLP`` hidden width: int(H · hidden_ratio · 2/3) rounded up to a multiple of 256."""
    n = int(hidden_size * HIDDEN_RATIO * 2 / 3)
    return MULTIPLE * ((n + MULTIPLE - 1) // MULTIPLE)


class SwiGLU(nn.Module):
    """fla's ``GatedMLP`` (``hidden_act = "swish"``): ``W_down (SiLU(W_gate x) ⊙ W_up x)``, no biases."""

    def __init__(self, hidden_size: int):
        super().__init__()
        width = mlp_width(hidden_size)
        self.gate_proj = nn.Linear(hidden_size, width, bias=False)
        self.up_proj = nn.Linear(hidden_size, width, bias=False)
        self.down_proj = nn.Linear(width, hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class GatedDeltaNetBlock(ResidualBlock):
    """Gated DeltaNet's residual block (``model.block = "full"``): (B, T, in_dim) → (B, T, H),
    initialised as fla's ``_init_weights`` does (the module docstring)."""

    def __init__(self, in_dim: int, hidden_size: int, heads: int, conv: bool = True):
        H = hidden_size
        super().__init__(in_dim, H, GatedDeltaNetLayer(H, H, heads, conv, norm_eps=BLOCK_NORM_EPS), SwiGLU(H),
                         BLOCK_NORM_EPS)
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Conv1d)):
                    nn.init.normal_(m.weight, mean=0.0, std=INIT_STD)
                    if m.bias is not None:
                        m.bias.zero_()
