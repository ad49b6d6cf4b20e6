"""Language modelling as a task of the one training loop (001 §6.5).

The corpus is the encoded layout written by ``posrnn lm encode`` (``encode.LMCorpus``:
uint16 ids and paragraph offsets per split, each paragraph BOS + its first tokens (+ EOS),
at most ``max_tokens`` in all). A sample is one paragraph, so an absolute PE always starts
at the paragraph's first token: inputs ``t_0 … t_{n−2}``, targets ``t_1 … t_{n−1}``,
right-padded, padding masked out of the loss and never fed to the output head, which
takes the real tokens in chunks (``models/head.py``): no (B, T−1, V) tensor is made.

With ``task.length_buckets`` = n, each batch is drawn from one of n equal-count groups of the
paragraphs sorted by length (the group drawn first, then the batch within it, both with the run's
generator): the batch pads to its group's longest draw, not the corpus's (at B = 512 about 1,022
steps unbucketed). Each paragraph is still drawn equally often, but which paragraphs share a batch
changes, so the papers' profiles leave it off; off, sampling is as it always was.

Evaluation reads the whole test split in order; ``infer`` returns per-token NLL instead of
predictions, and the report gives perplexity = exp(mean token NLL) and NLL per position.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ..common.settings.config import check_bounds
from ..common.errors import PosrnnError
from ..lm.encode import LMCorpus
from ..models.head import HEAD_CHUNK_TOKENS, chunked_cross_entropy, token_nll
from .base import Batch, Task


def length_buckets(lengths, n: int) -> list[np.ndarray]:
    """The paragraph indices in ``n`` groups of equal count (to one), in order of length (ties by
    index), none empty: at most as many groups as paragraphs."""
    order = np.argsort(np.asarray(lengths), kind="stable")
    return [part for part in np.array_split(order, min(n, len(order))) if len(part)]


class LMTask(Task):
    """Next-token prediction over paragraphs of an encoded corpus (``task.data``)."""

    name = "lm"
    holds_out = False  # the test split is a separate file
    head_chunk = HEAD_CHUNK_TOKENS  # the head sees the real tokens, this many at a time (models/head.py)
    max_eval_batch = 16  # paragraphs of up to max_tokens, logits over the whole vocabulary

    def __init__(self, cfg, rank: int = 0, world_size: int = 1):
        if not cfg.data:
            raise PosrnnError("the lm task needs the encoded corpus: pass --data (posrnn lm train) or --set "
                              "task.data=DIR")
        if not Path(cfg.data).is_dir():
            raise PosrnnError(f"encoded corpus {cfg.data} does not exist; run `posrnn lm encode` first or fix --data")
        self.train_split = LMCorpus(cfg.data, "train")  # all paragraphs; ranks slice each global batch
        super().__init__(cfg, rank, world_size)
        self.buckets = length_buckets(self.train_split.lengths, cfg.length_buckets) if cfg.length_buckets else None

    @property
    def root(self) -> Path:
        return Path(self.cfg.data)

    @property
    def n_input_ids(self) -> int:
        return self.V  # no query id: every step predicts the next token

    @property
    def max_steps(self) -> int:
        return self.L  # at most length−1 input steps are used

    def check(self) -> None:
        c = self.cfg
        check_bounds(c, "task")  # the bounds declared with TaskConfig's fields, as for every task
        meta = self.train_split.meta
        if c.vocab_size != meta["vocab_size"]:
            raise PosrnnError(f"task.vocab_size ({c.vocab_size}) differs from the corpus tokenizer's "
                              f"({meta['vocab_size']}); posrnn lm train sets it for you")
        if c.length < meta["max_tokens"]:
            raise PosrnnError(f"task.length ({c.length}) is shorter than the corpus's paragraphs (up to "
                              f"{meta['max_tokens']} tokens)")
        if c.length < 2:
            raise PosrnnError(f"lm length (tokens per paragraph) must be at least 2, got {c.length}")
        for flag, value in (("--min-length", c.min_length), ("--rarity", c.rarity)):
            if value is not None:
                raise PosrnnError(f"{flag} is not defined for the lm task; drop it")
        if c.autoregressive:
            raise PosrnnError("--autoregressive is not defined for the lm task; drop it")

    def space_size(self) -> float:
        return float("inf")

    def _batch(self, tokens: Tensor, lengths: Tensor) -> Batch:
        """Paragraphs (B, T) with their lengths → inputs t_0…t_{T−2}, targets t_1…t_{T−1}."""
        T = tokens.shape[1]
        mask = torch.arange(T - 1, device=tokens.device) < (lengths[:, None] - 1)  # (B T−1)
        return Batch(inputs=tokens[:, :-1], targets=tokens[:, 1:] * mask, out_index=None, key=tokens[:, :1],
                     mask=mask, lengths=lengths)

    def sample(self, n: int, gen: torch.Generator, device) -> Batch:
        """``n`` random paragraphs per rank. Every rank draws the same global batch of
        ``n × world_size`` paragraphs and keeps its own slice, so a data-parallel step equals
        one process with the whole batch (up to float reduction order)."""
        if self.buckets is not None:
            return self._bucketed(n, gen, device)
        idx = torch.randint(len(self.train_split), (n * self.world_size,), generator=gen, device=gen.device)
        idx = idx[self.rank * n : (self.rank + 1) * n].tolist()
        tokens, lengths = self.train_split.collate(idx, pad_id=0)
        return self._batch(tokens.to(device), lengths.to(device))

    def _bucketed(self, n: int, gen: torch.Generator, device) -> Batch:
        """``sample`` under ``task.length_buckets``: a bucket drawn, then the global batch within it."""
        b = int(torch.randint(len(self.buckets), (1,), generator=gen, device=gen.device))
        rows = self.buckets[b]
        pos = torch.randint(len(rows), (n * self.world_size,), generator=gen, device=gen.device)
        idx = rows[pos[self.rank * n : (self.rank + 1) * n].cpu().numpy()].tolist()
        tokens, lengths = self.train_split.collate(idx, pad_id=0)
        return self._batch(tokens.to(device), lengths.to(device))

    def test_set(self, device="cpu", split: str = "test") -> Batch:
        corpus = LMCorpus(self.root, split)
        tokens, lengths = corpus.collate(range(len(corpus)), pad_id=0)
        return self._batch(tokens, lengths).to(device)

    def train_forward(self, model, batch: Batch) -> tuple[Tensor, Tensor]:
        """``loss``'s quantity without a (B, T−1, V) tensor: the head sees the real tokens only
        (padding sits after each paragraph and the core is causal, so their states are those
        of the padded batch), in chunks recomputed in backward (``models/head.py``)."""
        h = model(batch.inputs, select=batch.mask)  # (N H), N real tokens
        head = getattr(model, "module", model).head  # unwrapped under DistributedDataParallel
        total, argmax = chunked_cross_entropy(h, head.weight, head.bias, batch.targets[batch.mask])
        pred = torch.full_like(batch.targets, -1)  # (B T−1): −1 on padding, which ``correct`` masks out
        pred[batch.mask] = argmax
        return self._mean(total, batch), pred

    def loss(self, out: Tensor, batch: Batch) -> Tensor:
        """Mean token NLL over the global batch from logits (B, T−1, V): the plain form of
        ``train_forward``'s loss, which the tests compare it with."""
        nll = torch.nn.functional.cross_entropy(out.flatten(0, 1), batch.targets.flatten(), reduction="none")
        return self._mean((nll * batch.mask.flatten().to(nll.dtype)).sum(), batch)

    def _mean(self, total: Tensor, batch: Batch) -> Tensor:
        """Mean token NLL over the *global* batch: under data parallelism each rank divides
        its summed NLL by the all-reduced token count (× world size, which DDP's gradient
        averaging undoes), so ranks with different token counts still make the exact
        single-process step."""
        count = batch.mask.sum().to(total.dtype)
        if self.world_size > 1:
            count = count.detach().clone()
            torch.distributed.all_reduce(count)
            return total * self.world_size / count.clamp_min(1)
        return total / count.clamp_min(1)

    def infer(self, model, batch: Batch, feedback: str = "self") -> Tensor:
        """Per-token NLL (B, T−1), zero on padding; the head on the real tokens only, in chunks."""
        self.check_feedback(feedback)
        h = model(batch.inputs, select=batch.mask)  # (N H)
        head = getattr(model, "module", model).head
        nll = torch.zeros(batch.targets.shape, dtype=torch.float32, device=h.device)
        nll[batch.mask] = token_nll(h, head.weight, head.bias, batch.targets[batch.mask]).to(nll.dtype)
        return nll

    def scores(self, pred: Tensor, batch: Batch) -> dict:
        n = batch.mask.sum(1).clamp_min(1)
        return {"nll": (pred.sum(1) / n).double().cpu().numpy()}  # mean token NLL per paragraph

    def report(self, pred: Tensor, batch: Batch) -> dict:
        total, count = pred.sum().double().item(), batch.mask.sum().item()
        by_pos = pred.double().sum(0) / batch.mask.double().sum(0).clamp_min(1)
        return {
            "perplexity": float(np.exp(total / max(count, 1))),
            "token_nll": total / max(count, 1),
            "n_tokens": int(count),
            "n_paragraphs": int(len(batch)),
            "nll_by_position": by_pos.tolist(),
            "tokens_by_position": batch.mask.sum(0).tolist(),
        }
