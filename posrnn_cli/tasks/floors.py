"""Every task's floor lines for token accuracy, declared once: the *chance line* (a guess that
reads nothing of the input) and the lines of the baseline models a reader would name
(recall-last, order-blind, order statistics, the position line). A score not shown above the
highest of them shows nothing the task asks for. The task classes (``tasks.base.Task.chance_line``
and ``position_line``), the figures and the scorecard's floor guard all read this module; it
imports no torch (nor does ``posrnn_cli.tasks`` until its registry is read), so the scorecard stays a
reader of result tables.

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

Each task's lines sit beside it in a torch-free module (``reverse_lines``, ``predecessor_lines``,
``sort_lines``, ``mqar_lines``; what a line is: ``baseline``); ``TASK_LINES`` gathers them, one
tuple of ``Baseline`` a task; ``lines`` evaluates them for one
cell, ``floor_line`` takes the highest, ``floor_words`` names them all.
"""

from __future__ import annotations

from typing import Optional

from . import mqar_lines, predecessor_lines, reverse_lines, sort_lines
from .baseline import CHANCE, Baseline, Cell, Line
from .mqar_lines import MQAR_POWER_A, mqar_position_line, mqar_slot_probs
from .predecessor_lines import order_blind_line
from .reverse_lines import recall_last_line
from .sort_lines import sort_position_line

#: every task's lines, gathered from the modules beside the tasks: the baselines a reader would name
TASK_LINES: dict[str, tuple[Baseline, ...]] = {
    "reverse": reverse_lines.LINES,
    "copy": reverse_lines.LINES,
    "predecessor": predecessor_lines.LINES,
    "sort": sort_lines.LINES,
    "mqar": mqar_lines.LINES,
}
#: how each task's chance and position lines are derived, in words (the scorecard quotes them)
CHANCE_RULE = {task: lines[0].rule for task, lines in TASK_LINES.items()}
#: the chance line's legend in the figures, where it is not 1/V
CHANCE_LABEL = {"mqar": mqar_lines.CHANCE_LABEL}
POSITION_RULE = {"sort": sort_lines.POSITION_RULE, "mqar": mqar_lines.POSITION_RULE}


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


__all__ = ["CHANCE", "CHANCE_LABEL", "CHANCE_RULE", "POSITION_RULE", "TASK_LINES", "Baseline", "Cell", "Line",
           "MQAR_POWER_A", "chance_line", "floor_line", "floor_words", "highest", "informed", "lines",
           "mqar_position_line", "mqar_slot_probs", "order_blind_line", "recall_last_line", "sort_position_line"]
