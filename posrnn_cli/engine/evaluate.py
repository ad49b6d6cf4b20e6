"""The one evaluation path: rebuild a run from its checkpoint, score the held-out set.

``posrnn eval`` writes ``RUN/eval.json`` (the summary) and ``RUN/eval_sequences.npz`` (one
score per test sequence, plus its ``group`` where the test set is a grid: the dual-frequency
cell and target position, or the length), so that aggregation reads files only. A language
model run also gets ``RUN/nll_by_position.csv``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
from torch import nn

from ..common.files.rundir import EVAL_FILE
from ..common.catalog import feedback_prefix
from ..common.settings.config import RunConfig
from ..common.errors import PosrnnError
from ..common.files.io import atomic_write_json, loads_bounded, read_bounded, write_csv, write_npz
from ..common.results.provenance import check_eval, eval_digest, file_sha256, finite_numbers, stamped
from ..common.results.stats import summarize
from ..models import build_model
from ..tasks import Batch, Task, build_task
from .checkpoint import CheckpointGone, check_belongs, load_checkpoint, vanished
from .paths import check_eval_batch, resolve_checkpoint
from ..common.files.rundir import CKPT_DIR, list_checkpoints
from ..common.settings.config import config_digest
from ..common.files.rundir import read_run_config
from .device import resolve_device


@dataclass
class LoadedRun:
    """A trained run, rebuilt from one of its checkpoints."""

    cfg: RunConfig
    task: Task
    model: nn.Module  # in eval mode, on the asked device
    ckpt: dict  # the checkpoint itself (step, optimiser state, extra, …)
    ckpt_path: Path
    run_dir: Path


def load_run(path: Path, step: Optional[int] = None, device: str = "cpu") -> LoadedRun:
    """A run directory or checkpoint (its latest, or ``step``) → the rebuilt run."""
    for attempt in range(3):
        ckpt_path, run_dir = resolve_checkpoint(Path(path), step)
        try:
            ckpt = load_checkpoint(ckpt_path)
            break
        except CheckpointGone:  # deleted between listing and opening: a newer one replaced it, or a real absence
            if not (Path(path).is_dir() and step is None):
                raise
            if attempt == 2:
                raise vanished(ckpt_path, run_dir) from None
    if Path(ckpt_path).parent.name == CKPT_DIR:
        check_belongs(ckpt, ckpt_path, run_dir)
    cfg = ckpt["config"]
    task = build_task(cfg.task)
    model = build_model(cfg, task)
    try:
        model.load_state_dict(ckpt["model"])
    except (RuntimeError, ValueError, KeyError, TypeError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:100]
        raise PosrnnError(f"checkpoint {ckpt_path} does not fit its own config ({first}); re-train") from None
    model.to(resolve_device(device)).eval()
    return LoadedRun(cfg, task, model, ckpt, ckpt_path, run_dir)


@torch.no_grad()
def predict_all(task: Task, model, test: Batch, batch_size: int, feedback: str = "self") -> torch.Tensor:
    """``task.infer`` over ``test`` in batches, the output phase fed as ``feedback`` says."""
    preds = []
    for start in range(0, len(test), batch_size):
        rows = torch.arange(start, min(start + batch_size, len(test)), device=test.inputs.device)
        preds.append(task.infer(model, test.select(rows), feedback))
    return torch.cat(preds)


def evaluate_model(task: Task, model, device: torch.device, batch_size: int = 1024,
                   n_resamples: int = 10_000) -> tuple[dict, dict]:
    """Score ``model`` on ``task``'s held-out set → (summary, per-sequence arrays), once per
    feedback mode of the task (``Task.feedback_modes``; the scores of a mode other than "self"
    named with ``feedback_prefix``). The arrays include ``group`` (the test-grid cell of each
    sequence) when the test set has one."""
    test = task.test_set(device)
    summary: dict = {}
    per_seq: dict = {}
    for feedback in task.feedback_modes:
        prefix = feedback_prefix(feedback)
        pred = predict_all(task, model, test, batch_size, feedback)
        for name, values in task.scores(pred, test).items():
            s = summarize(values, n_resamples=n_resamples)
            summary[prefix + name] = s["mean"]
            summary[f"{prefix}{name}_ci"] = [s["ci_low"], s["ci_high"]]
            per_seq[prefix + name] = values
        if feedback == "self":
            summary["n_test"] = len(test)
            summary.update(task.report(pred, test))
            with torch.no_grad():
                summary.update(task.evaluate_extra(model, test, batch_size))
    if test.group is not None:
        per_seq = {**per_seq, "group": test.group.cpu().numpy()}
    return summary, per_seq


def evaluate(
    path: Path, step: Optional[int] = None, device: str = "auto", batch_size: Optional[int] = None,
    write: bool = True, n_resamples: int = 10_000,
) -> dict:
    """``posrnn eval``: score a run's latest (or ``step``) checkpoint. With ``write``, the
    files are written only after everything was computed (a failure leaves the old ones)."""
    loaded = load_run(path, step, device)
    cfg, task, model, ckpt = loaded.cfg, loaded.task, loaded.model, loaded.ckpt
    ckpt_path, run_dir = loaded.ckpt_path, loaded.run_dir
    check_eval_batch(batch_size)
    dev = next(model.parameters()).device
    default = min(cfg.train.eval_batch_size, task.max_eval_batch or cfg.train.eval_batch_size)
    summary, per_seq = evaluate_model(task, model, dev, batch_size or default, n_resamples)
    check_finite_scores(summary, per_seq, f"{ckpt_path} (step {int(ckpt['step'])})")
    result = {
        "run_dir": str(run_dir),
        "checkpoint": str(ckpt_path),
        "checkpoint_sha256": _sha256_of(ckpt_path, run_dir),
        "config_digest": config_digest(cfg.to_dict()),
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
        sequences = run_dir / f"{name}_sequences.npz"
        write_npz(sequences, stamped(per_seq, result["checkpoint_sha256"], result["config_digest"]))
        result["sequences_sha256"] = file_sha256(sequences)
        if "nll_by_position" in result:
            rows = [{"position": i, "nll": float(nll), "tokens": int(n)}
                    for i, (nll, n) in enumerate(zip(result["nll_by_position"], result["tokens_by_position"]))]
            write_csv(rows, run_dir / ("nll_by_position.csv" if latest
                                       else f"nll_by_position_step{int(ckpt['step']):07d}.csv"))
    result["digest"] = eval_digest(result)
    if write:
        atomic_write_json(run_dir / f"{name}.json", result)
    return result


def _sha256_of(ckpt_path: Path, run_dir: Path) -> str:
    try:
        return file_sha256(ckpt_path)
    except FileNotFoundError:
        raise vanished(ckpt_path, run_dir) from None


def check_finite_scores(summary: dict, per_seq: dict, where: str) -> None:
    """Refuse scores holding a NaN or an infinity (a model whose outputs overflow), naming the
    checkpoint: no file is written with them."""
    import numpy as np

    bad = [k for k, v in per_seq.items() if not np.isfinite(np.asarray(v, dtype=float)).all()]
    bad += [k for k, v in summary.items() if not finite_numbers(v) and k not in bad]
    if bad:
        raise PosrnnError(f"evaluating {where} gave non-finite scores ({', '.join(bad[:3])}), so nothing was written; "
                          f"evaluate an earlier checkpoint (--step) or re-train with a lower train.lr")


def cached_eval(run_dir: Path, ckpt_path: Path) -> Optional[dict]:
    """The run's ``eval.json`` when it is the evaluation of ``ckpt_path`` as it is now (its name
    and sha256; the file checked by ``check_eval``), None when there is none or it scores another
    checkpoint (or predates the digest): then the run is evaluated afresh. A malformed or edited
    one is refused."""
    path = Path(run_dir) / EVAL_FILE
    if not path.is_file():
        return None
    try:
        data = loads_bounded(read_bounded(path, "evaluation").decode("utf-8"), path)
    except (ValueError, UnicodeDecodeError):
        raise PosrnnError(f"{path} is not valid JSON (truncated or corrupt); re-run `posrnn eval {run_dir}`") from None
    if isinstance(data, dict) and "digest" not in data:
        return None
    data = check_eval(data, path)
    if Path(data["checkpoint"]).name != Path(ckpt_path).name or data.get("checkpoint_sha256") != file_sha256(ckpt_path):
        return None  # it scores another checkpoint, or the checkpoint changed since
    saved = read_run_config(run_dir)
    if saved is not None and data.get("config_digest") != config_digest(saved.to_dict()):
        return None  # config.yaml changed since: evaluating afresh checks it against the checkpoint
    return data
