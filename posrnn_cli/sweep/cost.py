"""What a sweep's training will cost in compute (``posrnn sweep --dry-run``): an estimate,
labelled as one, naming its source, its device and its date.

Cost model: every training run costs ``iterations × F`` FLOPs, F the forward + backward FLOPs
of one step, counted as ``posrnn bench`` counts them (``bench.flops_per_iteration``): for the
RNNs 3 × (2·G·H·(D + H)·T + 2·H·V·K) per sequence × batch (G gates, D the encoder width, T
input steps, V outputs, K = L output steps); for the other cores 6 × (parameters outside the
embedding) × T per sequence × batch. Models are built on torch's ``meta`` device (no memory).
Jobs that do not train (stability, data preparation) are not estimated.

The rate that turns FLOPs into time:

* **CPU**: calibrated on the spot: a few seconds of training steps of ``posrnn bench``'s
  configuration A (GRU, V = 32, L = 8, H = E = 64, B = 128) on the profile's threads per run,
  its FLOP/s then applied to every run. A run of another size runs at another efficiency, so
  this is most accurate near A's size (lite's).
* **GPU**: from ``gpu_ms_per_iter.json``, measured ms/iteration per device kind (the GPU
  check's figures; a run of another size is scaled from the nearest measured configuration by
  its FLOP count, but never below the latency floor: the fastest measured time per recurrent
  step × the run's steps, since a small recurrent model on a GPU is bound by its sequential
  steps, not its FLOPs: fig2's GRU at V = 32 took 12 ms/iteration on an H100, where its FLOPs
  alone would give well under 1 ms). Where the table has nothing for the device kind: the FLOP count at
  ``ASSUMED_PEAK_SHARE`` of the device's dense peak (``bench.PEAKS``: fp32 without tensor
  cores, bf16 with ``amp``), an assumption, said so. The device kind is the visible GPU's, else
  ``ASSUMED_GPU``.
"""

from __future__ import annotations

import datetime
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from ..common.config import RunConfig
from ..common.experiments import trains
from .plan import Job

ASSUMED_PEAK_SHARE = 0.25  # of the dense peak: an assumption until the table holds a measurement
ASSUMED_GPU = "H100"  # the device kind assumed where no GPU is visible
TABLE = Path(__file__).with_name("gpu_ms_per_iter.json")
#: ``posrnn bench``'s configuration A, the CPU calibration
CALIBRATION = {"model.name": "gru", "task.vocab_size": 32, "task.length": 8, "model.hidden_size": 64,
               "train.batch_size": 128, "train.device": "cpu", "task.n_test": 256}


@dataclass
class Rate:
    """How FLOPs become seconds: ``flops_per_s`` unless a measured ``ms_per_iter`` row fits."""
    device: str  # the device, in words
    unit: str  # "CPU-minutes" or "GPU-hours"
    source: str  # where the rate comes from, in words
    flops_per_s: float  # fp32
    flops_per_s_amp: float  # under train.amp (bf16)
    measured: tuple = ()  # rows of the table for this device kind


def flops_per_iteration(cfg: RunConfig) -> float:
    """Forward + backward FLOPs of one training step of ``cfg`` (the module docstring's model)."""
    import torch

    from ..models import build_model
    from .storage import _task_shape

    task = _task_shape(cfg)
    with torch.device("meta"):
        model = build_model(cfg, task)
    T, K, B = task.max_steps, cfg.task.length, cfg.train.batch_size
    if hasattr(model.core, "forward_flops"):
        return 3.0 * (model.core.forward_flops(T) + 2 * cfg.model.hidden_size * task.n_outputs * K) * B
    embed = sum(p.numel() for n, p in model.named_parameters() if "embed" in n)
    return 6.0 * (sum(p.numel() for p in model.parameters()) - embed) * T * B


def calibrate_cpu(threads: int, seconds: float = 2.0) -> tuple[float, float]:
    """(ms per iteration, FLOP/s) of configuration A's training step on this CPU, timed for
    about ``seconds`` after a short warm-up."""
    import torch

    from ..bench import fast_loop
    from ..common.config import resolve_config
    from ..engine.device import setup_threads
    from ..tasks import HeldOut, build_task

    cfg = resolve_config(options={**CALIBRATION, "train.threads": threads})
    setup_threads(threads)
    task = build_task(cfg.task)
    _, step = fast_loop(cfg, task, HeldOut(task.test_set()), torch.device("cpu"))
    for _ in range(3):
        step()
    times, t_end = [], time.perf_counter() + seconds
    while time.perf_counter() < t_end or len(times) < 5:
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    s = statistics.median(times)
    return 1000 * s, flops_per_iteration(cfg) / s


def gpu_kind() -> tuple[str, bool]:
    """(device kind, whether it was seen): the visible GPU's name, else ``ASSUMED_GPU``."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0), True
    return ASSUMED_GPU, False


def load_table(path: Path = TABLE) -> list[dict]:
    return json.loads(Path(path).read_text())["rows"] if Path(path).is_file() else []


def gpu_rate(kind: str, seen: bool, table: list[dict]) -> Rate:
    from ..bench import PEAKS

    where = kind if seen else f"{kind} (assumed: no GPU visible here)"
    rows = tuple(r for r in table if r["kind"] in kind)
    peak = next((p for key, p in PEAKS if key in kind), dict(PEAKS)[ASSUMED_GPU])
    rates = (ASSUMED_PEAK_SHARE * peak["fp32"] * 1e12, ASSUMED_PEAK_SHARE * peak["bf16"] * 1e12)
    assumed = (f"the FLOP count at {ASSUMED_PEAK_SHARE:.0%} of the dense peak ({peak['fp32']:g} TFLOP/s fp32, "
               f"{peak['bf16']:g} bf16 under train.amp), an assumption")
    if rows:
        src = (f"ms/iteration measured on {rows[0]['device']} ({rows[0]['date']}, torch {rows[0]['torch']}), "
               f"scaled to each run by its FLOP count; runs with other fast paths: {assumed}")
        return Rate(where, "GPU-hours", src, *rates, rows)
    return Rate(where, "GPU-hours", f"{assumed}: no ms/iteration measured on this device kind yet", *rates)


def row_steps(row: dict) -> int:
    """The sequential steps of a measured row: its ``steps``, else 2 L (the reverse task's)."""
    return int(row.get("steps") or 2 * row["length"])


def run_seconds(cfg: RunConfig, rate: Rate, flops: Optional[float] = None, steps: Optional[int] = None) -> float:
    """Seconds of one device for the whole run ``cfg`` (``flops``: its FLOPs per iteration and
    ``steps`` its sequential steps, if known)."""
    f = flops_per_iteration(cfg) if flops is None else flops
    rows = [r for r in rate.measured if r.get("amp", False) == cfg.train.amp and r.get("cuda_graph", False) == cfg.train.cuda_graph]
    if rows:  # the measured row nearest in FLOPs, scaled by the FLOP ratio, at least the latency floor
        r = min(rows, key=lambda r: abs(r["flops_per_iter"] - f))
        ms = r["ms_per_iter"] * f / r["flops_per_iter"]
        per_step = min((x["ms_per_iter"] / row_steps(x) for x in rows if "length" in x or "steps" in x), default=0.0)
        n = run_steps(cfg) if steps is None else steps
        return cfg.train.iterations * max(ms, per_step * n) / 1000
    return cfg.train.iterations * f / (rate.flops_per_s_amp if cfg.train.amp else rate.flops_per_s)


def run_steps(cfg: RunConfig) -> int:
    """The sequential steps of one training sequence of ``cfg``."""
    from .storage import _task_shape

    return int(_task_shape(cfg).max_steps)


def profile_rate(prof: dict, calibrate: Optional[Callable[[int], tuple[float, float]]] = None,
                 table: Optional[list[dict]] = None) -> Rate:
    """The rate for a profile's device: ``calibrate(threads) -> (ms/iter, FLOP/s)`` on a CPU
    (default: ``calibrate_cpu``), the table or the assumed share of peak on a GPU."""
    from .bench import machine

    device = str(prof.get("device", "auto"))
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        kind, seen = gpu_kind()
        return gpu_rate(kind, seen, load_table() if table is None else table)
    threads = int(prof.get("threads") or 1)
    ms, flops = (calibrate or calibrate_cpu)(threads)
    src = (f"calibrated here just now: posrnn bench's configuration A at {ms:.1f} ms/iteration on {threads} "
           f"thread(s) ({flops / 1e9:.2f} GFLOP/s), scaled to each run by its FLOP count")
    return Rate(f"{machine()}, {threads} thread(s) per run", "CPU-minutes", src, flops, flops)


def amount(x: float) -> str:
    """1,234.5 and 12.3, but 0.042 (two significant digits below 1, not 0.0)."""
    return f"{x:,.1f}" if x >= 1 or x == 0 else f"{x:.2g}"


def summary(jobs: list[Job], rate: Rate) -> tuple[str, dict[str, Optional[float]]]:
    """One line per experiment and a total, in the rate's unit; run label → seconds (None for
    jobs that do not train)."""
    per_run: dict[str, Optional[float]] = {}
    per_exp: dict[str, list[float]] = {}
    flops: dict[str, float] = {}
    for job in jobs:
        if not trains(job.kind) or not job.config:
            per_run[job.label] = None
            continue
        cfg = job.run_config()
        key = json.dumps({**cfg.to_dict(), "train": cfg.train.batch_size}, sort_keys=True, default=str)
        if key not in flops:  # one model built per distinct shape
            flops[key] = (flops_per_iteration(cfg), run_steps(cfg))
        per_run[job.label] = run_seconds(cfg, rate, *flops[key])
        per_exp.setdefault(job.experiment, []).append(per_run[job.label])
    scale = 60.0 if rate.unit == "CPU-minutes" else 3600.0
    total = sum(sum(v) for v in per_exp.values())
    today = datetime.date.today().isoformat()
    lines = [f"estimated compute to train every run from step 0 (an estimate, not a measurement): "
             f"{amount(total / scale)} {rate.unit}", f"  device: {rate.device}; date: {today}", f"  source: {rate.source}"]
    for exp, secs in per_exp.items():
        lines.append(f"  {exp:<10} {len(secs):>4} run(s), {amount(sum(secs) / scale):>12} {rate.unit} "
                     f"(longest run {amount(max(secs) / scale)})")
    return "\n".join(lines), per_run
