"""Every task's floor lines for token accuracy, declared once: the *chance line* (a guess that
reads nothing of the input) and the lines of the baseline models a reader would name
(recall-last, order-blind, order statistics, the position line). A score not shown above the
highest of them shows nothing the task asks for. The task classes (``tasks.base.Task.chance_line``
and ``position_line``), the figures and the scorecard's floor guard all read this module; it
imports neither torch nor the tasks, so the scorecard stays a reader of result tables.

The lines, per task (V ids, length L, P key-value pairs), each a baseline model a reader would
name, computed by formula or exact enumeration (``tests/test_floors.py`` simulates each model on
the task's own generator and lands on it):

- every task scored by token accuracy: *chance*, a guess that reads nothing of the input: 1/V
  (a uniform guess among the V ids), 1/P for MQAR (a guess among the P values in the context:
  only they can be targets).
- reverse and copy: *recall-last*, a causal model that recalls only the last input token and
  guesses every other step: it scores 1 at the one output step whose target is x_L and 1/V at
  the L − 1 others: (1 + (L − 1)/V)/L; 0.098 at V = 64, L = 12. With variable lengths (L ~
  U{m … L}) it is (1 + (E[l] − 1)/V)/E[l], every output token counted once. On the
  dual-frequency grid, where each test sequence scores the one step that recalls position t (t
  spread evenly), it hits at t = L and elsewhere guesses x_L where target and disturbants share
  a half (right with probability 2/V), else uniformly (1/V): (1 + (L − 1)·2/V)/L, and
  (1 + (L − 1)/V)/L across halves, over the positions the row reads.
- predecessor: *order-blind*, a model that knows which tokens the context held but not their
  order: the target is one of the L − 1 context tokens other than the query, so its best guess
  scores 1/(L − 1); 0.143 at L = 8.
- sort: *order statistics* (a position line): the sorted output's k-th token is the k-th order
  statistic of L uniform ids; guessing its most likely value at each k scores
  (1/L) Σ_k max_v P(X_(k) = v), with P(X_(k) ≤ v) = P(Binomial(L, (v + 1)/V) ≥ k).
- mqar: the *position line*: key j is asked at the j-th slot drawn (P(slot i) ∝ i^(a−1), without
  replacement, ``tasks/mqar.py``), so a model that reads only the step of a query can answer
  the value of the pair most likely asked there. With q(i, j) = P(pair j is asked at slot i),
  it scores (1/P) Σ_i max_j q(i, j). At L = 4P every slot is filled and the draw front-loads
  the first pairs: P = 4, L = 16 gives 0.386 (above chance, 0.25); P = 2, L = 8 gives 0.665.
  q is exact (a recursion over the sets of slots drawn) up to 14 slots, else estimated from
  200,000 seeded draws. With filler of zeros (``--filler zero``) the queries stand out, so a
  model can count them: the line is then read by query rank r, (1/P) Σ_r max_j P(pair j is the
  r-th asked), estimated from the same draws (equal to the step's line at L = 4P). Every
  filler the task accepts has its line.
- delayed-add, continuous and lm are not scored by token accuracy: no line is declared.

``TASK_LINES`` declares them, one tuple of ``Baseline`` a task; ``lines`` evaluates them for one
cell, ``floor_line`` takes the highest, ``floor_words`` names them all.
"""

from __future__ import annotations

import math
from functools import lru_cache
from dataclasses import dataclass
from typing import Callable, Optional

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


@dataclass(frozen=True)
class Cell:
    """What a line depends on: a result row's task settings (``from_row`` reads a table row)."""

    task: str
    vocab_size: int
    length: Optional[int] = None
    pairs: Optional[int] = None
    filler: str = "random"
    min_length: Optional[int] = None
    condition: Optional[str] = None  # the dual-frequency grid's "target kind/disturbant kind"
    half: Optional[str] = None  # the dual-frequency table's positions: all, first, second, q1 … q4

    @classmethod
    def from_row(cls, row: dict) -> Optional["Cell"]:
        task, V = row.get("task"), row.get("vocab_size")
        if not isinstance(task, str) or not _whole(V):
            return None
        num = (lambda c: int(row[c]) if _whole(row.get(c)) else None)
        text = (lambda c: row[c] if isinstance(row.get(c), str) and row[c] else None)
        return cls(task, int(V), num("length"), num("pairs"), text("filler") or "random", num("min_length"),
                   text("condition"), text("half"))


def _whole(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x == int(x)


@dataclass(frozen=True)
class Baseline:
    """A baseline model a reader would name: ``name`` (the line's short name), ``rule`` (how it
    scores, in words) and ``value`` (Cell → its token accuracy, None where it does not apply)."""

    name: str
    rule: str
    value: Callable[[Cell], Optional[float]]


@dataclass(frozen=True)
class Line:
    """One baseline's line at one cell."""

    name: str
    rule: str
    value: float

    def words(self) -> str:
        return f"{self.name} ({self.rule}) {self.value:.3f}"


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


def recall_last_line(cell: Cell) -> Optional[float]:
    """Reverse or copy: a causal model that recalls only the last input token x_L, right at the
    one output step whose target it is, and guesses (1/V) at the others."""
    V, L = cell.vocab_size, cell.length
    if not L:
        return None
    if cell.condition and cell.half:  # the dual-frequency grid: one scored step per sequence, at t
        t_lo, t_hi = _POSITIONS.get(cell.half, (0.0, 1.0))
        ts = [t for t in range(L) if t_lo * L <= t < t_hi * L]
        kinds = cell.condition.split("/")
        other = 2.0 / V if len(kinds) == 2 and kinds[0] == kinds[1] else 1.0 / V  # x_L or a uniform guess
        return sum(1.0 if t == L - 1 else other for t in ts) / len(ts) if ts else None
    lo = cell.min_length or L
    mean = (lo + L) / 2  # E[l] for l ~ U{lo … L}: every length tested on as many sequences
    return (1.0 + (mean - 1.0) / V) / mean


#: the dual-frequency table's position ranges, as fractions of L (``analysis.aggregate.POSITIONS``)
_POSITIONS = {"all": (0, 1), "first": (0, 0.5), "second": (0.5, 1),
              "q1": (0, 0.25), "q2": (0.25, 0.5), "q3": (0.5, 0.75), "q4": (0.75, 1)}


def order_blind_line(cell: Cell) -> Optional[float]:
    """Predecessor: a model that knows which L tokens the context held, not their order: the
    target is one of the L − 1 other than the query, so its best guess scores 1/(L − 1)."""
    return 1.0 / (cell.length - 1) if cell.length and cell.length >= 2 else None


def _chance_v(cell: Cell) -> Optional[float]:
    return 1.0 / cell.vocab_size if cell.vocab_size else None


def _chance_p(cell: Cell) -> Optional[float]:
    return 1.0 / cell.pairs if cell.pairs else None


def _sort_position(cell: Cell) -> Optional[float]:
    return sort_position_line(cell.vocab_size, cell.length) if cell.length else None


def _mqar_position(cell: Cell) -> Optional[float]:
    return mqar_position_line(cell.length, cell.pairs, cell.filler) if cell.length and cell.pairs else None


CHANCE = Baseline("chance", "1/V", _chance_v)
RECALL_LAST = Baseline("recall-last", "a causal model that recalls only the last input", recall_last_line)
#: every task's lines, declared once: the baselines a reader would name for its token accuracy
TASK_LINES: dict[str, tuple[Baseline, ...]] = {
    "reverse": (CHANCE, RECALL_LAST),
    "copy": (CHANCE, RECALL_LAST),
    "predecessor": (CHANCE, Baseline("order-blind", "a guess among the context's tokens but the query, 1/(L − 1)",
                                     order_blind_line)),
    "sort": (CHANCE, Baseline("from position alone", POSITION_RULE["sort"], _sort_position)),
    "mqar": (Baseline("chance", CHANCE_RULE["mqar"], _chance_p),
             Baseline("from position alone", POSITION_RULE["mqar"], _mqar_position)),
}


def lines(cell: Cell) -> list[Line]:
    """Every line the cell's task declares, evaluated at the cell (those that apply)."""
    out = []
    for b in TASK_LINES.get(cell.task, ()):
        v = b.value(cell)
        if v is not None:
            out.append(Line(b.name, b.rule, v))
    return out


def highest(cell: Cell) -> Optional[Line]:
    """The highest of the cell's lines (None: its task declares none)."""
    found = lines(cell)
    return max(found, key=lambda x: x.value) if found else None


def informed(cell: Cell) -> Optional[Line]:
    """The highest line above chance that a baseline model reaches (recall-last, order-blind,
    order statistics, position), where the task declares one."""
    found = [x for x in lines(cell) if x.name != "chance"]
    return max(found, key=lambda x: x.value) if found else None


def chance_line(task: str, vocab_size: int, length: Optional[int] = None,
                pairs: Optional[int] = None) -> Optional[float]:
    """Token accuracy of a guess that reads nothing of the input; None where the task declares
    no line (it is not scored by token accuracy)."""
    found = [x for x in lines(Cell(task, vocab_size, length, pairs)) if x.name == "chance"]
    return found[0].value if found else None


def position_line(task: str, vocab_size: int, length: Optional[int] = None, pairs: Optional[int] = None,
                  filler: str = "random") -> Optional[float]:
    """The best token accuracy from position alone, where the task declares one; else None
    (position carries nothing beyond chance)."""
    found = [x for x in lines(Cell(task, vocab_size, length, pairs, filler)) if x.name == "from position alone"]
    return found[0].value if found else None


def floor_line(task: str, vocab_size: int, length: Optional[int] = None, pairs: Optional[int] = None,
               filler: str = "random") -> Optional[float]:
    """The highest line the task declares at this cell (None: no line declared)."""
    top = highest(Cell(task, vocab_size, length, pairs, filler))
    return top.value if top else None


def floor_words(cell: Cell) -> str:
    """The lines in words: "chance (1/V) 0.016; recall-last (…) 0.098"."""
    return "; ".join(x.words() for x in lines(cell))
