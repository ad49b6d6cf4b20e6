"""What a sweep's training will cost in compute (``posrnn sweep --dry-run``): an estimate,
labelled as one, naming its source, its device and its date.

Cost model: every training run costs ``iterations × F`` FLOPs, F the forward + backward FLOPs
of one step, counted as ``posrnn bench`` counts them (``bench.flops_per_iteration``): for the
RNNs 3 × (2·G·H·(D + H)·T + 2·H·V·K) per sequence × batch (G gates, D the encoder width, T
input steps, V outputs, K = L output steps); for the other cores 6 × (parameters outside the
embedding) × T per sequence × batch. Models are built on torch's ``meta`` device (no memory).
Jobs that do not train (stability, data preparation) are not estimated.

The rate that turns FLOPs into time:

* **CPU**: calibrated on the spot, per core (``calibrate``): about two seconds of training steps
  of each core the plan runs, at a representative size of its runs, on the profile's threads per
  run; a run then costs its core's step × its FLOPs over the representative's. A CPU step is not
  FLOP-proportional across cores (Mamba's and xLSTM's are far slower per FLOP than the GRU's), so
  one rate for all would err by 3× either way. ``posrnn bench``'s configuration A (GRU, V = 32,
  L = 8, H = E = 64, B = 128) is timed too: it is the calibration step docs/results.md states
  beside every measured repro, and the estimate states its error against the last one of its
  profile (``measured_repros.json``) at this machine's step. Without a plan, A's FLOP rate prices
  every run (the old, FLOP-proportional model). Start-up is priced beside the training: every job
  of the plan is a process that builds its task and model, evaluates and writes its files
  (``run_s``), every sweep stage a process that imports torch and starts its worker pool
  (``stage_s``), and a run found up to date still starts a process (``skip_s``): the record's
  ``overheads`` (``calibrate.time_overheads``) scaled to this machine's calibration step. The wall
  time on the repro's cores is (training + runs' start-up) over the cores, plus the stages' start-up
  one after another. The calibration reads the 1-minute load average; above the cores, the dry run
  warns that every figure it scaled reads slow.
* **GPU**: ``gpu_model.GpuModel``: the recurrence and the output head priced apart, each from
  the measured rows of ``gpu_ms_per_iter.json`` that match it under the same switches, with a
  per-step floor per core; stated assumptions where no row reaches (module ``gpu_model``). The
  dry run prints each experiment's GPU-hours in fp32, under ``amp`` + ``cuda_graph``, and with
  runs that differ only in their seed packed into one batched model (the sweep's own packs,
  ``packing.pack``, at the measured packing gain, else an assumed one), and the peak memory of the
  largest run against the device's, refusing a plan whose run cannot fit. Where a price rests on a
  factor not measured on a GPU (``gpu_model.FACTORS``), the totals are priced again at each end of
  its plausible range and printed as a range beside the factors. The language model is priced at
  its real token counts (``lm_tokens``). The device kind is the visible GPU's, else ``ASSUMED_GPU``.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional

from ..common import catalog
from ..common.settings.config import RunConfig
from ..common.stages.experiments import trains
from ..common.host.memory import human
from ..models.head import HEAD_CHUNK_TOKENS
from .gpu_model import ASSUMED_PEAK_SHARE, FACTORS, GpuModel, Work
from .gpu_plan import (PACK_K, SWITCHES, amount, check_fits, experiment_lines, pack_lines, pack_ms,
                       pack_note, peak_bytes, priced_packs, range_lines)
from ..common.host.machine import ASSUMED_GPU, gpu_kind, load_average, usable_cores
from .calibrate import CALIBRATION, flops_per_iteration
from ..sweep.packing import TABLE as PACKING_TABLE
from ..sweep.plan import Job

TABLE = Path(__file__).with_name("gpu_ms_per_iter.json")
#: the chunked head's matrix products per token in units of its forward: forward, the two of backward,
#: and the forward once more, recomputed in backward (``models/head.py``: torch.utils.checkpoint)
CHUNKED_HEAD_PASSES = 4.0
#: measured packing gains, one row per device kind, cell and K (the GPU check's ``factors`` stage writes them;
#: the sweep's default K reads the same rows, ``packing.default_k``)
ENSEMBLE_TABLE = PACKING_TABLE



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
    cores: dict = field(default_factory=dict)  # a CPU's: core → (ms per iteration, FLOPs per iteration) as timed
    step_ms: Optional[float] = None  # a CPU's: configuration A's step here (the calibration step)
    overheads: Optional[dict] = None  # a CPU's: start-up seconds (stage_s, run_s, skip_s) at this step
    load: Optional[tuple[float, int]] = None  # a CPU's: (1-minute load average, cores) when it calibrated


def calibrate_cpu(threads: int, seconds: float = 2.0) -> tuple[float, float]:
    """(ms per iteration, FLOP/s) of configuration A's training step on this CPU, timed for
    about ``seconds`` after a short warm-up (``calibrate.time_step``)."""
    from ..common.settings.config import resolve_config
    from .calibrate import time_step

    cfg = resolve_config(options={**CALIBRATION, "train.threads": threads})
    ms = time_step(cfg, seconds)
    return ms, flops_per_iteration(cfg) / ms * 1000


def load_table(path: Path = TABLE) -> list[dict]:
    return json.loads(Path(path).read_text())["rows"] if Path(path).is_file() else []


def gpu_rate(kind: str, seen: bool, table: list[dict], ensemble: Optional[list[dict]] = None) -> Rate:
    """The rate of a GPU kind: ``table``'s rows of that kind (``gpu_ms_per_iter.json``) and its measured
    packing gains (``ensemble``, default ``ensemble_k.json``'s)."""
    from .bench import PEAKS

    where = kind if seen else f"{kind} (assumed: no GPU visible here)"
    rows = tuple(r for r in table if r["kind"] in kind)
    gains = [r for r in (load_table(ENSEMBLE_TABLE) if ensemble is None else ensemble)
             if r["kind"] in kind and "gain" in r]  # a row naming a best K alone has no gain to price
    peak = next((p for key, p in PEAKS if key in kind), dict(PEAKS)[ASSUMED_GPU])
    rates = (ASSUMED_PEAK_SHARE * peak["fp32"] * 1e12, ASSUMED_PEAK_SHARE * peak["bf16"] * 1e12)
    model = GpuModel(list(rows), peak, ensemble=gains)
    if rows:
        src = (f"ms/iteration measured on {rows[0]['device']} ({rows[0]['date']}, torch {rows[0]['torch']}): "
               f"recurrence and output head priced apart from the rows that match each "
               f"(posrnn_cli/measure/gpu_model.py)")
        return Rate(where, "GPU-hours", src, *rates, rows, model)
    src = (f"the FLOP count at {ASSUMED_PEAK_SHARE:.0%} of the dense peak ({peak['fp32']:g} TFLOP/s fp32, "
           f"{peak['bf16']:g} bf16 under train.amp), an assumption: no ms/iteration measured on this device kind yet")
    return Rate(where, "GPU-hours", src, *rates, (), model)


def run_work(cfg: RunConfig) -> Work:
    """What one training iteration of ``cfg`` does: its sequential steps and the FLOPs of its
    recurrence and of its output head (the language model's at its real tokens, ``lm_tokens``, its
    chunks' logits recomputed in backward: ``CHUNKED_HEAD_PASSES``)."""
    import torch

    from ..models import build_model
    from ..sweep.storage import task_shape

    task = task_shape(cfg)
    with torch.device("meta"):
        model = build_model(cfg, task)
    T, K, B, H = task.max_steps, cfg.task.length, cfg.train.batch_size, cfg.model.hidden_size
    chunk = HEAD_CHUNK_TOKENS if catalog.TASKS[cfg.task.name].corpus else None
    if chunk:
        from .lm_tokens import lm_tokens

        toks = lm_tokens(cfg.task.data, cfg.task.length, B, cfg.task.length_buckets)
        T, K = toks.padded_steps, toks.real_per_paragraph
    # forward, the two products of backward, and the chunked head's forward again in backward
    head = (CHUNKED_HEAD_PASSES if chunk else 3.0) * 2 * H * task.n_outputs * K * B
    t, name = cfg.train, cfg.model.name
    if hasattr(model.core, "forward_flops"):
        rec = 3.0 * model.core.forward_flops(T) * B
        work = Work(name, round(T), rec, head, rec + head, t.amp, t.cuda_graph)
    else:
        embed = sum(p.numel() for n, p in model.named_parameters() if "embed" in n)
        work = Work(name, round(T), 0.0, head, 6.0 * (sum(p.numel() for p in model.parameters()) - embed) * T * B,
                    t.amp, t.cuda_graph)
    peak = peak_bytes(work, B, model.encoder.out_dim, H, task.n_outputs, K * B,
                      sum(p.numel() for p in model.parameters()), chunk)
    return replace(work, peak_bytes=peak, chunked=chunk is not None)


def run_seconds(cfg: RunConfig, rate: Rate, work: Optional[Work] = None) -> float:
    """Seconds of one device for the whole run ``cfg`` (``work``: its ``run_work``, if known)."""
    if rate.model is not None:
        w = run_work(cfg) if work is None else work
        return cfg.train.iterations * rate.model.ms_per_iter(w) / 1000
    f = flops_per_iteration(cfg) if work is None else work.total_flops
    if cfg.model.name in rate.cores:  # the core's own timed step, scaled within the core by FLOPs
        ms, at = rate.cores[cfg.model.name]
        return cfg.train.iterations * ms * f / at / 1000
    return cfg.train.iterations * f / (rate.flops_per_s_amp if cfg.train.amp else rate.flops_per_s)


def run_steps(cfg: RunConfig) -> int:
    """The sequential steps of one training sequence of ``cfg``."""
    from ..sweep.storage import task_shape

    return int(task_shape(cfg).max_steps)


def profile_rate(prof: dict, calibrate: Optional[Callable[[int], tuple[float, float]]] = None,
                 table: Optional[list[dict]] = None, jobs: Optional[list[Job]] = None,
                 time_core: Optional[Callable[[RunConfig], float]] = None) -> Rate:
    """The rate for a profile's device. On a CPU: ``calibrate(threads) -> (ms/iter, FLOP/s)`` of
    configuration A (default: ``calibrate_cpu``) and, given the plan's ``jobs``, each core's step
    at its representative size, ``time_core(cfg) -> ms`` (default: ``calibrate.time_step``). On a
    GPU: the table or the assumed share of peak."""
    from .bench import machine

    device = str(prof.get("device", "auto"))
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        kind, seen = gpu_kind()
        return gpu_rate(kind, seen, load_table() if table is None else table)
    threads = int(prof.get("threads") or 1)
    load = (load_average(), usable_cores())
    ms, flops = (calibrate or calibrate_cpu)(threads)
    where = f"{machine()}, {threads} thread(s) per run"
    cores = core_rates(jobs or [], threads, time_core)
    extra = {"step_ms": ms, "overheads": recorded_overheads(ms), "load": load}
    if not cores:
        src = (f"calibrated here just now: posrnn bench's configuration A at {ms:.1f} ms/iteration on {threads} "
               f"thread(s) ({flops / 1e9:.2f} GFLOP/s), scaled to each run by its FLOP count")
        return Rate(where, "CPU-minutes", src, flops, flops, **extra)
    each = ", ".join(f"{core} {c_ms:.1f} ms" for core, (c_ms, _) in cores.items())
    untimed = sorted({j.config["model"]["name"] for j in jobs if trains(j.kind) and j.config} - set(cores))
    rest = (f"; {', '.join(untimed)} could not be timed here (its task could not be built): priced by configuration "
            f"A's {flops / 1e9:.2f} GFLOP/s" if untimed else "")
    src = (f"calibrated here just now: each core's training step at a representative size of its runs ({each}; "
           f"{threads} thread(s)), scaled within a core by each run's FLOPs; calibration step (configuration A) "
           f"{ms:.1f} ms{rest}")
    return Rate(where, "CPU-minutes", src, flops, flops, cores=cores, **extra)


def core_rates(jobs: list[Job], threads: int, time_core: Optional[Callable[[RunConfig], float]] = None
               ) -> dict[str, tuple[float, float]]:
    """core → (ms per iteration, FLOPs per iteration) of each core the training ``jobs`` run, timed
    at its representative size (``calibrate.representatives``) on ``threads`` threads."""
    from .calibrate import on_cpu, representatives, time_step

    from ..common.errors import PosrnnError

    cfgs = [j.run_config() for j in jobs if trains(j.kind) and j.config]
    out = {}
    for core, cfg in representatives(cfgs, flops_per_iteration).items():
        cfg = on_cpu(cfg, threads)
        try:
            out[core] = ((time_core or time_step)(cfg), flops_per_iteration(cfg))
        except (PosrnnError, OSError):  # e.g. a language model whose data is not prepared here
            continue  # priced by configuration A's FLOP rate, which the source line then names
    return out


def recorded_overheads(step_ms: float, rec: Optional[dict] = None) -> Optional[dict]:
    """The record's start-up seconds (``stage_s``, ``run_s``, ``skip_s``) scaled to a calibration step of
    ``step_ms``; None where the record holds none."""
    from .calibrate import load_record

    o = (load_record() if rec is None else rec).get("overheads")
    if not o:
        return None
    return {k: o[k] * step_ms / o["calibration_ms"] for k in ("stage_s", "run_s", "skip_s")}


def startup_seconds(jobs: list[Job], overheads: Optional[dict]) -> tuple[float, float]:
    """(the runs' start-up summed over every job of the plan, the start-up of each sweep stage the plan
    spans, one after another), in seconds; (0, 0) without a record of them."""
    from ..common.stages.experiments import EXPERIMENTS

    if not overheads or not jobs:
        return 0.0, 0.0
    stages = {EXPERIMENTS[j.experiment].stage if j.experiment in EXPERIMENTS else j.experiment for j in jobs}
    return len(jobs) * overheads["run_s"], len(stages) * overheads["stage_s"]


def wall_minutes(train_s: float, startup: tuple[float, float], cores: int) -> float:
    """Wall minutes on ``cores`` cores, one run per core: the training and the runs' start-up shared
    out, the stages' start-up one after another."""
    return ((train_s + startup[0]) / cores + startup[1]) / 60


def startup_lines(jobs: list[Job], rate: Rate) -> list[str]:
    """The start-up the total leaves out, and a warning when the calibration ran on a busy machine."""
    lines = []
    o = rate.overheads
    if o:
        runs_s, stages_s = startup_seconds(jobs, o)
        n_stages = round(stages_s / o["stage_s"]) if o["stage_s"] else 0
        lines.append(f"  start-up, beside the training: {len(jobs):,} job(s) × {o['run_s']:.1f} s (each a process "
                     f"that builds its task and model, evaluates and writes its files) and {n_stages} sweep stage(s) "
                     f"× {o['stage_s']:.1f} s (torch imported, the worker pool started): "
                     f"{amount((runs_s + stages_s) / 60)} CPU-minutes; a run found up to date still costs "
                     f"{o['skip_s']:.1f} s (its process starts); recorded in posrnn_cli/measure/cpu_core_ms.json, "
                     f"scaled to this machine's {rate.step_ms:.1f} ms step")
    if rate.load and rate.load[0] > rate.load[1]:
        lines.append(f"  warning: the 1-minute load average was {rate.load[0]:.1f} on {rate.load[1]} core(s) when "
                     f"this calibrated: other work shared the CPU, so the {rate.step_ms:.1f} ms calibration step and "
                     f"every figure scaled from it read slow; run the dry run again on an idle machine")
    return lines


def repro_lines(cpu_seconds: float, rate: Rate, profile: Optional[str], jobs: Optional[list[Job]] = None
                ) -> list[str]:
    """The estimate as wall time on the measured machine's cores (training and start-up), and its
    error against the last measured repro of ``profile`` scaled to this machine's calibration step
    (``measured_repros.json``)."""
    from .calibrate import last_repro

    r = last_repro(profile) if profile and rate.step_ms else None
    if r is None:
        return [f"  no measured repro of {profile} is recorded to check this estimate against"] if profile else []
    est = wall_minutes(cpu_seconds, startup_seconds(jobs or [], rate.overheads), r["cores"])
    scaled = r["wall_minutes"] * rate.step_ms / r["calibration_ms"]
    what = "training and start-up" if rate.overheads and jobs else "training"
    return [f"  on {r['cores']} cores, one run per core: about {est:,.0f} min of wall time for {what}",
            f"  last measured repro of {profile}: {r['wall']} at a {r['calibration_ms']:.2f} ms calibration step "
            f"({r['machine']}, {r['date']}), {scaled:,.0f} min at this machine's {rate.step_ms:.1f} ms; this "
            f"estimate is {est / scaled - 1:+.0%} of it"]


def recorded_rate(profile: str, step_ms: float, rec: Optional[dict] = None) -> Rate:
    """The rate the committed record (``cpu_core_ms.json``) gives ``profile``'s cores and start-up at a
    calibration step of ``step_ms``: each core's step scaled by ``step_ms`` over the configuration A
    timed beside it; a core the record lacks priced at A's FLOP rate."""
    from ..common.settings.config import resolve_config
    from .calibrate import load_record

    rec = load_record() if rec is None else rec
    cores = {c["core"]: (c["ms_per_iter"] * step_ms / c.get("calibration_ms", rec["calibration_ms"]),
                         c["flops_per_iter"]) for name, c in rec["cores"].items() if name.startswith(f"{profile}:")}
    flops = flops_per_iteration(resolve_config(options={**CALIBRATION, "train.threads": 1})) / step_ms * 1000
    return Rate(f"{rec['machine']}, the record of {rec['date']}", "CPU-minutes", "cpu_core_ms.json", flops, flops,
                cores=cores, step_ms=step_ms, overheads=recorded_overheads(step_ms, rec))


def repro_estimate(repro: dict, params: Path = Path("params.yaml"), rec: Optional[dict] = None) -> dict:
    """The wall minutes the estimate gives a measured repro (a row of ``measured_repros.json``): its
    profile's plan priced from the record at the repro's calibration step, on its cores."""
    from ..common.stages.experiments import EXPERIMENTS
    from ..sweep.plan import plan

    name = repro["profile"]
    jobs = plan(params, name, list(EXPERIMENTS), Path("runs") / name)
    rate = recorded_rate(name, repro["calibration_ms"], rec)
    _, secs = summary(jobs, rate)
    train = sum(s for s in secs.values() if s)
    startup = startup_seconds(jobs, rate.overheads)
    return {"minutes": wall_minutes(train, startup, repro["cores"]), "training_minutes": train / 60 / repro["cores"],
            "rate": rate, "jobs": jobs}


def summary(jobs: list[Job], rate: Rate, profile: Optional[str] = None, ensemble: Optional[int] = None
            ) -> tuple[str, dict[str, Optional[float]]]:
    """One line per experiment and a total, in the rate's unit; run label → seconds (None for
    jobs that do not train). On a CPU, the error against the profile's last measured repro. On a
    GPU, each experiment in fp32, under amp + cuda_graph and packed (at the sweep's ``ensemble``
    when above 1, else ``PACK_K``), and the largest run's peak memory, a plan whose run cannot fit
    refused."""
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
    ends = run_total_ends(works, rate.model) if rate.model is not None else None
    span = (f" at the assumed factors, {amount(ends[0] / scale)}–{amount(ends[1] / scale)} over their plausible "
            f"ranges (below)" if ends else "")
    if rate.model is None and rate.overheads and jobs:
        span = f", {amount((total + sum(startup_seconds(jobs, rate.overheads))) / scale)} with start-up (below)"
    lines = [f"estimated compute to train every run from step 0 (an estimate, not a measurement): "
             f"{amount(total / scale)} {rate.unit}{span}", f"  device: {rate.device}; date: {today}",
             f"  source: {rate.source}"]
    if rate.model is None:
        for exp, secs in per_exp.items():
            lines.append(f"  {exp:<10} {len(secs):>4} run(s), {amount(sum(secs) / scale):>12} {rate.unit} "
                         f"(longest run {amount(max(secs) / scale)})")
        lines += startup_lines(jobs, rate) + repro_lines(total, rate, profile, jobs)
    else:
        lines += gpu_lines(works, rate, ensemble if ensemble and ensemble > 1 else PACK_K)
    return "\n".join(lines), per_run


def end_model(model: GpuModel, cheap: bool) -> GpuModel:
    """``model`` with each factor it used (``FACTORS``) at the end of its range that prices lowest
    (``cheap``) or highest."""
    ends = {n: f.end(cheap) for n, f in FACTORS.items() if n in model.used}
    return GpuModel(model.rows, model.peak, factors={**model.factors, **ends}, ensemble=model.ensemble)


def run_total_ends(works: dict[str, tuple[Job, RunConfig, Work]], model: GpuModel) -> Optional[tuple[float, float]]:
    """Seconds of every run at its own switches, with the factors the price used at the cheap end, then
    the dear end; None where the price used none."""
    for _, _, w in works.values():
        model.ms_per_iter(w)
    if not model.used:
        return None
    return tuple(sum(cfg.train.iterations * m.ms_per_iter(w) / 1000 for _, cfg, w in works.values())
                 for m in (end_model(model, True), end_model(model, False)))


def variant_seconds(works: dict[str, tuple[Job, RunConfig, Work]], model: GpuModel, packs: list
                    ) -> dict[str, dict[str, float]]:
    """Each experiment's seconds in fp32, under amp + cuda_graph, and in ``packs`` (``priced_packs``)."""
    per_exp: dict[str, dict[str, float]] = {}
    for job, cfg, w in works.values():
        by = per_exp.setdefault(job.experiment, {"fp32": 0.0, "amp": 0.0, "packed": 0.0})
        for key, sw in (("fp32", SWITCHES["fp32"]), ("amp", SWITCHES["amp + cuda_graph"])):
            by[key] += cfg.train.iterations * model.ms_per_iter(replace(w, amp=sw[0], cuda_graph=sw[1])) / 1000
    for p in packs:
        job, cfg, w = works[p.jobs[0].label]
        per_exp[job.experiment]["packed"] += cfg.train.iterations * pack_ms(model, w, len(p.jobs)) / 1000
    return per_exp


def switch_line(works: dict[str, tuple[Job, RunConfig, Work]], per_exp: dict[str, dict[str, float]], k: int) -> str:
    """What ``dvc repro`` of the plan runs (each run alone, at the switches its profile sets: the
    total above) and which of the profile's switches give the lower figures below."""
    amp = {cfg.train.amp and cfg.train.cuda_graph for _, cfg, _ in works.values()}
    own = "amp and cuda_graph on" if amp == {True} else "amp and cuda_graph off" if amp == {False} else "mixed switches"
    total = {key: sum(by[key] for by in per_exp.values()) / 3600 for key in ("amp", "packed")}
    return (f"  `dvc repro` of this plan trains each run alone at its profile's switches ({own}): the total above; "
            f"train.amp and train.cuda_graph set true in the profile price it at {amount(total['amp'])}, and "
            f"ensemble: {k} beside them (local or SLURM executor) at {amount(total['packed'])} (GPU-hours, the "
            f"columns above)")


def gpu_lines(works: dict[str, tuple[Job, RunConfig, Work]], rate: Rate, k: int = PACK_K) -> list[str]:
    """The GPU view: per experiment three prices, the assumptions used, the LM's tokens and the
    largest run's peak memory (refused in one line where it cannot fit)."""
    from .gpu_model import device_bytes

    packs = priced_packs([job for job, _, _ in works.values()], k, (device_bytes(rate.device), f"the {rate.device}"))
    per_exp = variant_seconds(works, rate.model, packs)
    runs: dict[str, int] = {}
    for job, _, _ in works.values():
        runs[job.experiment] = runs.get(job.experiment, 0) + 1
    src = "measured rows" if rate.measured else "no measured row"
    corpus = {job.experiment for job, cfg, _ in works.values() if catalog.TASKS[cfg.task.name].corpus}
    gain = "the measured packing gain" if rate.model.ensemble else "an assumption, not measured on a GPU"
    lines = experiment_lines(per_exp, runs, src, corpus=corpus, packed=gain) + [switch_line(works, per_exp, k)]
    lines += pack_lines(packs, k)
    lines += [f"  assumption: {n}" for n in rate.model.notes] + [f"  assumption: {pack_note(rate.model)}"]
    used = [n for n in FACTORS if n in rate.model.used]
    if used:
        ends = [variant_seconds(works, end_model(rate.model, cheap), packs) for cheap in (True, False)]
        lines += range_lines(used, ends, runs, corpus)
    lm = [(cfg, w) for job, cfg, w in works.values() if catalog.TASKS[cfg.task.name].corpus]
    if lm:
        from .lm_tokens import lm_tokens

        cfg, w = max(lm, key=lambda cw: cw[1].peak_bytes)
        toks = lm_tokens(cfg.task.data, cfg.task.length, cfg.train.batch_size, cfg.task.length_buckets)
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


def write_estimates(path: Optional[Path] = None) -> list[dict]:
    """Each measured repro with the wall minutes the current estimate gives it (``cost.repro_estimate``)."""
    from .calibrate import REPROS

    path = REPROS if path is None else path
    data = json.loads(Path(path).read_text())
    for r in data["repros"]:
        r["estimate_minutes"] = round(repro_estimate(r)["minutes"], 1)
    Path(path).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    return data["repros"]


if __name__ == "__main__":
    for r in write_estimates():
        print(f"{r['profile']:<12} {r['date']}  measured {r['wall_minutes']:6.1f} min, estimated "
              f"{r['estimate_minutes']:6.1f} ({r['estimate_minutes'] / r['wall_minutes'] - 1:+.0%})")
