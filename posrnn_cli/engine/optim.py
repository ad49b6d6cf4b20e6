"""The optimiser and its schedule (001 §3.3, 003 §4.2): Adam with one parameter group per
optimiser tag, linear warm-up from 0 then cosine decay to 0, and the checks of the training
settings and of the fast paths a device or launch can run (the recipe's own, torch-free:
``recipe``)."""

from __future__ import annotations

import math
from typing import Iterable

import torch
from torch import nn

from ..common.settings.config import TrainConfig
from ..common.errors import PosrnnError
from .device import check_amp


def lr_factor(step: int, warmup: int, total: int) -> float:
    """Multiplier of the base lr for the update after ``step`` updates: linear warm-up
    from 0 over ``warmup`` updates, then a cosine decay reaching 0 at ``total``."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def param_groups(params: Iterable[nn.Parameter]) -> list[dict]:
    """One optimiser group for ordinary parameters, one per distinct ``p._optim`` tag (e.g.
    S4D's SSM parameters, tagged ``{"weight_decay": 0.0}`` where they are registered)."""
    plain, tagged = [], {}
    for p in params:
        tag = getattr(p, "_optim", None)
        if tag:
            tagged.setdefault(tuple(sorted(tag.items())), []).append(p)
        else:
            plain.append(p)
    groups = [{"params": plain}] if plain else []
    groups += [{"params": ps, **dict(key)} for key, ps in tagged.items()]
    return groups


def make_optimizer(params: Iterable[nn.Parameter], t: TrainConfig, device: torch.device) -> torch.optim.Adam:
    """Adam; fused where ``t.fused_adam`` says (None: on CUDA only). Under ``t.cuda_graph`` it is
    ``capturable`` and, after ``make_scheduler``, ``graph_lr`` turns its lr into a device tensor."""
    fused = t.fused_adam if t.fused_adam is not None else device.type == "cuda"
    return torch.optim.Adam(
        param_groups(params), lr=t.lr, betas=t.betas, eps=t.eps, weight_decay=t.weight_decay,
        fused=True if fused else None, capturable=t.cuda_graph and device.type == "cuda",
    )


def check_fast_paths(t: TrainConfig, device: torch.device, world_size: int = 1) -> None:
    """Refuse fast paths this device or launch cannot run, with a one-line reason."""
    if t.cuda_graph and device.type != "cuda":
        raise PosrnnError("train.cuda_graph captures the update in a CUDA graph and needs a CUDA device, not "
                          f"{device.type}; drop it")
    if t.cuda_graph and world_size > 1:
        raise PosrnnError("train.cuda_graph is single-process only; drop it under torchrun")
    check_amp(t.amp, device)


def make_scheduler(opt: torch.optim.Optimizer, t: TrainConfig) -> torch.optim.lr_scheduler.LambdaLR:
    warmup, total = t.warmup_steps, t.iterations
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, warmup, total))
