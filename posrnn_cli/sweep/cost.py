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
* **GPU**: ``gpu_model.GpuModel``: the recurrence and the output head priced apart, each from
  the measured rows of ``gpu_ms_per_iter.json`` that match it under the same switches, with a
  per-step floor per core; stated assumptions where no row reaches (module ``gpu_model``). The
  dry run prints each experiment's GPU-hours in fp32, under ``amp`` + ``cuda_graph``, and with
  runs that differ only in their seed packed into one batched model (``seed_packs``; its speed-up
  an assumption, not measured on a GPU), and the peak memory of the largest run against the
  device's, refusing a plan whose run cannot fit. The language model is priced at its real
  token counts (``lm_tokens``). The device kind is the visible GPU's, else ``ASSUMED_GPU``.
"""

from __future__ import annotations

import datetime
import json
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional

from ..common.config import RunConfig
from ..common.experiments import trains
from ..common.memory import human
from ..models.head import HEAD_CHUNK_TOKENS
from .gpu_model import ASSUMED_PEAK_SHARE, GpuModel, Work
from .gpu_plan import PACK_NOTE, amount, SWITCHES, check_fits, experiment_lines, pack_ms, peak_bytes, seed_packs
from ..common.machine import ASSUMED_GPU, gpu_kind
from .plan import Job

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
    model: Optional[GpuModel] = None  # a GPU's: the measured rows and the assumptions priced from them


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


def load_table(path: Path = TABLE) -> list[dict]:
    return json.loads(Path(path).read_text())["rows"] if Path(path).is_file() else []


def gpu_rate(kind: str, seen: bool, table: list[dict]) -> Rate:
    from ..bench import PEAKS

    where = kind if seen else f"{kind} (assumed: no GPU visible here)"
    rows = tuple(r for r in table if r["kind"] in kind)
    peak = next((p for key, p in PEAKS if key in kind), dict(PEAKS)[ASSUMED_GPU])
    rates = (ASSUMED_PEAK_SHARE * peak["fp32"] * 1e12, ASSUMED_PEAK_SHARE * peak["bf16"] * 1e12)
    model = GpuModel(list(rows), peak)
    if rows:
        src = (f"ms/iteration measured on {rows[0]['device']} ({rows[0]['date']}, torch {rows[0]['torch']}): "
               f"recurrence and output head priced apart from the rows that match each (posrnn_cli/sweep/gpu_model.py)")
        return Rate(where, "GPU-hours", src, *rates, rows, model)
    src = (f"the FLOP count at {ASSUMED_PEAK_SHARE:.0%} of the dense peak ({peak['fp32']:g} TFLOP/s fp32, "
           f"{peak['bf16']:g} bf16 under train.amp), an assumption: no ms/iteration measured on this device kind yet")
    return Rate(where, "GPU-hours", src, *rates, (), model)


def run_work(cfg: RunConfig) -> Work:
    """What one training iteration of ``cfg`` does: its sequential steps and the FLOPs of its
    recurrence and of its output head (the language model's at its real tokens, ``lm_tokens``)."""
    import torch

    from ..models import build_model
    from .storage import _task_shape

    task = _task_shape(cfg)
    with torch.device("meta"):
        model = build_model(cfg, task)
    T, K, B, H = task.max_steps, cfg.task.length, cfg.train.batch_size, cfg.model.hidden_size
    if cfg.task.name == "lm":
        from .lm_tokens import lm_tokens

        toks = lm_tokens(cfg.task.data, cfg.task.length, B)
        T, K = toks.padded_steps, toks.real_per_paragraph
    head = 3.0 * 2 * H * task.n_outputs * K * B
    t, name = cfg.train, cfg.model.name
    if hasattr(model.core, "forward_flops"):
        rec = 3.0 * model.core.forward_flops(T) * B
        work = Work(name, round(T), rec, head, rec + head, t.amp, t.cuda_graph)
    else:
        embed = sum(p.numel() for n, p in model.named_parameters() if "embed" in n)
        work = Work(name, round(T), 0.0, head, 6.0 * (sum(p.numel() for p in model.parameters()) - embed) * T * B,
                    t.amp, t.cuda_graph)
    chunk = HEAD_CHUNK_TOKENS if cfg.task.name == "lm" else None
    peak = peak_bytes(work, B, model.encoder.out_dim, H, task.n_outputs, K * B,
                      sum(p.numel() for p in model.parameters()), chunk)
    return replace(work, peak_bytes=peak, chunked=chunk is not None)


def run_seconds(cfg: RunConfig, rate: Rate, work: Optional[Work] = None) -> float:
    """Seconds of one device for the whole run ``cfg`` (``work``: its ``run_work``, if known)."""
    if rate.model is not None:
        w = run_work(cfg) if work is None else work
        return cfg.train.iterations * rate.model.ms_per_iter(w) / 1000
    f = flops_per_iteration(cfg) if work is None else work.total_flops
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


def summary(jobs: list[Job], rate: Rate) -> tuple[str, dict[str, Optional[float]]]:
    """One line per experiment and a total, in the rate's unit; run label → seconds (None for
    jobs that do not train). On a GPU, each experiment in fp32, under amp + cuda_graph and
    packed, and the largest run's peak memory, a plan whose run cannot fit refused."""
    per_run: dict[str, Optional[float]] = {}
    works: dict[str, tuple[Job, RunConfig, Work]] = {}
    shapes: dict[str, Work] = {}
    for job in jobs:
        if not trains(job.kind) or not job.config:
            per_run[job.label] = None
            continue
        cfg = job.run_config()
        key = json.dumps({**cfg.to_dict(), "train": cfg.train.batch_size}, sort_keys=True, default=str)
        if key not in shapes:  # one model built per distinct shape
            shapes[key] = run_work(cfg)
        works[job.label] = (job, cfg, replace(shapes[key], amp=cfg.train.amp, cuda_graph=cfg.train.cuda_graph))
        per_run[job.label] = run_seconds(cfg, rate, works[job.label][2])
    scale = 60.0 if rate.unit == "CPU-minutes" else 3600.0
    per_exp: dict[str, list[float]] = {}
    for label, (job, _, _) in works.items():
        per_exp.setdefault(job.experiment, []).append(per_run[label])
    total = sum(sum(v) for v in per_exp.values())
    today = datetime.date.today().isoformat()
    lines = [f"estimated compute to train every run from step 0 (an estimate, not a measurement): "
             f"{amount(total / scale)} {rate.unit}", f"  device: {rate.device}; date: {today}", f"  source: {rate.source}"]
    if rate.model is None:
        for exp, secs in per_exp.items():
            lines.append(f"  {exp:<10} {len(secs):>4} run(s), {amount(sum(secs) / scale):>12} {rate.unit} "
                         f"(longest run {amount(max(secs) / scale)})")
    else:
        lines += gpu_lines(works, rate)
    return "\n".join(lines), per_run


def variant_seconds(works: dict[str, tuple[Job, RunConfig, Work]], model: GpuModel) -> dict[str, dict[str, float]]:
    """Each experiment's seconds in fp32, under amp + cuda_graph, and packed."""
    per_exp: dict[str, dict[str, float]] = {}
    for job, cfg, w in works.values():
        by = per_exp.setdefault(job.experiment, {"fp32": 0.0, "amp": 0.0, "packed": 0.0})
        for key, sw in (("fp32", SWITCHES["fp32"]), ("amp", SWITCHES["amp + cuda_graph"])):
            by[key] += cfg.train.iterations * model.ms_per_iter(replace(w, amp=sw[0], cuda_graph=sw[1])) / 1000
    for pack in seed_packs([(label, cfg.to_dict()) for label, (_, cfg, _) in works.items()]):
        job, cfg, w = works[pack[0]]
        per_exp[job.experiment]["packed"] += cfg.train.iterations * pack_ms(model, w, len(pack)) / 1000
    return per_exp


def gpu_lines(works: dict[str, tuple[Job, RunConfig, Work]], rate: Rate) -> list[str]:
    """The GPU view: per experiment three prices, the assumptions used, the LM's tokens and the
    largest run's peak memory (refused in one line where it cannot fit)."""
    from .gpu_model import device_bytes

    per_exp = variant_seconds(works, rate.model)
    runs: dict[str, int] = {}
    for job, _, _ in works.values():
        runs[job.experiment] = runs.get(job.experiment, 0) + 1
    lines = experiment_lines(per_exp, runs)
    lines += [f"  assumption: {n}" for n in rate.model.notes] + [f"  assumption: {PACK_NOTE}"]
    lm = [(cfg, w) for job, cfg, w in works.values() if cfg.task.name == "lm"]
    if lm:
        from .lm_tokens import lm_tokens

        cfg, w = max(lm, key=lambda cw: cw[1].peak_bytes)
        toks = lm_tokens(cfg.task.data, cfg.task.length, cfg.train.batch_size)
        lines.append(f"  language model: {toks.real_per_paragraph:,.0f} real tokens a paragraph through the head, "
                     f"{toks.padded_steps:,.0f} padded steps a batch through the recurrence ({toks.source}); "
                     f"a step's peak memory about {human(w.peak_bytes)} with the chunked head (an estimate, fp32)")
    if works:
        label, (_, _, w) = max(works.items(), key=lambda kv: kv[1][2].peak_bytes)
        have = device_bytes(rate.device)
        check_fits(label, w.peak_bytes, have, w.chunked)
        lines.append(f"  peak memory of the largest run: {label}, about {human(w.peak_bytes)} (an estimate, fp32) "
                     f"of the device's {human(have)}")
    return lines
