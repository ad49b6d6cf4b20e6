"""What a floor line is, torch-free: the task settings a line depends on (``Cell``), a baseline
model a reader would name (``Baseline``), its value at one cell (``Line``), and the chance line
every task scored by token accuracy declares (``CHANCE``, 1/V). Each task's own lines sit beside
it (``reverse_lines``, ``predecessor_lines``, ``sort_lines``, ``mqar_lines``); ``tasks.floors``
gathers them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional


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


def _chance_v(cell: Cell) -> Optional[float]:
    return 1.0 / cell.vocab_size if cell.vocab_size else None


CHANCE = Baseline("chance", "1/V", _chance_v)
