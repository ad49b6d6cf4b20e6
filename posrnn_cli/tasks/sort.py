"""Sorting (000 App. C.2, 003 App. A.2): the reverse layout, target = the input sorted ascending (ties kept)."""

from __future__ import annotations

from typing import Optional

from torch import Tensor

from .base import Batch
from .reverse import ReverseTask


class SortTask(ReverseTask):
    """``x_1…x_L`` then L queries; target ``sort(x)``. Reports the share of non-decreasing
    predictions (the paper's sort diagnostic)."""

    name = "sort"
    supports_variable_length = False
    supports_rarity = False
    fixed_reverse_layout = False  # not reverse ordering: no stability triplets, no extension
    extendable = False

    @property
    def shared_input_start(self) -> Optional[int]:
        return None if self.cfg.autoregressive else self.L

    def target_of(self, x: Tensor, lengths: Optional[Tensor]) -> Tensor:
        return x.sort(dim=1).values

    def report(self, pred: Tensor, batch: Batch) -> dict:
        out = super().report(pred, batch)
        out["non_decreasing_share"] = float((pred[:, 1:] >= pred[:, :-1]).all(1).double().mean())
        return out
