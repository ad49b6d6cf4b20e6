"""The recurrent cores (000 §3.2): one layer of ``nn.RNN`` (tanh, "elman"), ``nn.GRU`` or
``nn.LSTM``, plus their *recurrent view* for the gradient-stability analysis (003 §4.3).

cuDNN RNNs can be neither differentiated twice nor vmapped, so the view re-writes each cell
as explicit tensor code over the module's own weights: ``initial_state`` gives ``z_1`` (the
state after the first input; ``[h; c]`` for an LSTM), ``state_after`` the state after any
prefix, and ``output_from_state`` the last hidden state from a state and the inputs after it —
the same interface as ``S4DCore``.

Under ``train.amp`` the core runs in bf16, the dtype the training loop's autocast asks for, on
every device: with autocast off around it, on inputs and weights cast explicitly. Autocast's own
rule would differ by device: on CUDA it runs cuDNN's RNNs in fp16 whatever dtype was asked
(``aten/src/ATen/cudnn/AutocastRNN.cpp`` casts to ``kHalf``; the loop keeps no GradScaler, so fp16
gradients could underflow), on a CPU it runs the GRU in fp32 and the LSTM in bf16. NOT MEASURED ON
A GPU: the GPU check reads the core's dtype there.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import Tensor, nn
from torch.func import functional_call

def autocast_dtype(device_type: str) -> Optional[torch.dtype]:
    """The dtype autocast casts to on ``device_type`` where it is on there, else None (also for a
    device autocast does not know, such as ``meta``)."""
    try:
        return torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None
    except RuntimeError:
        return None


RNN_CLASSES = {"elman": nn.RNN, "gru": nn.GRU, "lstm": nn.LSTM}
GATES = {"elman": 1, "gru": 3, "lstm": 4}


class RecurrentCore(nn.Module):
    """One recurrent layer: (B, T, D) → all hidden states (B, T, H)."""

    def __init__(self, kind: str, in_dim: int, hidden_size: int):
        super().__init__()
        self.kind = kind
        self.rnn = RNN_CLASSES[kind](in_dim, hidden_size, batch_first=True)

    def forward(self, x: Tensor) -> Tensor:
        dtype = autocast_dtype(x.device.type)
        if dtype is None:
            h, _ = self.rnn(x)  # (B T H)
            return h
        # Under autocast the core runs in the dtype the loop asked for (bf16), explicitly: autocast's
        # own rule would run cuDNN's RNNs in fp16 whatever dtype was asked (ATen's cudnn/AutocastRNN.cpp
        # casts to kHalf, and without a GradScaler fp16 gradients can underflow) and the CPU's GRU in fp32.
        with torch.autocast(x.device.type, enabled=False):
            weights = {n: p.to(dtype) for n, p in self.rnn.named_parameters()}  # fp32 master weights get the grads
            h, _ = functional_call(self.rnn, weights, (x.to(dtype),))  # (B T H)
        return h

    def forward_flops(self, T: int) -> float:
        """Forward FLOPs per sequence of T steps: 2 · G·H · (D + H) per step (G gates)."""
        H = self.hidden_size
        return 2.0 * GATES[self.kind] * H * (self.rnn.input_size + H) * T

    # ---- the recurrent view ---------------------------------------------------------------
    @property
    def hidden_size(self) -> int:
        return self.rnn.hidden_size

    @property
    def state_dim(self) -> int:
        """Width of z: H, or 2H for an LSTM ([h; c])."""
        return 2 * self.hidden_size if self.kind == "lstm" else self.hidden_size

    def input_projection(self, x: Tensor) -> Tensor:
        """``W_ih x + b_ih``: (…, D) → (…, G·H)."""
        return x @ self.rnn.weight_ih_l0.T + self.rnn.bias_ih_l0

    def step_fn(self) -> Callable[[Tensor, Tensor], Tensor]:
        """``step(z, xp) -> z'``: one step from state z given the input projection xp (batched)."""
        W_hh, b_hh, H = self.rnn.weight_hh_l0, self.rnn.bias_hh_l0, self.hidden_size
        if self.kind == "elman":
            return lambda h, xp: torch.tanh(xp + h @ W_hh.T + b_hh)
        if self.kind == "gru":
            def gru(h, xp):
                hp = h @ W_hh.T + b_hh  # (… 3H): r u n
                r = torch.sigmoid(xp[..., :H] + hp[..., :H])
                u = torch.sigmoid(xp[..., H : 2 * H] + hp[..., H : 2 * H])
                n = torch.tanh(xp[..., 2 * H :] + r * hp[..., 2 * H :])
                return (1 - u) * n + u * h
            return gru

        def lstm(z, xp):
            h, c = z[..., :H], z[..., H:]
            g = xp + h @ W_hh.T + b_hh  # (… 4H): i f g o
            i, f = torch.sigmoid(g[..., :H]), torch.sigmoid(g[..., H : 2 * H])
            cell, o = torch.tanh(g[..., 2 * H : 3 * H]), torch.sigmoid(g[..., 3 * H :])
            c2 = f * c + i * cell
            return torch.cat([o * torch.tanh(c2), c2], dim=-1)
        return lstm

    def initial_state(self, x1: Tensor) -> Tensor:
        """z_1 from a zero state and the first input: x1 (B, D) → (B, state_dim)."""
        z0 = x1.new_zeros(x1.shape[0], self.state_dim)
        return self.step_fn()(z0, self.input_projection(x1))

    def state_after(self, x_prefix: Tensor) -> Tensor:
        """z_P, the state after a prefix of P ≥ 1 inputs: (B, P, D) → (B, state_dim); z_1 for P = 1."""
        return self._advance(self.initial_state(x_prefix[:, 0]), x_prefix[:, 1:])

    def output_from_state(self, z1: Tensor, x_rest: Tensor) -> Tensor:
        """h_T from z_1 and the remaining inputs: (B, T−1, D) → (B, H)."""
        return self._advance(z1, x_rest)[..., : self.hidden_size]

    def _advance(self, z: Tensor, x_rest: Tensor) -> Tensor:
        """The state after the inputs x_rest (B, S, D) from state z (B, state_dim)."""
        step, xp = self.step_fn(), self.input_projection(x_rest)
        for t in range(xp.shape[1]):
            z = step(z, xp[:, t])
        return z
