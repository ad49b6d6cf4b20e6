"""Every task's floor lines for token accuracy, declared once: the *chance line* (a guess that
reads nothing of the input) and, where it applies, the *position line* (the best score from
the step alone, reading no token's identity). A score at or below the higher of the two shows
nothing the task asks for. The task classes (``tasks.base.Task.chance_line`` and
``position_line``) and the scorecard's floor guard both read these functions; they import
neither torch nor the tasks, so the scorecard stays a reader of result tables.

The lines, per task (V ids, length L, P key-value pairs):

- reverse, copy, predecessor: chance 1/V (a uniform guess among the V ids); each target is
  drawn uniformly whatever its position, so the position line is chance itself. (The
  dual-frequency draw keeps the line at 1/V; a guess of its Frequent half would do better, and
  no claim reads its arms near there.)
- sort: chance 1/V. Position line: the sorted output's k-th token is the k-th order statistic
  of L uniform ids; guessing its most likely value at each k scores
  (1/L) Σ_k max_v P(X_(k) = v), with P(X_(k) ≤ v) = P(Binomial(L, (v + 1)/V) ≥ k).
- mqar: chance 1/P (a guess among the P values in the context: only they can be targets).
  Position line: key j is asked at the j-th slot drawn (P(slot i) ∝ i^(a−1), without
  replacement, ``tasks/mqar.py``), so a model that reads only the step of a query can answer
  the value of the pair most likely asked there. With q(i, j) = P(pair j is asked at slot i),
  it scores (1/P) Σ_i max_j q(i, j). At L = 4P every slot is filled and the draw front-loads
  the first pairs: P = 4, L = 16 gives 0.386 (above chance, 0.25); P = 2, L = 8 gives 0.665.
  q is exact (a recursion over the sets of slots drawn) up to 14 slots, else estimated from
  200,000 seeded draws. With filler of zeros the queries stand out, so a model can count them:
  the line is then read by query rank r, (1/P) Σ_r max_j P(pair j is the r-th asked), estimated
  from the same draws (equal to the step's line at L = 4P).
- delayed-add, continuous and lm are not scored by token accuracy: no line is declared.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Optional

#: MQAR's power-law exponent over the query slots (``tasks.mqar.POWER_A``; a test keeps them equal)
MQAR_POWER_A = 0.01
#: slots up to which MQAR's q(i, j) is computed exactly
EXACT_SLOTS = 14
#: seeded draws for the estimate beyond that
DRAWS = 200_000

#: how each line is derived, in words (the scorecard quotes them in a "not testable" reason)
CHANCE_RULE = {"reverse": "1/V", "copy": "1/V", "predecessor": "1/V", "sort": "1/V",
               "mqar": "1/P, a guess among the values in the context"}
#: the chance line's legend in the figures, where it is not 1/V
CHANCE_LABEL = {"mqar": "1/P (a guess among the values in context)"}
POSITION_RULE = {"sort": "the most likely k-th order statistic at each position",
                 "mqar": "the value of the pair most likely asked at each query step"}


def chance_line(task: str, vocab_size: int, length: Optional[int] = None,
                pairs: Optional[int] = None) -> Optional[float]:
    """Token accuracy of a guess that reads nothing of the input; None where the task declares
    no line (it is not scored by token accuracy)."""
    if task == "mqar":
        return 1.0 / pairs if pairs else None
    if task in CHANCE_RULE:
        return 1.0 / vocab_size
    return None


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


def position_line(task: str, vocab_size: int, length: Optional[int] = None, pairs: Optional[int] = None,
                  filler: str = "random") -> Optional[float]:
    """The best token accuracy from position alone, where the task declares one; else None
    (position carries nothing beyond chance)."""
    if task == "sort" and length:
        return sort_position_line(int(vocab_size), int(length))
    if task == "mqar" and length and pairs:
        return mqar_position_line(int(length), int(pairs), filler)
    return None


def floor_line(task: str, vocab_size: int, length: Optional[int] = None, pairs: Optional[int] = None,
               filler: str = "random") -> Optional[float]:
    """The higher of the chance and position lines (None: no line declared)."""
    lines = [x for x in (chance_line(task, vocab_size, length, pairs),
                         position_line(task, vocab_size, length, pairs, filler)) if x is not None]
    return max(lines) if lines else None


def floor_words(task: str, vocab_size: int, length: Optional[int] = None, pairs: Optional[int] = None,
                filler: str = "random") -> str:
    """The lines in words: "chance 1/P = 0.250; from position alone 0.386"."""
    parts = []
    c = chance_line(task, vocab_size, length, pairs)
    if c is not None:
        parts.append(f"chance {CHANCE_RULE[task]} = {c:.3f}")
    p = position_line(task, vocab_size, length, pairs, filler)
    if p is not None:
        parts.append(f"from position alone ({POSITION_RULE[task]}) {p:.3f}")
    return "; ".join(parts)
