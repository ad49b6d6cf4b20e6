"""The floor lines of reversal and copying (``tasks/reverse.py``, ``tasks/copy.py``), torch-free:
chance (1/V) and *recall-last*, a causal model that recalls only the last input (``tasks.floors``
says how each is derived)."""

from __future__ import annotations

from typing import Optional

from .baseline import CHANCE, Baseline, Cell


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


RECALL_LAST = Baseline("recall-last", "a causal model that recalls only the last input", recall_last_line)
#: the lines of reverse, and of copy (the same last input recalled at the one step that asks for it)
LINES = (CHANCE, RECALL_LAST)
