"""``posrnn sweep``: the runs of one or more experiments of a profile, through an executor.

``plan`` turns the profile into jobs (torch-free); an executor runs them — ``local`` (a pool
of worker processes sized to the machine, the default), ``slurm`` (a submitit job array) or
``submitit-local`` (submitit's local executor: the SLURM code path on one machine). Every
job is idempotent (``jobs``), so a sweep can be stopped and started again at any point. A
failed job does not stop the others; the sweep then ends with an error naming each one and
its log.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, TextIO

from ..common.errors import PosrnnError
from ..common.io import atomic_write_bytes
from ..common.profiles import load_profile
from .local import JobOutcome, cpu_count
from ..common.experiments import EXPERIMENTS, Experiment, trains
from .plan import Job, plan

EXECUTORS = ("local", "slurm", "submitit-local")


@dataclass
class SweepOptions:
    executor: Optional[str] = None  # None: the profile's executor.kind, else local
    workers: Optional[int] = None  # local: processes (CPU); None: the profile's, else one per core
    runs_per_gpu: Optional[int] = None  # local on GPUs: runs sharing each GPU
    force: bool = False
    dry_run: bool = False
    wait: bool = True  # slurm: wait for the array
    slurm: Optional[dict] = None  # overrides of the profile's slurm: section


def status(job: Job) -> str:
    """What a sweep would do with ``job`` now (no torch): new, resume, done, different, or
    (for derived jobs) run."""
    from ..engine.rundir import run_state

    if not trains(job.kind):
        return "run"
    try:
        return run_state(Path(job.run_dir), job.run_config()).state
    except PosrnnError:  # a file where the run directory should be
        return "different"


def write_manifest(exp_dir: Path, exp: Experiment, jobs: list[Job]) -> None:
    """``sweep.json``: the experiment, its job kind and table form (as the registry had them),
    and the cells of the current grid (aggregation reads only these runs)."""
    from ..common.io import atomic_write_json

    atomic_write_json(exp_dir / "sweep.json", {"experiment": exp.name, "kind": exp.kind, "table": exp.table,
                                               "cells": [{"name": j.name, "kind": j.kind} for j in jobs]})


def sources(names) -> set[str]:
    return {EXPERIMENTS[n].source for n in names if EXPERIMENTS[n].source}


def waves(names: list[str]) -> list[list[str]]:
    """The experiments in rounds: one whose source is also being run waits for it."""
    left, out = list(dict.fromkeys(names)), []
    while left:
        ready = [n for n in left if EXPERIMENTS[n].source not in left]
        out.append(ready)
        left = [n for n in left if n not in ready]
    return out


def order(jobs: list[Job]) -> list[Job]:
    """Longest runs first (iterations × batch × length), so no core idles at the end."""
    def cost(j: Job) -> float:
        if not j.config:
            return 0.0
        t = j.config["train"]
        return float(t["iterations"]) * t["batch_size"] * max(1, j.config["task"]["length"]) * max(1, j.config["model"]["hidden_size"]) ** 2
    return sorted(jobs, key=cost, reverse=True)


def run_sweep(params: Path, profile: str, experiments: list[str], opts: SweepOptions,
              out: TextIO = sys.stdout, runs_root: Optional[Path] = None) -> list[JobOutcome]:
    """Plan, run and report a sweep; raises ``PosrnnError`` naming the failed jobs. Everything
    is checked before the first file is written."""
    prof = load_profile(params, profile)
    for key in ("executor", "slurm"):
        if prof.get(key) is not None and not isinstance(prof[key], dict):
            raise PosrnnError(f"profile {profile!r}: `{key}:` must be a mapping, e.g. executor: {{kind: local, workers: auto}}")
    runs_root = Path(runs_root) if runs_root is not None else Path("runs") / profile
    jobs = plan(params, profile, experiments, runs_root, force=opts.force)
    executor = opts.executor or (prof.get("executor") or {}).get("kind") or "local"
    if executor not in EXECUTORS:
        raise PosrnnError(f"unknown executor {executor!r}; choose one of: {', '.join(EXECUTORS)}")
    if opts.dry_run:
        return [JobOutcome(j, status(j), 0.0) for j in jobs]
    from .jobs import validate

    validate(jobs)
    pool = _pool(prof, opts) if executor == "local" else None
    if executor != "local":
        from .slurm import check_available

        check_available("slurm" if executor == "slurm" else "local")
    from ..engine.rundir import run_lock

    made = [d for d in (runs_root, *runs_root.parents) if not d.exists()]  # the folders this sweep creates
    runs_root.mkdir(parents=True, exist_ok=True)
    try:
        with run_lock(runs_root, f"posrnn sweep --profile {profile}"):  # a second sweep here gets one line naming this
            outcomes = _run_waves(jobs, experiments, executor, prof, opts, pool, runs_root, out)
    except PosrnnError:
        for d in made:  # innermost first; only while they are still empty
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()
        raise
    failed = [o for o in outcomes if o.status == "failed"]
    if failed:
        for o in failed:
            print(f"failed: {o.job.label}: {o.error} (log: {o.log})", file=sys.stderr)
        raise PosrnnError(f"{len(failed)} of {len(outcomes)} runs failed (each named above with its log); "
                          f"fix the cause and run the same command again (finished runs are kept)")
    return outcomes


def _run_waves(jobs: list[Job], experiments: list[str], executor: str, prof: dict, opts: SweepOptions,
               pool: Optional["Pool"], runs_root: Path, out: TextIO) -> list[JobOutcome]:
    """Write the manifests, then run the experiments wave by wave. If nothing could start (a
    refused submission), the manifests and directories this call wrote are put back as they were."""
    before = {name: (runs_root / name).exists() for name in experiments}
    old = {name: ((runs_root / name / "sweep.json").read_bytes() if (runs_root / name / "sweep.json").is_file() else None)
           for name in experiments}
    for name in experiments:  # the manifests first: they say which runs make the tables
        (runs_root / name).mkdir(parents=True, exist_ok=True)  # every experiment's directory, even an empty grid's
        if EXPERIMENTS[name].table is not None:
            write_manifest(runs_root / name, EXPERIMENTS[name], [j for j in jobs if j.experiment == name])
    outcomes: list[JobOutcome] = []
    try:
        for wave in waves(experiments):  # an experiment runs after the one it reads (lm after lm_data)
            wave_jobs = [j for j in jobs if j.experiment in wave]
            if not wave_jobs:
                continue
            if any(o.status == "failed" and o.job.experiment in sources(wave) for o in outcomes):
                break  # what this wave reads failed: its errors are reported, do not pile more on
            if executor == "local":
                outcomes += _local(wave_jobs, pool, runs_root, out)
            else:
                outcomes += _slurm(wave_jobs, prof, opts, executor, runs_root, out)
    except PosrnnError:
        if not outcomes:
            for name in experiments:
                manifest = runs_root / name / "sweep.json"
                if old[name] is not None:
                    atomic_write_bytes(manifest, old[name])
                elif manifest.is_file():
                    manifest.unlink()
                if not before[name] and (runs_root / name).is_dir() and not any((runs_root / name).iterdir()):
                    (runs_root / name).rmdir()
        raise
    return outcomes


@dataclass
class Pool:
    workers: int
    gpus: int
    runs_per_gpu: int
    threads: int  # per run, when the profile leaves it open


def _pool(prof: dict, opts: SweepOptions) -> Pool:
    """The local pool's size: one process per core on a CPU, k per GPU on GPUs."""
    from .local import gpu_count

    device = str(prof.get("device", "auto"))
    ex = prof.get("executor") or {}
    gpus = gpu_count() if (device.startswith("cuda") or device == "auto") else 0
    if device.startswith("cuda") and gpus == 0:
        raise PosrnnError(f"this profile runs on a GPU (device: {device}) and none is visible here; use a CPU profile "
                          f"(posrnn profile use lite) or --executor slurm")
    workers = opts.workers if opts.workers is not None else ex.get("workers")
    if workers in (None, "auto"):
        workers = cpu_count()
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise PosrnnError(f"--workers must be a positive number, got {workers!r}")
    per_gpu = opts.runs_per_gpu if opts.runs_per_gpu is not None else ex.get("runs_per_gpu", 1)
    if not isinstance(per_gpu, int) or isinstance(per_gpu, bool) or per_gpu < 1:
        raise PosrnnError(f"--runs-per-gpu must be a positive number, got {per_gpu!r}")
    return Pool(workers, gpus, per_gpu, max(1, cpu_count() // workers))


def _local(jobs: list[Job], pool: Pool, runs_root: Path, out: TextIO) -> list[JobOutcome]:
    from .local import run_local
    from .progress import Progress

    if not pool.gpus:
        for j in jobs:  # one single-threaded run per core unless the profile says otherwise
            if j.config and j.config["train"]["threads"] is None:
                j.config["train"]["threads"] = pool.threads
    slots = pool.gpus * pool.runs_per_gpu if pool.gpus else pool.workers
    where = f"{pool.gpus} GPU(s) × {pool.runs_per_gpu} runs" if pool.gpus else f"CPU × {slots}"
    progress = Progress(order(jobs), slots, where, out)
    with progress:
        return run_local(order(jobs), pool.workers, runs_root / ".logs", gpus=pool.gpus, runs_per_gpu=pool.runs_per_gpu,
                         on_event=progress.event, poll=progress.poll)


def _slurm(jobs: list[Job], prof: dict, opts: SweepOptions, executor: str, runs_root: Path, out: TextIO) -> list[JobOutcome]:
    from .slurm import run_slurm

    settings = {**(prof.get("slurm") or {}), **{k: v for k, v in (opts.slurm or {}).items() if v is not None}}
    cluster = "slurm" if executor == "slurm" else "local"

    def submitted(handles):
        ids = ", ".join(sorted({h.job_id.split("_")[0] for h in handles}))
        print(f"submitted {len(handles)} task(s) as job array {ids} ({executor}); logs in {runs_root / '.submitit'}",
              file=out, flush=True)

    last: dict = {}

    def polled(js, states):
        counts: dict = {}
        for s in states:
            counts[s] = counts.get(s, 0) + 1
        if counts != last:
            last.clear()
            last.update(counts)
            print(f"{time.strftime('%H:%M:%S')} " + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())), file=out, flush=True)

    return run_slurm(order(jobs), runs_root / ".submitit", settings, cluster=cluster, wait=opts.wait,
                     on_submit=submitted, on_poll=polled, poll_s=2.0 if cluster == "local" else 10.0)
