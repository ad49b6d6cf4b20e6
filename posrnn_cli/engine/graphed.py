"""``train.cuda_graph``: the whole update (forward, loss, backward, clipping, Adam) captured once
in a CUDA graph and replayed, so a step costs one launch instead of hundreds (``GraphedStep``).
The training loop (``train.Trainer``, passed in as ``trainer``) calls it in place of its eager update."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from typing import Callable, Optional

import torch

from ..common.errors import PosrnnError
from ..tasks import Batch

def graph_lr(opt: torch.optim.Optimizer, device: torch.device) -> None:
    """Hold each group's lr in a device tensor: a captured step reads it, and ``LambdaLR`` (whose
    base lrs stay floats) fills it in place each step, with no host sync."""
    for g in opt.param_groups:
        g["lr"] = torch.tensor(float(g["lr"]), device=device)


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

    def __init__(self, trainer, capture: Optional[Callable] = None):
        self.trainer = trainer
        self.capture = capture or cuda_capture
        self.calls = 0
        self.replay: Optional[Callable[[], None]] = None
        self.static: dict[str, torch.Tensor] = {}
        self.out: tuple = ()

    def __call__(self, batch: Batch) -> tuple[torch.Tensor, ...]:
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
            raise PosrnnError("train.cuda_graph needs batches of one fixed set of fields and shapes; this task's "
                              "vary: drop train.cuda_graph")
        for k, v in got.items():
            self.static[k].copy_(v)

    def _capture(self, batch: Batch) -> tuple[torch.Tensor, ...]:
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
        loss, ref = float(self.out[0].sum()), float(eager_loss.sum())  # an ensemble's: its members' losses
        if not (abs(loss - ref) <= 1e-3 * abs(ref) + 1e-6 and diff <= 1e-2 * size + 1e-12):
            raise PosrnnError(f"train.cuda_graph: the captured update disagrees with the eager one (loss {loss:.6g} vs "
                              f"{ref:.6g}, update difference {diff:.3g} of {size:.3g}); drop train.cuda_graph")


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


def snapshot(trainer) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Copies of the trained parameters and of every optimizer state tensor."""
    states = [v for st in trainer.optimizer.state.values() for v in st.values() if torch.is_tensor(v)]
    return [p.detach().clone() for p in trainer.params], [v.clone() for v in states]


def restore(trainer, snap: tuple[list[torch.Tensor], list[torch.Tensor]]) -> None:
    """Copy a ``snapshot`` back in place (the same tensors, so a capture still points at them)."""
    states = [v for st in trainer.optimizer.state.values() for v in st.values() if torch.is_tensor(v)]
    with torch.no_grad():
        for p, v in zip(trainer.params, snap[0]):
            p.copy_(v)
        for s, v in zip(states, snap[1]):
            s.copy_(v)
