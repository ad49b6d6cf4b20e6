"""Mamba: one selective state-space block (Gu & Dao, 2023), as a posrnn core.

The block is ``mambapy``'s ``MambaBlock`` (pure PyTorch, CPU and GPU; an optional extra:
``pip install 'posrnn[mamba]'``): with E = 2 the expansion and N = ``model.state_size``,

    [x; z] = in_proj(u)                          (B, T, 2·E·H)
    x      = SiLU(depthwise causal Conv1d_4(x))  (B, T, E·H)
    Δ, B, C = softplus(dt_proj(·)), ·, ·  of x_proj(x)   — all input-dependent (the selection)
    h_t = exp(Δ_t A) ⊙ h_{t−1} + Δ_t B_t x_t,   y_t = C_t h_t + D x_t        (h_t: E·H × N)
    out = out_proj(y ⊙ SiLU(z))                  (B, T, H)

Training runs the block's parallel (Blelloch) scan. The only change to the package's block is
its ``in_proj``, built here from the encoder width D (= E + P for a concatenated PE) instead of
H, so the core maps (B, T, D) → (B, T, H) without an extra projection, as the RNN cores do.
No residual connection or norm: the core is the block alone, as the GRU core is the cell alone.

``model.conv = False`` (``--no-conv``) takes the convolution out: the x branch goes from ``in_proj``
straight to SiLU, so no step of the block mixes neighbouring inputs before the selective scan
(the convolution is what Mamba's order asymmetry has been traced to; ``d_conv = 1`` and an
identity in its place, so the state holds no conv inputs).

Recurrent view (gradient stability, the papers' 001 §3.3/002 §3): the block's state after a
step is the SSM state h (E·H × N) **and** the last d_conv − 1 = 3 pre-convolution inputs the
causal convolution still reads (E·H × 3). Both are flattened into z (width
``state_dim = E·H·(N + 3)``); ``initial_state`` gives z_1, ``state_after`` the state after a
prefix, and ``output_from_state`` runs the package's ``step`` from a state over the inputs after it, so ∂h_T/∂z_1 is
taken through the recurrent step itself. ``mambapy`` was kept because that step is exactly what the analysis
needs: a per-token update whose state is an ordinary differentiable tensor.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..common.errors import PosrnnError
from .s4d import no_weight_decay
from .stepped import SteppedView

#: the install line a missing extra names (the --no-deps keeps pip from swapping the CPU torch)
INSTALL = "pip install --no-deps mambapy==1.2.0  (or: pip install 'posrnn[mamba]')"


def require_mambapy():
    """``mambapy.mamba``, or a one-line error naming the install command."""
    try:
        from mambapy import mamba
    except ImportError:
        raise PosrnnError(f"the mamba core needs the mambapy package: {INSTALL}") from None
    return mamba


class MambaCore(SteppedView, nn.Module):
    """One Mamba block: (B, T, in_dim) → (B, T, H); ``state_size`` is d_state (N)."""

    def __init__(self, in_dim: int, hidden_size: int, state_size: int = 16, expand: int = 2, d_conv: int = 4,
                 conv: bool = True):
        super().__init__()
        mamba = require_mambapy()
        d_conv = d_conv if conv else 1
        self.config = mamba.MambaConfig(d_model=hidden_size, n_layers=1, d_state=state_size, expand_factor=expand,
                                        d_conv=d_conv, pscan=True)
        self.block = mamba.MambaBlock(self.config)
        self.block.in_proj = nn.Linear(in_dim, 2 * self.config.d_inner, bias=self.config.bias)  # D → 2·E·H
        if not conv:
            self.block.conv1d = nn.Identity()  # forward and step slice its output at d_conv − 1 = 0: x itself
        no_weight_decay(self.block.A_log)  # as Mamba's reference code: A_log and D are not decayed
        no_weight_decay(self.block.D)
        self.in_dim, self.H, self.N, self.d_inner, self.d_conv = (in_dim, hidden_size, state_size,
                                                                  self.config.d_inner, d_conv)

    def forward(self, x: Tensor) -> Tensor:
        return self.block(x)  # (B T H), the parallel scan

    # ---- the recurrent view -------------------------------------------------------------------
    @property
    def state_dim(self) -> int:
        """Width of z = [h; conv inputs]: E·H·N + E·H·(d_conv − 1)."""
        return self.d_inner * (self.N + self.d_conv - 1)

    def _split(self, z: Tensor) -> tuple[Tensor, Tensor]:
        """z (B, state_dim) → h (B, E·H, N), conv inputs (B, E·H, d_conv − 1)."""
        n_h, B = self.d_inner * self.N, z.shape[0]
        return z[:, :n_h].reshape(B, self.d_inner, self.N), z[:, n_h:].reshape(B, self.d_inner, self.d_conv - 1)

    @staticmethod
    def _join(h: Tensor, inputs: Tensor) -> Tensor:
        return torch.cat([h.flatten(1), inputs.flatten(1)], dim=1)  # (B state_dim)

    def step(self, z: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        """One recurrent step: state z (B, state_dim), input x (B, in_dim) → (output (B, H), z')."""
        y, (h, inputs) = self.block.step(x, self._split(z))
        # the package appends this input to the cache; without the convolution the cache holds none
        return y, self._join(h, inputs[:, :, inputs.shape[2] - (self.d_conv - 1):])
