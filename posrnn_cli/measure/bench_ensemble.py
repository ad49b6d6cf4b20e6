"""``posrnn bench --ensemble K,…``: the training step of K same-shape runs trained as one batched
model (``engine.ensemble``), beside one solo run's step timed in alternating blocks in the same call (so both see one
load): iterations per second per member and in all, the gain over the solo run, and peak memory.

Each K's ensemble holds the seeds ``seed … seed + K − 1`` of the benched config and runs the
whole loop body a sweep runs (each member's batch drawn outside the held-out set, the update,
clipping and Adam). Iteration times are medians of the timed steps (CUDA synchronised around
each). Peak memory: the CUDA allocator's peak of one step; on a CPU the process's max RSS so far
(it only grows, so later K include earlier ones). Bytes per member: what a member's forward +
backward writes over a solo run's, counted on the ``meta`` device (``traffic.ensemble_traffic``).
The load average before and after says how busy the machine was. The ensemble's figures on a GPU
have NOT BEEN MEASURED in this repository: no GPU was available when it was written.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import replace
from pathlib import Path

import torch

from .bench import fast_loop, peak_memory_mb, sync, timed_side_by_side
from .traffic import ensemble_traffic
from ..common.settings.config import RunConfig
from ..common.errors import PosrnnError
from ..engine.device import resolve_device, setup_threads
from ..tasks import HeldOut, build_task

#: the largest ensemble ``--ensemble`` times
MAX_K = 64


def check_ks(ks: tuple[int, ...]) -> None:
    if not ks or any(not 1 <= k <= MAX_K for k in ks):
        raise PosrnnError(f"--ensemble takes ensemble sizes in 1 … {MAX_K}, e.g. 1,2,4,8; got {','.join(map(str, ks))}")


def member_configs(cfg: RunConfig, k: int) -> list[RunConfig]:
    """``k`` copies of ``cfg`` with the seeds ``seed … seed + k − 1``."""
    return [replace(cfg, train=replace(cfg.train, seed=cfg.train.seed + i)) for i in range(k)]


def _warm(step, device: torch.device, warmup: int) -> float:
    """``warmup`` calls, then the peak memory (MiB) of one more."""
    for _ in range(warmup):
        step()
    return peak_memory_mb(step, device)


def _one_k(cfg: RunConfig, k: int, solo_step, device: torch.device, iters: int, warmup: int) -> dict:
    """One K's figures, its step timed in alternating blocks with the solo run's."""
    from ..engine.ensemble import ensemble_trainer

    tr = ensemble_trainer(member_configs(cfg, k), [Path(f"/nonexistent/posrnn-bench-member-{i}") for i in range(k)])
    sums = torch.zeros(k, 4, device=device, dtype=torch.float64)

    def step() -> None:  # the loop body of Trainer.fit between log lines
        out = tr.train_step(tr.next_batch())
        sums.add_(torch.stack([v.double() for v in out], dim=-1))

    peak = _warm(step, device, warmup)
    ens, solo = timed_side_by_side(step, solo_step, device, iters, 0)  # alternating: both see one load
    s, solo_s = statistics.median(ens), statistics.median(solo)
    traffic = ensemble_traffic(cfg, k)
    return {"k": k, "ms_per_step": 1000 * s, "it_per_s_per_member": 1 / s, "it_per_s_in_all": k / s,
            "solo_it_per_s": 1 / solo_s, "vs_solo_in_all": solo_s * k / s, "peak_memory_mb": peak,
            "bytes_per_member_vs_solo": traffic.ratio}


def ensemble_speed(cfg: RunConfig, ks: tuple[int, ...], iters: int = 20, warmup: int = 5) -> dict:
    """The solo step and each K's ensemble step of ``cfg``: one dict of figures (``rows``: one per K)."""
    from ..models.ensemble_model import check_ensemble_core

    check_ks(ks)
    check_ensemble_core(cfg.model.name)
    if iters < 1 or warmup < 0:
        raise PosrnnError("--iters must be ≥ 1 and --warmup-iters ≥ 0")
    device = resolve_device(cfg.train.device)
    setup_threads(cfg.train.threads)
    load_before = list(os.getloadavg())
    task = build_task(cfg.task)
    _, solo_step = fast_loop(cfg, task, HeldOut(task.test_set(device)), device)
    solo_peak = _warm(solo_step, device, warmup)
    rows = []
    for k in ks:
        try:
            rows.append(_one_k(cfg, k, solo_step, device, iters, warmup))
        except torch.OutOfMemoryError:  # recorded; a larger K cannot fit either
            rows.append({"k": k, "error": "out of memory"})
            break
        finally:
            sync(device)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "torch": torch.__version__, "load": {"before": load_before, "after": list(os.getloadavg()),
                                                 "cores": os.cpu_count()},
            "amp": cfg.train.amp, "cuda_graph": cfg.train.cuda_graph, "solo_peak_memory_mb": solo_peak, "rows": rows}
