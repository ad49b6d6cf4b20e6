"""Hawk's recurrent block: the RG-LRU with the temporal convolution and the gate branch around it
(De et al., 2024, "Griffin: Mixing Gated Linear Recurrences with Local Attention for Efficient
Language Models", §2.4 and its Figure 2(c); the released code is ``recurrentgemma``'s
``RecurrentBlock``), as the ``hawk`` core:

    y   = GeLU(W_y x + b_y)                        (D → H)       the gate branch
    x̃   = Conv_4(W_x x + b_x)                      (D → H)       depthwise causal, width 4, with bias
    h_t = RG-LRU(x̃)_t                              (H)           ``models/rglru.py``'s recurrence
    out = W_out (h ⊙ y) + b_out                     (H → H)

The RG-LRU is the ``rglru`` core's (the recurrence-only form): its gates read x̃, Λ is drawn so
that a^c is uniform in [0.9, 0.999], the √(1 − a_t²) factor applies at every step, and the
square root's derivative is capped as there. GeLU is the tanh approximation, as
``recurrentgemma`` computes it. ``model.conv = False`` (``--no-conv``) puts the identity in the
convolution's place: x̃ = W_x x + b_x.

What differs from the reference block: the block maps the encoder width D to H (Hawk's maps the
model width to itself and widens the recurrence to D_RNN = 4D/3: here the recurrence's width is
H); its gates are dense H × H (``recurrentgemma``'s are block-diagonal per head: this is its
block with one head). With ``model.block = "mixer"`` (the default) the core is this block alone,
as the GRU core is the cell alone, with the ``rglru`` core's initialisation and PyTorch's default
one for the linear layers and the convolution. No recurrent view (the gradient-stability analysis
does not run on it).

``model.block = "full"`` (``--block full``, ``HawkBlock``) runs it as ``recurrentgemma`` ships it
(1.0.1, ``recurrentgemma/torch/modules.py``'s ``ResidualBlock`` of a ``RecurrentBlock`` and an
``MLPBlock``; ``models/blocks.py`` draws the residual block):

    u = W_in x (D → H, no bias; none when D = H)
    r = u + RecurrentBlock(RMSNorm(u)),   out = r + W_down (GeLU(W_g r̂ + b_g) ⊙ (W_v r̂ + b_v)) + b_down,
    r̂ = RMSNorm(r),   W_g, W_v: H → 3H (the expansion factor 3),   W_down: 3H → H

with its RMSNorm (ε = 10⁻⁶, gain 1 + scale, scale initialised to 0), its initialisation (N(0, σ²)
with σ² = 1/H for W_x, W_y, W_g, W_v and the RG-LRU's gates, 2/H for W_out and 2/(3H) for W_down:
Griffin's final_w_init_variance_scale = 2 / layers with one layer; the convolution's weights
N(0, 0.01/4); every bias 0; Λ = −a_param with softplus(a_param) = −½ log u, u ~ U[0.81, 0.998], so
a = σ(Λ) has a² uniform in [0.81, 0.998]) and its document start: step 0 is a segment's position
0, where the RG-LRU's input is not scaled by √(1 − a_0²) (its a_0 multiplies h_0 = 0). The
convolution's document mask changes nothing within one sequence (a posrnn sequence is one
document). W_in is not the reference's (its block reads an embedding of its own width): it is
initialised as recurrentgemma initialises a linear layer, N(0, 1/D). A test loads the block's
weights into ``recurrentgemma``'s ``ResidualBlock`` (one head) and compares the outputs in float64.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .blocks import ResidualBlock
from .rglru import initial_lambda, linear_recurrence, lru_coefficients
from .shortconv import WIDTH, ShortConv, short_conv

#: recurrentgemma's RMSNorm ε
NORM_EPS = 1e-6
#: the width of the gated MLP's hidden layer over H (recurrentgemma's mlp_expanded_width = 3 · width)
EXPANSION = 3
#: Griffin's final_w_init_variance_scale, 2 / layers, with one layer
FINAL_SCALE = 2.0
#: recurrentgemma's Conv1D w_init_variance_scale
CONV_SCALE = 0.01


class HawkCore(nn.Module):
    """Hawk's recurrent block: (B, T, in_dim) → (B, T, H)."""

    def __init__(self, in_dim: int, hidden_size: int, conv: bool = True, reset_first: bool = False):
        super().__init__()
        self.H, self.reset_first = hidden_size, reset_first
        self.linear_y = nn.Linear(in_dim, hidden_size)  # the gate branch
        self.linear_x = nn.Linear(in_dim, hidden_size)  # the recurrence branch
        self.conv = short_conv(hidden_size, conv, bias=True)
        self.gates = nn.Linear(hidden_size, 2 * hidden_size)  # the RG-LRU's [W_a; W_x] x̃ + [b_a; b_x]
        self.Lambda = initial_lambda(hidden_size)
        self.linear_out = nn.Linear(hidden_size, hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        y = F.gelu(self.linear_y(x), approximate="tanh")  # (B T H)
        h = linear_recurrence(*lru_coefficients(self.gates, self.Lambda, self.conv(self.linear_x(x)), self.reset_first))
        return self.linear_out(h * y)  # (B T H)


class GeluMLP(nn.Module):
    """recurrentgemma's ``MLPBlock``: ``W_down (GeLU(W_g x + b_g) ⊙ (W_v x + b_v)) + b_down``,
    hidden width ``EXPANSION · H``; ``up`` holds [W_g; W_v]."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.up = nn.Linear(hidden_size, 2 * EXPANSION * hidden_size)
        self.down = nn.Linear(EXPANSION * hidden_size, hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        gate, value = self.up(x).chunk(2, dim=-1)
        return self.down(F.gelu(gate, approximate="tanh") * value)


def griffin_a_param(width: int) -> Tensor:
    """recurrentgemma's ``rnn_param_init``: u ~ U[0.9² + 10⁻⁸, 0.999² + 10⁻⁸], a_param = softplus⁻¹(−½ log u)."""
    u = torch.empty(width).uniform_(0.9**2 + 1e-8, 0.999**2 + 1e-8)
    return torch.log(torch.exp(-0.5 * torch.log(u)) - 1.0)


def _normal(w: Tensor, variance: float) -> None:
    nn.init.normal_(w, mean=0.0, std=math.sqrt(variance))


class HawkBlock(ResidualBlock):
    """Hawk's residual block (``model.block = "full"``): (B, T, in_dim) → (B, T, H), initialised as
    ``recurrentgemma`` initialises it (the module docstring)."""

    def __init__(self, in_dim: int, hidden_size: int, conv: bool = True):
        H = hidden_size
        super().__init__(in_dim, H, HawkCore(H, H, conv, reset_first=True), GeluMLP(H), NORM_EPS, zero_centred=True)
        core, mlp = self.mixer, self.mlp
        with torch.no_grad():
            if isinstance(self.proj, nn.Linear):
                _normal(self.proj.weight, 1 / in_dim)
            for lin, variance in ((core.linear_x, 1 / H), (core.linear_y, 1 / H), (core.gates, 1 / H),
                                  (core.linear_out, FINAL_SCALE / H), (mlp.up, 1 / H),
                                  (mlp.down, FINAL_SCALE / (EXPANSION * H))):
                _normal(lin.weight, variance)
                lin.bias.zero_()
            if isinstance(core.conv, ShortConv):
                _normal(core.conv.conv.weight, CONV_SCALE / WIDTH)
                core.conv.conv.bias.zero_()
            core.Lambda.copy_(-griffin_a_param(H))  # softplus(−Λ) = softplus(a_param)
