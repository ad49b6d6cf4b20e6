"""The floor lines of the predecessor task (``tasks/predecessor.py``), torch-free: chance (1/V)
and *order-blind*, a model that knows which tokens the context held but not their order."""

from __future__ import annotations

from typing import Optional

from .baseline import CHANCE, Baseline, Cell


def order_blind_line(cell: Cell) -> Optional[float]:
    """Predecessor: a model that knows which L tokens the context held, not their order: the
    target is one of the L − 1 other than the query, so its best guess scores 1/(L − 1)."""
    return 1.0 / (cell.length - 1) if cell.length and cell.length >= 2 else None


LINES = (CHANCE, Baseline("order-blind", "a guess among the context's tokens but the query, 1/(L − 1)",
                          order_blind_line))
