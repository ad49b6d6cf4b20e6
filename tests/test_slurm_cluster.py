"""Smoke tests of the one-node SLURM test cluster, driven through submitit.

Skipped (one line) where SLURM is not installed or cannot start; see tests/slurm_cluster.py.
"""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from slurm_cluster import slurm_cluster  # noqa: F401  (the fixture)

submitit = pytest.importorskip("submitit")

TESTS_DIR = Path(__file__).resolve().parent
#: every job's time limit, far from its reach: SLURM's own SIGUSR2, 90 s before the limit, would
#: otherwise reach a job slowed down by a busy machine, and kill it if it came before submitit's
#: handler was in place (a limit of 2 minutes sent it 30 s after the start; submitit also takes any
#: limit under 10 minutes as timed out at once)
TIMEOUT_MIN = 30
#: how long a test waits for a job to start or end: seconds on an idle machine, far more on a busy one
PATIENCE_S = 180


def square(x: int) -> int:
    return x * x


class SleepUntilPreempted(submitit.helpers.Checkpointable):
    """First run: marks that it started, then sleeps far past the test's patience, in slices of
    0.1 s: the kernel may hand a signal to another thread of the process (numpy's), and then only
    a main thread that wakes up runs Python's handler (one long sleep went on for minutes with
    both signals of a preemption pending). After preemption, checkpoint() resubmits it with
    ``resumed=True`` and it returns at once.

    submitit's own ``scontrol requeue`` is replaced by posrnn's (``sweep.slurm.requeue``, what
    every sweep task uses): SLURM signals every process of the job step, and the SIGTERM of a
    preemption (or of the requeue itself) killed submitit's ``scontrol`` child once in CI, which
    made the job fail instead of being requeued."""

    def __call__(self, started: str, resumed: bool = False):
        if resumed:
            return "resumed", int(os.environ.get("SLURM_RESTART_COUNT", "0"))
        from posrnn_cli.sweep.slurm import requeue

        env = signal.getsignal(signal.SIGUSR2).__self__.env  # submitit's handler and its job environment
        env._requeue = lambda countdown: requeue(env.job_id)
        Path(started).write_text(str(os.getpid()))
        for _ in range(3000):
            time.sleep(0.1)
        return "never preempted", 0

    def checkpoint(self, started: str, resumed: bool = False):
        return submitit.helpers.DelayedSubmission(self, started, True)


@pytest.fixture
def executor(slurm_cluster, tmp_path, monkeypatch):
    """An AutoExecutor on the test cluster. submitit calls sbatch/squeue/sacct from this
    process's environment, so the cluster's environment is set for the test's duration; the
    tests directory goes on PYTHONPATH so jobs can unpickle this module's functions."""
    for key in list(os.environ):
        if key.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_")) and key not in slurm_cluster.env:
            monkeypatch.delenv(key)
    for key, value in slurm_cluster.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(
        "PYTHONPATH",
        os.pathsep.join(filter(None, [str(TESTS_DIR), str(TESTS_DIR.parent), os.environ.get("PYTHONPATH")])),
    )
    ex = submitit.AutoExecutor(folder=tmp_path / "submitit", cluster="slurm")
    ex.update_parameters(
        timeout_min=TIMEOUT_MIN, cpus_per_task=1, mem_gb=1, slurm_partition=slurm_cluster.partition
    )
    return ex


def _wait(job, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not job.done():
        if time.monotonic() > deadline:
            job.cancel(check=False)
            pytest.fail(f"job {job.job_id} not done after {timeout_s:.0f} s (state {job.state})\n"
                        f"--- stdout\n{job.stdout()}\n--- stderr\n{job.stderr()}\n{slurm_cluster_tail(job)}")
        time.sleep(0.5)


def slurm_cluster_tail(job) -> str:
    """The daemons' logs of the cluster the job runs on (found through its SLURM_CONF)."""
    conf = os.environ.get("SLURM_CONF")
    logs = Path(conf).parent / "log" if conf else None
    if not logs or not logs.is_dir():
        return ""
    return "\n".join(f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-40:])
                     for p in sorted(logs.glob("*.log")))


def _final_state(job, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        state = job.get_info(mode="force").get("State", "UNKNOWN")
        if state not in ("PENDING", "RUNNING", "COMPLETING", "UNKNOWN") or time.monotonic() > deadline:
            return state
        time.sleep(0.5)


def test_map_array_runs_on_the_cluster(executor, slurm_cluster):
    jobs = executor.map_array(square, [1, 2])
    assert len(jobs) == 2
    for job in jobs:
        _wait(job, PATIENCE_S)
    assert [job.result() for job in jobs] == [1, 4], slurm_cluster.log_tail()
    # submitit reads the final state through the stand-in sacct; the result file can appear
    # a moment before SLURM marks the job finished.
    assert [_final_state(job, 15) for job in jobs] == ["COMPLETED"] * 2


def test_preempted_checkpointable_job_is_requeued_and_resumes(
    executor, slurm_cluster, tmp_path
):
    started = tmp_path / "started"
    job = executor.submit(SleepUntilPreempted(), str(started))
    deadline = time.monotonic() + PATIENCE_S
    while not started.exists():
        if time.monotonic() > deadline:
            job.cancel(check=False)
            pytest.fail(f"job {job.job_id} did not start in {PATIENCE_S} s\n{slurm_cluster.log_tail()}")
        time.sleep(0.2)
    job._interrupt()  # preemption: SIGTERM (ignored by submitit), then SIGUSR2
    _wait(job, PATIENCE_S)
    assert job.result() == ("resumed", 1), slurm_cluster.log_tail()


# ---- posrnn sweep: preemption and requeue lose nothing ---------------------------------------------
ITERATIONS = 2000


def _last_step(metrics: Path) -> int:
    try:
        lines = metrics.read_text().splitlines()
        return json.loads(lines[-1])["step"] if lines else 0
    except (OSError, ValueError, KeyError):
        return 0


@pytest.mark.slow
def test_sweep_tasks_preempted_or_requeued_resume_at_the_step_where_they_stopped(
    slurm_cluster, tmp_path, monkeypatch
):
    """One task is preempted as submitit's ``_interrupt`` does it (SIGTERM, then SIGUSR2), the
    other requeued with ``scontrol requeue`` (SIGTERM), both while training. Each saves a
    checkpoint at the step in progress (none is periodic: ``checkpoint_every`` exceeds the run),
    leaves without an error result, is requeued and resumes from that step. The sweep exits 0
    with no failure, and the final weights equal an uninterrupted local sweep's, bit for bit."""
    import yaml

    from posrnn_cli.sweep import SweepOptions, run_sweep

    from fabricate import scratch
    from sweeps import stop_sweeps, results, same

    monkeypatch.chdir(tmp_path)
    for key, value in slurm_cluster.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PYTHONPATH", str(TESTS_DIR.parent))
    grid = {"cells": [{"model": "gru", "vocab": 4}], "pe": ["none", "sinusoidal"], "seeds": [1], "length": 4,
            "hidden": 8, "iterations": ITERATIONS, "batch": 8, "warmup": 2, "checkpoint_every": 10**6,
            "set": {"train.log_every": 10}, "keep_checkpoints": "all"}  # the one written at the signal stays
    params = scratch(tmp_path, fig2=grid, slurm={"partition": slurm_cluster.partition, "timeout_min": TIMEOUT_MIN,
                                                 "cpus_per_task": 1, "mem_gb": 1})
    sweep = subprocess.Popen([sys.executable, "-c", "from posrnn_cli.cli import run; run()", "sweep", "fig2",
                              "--executor", "slurm", "--json"], cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    lines: list = []
    reader = threading.Thread(target=lambda: lines.extend(iter(sweep.stdout.readline, "")), daemon=True)
    reader.start()
    array = None
    try:
        runs = tmp_path / "runs" / "t" / "fig2"
        deadline = time.monotonic() + 300  # generous: the machine may be busy with other work
        while array is None or not (len(list(runs.glob("*/metrics.jsonl"))) == 2
                                    and all(_last_step(m) >= 100 for m in runs.glob("*/metrics.jsonl"))):
            assert sweep.poll() is None and time.monotonic() < deadline, "".join(lines) + slurm_cluster.log_tail()
            array = next((m.group(1) for ln in lines if (m := re.search(r"job array (\d+)", ln))), None)
            time.sleep(0.05)
        for sig in ("SIGTERM", "USR2"):  # a preemption, in submitit's order (job._interrupt())
            slurm_cluster.run("scancel", f"{array}_0", "--signal", sig)
        requeued = slurm_cluster.run("scontrol", "requeue", f"{array}_1")
        assert requeued.returncode == 0, requeued.stdout
        sweep.wait(timeout=480)
    finally:
        stop_sweeps(slurm_cluster, [sweep], array)
        reader.join(timeout=10)
    out = "".join(lines)
    assert sweep.returncode == 0, out + slurm_cluster.log_tail()
    assert not re.search(r"^(failed|cancelled|lost): |runs (failed|did not finish)", out, re.M), out
    rows = json.loads(out.strip().splitlines()[-1])
    for row in rows:
        run = tmp_path / "runs" / "t" / row["run"]
        steps = sorted(int(p.stem.split("_")[1]) for p in (run / "checkpoints").glob("step_*.pt"))
        # the run resumed at the step the signal saved; that off-schedule checkpoint is removed once the
        # last one is written, so a finished run holds only its scheduled checkpoints
        m = re.fullmatch(r"resumed from step (\d+)", row["result"]["training"])
        assert row["status"] == "done" and m and 100 <= int(m.group(1)) < ITERATIONS, row
        assert steps == [ITERATIONS], (row, steps)
        assert yaml.safe_load((run / "config.yaml").read_text())["train"]["checkpoint_every"] == 10**6
    logs = {task: "".join(p.read_text(errors="replace") for p in sorted(
        (tmp_path / "runs" / "t" / ".submitit").rglob(f"{array}_{task}_*log.err"))) for task in (0, 1)}
    assert "SIGUSR2: requeueing the task" in logs[0], logs[0]
    assert "SIGTERM: stopped at step" in logs[1] and "requeueing" not in logs[1], logs[1]
    run_sweep(params, "t", ["fig2"], SweepOptions(workers=2), runs_root=tmp_path / "local")
    assert same(results(tmp_path / "runs" / "t"), results(tmp_path / "local"))


def test_sweep_reports_a_task_ended_by_scancel_as_cancelled_not_failed(
    slurm_cluster, tmp_path, monkeypatch
):
    """``scancel`` of a training task: the task saves a checkpoint at the step in progress, and the
    sweep names the run as cancelled (exit 1, no "failed")."""
    from fabricate import scratch
    from sweeps import stop_sweeps

    monkeypatch.chdir(tmp_path)
    for key, value in slurm_cluster.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PYTHONPATH", str(TESTS_DIR.parent))
    grid = {"cells": [{"model": "gru", "vocab": 4}], "pe": ["none"], "seeds": [1], "length": 4, "hidden": 8,
            "iterations": ITERATIONS, "batch": 8, "warmup": 2, "checkpoint_every": 10**6,
            "set": {"train.log_every": 10}}
    scratch(tmp_path, fig2=grid, slurm={"partition": slurm_cluster.partition, "timeout_min": TIMEOUT_MIN,
                                        "cpus_per_task": 1, "mem_gb": 1})
    argv = [sys.executable, "-c", "from posrnn_cli.cli import run; run()", "sweep", "fig2", "--executor", "slurm"]
    sweep = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list = []
    reader = threading.Thread(target=lambda: lines.extend(iter(sweep.stdout.readline, "")), daemon=True)
    reader.start()
    array = None
    metrics = tmp_path / "runs" / "t" / "fig2" / "gru-v4-none-s1" / "metrics.jsonl"
    try:
        deadline = time.monotonic() + 300  # generous: the machine may be busy with other work
        while array is None or _last_step(metrics) < 100:
            assert sweep.poll() is None and time.monotonic() < deadline, "".join(lines) + slurm_cluster.log_tail()
            array = next((m.group(1) for ln in lines if (m := re.search(r"job array (\d+)", ln))), None)
            time.sleep(0.05)
        slurm_cluster.run("scancel", array)
        sweep.wait(timeout=300)
    finally:
        stop_sweeps(slurm_cluster, [sweep], array)
        reader.join(timeout=10)
    out = "".join(lines)
    assert sweep.returncode == 1, out
    assert re.search(r"^cancelled: fig2/gru-v4-none-s1: ", out, re.M), out
    assert ("error: 1 of 1 runs did not finish (1 cancelled;" in out
            and not re.search(r"^failed: |runs failed", out, re.M)), out
    steps = sorted(int(p.stem.split("_")[1]) for p in metrics.parent.glob("checkpoints/step_*.pt"))
    assert len(steps) == 1 and 100 <= steps[0] < ITERATIONS, steps  # saved at the SIGTERM before the kill


@pytest.mark.slow
def test_requeue_then_kill_9_then_a_second_sweep_reattaches_with_no_false_failure(
    slurm_cluster, tmp_path
):
    """The whole cluster scenario at once. While both tasks train, one is requeued by SLURM
    (``scontrol requeuehold``: SIGTERM, then held so it cannot start again before the second sweep
    looks) and the other is suspended (it stays in flight mid-training, so the test does not depend on
    timing). The submitting sweep is then killed -9, and a second sweep started while both tasks are
    still in flight. It reattaches to both, submits nothing, exits 0 with no failed run once the
    tasks are released and resumed, the requeued run resumes at the step where SIGTERM stopped it,
    and the final weights equal an uninterrupted local sweep's, bit for bit."""
    from posrnn_cli.sweep import SweepOptions, run_sweep
    from posrnn_cli.sweep.slurm_record import read_record

    from fabricate import scratch
    from sweeps import POSRNN, cluster_env, stop_sweeps, tasks_submitted_from, wait_for, results, same

    env = cluster_env(slurm_cluster)
    grid = {"cells": [{"model": "gru", "vocab": 4}], "pe": ["none", "sinusoidal"], "seeds": [1], "length": 4,
            "hidden": 8, "iterations": ITERATIONS, "batch": 8, "warmup": 2, "checkpoint_every": 10**6,
            "set": {"train.log_every": 10}, "keep_checkpoints": "all"}  # the one written at the signal stays
    params = scratch(tmp_path, fig2=grid, executor={"kind": "slurm"},
                     slurm={"partition": slurm_cluster.partition, "timeout_min": TIMEOUT_MIN, "cpus_per_task": 1,
                            "mem_gb": 1})
    runs = tmp_path / "runs" / "t"
    metrics = {task: runs / "fig2" / f"gru-v4-{pe}-s1" / "metrics.jsonl" for task, pe in enumerate(grid["pe"])}
    logs = {k: tmp_path / f"{k}.out" for k in "ab"}
    cmd = [*POSRNN, "sweep", "fig2", "--timeout", "10m", "--json"]  # generous: 2 cores may be shared

    def start(k):
        with open(logs[k], "w") as f:
            return subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=f, stderr=subprocess.STDOUT)

    def detail():  # for a failed wait: the sweeps' output and the daemons' logs
        return "".join(p.read_text() for p in logs.values() if p.exists()) + slurm_cluster.log_tail()

    def task_log(task):
        return "".join(p.read_text(errors="replace") for p in sorted(
            (runs / ".submitit").rglob(f"{array}_{task}_*log.err")))

    def state(task):
        return slurm_cluster.run("squeue", "-h", "-j", f"{array}_{task}", "-o", "%T").stdout.strip()

    procs, array = [], None
    try:
        a = start("a")
        procs.append(a)
        wait_for(lambda: (runs / ".slurm-arrays.json").is_file()
                  and all(_last_step(m) >= 100 for m in metrics.values()),
                  300, "the tasks did not start training", [a], detail)  # generous: the machine may be busy
        [rec] = read_record(runs)
        array = rec["array"]
        assert slurm_cluster.run("scontrol", "suspend", f"{array}_0").returncode == 0
        requeued = slurm_cluster.run("scontrol", "requeuehold", f"{array}_1")
        assert requeued.returncode == 0, requeued.stdout
        wait_for(lambda: "SIGTERM: stopped at step" in task_log(1) and state(1) == "PENDING",
                  300, "the requeued task did not stop at a step and wait held", [a], detail)
        assert state(0) == "SUSPENDED"
        a.kill()  # kill -9: no handler runs
        a.wait()
        b = start("b")
        procs.append(b)
        wait_for(lambda: "reattached to 2 task(s) still in flight" in logs["b"].read_text(),
                  300, "the second sweep did not reattach to both tasks", [b], detail)
        assert slurm_cluster.run("scontrol", "resume", f"{array}_0").returncode == 0
        assert slurm_cluster.run("scontrol", "release", f"{array}_1").returncode == 0
        assert b.wait(timeout=660) == 0, logs["b"].read_text() + slurm_cluster.log_tail()
    finally:
        stop_sweeps(slurm_cluster, procs, array)
    out = logs["b"].read_text()
    assert not re.search(r"^(failed|cancelled|lost): |runs (failed|did not finish)|as job array", out, re.M), out
    assert [r["array"] for r in read_record(runs)] == [array]
    mine = tasks_submitted_from(slurm_cluster, tmp_path)
    assert sorted(mine) == [f"{array}_0", f"{array}_1"], mine  # one array, one task a run: nothing submitted twice
    rows = {row["run"]: row for row in json.loads(out.strip().splitlines()[-1])}
    assert all(row["status"] == "done" for row in rows.values()), rows
    run = metrics[1].parent
    steps = sorted(int(p.stem.split("_")[1]) for p in (run / "checkpoints").glob("step_*.pt"))
    assert steps == [ITERATIONS], steps  # the SIGTERM checkpoint is removed once the last one is written
    assert "SIGTERM: stopped at step" in task_log(1) and "requeueing" not in task_log(1)
    m = re.fullmatch(r"resumed from step (\d+)", rows["fig2/gru-v4-sinusoidal-s1"]["result"]["training"])
    assert m and 100 <= int(m.group(1)) < ITERATIONS, (rows, steps)
    assert rows["fig2/gru-v4-none-s1"]["result"]["training"] == "trained", rows  # suspended, never restarted
    run_sweep(params, "t", ["fig2"], SweepOptions(executor="local", workers=2), runs_root=tmp_path / "local")
    assert same(results(runs), results(tmp_path / "local"))
