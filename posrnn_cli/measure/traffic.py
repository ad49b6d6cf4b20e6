"""Bytes a training step writes, counted on torch's ``meta`` device: no memory, no arithmetic,
only shapes, so a step at the papers' shape (B = 512, H = 512, L = 64) is counted on any
machine in seconds.

``BytesWritten`` is a dispatch mode that adds up, for every ATen operator a forward + backward
runs, the bytes of each tensor it writes: a new output, or an argument it writes in place.
Views write nothing. This is the traffic a GPU step cannot avoid (each byte written is at least
one byte through memory), a lower bound that grows with every tensor a step materialises, so a
term that grows with T² (autograd filling a whole zero tensor at every step) shows at once.

``ensemble_traffic`` counts one step of a K-member ensemble (``models.ensemble_model``) and of the
solo run it packs, from one run config: the figures ``tests/test_ensemble_traffic.py`` holds
within a budget and ``posrnn bench --ensemble`` can print.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: PLC2701 (its one home; torch exports it nowhere else)

from ..common.settings.config import RunConfig

META = torch.device("meta")


class BytesWritten(TorchDispatchMode):
    """Inside ``with BytesWritten() as w``: ``w.total`` bytes written by every operator since,
    ``w.by_op`` the same per operator name."""

    def __init__(self):
        super().__init__()
        self.total = 0
        self.by_op: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outs = out if isinstance(out, (tuple, list)) else (out,)
        n = 0
        for ret, o in zip(func._schema.returns, outs):
            alias = ret.alias_info
            if isinstance(o, torch.Tensor) and (alias is None or alias.is_write):  # new, or written in place
                n += o.numel() * o.element_size()
        self.total += n
        self.by_op[str(func)] = self.by_op.get(str(func), 0) + n
        return out


@dataclass
class Traffic:
    """Bytes one forward + backward writes: the ensemble's in all, and one solo run's."""

    k: int
    ensemble: int
    solo: int
    by_op: dict = field(default_factory=dict)  # the ensemble's, per operator

    @property
    def per_member(self) -> float:
        return self.ensemble / self.k

    @property
    def ratio(self) -> float:
        """A member's bytes over a solo run's: about 1 where packing adds no traffic."""
        return self.per_member / self.solo


def step_bytes(step) -> BytesWritten:
    """The bytes ``step()`` writes (every tensor it touches on ``meta``)."""
    with BytesWritten() as w:
        step()
    return w


def ensemble_traffic(cfg: RunConfig, k: int) -> Traffic:
    """One training forward + backward of ``cfg`` solo and of ``k`` of its seeds as one ensemble,
    counted on the ``meta`` device (the batches are drawn on the CPU, then moved)."""
    from ..engine.ensemble import member_losses, stack_batches
    from ..models import build_model
    from ..models.ensemble_model import EnsembleModel
    from ..tasks import build_task

    cfgs = [replace(cfg, train=replace(cfg.train, seed=cfg.train.seed + i)) for i in range(k)]
    task = build_task(cfg.task)  # no memory check: nothing is allocated on ``meta``
    with torch.device(META):
        solo = build_model(cfg, task)
        ensemble = EnsembleModel([build_model(c, task) for c in cfgs])
    batch = task.sample(cfg.train.batch_size, torch.Generator().manual_seed(cfg.train.seed), torch.device("cpu"))
    one, stacked = batch.to(META), stack_batches([batch] * k).to(META)

    def solo_step():
        task.loss(solo(one.inputs, one.out_index, one.query), one).backward()

    def ensemble_step():
        out = ensemble(stacked.inputs, stacked.out_index, stacked.query, task.shared_input_start)
        member_losses(task, out, stacked).sum().backward()

    ens = step_bytes(ensemble_step)
    return Traffic(k, ens.total, step_bytes(solo_step).total, ens.by_op)
