"""minGRU: the minimal GRU of Feng et al. (2024), "Were RNNs All We Needed?", as a posrnn core.

Its gates read the input only (§3.1), so the recurrence is linear in h and can be trained with
a parallel scan:

    z_t = σ(W_z x_t + b_z),   h̃_t = g(W_h x_t + b_h),   h_t = (1 − z_t) ⊙ h_{t−1} + z_t ⊙ h̃_t,   h_0 = 0,

in the log space of their appendix B.3.1: ``g(v) = v + ½`` for v ≥ 0 and ``σ(v)`` otherwise
keeps h̃ (so h) positive, and with ``log(1 − z) = −softplus(k)``, ``log z = −softplus(−k)`` the
recurrence is ``h_t = a_t h_{t−1} + b_t`` with ``log a_t = log(1 − z_t)``, ``log b_t = log z_t + log h̃_t``.

The training path (``forward``) is a parallel scan over that pair in log space: ⌈log₂ T⌉ rounds
of the Hillis–Steele scan, round k combining each step with the one 2^k before it,

    log b_t ← logaddexp(log b_t, log a_t + log b_{t−2^k}),   log a_t ← log a_t + log a_{t−2^k},

so log b_t ends as log h_t. Feng et al. write the same scan with Heinsen's cumulative sums
(``logcumsumexp``); on CPU torch's ``logcumsumexp`` and its backward took 3.3× longer at
T = 16, a whole training step 1.9× (2-core AMD EPYC, 2026-11-24); the result is the same to
rounding. The recurrent view steps the first equation one input at a time
(``initial_state``/``state_after``/``output_from_state``: the state is h itself, width H), for inference and the
gradient-stability analysis; a test checks the two agree.

Written here rather than taken from ``mingru-pytorch`` (0.2.1): its layer maps a width to the
same width (an encoder width D = E + P would need a projection before or after it that the
model of the paper does not have), its gate and candidate projections have no bias, and it adds
an ``einops`` dependency for the ten lines of maths above. Its step mode is the same equation.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .stepped import SteppedView


def g(v: Tensor) -> Tensor:
    """The positive activation of the log-space minGRU: v + ½ (v ≥ 0), σ(v) (v < 0)."""
    return torch.where(v >= 0, v + 0.5, torch.sigmoid(v))


def log_g(v: Tensor) -> Tensor:
    """log g(v), computed without forming g where it would underflow."""
    return torch.where(v >= 0, torch.log(F.relu(v) + 0.5), -F.softplus(-v))


def log_scan(log_a: Tensor, log_b: Tensor) -> Tensor:
    """log h_t for ``h_t = a_t h_{t−1} + b_t``, h_0 = 0, over dim 1, from log a and log b (B, T, H):
    the Hillis–Steele parallel scan in log space (⌈log₂ T⌉ rounds; steps t < 2^k are final)."""
    T, k = log_a.shape[1], 1
    while k < T:
        log_b = torch.cat([log_b[:, :k], torch.logaddexp(log_b[:, k:], log_a[:, k:] + log_b[:, :-k])], dim=1)
        log_a = torch.cat([log_a[:, :k], log_a[:, k:] + log_a[:, :-k]], dim=1)
        k *= 2
    return log_b


class MinGRUCore(SteppedView, nn.Module):
    """One minGRU layer: (B, T, in_dim) → all hidden states (B, T, H)."""

    state_is_output = True  # step(h, x) returns h: the state is the output

    def __init__(self, in_dim: int, hidden_size: int):
        super().__init__()
        self.in_dim, self.H = in_dim, hidden_size
        self.linear = nn.Linear(in_dim, 2 * hidden_size)  # [W_z; W_h] x + [b_z; b_h]

    def forward(self, x: Tensor) -> Tensor:
        k, v = self.linear(x).chunk(2, dim=-1)  # (B T H) gate and candidate pre-activations
        log_a = -F.softplus(k)  # (B T H)  log(1 − z_t)
        log_b = -F.softplus(-k) + log_g(v)  # (B T H)  log(z_t h̃_t)
        return torch.exp(log_scan(log_a, log_b))  # (B T H)

    # ---- the recurrent view -------------------------------------------------------------------
    @property
    def hidden_size(self) -> int:
        return self.H

    @property
    def state_dim(self) -> int:
        return self.H

    def step(self, h: Tensor, x: Tensor) -> Tensor:
        """h_t from h_{t−1} (B, H) and x_t (B, in_dim)."""
        k, v = self.linear(x).chunk(2, dim=-1)
        return torch.lerp(h, g(v), torch.sigmoid(k))  # (1 − z) h + z h̃
