"""RG-LRU: the Real-Gated Linear Recurrent Unit of Griffin and Hawk (De et al., 2024, "Griffin:
Mixing Gated Linear Recurrences with Local Attention for Efficient Language Models", §2.4), as a
posrnn core.

The input is first projected to the width H, ``x̃_t = W x_t + b`` (D → H), then the RG-LRU runs
on width H (eqs. 1–4 of §2.4):

    r_t = σ(W_a x̃_t + b_a),   i_t = σ(W_x x̃_t + b_x),   a_t = a^{c·r_t},   a = σ(Λ),   c = 8,
    h_t = a_t ⊙ h_{t−1} + √(1 − a_t²) ⊙ (i_t ⊙ x̃_t),   h_0 = 0,

with ``a_t`` computed in log space, ``log a_t = −c·softplus(−Λ)·r_t``, and ``√(1 − a_t²)`` as
``√(−expm1(2 log a_t))``. Λ is initialised so that ``a^c`` is uniform in [0.9, 0.999], as the
paper says. The core is the RG-LRU layer alone, as the GRU core is the cell alone (the
recurrence-only form, registered as ``rglru``): Hawk's recurrent block around it (the GeLU gating
branch, the width-4 temporal convolution, the output projection) is the ``hawk`` core
(``models/hawk.py``); the residual, the norm and the MLP block are in neither.

One detail follows the authors' released code (``recurrentgemma``) where the paper is silent:
the derivative of the square root is capped at 1000 (their ``SqrtBoundDerivative``: where
r_t → 0, a_t → 1 and d√u/du = 1/(2√u) would overflow). Where that code differs from the paper,
this core follows the paper: the gate weights are dense H × H matrices as the equations write
them (recurrentgemma's are block-diagonal, one block per head); the factor √(1 − a_t²) applies
at every step as in eq. 4 (recurrentgemma leaves a document's first token unscaled, as the
``hawk`` core's full block does: ``lru_coefficients``'s ``reset_first``); and a^c,
not a, is drawn uniform in [0.9, 0.999] (recurrentgemma draws a with a² uniform in
[0.81, 0.998], so its a^c starts in [0.43, 0.992]).

The recurrence is linear in h, ``h_t = a_t h_{t−1} + b_t``, but b_t can be negative, so
minGRU's log-space scan (``mingru.log_scan``, which needs b_t > 0) does not apply. The training
path (``forward``) computes a_t and b_t for all steps at once and then runs the recurrence as a
sequential loop over T: at the lengths used here a Hillis–Steele scan in linear space was
slower on a CPU (forward and backward of the recurrence alone at B = 128, H = 96: 12 ms for the
loop, 17 ms for the scan at T = 16, the two level at T = 64; 2-core AMD EPYC, 2026-11-27). The
recurrent view (``step``, ``initial_state``, ``state_after``, ``output_from_state``: the state
is h, width H) steps the same equation one input at a time, for the gradient-stability
analysis; a test checks both against the equations written out from the raw parameters.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .stepped import SteppedView

#: c, the constant of a_t = a^{c·r_t} (Griffin §2.4)
C = 8.0
#: the cap on d√u/du (recurrentgemma's max_sqrt_gradient)
MAX_SQRT_GRADIENT = 1000.0


class SqrtBoundedGrad(torch.autograd.Function):
    """√u whose derivative 1/(2√u) is capped at ``MAX_SQRT_GRADIENT`` (u ≥ 0)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(u: Tensor) -> Tensor:
        return torch.sqrt(u)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        (u,) = ctx.saved_tensors
        return grad / torch.sqrt((4 * u).clamp_min(1 / MAX_SQRT_GRADIENT**2))


def initial_lambda(H: int) -> nn.Parameter:
    """Λ = logit(a) with a^c ~ U[0.9, 0.999] (Griffin §2.4)."""
    a = torch.empty(H).uniform_(0.9, 0.999) ** (1 / C)
    return nn.Parameter(torch.log(a) - torch.log1p(-a))


def lru_coefficients(gates: nn.Linear, Lambda: Tensor, xt: Tensor, reset_first: bool = False) -> tuple[Tensor, Tensor]:
    """a_t and b_t = √(1 − a_t²) ⊙ i_t ⊙ x̃_t of the RG-LRU's ``h_t = a_t h_{t−1} + b_t`` from its
    input x̃ (..., H), its gates ``[W_a; W_x] x̃ + [b_a; b_x]`` and Λ: 2 × (..., H). ``reset_first``
    (x̃ of shape (B, T, H)): step 0 is a document's first, which ``recurrentgemma``'s RG-LRU leaves
    unscaled (its factor is 1 there, and h_0 = 0 makes a_0 irrelevant)."""
    r, i = torch.sigmoid(gates(xt)).chunk(2, dim=-1)
    log_a = -C * F.softplus(-Lambda) * r  # log a_t = c·r_t·log σ(Λ)
    scale = SqrtBoundedGrad.apply(-torch.expm1(2 * log_a))
    if reset_first:
        scale = torch.cat([torch.ones_like(scale[:, :1]), scale[:, 1:]], 1)
    return torch.exp(log_a), scale * (i * xt)


def linear_recurrence(a: Tensor, b: Tensor) -> Tensor:
    """h_t = a_t ⊙ h_{t−1} + b_t from h_0 = 0, a sequential loop over dim 1: (B, T, H) ×2 → (B, T, H)."""
    h, out = b[:, 0], [b[:, 0]]  # h_1 = b_1 (h_0 = 0)
    for t in range(1, a.shape[1]):
        h = torch.addcmul(b[:, t], a[:, t], h)
        out.append(h)
    return torch.stack(out, 1)


class RGLRUCore(SteppedView, nn.Module):
    """A projection D → H, then one RG-LRU layer: (B, T, in_dim) → all hidden states (B, T, H)."""

    state_is_output = True  # step(h, x) returns h: the state is the output

    def __init__(self, in_dim: int, hidden_size: int):
        super().__init__()
        self.in_dim, self.H = in_dim, hidden_size
        self.proj = nn.Linear(in_dim, hidden_size)  # x̃ = W x + b
        self.gates = nn.Linear(hidden_size, 2 * hidden_size)  # [W_a; W_x] x̃ + [b_a; b_x]
        self.Lambda = initial_lambda(hidden_size)  # Λ = logit(a), a^c ~ U[0.9, 0.999]

    def coefficients(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """a_t and b_t = √(1 − a_t²) ⊙ i_t ⊙ x̃_t of ``h_t = a_t h_{t−1} + b_t``:
        (..., in_dim) → 2 × (..., H)."""
        return lru_coefficients(self.gates, self.Lambda, self.proj(x))

    def forward(self, x: Tensor) -> Tensor:
        return linear_recurrence(*self.coefficients(x))  # (B T H)

    # ---- the recurrent view -------------------------------------------------------------------
    @property
    def hidden_size(self) -> int:
        return self.H

    @property
    def state_dim(self) -> int:
        return self.H

    def step(self, h: Tensor, x: Tensor) -> Tensor:
        """h_t from h_{t−1} (B, H) and x_t (B, in_dim)."""
        a, b = self.coefficients(x)
        return a * h + b
