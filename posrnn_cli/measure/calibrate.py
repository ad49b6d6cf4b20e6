"""The CPU estimate's calibration per core, and what it is checked against.

A CPU step is not FLOP-proportional across cores: Mamba's selective scan, xLSTM's cells and the
Transformer's attention run far from the GRU's FLOP rate (docs/bench.md). So the dry run times
each core the plan will run, a couple of seconds of training steps at a representative size of
that core's runs (the run of median FLOPs per iteration), and scales only within a core by FLOPs.
Times are cached for the command (one calibration per core and size).

Two committed records:

* ``measured_repros.json``: each measured ``dvc repro`` of a profile (wall minutes, the
  calibration step of ``posrnn bench``'s configuration A measured right before, the machine's
  cores, the machine, the date), the figures docs/results.md states. The estimate states its
  error against the last one of its profile, scaled to this machine's calibration step.
* ``cpu_core_ms.json``: each core's step at its representative size in lite and beyond2, with
  configuration A's step timed alternately beside it, on one stated machine and date
  (``python -m posrnn_cli.measure.calibrate lite beyond2`` wrote it). Tests price lite's and
  beyond2's plans from it, scaled to a measured repro's calibration step, without timing anything.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Callable, Optional

from ..common import catalog
from ..common.config import RunConfig

REPROS = Path(__file__).with_name("measured_repros.json")
RECORD = Path(__file__).with_name("cpu_core_ms.json")
RECORD_COMMAND = "python -m posrnn_cli.measure.calibrate lite beyond2"
_CACHE: dict[tuple[str, int], float] = {}
#: ``posrnn bench``'s configuration A, the CPU calibration
CALIBRATION = {"model.name": "gru", "task.vocab_size": 32, "task.length": 8, "model.hidden_size": 64,
               "train.batch_size": 128, "train.device": "cpu", "task.n_test": 256}


def flops_per_iteration(cfg: RunConfig) -> float:
    """Forward + backward FLOPs of one training step of ``cfg`` (the FLOP model of ``cost``'s docstring)."""
    import torch

    from ..models import build_model
    from ..sweep.storage import task_shape
    from .bench import analytic_flops

    task = task_shape(cfg)
    with torch.device("meta"):
        model = build_model(cfg, task)
    T, K, B = task.max_steps, cfg.task.length, cfg.train.batch_size
    if hasattr(model.core, "forward_flops"):
        return analytic_flops(model.core, cfg.model.hidden_size, task.n_outputs, T, K, B)
    embed = sum(p.numel() for n, p in model.named_parameters() if "embed" in n)
    return 6.0 * (sum(p.numel() for p in model.parameters()) - embed) * T * B


def time_step(cfg: RunConfig, seconds: float = 2.0) -> float:
    """Median ms of ``cfg``'s training step on the CPU (posrnn's loop body), timed for about
    ``seconds`` after a short warm-up (half a second once 100 steps are timed: a small model's
    median is settled by then); cached for the command by config."""
    key = (json.dumps(cfg.to_dict(), sort_keys=True, default=str), int(cfg.train.threads or 1))
    if key in _CACHE:
        return _CACHE[key]
    import torch

    from .bench import fast_loop
    from ..engine.device import setup_threads
    from ..tasks import HeldOut, build_task

    setup_threads(int(cfg.train.threads or 1))
    task = build_task(cfg.task)
    _, step = fast_loop(cfg, task, HeldOut(task.test_set()), torch.device("cpu"))
    for _ in range(3):
        step()
    t_start = time.perf_counter()
    times = []
    while len(times) < 5 or not (time.perf_counter() - t_start >= seconds or
                                 (len(times) >= 100 and time.perf_counter() - t_start >= min(seconds, 0.5))):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    _CACHE[key] = 1000 * statistics.median(times)
    return _CACHE[key]


def representatives(cfgs: list[RunConfig], flops: Callable[[RunConfig], float]) -> dict[str, RunConfig]:
    """Per core, the run of median FLOPs per iteration, on the CPU with its run's batch; runs of the
    language model only where the core has no other (its data may not be prepared here)."""
    by: dict[str, list[RunConfig]] = {}
    for cfg in cfgs:
        by.setdefault(cfg.model.name, []).append(cfg)
    out = {}
    for core, runs in sorted(by.items()):
        pool = [c for c in runs if not catalog.TASKS[c.task.name].corpus] or runs
        uniq = {json.dumps(c.to_dict(), sort_keys=True, default=str): c for c in pool}
        ranked = sorted(uniq.values(), key=lambda c: (flops(c), json.dumps(c.to_dict(), sort_keys=True, default=str)))
        out[core] = ranked[(len(ranked) - 1) // 2]
    return out


def on_cpu(cfg: RunConfig, threads: int) -> RunConfig:
    """``cfg`` on the CPU with ``threads`` threads, without the GPU's switches."""
    from dataclasses import replace

    return replace(cfg, train=replace(cfg.train, device="cpu", threads=threads, amp=False, cuda_graph=False))


def load_repros(path: Path = REPROS) -> list[dict]:
    return json.loads(Path(path).read_text())["repros"] if Path(path).is_file() else []


def last_repro(profile: str, path: Path = REPROS) -> Optional[dict]:
    """The last measured repro of ``profile`` (by date, the file's order breaking ties), or None."""
    rows = [r for r in load_repros(path) if r["profile"] == profile]
    return max(enumerate(rows), key=lambda ir: (ir[1]["date"], ir[0]))[1] if rows else None


def load_record(path: Path = RECORD) -> dict:
    return json.loads(Path(path).read_text())


def record(profiles: list[str], params: Path = Path("params.yaml"), seconds: float = 3.0, rounds: int = 3) -> dict:
    """Time each core of the profiles' plans at its representative size, configuration A timed
    alternately beside it (``rounds`` times each, medians), on one thread."""
    import datetime

    from ..common.config import resolve_config
    from ..common.experiments import EXPERIMENTS, trains
    from .bench import machine
    from ..sweep.plan import plan

    a_cfg = resolve_config(options={**CALIBRATION, "train.threads": 1})
    a_ms, cores = [], {}
    for prof in profiles:
        jobs = plan(params, prof, list(EXPERIMENTS), Path("runs") / prof)
        cfgs = [j.run_config() for j in jobs if trains(j.kind) and j.config]
        for core, cfg in representatives(cfgs, flops_per_iteration).items():
            cfg = on_cpu(cfg, 1)
            key = json.dumps(cfg.to_dict(), sort_keys=True, default=str)
            if any(c["config"] == json.loads(key) for c in cores.values() if c["core"] == core):
                continue
            times = []
            for _ in range(rounds):
                _CACHE.clear()
                a_ms.append(time_step(a_cfg, seconds))
                times.append(time_step(cfg, seconds))
            cores[f"{prof}:{core}"] = {"core": core, "ms_per_iter": statistics.median(times),
                                       "flops_per_iter": flops_per_iteration(cfg), "config": json.loads(key)}
    return {"command": RECORD_COMMAND, "machine": machine(), "date": datetime.date.today().isoformat(),
            "calibration_ms": statistics.median(a_ms), "cores": cores}


if __name__ == "__main__":
    import sys

    out = record(sys.argv[1:])
    RECORD.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "cores"}, indent=1))
    for name, c in out["cores"].items():
        print(f"{name:<24} {c['ms_per_iter']:8.2f} ms/iter  {c['flops_per_iter'] / 1e9:8.3f} GFLOP/iter")
