"""The short causal convolution that Mamba, Gated DeltaNet's layer, Hawk's recurrent block and
xLSTM's mLSTM put in front of their recurrences, and its off position (``model.conv: false``,
``--no-conv``).

``ShortConv`` is a depthwise causal ``Conv1d`` of width w over time: output t of channel c is
``Σ_{j<w} W[c, j] · x_{t−w+1+j}[c] (+ b[c])``, the inputs before step 0 taken as zeros, so step t
reads steps t−w+1 … t. Off, every core puts the identity in the convolution's place and leaves
everything around it (the activation after it, the branches beside it) as it was: then no step
of the layer mixes neighbouring inputs before the recurrence.
"""

from __future__ import annotations

from torch import Tensor, nn

#: the convolutions' width in every core that has one (Mamba's d_conv, fla's conv_size, Griffin's
#: temporal width, xLSTM's conv1d_kernel_size)
WIDTH = 4


class ShortConv(nn.Module):
    """Depthwise causal convolution over time: (B, T, C) → (B, T, C)."""

    def __init__(self, channels: int, width: int = WIDTH, bias: bool = False):
        super().__init__()
        self.width = width
        self.conv = nn.Conv1d(channels, channels, width, groups=channels, padding=width - 1, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x.transpose(1, 2))[..., : x.shape[1]].transpose(1, 2)


def short_conv(channels: int, on: bool, width: int = WIDTH, bias: bool = False) -> nn.Module:
    """The convolution, or the identity in its place (``model.conv: false``)."""
    return ShortConv(channels, width, bias) if on else nn.Identity()
