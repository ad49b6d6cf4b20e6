"""The one training loop (001 §3.3, 003 §4.2; docs/papers.md, Training), shared by every task and model.

Adam (betas configurable), gradient-norm clipping, linear warm-up from 0 then cosine decay
to 0 (``LambdaLR``), a ``metrics.jsonl`` log every ``log_every`` steps (the loop's only host
syncs, with one before each checkpoint), atomic checkpoints every ``checkpoint_every`` steps
(and every ``checkpoint_minutes`` of wall time, where set) and at the end holding model,
optimiser, scheduler and RNG states, so ``resume`` continues bit-exactly.

Guarantees: a non-finite loss or gradient norm stops the run with an error naming the step,
and no checkpoint with non-finite values is written; SIGINT/SIGTERM (and SIGUSR2 in a SLURM
task, ``common.host.signals``) stop after the current step with a checkpoint at that step; resuming
a run whose only difference is a larger ``train.iterations`` continues it under the cosine
schedule of the new total.

Fast paths, each a ``train.*`` switch: ``amp`` (bf16 autocast, fp32 master weights),
``fused_adam`` (Adam's fused kernel; on by default on CUDA) and ``cuda_graph`` (the whole
update replayed from one CUDA graph, ``graphed.GraphedStep``). ``posrnn bench`` measures them.
The run directory's state (new, resume, done or different) is read by ``common.files.rundir``, its
life around the loop (locked, started, replaced) is ``lifecycle``'s; the optimiser and its
schedule are built by ``optim``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import torch
from torch import nn

from ..common.files.rundir import (CONFIG_FILE, METRICS_FILE, Resumption, list_checkpoints, prepare_run_dir,
                                   prune_checkpoints, truncate_log)
from ..common.settings.config import RunConfig
from ..common.errors import PosrnnError
from ..common.host.machine import fit_to_machine
from ..common.host.memory import check_run_fits, run_parts
from ..common.host.signals import stop_requests
from ..models import build_model, count_parameters
from ..tasks import Batch, HeldOut, Task, build_task
from .checkpoint import NonFiniteState, check_belongs, check_resumable, load_checkpoint, save_checkpoint
from .device import (check_machine, join_process_group, local_device,
                     resolve_device, setup_threads, world)
from .graphed import GraphedStep, graph_lr
from .optim import check_fast_paths, make_optimizer, make_scheduler
from .recipe import check_train_config
from .progress_bar import ProgressBar
from .lifecycle import (Interrupted, TrainingStopped, drop_unscheduled, owned_run_dir, refuse_different_run,
                        start_and_fit)


# ---- the run directory ------------------------------------------------------------------
def open_run(out_dir: Path, cfg: RunConfig, resume: bool, force: bool) -> tuple[Optional[dict], Resumption]:
    """Check the directory and load the checkpoint to resume from, changing nothing: a
    checkpoint that is corrupt, malformed for resuming, or another run's (another run id, or a
    config that contradicts config.yaml) is refused here. Returns (checkpoint or None, resumption)."""
    out_dir = Path(out_dir)
    if not (resume or force):
        refuse_different_run(out_dir, cfg)
    res = prepare_run_dir(out_dir, cfg, resume, force)
    ckpt = None
    if res.checkpoint:
        ckpt = load_checkpoint(res.checkpoint)
        check_resumable(ckpt, res.checkpoint)
        check_belongs(ckpt, res.checkpoint, out_dir)
    return ckpt, res


# ---- the loop --------------------------------------------------------------------------
@dataclass
class Trainer:
    """Everything the loop needs. ``sample(n, gen, device) -> Batch`` draws a training
    batch; ``task`` supplies ``loss`` and ``correct``; ``params`` are the trained ones."""

    cfg: RunConfig
    run_dir: Path
    model: nn.Module
    task: object
    sample: Callable[[int, torch.Generator, torch.device], Batch]
    device: torch.device
    params: Optional[list[nn.Parameter]] = None
    extra: dict = field(default_factory=dict)  # stored in every checkpoint (e.g. extension info)
    keep_checkpoints: str = "all"  # "last": each checkpoint, once written, replaces the earlier ones

    def __post_init__(self):
        t = self.cfg.train
        self.module = getattr(self.model, "module", self.model)  # unwrapped under DistributedDataParallel
        self.rank, self.world_size = world()
        self.is_main = self.rank == 0
        self.params = list(self.params if self.params is not None else self.model.parameters())
        self.optimizer = make_optimizer(self.params, t, self.device)
        self.scheduler = make_scheduler(self.optimizer, t)
        self.graphed = None
        if t.cuda_graph:
            graph_lr(self.optimizer, self.device)
            self.graphed = GraphedStep(self)
        self.generator = torch.Generator(device=self.device).manual_seed(t.seed)
        self.step = 0
        # the log's running sums since its last line: checkpointed, so a resumed run logs what an uninterrupted one does
        self.log_sums = torch.zeros(4, device=self.device, dtype=torch.float64)  # loss, correct, count, grad norm
        self.log_since = 0

    def state(self) -> dict:
        return {
            "config": self.cfg.to_dict(),
            "model": self.module.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": {"device": self.device.type, "train": self.generator.get_state(), "torch": torch.get_rng_state()},
            "n_parameters": count_parameters(self.module),
            "extra": self.extra,
            "log": {"sums": self.log_sums.detach().cpu().clone(), "since": self.log_since},
        }

    def load(self, ckpt: dict, path: Optional[Path] = None) -> None:
        moved = ckpt["rng"]["device"] != self.device.type  # e.g. written on a GPU, resumed on a CPU
        try:
            self.module.load_state_dict(ckpt["model"])
            self.optimizer.load_state_dict(ckpt["optimizer"])
            self.scheduler.load_state_dict(ckpt["scheduler"])
            if moved:  # a CUDA generator's state means nothing to a CPU one: reseed from (seed, step)
                self.generator.manual_seed(self.cfg.train.seed * 1_000_003 + int(ckpt["step"]))
            else:
                self.generator.set_state(ckpt["rng"]["train"])
            torch.set_rng_state(ckpt["rng"]["torch"])
        except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:120]
            raise PosrnnError(f"checkpoint {path or 'to resume'} does not fit this run ({first}), so it was refused; "
                              f"resume from an earlier checkpoint or re-train") from None
        log = ckpt.get("log") or {}
        if self.world_size == 1 and isinstance(log.get("sums"), torch.Tensor) and log["sums"].shape == (4,) \
                and isinstance(log.get("since"), int) and log["since"] >= 0:
            self.log_sums, self.log_since = log["sums"].to(self.device, torch.float64), log["since"]
        if self.graphed is not None:
            graph_lr(self.optimizer, self.device)  # the checkpoint's lr tensor was loaded on the CPU
        self.step = int(ckpt["step"])
        self.extra = {**ckpt.get("extra", {}), **self.extra}
        if moved:  # the batches from here on differ from an unmoved run's: say where
            self.extra["device_changes"] = [*self.extra.get("device_changes", []),
                                            {"at_step": self.step, "from": ckpt["rng"]["device"],
                                             "to": self.device.type}]

    def train_step(self, batch: Batch) -> tuple[torch.Tensor, ...]:
        """One update, then the lr schedule; returns (loss, n_correct, n_targets, grad norm) as
        device tensors (no sync). Under ``cuda_graph`` they are the graph's static outputs: read
        them before the next step."""
        out = self.graphed(batch) if self.graphed is not None else self.update(batch)
        self.scheduler.step()
        return out

    def update(self, batch: Batch, autocast_cache: bool = True) -> tuple[torch.Tensor, ...]:
        """Forward, loss, backward, clipping and Adam: the part ``GraphedStep`` captures."""
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.cfg.train.amp,
                            cache_enabled=autocast_cache):
            loss, pred = self.forward(batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.sum().backward()  # an ensemble's members' losses (``engine.ensemble``): no gradient crosses members
        gnorm = self.clip_gradients()
        self.optimizer.step()
        with torch.no_grad():
            ok, n = self.count_correct(pred, batch)
        return loss.detach(), ok, n, gnorm.detach()

    def forward(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss, predictions) of one step's forward: the task's (an ensemble's: one a member)."""
        return self.task.train_forward(self.model, batch)

    def clip_gradients(self) -> torch.Tensor:
        return torch.nn.utils.clip_grad_norm_(self.params, self.cfg.train.clip)

    def count_correct(self, pred: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        ok = self.task.correct(pred, batch)
        # no host→device copy
        n = torch.full((), ok.numel(), device=ok.device) if batch.mask is None else batch.mask.sum()
        return ok.sum(), n

    def next_batch(self) -> Batch:
        return self.sample(self.cfg.train.batch_size, self.generator, self.device)

    def run_dirs(self) -> list[Path]:
        """The run directories this trainer writes (one; an ensemble's members, ``engine.ensemble``)."""
        return [self.run_dir]

    def save(self) -> None:
        if self.is_main:
            try:
                save_checkpoint(self.run_dir, self.step, self.state())
                if self.keep_checkpoints == "last":
                    prune_checkpoints(self.run_dir)
                else:
                    drop_unscheduled(self.run_dir, self.cfg.train, self.step, self.extra)
            except NonFiniteState as e:
                ckpts = list_checkpoints(self.run_dir)
                kept = f"its last checkpoint (step {ckpts[-1][0]}) is kept" if ckpts else ("no checkpoint had been "
                                                                                           "written yet")
                raise TrainingStopped(f"{e}; the run stopped there and {kept}; lower train.lr or train.weight_decay, "
                                      f"then --resume or --force") from None

    def resume_command(self) -> str:
        """The command that continues this run: an extension's, a language model's or a plain run's."""
        cfg = self.cfg
        if cfg.model.frozen_vocab is not None and "extended_from" in self.extra:
            return (f"posrnn extend-vocab {self.extra['extended_from']} --extra-vocab "
                    f"{cfg.task.vocab_size - cfg.model.frozen_vocab} --iterations {cfg.train.iterations} "
                    f"--seed {cfg.train.seed} --out {self.run_dir} --resume")
        if cfg.task.data:  # a corpus: the language model's command
            return f"posrnn lm train --data {cfg.task.data} --out {self.run_dir} --resume"
        return f"posrnn train --out {self.run_dir} --resume"

    def _step(self, batch, kept: Callable[[], str]):
        """One training step; an out-of-memory or failed step stops the run in one line (``kept``
        says which checkpoint remains)."""
        try:
            return self.train_step(batch)
        except torch.OutOfMemoryError:
            raise TrainingStopped(f"out of memory at step {self.step + 1}; the run stopped there and {kept()}; "
                                  f"lower train.batch_size or the model size, then --resume") from None
        except RuntimeError as e:  # e.g. an update too large for float32
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
            raise TrainingStopped(f"training step {self.step + 1} failed ({first}); the run stopped there and "
                                  f"{kept()}; check the config (train.lr, train.clip), then --resume or "
                                  "--force") from None

    def _log(self, sums: torch.Tensor, since: int, t0: float, check_finite: Callable[[], None]) -> dict:
        """The log line of the steps since the last one (the loop's host sync): summed over
        processes, checked finite, appended to metrics.jsonl by the main process (one line per
        run directory: an ensemble's ``sums`` hold a row per member); ``sums`` reset."""
        if self.world_size > 1:
            torch.distributed.all_reduce(sums)  # the global batch's figures
        s = sums.tolist()  # the loop's host sync, every log_every steps
        check_finite()
        # lr: a tensor under cuda_graph
        lr, elapsed = float(self.scheduler.get_last_lr()[0]), round(time.perf_counter() - t0, 3)
        lines = [{"step": self.step, "loss": r[0] / since / self.world_size, "accuracy": r[1] / max(r[2], 1.0),
                  "grad_norm": r[3] / since / self.world_size, "lr": lr, "elapsed_s": elapsed}
                 for r in (s if sums.dim() == 2 else [s])]
        if self.is_main:
            for run_dir, line in zip(self.run_dirs(), lines):
                with open(run_dir / METRICS_FILE, "a") as f:
                    f.write(json.dumps(line) + "\n")
        sums.zero_()
        self.log_since = 0
        return lines[0] if len(lines) == 1 else {**lines[0], "loss": sum(x["loss"] for x in lines) / len(lines),
                                                 "accuracy": sum(x["accuracy"] for x in lines) / len(lines)}

    def _interrupted(self, signal_name: str, saved_step: int, check_finite: Callable[[], None]) -> None:
        """A stop signal: a checkpoint at this step (unless one is there), then ``Interrupted``
        with the command that resumes."""
        check_finite()
        if saved_step != self.step:
            self.save()
        raise Interrupted(f"{signal_name}: stopped at step {self.step} of {self.cfg.train.iterations} with a "
                          f"checkpoint there; continue with: {self.resume_command()}", step=self.step,
                          signal=signal_name)

    def fit(self, stop_after: Optional[int] = None, progress: bool = True) -> dict:
        """Train to ``train.iterations`` (``stop_after``: at most that many more steps): prepare the logs
        and the untrained model's checkpoint, run the loop (``_loop``), keep the work of a run stopped
        early, report (the run's summary)."""
        t = self.cfg.train
        if self.is_main:
            for run_dir in self.run_dirs():
                truncate_log(run_dir / METRICS_FILE, self.step)
        start_step, t0 = self.step, time.perf_counter()
        watch = FitWatch(self)
        if t.checkpoint_initial and self.step == 0 and not list_checkpoints(self.run_dir):
            self.save()  # the untrained model, where a stability curve starts
        last = self._loop(watch, start_step, t0, stop_after, progress)
        if self.step != watch.saved_step:
            watch.check_finite()
            self.save()  # stopped early (--stop-after): keep the work
        elapsed = time.perf_counter() - t0
        return {"run_dir": str(self.run_dir), "step": self.step, "iterations": t.iterations,
                "finished": self.step >= t.iterations, "seconds": elapsed,
                "it_per_s": (self.step - start_step) / elapsed if elapsed > 0 else float("nan"), "last": last}

    def _loop(self, watch: FitWatch, start_step: int, t0: float, stop_after: Optional[int], progress: bool) -> dict:
        """The steps up to ``train.iterations`` (or ``stop_after`` of them), each summed into the log
        line, logged and checkpointed on schedule (or on ``watch``'s clock) and stopped by a signal;
        returns the last log line."""
        t = self.cfg.train
        sums = self.log_sums  # loss, correct, count, grad norm since the last log line (in place)
        last: dict = {}
        bar = ProgressBar(progress and self.is_main, t.iterations, self.step)
        self.model.train()
        with bar as (update, _), stop_requests(self.world_size == 1) as stop:  # read after each step
            while self.step < t.iterations:
                loss, n_ok, n, gnorm = self._step(self.next_batch(), watch.kept)
                watch.record(loss, gnorm)
                sums += torch.stack([loss.double(), n_ok.double(), n.double(), gnorm.double()], dim=-1)
                self.step += 1
                self.log_since += 1
                since = self.log_since
                if self.step % t.log_every == 0 or self.step == t.iterations:
                    last = self._log(sums, since, t0, watch.check_finite)
                    update(self.step, last)
                if watch.checkpoint_due(self.step):
                    watch.check_finite()
                    self.save()
                    watch.saved(self.step)
                if stop["signal"] is not None:
                    self._interrupted(stop["signal"], watch.saved_step, watch.check_finite)
                if stop_after is not None and self.step - start_step >= stop_after:
                    break
        return last


class FitWatch:
    """What one ``Trainer.fit`` keeps an eye on besides the model: the first step with a non-finite
    loss or gradient (on the device, read only at the loop's host syncs) and the last checkpoint
    written (its step, and when: ``train.checkpoint_minutes`` adds one once that long has passed)."""

    def __init__(self, trainer: Trainer):
        t = trainer.cfg.train
        self.run_dir, self.train = trainer.run_dir, t
        self.counter = torch.full((), trainer.step, device=trainer.device, dtype=torch.long)  # the step, on the device
        self.first_bad = torch.full((), -1, device=trainer.device, dtype=torch.long)  # first non-finite step
        self.saved_step = trainer.step
        self.every_s = t.checkpoint_minutes * 60 if t.checkpoint_minutes is not None else None
        self.saved_at = time.monotonic()

    def record(self, loss: torch.Tensor, gnorm: torch.Tensor) -> None:
        """One more step: its loss and gradient norm checked on the device (no host sync)."""
        self.counter += 1
        bad = ~(torch.isfinite(loss) & torch.isfinite(gnorm)).all()  # any member's, in an ensemble
        self.first_bad = torch.where(bad & (self.first_bad < 0), self.counter, self.first_bad)

    def kept(self) -> str:
        """Which checkpoint a stopped run keeps (each was checked for non-finite values when written)."""
        return (f"its last checkpoint (step {self.saved_step}) is kept" if list_checkpoints(self.run_dir)
                else "no checkpoint had been written yet")

    def check_finite(self) -> None:
        """Stop the run at the first non-finite step, if there was one (one host sync)."""
        bad = int(self.first_bad)
        if bad >= 0:
            raise TrainingStopped(
                f"non-finite loss or gradient at step {bad}: the run stopped there and {self.kept()}; "
                f"lower train.lr or train.clip, then --resume or --force"
            )

    def checkpoint_due(self, step: int) -> bool:
        """Whether ``step`` is checkpointed: on the schedule, the last one, or the wall clock's."""
        timed = self.every_s is not None and time.monotonic() - self.saved_at >= self.every_s
        return step % self.train.checkpoint_every == 0 or step == self.train.iterations or timed

    def saved(self, step: int) -> None:
        self.saved_step, self.saved_at = step, time.monotonic()


# ---- training a run --------------------------------------------------------------------
def build_run(cfg: RunConfig, rank: int = 0, world_size: int = 1) -> tuple[Task, nn.Module]:
    """Validate ``cfg`` and build its task (for process ``rank`` of ``world_size``) and freshly
    initialised model (seeded)."""
    check_train_config(cfg.train)
    task = build_task(cfg.task, rank=rank, world_size=world_size)
    # the parts that grow with the config, before any is allocated (on a GPU, the batches live in its memory:
    # the host holds the model and test set); the continuous task takes vectors of task.dim, not ids
    parts = run_parts(cfg, task.max_steps, task.max_steps - (task.output_start or 0),
                      cfg.task.dim if task.continuous else task.n_input_ids, task.n_outputs, task.head_chunk)
    check_run_fits(parts if cfg.train.device == "cpu" or not torch.cuda.is_available() else parts[:2],
                   cfg.task.n_test)
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg, task)
    return task, model


def train(
    cfg: RunConfig,
    out_dir: Path,
    resume: bool = False,
    force: bool = False,
    stop_after: Optional[int] = None,
    progress: bool = True,
    keep_checkpoints: str = "all",
    on_start: Optional[Callable[[list[str]], None]] = None,
    given: Optional[set[str]] = None,
) -> dict:
    """Train ``cfg`` into ``out_dir`` (see ``posrnn train --help``); returns a summary. A new run
    is fitted to this machine first (``common.host.machine.fit_to_machine``; ``given``: the keys the
    user set, else those that differ from the defaults). ``keep_checkpoints="last"`` keeps only
    the latest checkpoint (the sweep's policy); ``on_start(header)`` is called once every check
    has passed, as training starts, with the run header's lines.

    Everything is validated before the disk is touched; under ``torchrun`` rank 0 owns the
    directory and every rank resumes from the same checkpoint."""
    out_dir = Path(out_dir)
    if stop_after is not None and stop_after < 1:
        raise PosrnnError(f"--stop-after must be at least 1, got {stop_after}")
    rank, world_size = join_process_group()
    device = local_device(resolve_device(cfg.train.device), world_size)
    header = fit_to_machine(cfg, device.type, given, new_run=not (resume and (out_dir / CONFIG_FILE).is_file()))
    try:
        task, model = build_run(cfg, rank, world_size)
    except (RuntimeError, ValueError, OverflowError, MemoryError) as e:  # sizes torch cannot allocate
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        raise PosrnnError(f"cannot build this run ({first}); check the task and model sizes") from None
    check_fast_paths(cfg.train, device, world_size)
    check_machine(cfg.train, task, device)
    def fit(trainer: Trainer) -> dict:
        return {**trainer.fit(stop_after=stop_after, progress=progress), "n_parameters": count_parameters(model),
                "world_size": world_size}

    if rank != 0:  # rank 0 did the checks and owns the directory
        ckpts = list_checkpoints(out_dir) if resume else []
        ckpt, res = (load_checkpoint(ckpts[-1][1]) if ckpts else None), Resumption()
        return fit(_trainer(cfg, out_dir, task, model, device, world_size, ckpt, res, keep_checkpoints))
    with owned_run_dir(out_dir, f"posrnn train --out {out_dir}"):
        ckpt, res = open_run(out_dir, cfg, resume, force)
        trainer = _trainer(cfg, out_dir, task, model, device, world_size, ckpt, res, keep_checkpoints)
        announce = (lambda: on_start(header)) if on_start is not None else None
        return start_and_fit(out_dir, cfg, force, ckpt is None, ("loop",), device.type, announce, lambda: fit(trainer))


def _trainer(cfg, out_dir, task, model, device, world_size, ckpt, res, keep_checkpoints: str = "all") -> Trainer:
    """The run's Trainer: threads set, the model on its device (wrapped for DDP under torchrun),
    batches drawn outside the held-out set, and the checkpoint ``ckpt`` loaded when resuming."""
    setup_threads(cfg.train.threads)
    model.to(device)
    if task.holds_out:
        heldout = HeldOut(task.test_set(device))
        sample = lambda n, g, d: heldout.sample(task, n, g, d)
    else:
        sample = task.sample
    wrapped = model
    if world_size > 1:
        from torch.nn.parallel import DistributedDataParallel

        wrapped = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    trainer = Trainer(cfg, out_dir, wrapped, task, sample, device, keep_checkpoints=keep_checkpoints)
    if ckpt is not None:
        trainer.load(ckpt, res.checkpoint)
    if res.extended_from is not None:
        trainer.extra.setdefault("extensions", []).append(
            {"at_step": trainer.step, "iterations_before": res.extended_from, "iterations_after": cfg.train.iterations})
    return trainer
