"""xLSTM[1:1]: one mLSTM block and one sLSTM block (Beck et al., 2024), as a posrnn core.

The blocks are the ``xlstm`` package's (NeurIPS version, pure PyTorch on CPU; optional:
``pip install --no-deps xlstm==2.0.6``, the --no-deps because its declared dependencies
pull ``mlstm_kernels``, which only the ``xlstm_large`` model needs and whose licence is not an
open-source one). The core is

    u = W_in x                                  (B, T, H)   the encoder width D → H, no bias
    u = u + mLSTM(LN(u))                        matrix memory C (per head DH × DH), normaliser n,
                                                stabiliser m; up-projection 2H, causal Conv1d_4
    u = u + sLSTM(LN(u)) ; u = u + FFN(LN(u))   scalar memory [h, c, n, m] with recurrent gates
                                                (block-diagonal over the heads), causal Conv1d_4;
                                                gated GELU feed-forward, factor 1.3
    out = LN(u)                                 (B, T, H)

— the package's ``xLSTMBlockStack`` with ``slstm_at=[1]``, 4 heads (the package's and the
paper's small-model default), the sLSTM on its ``"vanilla"`` (PyTorch) backend. The up-projection
widths are rounded up to a multiple of 4, not 64 as the package's default: 64 is a GPU tile size
that would triple the mLSTM's width at H = 8, so at H a multiple of 4 the mLSTM's inner width is
exactly 2H. Parameters the package's own optimiser grouping keeps out of weight decay (norms,
biases, the sLSTM's recurrent kernel, the mLSTM's learnable skip) are tagged so here too.

Training runs the mLSTM's parallel (quadratic) form and the sLSTM's loop. The mLSTM's causal
mask is a buffer sized by ``context_length``; it is not saved in checkpoints and the package
builds a fresh one for any shorter sequence, so the core starts it at one step and grows it to
the longest sequence seen (``_fit_context``): no length bound, and results equal to building
it at the task's length.

Recurrent view (gradient stability, the papers' 001 §3.3/002 §3): the stack's state after a
step is the mLSTM's (C, n, m) and its convolution window, and the sLSTM's [h, c, n, m] and its
convolution window. Each window keeps the last 3 inputs that the width-4 convolution still reads
(the package stores 4 rows, the oldest of which the next step discards; it is restored as
zeros). All are flattened into z (``state_dim``); ``initial_state`` gives z_1, ``state_after``
the state after a prefix, and ``output_from_state`` runs the package's ``step`` from a state
over the inputs after it, so ∂h_T/∂z_1 is taken through the recurrent step itself.

``model.conv = False`` (``--no-conv``) takes both short convolutions out, the mLSTM's and the
sLSTM's (``NoConv``, the identity in each one's place, the SiLU after it kept; the package's
``conv1d_kernel_size = 0`` fails to build the mLSTM in 2.0.6 and would drop the sLSTM's SiLU as
well): the mLSTM's q, k and learnable skip, and the sLSTM's input and forget gates, then read
their own step's input only, and both windows leave the state. The model then has no
convolution parameter. (Runs before the ``no_conv`` variant's version 2 took out the mLSTM's
convolution only.)
What differs from the reference model: the width projection D → H in front, the up-projection
rounded to a multiple of 4, one block of each kind, no embedding or head of the package's.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..common.errors import PosrnnError
from .stepped import SteppedView

#: the install line a missing package names (--no-deps: see the module's docstring; for that reason
#: posrnn has no ``xlstm`` extra, whose install would resolve those dependencies)
INSTALL = "pip install --no-deps xlstm==2.0.6"
HEADS = 4  # mLSTM and sLSTM heads
KERNEL = 4  # both causal convolutions' width


def require_xlstm():
    """The ``xlstm`` package, or a one-line error naming the install command."""
    try:
        import xlstm
    except ImportError as e:  # its text tells a missing xlstm from a module xlstm imports (packaging, setuptools)
        raise PosrnnError(f"the xlstm core needs the xlstm package ({e}): {INSTALL}") from None
    return xlstm


def check_hidden_size(H: int) -> None:
    """H a multiple of the 4 heads with at least 2 dimensions per head (the sLSTM's forget-gate
    init spreads over a head's dimensions), or a one-line error."""
    if H % HEADS or H < 2 * HEADS:
        raise PosrnnError(f"xlstm: --hidden-size must be a multiple of {HEADS} (its heads) and at least {2 * HEADS}, "
                          f"got {H}")


class NoConv(nn.Module):
    """The identity in a convolution's place, for its forward (the mLSTM calls it with the input
    alone, the sLSTM with its window and ``return_last_state``) and its step (whose window it
    passes through untouched)."""

    def forward(self, x: Tensor, conv_state=None, return_last_state: bool = False):
        return (x, conv_state) if return_last_state else x

    def step(self, x: Tensor, conv_state=None):
        return x, conv_state

    def reset_parameters(self) -> None:
        return None


def _stack_config(xlstm, H: int):
    m = xlstm.mLSTMBlockConfig(mlstm=xlstm.mLSTMLayerConfig(conv1d_kernel_size=KERNEL, qkv_proj_blocksize=4,
                                                            num_heads=HEADS, round_proj_up_to_multiple_of=4))
    s = xlstm.sLSTMBlockConfig(slstm=xlstm.sLSTMLayerConfig(backend="vanilla", num_heads=HEADS,
                                                            conv1d_kernel_size=KERNEL,
                                                            bias_init="powerlaw_blockdependent"),
                               feedforward=xlstm.FeedForwardConfig(proj_factor=1.3, act_fn="gelu",
                                                                   round_proj_up_to_multiple_of=4))
    return xlstm.xLSTMBlockStackConfig(mlstm_block=m, slstm_block=s, context_length=1, num_blocks=2, embedding_dim=H,
                                       slstm_at=[1])


class XLSTMCore(SteppedView, nn.Module):
    """A projection D → H, then xLSTM[1:1] at width H: (B, T, in_dim) → (B, T, H)."""

    def __init__(self, in_dim: int, hidden_size: int, conv: bool = True):
        super().__init__()
        xlstm = require_xlstm()
        check_hidden_size(hidden_size)
        self.proj = nn.Linear(in_dim, hidden_size, bias=False)
        self.stack = xlstm.xLSTMBlockStack(_stack_config(xlstm, hidden_size))
        if not conv:  # both blocks' convolutions: the mLSTM's and the sLSTM's
            self.stack.blocks[0].xlstm.conv1d = NoConv()
            self.stack.blocks[1].xlstm.conv1d = NoConv()
        for name, p in self.stack.named_parameters():
            if "weight" not in name or "norm" in name:  # the package's no-decay group (xLSTMLMModel)
                p._optim = {"weight_decay": 0.0}
        self.in_dim, self.H = in_dim, hidden_size
        mlstm, slstm = self.stack.blocks[0].xlstm, self.stack.blocks[1].xlstm
        self.inner, self.dh = mlstm.config._inner_embedding_dim, mlstm.config._inner_embedding_dim // HEADS
        #: (name, shape without the batch) of each piece of z, in order
        self._parts = [("C", (HEADS, self.dh, self.dh)), ("n", (HEADS, self.dh, 1)), ("m", (HEADS, 1, 1)),
                       ("mconv", ((KERNEL - 1) * conv, self.inner)), ("s", (slstm.config.num_states, hidden_size)),
                       ("sconv", ((KERNEL - 1) * conv, hidden_size))]

    def _fit_context(self, T: int) -> None:
        cell = self.stack.blocks[0].xlstm.mlstm_cell
        if cell.causal_mask.shape[-1] < T:
            cell.causal_mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=cell.causal_mask.device))

    def forward(self, x: Tensor) -> Tensor:
        self._fit_context(x.shape[1])
        return self.stack(self.proj(x))  # (B T H), the mLSTM's parallel form

    # ---- the recurrent view -------------------------------------------------------------------
    @property
    def state_dim(self) -> int:
        """Width of z: mLSTM C, n, m and window; sLSTM [h, c, n, m] and window."""
        return sum(torch.Size(shape).numel() for _, shape in self._parts)

    def _split(self, z: Tensor) -> dict:
        """z (B, state_dim) → the package's state dict (fresh tensors: its convolution step
        writes into the window it is given)."""
        widths = [torch.Size(shape).numel() for _, shape in self._parts]
        # one split, not a slice per part: a slice's backward writes a zero gradient the width of z
        pieces = {name: p.reshape(z.shape[0], *shape) for (name, shape), p in zip(self._parts, z.split(widths, dim=1))}

        def window(w: Tensor) -> Tensor:  # the oldest row, which the step discards, as zeros
            return torch.cat([w.new_zeros(w.shape[0], 1, w.shape[2]), w], 1)

        return {"block_0": {"mlstm_state": (pieces["C"], pieces["n"], pieces["m"]),
                            "conv_state": (window(pieces["mconv"]),)},
                "block_1": {"conv_state": (window(pieces["sconv"]),), "slstm_state": pieces["s"].transpose(0, 1)}}

    @staticmethod
    def _join(state: dict) -> Tensor:
        (C, n, m), (mconv,) = state["block_0"]["mlstm_state"], state["block_0"]["conv_state"]
        s, (sconv,) = state["block_1"]["slstm_state"], state["block_1"]["conv_state"]
        return torch.cat([C.flatten(1), n.flatten(1), m.flatten(1), mconv[:, 1:].flatten(1),
                          s.transpose(0, 1).flatten(1), sconv[:, 1:].flatten(1)], 1)  # (B state_dim)

    def step(self, z: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        """One recurrent step: state z (B, state_dim), input x (B, in_dim) → (output (B, H), z')."""
        y, state = self.stack.step(self.proj(x)[:, None], self._split(z))
        return y[:, 0], self._join(state)
