"""Shared by the ensemble tests (CPU, and CUDA under ``gpu``): tiny run configs, solo and
ensemble training, and the checker that compares a member with its solo run."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import torch

from posrnn_cli.common.settings.config import RunConfig
from posrnn_cli.engine.checkpoint import load_checkpoint
from posrnn_cli.common.files.rundir import list_checkpoints

#: float32: a member may differ from its solo run by rounding (the batched recurrence sums in
#: another order than nn.GRU's kernel). After 200 steps on the CPU the largest difference seen
#: was 1.2e-7 in a weight and 3e-8 in a logged loss; the tolerance is 100× that, and a perturbed
#: member differs by more than 1e-3.
FLOAT32_TOL = 1e-5
FLOAT64_TOL = 1e-9


def tiny_config(core: str, seed: int, iterations: int = 200, device: str = "cpu", **train) -> RunConfig:
    """A run of about a second: reverse, V 6, L 4, H 8, batch 8, clipping active (clip 0.5)."""
    return RunConfig.from_dict({
        "task": {"name": "reverse", "vocab_size": 6, "length": 4, "n_test": 32},
        "model": {"name": core, "hidden_size": 8},
        "train": {"iterations": iterations, "batch_size": 8, "seed": seed, "device": device, "clip": 0.5,
                  "checkpoint_every": 100, "log_every": 50, "threads": 1, **train}})


@contextmanager
def default_dtype(dtype: torch.dtype):
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def last_checkpoint(run_dir: Path) -> dict:
    return load_checkpoint(list_checkpoints(run_dir)[-1][1])


def losses(run_dir: Path) -> list[float]:
    return [json.loads(ln)["loss"] for ln in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def mismatches(member_dir: Path, solo_dir: Path, tol: float) -> list[str]:
    """What of a member's final state differs from its solo run's by more than ``tol``: each weight,
    each optimizer state tensor, each logged loss, the step and the generator state. Empty: equal."""
    a, b = last_checkpoint(member_dir), last_checkpoint(solo_dir)
    bad = [] if a["step"] == b["step"] else [f"step {a['step']} vs {b['step']}"]
    if not torch.equal(a["rng"]["train"], b["rng"]["train"]):
        bad.append("the batch generator's state")
    for name, v in b["model"].items():
        d = (a["model"][name].double() - v.double()).abs().max().item()
        if not d <= tol:
            bad.append(f"weight {name}: {d:.3g}")
    for i, st in b["optimizer"]["state"].items():
        for name, v in st.items():
            d = (a["optimizer"]["state"][i][name].double() - v.double()).abs().max().item()
            if not d <= tol:
                bad.append(f"optimizer state {i}.{name}: {d:.3g}")
    la, lb = losses(member_dir), losses(solo_dir)
    if len(la) != len(lb) or any(not abs(x - y) <= tol for x, y in zip(la, lb)):
        bad.append(f"losses {la} vs {lb}")
    return bad
