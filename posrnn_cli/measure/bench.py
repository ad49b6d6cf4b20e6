"""``posrnn bench``: how fast one training iteration, the sampler and the stability analysis
are, measured side by side with a plain reference-style loop in the same run, so every
speed-up is a measured ratio.

The reference loop is the papers' reference code's style, written here as the baseline:
each sequence drawn token by token in Python (``random.randint``), rejected against a Python
set of the held-out tuples, stacked into a tensor; the same model; fp32; plain (for-loop)
Adam and clipping; a ``.item()`` of loss and accuracy every step, as that code logs them.
The sampler is also timed against a second baseline, the reference code's own way of drawing
(``RefCodeSampler``: a ``torch.randint`` per sequence, compared with the whole held-out tensor,
one ``.item()`` per draw, stacked): slower than the Python-set sampler, so the ratio against
the latter is the stricter of the two, and both are reported.

Figures: ms/iteration (median of the timed iterations after warm-up; CUDA synchronised
around each), input tokens/s, achieved TFLOP/s (forward + backward, counted analytically
for the RNNs, by ``torch.utils.flop_counter`` otherwise) and its share of the device's
dense peak where the device is known, peak memory (CUDA: allocator peak; CPU: the
process's max RSS), sampler sequences/s, stability triplets/s, and the aggregate throughput
of k concurrent training processes on one device.
"""

from __future__ import annotations

import datetime
import random
import resource
import statistics
import time
from typing import Callable, Optional

import torch
from torch import nn

from ..common.settings.config import RunConfig
from ..common.errors import PosrnnError
from ..models import build_model, core_spec
from ..tasks import Batch, HeldOut, build_task
from ..engine.device import resolve_device, setup_threads
from ..engine.optim import check_fast_paths, lr_factor
from ..engine.recipe import check_train_config
from ..engine.train import Trainer

# dense peak TFLOP/s: fp32 without tensor cores (torch's default for fp32 matmuls), bf16 with
PEAKS = (("H100 PCIe", {"fp32": 51.2, "bf16": 756.0}), ("H100", {"fp32": 67.0, "bf16": 989.0}),
         ("H200", {"fp32": 67.0, "bf16": 989.0}), ("A100", {"fp32": 19.5, "bf16": 312.0}))
PARTS = ("train", "sampler", "stability")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_side_by_side(fa: Callable[[], object], fb: Optional[Callable[[], object]], device: torch.device,
                       rounds: int, warmup: int, rounds_b: Optional[int] = None,
                       per_a: int = 1, per_b: int = 1) -> tuple[list[float], list[float]]:
    """Seconds per call of ``fa`` and ``fb``, timed in alternating blocks (``per_a`` calls of
    ``fa``, then ``per_b`` of ``fb``, for ``rounds`` rounds; ``fb`` only in the first
    ``rounds_b``) so that both see the same load on a shared machine. Blocks of several calls
    measure a sampler's continuous rate rather than its first call after the other's."""
    rounds_b = rounds if rounds_b is None else rounds_b
    for _ in range(warmup):
        fa()
        if fb:
            fb()
    sa, sb = [], []
    for i in range(rounds):
        for fn, out, n, per in ((fa, sa, rounds, per_a), (fb, sb, rounds_b, per_b)):
            if fn is None or i >= n:
                continue
            sync(device)
            t = time.perf_counter()
            for _ in range(per):
                fn()
            sync(device)
            out.append((time.perf_counter() - t) / per)
    return sa, sb


def analytic_flops(core: nn.Module, hidden_size: int, n_outputs: int, steps: int, outputs: int, batch: int) -> float:
    """Forward + backward FLOPs of one training step of a core that counts its own forward
    (``forward_flops``: the RNNs): 3 × (core + head) per sequence of ``steps`` inputs and
    ``outputs`` scored positions, times ``batch``; the embedding is free."""
    return 3.0 * (core.forward_flops(steps) + 2 * hidden_size * n_outputs * outputs) * batch


def flops_per_iteration(cfg: RunConfig, task, model: nn.Module, batch: Batch) -> float:
    """Forward + backward FLOPs of one training step (≈ 3 × forward; the embedding is free)."""
    if hasattr(model.core, "forward_flops"):  # analytic for the RNNs
        return analytic_flops(model.core, cfg.model.hidden_size, task.n_outputs, batch.inputs.shape[1],
                              batch.out_index.shape[1], len(batch))
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        out = model(batch.inputs, batch.out_index, batch.query)
        task.loss(out, batch).backward()
    model.zero_grad(set_to_none=True)
    return float(counter.get_total_flops())


def machine() -> str:
    """"2-core AMD EPYC 9B14"-style name of this CPU (Linux), else the platform's."""
    import contextlib
    import os
    import platform
    from pathlib import Path

    from ..common.host.machine import usable_cores

    with contextlib.suppress(OSError):  # no /proc (not Linux): fall back on platform's name
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{usable_cores()}-core {line.split(':', 1)[1].strip()}"
    return f"{os.cpu_count()}-core {platform.processor() or platform.machine()}"


def device_peak(device: torch.device, precision: str) -> Optional[float]:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, peaks in PEAKS:
        if key in name:
            return peaks[precision]
    return None


def peak_memory_mb(fn: Callable[[], object], device: torch.device) -> float:
    """MiB at the peak of one call of ``fn``: on CUDA the allocator's peak (everything then
    allocated); on CPU the process's max RSS so far (torch's CPU allocations are not counted
    separately), so call it before anything bigger is built."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        sync(device)
        return torch.cuda.max_memory_allocated(device) / 2**20
    fn()
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


# ---- the reference-style baseline -------------------------------------------------------------
class ReferenceSampler:
    """Each sequence drawn token by token in Python, rejected against a Python set of the
    held-out tuples, stacked into a tensor."""

    def __init__(self, task, test: Batch, seed: int = 0):
        self.task, self.rng = task, random.Random(seed)
        self.held = {tuple(r) for r in test.key.tolist()}

    def sample(self, n: int, device: torch.device) -> Batch:
        V, L, rows = self.task.V, self.task.L, []
        while len(rows) < n:
            x = [self.rng.randint(0, V - 1) for _ in range(L)]
            if tuple(x) not in self.held:
                rows.append(x)
        return self.task.build(torch.tensor(rows, device=device))


class RefCodeSampler:
    """The papers' reference code's way of drawing a training sequence: one ``torch.randint``
    of length L per sequence on the CPU, kept only if it differs from every held-out row
    (an elementwise comparison with the whole held-out tensor and one ``.item()``), the
    sequences of a batch then stacked, as a DataLoader's default collate does."""

    def __init__(self, task, test: Batch, seed: int = 0):
        self.task, self.gen = task, torch.Generator().manual_seed(seed)
        self.held = test.key.cpu()  # (N L)

    def one(self) -> torch.Tensor:
        V, L = self.task.V, self.task.L
        while True:
            x = torch.randint(V, (L,), generator=self.gen)  # (L)
            if (x != self.held).any(dim=-1).all().item():
                return x

    def sample(self, n: int, device: torch.device) -> Batch:
        return self.task.build(torch.stack([self.one() for _ in range(n)]).to(device))  # (B L) tokens


class ReferenceLoop:
    """A plain PyTorch training loop over ``ReferenceSampler``: the same model (same seed),
    fp32, for-loop Adam and clipping, the same lr schedule, and ``.item()`` of loss and
    accuracy every step."""

    def __init__(self, cfg: RunConfig, task, test: Batch, device: torch.device):
        t = cfg.train
        self.cfg, self.device, self.B = cfg, device, t.batch_size
        torch.manual_seed(t.seed)
        self.model = build_model(cfg, task).to(device)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=t.lr, betas=t.betas, eps=t.eps,
                                    weight_decay=t.weight_decay, foreach=False, fused=False)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: lr_factor(s, t.warmup_steps, t.iterations))
        self.sampler = ReferenceSampler(task, test, t.seed)
        self.log = {"loss": 0.0, "accuracy": 0.0}

    def step(self) -> None:
        batch = self.sampler.sample(self.B, self.device)
        self.opt.zero_grad()
        logits = self.model(batch.inputs, batch.out_index)  # (B K V)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), batch.targets.flatten())
        self.log["loss"] += loss.item()
        self.log["accuracy"] += (logits.argmax(-1) == batch.targets).float().mean().item()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.train.clip, foreach=False)
        self.opt.step()
        self.sched.step()


# ---- posrnn's path -----------------------------------------------------------------------------
def fast_loop(cfg: RunConfig, task, held: HeldOut, device: torch.device) -> tuple[Trainer, Callable[[], None]]:
    """posrnn's training loop body: draw on the device with held-out exclusion, update,
    accumulate the log sums on the device (as ``Trainer.fit`` does between log lines)."""
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg, task).to(device)
    trainer = Trainer(cfg, _scratch_dir(), model, task, lambda n, g, d: held.sample(task, n, g, d), device)
    sums = torch.zeros(4, device=device, dtype=torch.float64)  # loss, correct, count, grad norm

    def step() -> None:
        out = trainer.train_step(trainer.sample(cfg.train.batch_size, trainer.generator, device))
        sums.add_(torch.stack([v.double() for v in out]))

    return trainer, step


def check_bench_config(cfg: RunConfig, task) -> None:
    check_train_config(cfg.train)
    if not task.fixed_reverse_layout or cfg.task.rarity is not None:
        raise PosrnnError("posrnn bench measures the paper's fixed-length reverse task; drop the other task options")


def check_bench(cfg: RunConfig, task, iters: int, warmup: int, parts: tuple[str, ...],
                concurrent: tuple[int, ...]) -> torch.device:
    """Refuse, in one line and before anything runs, a bench that cannot run as asked; returns its device."""
    check_bench_config(cfg, task)
    if iters < 1 or warmup < 0:
        raise PosrnnError("--iters must be ≥ 1 and --warmup-iters ≥ 0")
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise PosrnnError(f"unknown bench part(s) {', '.join(sorted(unknown))}; choose from {', '.join(PARTS)}")
    device = resolve_device(cfg.train.device)
    check_concurrent(concurrent, device)
    check_fast_paths(cfg.train, device)
    return device


def bench(cfg: RunConfig, iters: int = 20, warmup: int = 5, reference: bool = True, stability_triplets: int = 8,
          chunk_size: int = 64, parts: tuple[str, ...] = PARTS, concurrent: tuple[int, ...] = ()) -> dict:
    """Measure ``cfg``'s training step, sampler, stability analysis (and the reference loop
    beside the first two); with ``concurrent``, the aggregate throughput of k training
    processes at once for each k. Returns one flat dict of figures."""
    task = build_task(cfg.task)
    device = check_bench(cfg, task, iters, warmup, parts, concurrent)
    setup_threads(cfg.train.threads)
    test = task.test_set(device)
    held = HeldOut(test)
    B = cfg.train.batch_size
    t = cfg.train
    r = _header(cfg, device, iters, warmup)
    trainer, step = fast_loop(cfg, task, held, device)
    example = held.sample(task, B, torch.Generator(device=device).manual_seed(0), device)
    flops = flops_per_iteration(cfg, task, trainer.model, example)
    r["flops_per_iter"] = flops
    peak = device_peak(device, "bf16" if t.amp else "fp32")

    def figures(label: str, secs: list[float]) -> None:
        s = statistics.median(secs)
        r[f"{label}_ms_per_iter"] = 1000 * s
        r[f"{label}_tokens_per_s"] = B * example.inputs.shape[1] / s
        r[f"{label}_tflops"] = flops / s / 1e12
        r[f"{label}_peak_share"] = flops / s / 1e12 / peak if peak else None

    if "train" in parts:  # warm up, then the peak memory of one step, each loop on its own
        for _ in range(warmup):
            step()
        r["train_peak_memory_mb"] = peak_memory_mb(step, device)
    before_ref = torch.cuda.memory_allocated(device) / 2**20 if device.type == "cuda" else 0.0
    ref = ReferenceLoop(cfg, task, test, device) if reference else None
    if "train" in parts:
        if ref:  # CUDA: the reference's peak above what our loop holds; CPU: one process, not separable
            for _ in range(warmup):
                ref.step()
            r["reference_peak_memory_mb"] = peak_memory_mb(ref.step,
                                                           device) - before_ref if device.type == "cuda" else None
        ours, theirs = timed_side_by_side(step, ref.step if ref else None, device, iters, 0)
        figures("train", ours)
        if ref:
            figures("reference", theirs)
            r["train_speedup"] = r["reference_ms_per_iter"] / r["train_ms_per_iter"]
    if "sampler" in parts:
        r.update(_sampler_figures(lambda: held.sample(task, B, trainer.generator, device), ref, task, test, cfg,
                                  device, iters))
    if "stability" in parts and stability_triplets:
        r.update(stability_speed(trainer.model, task, cfg, device, stability_triplets, chunk_size))
    if concurrent:
        r["concurrent"] = concurrent_throughput(cfg, concurrent, iters, warmup)
    return r


def _header(cfg: RunConfig, device: torch.device, iters: int, warmup: int) -> dict:
    """What a bench result was measured on: date, device, threads, torch, the fast paths, the config."""
    t = cfg.train
    return {
        "date": datetime.date.today().isoformat(),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "threads": torch.get_num_threads(), "torch": torch.__version__, "iters": iters, "warmup_iters": warmup,
        "fast_paths": {"amp_bf16": t.amp, "cuda_graph": t.cuda_graph,
                       "fused_adam": t.fused_adam if t.fused_adam is not None else device.type == "cuda",
                       "sync_free_sampler": device.type == "cuda"},
        "config": cfg.to_dict(),
    }


def _sampler_figures(draw, ref, task, test, cfg: RunConfig, device: torch.device, iters: int) -> dict:
    """Sequences per second of posrnn's sampler (``draw``), beside the reference loop's and the
    reference code's own sampler when ``ref`` is given."""
    B = cfg.train.batch_size
    ours, theirs = timed_side_by_side(draw, (lambda: ref.sampler.sample(B, device)) if ref else None, device,
                                      max(iters, 20), 3, rounds_b=max(3, min(iters, 20)), per_a=10)
    r = {"sampler_seqs_per_s": B / statistics.median(ours)}
    if ref:
        r["reference_sampler_seqs_per_s"] = B / statistics.median(theirs)
        r["sampler_speedup"] = r["sampler_seqs_per_s"] / r["reference_sampler_seqs_per_s"]
        refcode = RefCodeSampler(task, test, cfg.train.seed)
        ours, theirs = timed_side_by_side(draw, lambda: refcode.sample(B, device), device,
                                          max(iters, 20), 1, rounds_b=3, per_a=10)
        r["refcode_sampler_seqs_per_s"] = B / statistics.median(theirs)
        r["refcode_sampler_speedup"] = B / statistics.median(ours) / r["refcode_sampler_seqs_per_s"]
    return r


def stability_speed(model: nn.Module, task, cfg: RunConfig, device: torch.device, n: int, chunk_size: int) -> dict:
    """Triplets/s of the gradient-stability analysis (``stability.pair_stabilities``: three
    Jacobians per triplet and both pair scores), timed on ``n`` triplets after a warm-up."""
    from ..engine.stability import make_triplets, pair_stabilities

    if not core_spec(cfg.model.name).recurrent_view:  # no state z_1 to differentiate
        return {"stability_triplets_per_s": None}
    gen = torch.Generator().manual_seed(0)
    V, L = cfg.task.vocab_size, cfg.task.length
    warm = make_triplets(min(n, 2), L, gen, (0, V), (0, V))
    tri = make_triplets(n, L, gen, (0, V), (0, V))
    pair_stabilities(model, warm, task.query_id, chunk_size)
    sync(device)
    t0 = time.perf_counter()
    pair_stabilities(model, tri, task.query_id, chunk_size)
    sync(device)
    s = time.perf_counter() - t0
    return {"stability_triplets": n, "stability_triplets_per_s": n / s, "stability_s_per_1024_triplets": 1024 * s / n}


# ---- k training processes on one device -------------------------------------------------------
#: the most bench processes that share one GPU (each holds its own CUDA context, ~0.5 GB)
CONCURRENT_GPU = 16


def max_concurrent(device: torch.device) -> int:
    """The most processes ``--concurrent`` may start: one per CPU core this process may use (more
    measure the scheduler, not the device), ``CONCURRENT_GPU`` on a GPU."""
    import os

    if device.type != "cpu":
        return CONCURRENT_GPU
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_concurrent(ks: tuple[int, ...], device: torch.device) -> None:
    top = max_concurrent(device)
    if any(not 1 <= k <= top for k in ks):
        raise PosrnnError(f"--concurrent takes process counts in 1 … {top} on this {device.type} device "
                          f"(one per CPU core, or {CONCURRENT_GPU} per GPU), e.g. 1,2,4; got {','.join(map(str, ks))}")


def _concurrent_worker(cfg_dict: dict, iters: int, warmup: int, barrier, queue, alive=None) -> None:
    """One training process: warm up, wait for the others, time ``iters`` steps; it exits at once
    when the bench that started it is gone (``alive``'s other end closes)."""
    if alive is not None:
        from ..common.host.lifeline import die_with_starter

        die_with_starter(alive)
    try:
        cfg = RunConfig.from_dict(cfg_dict)
        device = resolve_device(cfg.train.device)
        setup_threads(cfg.train.threads)
        task = build_task(cfg.task)
        _, step = fast_loop(cfg, task, HeldOut(task.test_set(device)), device)
        for _ in range(warmup):
            step()
        sync(device)
        barrier.wait()
        t0 = time.perf_counter()
        for _ in range(iters):
            step()
        sync(device)
        queue.put(("ok", time.perf_counter() - t0))
    except BaseException as e:
        barrier.abort()
        queue.put(("error", f"{type(e).__name__}: {e}"))


def concurrent_throughput(cfg: RunConfig, ks: tuple[int, ...], iters: int, warmup: int) -> list[dict]:
    """For each k: k independent training processes (spawned; each its own model, sampler and
    optimizer) started together after their warm-up; aggregate iterations/s = k·iters / the
    slowest process's time."""
    import multiprocessing as mp
    from queue import Empty

    ctx = mp.get_context("spawn")  # CUDA cannot be forked
    out = []
    for k in ks:
        barrier, queue = ctx.Barrier(k), ctx.Queue()
        alive, held = ctx.Pipe(duplex=False)  # held here only: closed when this process dies, however
        procs = [ctx.Process(target=_concurrent_worker, args=(cfg.to_dict(), iters, warmup, barrier, queue, alive))
                 for _ in range(k)]
        try:
            for p in procs:
                p.start()
            results = []
            while len(results) < k:
                try:
                    results.append(queue.get(timeout=5))
                except Empty:
                    if not any(p.is_alive() for p in procs) and queue.empty():
                        raise PosrnnError("a concurrent bench process died without a result") from None
            for p in procs:
                p.join()
        finally:  # an error or Ctrl-C here leaves no worker behind
            for p in procs:
                if p.is_alive():
                    p.kill()
                    p.join()
            held.close()
            alive.close()
        errors = [msg for status, msg in results if status != "ok"]
        if errors:
            raise PosrnnError(f"a concurrent bench process failed: {errors[0]}")
        slowest = max(secs for _, secs in results)
        out.append({"k": k, "aggregate_it_per_s": k * iters / slowest, "ms_per_iter_per_run": 1000 * slowest / iters})
    base = next((o["aggregate_it_per_s"] for o in out if o["k"] == 1), None)
    for o in out:
        o["speedup_vs_1"] = o["aggregate_it_per_s"] / base if base else None
    return out


def _scratch_dir():
    """A run directory the Trainer is given but never writes to (the bench does not ``fit``)."""
    import tempfile
    from pathlib import Path

    return Path(tempfile.gettempdir()) / "posrnn-bench-unused"
