"""The CPU estimate's calibration per core, and what it is checked against.

A CPU step is not FLOP-proportional across cores: Mamba's selective scan, xLSTM's cells and the
Transformer's attention run far from the GRU's FLOP rate (docs/bench.md). So the dry run times
each core the plan will run, a couple of seconds of training steps at a representative size of
that core's runs (the run of median FLOPs per iteration), and scales only within a core by FLOPs.
Times are cached for the command (one calibration per core and size).

Two committed records:

* ``measured_repros.json``: each measured ``dvc repro`` of a profile (wall minutes, the
  calibration step of ``posrnn bench``'s configuration A measured right before, the machine's
  cores, the machine, the date), the figures docs/results.md states, and beside each the wall
  minutes the current estimate gives it (``estimate_minutes``: priced from ``cpu_core_ms.json``
  at the repro's calibration step, ``cost.repro_estimate``; ``python -m posrnn_cli.measure.cost``
  rewrites them, a test recomputes them). The dry run states its error against the
  last one of its profile, scaled to this machine's calibration step.
* ``cpu_core_ms.json``: each core's step at its representative size in the profiles with a
  measured repro, with configuration A's step timed alternately beside it (``calibration_ms`` of
  each core: its own rounds' A), and the start-up every run and every sweep pays (``overheads``,
  ``time_overheads``), on one stated machine and date (``RECORD_COMMAND`` wrote it). Tests price
  those profiles' plans from it, scaled to a measured repro's calibration step, without timing.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from ..common import catalog
from ..common.host.machine import load_average, usable_cores
from ..common.settings.config import RunConfig, load_yaml

REPROS = Path(__file__).with_name("measured_repros.json")
RECORD = Path(__file__).with_name("cpu_core_ms.json")
RECORD_COMMAND = ("python -m posrnn_cli.measure.calibrate lite lite_extra beyond2 beyond_map beyond_map_long "
                  "beyond_map_block beyond_map_xlstm")
#: rewrites ``estimate_minutes`` in ``measured_repros.json`` from the record (``cost.write_estimates``)
ESTIMATES_COMMAND = "python -m posrnn_cli.measure.cost"
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
    alternately beside it (``rounds`` times each, medians; each core keeps its own rounds' A), on
    one thread, and the start-up a run and a sweep pay (``time_overheads``); ``load_average``: the
    1-minute load average as it began and as it ended (other work on the machine skews a core's
    step against the A beside it: on a busy machine, record again)."""
    import datetime

    from ..common.settings.config import resolve_config
    from ..common.stages.experiments import EXPERIMENTS, trains
    from .bench import machine
    from ..sweep.plan import plan

    a_cfg = resolve_config(options={**CALIBRATION, "train.threads": 1})
    a_ms, cores = [], {}
    load = [round(load_average(), 2)]
    for prof in profiles:
        jobs = plan(params, prof, list(EXPERIMENTS), Path("runs") / prof)
        cfgs = [j.run_config() for j in jobs if trains(j.kind) and j.config]
        for core, cfg in representatives(cfgs, flops_per_iteration).items():
            cfg = on_cpu(cfg, 1)
            key = json.dumps(cfg.to_dict(), sort_keys=True, default=str)
            same = next((c for c in cores.values() if c["core"] == core and c["config"] == json.loads(key)), None)
            if same is not None:  # timed for an earlier profile: the same entry under this one's name too
                cores[f"{prof}:{core}"] = same
                continue
            times, beside = [], []
            for _ in range(rounds):
                _CACHE.clear()
                beside.append(time_step(a_cfg, seconds))
                times.append(time_step(cfg, seconds))
            a_ms += beside
            cores[f"{prof}:{core}"] = {"core": core, "ms_per_iter": statistics.median(times),
                                       "calibration_ms": statistics.median(beside),
                                       "flops_per_iter": flops_per_iteration(cfg), "config": json.loads(key)}
    overheads = time_overheads(params)
    load.append(round(load_average(), 2))
    return {"command": RECORD_COMMAND, "machine": machine(), "date": datetime.date.today().isoformat(),
            "calibration_ms": statistics.median(a_ms), "load_average": load, "cores": cores, "overheads": overheads}


def scratch_profile(params: Path, out: Path, seeds: list[int]) -> Path:
    """A params file whose one profile ``t`` is lite's fig2 grid on ``seeds`` at two iterations, one worker."""
    import yaml

    base = load_yaml(Path(params))  # as DVC reads it
    fig2 = {**base["profiles"]["lite"]["fig2"], "iterations": 2, "warmup": 1, "seeds": seeds}
    prof = {"device": "cpu", "threads": 1, "n_test": base["profiles"]["lite"].get("n_test", 1024),
            "executor": {"kind": "local", "workers": 1}, "fig2": fig2}
    out.write_text(yaml.safe_dump({k: base[k] for k in ("task", "model", "train")}
                                  | {"profile": ["t"], "profiles": {"t": prof}}, sort_keys=False))
    return out


def timed_sweep(params: Path, cwd: Path) -> float:
    """Wall seconds of ``posrnn sweep fig2`` of profile ``t`` of ``params``, run in ``cwd``."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "posrnn_cli", "sweep", "fig2", "--params", str(params), "--profile", "t"],
                   cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - t0


def time_overheads(params: Path = Path("params.yaml"), small: int = 1, large: int = 3) -> dict:
    """The start-up of a CPU sweep, in wall seconds on one worker, with configuration A's step timed
    before and after (``calibration_ms``, their mean): ``stage_s``, a sweep's own (its process, torch
    imported, the plan, the worker pool started with torch imported again); ``run_s``, each run's (its
    process, task and model built, two steps, the final evaluation, its files); ``skip_s``, each run's
    that the sweep finds up to date (a process still starts for it). From sweeps of lite's fig2 grid at
    two iterations on ``small`` and on ``large`` seeds (the difference prices a run), and the large one
    again, every run then up to date."""
    import tempfile

    from ..common.settings.config import resolve_config
    from ..sweep.plan import plan

    a_cfg = resolve_config(options={**CALIBRATION, "train.threads": 1})
    _CACHE.clear()
    before = time_step(a_cfg)
    with tempfile.TemporaryDirectory() as tmp:
        counts, walls = [], []
        for i, n in enumerate((small, large)):
            p = scratch_profile(params, Path(tmp) / f"params{i}.yaml", list(range(1, n + 1)))
            counts.append(len(plan(p, "t", ["fig2"], Path(tmp) / f"w{i}" / "runs" / "t")))
            (Path(tmp) / f"w{i}").mkdir()
            walls.append(timed_sweep(p, Path(tmp) / f"w{i}"))
        skipped = timed_sweep(p, Path(tmp) / "w1")
    _CACHE.clear()
    after = time_step(a_cfg)
    run_s = max(0.0, (walls[1] - walls[0]) / (counts[1] - counts[0]))
    stage_s = max(0.0, walls[0] - counts[0] * run_s)
    return {"stage_s": round(stage_s, 3), "run_s": round(run_s, 3),
            "skip_s": round(max(0.0, (skipped - stage_s) / counts[1]), 3),
            "calibration_ms": round((before + after) / 2, 3), "runs": counts}


if __name__ == "__main__":
    out = record(sys.argv[1:])
    RECORD.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "cores"}, indent=1))
    if max(out["load_average"]) > usable_cores():
        print(f"warning: the 1-minute load average reached {max(out['load_average'])} on {usable_cores()} core(s) "
              f"while this recorded: other work shared the CPU; record again on an idle machine")
    for name, c in out["cores"].items():
        print(f"{name:<24} {c['ms_per_iter']:8.2f} ms/iter  {c['flops_per_iter'] / 1e9:8.3f} GFLOP/iter")
    print(f"then {ESTIMATES_COMMAND}: the estimate beside each measured repro, from this record")
