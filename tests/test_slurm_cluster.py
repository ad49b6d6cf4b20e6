"""Smoke tests of the one-node SLURM test cluster, driven through submitit.

Skipped (one line) where SLURM is not installed or cannot start; see tests/slurm_cluster.py.
"""

import os
import time
from pathlib import Path

import pytest

from slurm_cluster import slurm_cluster  # noqa: F401  (the fixture)

submitit = pytest.importorskip("submitit")

TESTS_DIR = Path(__file__).resolve().parent


def square(x: int) -> int:
    return x * x


class SleepUntilPreempted(submitit.helpers.Checkpointable):
    """First run: marks that it started, then sleeps far past the test's patience.
    After preemption, checkpoint() resubmits it with ``resumed=True`` and it returns at once."""

    def __call__(self, started: str, resumed: bool = False):
        if resumed:
            return "resumed", int(os.environ.get("SLURM_RESTART_COUNT", "0"))
        Path(started).write_text(str(os.getpid()))
        time.sleep(300)
        return "never preempted", 0

    def checkpoint(self, started: str, resumed: bool = False):
        return submitit.helpers.DelayedSubmission(self, started, True)


@pytest.fixture
def executor(slurm_cluster, tmp_path, monkeypatch):  # noqa: F811
    """An AutoExecutor on the test cluster. submitit calls sbatch/squeue/sacct from this
    process's environment, so the cluster's environment is set for the test's duration; the
    tests directory goes on PYTHONPATH so jobs can unpickle this module's functions."""
    for key in list(os.environ):
        if key.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_")) and key not in slurm_cluster.env:
            monkeypatch.delenv(key)
    for key, value in slurm_cluster.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS_DIR), os.environ.get("PYTHONPATH")]))
    )
    ex = submitit.AutoExecutor(folder=tmp_path / "submitit", cluster="slurm")
    ex.update_parameters(
        timeout_min=2, cpus_per_task=1, mem_gb=1, slurm_partition=slurm_cluster.partition
    )
    return ex


def _wait(job, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not job.done():
        if time.monotonic() > deadline:
            job.cancel(check=False)
            pytest.fail(f"job {job.job_id} not done after {timeout_s:.0f} s (state {job.state})")
        time.sleep(0.5)


def _final_state(job, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        state = job.get_info(mode="force").get("State", "UNKNOWN")
        if state not in ("PENDING", "RUNNING", "COMPLETING", "UNKNOWN") or time.monotonic() > deadline:
            return state
        time.sleep(0.5)


def test_map_array_runs_on_the_cluster(executor, slurm_cluster):  # noqa: F811
    jobs = executor.map_array(square, [1, 2])
    assert len(jobs) == 2
    for job in jobs:
        _wait(job, 30)
    assert [job.result() for job in jobs] == [1, 4], slurm_cluster.log_tail()
    # submitit reads the final state through the stand-in sacct; the result file can appear
    # a moment before SLURM marks the job finished.
    assert [_final_state(job, 15) for job in jobs] == ["COMPLETED"] * 2


def test_preempted_checkpointable_job_is_requeued_and_resumes(
    executor, slurm_cluster, tmp_path  # noqa: F811
):
    started = tmp_path / "started"
    job = executor.submit(SleepUntilPreempted(), str(started))
    deadline = time.monotonic() + 30
    while not started.exists():
        if time.monotonic() > deadline:
            job.cancel(check=False)
            pytest.fail(f"job {job.job_id} did not start in 30 s\n{slurm_cluster.log_tail()}")
        time.sleep(0.2)
    job._interrupt()  # preemption: SIGTERM (ignored by submitit), then SIGUSR2
    _wait(job, 45)
    assert job.result() == ("resumed", 1), slurm_cluster.log_tail()
