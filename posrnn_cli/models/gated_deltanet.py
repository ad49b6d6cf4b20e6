"""Gated DeltaNet: the gated delta rule of Yang, Kautz & Hatamizadeh (ICLR 2025, "Gated Delta
Networks: Improving Mamba2 with Delta Rule"), as a posrnn core.

Per head (``model.heads`` of them, head dim d = H / heads; the state S_t is d × d, values by keys),
the gated delta rule of §3.1,

    S_t = S_{t−1} (α_t (I − β_t k_t k_tᵀ)) + β_t v_t k_tᵀ,   o_t = S_t q_t,   S_0 = 0,

i.e. decay the memory by α_t, then move its read-out at k_t a fraction β_t of the way to v_t:
``S ← α_t S;  S ← S + β_t (v_t − S k_t) k_tᵀ``. With the parametrisation of the authors'
released layer (``fla.layers.GatedDeltaNet``, which NVlabs/GatedDeltaNet builds on):

    q, k, v = SiLU(W_q x_t), SiLU(W_k x_t), SiLU(W_v x_t)      (D → H each, no bias; split into heads)
    q, k   ← q / √(‖q‖² + ε), k / √(‖k‖² + ε)                  (L2 normalisation, ε = 10⁻⁶)
    α_t = exp(−exp(A_log) · softplus(w_α·x_t + dt_bias))      (one per head, Mamba2's decay)
    β_t = σ(w_β·x_t)                                          (one per head)
    out = W_o [o_t per head] · d^{−½}                         (H → H, no bias)

A_log and dt_bias are initialised as there (A ~ U[0, 16], dt log-uniform in [0.001, 0.1]) and
are not weight-decayed. The d^{−½} is the kernels' default query scale (the paper writes
o_t = S_t q_t; a constant before W_o changes the initial scale only). As the RG-LRU core is the
recurrence alone, the layer's short causal convolutions on q, k, v (SiLU applied directly, as the
layer does when they are off), its output RMSNorm and SiLU output gate and its wider value head
(d_v = 2·d) are left out: this is the recurrence-only form (the ``gated_deltanet`` core); the
full layer is ``models/gdn_layer.py`` (the ``gated_deltanet_layer`` core).

The training path (``forward``) is the reference sequential recurrence over T: the chunked
parallel form (the paper's WY representation) exists in maintained implementations only as
Triton kernels, which do not run on a CPU. The recurrent view (``step``, ``initial_state``,
``state_after``, ``output_from_state``) uses the same update; the state z is S flattened,
width ``state_dim = heads · d² = H² / heads``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .s4d import no_weight_decay
from .stepped import SteppedView

#: the ε of the L2 normalisation of q and k (fla's l2norm)
EPS = 1e-6


def l2_normalise(x: Tensor) -> Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + EPS)


def decay_parameters(heads: int) -> tuple[nn.Parameter, nn.Parameter]:
    """A_log and dt_bias, one per head, initialised as the released layer does (A ~ U[0, 16], dt
    log-uniform in [0.001, 0.1], dt_bias = softplus⁻¹(dt)); neither is weight-decayed."""
    A_log = no_weight_decay(nn.Parameter(torch.log(torch.empty(heads).uniform_(0, 16))))
    dt = torch.exp(torch.rand(heads) * (math.log(0.1) - math.log(0.001)) + math.log(0.001)).clamp_min(1e-4)
    return A_log, no_weight_decay(nn.Parameter(dt + torch.log(-torch.expm1(-dt))))


class GatedDeltaNetCore(SteppedView, nn.Module):
    """One gated-delta-rule layer: (B, T, in_dim) → (B, T, H); ``heads`` must divide H."""

    def __init__(self, in_dim: int, hidden_size: int, heads: int):
        super().__init__()
        if hidden_size % heads:
            raise ValueError(f"heads ({heads}) must divide hidden_size ({hidden_size})")
        self.in_dim, self.H, self.heads, self.d = in_dim, hidden_size, heads, hidden_size // heads
        self.qkv = nn.Linear(in_dim, 3 * hidden_size, bias=False)  # [W_q; W_k; W_v]
        self.ab = nn.Linear(in_dim, 2 * heads, bias=False)  # [w_α; w_β] per head
        self.A_log, self.dt_bias = decay_parameters(heads)
        self.out = nn.Linear(hidden_size, hidden_size, bias=False)  # W_o

    def inputs(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """q, k, v (..., heads, d) and α, β (..., heads) of the inputs x (..., in_dim)."""
        q, k, v = F.silu(self.qkv(x)).unflatten(-1, (3, self.heads, self.d)).unbind(-3)
        a, b = self.ab(x).chunk(2, dim=-1)
        alpha = torch.exp(-torch.exp(self.A_log) * F.softplus(a + self.dt_bias))
        return l2_normalise(q), l2_normalise(k), v, alpha, torch.sigmoid(b)

    @staticmethod
    def update(S: Tensor, q: Tensor, k: Tensor, v: Tensor, alpha: Tensor, beta: Tensor) -> tuple[Tensor, Tensor]:
        """One gated delta step: S_{t−1} (B, heads, d, d) and step t's inputs → (o_t (B, heads, d), S_t)."""
        S = alpha[..., None, None] * S
        err = beta[..., None] * (v - (S * k[..., None, :]).sum(-1))  # β_t (v_t − α_t S_{t−1} k_t)
        S = torch.addcmul(S, err[..., :, None], k[..., None, :])
        return (S * q[..., None, :]).sum(-1), S  # S·k, S·q as sums: 1.4–1.7× faster than @ on a CPU, d 18–64

    def read_out(self, o: Tensor) -> Tensor:
        """W_o · d^{−½} · [o per head]: (..., heads, d) → (..., H)."""
        return self.out(o.flatten(-2) * self.d**-0.5)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v, alpha, beta = self.inputs(x)  # (B T heads d) ×3, (B T heads) ×2
        S = x.new_zeros(x.shape[0], self.heads, self.d, self.d)
        outs = []
        for t in range(x.shape[1]):
            o, S = self.update(S, q[:, t], k[:, t], v[:, t], alpha[:, t], beta[:, t])
            outs.append(o)
        return self.read_out(torch.stack(outs, 1))  # (B T H)

    # ---- the recurrent view -------------------------------------------------------------------
    @property
    def state_dim(self) -> int:
        """Width of z = S flattened: heads · d²."""
        return self.heads * self.d * self.d

    def step(self, z: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        """One recurrent step: state z (B, state_dim), input x (B, in_dim) → (output (B, H), z')."""
        o, S = self.update(z.reshape(-1, self.heads, self.d, self.d), *self.inputs(x))
        return self.read_out(o), S.flatten(1)
