"""Helpers the sweep tests share (local, submitit and real-SLURM): each run's final weights and
scores, comparing two sweeps' results, the processes working in a folder, and the one-node
cluster's environment, waits, listing of submitted tasks and clean-up."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from posrnn_cli.common.files.io import read_npz
from posrnn_cli.common.results.provenance import STAMPS

from conftest import ROOT

#: the CLI as a subprocess (the sweeps' own interpreter)
POSRNN = [sys.executable, "-c", "from posrnn_cli.cli import run; run()"]


def results(root: Path) -> dict:
    """Every run's final weights and per-sequence scores under ``root`` (without the stamps naming
    the checkpoint file, which also records its run's own id)."""
    out = {}
    for run in sorted(p.parent for p in root.glob("*/*/config.yaml")):
        ckpts = sorted((run / "checkpoints").glob("step_*.pt"))
        scores = {k: v for k, v in read_npz(run / "eval_sequences.npz").items() if k not in STAMPS}
        out[run.relative_to(root).as_posix()] = (torch.load(ckpts[-1], weights_only=True)["model"], scores)
    return out


def kill_sweep_while_training(work: Path, args: list[str], env: dict, pause: float) -> None:
    """Start ``posrnn sweep ARGS`` in ``work``, wait until a worker has started a job (a run's log
    grows), let it train ``pause`` seconds more, SIGKILL the sweep and wait until none of its
    workers is left (they see their pipe from the sweep close and exit)."""
    import signal
    import subprocess

    seen = sum(f.stat().st_size for f in (work / "runs").rglob("*.log"))
    p = subprocess.Popen([*POSRNN, "sweep", *args], cwd=work, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and p.poll() is None and \
            sum(f.stat().st_size for f in (work / "runs").rglob("*.log")) == seen:
        time.sleep(0.05)
    time.sleep(pause)
    assert p.poll() is None, "the sweep finished before it could be killed"
    p.send_signal(signal.SIGKILL)
    p.wait()
    deadline = time.time() + 10
    while time.time() < deadline and processes_in(work):
        time.sleep(0.1)
    assert not processes_in(work), "a worker outlived its sweep"


def processes_in(folder: Path) -> list[int]:
    """Live processes whose working directory is ``folder`` (a sweep's workers inherit it)."""
    out = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and os.readlink(f"/proc/{pid}/cwd") == str(folder):
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().split(") ")[1][0] != "Z":  # not a zombie
                        out.append(int(pid))
        except OSError:
            continue
    return out


def same(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    for k in a:
        (wa, ea), (wb, eb) = a[k], b[k]
        if wa.keys() != wb.keys() or not all(torch.equal(wa[n], wb[n]) for n in wa):
            return False
        if ea.keys() != eb.keys() or not all(np.array_equal(ea[n], eb[n]) for n in ea):
            return False
    return True


def cluster_env(slurm_cluster) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_"))}
    return {**env, **slurm_cluster.env, "PYTHONPATH": str(ROOT)}


def wait_for(what, timeout_s: float, why: str, procs=(), detail=lambda: "") -> None:
    """Polls ``what`` until it holds; fails, with ``why`` and ``detail()``, at the deadline or when
    one of ``procs`` (the sweeps being watched) ends first."""
    deadline = time.monotonic() + timeout_s
    while not what():
        for p in procs:
            assert p.poll() is None, f"{why}: a sweep ended first (exit {p.returncode})\n{detail()}"
        assert time.monotonic() < deadline, f"{why}\n{detail()}"
        time.sleep(0.05)


def tasks_submitted_from(slurm_cluster, workdir: Path) -> list:
    """Every task id SLURM knows (any state) whose job was submitted from ``workdir``."""
    listing = slurm_cluster.run("squeue", "-h", "-r", "-t", "all", "-o", "%i|%Z").stdout.split()
    return [ln.split("|")[0] for ln in listing if ln.split("|")[-1] == str(workdir)]


def stop_sweeps(slurm_cluster, procs, array) -> None:
    """A test's cleanup: kills the sweeps still running and cancels the array they submitted."""
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    if array is not None:
        slurm_cluster.run("scancel", array)
