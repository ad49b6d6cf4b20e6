"""A minimal gated RNN as a posrnn plugin core: h_t = (1 − g_t) ⊙ h_{t−1} + g_t ⊙ tanh(c_t), with
[c_t; g_t] = W x_t + U h_{t−1} and the gate squashed by a sigmoid (a GRU without its reset gate).

``make_core`` is the factory posrnn calls (entry point ``example_gru`` of group ``posrnn.cores``,
or ``--model posrnn_example_core:make_core``). The core has a recurrent view (``state_after``,
``output_from_state``), so ``posrnn stability`` analyses its runs.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from posrnn_cli.common.plugins import CorePlugin


class GatedRNN(nn.Module):
    """(B, T, in_dim) → (B, T, hidden_size); the state z is h itself."""

    def __init__(self, in_dim: int, hidden_size: int):
        super().__init__()
        self.hidden_size = hidden_size
        self.input = nn.Linear(in_dim, 2 * hidden_size)
        self.recurrent = nn.Linear(hidden_size, 2 * hidden_size, bias=False)

    def run(self, h: Tensor, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        """The state after the inputs x (B, S, D) from state h (B, H), and every step's output."""
        xp, outs = self.input(x), []
        for t in range(x.shape[1]):
            c, g = (xp[:, t] + self.recurrent(h)).chunk(2, dim=-1)
            g = torch.sigmoid(g)
            h = (1 - g) * h + g * torch.tanh(c)
            outs.append(h)
        return h, outs

    def forward(self, x: Tensor) -> Tensor:
        return torch.stack(self.run(x.new_zeros(x.shape[0], self.hidden_size), x)[1], dim=1)

    def state_after(self, x_prefix: Tensor) -> Tensor:
        return self.run(x_prefix.new_zeros(x_prefix.shape[0], self.hidden_size), x_prefix)[0]

    def output_from_state(self, z: Tensor, x_rest: Tensor) -> Tensor:
        return self.run(z, x_rest)[0]


def make_core() -> CorePlugin:
    return CorePlugin(name="example_gru", version=1, about="minimal gated RNN (GRU without its reset gate)",
                      build=GatedRNN, recurrent_view=True)
