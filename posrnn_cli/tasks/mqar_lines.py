"""The floor lines of MQAR (``tasks/mqar.py``), torch-free: chance among the values in the context
(1/P) and the *position line*, the value of the pair most likely asked at each query step (or
query rank, with filler of zeros)."""

from __future__ import annotations

from functools import lru_cache
from typing import Optional

from .baseline import Baseline, Cell

#: MQAR's power-law exponent over the query slots (``tasks.mqar.POWER_A``; a test keeps them equal)
MQAR_POWER_A = 0.01
#: slots up to which MQAR's q(i, j) is computed exactly
EXACT_SLOTS = 14
#: seeded draws for the estimate beyond that
DRAWS = 200_000
CHANCE_RULE = "1/P, a guess among the values in the context"
#: the chance line's legend in the figures
CHANCE_LABEL = "1/P (a guess among the values in context)"
POSITION_RULE = "the value of the pair most likely asked at each query step"


def _slot_weights(slots: int, a: float) -> list[float]:
    return [(i + 1) ** (a - 1.0) for i in range(slots)]


def mqar_slot_probs(slots: int, pairs: int, a: float = MQAR_POWER_A) -> list[list[float]]:
    """q[i][j] = P(pair j is asked at slot i), exactly: the j-th slot drawn without replacement
    with P ∝ w_i, by a recursion over the sets of slots already drawn."""
    w = _slot_weights(slots, a)
    total = sum(w)
    q = [[0.0] * pairs for _ in range(slots)]
    level = {0: 1.0}  # drawn set (bit mask) → probability
    for j in range(pairs):
        nxt: dict[int, float] = {}
        for mask, pr in level.items():
            rest = total - sum(w[i] for i in range(slots) if mask >> i & 1)
            for i in range(slots):
                if not mask >> i & 1:
                    x = pr * w[i] / rest
                    q[i][j] += x
                    nxt[mask | 1 << i] = nxt.get(mask | 1 << i, 0.0) + x
        level = nxt
    return q


def _mqar_draws(slots: int, pairs: int, a: float):
    """(DRAWS, P) slots in draw order, seeded: exponential races, as ``tasks/mqar.py`` draws."""
    import numpy as np

    rng = np.random.default_rng(0)
    w = np.asarray(_slot_weights(slots, a))
    race = rng.exponential(size=(DRAWS, slots)) / w
    return np.argsort(race, axis=1)[:, :pairs]


@lru_cache(maxsize=64)
def mqar_position_line(length: int, pairs: int, filler: str = "random", a: float = MQAR_POWER_A) -> float:
    """The best token accuracy from a query's step alone (random filler) or from its rank among
    the queries (filler of zeros)."""
    import numpy as np

    slots = (length - 2 * pairs) // 2
    if filler == "random" and slots <= EXACT_SLOTS:
        q = mqar_slot_probs(slots, pairs, a)
        return sum(max(row) for row in q) / pairs
    drawn = _mqar_draws(slots, pairs, a)  # (N P): pair j's slot
    where = np.argsort(np.argsort(drawn, axis=1), axis=1) if filler == "zero" else drawn  # rank or slot
    size = pairs if filler == "zero" else slots
    counts = np.zeros((size, pairs))
    for j in range(pairs):
        counts[:, j] = np.bincount(where[:, j], minlength=size)
    return float(counts.max(axis=1).sum() / (DRAWS * pairs))


def _chance_p(cell: Cell) -> Optional[float]:
    return 1.0 / cell.pairs if cell.pairs else None


def _mqar_position(cell: Cell) -> Optional[float]:
    return mqar_position_line(cell.length, cell.pairs, cell.filler) if cell.length and cell.pairs else None


LINES = (Baseline("chance", CHANCE_RULE, _chance_p), Baseline("from position alone", POSITION_RULE, _mqar_position))
