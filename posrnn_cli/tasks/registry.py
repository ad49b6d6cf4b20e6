"""The task registry (docs/papers.md, Tasks): name → a callable that builds the task from its config.

Each task lives in its own module; adding one is a module here plus its line below, its
catalogue entry (``common/catalog.py``: the name and description ``--help`` shows) and a test.
"""

from __future__ import annotations

from typing import Callable

from ..common import catalog
from ..common.settings.config import TaskConfig
from ..common.errors import PosrnnError
from .base import Batch, HeldOut, Task, first_unique, hash_rows, phase_layout
from .continuous import ContinuousTask
from .copy import CopyTask
from .delayed_add import DelayedAddTask
from .lm import LMTask
from .mqar import MQARTask
from .predecessor import PredecessorTask
from .reverse import (DualFrequencyReverse, ReverseTask, ShiftedReverse, VariableLengthReverse, extension_tasks,
                      reverse_task)
from .sort import SortTask

#: name → task factory (a class, or a function choosing a variant from the config), called
#: with the config, the process's rank and the world size
TASKS: dict[str, Callable[[TaskConfig, int, int], Task]] = {
    "reverse": reverse_task,
    "sort": SortTask,
    "delayed-add": DelayedAddTask,
    "predecessor": PredecessorTask,
    "copy": CopyTask,
    "continuous": ContinuousTask,
    "lm": LMTask,
    "mqar": MQARTask,
}
catalog.check_keys("task", catalog.TASKS, TASKS)


def build_task(cfg: TaskConfig, *, rank: int = 0, world_size: int = 1) -> Task:
    """The task ``cfg`` names, for process ``rank`` of ``world_size`` under data parallelism."""
    if cfg.name not in TASKS:
        raise PosrnnError(f"unknown task {cfg.name!r}; choose one of: {', '.join(TASKS)}")
    return TASKS[cfg.name](cfg, rank, world_size)


__all__ = [
    "TASKS", "build_task", "Batch", "HeldOut", "Task", "first_unique", "hash_rows", "phase_layout",
    "ReverseTask", "VariableLengthReverse", "DualFrequencyReverse", "ShiftedReverse", "SortTask", "DelayedAddTask",
    "PredecessorTask", "CopyTask", "ContinuousTask", "LMTask", "MQARTask", "reverse_task", "extension_tasks",
]
