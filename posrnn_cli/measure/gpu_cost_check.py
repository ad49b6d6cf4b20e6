"""The GPU check's two stages for the cost model (``gpu_check.py`` runs them last):

* ``lm_step``: one training step of the papers' language model (LSTM, H = 512, V = 32,768,
  B = 512 paragraphs of up to 1,024 tokens; 001 §6.5) with the chunked head: its time and its
  peak memory beside the cost model's prediction of both. The corpus is **synthetic**: random
  tokens in paragraphs whose lengths are drawn from the assumed WikiText-103 paragraph-length
  distribution (``lm_tokens.py``), not WikiText-103 itself.
* ``cost_cells``: three unlike cells trained for a few steps (a small-V recurrence-bound cell, a
  head-bound cell, a long sequence), each one's measured ms/iteration beside the cost model's
  prediction for the device kind.

Each prints one ``COSTCHECK {json}`` line per figure as it is measured, so that a time-out keeps
what was done. ``micro`` sizes run in seconds on a CPU (the plumbing only: a CPU time is no
prediction's test).
"""

from __future__ import annotations

import json
import statistics
import time

LM = {"paper": {"model.name": "lstm", "model.hidden_size": 512, "task.vocab_size": 32768, "task.length": 1024,
                "train.batch_size": 512, "model.pe": "sinusoidal"},
      "micro": {"model.name": "lstm", "model.hidden_size": 8, "task.vocab_size": 64, "task.length": 32,
                "train.batch_size": 4, "model.pe": "sinusoidal", "train.threads": 1}}
_PAPER = {"model.hidden_size": 512, "train.batch_size": 512}
CELLS = {"paper": [("recurrence-bound: GRU, V = 32, L = 64", {**_PAPER, "model.name": "gru", "task.vocab_size": 32,
                                                               "task.length": 64}),
                   ("head-bound: GRU, V = 8,192, L = 64", {**_PAPER, "model.name": "gru", "task.vocab_size": 8192,
                                                           "task.length": 64}),
                   ("long sequence: GRU, V = 2, L = 512", {**_PAPER, "model.name": "gru", "task.vocab_size": 2,
                                                           "task.length": 512})],
         "micro": [("recurrence-bound", {"model.name": "gru", "task.vocab_size": 8, "task.length": 5}),
                   ("head-bound", {"model.name": "gru", "task.vocab_size": 256, "task.length": 5}),
                   ("long sequence", {"model.name": "gru", "task.vocab_size": 2, "task.length": 24})]}
_MICRO = {"model.hidden_size": 8, "train.batch_size": 16, "task.n_test": 64, "train.threads": 1}


def timed(step, device, iters: int, warmup: int) -> float:
    """Median ms of ``step()`` over ``iters`` calls after ``warmup``, synchronised on CUDA."""
    import torch

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        step()
    times = []
    for _ in range(iters):
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        times.append(1000 * (time.perf_counter() - t0))
    return statistics.median(times)


def predicted(cfg):
    """(ms/iteration, peak bytes, device kind) the cost model gives ``cfg`` on this device kind."""
    from . import cost

    kind, seen = cost.gpu_kind()
    w = cost.run_work(cfg)
    return cost.gpu_rate(kind, seen, cost.load_table()).model.ms_per_iter(w), w.peak_bytes, kind


def lm_step(size: str, device: str, iters: int = 3) -> dict:
    """One training step of the size's LM on a synthetic corpus: measured ms and peak memory."""
    import torch

    from ..common.settings.config import resolve_config
    from ..models import build_model
    from .lm_tokens import sample_lengths
    from ..sweep.storage import task_shape
    from ..tasks.lm import LMTask

    cfg = resolve_config(options={**LM[size], "task.name": "lm", "task.data": "synthetic", "train.device": device})
    dev = torch.device(device)
    B, L, V = cfg.train.batch_size, cfg.task.length, cfg.task.vocab_size
    torch.manual_seed(0)
    model = build_model(cfg, task_shape(cfg)).to(dev)
    lengths = torch.tensor(sample_lengths(B, L, seed=0))
    tokens = torch.randint(V, (B, int(lengths.max()))) * (torch.arange(int(lengths.max())) < lengths[:, None])
    task = LMTask.__new__(LMTask)  # the loss and batch layout only: no corpus on disk
    task.world_size = 1
    batch = task._batch(tokens.to(dev), lengths.to(dev))
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)

    def step():
        opt.zero_grad(set_to_none=True)
        task.train_forward(model, batch)[0].backward()
        opt.step()

    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    ms = timed(step, dev, iters, 1)
    peak = torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else None
    p_ms, p_peak, kind = predicted(cfg)
    return {"figure": "lm_step", "corpus": "synthetic: paragraph lengths from the assumed WikiText-103 distribution",
            "batch": B, "max_tokens": L, "vocab": V, "real_tokens": int((lengths - 1).sum()), "ms_per_iter": ms,
            "peak_bytes": peak, "predicted_ms_per_iter": p_ms, "predicted_peak_bytes": p_peak, "predicted_for": kind}


def cell(size: str, device: str, name: str, options: dict, iters: int, warmup: int) -> dict:
    """One cell's training step timed, beside the cost model's prediction."""
    import torch

    from .bench import fast_loop
    from ..common.settings.config import resolve_config
    from ..tasks import HeldOut, build_task

    extra = _MICRO if size == "micro" else {"task.n_test": 1024}
    cfg = resolve_config(options={**extra, **options, "train.device": device})
    task = build_task(cfg.task)
    dev = torch.device(device)
    _, step = fast_loop(cfg, task, HeldOut(task.test_set()), dev)
    ms = timed(step, dev, iters, warmup)
    p_ms, _, kind = predicted(cfg)
    return {"figure": "cell", "cell": name, "ms_per_iter": ms, "predicted_ms_per_iter": p_ms, "predicted_for": kind,
            "ratio": ms / p_ms if p_ms else None}


def run(stage: str, size: str, device: str) -> None:
    """The stage's figures, one ``COSTCHECK {json}`` line each as it is measured."""
    if stage == "lm_step":
        print("COSTCHECK " + json.dumps(lm_step(size, device)), flush=True)
        return
    iters, warmup = (20, 3) if size == "paper" else (2, 1)
    for name, options in CELLS[size]:
        print("COSTCHECK " + json.dumps(cell(size, device, name, options, iters, warmup)), flush=True)


def figure_rows(stage: str, res: dict) -> list[tuple[str, str, str]]:
    """(stage, figure, value) rows of a stage's result for the report."""
    rows = [] if res["status"] == "ok" else [(stage, "status",
                                              res["status"] + (f": {res['error']}" if res.get("error") else ""))]
    for f in res.get("result") or []:
        pred = f"{f['predicted_ms_per_iter']:.2f} predicted for {f['predicted_for']}"
        if f["figure"] == "lm_step":
            peak = "-" if f["peak_bytes"] is None else f"{f['peak_bytes'] / 2**30:.2f} GiB"
            rows += [(stage, "LM step, synthetic corpus (assumed WikiText-103 lengths): ms",
                      f"{f['ms_per_iter']:.2f} ({pred})"),
                     (stage, "LM step: peak memory", f"{peak} ({f['predicted_peak_bytes'] / 2**30:.2f} GiB estimated)")]
        else:
            rows.append((stage, f"{f['cell']}: ms / iteration", f"{f['ms_per_iter']:.2f} ({pred})"))
    return rows
