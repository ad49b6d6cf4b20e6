"""The tasks (docs/papers.md, Tasks). The registry (``registry``: name → the callable that builds a
task from its config) loads on first use, with torch: ``from posrnn_cli.tasks import build_task``
reads it. What needs no tensor imports no torch: each task's floor lines (``floors``, gathered from
the modules beside the tasks: ``reverse_lines``, ``predecessor_lines``, ``sort_lines``,
``mqar_lines``), which the scorecard and the figures read.
"""

from __future__ import annotations

import importlib
from typing import Any

#: the names the registry module exports, read from it on first use
REGISTRY_NAMES = (
    "TASKS", "build_task", "Batch", "HeldOut", "Task", "first_unique", "hash_rows", "phase_layout",
    "ReverseTask", "VariableLengthReverse", "DualFrequencyReverse", "ShiftedReverse", "SortTask", "DelayedAddTask",
    "PredecessorTask", "CopyTask", "ContinuousTask", "LMTask", "MQARTask", "reverse_task", "extension_tasks",
)


def __getattr__(name: str) -> Any:
    if name in REGISTRY_NAMES:
        return getattr(importlib.import_module(".registry", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(REGISTRY_NAMES)
