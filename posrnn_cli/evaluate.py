"""The one evaluation path: rebuild a run from its checkpoint, score the held-out set."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from .checkpoint import _atomic, atomic_write_json, list_checkpoints, load_checkpoint, resolve_checkpoint
from .errors import PosrnnError
from .metrics import summarize
from .models import build_model
from .tasks import Batch, Task, build_task
from .train import resolve_device

HEADLINE = ("token_accuracy", "sequence_accuracy", "damerau_levenshtein")


def load_run(path: Path, step: Optional[int] = None, device: str = "cpu"):
    """A run directory or checkpoint → ``(cfg, task, model in eval mode, ckpt, ckpt_path, run_dir)``."""
    ckpt_path, run_dir = resolve_checkpoint(Path(path), step)
    ckpt = load_checkpoint(ckpt_path)
    cfg = ckpt["config"]
    task = build_task(cfg.task)
    model = build_model(cfg, task)
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError as e:
        raise PosrnnError(f"checkpoint {ckpt_path} does not fit its own config ({str(e).splitlines()[0][:100]}); re-train") from None
    model.to(resolve_device(device)).eval()
    return cfg, task, model, ckpt, ckpt_path, run_dir


@torch.no_grad()
def predict_all(task: Task, model, test: Batch, batch_size: int) -> torch.Tensor:
    preds = []
    for start in range(0, len(test), batch_size):
        rows = torch.arange(start, min(start + batch_size, len(test)), device=test.inputs.device)
        preds.append(task.infer(model, test.select(rows)))
    return torch.cat(preds)


def evaluate_model(task: Task, model, device: torch.device, batch_size: int = 1024, n_resamples: int = 10_000) -> tuple[dict, dict]:
    """Score ``model`` on ``task``'s held-out set → (summary, per-sequence arrays)."""
    test = task.test_set(device)
    pred = predict_all(task, model, test, batch_size)
    per_seq = task.scores(pred, test)
    summary: dict = {}
    for name, values in per_seq.items():
        s = summarize(values, n_resamples=n_resamples)
        summary[name] = s["mean"]
        summary[f"{name}_ci"] = [s["ci_low"], s["ci_high"]]
    summary["n_test"] = len(test)
    summary.update(task.report(pred, test))
    with torch.no_grad():
        summary.update(task.evaluate_extra(model, test, batch_size))
    return summary, per_seq


def evaluate(
    path: Path, step: Optional[int] = None, device: str = "auto", batch_size: Optional[int] = None,
    write: bool = True, n_resamples: int = 10_000,
) -> dict:
    """``posrnn eval``: score a run's latest (or ``step``) checkpoint; write ``eval.json``."""
    cfg, task, model, ckpt, ckpt_path, run_dir = load_run(path, step, device)
    dev = next(model.parameters()).device
    summary, per_seq = evaluate_model(task, model, dev, batch_size or cfg.train.eval_batch_size, n_resamples)
    result = {
        "run_dir": str(run_dir),
        "checkpoint": str(ckpt_path),
        "step": int(ckpt["step"]),
        "task": cfg.task.name,
        "model": cfg.model.name,
        "pe": cfg.model.pe,
        "vocab_size": cfg.task.vocab_size,
        "length": cfg.task.length,
        "seed": cfg.train.seed,
        **summary,
    }
    if write:
        ckpts = list_checkpoints(run_dir)
        latest = bool(ckpts) and ckpts[-1][1].resolve() == Path(ckpt_path).resolve()
        name = "eval" if latest else f"eval_step{int(ckpt['step']):07d}"
        atomic_write_json(run_dir / f"{name}.json", result)
        buf = io.BytesIO()
        np.savez(buf, **{k: np.asarray(v) for k, v in per_seq.items()})
        _atomic(run_dir / f"{name}_sequences.npz", lambda f: f.write(buf.getvalue()))
    return result
