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
H); its gates are dense H × H (``recurrentgemma``'s are block-diagonal per head). The residual
block around it (RMSNorm, residual, the gated MLP) is not part of the core, as the GRU core is
the cell alone. No recurrent view (the gradient-stability analysis does not run on it).
"""

from __future__ import annotations

from torch import Tensor, nn
from torch.nn import functional as F

from .rglru import initial_lambda, linear_recurrence, lru_coefficients
from .shortconv import short_conv


class HawkCore(nn.Module):
    """Hawk's recurrent block: (B, T, in_dim) → (B, T, H)."""

    def __init__(self, in_dim: int, hidden_size: int, conv: bool = True):
        super().__init__()
        self.H = hidden_size
        self.linear_y = nn.Linear(in_dim, hidden_size)  # the gate branch
        self.linear_x = nn.Linear(in_dim, hidden_size)  # the recurrence branch
        self.conv = short_conv(hidden_size, conv, bias=True)
        self.gates = nn.Linear(hidden_size, 2 * hidden_size)  # the RG-LRU's [W_a; W_x] x̃ + [b_a; b_x]
        self.Lambda = initial_lambda(hidden_size)
        self.linear_out = nn.Linear(hidden_size, hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        y = F.gelu(self.linear_y(x), approximate="tanh")  # (B T H)
        h = linear_recurrence(*lru_coefficients(self.gates, self.Lambda, self.conv(self.linear_x(x))))
        return self.linear_out(h * y)  # (B T H)
