"""The local executor: a pool of worker processes sized to the machine.

On a CPU, one single-threaded run per core; on GPUs, ``runs_per_gpu`` runs per GPU, each
process pinned to its GPU with ``CUDA_VISIBLE_DEVICES`` (the ids of an existing mask, so
``CUDA_VISIBLE_DEVICES=2,3`` pins to GPUs 2 and 3). Every job runs under its thread limit
(``jobs.limit_threads``). Ctrl-C sends the workers SIGTERM, so each saves a checkpoint at its
current step, and SIGKILL after ``GRACE_S`` seconds; a second Ctrl-C kills them at once. Every job runs in a fresh
process forked from a ``forkserver`` that has torch and posrnn already imported (so a job starts in
milliseconds); a GPU job starts in a spawned interpreter instead, since CUDA does not survive a
fork. Each job's output is in ``runs/<profile>/.logs/<experiment>/<run>.log``. A job that
fails, or whose process dies, is reported and the others go on. If the sweep itself dies
(``kill -9`` included), each worker sees its pipe from the sweep close and exits at once, so a
new sweep never races an old worker.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import sys
import time
import traceback
from collections import deque
from multiprocessing.connection import wait
from pathlib import Path
from typing import Callable, Optional

from ..common.host.lifeline import die_with_starter
from .plan import Job, JobOutcome

PRELOAD = ["posrnn_cli.sweep.warm"]


def gpu_count() -> int:
    """Visible CUDA devices (0 without torch's CUDA build or a GPU)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def visible_gpus(n: int) -> list[str]:
    """The ids to pin ``n`` GPU slots to: the entries of an existing ``CUDA_VISIBLE_DEVICES`` mask
    (``2,3`` → 2 and 3; UUIDs too), else 0 … n−1."""
    mask = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [x.strip() for x in mask.split(",") if x.strip()] if mask is not None else []
    return ids[:n] if len(ids) >= n else [str(i) for i in range(n)]


def slot_env(slot: int, gpus: int, runs_per_gpu: int, threads: Optional[int] = None) -> dict:
    """A worker's environment: its GPU (by the mask's ids) or one OpenMP thread per CPU slot."""
    if gpus:
        env = {"CUDA_VISIBLE_DEVICES": visible_gpus(gpus)[slot // runs_per_gpu]}
    else:
        env = {"OMP_NUM_THREADS": "1"}
    if threads is not None:
        env.update({"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)})
    return env


#: Ctrl-C: how long the workers have to save a checkpoint after SIGTERM before SIGKILL
GRACE_S = 30.0


def stop_workers(procs: list, grace: float, gently: bool, say: Callable[[str], None] = lambda s: None) -> None:
    """Stop the workers. ``gently`` (Ctrl-C): SIGTERM, so each saves a checkpoint at its current
    step, then SIGKILL for any still running after ``grace`` seconds; a second Ctrl-C meanwhile
    kills them at once. Otherwise (the sweep itself failed): SIGKILL now."""
    alive = [p for p in procs if p.is_alive()]
    if gently and alive:
        say(f"stopping {len(alive)} worker(s): each saves a checkpoint at its current step "
            f"(up to {grace:.0f} s; Ctrl-C again to kill them now)")
        for p in alive:
            with contextlib.suppress(OSError):
                p.terminate()
        try:
            deadline = time.monotonic() + grace
            for p in alive:
                p.join(max(0.0, deadline - time.monotonic()))
        except KeyboardInterrupt:
            say("killing the workers now")
    for p in procs:
        if p.is_alive():
            p.kill()
    for p in procs:
        p.join()


def _work(job_dict: dict, env: dict, log_path: str, conn, alive) -> None:
    """A worker process: pin, redirect output to the log, run the job, report."""
    die_with_starter(alive)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the sweep's to handle
    os.environ.update(env)
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    from ..common.errors import PosrnnError

    try:
        from .jobs import execute, job_from_dict

        job = job_from_dict(job_dict)
        gpu = f", CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}" if "CUDA_VISIBLE_DEVICES" in env else ""
        print(f"== {job.label} ({job.kind}) in {job.run_dir}, pid {os.getpid()}{gpu}, "
              f"{time.strftime('%Y-%m-%d %H:%M:%S')}",
              flush=True)
        result = execute(job)
        print(f"== done: {result}", flush=True)
        conn.send(("done", result))
    except PosrnnError as e:
        print(f"error: {e}", flush=True)
        conn.send(("failed", str(e)))
    except BaseException as e:
        traceback.print_exc()
        sys.stderr.flush()
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        conn.send(("failed", f"{type(e).__name__}: {first}"[:300]))
    finally:
        conn.close()


def log_path(job: Job, logs: Path) -> Path:
    return Path(logs) / job.experiment / f"{job.name}.log"


def _collect(p, conn, alive_w, job: Job, slot: int, t0: float, logs: Path) -> JobOutcome:
    """A finished worker's outcome: its result or error as it sent it, or, when it sent nothing,
    that it died and with which exit code."""
    alive_w.close()
    msg = None
    try:
        if conn.poll():
            msg = conn.recv()
    except (EOFError, OSError):
        msg = None
    p.join()
    conn.close()
    secs, log = time.perf_counter() - t0, str(log_path(job, logs))
    if msg is not None and msg[0] == "done":
        return JobOutcome(job, "done", secs, result=msg[1], log=log, slot=slot)
    if msg is not None:
        return JobOutcome(job, "failed", secs, error=msg[1], log=log, slot=slot)
    return JobOutcome(job, "failed", secs, error=f"the worker process died (exit code {p.exitcode})", log=log,
                      slot=slot)


def run_local(jobs: list[Job], workers: int, logs: Path, gpus: int = 0, runs_per_gpu: int = 1,
              on_event: Optional[Callable[[str, Job, Optional[JobOutcome]], None]] = None,
              poll: Optional[Callable[[dict], None]] = None, grace: float = GRACE_S) -> list[JobOutcome]:
    """Run ``jobs`` on ``workers`` processes (``gpus`` × ``runs_per_gpu`` slots when GPUs are
    used, pinned to the GPUs an existing ``CUDA_VISIBLE_DEVICES`` names); ``on_event(kind, job,
    outcome)`` is called at "start" and "end", ``poll(running)`` about twice a second with
    ``{job label: (job, start time)}``. Ctrl-C stops the workers with ``stop_workers``."""
    from .jobs import job_threads

    if gpus:  # CUDA cannot live through a fork: each GPU job starts a fresh interpreter (PyTorch's advice)
        ctx = mp.get_context("spawn")
    else:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
    n_slots = gpus * runs_per_gpu if gpus else workers
    free = deque(range(n_slots))
    pending = deque(jobs)
    running: dict = {}  # sentinel → (process, conn, job, slot, t0)
    outcomes: list[JobOutcome] = []
    try:
        while pending or running:
            while pending and free:
                job, slot = pending.popleft(), free.popleft()
                env = slot_env(slot, gpus, runs_per_gpu, job_threads(job))
                here, there = ctx.Pipe(duplex=False)  # the worker's result → here
                alive_r, alive_w = ctx.Pipe(duplex=False)  # closes when this process dies
                p = ctx.Process(target=_work, args=(job.to_dict(), env, str(log_path(job, logs)), there, alive_r),
                                daemon=False)
                p.start()
                there.close()
                alive_r.close()
                running[p.sentinel] = (p, here, job, slot, time.perf_counter(), alive_w)
                if on_event:
                    on_event("start", job, None)
            ready = wait(list(running), timeout=0.5)
            for s in ready:
                p, conn, job, slot, t0, alive_w = running.pop(s)
                out = _collect(p, conn, alive_w, job, slot, t0, logs)
                free.append(slot)
                outcomes.append(out)
                if on_event:
                    on_event("end", job, out)
            if poll:
                poll({v[2].label: (v[2], v[4]) for v in running.values()})
    except BaseException as e:
        stop_workers([v[0] for v in running.values()], grace, gently=isinstance(e, KeyboardInterrupt),
                     say=lambda s: print(f"sweep: {s}", file=sys.stderr, flush=True))
        raise
    return outcomes
