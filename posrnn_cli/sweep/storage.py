"""What a sweep's checkpoints take on disk (``posrnn sweep --dry-run``).

A checkpoint holds the model's state (weights and buffers) and Adam's two moments per trained
parameter, all float32 (``engine/train.py``, ``Trainer.state``), plus a few kilobytes of config,
schedule and RNG state. The sizes come from each run's model built on torch's ``meta`` device
(no memory, no data: torch is imported here only), once per distinct model. How many
checkpoints a run keeps follows its experiment's ``keep_checkpoints`` (``last``: one; ``all``:
one per ``checkpoint_every`` steps, the final step, and step 0 under ``checkpoint_initial``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Optional

from ..common.settings.config import RunConfig
from ..common.errors import PosrnnError
from ..common.stages.experiments import trains
from .plan import Job

#: config, schedule and RNG states, and the archive's record per tensor (its name, header and alignment):
#: fitted to the checkpoints of GRU, LSTM, S4D and 1- and 4-layer Transformer runs (within 0.1 KB each)
BASE_BYTES, PER_TENSOR_BYTES = 12_700, 285


@dataclass
class RunStorage:
    checkpoints: int  # how many the run keeps when finished
    checkpoint_bytes: int  # the size of one

    @property
    def bytes(self) -> int:
        return self.checkpoints * self.checkpoint_bytes


def checkpoints_kept(cfg: RunConfig, keep: str) -> int:
    """How many checkpoints a finished run of ``cfg`` keeps under ``keep``."""
    if keep == "last":
        return 1
    t = cfg.train  # counted, not listed: a run may schedule 10^12 of them (TrainConfig.scheduled)
    return t.iterations // t.checkpoint_every + (1 if t.iterations % t.checkpoint_every else 0) + (
        1 if t.checkpoint_initial else 0)


def task_shape(cfg: RunConfig):
    """The task's sizes the model reads; for a task whose data is not made yet (the LM before
    ``lm_data``), its vocabulary and length stand in."""
    from ..tasks import build_task

    try:
        return build_task(cfg.task)
    except PosrnnError:
        if cfg.task.data is None:
            raise
        V, L = cfg.task.vocab_size, cfg.task.length
        return SimpleNamespace(n_input_ids=V, n_outputs=V, max_steps=L, output_start=None, continuous=False,
                               cfg=cfg.task)


def checkpoint_bytes(cfg: RunConfig) -> int:
    """The size of one checkpoint of ``cfg``: its model state, Adam's two moments (and step) per
    parameter, and the records around them. For an extension, which trains its new rows only,
    this is an upper bound."""
    import torch

    from ..models import build_model

    task = task_shape(cfg)
    with torch.device("meta"):
        model = build_model(cfg, task)
    state = model.state_dict()
    params = list(model.parameters())
    data = sum(t.numel() * 4 for t in state.values()) + 2 * sum(p.numel() * 4 for p in params)  # float32 on disk
    return data + BASE_BYTES + PER_TENSOR_BYTES * (len(state) + 3 * len(params))


def member_bytes(cfg: RunConfig) -> tuple[int, int]:
    """(bytes, shared bytes) of one member of an ensemble of ``cfg``'s seeds at its training step's
    peak (``common.host.memory.member_parts``), from its model built on the ``meta`` device."""
    import torch

    from ..common.host.memory import member_parts
    from ..models import build_model
    from ..models.rnn import GATES

    task = task_shape(cfg)
    with torch.device("meta"):
        model = build_model(cfg, task)
    out_steps = task.max_steps - (task.output_start or 0)
    return member_parts(cfg, task.max_steps, out_steps, task.n_input_ids, task.n_outputs, model.encoder.out_dim,
                        GATES[model.core.kind], getattr(task, "head_chunk", None))


def member_fit(available: Optional[int], where: str):
    """``packing.Fit`` for a device with ``available`` bytes (``where`` names it): the most members of
    a job's shape whose training steps fit (``member_bytes``), and why. None where the memory is not known."""
    if available is None:
        return None
    from ..common.host.memory import human

    def fit(job: Job) -> tuple[int, str]:
        member, shared = member_bytes(job.run_config())
        n = max(1, (available - shared) // max(member, 1))
        return n, (f"a member of {job.experiment}'s shape needs about {human(member)} at its step's peak (an estimate) "
                   f"and {where} has {human(available)}: {n} fit")
    return fit


def sweep_memory(prof: dict) -> tuple[Optional[int], str]:
    """The memory the sweep's runs train in, where this machine can tell: the visible GPU's, or the
    memory available now for a CPU sweep; (None, why) for a GPU profile seen from a machine without one."""
    from ..common.host.memory import available_bytes

    device = str(prof.get("device", "auto"))
    import torch

    if torch.cuda.is_available() and device != "cpu":
        return int(torch.cuda.get_device_properties(0).total_memory), f"the GPU ({torch.cuda.get_device_name(0)})"
    if device.startswith("cuda"):
        return None, "no GPU here"
    return available_bytes(), "this machine (memory available now)"


def task_memory(prof: dict, settings: dict, executor: str) -> tuple[Optional[int], str]:
    """The memory one task of a sweep's ``executor`` trains a pack in, where the submitting machine
    can tell: this machine's for the local executors (``sweep_memory``); on SLURM, a CPU task's
    ``mem_gb`` (its request), a GPU task's GPU where one of the same profile is visible here, else
    (None, why): the packs are then not limited by memory."""
    if executor in ("local", "submitit-local"):
        return sweep_memory(prof)
    device = str(prof.get("device", "auto"))
    if device.startswith("cuda") or (device == "auto" and settings.get("gpus_per_task")):
        import torch

        if torch.cuda.is_available():
            return sweep_memory(prof)
        return None, "a SLURM task's GPU, not visible here"
    mem = settings.get("mem_gb")
    if mem is None:
        return None, "a SLURM task without mem_gb"
    return int(float(mem) * 1e9), f"a SLURM task (mem_gb: {mem})"


def estimate(jobs: list[Job]) -> dict[str, Optional[RunStorage]]:
    """run label → its storage (None for jobs that keep no checkpoint: stability, lm_data)."""
    sizes: dict[str, int] = {}
    out: dict[str, Optional[RunStorage]] = {}
    for job in jobs:
        if not trains(job.kind) or not job.config:
            out[job.label] = None
            continue
        cfg = job.run_config()
        key = json.dumps({s: v for s, v in job.config.items() if s != "train"}, sort_keys=True, default=str)
        if key not in sizes:
            sizes[key] = checkpoint_bytes(cfg)
        out[job.label] = RunStorage(checkpoints_kept(cfg, job.options.get("keep_checkpoints", "all")), sizes[key])
    return out


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def summary(jobs: list[Job]) -> tuple[str, dict[str, Optional[RunStorage]]]:
    """One line per experiment and a total: checkpoints kept and the disk they take."""
    est = estimate(jobs)
    per: dict[str, list[RunStorage]] = {}
    for job in jobs:
        if est[job.label] is not None:
            per.setdefault(job.experiment, []).append(est[job.label])
    lines = []
    for exp, runs in per.items():
        n = sum(r.checkpoints for r in runs)
        size = sum(r.bytes for r in runs)
        biggest = max(r.checkpoint_bytes for r in runs)
        lines.append(f"  {exp:<10} {len(runs):>4} run(s), {n:>6} checkpoint(s) kept, {human(size):>9} "
                     f"(largest checkpoint {human(biggest)})")
    total = sum(r.bytes for rs in per.values() for r in rs)
    head = f"expected disk use of the checkpoints when every run has finished: {human(total)}"
    return "\n".join([head, *lines]), est


def disk_sentence(jobs: list[Job], profile: str) -> str:
    """The docs' sentence on a profile's disk use (docs/pipeline.md; a test regenerates it from the
    plan, so it never goes stale): the total, the experiment keeping most checkpoints, the
    largest checkpoint, and what keeping every checkpoint would take."""
    est = estimate(jobs)
    runs = [(job, est[job.label]) for job in jobs if est[job.label] is not None]
    total, n = sum(r.bytes for _, r in runs), sum(r.checkpoints for _, r in runs)
    per: dict[str, list[RunStorage]] = {}
    for job, r in runs:
        per.setdefault(job.experiment, []).append(r)
    most = max(per, key=lambda e: sum(r.checkpoints for r in per[e]))
    most_n = sum(r.checkpoints for r in per[most])
    big_job, big = max(runs, key=lambda t: t[1].checkpoint_bytes)
    every = [(checkpoints_kept(job.run_config(), "all"), r.checkpoint_bytes) for job, r in runs]
    return (f"For the {profile} profile (`posrnn sweep --dry-run --profile {profile}`): {human(total)} when every run "
            f"has finished, {most_n:,} of its {n:,} checkpoints being the {most} runs' "
            f"({human(sum(r.bytes for r in per[most]))}); the largest checkpoint is {big_job.experiment}'s "
            f"({human(big.checkpoint_bytes)}). Keeping every checkpoint of every run ({sum(k for k, _ in every):,}) "
            f"would take {human(sum(k * b for k, b in every))}, twice that with DVC's cache.")
