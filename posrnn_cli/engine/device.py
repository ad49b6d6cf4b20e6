"""Where a run executes: the device, CPU threads, bf16 support, and the torchrun process group."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Optional

import torch

from ..common.errors import PosrnnError

if TYPE_CHECKING:
    from ..common.settings.config import TrainConfig


def resolve_device(name: str) -> torch.device:
    """``auto`` (CUDA when present), ``cpu``, ``cuda`` or ``cuda:N`` → a device that exists here."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise PosrnnError(f"unknown device {name!r}; use auto, cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise PosrnnError(f"device {name!r} is not supported; use auto, cpu, cuda or cuda:N")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise PosrnnError(f"device {name!r} asked for but CUDA is not available here; use --device cpu or auto")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise PosrnnError(f"device {name!r} does not exist: this machine has {torch.cuda.device_count()} GPU(s)")
    return device


def cpu_supports_bf16() -> bool:
    """Whether oneDNN runs bf16 kernels on this CPU (AVX-512 BF16 or AMX). Without them an
    LSTM under bf16 autocast fails and a GRU runs about 100× slower."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # pragma: no cover - builds without oneDNN
        return False


def check_amp(amp: bool, device: torch.device) -> None:
    """Refuse bf16 autocast where it cannot run well (a CPU without bf16 instructions)."""
    if amp and device.type == "cpu" and not cpu_supports_bf16():
        raise PosrnnError("train.amp (bf16 autocast) needs a GPU or a CPU with AVX-512 BF16 or AMX, and this CPU has "
                          "neither; drop train.amp (or --amp)")


def setup_threads(threads: Optional[int]) -> None:
    if threads is not None:
        torch.set_num_threads(threads)


def world() -> tuple[int, int]:
    """(rank, world size) of this process: (0, 1) outside torchrun."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def join_process_group() -> tuple[int, int]:
    """Under ``torchrun`` (WORLD_SIZE > 1), join the process group (NCCL on CUDA, gloo on CPU);
    return (rank, world size)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return 0, 1
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return dist.get_rank(), dist.get_world_size()


def local_device(device: torch.device, world_size: int) -> torch.device:
    """Under torchrun on GPUs each process takes the GPU of its LOCAL_RANK."""
    if world_size > 1 and device.type == "cuda":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return device


def check_machine(t: TrainConfig, task, device: torch.device) -> None:
    """Batch and thread counts this machine can honour, refused in one line before anything runs."""
    import os

    if t.threads is not None and device.type == "cpu":
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cores = os.cpu_count() or 1
        if t.threads > cores:
            raise PosrnnError(f"train.threads ({t.threads}) exceeds the {cores} CPU core(s) this process may use; "
                              f"more threads than cores only slows torch down: pass --threads {cores} or fewer")
    steps = int(getattr(task, "max_steps", 0) or 1)
    for key in ("batch_size", "eval_batch_size"):
        tokens = getattr(t, key) * steps
        if tokens > MAX_TOKENS_PER_BATCH:
            raise PosrnnError(f"train.{key} {getattr(t, key):,} × {steps} steps per sequence = {tokens:,} tokens per "
                              f"batch, beyond the {MAX_TOKENS_PER_BATCH:,} one step can take in reasonable time and "
                              f"memory; lower it")


#: the most tokens (sequences × steps) one batch may hold: 256× the paper's 512 × 128
MAX_TOKENS_PER_BATCH = 2**24
