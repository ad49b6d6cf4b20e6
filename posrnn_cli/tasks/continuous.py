"""The "infinite vocabulary" (000 App. B.3): tokens are random unit vectors."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..common.results.tables import COSINE_QUANTILES as QUANTILES
from .base import Batch, Task


class ContinuousTask(Task):
    """"Infinite vocabulary": tokens are random unit vectors in R^d; reverse them. A linear
    projection replaces the embedding, the head predicts vectors, loss = 1 − cosine.
    The training log's "accuracy" is the mean cosine."""

    name = "continuous"
    continuous = True

    @property
    def n_outputs(self) -> int:
        return self.cfg.dim

    @property
    def output_start(self) -> int:
        return self.L

    def space_size(self) -> float:
        return math.inf

    def sample(self, n, gen, device) -> Batch:
        L, d = self.L, self.cfg.dim
        x = torch.nn.functional.normalize(torch.randn(n, L, d, generator=gen, device=device), dim=-1)  # (B L d)
        inputs = torch.cat([x, torch.zeros_like(x)], dim=1)  # (B 2L d); query steps get the learned vector
        query = torch.zeros(n, 2 * L, dtype=torch.bool, device=device)
        query[:, L:] = True
        out_index = torch.arange(L, 2 * L, device=device).expand(n, L)
        key = (x[..., : min(d, 4)] * 2**20).round().long().flatten(1)  # identifies a draw
        return Batch(inputs=inputs, targets=x.flip(1), out_index=out_index, key=key, query=query)

    def loss(self, out: Tensor, batch: Batch) -> Tensor:
        return (1 - torch.nn.functional.cosine_similarity(out, batch.targets, dim=-1)).mean()

    def predict(self, out: Tensor) -> Tensor:
        return out  # (B K d)

    def correct(self, pred: Tensor, batch: Batch) -> Tensor:
        return torch.nn.functional.cosine_similarity(pred, batch.targets, dim=-1)  # (B K) cosine

    def scores(self, pred: Tensor, batch: Batch) -> dict:
        cos = self.correct(pred, batch)
        return {"cosine": cos.mean(1).double().cpu().numpy()}

    def report(self, pred: Tensor, batch: Batch) -> dict:
        """The distribution of the per-token cosines over the whole test set: its quartiles, and
        the quantiles ``QUANTILES`` as ``cosine_q10`` … (what the cosine table reads per seed)."""
        cos = self.correct(pred, batch).flatten().double().cpu()
        q = torch.quantile(cos, torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0], dtype=torch.float64))
        at = torch.quantile(cos, torch.tensor([p / 100 for p in QUANTILES], dtype=torch.float64))
        return {"cosine_quartiles": dict(zip(["min", "q25", "median", "q75", "max"], q.tolist())),
                **{f"cosine_q{p}": v for p, v in zip(QUANTILES, at.tolist())}}
