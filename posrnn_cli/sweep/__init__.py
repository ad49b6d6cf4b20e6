"""``posrnn sweep``: the runs of one or more experiments of a profile, through an executor.

``plan`` turns the profile into jobs (torch-free); an executor runs them — ``local`` (a pool
of worker processes sized to the machine, the default), ``slurm`` (a submitit job array) or
``submitit-local`` (submitit's local executor: the SLURM code path on one machine). Every
job is idempotent (``jobs``), so a sweep can be stopped and started again at any point. A
failed job does not stop the others; the sweep then ends with an error naming each one and
its log.

One sweep at a time holds a runs directory (its lock names host, pid, executor and arrays).
A second local sweep gets one line naming the holder; a second SLURM sweep reattaches: it
waits on the holder's tasks of its grid, then takes over. A SLURM sweep started again after a
kill reattaches to the tasks its predecessor left in flight (``slurm``) instead of submitting
them again.
"""

from __future__ import annotations

import re
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional, TextIO

from ..common.errors import PosrnnError
from ..common.host.machine import usable_cores
from ..common.host.signals import Stopped
from ..common.files.io import atomic_write_bytes
from ..common.settings.profiles import load_profile
from ..common.stages.experiments import EXPERIMENTS, Experiment, trains
from .plan import Job, JobOutcome, order, plan, status

if TYPE_CHECKING:  # the SLURM executor loads submitit: imported where a sweep uses it
    from .slurm import SlurmSweep

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
    timeout: Optional[str] = None  # slurm: give up waiting after this long (90s, 45m, 12h; bare: minutes)
    test_only: bool = False  # with dry_run: ask sbatch --test-only about the array
    lost_after_s: Optional[float] = None  # slurm: a task SLURM no longer lists, without a result, is lost after this
    retrain_stale: bool = False  # retrain runs trained by other code (jobs.code_of) from step 0
    ensemble: Optional[int] = None  # most same-shape runs per ensemble (packing.ensemble_k); None: the profile's


def parse_duration(text: Optional[str]) -> Optional[float]:
    """``--timeout``: 90s, 45m, 12h, 2d or a bare number of minutes → seconds."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", str(text))
    if not m or float(m.group(1)) <= 0:
        raise PosrnnError(f"--timeout must be a positive duration such as 90s, 45m or 12h (a bare number is minutes), "
                          f"got {text!r}")
    return float(m.group(1)) * {"s": 1, "m": 60, "": 60, "h": 3600, "d": 86400}[m.group(2)]


def code_status(job: Job, state: Optional[str] = None) -> Optional[str]:
    """Which code trained the job's run, for a run that has begun: current, other or unknown
    (``state``: the job's ``status``, when known)."""
    from .jobs import code_of

    if not trains(job.kind) or (state or status(job)) not in ("resume", "done"):
        return None
    return code_of(job)


def stale_note(outcomes: list[JobOutcome]) -> Optional[str]:
    """One line on the runs kept although other or unknown code trained them, or None."""
    codes = [o.result.get("code") for o in outcomes if isinstance(o.result, dict)]
    other, unknown = codes.count("other"), codes.count("unknown")
    if not other and not unknown:
        return None
    first = (f"{other} run(s) were trained by other code than this (--dry-run --verbose names them; --retrain-stale "
             f"retrains them)") if other else ""
    then = (f"{unknown} {'by' if other else 'run(s) were trained by'} unknown code (trained before runs recorded it; "
            f"kept as they are)") if unknown else ""
    return "; ".join(p for p in (first, then) if p)


def write_manifest(exp_dir: Path, exp: Experiment, jobs: list[Job]) -> None:
    """``sweep.json``: the experiment, its job kind and table form (as the registry had them),
    and the cells of the current grid (aggregation reads only these runs)."""
    from ..common.files.io import atomic_write_json, json_digest

    cells = [{"name": j.name, "kind": j.kind} for j in jobs]
    atomic_write_json(exp_dir / "sweep.json", {"experiment": exp.name, "kind": exp.kind, "table": exp.table,
                                               "cells": cells, "cells_sha256": json_digest(cells)})


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


def run_sweep(params: Path, profile: str, experiments: list[str], opts: SweepOptions,
              out: TextIO = sys.stdout, runs_root: Optional[Path] = None) -> list[JobOutcome]:
    """Plan, run and report a sweep; raises ``PosrnnError`` naming the failed jobs. Everything
    is checked before the first file is written: the plan, then the executor (local workers, or
    SLURM through submitit), then the report."""
    prof = load_profile(params, profile)
    runs_root = Path(runs_root) if runs_root is not None else Path("runs") / profile
    jobs = plan(params, profile, experiments, runs_root, force=opts.force)
    executor, settings, params_, timeout = _executor(prof, profile, opts)
    if opts.retrain_stale:
        for j in jobs:
            j.options["retrain_stale"] = True
    if executor == "local":  # threads beyond this machine's cores: refused before the plan is shown or run
        check_threads(jobs, profile)
    from .packing import ensemble_k

    k = ensemble_k(prof, opts.ensemble, profile)
    if opts.dry_run:
        return _dry_run(jobs, executor, settings, opts, runs_root, out, k, prof)
    from .jobs import check_recipes, validate

    check_recipes(jobs)  # torch-free, as the pool's options are
    pool = local_pool(prof, opts, k) if executor == "local" else None  # its options refused before torch loads
    validate(jobs)
    what = f"posrnn sweep --profile {profile} --executor {executor} on {socket.gethostname()}"
    sweep = None
    if executor != "local":
        from .slurm import SlurmSweep, check_available

        check_available("slurm" if executor == "slurm" else "local")
        sweep = SlurmSweep(params=params_, what=what, wait=opts.wait, lost_after_s=opts.lost_after_s, ensemble=k)
        if k > 1:  # one array task trains each pack, of as many members as its task's memory holds
            from .storage import member_fit, task_memory

            sweep.fit = member_fit(*task_memory(prof, settings, executor))
        if timeout is not None:
            sweep.deadline = time.monotonic() + timeout
    outcomes = _execute(jobs, experiments, executor, pool, runs_root, out, what, sweep)
    _report(outcomes, out)
    return outcomes


def check_threads(jobs: list, profile: str) -> None:
    """Refuse a local sweep whose runs ask for more CPU threads than this process may use (what
    ``posrnn train`` refuses for each run), in one line naming the profile's setting."""
    import os

    from .jobs import job_threads

    cores = usable_cores()
    cpu = ("cpu",) if os.path.exists("/dev/nvidiactl") else ("cpu", "auto")  # auto runs on the CPU without a GPU
    over = [j for j in jobs if (job_threads(j) or 0) > cores and (j.config or {}).get("train", {}).get("device") in cpu]
    if over:
        raise PosrnnError(f"profile {profile!r}: {over[0].label} asks for {job_threads(over[0])} CPU threads "
                          f"(train.threads), beyond the {cores} core(s) this machine gives; set the profile's threads: "
                          f"to {cores} or fewer")


def _executor(prof: dict, profile: str, opts: SweepOptions) -> tuple[str, dict, dict, Optional[float]]:
    """The executor a sweep uses (the option, else the profile's, else local), its SLURM settings
    as given and as submitit takes them once checked (both empty for local), and its time-out;
    every combination that cannot work is refused."""
    for key in ("executor", "slurm"):
        if prof.get(key) is not None and not isinstance(prof[key], dict):
            raise PosrnnError(f"profile {profile!r}: `{key}:` must be a mapping, e.g. executor: {{kind: local, "
                              f"workers: auto}}")
    executor = opts.executor or (prof.get("executor") or {}).get("kind") or "local"
    if executor not in EXECUTORS:
        raise PosrnnError(f"unknown executor {executor!r}; choose one of: {', '.join(EXECUTORS)}")
    timeout, settings, checked = parse_duration(opts.timeout), {}, {}
    if executor != "local":
        from .slurm_settings import check_settings

        settings = {**(prof.get("slurm") or {}), **{k: v for k, v in (opts.slurm or {}).items() if v is not None}}
        checked = check_settings(settings, "slurm" if executor == "slurm" else "local")
    elif timeout is not None:
        raise PosrnnError("--timeout applies to --executor slurm or submitit-local; a local sweep runs until its runs "
                          "end (Ctrl-C stops it)")
    if opts.test_only and (executor != "slurm" or not opts.dry_run):
        raise PosrnnError("--test-only asks `sbatch --test-only` about the array a SLURM sweep would submit; "
                          "use it with --dry-run --executor slurm")
    return executor, settings, checked, timeout


def _dry_run(jobs: list[Job], executor: str, settings: dict, opts: SweepOptions, runs_root: Path,
             out: TextIO, k: int = 1, prof: Optional[dict] = None) -> list[JobOutcome]:
    """What would happen to each job (and, with --test-only, what ``sbatch --test-only`` says);
    with ``k`` > 1 each training job's result says its pack (``packing.pack``)."""
    from .packing import pack
    from .storage import member_fit, task_memory

    fit = member_fit(*task_memory(prof or {}, settings, executor)) if k > 1 else None
    packs = {id(j): p for p in (pack([j for j in jobs if trains(j.kind)], k, fit) if k > 1 else []) for j in p.jobs}
    states = [status(j) for j in jobs]
    outcomes = [JobOutcome(j, s, 0.0, result={"code": code_status(j, s)}) for j, s in zip(jobs, states)]
    for o in outcomes:
        if "data_dir" in (o.job.options or {}) and o.status != "done":  # a corpus job: is its data here?
            from .jobs import corpus_missing

            o.result["missing_data"] = corpus_missing(o.job)
        if id(o.job) in packs:
            p = packs[id(o.job)]
            o.result["pack"] = {"runs": [j.label for j in p.jobs], "solo_reason": p.reason, "note": p.note}
    if executor == "slurm":
        from .slurm import mark_in_flight

        mark_in_flight(outcomes, runs_root)
    if opts.test_only:
        from .slurm import test_only

        n = sum(1 for o in outcomes if o.status not in ("done", "in flight"))
        said = test_only(settings, n) if n else "nothing to submit"
        print(f"sbatch --test-only ({n} task(s)): {said}", file=out, flush=True)
    return outcomes


def _execute(jobs: list[Job], experiments: list[str], executor: str, pool: Optional["Pool"], runs_root: Path,
             out: TextIO, what: str, sweep: Optional[SlurmSweep]) -> list[JobOutcome]:
    """Run the waves under the run root's lock. A SLURM sweep that finds another SLURM sweep
    holding it waits on that sweep's tasks and then takes over; Ctrl-C of a SLURM sweep names the
    arrays that keep running; a refused start removes the folders it created."""
    from ..engine.lock import LockBusy, run_lock

    made = [d for d in (runs_root, *runs_root.parents) if not d.exists()]  # the folders this sweep creates
    runs_root.mkdir(parents=True, exist_ok=True)
    told = False
    try:
        while True:
            try:
                with run_lock(runs_root, what):  # a second sweep here gets one line naming this
                    return _run_waves(jobs, experiments, executor, pool, runs_root, out, sweep)
            except LockBusy as e:
                if executor != "slurm" or "--executor slurm" not in e.holder:
                    raise
                if not told:  # another SLURM sweep holds the runs: wait on its tasks, then take over
                    print(f"{runs_root} is held by another SLURM sweep ({e.holder}); reattaching to its tasks instead "
                          f"of submitting them again", file=out, flush=True)
                    told = True
                from .slurm import observe

                observe(jobs, runs_root, out, sweep)
    except KeyboardInterrupt:
        if executor == "slurm" and sweep.arrays:
            ids = sorted(sweep.arrays, key=int)
            err = Stopped(f"interrupted: job array {', '.join(ids)} keeps running on SLURM (this sweep only waited "
                              f"on it); cancel it with `scancel {' '.join(ids)}`, or run the same command again to "
                              f"reattach")
            err.exit_code = 130
            raise err from None
        raise
    except PosrnnError:
        for d in made:  # innermost first; only while they are still empty
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()
        raise


def _report(outcomes: list[JobOutcome], out: TextIO) -> None:
    """The stale-code note, then each run that did not finish (on stderr) and one line that says
    what to do; raises when any did not finish."""
    note = stale_note(outcomes)
    if note:
        print(note, file=out, flush=True)
    failed = [o for o in outcomes if o.status != "done"]
    if not failed:
        return
    for o in failed:
        print(f"{o.status}: {o.job.label}: {o.error} (log: {o.log})", file=sys.stderr)
    kinds: dict[str, int] = {}
    for o in failed:
        kinds[o.status] = kinds.get(o.status, 0) + 1
    how = ("failed (each named above with its log)" if list(kinds) == ["failed"] else
           "did not finish (" + ", ".join(f"{v} {k}" for k, v in sorted(kinds.items()))
           + "; each named above with its log)")
    raise PosrnnError(f"{len(failed)} of {len(outcomes)} runs {how}; fix the cause and run the same command again "
                      f"(finished runs are kept)")


def _run_waves(jobs: list[Job], experiments: list[str], executor: str, pool: Optional["Pool"], runs_root: Path,
               out: TextIO, sweep: Optional[SlurmSweep] = None) -> list[JobOutcome]:
    """Write the manifests, then run the experiments wave by wave. If nothing could start (a
    refused submission), the manifests and directories this call wrote are put back as they were."""
    before = {name: (runs_root / name).exists() for name in experiments}
    old = {name: ((runs_root / name / "sweep.json").read_bytes() if (runs_root / name / "sweep.json").is_file()
                  else None)
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
            if any(o.status in ("failed", "cancelled") and o.job.experiment in sources(wave) for o in outcomes):
                break  # what this wave reads failed: its errors are reported, do not pile more on
            if executor == "local":
                outcomes += _local(wave_jobs, pool, runs_root, out)
            else:
                from .slurm import SlurmSweep, run_wave

                outcomes += run_wave(wave_jobs, executor, runs_root, out, sweep or SlurmSweep())
    except PosrnnError:
        if not outcomes and not (sweep is not None and sweep.arrays):  # nothing started: put the manifests back
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
    ensemble: int = 1  # most same-shape runs trained as one ensemble (packing)
    memory: tuple = (None, "")  # (bytes, where) the runs train in (storage.sweep_memory), for packing


def local_pool(prof: dict, opts: SweepOptions, ensemble: int = 1) -> Pool:
    """The local pool's size: one process per core on a CPU, k per GPU on GPUs."""
    from .local import gpu_count

    device = str(prof.get("device", "auto"))
    ex = prof.get("executor") or {}
    workers = opts.workers if opts.workers is not None else ex.get("workers")
    if workers in (None, "auto"):
        workers = usable_cores()
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise PosrnnError(f"--workers must be a positive number, got {workers!r}")
    per_gpu = opts.runs_per_gpu if opts.runs_per_gpu is not None else ex.get("runs_per_gpu", 1)
    if not isinstance(per_gpu, int) or isinstance(per_gpu, bool) or per_gpu < 1:
        raise PosrnnError(f"--runs-per-gpu must be a positive number, got {per_gpu!r}")
    gpus = gpu_count() if (device.startswith("cuda") or device == "auto") else 0  # torch: after the checks above
    if device.startswith("cuda") and gpus == 0:
        raise PosrnnError(f"this profile runs on a GPU (device: {device}) and none is visible here; use a CPU profile "
                          f"(posrnn profile use lite) or --executor slurm")
    if ensemble > 1:
        from .storage import sweep_memory

        return Pool(workers, gpus, per_gpu, max(1, usable_cores() // workers), ensemble, sweep_memory(prof))
    return Pool(workers, gpus, per_gpu, max(1, usable_cores() // workers), ensemble)


def _local(jobs: list[Job], pool: Pool, runs_root: Path, out: TextIO) -> list[JobOutcome]:
    from .local import run_local
    from .packing import pack_jobs, unpack_outcomes
    from .progress import Progress

    if not pool.gpus:
        for j in jobs:  # one single-threaded run per core unless the profile says otherwise
            if j.config and j.config["train"]["threads"] is None:
                j.config["train"]["threads"] = pool.threads
    if pool.ensemble > 1:
        from .storage import member_fit

        jobs = pack_jobs(jobs, pool.ensemble, member_fit(*pool.memory))
    slots = pool.gpus * pool.runs_per_gpu if pool.gpus else pool.workers
    where = f"{pool.gpus} GPU(s) × {pool.runs_per_gpu} runs" if pool.gpus else f"CPU × {slots}"
    progress = Progress(order(jobs), slots, where, out)
    with progress:
        return unpack_outcomes(run_local(order(jobs), pool.workers, runs_root / ".logs", gpus=pool.gpus,
                                         runs_per_gpu=pool.runs_per_gpu, on_event=progress.event, poll=progress.poll))
