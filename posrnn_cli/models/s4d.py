"""S4D: the diagonal structured state-space model (Gu et al., 2022), as a posrnn core (001 §3.2).

Shapes: B batch, T (= L in Gu's code) time steps, H channels (= hidden size), N the state
size of the real SSM, N/2 the number of complex modes (``n = 0 … N/2−1``).

Per channel h the continuous SSM is ``x'(t) = A x(t) + B u(t)``, ``y = C x + D u`` with a
diagonal complex ``A_n = −exp(log_A_real) + i·A_imag = −0.5 + iπn`` at init, ``B = 1``
(absorbed into ``C``), and a step ``Δ = exp(log_dt)``. Zero-order hold gives

    Ā = exp(ΔA),   B̄ = (exp(ΔA) − 1) / A · B,   z_t = Ā z_{t−1} + B̄ u_t,   y_t = 2·Re(C z_t) + D u_t.

As in Gu's ``s4d.py`` (and the paper's reference code, which uses ``d_state = 64``) the N
states of a real SSM are kept as N/2 complex modes, one per conjugate pair, so the output
is ``2·Re(·)``. Unrolling the recurrence from ``z_0 = 0`` gives a causal convolution
``y = K * u + D u`` with the Vandermonde kernel

    K_k = 2·Re(Σ_n C_n B̄_n Ā_n^k),   k = 0 … T−1,

applied with an FFT of length 2T (no wrap-around, so it stays causal). The layer is then
``GELU → Linear(H, 2H) → GLU`` (Gu's 1×1 ``Conv1d`` on channels-first data is the same map).

Recurrent view (gradient stability, 003 §4.3): the complex state ``z_t`` (H, N/2) is read as
a real vector ``[Re, Im]`` per mode, flattened to width ``state_dim = 2·H·N/2 = H·N``.
:meth:`S4DCore.initial_state` gives ``z_1`` (:meth:`S4DCore.state_after`, the state after
any prefix) and :meth:`S4DCore.output_from_state` the
core's last output from ``z_1``; both use real arithmetic on the state, so torch.func
(``jacrev``/``vmap``) and ``autograd.grad(is_grads_batched=True)`` can differentiate them.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def no_weight_decay(p: nn.Parameter) -> nn.Parameter:
    """Tag an SSM parameter like Gu's ``register``: its own optimiser group, no weight decay."""
    p._optim = {"weight_decay": 0.0}
    return p


class S4DCore(nn.Module):
    """``Linear(in_dim, H)`` → S4D(H, N) → GELU → ``Linear(H, 2H)`` + GLU: (B, T, in_dim) → (B, T, H).

    ``state_size`` is N, the order of each channel's real SSM (N/2 complex modes; must be
    even). Init: ``log_dt ~ U[log dt_min, log dt_max]``, ``A = −0.5 + iπn``, complex
    ``C ~ N(0, 1)`` (stored as its real view (H, N/2, 2)), ``D ~ N(0, 1)``.
    """

    def __init__(self, in_dim: int, hidden_size: int, state_size: int = 64, dt_min: float = 1e-3, dt_max: float = 1e-1):
        super().__init__()
        if state_size < 2 or state_size % 2:
            raise ValueError(f"S4D state_size must be even and ≥ 2 (N/2 complex modes), got {state_size}")
        if not 0 < dt_min <= dt_max:
            raise ValueError(f"S4D needs 0 < dt_min ≤ dt_max, got dt_min={dt_min}, dt_max={dt_max}")
        H, N = hidden_size, state_size
        self.in_dim, self.H, self.N = in_dim, H, N
        self.in_proj = nn.Linear(in_dim, H)

        log_dt = torch.rand(H) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)  # (H)
        self.log_dt = no_weight_decay(nn.Parameter(log_dt))
        self.log_A_real = no_weight_decay(nn.Parameter(torch.full((H, N // 2), math.log(0.5))))  # (H N/2)
        # (H N/2)
        self.A_imag = no_weight_decay(nn.Parameter(math.pi * torch.arange(N // 2).float().expand(H, -1).clone()))
        self.C = nn.Parameter(torch.view_as_real(torch.randn(H, N // 2, dtype=torch.cfloat)).clone())  # (H N/2 2)
        self.D = nn.Parameter(torch.randn(H))  # (H)

        self.activation = nn.GELU()
        self.output_linear = nn.Linear(H, 2 * H)  # the 1×1 conv H → 2H, then GLU

    @property
    def state_dim(self) -> int:
        """Width of the real view of the complex state: 2 · H · N/2."""
        return self.H * self.N

    # ---- the SSM's discretised parameters ------------------------------------------------
    def _discretise(self) -> tuple[Tensor, Tensor, Tensor]:
        """ΔA, B̄ and C, complex (H N/2) each."""
        dt = torch.exp(self.log_dt)  # (H)
        A = -torch.exp(self.log_A_real) + 1j * self.A_imag  # (H N/2)
        dtA = A * dt.unsqueeze(-1)  # (H N/2)
        B_bar = (torch.exp(dtA) - 1.0) / A  # (H N/2)  ZOH with B = 1
        C = torch.view_as_complex(self.C)  # (H N/2)
        return dtA, B_bar, C

    def _discrete(self) -> tuple[Tensor, Tensor]:
        """Kernel form: ΔA and ``C·B̄`` (B̄ absorbed into C, as in Gu's kernel), complex (H N/2)."""
        dtA, B_bar, C = self._discretise()
        return dtA, C * B_bar  # (H N/2) each

    def kernel(self, T: int) -> Tensor:
        """The convolution kernel ``K_k = 2·Re(Σ_n C_n B̄_n exp(ΔA_n k))``, k = 0 … T−1: (H, T)."""
        dtA, CB = self._discrete()
        k = torch.arange(T, device=dtA.device, dtype=self.log_dt.dtype)  # (T)
        vandermonde = torch.exp(dtA.unsqueeze(-1) * k)  # (H N/2 T)  Ā^k
        return 2 * torch.einsum("hn,hnt->ht", CB, vandermonde).real  # (H T)

    def _head(self, y: Tensor) -> Tensor:
        """GELU → Linear(H, 2H) → GLU over the last axis: (…, H) → (…, H)."""
        return nn.functional.glu(self.output_linear(self.activation(y)), dim=-1)  # (… H)

    # ---- convolutional form (training) ----------------------------------------------------
    def forward(self, x: Tensor) -> Tensor:
        T = x.shape[1]
        u = self.in_proj(x).transpose(1, 2)  # (B H T)
        K = self.kernel(T)  # (H T)
        K_f = torch.fft.rfft(K, n=2 * T)  # (H T+1)
        u_f = torch.fft.rfft(u, n=2 * T)  # (B H T+1)
        y = torch.fft.irfft(u_f * K_f, n=2 * T)[..., :T]  # (B H T)  causal: no wrap-around at n = 2T
        y = y + u * self.D.unsqueeze(-1)  # (B H T)  D skip
        return self._head(y.transpose(1, 2))  # (B T H)

    # ---- recurrent view (gradient stability) ----------------------------------------------
    def initial_state(self, x1: Tensor) -> Tensor:
        """``z_1 = B̄ u_1`` (from ``z_0 = 0``) as a real vector: x1 (B, in_dim) → (B, state_dim)."""
        return self.state_after(x1.unsqueeze(1))

    def state_after(self, x_prefix: Tensor) -> Tensor:
        """``z_P = Σ_{t=1..P} Ā^{P−t} B̄ u_t`` (from ``z_0 = 0``), the state after a prefix, as a
        real vector: x_prefix (B, P ≥ 1, in_dim) → (B, state_dim). The paper's S4D stability
        analysis (``002_*``) reads the state after a prefix ending at a target placed at t = 23."""
        P = x_prefix.shape[1]
        dtA, B_bar, _ = self._discretise()
        u = self.in_proj(x_prefix)  # (B P H)
        k = torch.arange(P, device=dtA.device, dtype=self.log_dt.dtype)  # (P)
        W = B_bar.unsqueeze(-1) * torch.exp(dtA.unsqueeze(-1) * k).flip(-1)  # (H N/2 P)  B̄ Ā^{P−t}
        z_re = torch.einsum("bph,hnp->bhn", u, W.real)  # (B H N/2)
        z_im = torch.einsum("bph,hnp->bhn", u, W.imag)  # (B H N/2)
        return torch.stack([z_re, z_im], dim=-1).flatten(1)  # (B H·N)

    def output_from_state(self, z1: Tensor, x_rest: Tensor) -> Tensor:
        """The core's output at the last step T from ``z_1`` and the inputs of steps 2 … T.

        z1: (B, state_dim) real view of the state; x_rest: (B, T−1, in_dim), T ≥ 2 → (B, H).
        The diagonal recurrence ``z_t = Ā z_{t−1} + B̄ u_t`` is unrolled in closed form,

            z_T = Ā^{T−1} z_1 + Σ_{t=2..T} Ā^{T−t} B̄ u_t,

        so ``∂z_T/∂z_1 = Ā^{T−1}`` (diagonal) and the backward pass never walks T steps.
        The SSM is linear, so ``∂y_T/∂z_1 = 2·Re(C Ā^{T−1} ·)`` does not depend on the inputs:
        ``∂out_T/∂z_1 = M(y_T) · blockdiag_h(g_h)``, only the head's Jacobian M varies.
        """
        if x_rest.shape[1] < 1:
            raise ValueError("output_from_state needs at least one step after z_1 (x_rest of shape (B, T−1 ≥ 1, "
                             "in_dim))")
        S = x_rest.shape[1]  # T − 1
        dtA, B_bar, C = self._discretise()
        u = self.in_proj(x_rest)  # (B T−1 H)
        k = torch.arange(S + 1, device=dtA.device, dtype=self.log_dt.dtype)  # (T)
        powers = torch.exp(dtA.unsqueeze(-1) * k)  # (H N/2 T)  Ā^k, k = 0 … T−1
        W = B_bar.unsqueeze(-1) * powers[..., :S].flip(-1)  # (H N/2 T−1)  B̄ Ā^{T−t}, t = 2 … T
        drive_re = torch.einsum("bsh,hns->bhn", u, W.real)  # (B H N/2)
        drive_im = torch.einsum("bsh,hns->bhn", u, W.imag)  # (B H N/2)

        z = z1.reshape(z1.shape[0], self.H, self.N // 2, 2)  # (B H N/2 2)
        z_re, z_im = z[..., 0], z[..., 1]  # (B H N/2) each
        P = powers[..., S]  # (H N/2)  Ā^{T−1}
        zT_re = P.real * z_re - P.imag * z_im + drive_re  # (B H N/2)
        zT_im = P.real * z_im + P.imag * z_re + drive_im  # (B H N/2)
        y = 2 * (C.real * zT_re - C.imag * zT_im).sum(-1)  # (B H)  2·Re(C z_T)
        y = y + self.D * u[:, -1]  # (B H)  D skip
        return self._head(y)  # (B H)
