"""Predecessor query (001 §6.1.3)."""

from __future__ import annotations

import math

import torch

from ..common.errors import PosrnnError
from .base import Batch, Task


class PredecessorTask(Task):
    """Predecessor query: ``x_1…x_L`` all distinct; at step L+1 one of ``x_2…x_L`` is shown
    again; the single target is its predecessor."""

    name = "predecessor"

    @property
    def max_steps(self) -> int:
        return self.L + 1

    @property
    def output_start(self) -> int:
        return self.L

    def check(self) -> None:
        if self.cfg.length < 2:
            raise PosrnnError(f"predecessor needs --length ≥ 2, got {self.cfg.length}")
        if self.cfg.length > self.cfg.vocab_size:
            raise PosrnnError(f"predecessor draws L distinct tokens: --length ({self.cfg.length}) must not exceed "
                              f"--vocab-size ({self.cfg.vocab_size})")
        super().check()

    def space_size(self) -> float:
        V, L = self.V, self.L
        log = math.lgamma(V + 1) - math.lgamma(V - L + 1) + math.log(L - 1)
        return math.inf if log > 700 else math.exp(log)

    def sample(self, n, gen, device) -> Batch:
        x = torch.rand(n, self.V, generator=gen, device=device).argsort(dim=1)[:, : self.L]  # (B L) distinct
        k = torch.randint(1, self.L, (n, 1), generator=gen, device=device)  # (B 1) which x_k (0-based 1…L−1)
        inputs = torch.cat([x, x.gather(1, k)], dim=1)  # (B L+1)
        targets = x.gather(1, k - 1)  # (B 1)
        out_index = torch.full((n, 1), self.L, device=device)
        return Batch(inputs=inputs, targets=targets, out_index=out_index, key=torch.cat([x, k], 1))
