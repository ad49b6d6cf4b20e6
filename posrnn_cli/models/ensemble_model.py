"""K same-shape models as one batched model (``EnsembleModel``): a leading member dimension on
every parameter, so K runs (typically the seeds of one cell) train in one process.

Each member is built as its solo run builds it (``build_model`` under its own seed) and its
parameters are stacked, so member k starts from exactly its solo run's weights. The encoder
(embedding and positional encoding) runs as the solo module under ``torch.func.vmap`` over the
stacked weights; the recurrence runs as one ``baddbmm`` per step over the members
(``batched_recurrence``), with the gate order and bias placement of ``nn.RNN`` (tanh),
``nn.GRU`` (r applied to ``W_hn h + b_hn``) and ``nn.LSTM`` (i f g o); the output head is one
``baddbmm``. Nothing couples two members: each member's outputs, and so its gradients, depend
on its own weights and inputs only.

``nn.GRU``/``nn.LSTM`` (cuDNN) have no vmap rule, hence the explicit recurrence. Cores without
a batched recurrence (``catalog.ENSEMBLE_CORES`` lists those with one) are refused in one line.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor, nn

from ..common import catalog
from ..common.errors import PosrnnError
from .rnn import RecurrentCore


def batched_recurrence(kind: str, x: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih: Tensor, b_hh: Tensor,
                       shared: Optional[Tensor] = None) -> Tensor:
    """K members' one-layer Elman/GRU/LSTM over (K, B, T, D) inputs → all hidden states (K, B, T, H),
    from a zero state. Weights are ``nn.RNN``'s, stacked: w_ih (K, G·H, D), w_hh (K, G·H, H), biases (K, G·H).
    ``shared`` (K, 1, S, D): S more steps whose input is the same in every sequence (the output phase's
    query at its positions), projected once and broadcast over the batch; the states then run T + S steps.

    Backward stays linear in T: each step's input projection comes from one ``unbind`` over time and
    each gate from one ``split`` or ``chunk``, whose backward is one ``stack`` or ``cat``. Indexing instead
    (``xp[:, :, t]``, ``g[..., :H]``) makes autograd write a zero tensor the size of the whole
    input at every step, a cost that grows with T² (``tests/test_ensemble_traffic.py`` counts it)."""
    K, B, T, D = x.shape
    H = w_hh.shape[-1]
    # the weights transposed once, contiguous (a strided operand slows the CPU's bmm about 2×)
    w_ih_t, w_hh_t, b_hh = w_ih.transpose(1, 2).contiguous(), w_hh.transpose(1, 2).contiguous(), b_hh[:, None]
    xp = torch.baddbmm(b_ih[:, None], x.reshape(K, B * T, D), w_ih_t).view(K, B, T, -1)  # (K B T GH)
    steps = xp.unbind(2)
    if shared is not None:  # (K 1 S D) → (K B S GH), one row's projection seen by every sequence
        S = shared.shape[2]
        tail = torch.baddbmm(b_ih[:, None], shared.reshape(K, S, D), w_ih_t).view(K, 1, S, -1)
        steps = steps + tail.expand(K, B, S, -1).unbind(2)
    h = xp.new_zeros(K, B, H)
    c = xp.new_zeros(K, B, H) if kind == "lstm" else None
    outs = []
    for gi in steps:  # gi (K B GH): W_ih x_t + b_ih
        hp = torch.baddbmm(b_hh, h, w_hh_t)  # (K B GH): W_hh h + b_hh
        if kind == "elman":
            h = torch.tanh(gi + hp)
        elif kind == "gru":  # ATen's GRU cell: n = tanh(gi_n + r ⊙ (W_hn h + b_hn)), h' = (h − n) ⊙ z + n
            (i_rz, i_n), (h_rz, h_n) = gi.split([2 * H, H], -1), hp.split([2 * H, H], -1)
            r, z = torch.sigmoid(i_rz + h_rz).chunk(2, -1)  # (K B H) each
            n = torch.tanh(i_n + r * h_n)
            h = (h - n) * z + n
        else:  # lstm, gates i f g o
            i_f, cell, o = (gi + hp).split([2 * H, H, H], -1)
            i, f = torch.sigmoid(i_f).chunk(2, -1)
            c = f * c + i * torch.tanh(cell)
            h = torch.sigmoid(o) * torch.tanh(c)
        outs.append(h)
    return torch.stack(outs, dim=2)  # (K B T H)


def check_ensemble_core(name: str) -> None:
    """Refuse a core without a batched recurrence, in one line naming it."""
    if name not in catalog.ENSEMBLE_CORES:
        raise PosrnnError(f"the {name} core has no ensemble path (only {', '.join(catalog.ENSEMBLE_CORES)} batch their "
                          f"recurrence over members); train its runs solo")


def _key(name: str) -> str:
    return name.replace(".", "__")


class EnsembleModel(nn.Module):
    """K solo ``SequenceModel``s with one recurrent core each, as one model over a leading member
    dimension. ``forward`` takes (K, B, …) inputs and returns (K, B, K_out, V) outputs; every
    stacked parameter and buffer is named after the solo one (dots as ``__``)."""

    def __init__(self, solos: Sequence[nn.Module]):
        super().__init__()
        first = solos[0]
        core = getattr(first, "core", None)
        if not isinstance(core, RecurrentCore):
            raise PosrnnError(f"{type(core).__name__} has no ensemble path (only {', '.join(catalog.ENSEMBLE_CORES)} "
                              f"batch their recurrence over members); train its runs solo")
        check_ensemble_core(core.kind)
        shapes = [{k: tuple(v.shape) for k, v in m.state_dict().items()} for m in solos]
        if any(s != shapes[0] for s in shapes[1:]):
            raise PosrnnError("the members of an ensemble must have identical shapes; these differ: train them solo")
        self.kind, self.n_members = core.kind, len(solos)
        self.__dict__["template"] = first  # the solo module the encoder runs as (not a submodule: its weights are ours)
        self.param_names = [n for n, _ in first.named_parameters()]
        self.state_names = list(first.state_dict().keys())  # a member's solo state_dict: parameters and saved buffers
        for name, p in first.named_parameters():
            stacked = nn.Parameter(torch.stack([dict(m.named_parameters())[name].detach() for m in solos]).clone())
            if getattr(p, "_optim", None):
                stacked._optim = p._optim  # its optimiser group, as in the solo run
            self.register_parameter(_key(name), stacked)
        for name, b in first.named_buffers():
            self.register_buffer(_key(name), torch.stack([dict(m.named_buffers())[name] for m in solos]).clone())

    def stacked(self, name: str) -> Tensor:
        return getattr(self, _key(name))

    def _part(self, prefix: str) -> dict[str, Tensor]:
        names = [n for n, _ in self.template.named_parameters()] + [n for n, _ in self.template.named_buffers()]
        return {n[len(prefix):]: self.stacked(n) for n in names if n.startswith(prefix)}

    def encode(self, inputs: Tensor, query: Optional[Tensor] = None) -> Tensor:
        """The solo encoder under vmap over the members: (K, B, T[, d]) → (K, B, T, D)."""
        from torch.func import functional_call, vmap

        enc = self.template.encoder
        run = lambda w, i, q: functional_call(enc, w, (i, q))
        return vmap(run, in_dims=(0, 0, None if query is None else 0))(self._part("encoder."), inputs, query)

    def forward(self, inputs: Tensor, out_index: Optional[Tensor] = None, query: Optional[Tensor] = None,
                shared_from: Optional[int] = None) -> Tensor:
        """(K, B, T) inputs → (K, B, K_out, V) outputs. ``shared_from``: the step from which every
        sequence is fed the same id (``Task.shared_input_start``); those steps' inputs are encoded and
        projected once, from the first sequence (exact: the encoder reads an id and its position)."""
        w = [self.stacked(f"core.rnn.{n}_l0") for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
        if shared_from is None or query is not None or not 0 < shared_from < inputs.shape[2]:
            h = batched_recurrence(self.kind, self.encode(inputs, query), *w)  # (K B T H)
        else:
            one = self.encode(inputs[:, :1])[:, :, shared_from:]  # (K 1 S D): the first sequence's shared steps
            h = batched_recurrence(self.kind, self.encode(inputs[:, :, :shared_from]), *w, shared=one)  # (K B T H)
        if out_index is not None:
            h = h.gather(2, out_index[..., None].expand(-1, -1, -1, h.shape[-1]))  # (K B K_out H)
        K, B, S, H = h.shape
        W, b = self.stacked("head.weight"), self.stacked("head.bias")
        return torch.baddbmm(b[:, None], h.reshape(K, B * S, H), W.transpose(1, 2).contiguous()).view(K, B, S, -1)

    def member_state_dict(self, k: int) -> dict[str, Tensor]:
        """Member ``k``'s weights in its solo run's format (copies: a view would save all K)."""
        return {n: self.stacked(n)[k].detach().clone() for n in self.state_names}

    def load_member_state_dict(self, k: int, state: dict[str, Tensor]) -> None:
        """Load a solo state_dict into member ``k``; a missing, extra or misshapen tensor is refused."""
        if set(state) != set(self.state_names):
            extra, missing = sorted(set(state) - set(self.state_names)), sorted(set(self.state_names) - set(state))
            raise RuntimeError(f"state_dict keys differ (missing {missing[:3]}, unexpected {extra[:3]})")
        with torch.no_grad():
            for n in self.state_names:
                dst = self.stacked(n)[k]
                if tuple(state[n].shape) != tuple(dst.shape):
                    raise RuntimeError(f"size mismatch for {n}: {tuple(state[n].shape)} vs {tuple(dst.shape)}")
                dst.copy_(state[n])
