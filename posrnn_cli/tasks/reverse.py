"""Reverse ordering (000 §3.1) and its variants.

* ``ReverseTask``: ``x_1…x_L`` i.i.d. uniform over V, then L query steps; target ``x_L…x_1``.
  With ``task.autoregressive`` the output phase is fed the previous target while training
  and the previous prediction at evaluation; ``eval`` scores the targets fed back too
  (``feedback_modes``: "self", "truth").
* ``VariableLengthReverse`` (``task.min_length``): L ~ U{min_length … length} per sequence.
* ``DualFrequencyReverse`` (``task.rarity``): ids ``[0, V/2)`` Frequent, ``[V/2, V)`` Rare;
  tested on the (target kind × disturbant kind) grid.
* ``ShiftedReverse``: reverse over a shifted id range, the new-ids / old-ids test sets of a
  vocabulary-extended run.

``reverse_task(cfg)`` picks the variant the config describes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

import torch
from torch import Tensor

from ..common.settings.config import TaskConfig
from ..common.errors import PosrnnError
from .base import Batch, Task, tally, first_unique, hash_rows, phase_layout


class ReverseTask(Task):
    """Reverse ordering with a fixed length (optionally autoregressive)."""

    name = "reverse"
    supports_autoregressive = True
    supports_variable_length = True  # reverse_task() picks VariableLengthReverse
    supports_rarity = True  # reverse_task() picks DualFrequencyReverse

    @property
    def fixed_reverse_layout(self) -> bool:
        return not self.cfg.autoregressive

    @property
    def extendable(self) -> bool:
        return self.fixed_reverse_layout

    @property
    def output_start(self) -> Optional[int]:
        return self.L

    @property
    def shared_input_start(self) -> Optional[int]:
        """Without autoregression, every output step of every sequence is fed the query id."""
        return self.L if self.fixed_reverse_layout else None

    # ---- drawing -------------------------------------------------------------------
    def tokens(self, n: int, gen: torch.Generator, device) -> Tensor:
        """(n, L) training tokens, i.i.d. uniform over V."""
        return torch.randint(self.V, (n, self.L), generator=gen, device=device)

    def lengths(self, n: int, gen: torch.Generator, device) -> Optional[Tensor]:
        return None

    def target_of(self, x: Tensor, lengths: Optional[Tensor]) -> Tensor:
        """(B, L) targets ``x_L … x_1``."""
        return x.flip(1)

    def key_of(self, x: Tensor, lengths: Optional[Tensor]) -> Tensor:
        return x

    def build(self, x: Tensor, lengths: Optional[Tensor] = None) -> Batch:
        """The batch for tokens ``x`` (B, L) and optional per-sequence ``lengths``."""
        targets = self.target_of(x, lengths)
        feed = None
        if self.cfg.autoregressive:  # output step j is fed target j−1 (teacher forcing); step 0 the query
            feed = torch.cat([torch.full_like(targets[:, :1], self.query_id), targets[:, :-1]], dim=1)
        inputs, out_index, mask = phase_layout(x, lengths, self.query_id, feed)
        return Batch(inputs=inputs, targets=targets, out_index=out_index, key=self.key_of(x, lengths), mask=mask,
                     lengths=lengths)

    def sample(self, n: int, gen: torch.Generator, device: torch.device) -> Batch:
        return self.build(self.tokens(n, gen, device), self.lengths(n, gen, device))

    # ---- autoregressive inference ------------------------------------------------------
    @property
    def feedback_modes(self) -> tuple[str, ...]:
        return ("self", "truth") if self.cfg.autoregressive else ("self",)

    def infer(self, model, batch: Batch, feedback: str = "self") -> Tensor:
        """Without autoregression, or with ``feedback="truth"`` (teacher forcing: the batch's
        output phase already holds the previous targets, as ``build`` lays it out), one forward
        pass; with ``feedback="self"``, step j+1 is fed the prediction of step j."""
        if not self.cfg.autoregressive or feedback != "self":
            return super().infer(model, batch, feedback)
        inputs = batch.inputs.clone()
        L = self.L
        inputs[:, L + 1 :] = self.query_id  # nothing fed back yet
        preds = []
        for j in range(L):  # self-feedback: output step j+1 is fed the prediction of step j
            p = self.predict(model(inputs, batch.out_index[:, j : j + 1]))[:, 0]  # (B)
            preds.append(p)
            if j + 1 < L:
                inputs[:, L + j + 1] = p
        return torch.stack(preds, dim=1)  # (B L)

    def report(self, pred: Tensor, batch: Batch) -> dict:
        if not self.cfg.autoregressive:
            return {}
        n_ok, n, n_seq = tally(self.correct(pred, batch), batch)  # ``pred`` came from ``infer``: self-feedback
        return {"self_feedback_token_accuracy": n_ok / n, "self_feedback_sequence_accuracy": n_seq / len(batch)}


class VariableLengthReverse(ReverseTask):
    """Reverse with L ~ U{min_length … length} per sequence; positions run straight through
    both phases of each sequence, padding after 2l is masked. Tested on ``n_test`` sequences
    of every length (``group`` = the length)."""

    supports_autoregressive = False
    fixed_reverse_layout = False
    extendable = False

    @property
    def output_start(self) -> Optional[int]:
        return None

    def check(self) -> None:
        c = self.cfg
        if not 1 <= c.min_length <= c.length:
            raise PosrnnError(f"--min-length must lie in 1 … --max-length ({c.length}), got {c.min_length}")
        if c.rarity is not None:
            raise PosrnnError("variable length does not combine with --rarity; drop one")
        super().check()

    def space_size(self) -> float:
        return self.V ** min(self.cfg.min_length, 64)  # the shortest length must hold its own test set

    def lengths(self, n: int, gen: torch.Generator, device) -> Tensor:
        return torch.randint(self.cfg.min_length, self.L + 1, (n,), generator=gen, device=device)  # (B)

    def target_of(self, x: Tensor, lengths: Tensor) -> Tensor:
        """(B, L) targets ``x_l … x_1``, zero-padded past each length."""
        j = torch.arange(self.L, device=x.device)
        idx = (lengths[:, None] - 1 - j).clamp(min=0)  # (B L)
        return x.gather(1, idx) * (j < lengths[:, None])

    def key_of(self, x: Tensor, lengths: Tensor) -> Tensor:
        return torch.cat([x * (torch.arange(self.L, device=x.device) < lengths[:, None]), lengths[:, None]], dim=1)

    def test_set(self, device: torch.device | str = "cpu") -> Batch:
        gen = torch.Generator().manual_seed(self.cfg.test_seed)
        n = self.cfg.n_test
        parts = []
        for l in range(self.cfg.min_length, self.L + 1):
            got = None
            while got is None or len(got) < n:
                b = self.build(torch.randint(self.V, (n, self.L), generator=gen), torch.full((n,), l))
                got = b if got is None else Batch.cat([got, b])
                got = got.select(first_unique(hash_rows(got.key)))
            parts.append(got.select(torch.arange(n)))
        batch = Batch.cat(parts)
        batch.group = batch.lengths.clone()
        return batch.to(device)

    def report(self, pred: Tensor, batch: Batch) -> dict:
        ok = self.correct(pred, batch)
        n_ok, n_all = ok.sum(1).double(), batch.mask.sum(1).double()
        return {"accuracy_by_length": {int(l): float(n_ok[batch.lengths == l].sum() / n_all[batch.lengths == l].sum())
                                       for l in batch.lengths.unique().tolist()}}


class DualFrequencyReverse(ReverseTask):
    """Reverse over a dual-frequency vocabulary: ids ``[0, V/2)`` Frequent, ``[V/2, V)`` Rare;
    a training position is Rare with probability ``rarity``, uniform within its half."""

    FREQUENCY_CLASSES = ("F", "R")  # Frequent ids [0, V/2), Rare ids [V/2, V)
    extendable = False  # the extension's test sets draw ids uniformly

    def check(self) -> None:
        c = self.cfg
        if c.vocab_size % 2:
            raise PosrnnError("the dual-frequency vocabulary splits V in halves; pass an even --vocab-size, got "
                              f"{c.vocab_size}")
        super().check()

    def space_size(self) -> float:
        return (self.V // 2) ** min(self.L, 64)  # every grid cell draws its tokens from one half

    def tokens(self, n: int, gen: torch.Generator, device) -> Tensor:
        half = self.V // 2
        rare = torch.rand(n, self.L, generator=gen, device=device) < self.cfg.rarity  # (B L)
        return torch.randint(half, (n, self.L), generator=gen, device=device) + rare.long() * half

    def test_set(self, device: torch.device | str = "cpu") -> Batch:
        """For every target position t and (target kind, disturbant kind) ∈ {F, R}²:
        sequences whose position t holds a target-kind token and whose other L−1 positions
        hold disturbant-kind tokens; only the output step that recalls position t is scored.
        ``n_test`` sequences per kind pair, spread evenly over the L positions (at least one
        per position). ``group`` = (2·target kind + disturbant kind)·L + t."""
        gen = torch.Generator().manual_seed(self.cfg.test_seed)
        L, half = self.L, self.V // 2
        per = max(1, self.cfg.n_test // L)
        parts = []
        for tk in range(2):
            for dk in range(2):
                t = torch.arange(L).repeat_interleave(per)  # (M) target position of each sequence
                m = len(t)
                x = torch.randint(half, (m, L), generator=gen) + dk * half  # (M L) disturbants
                x[torch.arange(m), t] = torch.randint(half, (m,), generator=gen) + tk * half  # the target
                b = self.build(x)
                b.mask = torch.nn.functional.one_hot(L - 1 - t, L).bool()  # output step L−1−t recalls x_t
                b.group = (2 * tk + dk) * L + t
                parts.append(b)
        batch = Batch.cat(parts)
        return batch.select(first_unique(hash_rows(batch.key))).to(device)  # drop the (rare) duplicates

    def report(self, pred: Tensor, batch: Batch) -> dict:
        L = self.L
        hit = self.correct(pred, batch).any(1).double().cpu()  # one scored step per sequence
        group = batch.group.cpu()
        cell = torch.zeros(4 * L, dtype=torch.float64).index_add_(0, group, hit)
        cnt = torch.zeros(4 * L, dtype=torch.float64).index_add_(0, group, torch.ones_like(hit))
        acc = (cell / cnt.clamp_min(1)).view(4, L)
        # target kind / disturbant kind
        names = [f"{a}/{b}" for a in self.FREQUENCY_CLASSES for b in self.FREQUENCY_CLASSES]
        out = {"dual_frequency": {n: float(cell.view(4, L)[i].sum() / cnt.view(4, L)[i].sum())
                                  for i, n in enumerate(names)},
               "dual_frequency_by_position": {n: acc[i].tolist() for i, n in enumerate(names)}}
        out.update(super().report(pred, batch))
        return out


class ShiftedReverse(ReverseTask):
    """Reverse ordering over ids ``offset … offset+V−1`` with the query id ``query``: the
    new-ids-only and old-ids-only test sets of an extended model. ``classes`` limits the
    prediction to the first ``classes`` outputs (the old ones)."""

    def __init__(self, cfg: TaskConfig, offset: int, query: int, classes: Optional[int] = None):
        self.offset, self._query, self.classes = offset, query, classes
        super().__init__(cfg)

    def predict(self, out: Tensor) -> Tensor:
        return (out if self.classes is None else out[..., : self.classes]).argmax(-1)

    @property
    def query_id(self) -> int:
        return self._query

    def tokens(self, n: int, gen: torch.Generator, device) -> Tensor:
        return torch.randint(self.V, (n, self.L), generator=gen, device=device) + self.offset  # (B L)


def reverse_task(cfg: TaskConfig, rank: int = 0, world_size: int = 1) -> ReverseTask:
    """The reverse variant ``cfg`` describes."""
    if cfg.min_length is not None:
        return VariableLengthReverse(cfg, rank, world_size)
    if cfg.rarity is not None:
        return DualFrequencyReverse(cfg, rank, world_size)
    return ReverseTask(cfg, rank, world_size)


def extension_tasks(cfg_task: TaskConfig, frozen_vocab: int) -> dict[str, ShiftedReverse]:
    """The test sets of a vocabulary-extended run (``frozen_vocab`` trained ids + new ids): only
    new ids; only old ids scored over the old classes (frozen weights must give exactly the
    trained model's predictions); only old ids scored over all classes (do the new output
    rows steal old predictions?)."""
    V, total, L = frozen_vocab, cfg_task.vocab_size, cfg_task.length
    X = total - V
    if float(X) ** L < 2 * cfg_task.n_test:
        raise PosrnnError(f"{X} new ids at length {L} make only {X ** L} distinct sequences, too few for "
                          f"{cfg_task.n_test} new-id test sequences; raise --extra-vocab")
    return {
        "new_ids": ShiftedReverse(replace(cfg_task, vocab_size=X), offset=V, query=total),
        "old_ids": ShiftedReverse(replace(cfg_task, vocab_size=V), offset=0, query=total, classes=V),
        "old_ids_all_classes": ShiftedReverse(replace(cfg_task, vocab_size=V), offset=0, query=total),
    }
