"""The one training loop (SPEC §2), shared by every task and model.

Adam (betas configurable), gradient-norm clipping, linear warm-up from 0 then cosine decay
to 0 (``LambdaLR``), a ``metrics.jsonl`` log every ``log_every`` steps (the only host
syncs in the loop), atomic checkpoints every ``checkpoint_every`` steps and at the end
holding model, optimiser, scheduler and RNG states, so ``resume`` continues bit-exactly.

Fast paths, each a ``train.*`` switch: ``amp`` (bf16 autocast, fp32 master weights),
``fused_adam`` (Adam's fused kernel; on by default on CUDA) and ``cuda_graph`` (the whole
update replayed from one CUDA graph, ``GraphedStep``). ``posrnn bench`` measures them.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Optional

import torch
from torch import nn

from .checkpoint import (
    CKPT_DIR,
    atomic_write_text,
    list_checkpoints,
    load_checkpoint,
    read_run_config,
    save_checkpoint,
)
from .config import RunConfig, TrainConfig, config_diff, dump_yaml
from .errors import PosrnnError
from .models import build_model, count_parameters
from .tasks import Batch, HeldOut, Task, build_task

RUN_FILES = ("config.yaml", "metrics.jsonl", "eval.json", "eval_sequences.npz", CKPT_DIR)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise PosrnnError(f"unknown device {name!r}; use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise PosrnnError(f"device {name!r} asked for but CUDA is not available here; use --device cpu or auto")
    return device


def lr_factor(step: int, warmup: int, total: int) -> float:
    """Multiplier of the base lr for the update after ``step`` updates: linear warm-up
    from 0 over ``warmup`` updates, then a cosine decay reaching 0 at ``total``."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def make_optimizer(params: Iterable[nn.Parameter], t: TrainConfig, device: torch.device) -> torch.optim.Adam:
    """Adam; fused where ``t.fused_adam`` says (None: on CUDA only). Under ``t.cuda_graph`` it is
    ``capturable`` and, after ``make_scheduler``, ``graph_lr`` turns its lr into a device tensor."""
    fused = t.fused_adam if t.fused_adam is not None else device.type == "cuda"
    return torch.optim.Adam(
        params, lr=t.lr, betas=t.betas, eps=t.eps, weight_decay=t.weight_decay,
        fused=True if fused else None, capturable=t.cuda_graph and device.type == "cuda",
    )


def graph_lr(opt: torch.optim.Optimizer, device: torch.device) -> None:
    """Hold each group's lr in a device tensor: a captured step reads it, and ``LambdaLR`` (whose
    base lrs stay floats) fills it in place each step, with no host sync."""
    for g in opt.param_groups:
        g["lr"] = torch.tensor(float(g["lr"]), device=device)


def check_fast_paths(t: TrainConfig, device: torch.device, world: int = 1) -> None:
    """Refuse fast paths this device or launch cannot run, with a one-line reason."""
    if t.cuda_graph and device.type != "cuda":
        raise PosrnnError(f"train.cuda_graph captures the update in a CUDA graph and needs a CUDA device, not {device.type}; drop it")
    if t.cuda_graph and world > 1:
        raise PosrnnError("train.cuda_graph is single-process only; drop it under torchrun")


def make_scheduler(opt: torch.optim.Optimizer, t: TrainConfig) -> torch.optim.lr_scheduler.LambdaLR:
    warmup, total = t.warmup, t.iterations
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, warmup, total))


def check_train_config(t: TrainConfig) -> None:
    for key in ("iterations", "batch_size", "checkpoint_every", "log_every", "eval_batch_size"):
        if getattr(t, key) < 1:
            raise PosrnnError(f"train.{key} must be at least 1, got {getattr(t, key)}")
    if not 0 <= t.warmup < t.iterations:
        raise PosrnnError(
            f"warm-up ({t.warmup}) must be shorter than the run ({t.iterations} iterations); pass a smaller --warmup"
        )
    if t.lr <= 0 or t.clip <= 0:
        raise PosrnnError("train.lr and train.clip must be positive")
    if not all(0 <= b < 1 for b in t.betas):
        raise PosrnnError(f"Adam betas must lie in [0, 1), got {list(t.betas)}")
    if t.threads is not None and t.threads < 1:
        raise PosrnnError(f"train.threads must be at least 1, got {t.threads}")


# ---- the run directory -----------------------------------------------------------------
def prepare_run_dir(run_dir: Path, cfg: RunConfig, resume: bool, force: bool) -> Optional[Path]:
    """Check ``run_dir`` against ``cfg``; return the checkpoint to resume from (or None).

    Refuses (without touching anything) a directory that holds another run, unless
    ``force``; ``resume`` needs a matching config and at least one checkpoint."""
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise PosrnnError(f"--out {run_dir} is a file, not a directory; pass another --out")
    saved = read_run_config(run_dir) if run_dir.is_dir() else None
    ckpts = list_checkpoints(run_dir)
    if resume:
        if force:
            raise PosrnnError("--resume and --force contradict each other; pass one")
        if saved is None or not ckpts:
            raise PosrnnError(f"nothing to resume in {run_dir}: no saved config or checkpoint; drop --resume")
        diff = config_diff(saved, cfg)
        if diff:
            shown = ", ".join(f"{k}: saved {saved.flat()[k]!r} vs now {cfg.flat()[k]!r}" for k in diff[:3])
            raise PosrnnError(f"--resume with a config that contradicts the saved run ({shown}); drop those options or use another --out")
        return ckpts[-1][1]
    occupied = run_dir.is_dir() and any((run_dir / name).exists() for name in RUN_FILES)
    if occupied and not force:
        what = "a different run" if saved is not None and config_diff(saved, cfg) else "a run"
        raise PosrnnError(f"{run_dir} already holds {what}; pass --resume to continue it, --force to replace it, or another --out")
    return None


def clear_run_dir(run_dir: Path) -> None:
    for name in RUN_FILES:
        p = Path(run_dir) / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def truncate_log(path: Path, step: int) -> None:
    """Drop log lines written after ``step`` (a crash after the last checkpoint)."""
    if not path.is_file():
        return
    lines = [ln for ln in path.read_text().splitlines() if ln.strip() and json.loads(ln)["step"] <= step]
    atomic_write_text(path, "".join(ln + "\n" for ln in lines))


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

    def __post_init__(self):
        t = self.cfg.train
        self.module = getattr(self.model, "module", self.model)  # unwrapped under DistributedDataParallel
        self.is_main = not (torch.distributed.is_available() and torch.distributed.is_initialized()) or torch.distributed.get_rank() == 0
        self.params = list(self.params if self.params is not None else self.model.parameters())
        world = torch.distributed.get_world_size() if torch.distributed.is_available() and torch.distributed.is_initialized() else 1
        check_fast_paths(t, self.device, world)
        self.optimizer = make_optimizer(self.params, t, self.device)
        self.scheduler = make_scheduler(self.optimizer, t)
        self.graphed = None
        if t.cuda_graph:
            graph_lr(self.optimizer, self.device)
            self.graphed = GraphedStep(self)
        self.generator = torch.Generator(device=self.device).manual_seed(t.seed)
        self.step = 0

    def state(self) -> dict:
        return {
            "config": self.cfg.to_dict(),
            "model": self.module.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": {"device": self.device.type, "train": self.generator.get_state(), "torch": torch.get_rng_state()},
            "n_parameters": count_parameters(self.module),
            "extra": self.extra,
        }

    def load(self, ckpt: dict) -> None:
        if ckpt["rng"]["device"] != self.device.type:
            raise PosrnnError(
                f"the checkpoint's run used device type {ckpt['rng']['device']!r}; resume it with --device {ckpt['rng']['device']}"
            )
        self.module.load_state_dict(ckpt["model"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.scheduler.load_state_dict(ckpt["scheduler"])
        if self.graphed is not None:
            graph_lr(self.optimizer, self.device)  # the checkpoint's lr tensor was loaded on the CPU
        self.generator.set_state(ckpt["rng"]["train"])
        torch.set_rng_state(ckpt["rng"]["torch"])
        self.step = int(ckpt["step"])

    def train_step(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One update, then the lr schedule; returns (loss, n_correct, n_targets) as device
        tensors (no sync). Under ``cuda_graph`` they are the graph's static outputs: read them
        before the next step."""
        out = self.graphed(batch) if self.graphed is not None else self.update(batch)
        self.scheduler.step()
        return out

    def update(self, batch: Batch, autocast_cache: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Forward, loss, backward, clipping and Adam: the part ``GraphedStep`` captures."""
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.cfg.train.amp, cache_enabled=autocast_cache):
            out = self.model(batch.inputs, batch.out_index, batch.query)
            loss = self.task.loss(out.float(), batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, self.cfg.train.clip)
        self.optimizer.step()
        with torch.no_grad():
            ok = self.task.correct(self.task.predict(out.detach()), batch)
            n = torch.full((), ok.numel(), device=ok.device) if batch.mask is None else batch.mask.sum()  # no host→device copy
        return loss.detach(), ok.sum(), n

    def fit(self, stop_after: Optional[int] = None, progress: bool = True) -> dict:
        t = self.cfg.train
        log_path = self.run_dir / "metrics.jsonl"
        if self.is_main:
            truncate_log(log_path, self.step)
        start_step, t0 = self.step, time.perf_counter()
        sums = torch.zeros(3, device=self.device, dtype=torch.float64)  # loss, correct, count
        since = 0
        last = {}
        bar = _progress(progress and self.is_main, t.iterations, self.step)
        self.model.train()
        with bar as (update, _):
            while self.step < t.iterations:
                batch = self.sample(t.batch_size, self.generator, self.device)
                loss, n_ok, n = self.train_step(batch)
                sums += torch.stack([loss.double(), n_ok.double(), n.double()])
                self.step += 1
                since += 1
                if self.step % t.log_every == 0 or self.step == t.iterations:
                    world = 1
                    if torch.distributed.is_available() and torch.distributed.is_initialized():
                        torch.distributed.all_reduce(sums)  # the global batch's figures
                        world = torch.distributed.get_world_size()
                    s = sums.tolist()  # the loop's one host sync, every log_every steps
                    last = {
                        "step": self.step,
                        "loss": s[0] / since / world,
                        "accuracy": s[1] / max(s[2], 1.0),
                        "lr": float(self.scheduler.get_last_lr()[0]),  # a tensor under cuda_graph
                        "elapsed_s": round(time.perf_counter() - t0, 3),
                    }
                    if self.is_main:
                        with open(log_path, "a") as f:
                            f.write(json.dumps(last) + "\n")
                    sums.zero_()
                    since = 0
                    update(self.step, last)
                if self.is_main and (self.step % t.checkpoint_every == 0 or self.step == t.iterations):
                    save_checkpoint(self.run_dir, self.step, self.state())
                if stop_after is not None and self.step - start_step >= stop_after:
                    break
        if self.is_main and self.step % t.checkpoint_every and self.step != t.iterations:
            save_checkpoint(self.run_dir, self.step, self.state())  # stopped early: keep the work
        elapsed = time.perf_counter() - t0
        steps = self.step - start_step
        return {
            "run_dir": str(self.run_dir),
            "step": self.step,
            "iterations": t.iterations,
            "finished": self.step >= t.iterations,
            "seconds": elapsed,
            "it_per_s": steps / elapsed if elapsed > 0 else float("nan"),
            "last": last,
        }


class GraphedStep:
    """``train.cuda_graph``: the update (forward, loss, backward, clipping, Adam) captured once in
    a CUDA graph and replayed on static copies of every later batch, so a step costs one
    launch instead of hundreds. The lr schedule stays outside (``graph_lr``).

    Steps 1 … ``WARMUP`` run eagerly on a side stream (cuDNN/cuBLAS set-up; Adam creates its
    state). The next step is first run eagerly and undone, then captured and replayed: the two
    updates must agree (``check``) or the run stops — the capture is verified on the device it
    runs on. Batches must keep one set of fields and shapes.

    NOT YET RUN ON A GPU: written without one; CPU tests drive this logic through a stand-in
    for the capture (``capture`` argument), which cannot show that CUDA captures it."""

    WARMUP = 3

    def __init__(self, trainer: "Trainer", capture: Optional[Callable] = None):
        self.trainer = trainer
        self.capture = capture or cuda_capture
        self.calls = 0
        self.replay: Optional[Callable[[], None]] = None
        self.static: dict[str, torch.Tensor] = {}
        self.out: tuple = ()

    def __call__(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        self.calls += 1
        if self.replay is not None:
            self._copy_in(batch)
            self.replay()
            return self.out
        if self.calls <= self.WARMUP:
            with side_stream(self.trainer.device):
                return self.trainer.update(batch, autocast_cache=False)
        return self._capture(batch)

    def _copy_in(self, batch: Batch) -> None:
        got = batch._tensors()
        if got.keys() != self.static.keys() or any(v.shape != self.static[k].shape for k, v in got.items()):
            raise PosrnnError("train.cuda_graph needs batches of one fixed set of fields and shapes; this task's vary: drop train.cuda_graph")
        for k, v in got.items():
            self.static[k].copy_(v)

    def _capture(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        tr = self.trainer
        self.static = {k: v.clone() for k, v in batch._tensors().items()}
        static_batch = replace(batch, **self.static)
        before = snapshot(tr)
        with side_stream(tr.device):
            eager_loss = tr.update(static_batch, autocast_cache=False)[0].clone()
        eager = [p.detach().clone() for p in tr.params]
        restore(tr, before)
        tr.optimizer.zero_grad(set_to_none=True)  # the captured backward allocates the grads in the graph's pool
        self.replay, self.out = self.capture(lambda: tr.update(static_batch, autocast_cache=False), tr.device)
        self.replay()
        self.check(before[0], eager, eager_loss)
        return self.out

    def check(self, start: list[torch.Tensor], eager: list[torch.Tensor], eager_loss: torch.Tensor) -> None:
        """The replayed update must match the eager one: the same loss, and parameter changes
        that differ by under 1% of their size (summed |Δ|; cuDNN/atomics reorder sums)."""
        graphed = [p.detach() for p in self.trainer.params]
        diff = sum(float((g - e).abs().sum()) for g, e in zip(graphed, eager))
        size = sum(float((e - s).abs().sum()) for e, s in zip(eager, start))
        loss, ref = float(self.out[0]), float(eager_loss)
        if not (abs(loss - ref) <= 1e-3 * abs(ref) + 1e-6 and diff <= 1e-2 * size + 1e-12):
            raise PosrnnError(f"train.cuda_graph: the captured update disagrees with the eager one (loss {loss:.6g} vs {ref:.6g}, "
                              f"update difference {diff:.3g} of {size:.3g}); drop train.cuda_graph")


def cuda_capture(fn: Callable[[], tuple], device: torch.device) -> tuple[Callable[[], None], tuple]:
    """Capture ``fn``'s kernels in a CUDA graph: (replay, the graph's static outputs)."""
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            out = fn()
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise PosrnnError(f"train.cuda_graph: capturing the update failed ({first}); drop train.cuda_graph") from None
    return graph.replay, out


@contextmanager
def side_stream(device: torch.device):
    """Run the block on a fresh CUDA stream ordered after the current one (no-op off CUDA)."""
    if device.type != "cuda":
        yield
        return
    main, side = torch.cuda.current_stream(device), torch.cuda.Stream(device)
    side.wait_stream(main)
    with torch.cuda.stream(side):
        yield
    main.wait_stream(side)


def snapshot(trainer: "Trainer") -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Copies of the trained parameters and of every optimizer state tensor."""
    states = [v for st in trainer.optimizer.state.values() for v in st.values() if torch.is_tensor(v)]
    return [p.detach().clone() for p in trainer.params], [v.clone() for v in states]


def restore(trainer: "Trainer", snap: tuple[list[torch.Tensor], list[torch.Tensor]]) -> None:
    """Copy a ``snapshot`` back in place (the same tensors, so a capture still points at them)."""
    states = [v for st in trainer.optimizer.state.values() for v in st.values() if torch.is_tensor(v)]
    with torch.no_grad():
        for p, v in zip(trainer.params, snap[0]):
            p.copy_(v)
        for s, v in zip(states, snap[1]):
            s.copy_(v)


class _progress:
    """A rich progress bar with loss/accuracy/it/s on a terminal; silent otherwise."""

    def __init__(self, enabled: bool, total: int, start: int):
        from rich.console import Console

        self.console = Console(stderr=True)
        self.enabled = enabled and self.console.is_terminal
        self.total, self.start = total, start

    def __enter__(self):
        if not self.enabled:
            return (lambda step, m: None), None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.p = Progress(
            TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]} acc {task.fields[acc]} {task.fields[its]} it/s"),
            TimeRemainingColumn(), console=self.console, transient=False,
        )
        self.p.__enter__()
        self.tid = self.p.add_task("train", total=self.total, completed=self.start, loss="-", acc="-", its="-")
        t0, s0 = time.perf_counter(), self.start

        def update(step, m):
            its = (step - s0) / max(time.perf_counter() - t0, 1e-9)
            self.p.update(self.tid, completed=step, loss=f"{m['loss']:.4f}", acc=f"{m['accuracy']:.3f}", its=f"{its:.1f}")

        return update, self.p

    def __exit__(self, *exc):
        if self.enabled:
            self.p.__exit__(*exc)
        return False


# ---- synthetic-task training -------------------------------------------------------------
def setup_threads(t: TrainConfig) -> None:
    if t.threads is not None:
        torch.set_num_threads(t.threads)


def build_run(cfg: RunConfig) -> tuple[Task, nn.Module]:
    """Validate ``cfg`` and build its task and freshly initialised model (seeded)."""
    check_train_config(cfg.train)
    task = build_task(cfg.task)
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
) -> dict:
    """Train ``cfg`` into ``out_dir`` (see ``posrnn train --help``); returns a summary."""
    out_dir = Path(out_dir)
    rank, world = distributed_rank()
    task, model = build_run(cfg)  # validates everything before the disk is touched
    task.rank, task.world_size = rank, world
    device = resolve_device(cfg.train.device)
    if world > 1 and device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    check_fast_paths(cfg.train, device, world)
    resume_from = prepare_run_dir(out_dir, cfg, resume, force) if rank == 0 else _latest(out_dir, resume)
    ckpt = load_checkpoint(resume_from) if resume_from else None  # corrupt → error, nothing changed
    if stop_after is not None and stop_after < 1:
        raise PosrnnError(f"--stop-after must be at least 1, got {stop_after}")
    setup_threads(cfg.train)
    if rank == 0:
        if force:
            clear_run_dir(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out_dir / "config.yaml", dump_yaml(cfg))
    model.to(device)
    if task.holds_out:
        heldout = HeldOut(task.test_set(device))
        sample = lambda n, g, d: heldout.sample(task, n, g, d)  # noqa: E731
    else:
        sample = task.sample
    wrapped = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        wrapped = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    trainer = Trainer(cfg, out_dir, wrapped, task, sample, device)
    if ckpt is not None:
        trainer.load(ckpt)
    summary = trainer.fit(stop_after=stop_after, progress=progress)
    summary["n_parameters"] = count_parameters(model)
    summary["world_size"] = world
    return summary


def distributed_rank() -> tuple[int, int]:
    """(rank, world size). Under ``torchrun`` (WORLD_SIZE > 1) this joins the process
    group: NCCL on CUDA, gloo on CPU."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return dist.get_rank(), dist.get_world_size()


def _latest(out_dir: Path, resume: bool) -> Optional[Path]:
    """Non-zero ranks: the checkpoint rank 0 resumes from (rank 0 did the checks)."""
    ckpts = list_checkpoints(out_dir) if resume else []
    return ckpts[-1][1] if ckpts else None

