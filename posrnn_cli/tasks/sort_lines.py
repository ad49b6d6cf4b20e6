"""The floor lines of sorting (``tasks/sort.py``), torch-free: chance (1/V) and the *order
statistics* line, the best token accuracy from position alone."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Optional

from .baseline import CHANCE, Baseline, Cell

POSITION_RULE = "the most likely k-th order statistic at each position"


def _binom_tail(k: int, n: int, p: float) -> float:
    return sum(math.comb(n, m) * p ** m * (1 - p) ** (n - m) for m in range(k, n + 1))


@lru_cache(maxsize=64)
def sort_position_line(vocab_size: int, length: int) -> float:
    """(1/L) Σ_k max_v P(X_(k) = v) for L ids drawn uniformly from V."""
    total = 0.0
    for k in range(1, length + 1):
        cdf = [_binom_tail(k, length, (v + 1) / vocab_size) for v in range(vocab_size)]
        total += max(c - (cdf[v - 1] if v else 0.0) for v, c in enumerate(cdf))
    return total / length


def _sort_position(cell: Cell) -> Optional[float]:
    return sort_position_line(cell.vocab_size, cell.length) if cell.length else None


LINES = (CHANCE, Baseline("from position alone", POSITION_RULE, _sort_position))
