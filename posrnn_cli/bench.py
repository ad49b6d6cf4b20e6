"""``posrnn bench``: how fast one training iteration, the sampler and the stability analysis
are, measured side by side with a plain reference-style loop (per-sample Python sampling,
a Python-set held-out check, non-fused fp32 Adam), so every speed-up is a measured ratio.

Figures: ms/iteration (median of timed iterations after warm-up; CUDA synchronised),
tokens/s (input + output steps), achieved TFLOP/s (forward + backward, counted analytically
for the RNNs, by ``torch.utils.flop_counter`` otherwise) and the share of the device's
peak where it is known, peak memory, sampler sequences/s, stability triplets/s.
"""

from __future__ import annotations

import random
import resource
import statistics
import time
from typing import Callable, Optional

import torch
from torch import nn

from .config import RunConfig
from .errors import PosrnnError
from .models import build_model
from .tasks import Batch, HeldOut, build_task, reverse_layout
from .train import Trainer, check_train_config, resolve_device

# dense peak TFLOP/s (fp32 without tensor cores, bf16 with) of devices we know
PEAKS = {"H100": {"fp32": 67.0, "bf16": 989.0}, "H200": {"fp32": 67.0, "bf16": 989.0}, "A100": {"fp32": 19.5, "bf16": 312.0}}
GATES = {"elman": 1, "gru": 3, "lstm": 4}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device, iters: int, warmup: int) -> list[float]:
    """Seconds of each of ``iters`` calls after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    _sync(device)
    out = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        _sync(device)
        out.append(time.perf_counter() - t)
    return out


def flops_per_iteration(cfg: RunConfig, task, model: nn.Module, batch: Batch) -> float:
    """Forward + backward FLOPs of one training step (≈ 3 × forward)."""
    m = cfg.model
    if m.name in GATES:
        G, H, D = GATES[m.name] * m.hidden_size, m.hidden_size, model.encoder.out_dim
        T, K = batch.inputs.shape[1], batch.out_index.shape[1]
        fwd = 2 * G * (D + H) * T + 2 * H * task.n_outputs * K  # per sequence: recurrence + head
        return 3.0 * fwd * len(batch)
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        out = model(batch.inputs, batch.out_index, batch.query)
        task.loss(out, batch).backward()
    model.zero_grad(set_to_none=True)
    return float(counter.get_total_flops())


def device_peak(device: torch.device, precision: str) -> Optional[float]:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, peaks in PEAKS.items():
        if key in name:
            return peaks[precision]
    return None


class ReferenceSampler:
    """The papers' reference style: each sequence drawn token by token in Python, rejected
    against a Python set of held-out tuples, stacked into a tensor."""

    def __init__(self, task, test: Batch, seed: int = 0):
        self.task, self.rng = task, random.Random(seed)
        self.held = {tuple(r) for r in test.key.tolist()}

    def sample(self, n: int, device: torch.device) -> Batch:
        V, L, rows = self.task.V, self.task.L, []
        while len(rows) < n:
            x = [self.rng.randint(0, V - 1) for _ in range(L)]
            if tuple(x) not in self.held:
                rows.append(x)
        x = torch.tensor(rows, device=device)
        inputs, out_index = reverse_layout(x, self.task.query_id)
        return Batch(inputs=inputs, targets=x.flip(1), out_index=out_index, key=x)


def bench(cfg: RunConfig, iters: int = 20, warmup: int = 5, reference: bool = True, stability_seqs: int = 8) -> dict:
    """Measure ``cfg``'s training step, sampler and stability analysis (and the reference loop)."""
    check_train_config(cfg.train)
    if cfg.task.name != "reverse" or cfg.task.min_length is not None or cfg.task.rarity is not None or cfg.task.autoregressive:
        raise PosrnnError("posrnn bench measures the paper's fixed-length reverse task; drop the other task options")
    if iters < 1 or warmup < 0:
        raise PosrnnError("--iters must be ≥ 1 and --warmup-iters ≥ 0")
    device = resolve_device(cfg.train.device)
    if cfg.train.threads:
        torch.set_num_threads(cfg.train.threads)
    task = build_task(cfg.task)
    test = task.test_set(device)
    held = HeldOut(test)
    B = cfg.train.batch_size
    result: dict = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                    "threads": torch.get_num_threads(), "config": cfg.to_dict()}

    def measure(trainer: Trainer, draw: Callable[[], Batch], label: str) -> dict:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        secs = timed(lambda: trainer.train_step(draw()), device, iters, warmup)
        ms = 1000 * statistics.median(secs)
        batch = draw()
        flops = flops_per_iteration(cfg, task, trainer.model, batch)
        peak = device_peak(device, "fp32")
        tflops = flops / (ms / 1000) / 1e12
        return {
            f"{label}_ms_per_iter": ms,
            f"{label}_tokens_per_s": B * batch.inputs.shape[1] / (ms / 1000),
            f"{label}_tflops": tflops,
            f"{label}_peak_share": (tflops / peak) if peak else None,
            f"{label}_peak_memory_mb": (torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda"
                                        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        }

    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg, task).to(device)
    trainer = Trainer(cfg, _scratch_dir(), model, task, lambda n, g, d: held.sample(task, n, g, d), device)
    result["flops_per_iter"] = flops_per_iteration(cfg, task, model, held.sample(task, B, trainer.generator, device))
    result.update(measure(trainer, lambda: held.sample(task, B, trainer.generator, device), "train"))
    s = timed(lambda: held.sample(task, B, trainer.generator, device), device, max(iters, 10), 2)
    result["sampler_seqs_per_s"] = B / statistics.median(s)

    if reference:
        ref = ReferenceSampler(task, test, cfg.train.seed)
        torch.manual_seed(cfg.train.seed)
        ref_model = build_model(cfg, task).to(device)
        ref_trainer = Trainer(cfg, _scratch_dir(), ref_model, task, None, device)
        ref_trainer.optimizer = torch.optim.Adam(ref_model.parameters(), lr=cfg.train.lr, betas=cfg.train.betas,
                                                 eps=cfg.train.eps, foreach=False, fused=False)
        ref_trainer.scheduler = torch.optim.lr_scheduler.LambdaLR(ref_trainer.optimizer, lambda s: 1.0)
        result.update(measure(ref_trainer, lambda: ref.sample(B, device), "reference"))
        s = timed(lambda: ref.sample(B, device), device, max(3, iters // 4), 1)
        result["reference_sampler_seqs_per_s"] = B / statistics.median(s)
        result["train_speedup"] = result["reference_ms_per_iter"] / result["train_ms_per_iter"]
        result["sampler_speedup"] = result["sampler_seqs_per_s"] / result["reference_sampler_seqs_per_s"]

    if stability_seqs and cfg.model.name != "transformer":
        from .stability import jacobians

        core = model.core.rnn if hasattr(model.core, "rnn") else model.core
        with torch.no_grad():
            x = model.encoder(task.sample(stability_seqs, trainer.generator, device).inputs)  # (S 2L D)
        secs = timed(lambda: jacobians(core, x, chunk_size=stability_seqs), device, 1, 1)
        result["stability_triplets_per_s"] = stability_seqs / 3 / secs[0]  # a triplet is 3 sequences
    return result


def _scratch_dir():
    import tempfile
    from pathlib import Path

    return Path(tempfile.mkdtemp(prefix="posrnn-bench-"))
