"""Run directories made by hand for the aggregation tests: a config, a stand-in checkpoint file
and scores stamped exactly as ``posrnn eval`` stamps them (``common.provenance``), so a test can
then break one thing at a time."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from posrnn_cli.common.config import RunConfig, dump_yaml
from posrnn_cli.common.io import write_npz
from posrnn_cli.common.provenance import config_digest, eval_digest, file_sha256, stamped


def scored_run(run: Path, cfg: RunConfig, scores: dict, name: str = "eval_sequences.npz", summary: dict = None) -> Path:
    """``run`` with ``cfg`` as config.yaml, a checkpoint file at its last step and ``scores`` as
    its per-sequence file, stamped; for ``eval_sequences.npz`` also the eval.json beside it
    (holding ``summary`` too: what a task's report adds)."""
    run.mkdir(parents=True, exist_ok=True)
    (run / "config.yaml").write_text(dump_yaml(cfg))
    step = cfg.train.iterations
    ckpt = run / "checkpoints" / f"step_{step:07d}.pt"
    ckpt.parent.mkdir(exist_ok=True)
    ckpt.write_bytes(f"stand-in weights of {run.name}".encode())
    sha, digest = file_sha256(ckpt), config_digest(cfg.to_dict())
    write_npz(run / name, stamped(scores, sha, digest))
    if name == "eval_sequences.npz":
        n = len(next(iter(scores.values())))
        result = {"checkpoint": str(ckpt), "checkpoint_sha256": sha, "config_digest": digest, "step": step,
                  "task": cfg.task.name, "model": cfg.model.name, "pe": cfg.model.pe, "seed": cfg.train.seed,
                  "n_test": n, "sequences_sha256": file_sha256(run / name),
                  **{k: float(np.mean(v)) for k, v in scores.items() if k != "group"}, **(summary or {})}
        result["digest"] = eval_digest(result)
        (run / "eval.json").write_text(json.dumps(result))
    return run
