"""Defaults that fit the machine a standalone command runs on: CPU threads and Mamba's state size.

torch's own thread count is every core, which on a shared or busy machine makes a small model
several times slower than one thread (docs/bench.md). ``choose_threads`` takes what is free
instead; ``state_size_for`` keeps Mamba's d_state small on a CPU, where its step grows with it.
``fit_to_machine`` applies both to a config: ``engine.train.train`` calls it for every new run,
so ``posrnn train``, a sweep and ``train(RunConfig(...))`` build the same run from the same
settings; the commands print what it decided in their run header. The sweep sets threads per
run itself. Imports neither torch nor numpy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

#: a model whose largest matrix product per time step (batch × H × H) is at most this runs
#: fastest on one thread: splitting it costs more than it saves
SMALL_MODEL_MACS = 2**21

@dataclass(frozen=True)
class ThreadChoice:
    n: int
    why: str  # what the run header prints in brackets

    def header(self) -> str:
        return f"threads: {self.n} ({self.why})"


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask, else every core)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def load_average() -> float:
    """The 1-minute load average (0 where the system does not report one)."""
    try:
        return max(0.0, os.getloadavg()[0])
    except (AttributeError, OSError):
        return 0.0


def is_small_model(batch_size: int, hidden_size: int) -> bool:
    """Whether a recurrent step's matrix products are too small to gain from more threads."""
    return batch_size * hidden_size * hidden_size <= SMALL_MODEL_MACS


def choose_threads(requested: Optional[int] = None, small: bool = False, cores: Optional[int] = None,
                   load: Optional[float] = None) -> ThreadChoice:
    """The CPU threads of a standalone command: ``requested`` when given (always wins), else
    one for a small model, else the cores not busy: max(1, usable cores − round(1-minute load)).
    ``cores`` and ``load`` default to this machine's (tests pass their own)."""
    if requested is not None:
        return ThreadChoice(int(requested), "--threads")
    cores = usable_cores() if cores is None else max(1, int(cores))
    load = load_average() if load is None else max(0.0, float(load))
    free = max(1, cores - min(cores, int(load + 0.5)))
    of = f"{free} of {cores} core{'s' if cores != 1 else ''} free"
    if small:
        return ThreadChoice(1, f"auto: a small model; {of}")
    return ThreadChoice(free, f"auto: {of}")


def state_size_for(device_type: str, configured: int, cpu_size: Optional[int]) -> tuple[int, str]:
    """A new run's state size when the command line gives none: ``cpu_size`` on a CPU for a core
    that has one (its catalogue entry's ``cpu_state_size``: Mamba's 4, where the configured 64 is
    tens of times slower), else the configured one. Returns (state size, the header's line)."""
    if device_type == "cpu" and cpu_size is not None and configured > cpu_size:
        return cpu_size, (f"model.state_size: {cpu_size} (auto on a CPU; --state-size {configured} for the configured "
                          "one)")
    return configured, f"model.state_size: {configured}"


def fit_to_machine(cfg, device_type: str, given: Optional[set[str]] = None, new_run: bool = True) -> list[str]:
    """Fill in, in place, what the settings leave to this machine: ``train.threads``
    (``choose_threads``) and, for a new run of a core with a CPU state size (Mamba),
    ``model.state_size`` (``state_size_for``). ``given``: the dotted keys the user set (a command
    line's options, --set items and config file), whose values always win; ``None`` (a library
    call) counts a key as set when it differs from ``RunConfig()``'s default (threads: when not
    None). Idempotent. Returns the run header's lines."""
    given_threads = "train.threads" in given if given is not None else cfg.train.threads is not None
    asked = cfg.train.threads if given_threads else None
    choice = choose_threads(asked, small=is_small_model(cfg.train.batch_size, cfg.model.hidden_size))
    cfg.train.threads = choice.n
    lines = [choice.header()]
    line = fit_state_size(cfg, device_type, given) if new_run else None
    return lines + ([line] if line else [])


def fit_state_size(cfg, device_type: str, given: Optional[set[str]] = None) -> Optional[str]:
    """``fit_to_machine``'s state-size rule alone (a sweep's plan applies it to each new run's
    config, so that the config it records is the one ``train`` writes): the header's line, or
    None for a core without a CPU state size or a state size the user set."""
    from ..catalog import CORES
    from ..settings.config import RunConfig

    default = RunConfig().model.state_size
    core = CORES.get(cfg.model.name)
    if core is None or core.cpu_state_size is None:
        return None
    if ("model.state_size" in given) if given is not None else cfg.model.state_size != default:
        return None
    cfg.model.state_size, line = state_size_for(device_type, default, core.cpu_state_size)
    return line


ASSUMED_GPU = "H100"  # the device kind assumed where no GPU is visible


def gpu_kind() -> tuple[str, bool]:
    """(device kind, whether it was seen): the visible GPU's name, else ``ASSUMED_GPU``."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0), True
    return ASSUMED_GPU, False
