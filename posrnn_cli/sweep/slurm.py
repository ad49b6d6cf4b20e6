"""The SLURM executor: one submitit job array, one task per run.

GPUs, CPUs, memory, time and partition per task come from the profile's ``slurm:`` section or
from ``posrnn sweep`` options. Each task is ``submitit.helpers.Checkpointable``: on time-out or
preemption (SIGUSR2) submitit requeues it with the same job, and the job, being idempotent,
resumes its run from the last checkpoint. A plain ``scontrol requeue`` (SIGTERM) makes the
training loop save a checkpoint at the current step before the task ends, so the requeued
task loses nothing either. ``submitit-local`` runs the same array through submitit's local
executor (the code path SLURM uses, on this machine).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Optional

from ..common.errors import PosrnnError
from .local import JobOutcome
from .plan import Job

#: profile ``slurm:`` keys → submitit parameters
SLURM_KEYS = {"partition": "slurm_partition", "gpus_per_task": "gpus_per_node", "cpus_per_task": "cpus_per_task",
              "mem_gb": "mem_gb", "timeout_min": "timeout_min", "array_parallelism": "slurm_array_parallelism",
              "constraint": "slurm_constraint", "account": "slurm_account", "qos": "slurm_qos"}
LOCAL_KEYS = {"gpus_per_task": "gpus_per_node", "cpus_per_task": "cpus_per_task", "timeout_min": "timeout_min"}


try:  # optional: pip install 'posrnn[slurm]'
    import submitit
except ImportError:  # pragma: no cover - exercised where submitit is absent
    submitit = None


def _submitit():
    if submitit is None:
        raise PosrnnError("--executor slurm needs submitit, which is not installed; pip install 'posrnn[slurm]' "
                          "(or pip install submitit)")
    return submitit


class SweepTask(submitit.helpers.Checkpointable if submitit is not None else object):
    """What each array task runs. Checkpointable: on time-out or preemption submitit requeues
    the same job, which resumes its run (jobs are idempotent)."""

    def __call__(self, job_dict: dict) -> dict:
        import os

        from posrnn_cli.sweep.jobs import execute, job_from_dict

        os.environ.setdefault("OMP_NUM_THREADS", "1")
        return execute(job_from_dict(job_dict))


def check_available(cluster: str) -> None:
    """One-line errors before anything is written: no submitit, or no sbatch for SLURM."""
    _submitit()
    if cluster == "slurm":
        import shutil

        missing = [b for b in ("sbatch", "srun") if shutil.which(b) is None]
        if missing:
            raise PosrnnError(f"--executor slurm: no `{'` or `'.join(missing)}` on PATH (not on a SLURM cluster?); "
                              f"use --executor local here")


def run_slurm(jobs: list[Job], folder: Path, settings: dict, cluster: str = "slurm", wait: bool = True,
              on_submit: Optional[Callable[[list], None]] = None,
              on_poll: Optional[Callable[[list, list], None]] = None, poll_s: float = 5.0) -> list[JobOutcome]:
    """Submit ``jobs`` as one array; wait for the tasks (unless ``wait`` is False) and return
    their outcomes. ``on_poll(jobs, states)`` sees every task's state at each poll."""
    check_available(cluster)
    keys = SLURM_KEYS if cluster == "slurm" else LOCAL_KEYS
    unknown = set(settings) - set(SLURM_KEYS)
    if unknown:
        raise PosrnnError(f"unknown slurm setting(s) {', '.join(sorted(unknown))}; use {', '.join(SLURM_KEYS)}")
    params = {keys[k]: v for k, v in settings.items() if k in keys and v is not None}
    params.setdefault("timeout_min", 60)
    ex = submitit.AutoExecutor(folder=str(folder), cluster=cluster)
    try:
        ex.update_parameters(name="posrnn", **params)
    except (ValueError, TypeError) as e:
        raise PosrnnError(f"submitit refused the slurm settings ({e}); fix the profile's slurm: section or the options") from None
    task = SweepTask()
    folder = Path(folder)
    made = not folder.exists()
    present = set(folder.rglob("*")) if folder.is_dir() else set()
    try:
        handles = ex.map_array(task, [j.to_dict() for j in jobs])
    except Exception as e:  # noqa: BLE001 - sbatch errors arrive as several exception types
        # a refused submission leaves nothing behind: the pickles and folders submitit wrote for it go
        for path in sorted(set(folder.rglob("*")) - present if folder.is_dir() else (), key=lambda p: -len(p.parts)):
            if path.is_dir() and not path.is_symlink():
                if not any(path.iterdir()):
                    path.rmdir()
            else:
                path.unlink(missing_ok=True)
        if made and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise PosrnnError(f"submitting to SLURM failed ({first}); check the partition and limits") from None
    if on_submit:
        on_submit(handles)
    if not wait:
        return []
    t0 = time.perf_counter()
    while not all(h.done() for h in handles):
        if on_poll:
            on_poll(jobs, [h.state for h in handles])
        time.sleep(poll_s)
    if on_poll:
        on_poll(jobs, [h.state for h in handles])
    outcomes = []
    for job, h in zip(jobs, handles):
        secs = time.perf_counter() - t0
        log = str(h.paths.stderr)
        try:
            exc = h.exception()
        except Exception as e:  # noqa: BLE001 - e.g. UncompletedJobError: the task never finished
            exc = e
        if exc is None:
            outcomes.append(JobOutcome(job, "done", secs, result=h.result(), log=log))
        else:
            msg = str(exc).strip()
            # a failed task carries its traceback: keep the posrnn error line, else the last line
            lines = [ln for ln in msg.splitlines() if ln.strip()]
            err = next((ln.split("PosrnnError: ", 1)[1] for ln in reversed(lines) if "PosrnnError: " in ln),
                       lines[-1] if lines else type(exc).__name__)
            outcomes.append(JobOutcome(job, "failed", secs, error=err[:300], log=log))
    return outcomes
