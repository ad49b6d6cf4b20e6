"""The residual block a core's authors ship it in (``model.block: full``, ``--block full``):

    u   = W_in x                      (D → H, no bias; the identity when D = H)
    r   = u + mixer(RMSNorm_1(u))     (the core: H → H)
    out = r + MLP(RMSNorm_2(r))       (a gated MLP: H → H)

— the pre-norm residual block of Griffin/Hawk (``recurrentgemma``'s ``ResidualBlock``, ``models/hawk.py``'s
``HawkBlock``) and of Gated DeltaNet (``fla.models.gated_deltanet``'s ``GatedDeltaNetBlock``,
``models/gdn_layer.py``'s ``GatedDeltaNetBlock``). The references' blocks map a width to itself and
read an embedding of that width; here the encoder's width D (E + P under concat) differs from H, so
an input projection ``W_in`` (its init the reference's rule for a linear layer) makes the residual
stream of width H. One block, no final norm: the model's head reads the residual stream (the
references' models put an RMSNorm before their output layer; posrnn's head is the same for every
core and block). The block is the core: the encoder and the head keep posrnn's own initialisation.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .s4d import no_weight_decay


class RMSNorm(nn.Module):
    """``x / √(mean(x²) + ε) · g`` over the last dim. ``zero_centred``: g = 1 + scale with scale
    initialised to 0 (recurrentgemma's ``RMSNorm``); else g = weight initialised to 1 (fla's, and
    ``torch.nn.RMSNorm``). The gain is not weight-decayed."""

    def __init__(self, width: int, eps: float, zero_centred: bool = False):
        super().__init__()
        self.eps, self.zero_centred = eps, zero_centred
        self.weight = no_weight_decay(nn.Parameter(torch.zeros(width) if zero_centred else torch.ones(width)))

    def forward(self, x: Tensor) -> Tensor:
        g = self.weight + 1 if self.zero_centred else self.weight
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * g


class ResidualBlock(nn.Module):
    """(B, T, in_dim) → (B, T, H): ``W_in``, then ``u + mixer(norm_1(u))``, then ``r + mlp(norm_2(r))``."""

    def __init__(self, in_dim: int, hidden_size: int, mixer: nn.Module, mlp: nn.Module, eps: float,
                 zero_centred: bool = False):
        super().__init__()
        self.H = hidden_size
        self.proj = nn.Linear(in_dim, hidden_size, bias=False) if in_dim != hidden_size else nn.Identity()
        self.mixer_norm = RMSNorm(hidden_size, eps, zero_centred)
        self.mixer = mixer
        self.mlp_norm = RMSNorm(hidden_size, eps, zero_centred)
        self.mlp = mlp

    def forward(self, x: Tensor) -> Tensor:
        u = self.proj(x)
        r = u + self.mixer(self.mixer_norm(u))
        return r + self.mlp(self.mlp_norm(r))  # (B T H)
