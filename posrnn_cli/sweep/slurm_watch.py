"""Waiting on SLURM tasks: their states as ``squeue``/``sacct`` report them, each task's outcome
from the result file submitit writes, the one-line cause of a failure, and the loop that waits
on an array until each task is done, failed, cancelled or lost."""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from ..common.errors import PosrnnError
from .plan import Job, JobOutcome

#: SLURM job states in which a task is still queued or running (squeue/sacct spell them so)
IN_FLIGHT = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD",
             "RESIZING", "SUSPENDED", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"}
LOST_AFTER_S = 300.0  # a task neither in squeue/sacct nor with a result for this long is lost


# ---- asking SLURM -------------------------------------------------------------------------------
def _run(cmd: list[str]) -> Optional[subprocess.CompletedProcess]:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None


def slurm_states(job_ids: list[str]) -> Optional[dict[str, str]]:
    """Each array task's state as SLURM reports it (``squeue``, then ``sacct`` for those squeue
    no longer lists); a task neither knows is absent. None when squeue could not answer."""
    if not job_ids:
        return {}
    arrays = ",".join(sorted({j.split("_")[0] for j in job_ids}))
    p = _run(["squeue", "-h", "-r", "-t", "all", "-j", arrays, "-o", "%i|%T"])
    if p is None or (p.returncode != 0 and "invalid job id" not in p.stderr.lower()):
        return None
    states: dict[str, str] = {}
    for line in (p.stdout if p.returncode == 0 else "").splitlines():
        jid, _, st = line.strip().partition("|")
        if st:
            states[jid] = st.split()[0].upper()
    if any(j not in states for j in job_ids):
        q = _run(["sacct", "-n", "-P", "-X", "-j", arrays, "-o", "JobID,State"])
        if q is not None and q.returncode == 0:
            for line in q.stdout.splitlines():
                jid, _, st = line.strip().partition("|")
                if st and jid not in states:
                    states[jid] = st.split()[0].upper()
    return {j: states[j] for j in job_ids if j in states}


# ---- waiting on tasks ---------------------------------------------------------------------------
@dataclass
class Task:
    job: Job
    job_id: str
    result: Path  # submitit's result pickle
    log: Path
    handle: Any = None  # the submitit job (submitit-local asks it for its state)
    state: str = "SUBMITTED"
    missing_since: Optional[float] = None
    reattached: bool = False

    @property
    def array(self) -> str:
        return self.job_id.split("_")[0]


_POSRNN_LINE = re.compile(r"^(?:posrnn_cli(?:\.\w+)*\.)(\w+): (.*)$")


def cause(trace: str) -> str:
    """The one-line cause of a failed task from its traceback: the message of the last posrnn
    error raised (PosrnnError or any subclass, e.g. TrainingStopped), else its last line."""
    lines = [ln.strip() for ln in str(trace).splitlines() if ln.strip()]
    for ln in reversed(lines):
        m = _POSRNN_LINE.match(ln)
        if m:
            return m.group(2)[:300]
    return (lines[-1] if lines else "no error message")[:300]


def _outcome(task: Task, t0: float) -> Optional[JobOutcome]:
    """The task's outcome from its result file, or None while it has none."""
    if not task.result.is_file():
        return None
    if task.result.is_symlink() or task.result.stat().st_nlink > 1:  # not the file submitit wrote: never unpickled
        return JobOutcome(task.job, "failed", time.perf_counter() - t0,
                          error=f"{task.result} is a link, not the result "
                          f"submitit wrote, so it was not read; remove it and run the same command again",
                          log=str(task.log))
    from submitit.core.utils import pickle_load

    try:
        kind, value = pickle_load(task.result)
    except (EOFError, OSError, ValueError, TypeError):  # being written: read it at the next poll
        return None
    secs = time.perf_counter() - t0
    if kind == "success":
        return JobOutcome(task.job, "done", secs, result=value if isinstance(value, dict) else {}, log=str(task.log))
    return JobOutcome(task.job, "failed", secs, error=cause(value), log=str(task.log))


class Timeout(PosrnnError):
    exit_code = 124


def _settle(t: Task, unanswered: bool, st: Optional[str], now: float, t0: float, lost_after_s: float,
            on_event: Callable[[str, Task, Any], None]) -> Optional[JobOutcome]:
    """How task ``t`` ended, or None while it runs (a state change is reported as it is seen).
    ``unanswered``: SLURM did not answer this time, so only a result file tells; ``st``: the state
    SLURM lists it in (None: not listed)."""
    if unanswered:
        return _outcome(t, t0)
    if st in IN_FLIGHT:
        t.missing_since = None
        if st != t.state:
            on_event("state", t, st)
            t.state = st
        return None
    out = _outcome(t, t0)
    if out is None and st is not None:  # SLURM says it ended, and it left no result
        if st.startswith("CANCELLED"):
            return JobOutcome(t.job, "cancelled", time.perf_counter() - t0, error="cancelled (scancel)",
                              log=str(t.log))
        if st != "COMPLETED":
            return JobOutcome(t.job, "failed", time.perf_counter() - t0, error=f"SLURM ended the task {st}",
                              log=str(t.log))
    if out is None:  # neither SLURM nor a result knows it (yet): lost after a grace period
        if t.missing_since is None:
            t.missing_since = now
        if now - t.missing_since >= lost_after_s:
            return JobOutcome(t.job, "lost", time.perf_counter() - t0,
                              error=f"lost: SLURM has not listed the task for {now - t.missing_since:.0f} s and it "
                                    f"left no result", log=str(t.log))
    return out


def watch(tasks: list[Task], query: Callable[[list[str]], Optional[dict]], on_event: Callable[[str, Task, Any], None],
          poll_s: float = 10.0, deadline: Optional[float] = None, lost_after_s: float = LOST_AFTER_S,
          sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> list[JobOutcome]:
    """Wait on ``tasks`` until each is done, failed, cancelled or lost; ``on_event("state", task,
    new_state)`` as a task's state changes and ``on_event("end", task, outcome)`` as it ends.
    ``deadline`` (a ``clock`` time) raises ``Timeout`` naming what is still in flight."""
    t0 = time.perf_counter()
    left = list(tasks)
    done: dict[int, JobOutcome] = {}
    while left:
        states = query([t.job_id for t in left])
        now = clock()
        for t in list(left):
            st = None if states is None else states.get(t.job_id)
            out = _settle(t, states is None, st, now, t0, lost_after_s, on_event)
            if out is not None:
                if st is not None and st != t.state:
                    t.state = st
                on_event("end", t, out)
                done[id(t)] = out
                left.remove(t)
        if not left:
            break
        if deadline is not None and clock() >= deadline:
            arrays = sorted({t.array for t in left})
            raise Timeout(f"--timeout reached with {len(left)} task(s) still in flight (job array "
                          f"{', '.join(arrays)}); they keep running: cancel them with `scancel {' '.join(arrays)}`, "
                          f"or run the same command again to reattach")
        sleep(poll_s)
    return [done[id(t)] for t in tasks]


def local_states(tasks: list[Task]) -> Callable[[list[str]], dict]:
    """submitit-local: a task is RUNNING until its process has ended."""
    by_id = {t.job_id: t for t in tasks}

    def query(ids: list[str]) -> dict:
        out = {}
        for i in ids:
            h = by_id[i].handle
            try:
                out[i] = "COMPLETED" if h.done() else "RUNNING"
            except Exception:
                out[i] = "COMPLETED"
        return out

    return query
