"""The SLURM executor: submitit job arrays, one task per run (or per pack of runs trained as one
ensemble, ``packing``), and a sweep that reattaches.

GPUs, CPUs, memory, time, partition, ``gres``, setup lines and extra sbatch parameters per
task come from the profile's ``slurm:`` section or from ``posrnn sweep`` options; they are
checked (types and ranges, one line each) before anything is submitted. Each task is
``submitit.helpers.Checkpointable``: on time-out or preemption (SIGUSR2) submitit requeues it
with the same job, and the job, being idempotent, resumes its run from the last checkpoint.

Every array a sweep submits is recorded in the runs directory (``.slurm-arrays.json``: array
id, host, pid, and each task's job id and run directory). A sweep started again (after a
kill, a lost connection, a Ctrl-C) asks SLURM (``squeue``, then ``sacct``) which recorded tasks
are still pending or running and waits on those instead of submitting them again; it submits
only runs that are neither finished nor in flight, and evaluates finished runs in its own
process. While it waits it prints each task's state as it changes and each failure as it
happens, with its one-line cause and its log. A task that SLURM no longer knows and that left
no result is reported lost after a grace period. ``submitit-local`` runs the same arrays
through submitit's local executor (the code path SLURM uses, on this machine). The record
lives in ``slurm_record``, the waiting on tasks in ``slurm_watch``.

With ``--ensemble K`` a wave's runs to submit are packed as on the local executor (``packing.pack``,
no pack larger than a task's memory holds: ``storage.task_memory``); a pack is one array task that
runs ``jobs.run_pack``, so each member writes its own run directory as its solo run would, and the
record lists the task under each member's run directory. A pack that fails, is cancelled or is lost
is reported for each member; the next sweep packs those runs again and resumes them from the
checkpoints every member holds, as the local executor's next sweep does.

Requeue and preemption lose nothing. A task holds SIGTERM and SIGUSR2 for its whole life
(``common.host.signals.task_signals``): training stops after the step in progress with a
checkpoint at that step, a stability analysis after the checkpoint in progress with its values
so far, and an evaluation finishes and is written. The task then leaves without a result, so
that SLURM decides what follows: on SIGUSR2 (submitit's signal before a time-out, or a
preemption) it requeues itself through submitit (``Checkpointable``: the same job again, which
resumes from the checkpoint written at the signal); on SIGTERM alone (``scontrol requeue``,
``scancel``, a time-out) SLURM requeues, cancels or ends it. A cancelled task is reported as
cancelled, not failed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, TextIO

from ..common.errors import PosrnnError
from ..common.stages.experiments import trains
from .packing import PACK_KIND, as_pack, members_of, pack_jobs, unpack_outcomes
from .plan import Job, JobOutcome, order, status
from .slurm_record import SUBMITIT_DIR, add_to_record, recorded_tasks
from .slurm_settings import check_settings
from .slurm_watch import IN_FLIGHT, LOST_AFTER_S, Task, Timeout, local_states, slurm_states, watch


try:  # optional: pip install 'posrnn[slurm]'
    import submitit
except ImportError:  # pragma: no cover - exercised where submitit is absent
    submitit = None


def _submitit():
    if submitit is None:
        raise PosrnnError("--executor slurm needs submitit, which is not installed; pip install 'posrnn[slurm]' "
                          "(or pip install submitit)")
    return submitit


#: after SIGTERM, how long a stopped task waits for a SIGUSR2 before it leaves: a preemption may
#: send both, in either order, and only SIGUSR2 asks the task to requeue itself
USR2_GRACE_S = 5.0


class SweepTask(submitit.helpers.Checkpointable if submitit is not None else object):
    """What each array task runs. Checkpointable: on time-out or preemption submitit requeues
    the same job, which resumes its run (jobs are idempotent); see the module's doc."""

    def __call__(self, job_dict: dict) -> dict:
        from posrnn_cli.common.host.signals import Stopped, task_signals
        from posrnn_cli.sweep.jobs import execute, job_from_dict

        os.environ.setdefault("OMP_NUM_THREADS", "1")
        submitit_usr2 = signal.getsignal(signal.SIGUSR2)  # submitit's checkpoint-and-requeue handler
        with task_signals() as stop:
            try:
                return execute(job_from_dict(job_dict))
            except Stopped as e:  # training's Interrupted too: the work so far is saved
                print(f"posrnn: {e}", file=sys.stderr, flush=True)
            leave(stop, submitit_usr2)


def leave(stop, submitit_usr2, grace_s: Optional[float] = None) -> None:
    """A task stopped on a signal with its work saved: leave without a result (``SystemExit``
    passes submitit's error handler), so that SLURM's requeue, cancel or time-out decides. On
    SIGUSR2 (possibly arriving up to ``grace_s`` after a SIGTERM) submitit's handler checkpoints
    the job and requeues it, with a ``scontrol requeue`` that a SIGTERM cannot kill."""
    from posrnn_cli.common.host.signals import PREEMPT

    deadline = time.monotonic() + (USR2_GRACE_S if grace_s is None else grace_s)
    while stop.signal != PREEMPT and time.monotonic() < deadline:
        time.sleep(0.05)
    if stop.signal == PREEMPT and callable(submitit_usr2):
        env = getattr(getattr(submitit_usr2, "__self__", None), "env", None)
        if env is not None and env.cluster == "slurm":
            env._requeue = lambda countdown: requeue(env.job_id)
        print(f"posrnn: {PREEMPT}: requeueing the task", file=sys.stderr, flush=True)
        submitit_usr2(signal.SIGUSR2, None)  # checkpoint(), requeue, sys.exit; an error result if it may not requeue
    raise SystemExit(STOPPED_EXIT)


#: a task's exit status when it leaves on a signal without a result (submitit's own is -1: 255)
STOPPED_EXIT = 255


def requeue(job_id: str, attempts: int = 3) -> None:
    """``scontrol requeue job_id``, immune to the SIGTERM (or a second SIGUSR2) that SLURM sends
    to every process of the step meanwhile (it killed submitit's own call once in CI): the child
    starts with both ignored (an ignored signal stays ignored across exec; set in this process
    for the instant of the fork, so no Python code runs in the child); retried."""
    err = ""
    for attempt in range(attempts):
        try:
            proc = _spawn_ignoring((signal.SIGTERM, signal.SIGUSR2), ["scontrol", "requeue", job_id])
            out = proc.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired as e:
            proc.kill()
            proc.communicate()
            err = str(e)
        except OSError as e:
            err = str(e)
        else:
            if proc.returncode == 0:
                return
            err = (out.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        if attempt + 1 < attempts:
            time.sleep(1.0 + attempt)
    raise PosrnnError(f"scontrol requeue {job_id} failed {attempts} times ({err}); the run's checkpoint is kept: "
                      f"run the sweep again to resume it")


def _spawn_ignoring(signals: tuple, argv: list):
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in signals:
            if signal.getsignal(sig) is not None:  # None: a handler Python cannot put back
                previous[sig] = signal.signal(sig, signal.SIG_IGN)
    try:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def check_available(cluster: str) -> None:
    """One-line errors before anything is written: no submitit, or no sbatch for SLURM."""
    _submitit()
    if cluster == "slurm":
        missing = [b for b in ("sbatch", "srun") if shutil.which(b) is None]
        if missing:
            raise PosrnnError(f"--executor slurm: no `{'` or `'.join(missing)}` on PATH (not on a SLURM cluster?); "
                              f"use --executor local here")


def _executor(folder: Path, cluster: str, params: dict):
    ex = _submitit().AutoExecutor(folder=str(folder), cluster=cluster)
    try:
        ex.update_parameters(name="posrnn", **params)
    except (ValueError, TypeError, AssertionError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise PosrnnError(f"submitit refused the slurm settings ({first}); fix the profile's slurm: section or the "
                          "options") from None
    return ex


def test_only(settings: dict, n_tasks: int) -> str:
    """``sbatch --test-only`` on the array the sweep would submit: what SLURM says (when and
    where it would start, or why it refuses). Writes nothing outside a temporary folder."""
    check_available("slurm")
    params = check_settings(settings, "slurm")
    with tempfile.TemporaryDirectory(prefix="posrnn-test-only-") as d:
        ex = _executor(Path(d), "slurm", params)
        inner = ex._executor  # the SlurmExecutor: the same sbatch script map_array would submit
        inner.parameters["map_count"] = max(1, n_tasks)
        script = Path(d) / "test_only.sh"
        script.write_text(inner._make_submission_file_text("true", "test-only"))
        try:
            p = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise PosrnnError(f"sbatch --test-only could not run ({e})") from None
    said = " ".join(ln.strip() for ln in (p.stdout + p.stderr).splitlines() if ln.strip()) or f"exit {p.returncode}"
    if p.returncode != 0:
        raise PosrnnError(f"sbatch --test-only refused the array: {said}")
    return said


def task_for(job: Job, job_id: str, folder: Path, handle: Any = None, reattached: bool = False) -> Task:
    if handle is None:
        handle = _submitit().SlurmJob(folder=str(folder), job_id=job_id, tasks=[0])
    return Task(job, job_id, Path(handle.paths.result_pickle), Path(handle.paths.stderr), handle, reattached=reattached)


# ---- submitting ---------------------------------------------------------------------------------
@dataclass
class Submission:
    tasks: list[Task] = field(default_factory=list)
    array: Optional[str] = None


def submit(jobs: list[Job], folder: Path, params: dict, cluster: str = "slurm") -> Submission:
    """Submit ``jobs`` as one array (nothing is left behind if sbatch refuses it)."""
    check_available(cluster)
    ex = _executor(folder, cluster, params)
    task = SweepTask()
    folder = Path(folder)
    made = not folder.exists()
    present = set(folder.rglob("*")) if folder.is_dir() else set()
    try:
        handles = ex.map_array(task, [j.to_dict() for j in jobs])
    except Exception as e:
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
    tasks = [task_for(j, str(h.job_id), folder, handle=h) for j, h in zip(jobs, handles)]
    return Submission(tasks, tasks[0].array if tasks else None)


# ---- a sweep on SLURM: reattach, evaluate here, submit, wait ---------------------------------------
@dataclass
class SlurmSweep:
    """What a SLURM sweep knows while it runs: its deadline, the arrays it waits on, runs
    seen failing while it watched another sweep's tasks, and how it waits."""

    deadline: Optional[float] = None
    params: dict = field(default_factory=dict)
    arrays: set = field(default_factory=set)
    seen: dict = field(default_factory=dict)  # realpath(run_dir) → JobOutcome
    what: str = ""
    wait: bool = True  # wait on the tasks, else return once they are submitted
    lost_after_s: Optional[float] = None  # None: LOST_AFTER_S on SLURM, 30 s on submitit-local
    ensemble: int = 1  # most same-shape runs per pack, one array task each (packing)
    fit: Any = None  # packing.Fit of a task's memory (storage.task_memory), or None


def mark_in_flight(outcomes: list[JobOutcome], runs_root: Path) -> None:
    """Dry run of a SLURM sweep: runs whose recorded task SLURM still lists as pending or
    running would be waited on, not submitted."""
    recorded = recorded_tasks(runs_root)
    mine = {os.path.realpath(o.job.run_dir): o for o in outcomes if os.path.realpath(o.job.run_dir) in recorded}
    if not mine:
        return
    states = slurm_states([recorded[rd][0] for rd in mine]) or {}
    for rd, o in mine.items():
        if states.get(recorded[rd][0]) in IN_FLIGHT:
            o.status, o.log = "in flight", recorded[rd][0]


def _in_flight(jobs: list[Job], runs_root: Path, sweep: SlurmSweep,
               cluster: str = "slurm") -> tuple[dict, Optional[dict], list[Task]]:
    """The jobs by run directory, SLURM's states of their recorded tasks (None: squeue did not
    answer), and those tasks SLURM lists as pending or running, reattached (runs seen failing
    while this sweep watched are left out)."""
    recorded = recorded_tasks(runs_root) if cluster == "slurm" else {}
    mine = {os.path.realpath(j.run_dir): j for j in jobs}
    ids = {rd: recorded[rd] for rd in mine if rd in recorded and rd not in sweep.seen}
    states = slurm_states(list(dict.fromkeys(jid for jid, _ in ids.values()))) if ids else {}
    by_task: dict[tuple, list[Job]] = {}  # a pack's task: one task, its members as one pack job
    for rd, key in ids.items():
        if states and states.get(key[0]) in IN_FLIGHT:
            by_task.setdefault(key, []).append(mine[rd])
    tasks = [task_for(as_pack(members), jid, Path(folder), reattached=True)
             for (jid, folder), members in by_task.items()]
    return mine, states, tasks


def observe(jobs: list[Job], runs_root: Path, out: TextIO, sweep: SlurmSweep) -> None:
    """Another SLURM sweep holds ``runs_root``: wait on its in-flight tasks of these jobs (their
    states and failures are printed as they come), or a poll when it has none in flight."""
    _, _, tasks = _in_flight(jobs, runs_root, sweep)
    if not tasks:
        if sweep.deadline is not None and time.monotonic() >= sweep.deadline:
            raise Timeout(f"--timeout reached while another SLURM sweep held {runs_root}; run the same command again "
                          f"to reattach")
        time.sleep(2.0)
        return
    sweep.arrays.update(t.array for t in tasks)
    for o in unpack_outcomes(_watch_tasks(tasks, "slurm", out, sweep)):
        if o.status != "done":
            sweep.seen[os.path.realpath(o.job.run_dir)] = o


def run_wave(jobs: list[Job], executor: str, runs_root: Path, out: TextIO, sweep: SlurmSweep) -> list[JobOutcome]:
    """One wave on SLURM (or submitit-local): reattach to the recorded tasks still in flight,
    evaluate finished runs here, submit the rest as one array, and wait on them all."""
    from ..engine.lock import relabel

    cluster = "slurm" if executor == "slurm" else "local"
    folder = runs_root / SUBMITIT_DIR
    jobs = order(jobs)
    mine, states, attach = _in_flight(jobs, runs_root, sweep, cluster)
    if states is None:
        raise PosrnnError("squeue did not answer, so this sweep cannot tell which of its recorded tasks still run "
                          "(it would submit them twice); run the same command again when SLURM answers")
    busy = {os.path.realpath(m.run_dir) for t in attach for m in members_of(t.job)}
    outcomes = [sweep.seen[rd] for rd in mine if rd in sweep.seen]  # failed while this sweep watched: not again
    free = [j for j in jobs if os.path.realpath(j.run_dir) not in busy
            and os.path.realpath(j.run_dir) not in sweep.seen]
    finished = [j for j in free if trains(j.kind) and status(j) == "done"]
    done_ids = {id(j) for j in finished}
    to_submit = [j for j in free if id(j) not in done_ids]
    if attach:
        arrays = sorted({t.array for t in attach}, key=int)
        print(f"reattached to {len(attach)} task(s) still in flight in job array {', '.join(arrays)} (not submitted "
              f"again)", file=out, flush=True)
    tasks = list(attach)
    if to_submit:
        tasks += _submit_wave(to_submit, folder, cluster, executor, runs_root, out, sweep)
    if cluster == "slurm":
        sweep.arrays.update(t.array for t in tasks)
        if sweep.arrays:
            relabel(runs_root, f"{sweep.what}, job arrays {', '.join(sorted(sweep.arrays, key=int))}")
    if finished:
        outcomes += _evaluate_here(finished, out)
    if not sweep.wait:
        return outcomes
    return outcomes + unpack_outcomes(_watch_tasks(tasks, cluster, out, sweep))


def _submit_wave(jobs: list[Job], folder: Path, cluster: str, executor: str, runs_root: Path, out: TextIO,
                 sweep: SlurmSweep) -> list[Task]:
    """Submit a wave's runs as one array, packed by ``sweep.ensemble`` (a pack: one task), and
    record each task under its run directory or each of its members'."""
    packed = pack_jobs(jobs, sweep.ensemble, sweep.fit) if sweep.ensemble > 1 else jobs
    sub = submit(packed, folder, sweep.params, cluster)
    if cluster == "slurm":
        add_to_record(runs_root, sub.array, cluster, folder, {t.job_id: _record_entry(t.job) for t in sub.tasks})
    packs = sum(1 for j in packed if j.kind == PACK_KIND)
    what = f", {len(jobs)} run(s) with {packs} ensemble(s)" if packs else ""
    print(f"submitted {len(sub.tasks)} task(s){what} as job array {sub.array} ({executor}); logs in {folder}",
          file=out, flush=True)
    return sub.tasks


def _record_entry(job: Job) -> dict:
    entry = {"run": job.label, "run_dir": job.run_dir}
    if job.kind == PACK_KIND:
        entry["members"] = [{"run": m.label, "run_dir": m.run_dir} for m in members_of(job)]
    return entry


def _evaluate_here(jobs: list[Job], out: TextIO) -> list[JobOutcome]:
    """Finished runs only need their evaluation: done in this process (on CPU where a GPU run's
    device is not visible here), never one task each."""
    from .jobs import execute, job_from_dict

    print(f"evaluating {len(jobs)} finished run(s) in this process (no task each)", file=out, flush=True)
    outcomes = []
    for j in jobs:
        job = job_from_dict(j.to_dict())
        if str(job.config["train"]["device"]).startswith("cuda"):
            job.config["train"]["device"] = "auto"  # a runtime key: the run is the same
        t0 = time.perf_counter()
        try:
            result = execute(job)
            outcomes.append(JobOutcome(j, "done", time.perf_counter() - t0, result=result))
            print(f"done {j.label}: evaluated here", file=out, flush=True)
        except PosrnnError as e:
            outcomes.append(JobOutcome(j, "failed", time.perf_counter() - t0, error=str(e)))
            print(f"failed {j.label}: {e}", file=out, flush=True)
    return outcomes


def _watch_tasks(tasks: list[Task], cluster: str, out: TextIO, sweep: SlurmSweep) -> list[JobOutcome]:
    """Wait on the tasks, printing each state change and each end (a failure with its cause
    and log) as it happens."""
    if not tasks:
        return []
    n, ended = len(tasks), [0]

    def event(kind: str, task, what) -> None:
        stamp = time.strftime("%H:%M:%S")
        if kind == "state":
            print(f"{stamp} {task.job.label} ({task.job_id}): {what}", file=out, flush=True)
            return
        ended[0] += 1
        if what.status == "done" and "members" in (what.result or {}):
            print(f"{stamp} [{ended[0]}/{n}] done {task.job.label} ({task.job_id}): {len(what.result['members'])} "
                  f"runs as one ensemble", file=out, flush=True)
        elif what.status == "done":
            info = (what.result or {}).get("training") or next(iter((what.result or {}).values()), "")
            print(f"{stamp} [{ended[0]}/{n}] done {task.job.label} ({task.job_id})" + (f": {info}" if info else ""),
                  file=out, flush=True)
        else:
            print(f"{stamp} [{ended[0]}/{n}] {what.status} {task.job.label} ({task.job_id}): {what.error} "
                  f"(log: {what.log})", file=out, flush=True)

    query = slurm_states if cluster == "slurm" else local_states(tasks)
    lost = sweep.lost_after_s if sweep.lost_after_s is not None else (LOST_AFTER_S if cluster == "slurm" else 30.0)
    return watch(tasks, query, event, poll_s=2.0 if cluster == "local" else 5.0, deadline=sweep.deadline,
                 lost_after_s=lost)
