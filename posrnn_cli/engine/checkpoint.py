"""Run directories and checkpoints: written atomically, loaded without arbitrary unpickling.

A run directory holds ``config.yaml`` (the resolved config), ``metrics.jsonl`` (the
training log), ``checkpoints/step_NNNNNNN.pt`` and, after ``eval``, ``eval.json``.
A checkpoint is a plain dict of tensors and Python scalars (loadable with
``torch.load(weights_only=True)``) that also holds the full config, so every later
command rebuilds the run from the checkpoint alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import torch

from ..common.config import RunConfig
from ..common.errors import PosrnnError
from ..common.io import atomic_write
from .rundir import CKPT_DIR, list_checkpoints, read_run_config  # noqa: F401  (the torch-free half of run directories)

FORMAT = "posrnn-checkpoint"
VERSION = 1


def atomic_torch_save(obj: Any, path: Path) -> None:
    atomic_write(path, lambda f: torch.save(obj, f))


def checkpoint_path(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / CKPT_DIR / f"step_{step:07d}.pt"


def save_checkpoint(run_dir: Path, step: int, state: dict[str, Any]) -> Path:
    path = checkpoint_path(run_dir, step)
    atomic_torch_save({"format": FORMAT, "version": VERSION, "step": step, **state}, path)
    return path


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load and validate a checkpoint (``weights_only=True``: tensors and plain data only)."""
    path = Path(path)
    if not path.is_file():
        raise PosrnnError(f"checkpoint {path} does not exist; train first or pass an existing checkpoint")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # torch raises several types for truncated/corrupt/foreign files
        if "weights only" in str(e).lower() or "weights_only" in str(e):
            raise PosrnnError(f"{path} was refused: it holds Python objects that a posrnn checkpoint never contains, "
                              f"so it was not loaded; use a checkpoint written by `posrnn train`") from None
        raise PosrnnError(f"{path} is not a readable posrnn checkpoint (truncated or corrupt), so it was refused; "
                          f"delete it and resume from an earlier checkpoint, or re-train") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise PosrnnError(f"{path} is not a posrnn checkpoint; pass a file written by `posrnn train`")
    if ckpt.get("version") != VERSION:
        raise PosrnnError(f"checkpoint {path} has format version {ckpt.get('version')}, this posrnn reads {VERSION}")
    ckpt["config"] = RunConfig.from_dict(ckpt["config"], source=str(path))
    return ckpt


def resolve_checkpoint(path: Path, step: Optional[int] = None) -> tuple[Path, Path]:
    """A run directory or a checkpoint file → ``(checkpoint file, run directory)``.

    For a directory, the checkpoint at ``step`` (default: the latest)."""
    path = Path(path)
    if path.is_file():
        run_dir = path.parent.parent if path.parent.name == CKPT_DIR else path.parent
        return path, run_dir
    if not path.is_dir():
        raise PosrnnError(f"{path} is neither a run directory nor a checkpoint file; pass the --out of a `posrnn train` run")
    ckpts = list_checkpoints(path)
    if not ckpts:
        raise PosrnnError(f"run directory {path} has no checkpoints; train it first (posrnn train --out {path})")
    if step is None:
        return ckpts[-1][1], path
    for s, p in ckpts:
        if s == step:
            return p, path
    raise PosrnnError(f"run {path} has no checkpoint at step {step}; available: {', '.join(str(s) for s, _ in ckpts)}")
