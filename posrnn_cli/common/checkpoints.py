"""Where a run directory keeps its checkpoints and how they are named (``checkpoints/step_NNNNNNN.pt``):
torch-free, so readers of results (aggregation) find a run's latest checkpoint without training code."""

from __future__ import annotations

import re
from pathlib import Path

CKPT_DIR = "checkpoints"
_STEP_RE = re.compile(r"^step_(\d+)\.pt$")


def list_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """``[(step, path), …]`` of the run's checkpoints, sorted by step."""
    d = Path(run_dir) / CKPT_DIR
    if not d.is_dir():
        return []
    return sorted((int(m.group(1)), p) for p in d.iterdir() if (m := _STEP_RE.match(p.name)))
