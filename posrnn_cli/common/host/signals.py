"""Stopping at a safe point on a signal, so that no finished work is lost.

Long loops (training steps, the checkpoints of a stability analysis) read a stop flag at their
safe points, save what they have and raise ``Stopped`` (training raises its own ``Interrupted``).
The flag is set by the signal handlers of one of two holders:

* ``stop_requests()``: around one loop in a process of its own (``posrnn train``, a local
  sweep worker). SIGINT and SIGTERM set the flag; a second one stops at once
  (``KeyboardInterrupt``), as a user pressing Ctrl-C twice expects.
* ``task_signals()``: a whole SLURM task (``sweep.slurm.SweepTask``). SIGTERM, SIGUSR2 and
  SIGINT set the flag for the task's life and never abort it: SLURM sends SIGTERM on
  ``scontrol requeue``, ``scancel``, a time-out or a preemption, submitit asks for SIGUSR2
  before a time-out, and a requeue may bring both, in either order. SIGUSR2 (``PREEMPT``)
  takes precedence: it asks the task to requeue itself. Inside it, ``stop_requests()``
  installs nothing and reads the task's flag.

Handlers can only be installed from the main thread; elsewhere both holders yield a flag that
nothing sets. Torch-free.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Optional

from ..errors import PosrnnError

#: the signal submitit (and SLURM's ``--signal``) uses for a coming time-out or preemption
PREEMPT = "SIGUSR2"


class Stopped(PosrnnError):
    """A job stopped at a safe point on a signal; its work so far is saved."""

    exit_code = 130


class StopFlag:
    """The signal that asked to stop (its name, e.g. ``"SIGTERM"``), or None."""

    def __init__(self) -> None:
        self.signal: Optional[str] = None
        self.count = 0

    def record(self, signum: int) -> None:
        name = signal.Signals(signum).name
        self.count += 1
        if self.signal != PREEMPT:  # SIGUSR2 asks for more (a requeue) than SIGTERM: it wins
            self.signal = name

    def __getitem__(self, key: str):  # ``stop["signal"]``, as the training loop reads it
        if key != "signal":
            raise KeyError(key)
        return self.signal


_task: Optional[StopFlag] = None  # the flag of the SLURM task this process runs, if any


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def task_signals(signals: tuple = (signal.SIGTERM, signal.SIGUSR2, signal.SIGINT)):
    """For a SLURM task's whole life: ``signals`` set one flag (yielded) and never abort. The
    handlers in place before (submitit's) are put back afterwards."""
    global _task
    flag = StopFlag()
    if not _main_thread():
        yield flag
        return
    previous = {sig: signal.signal(sig, lambda signum, frame: flag.record(signum)) for sig in signals}
    outer, _task = _task, flag
    try:
        yield flag
    finally:
        _task = outer
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def stop_requests(enabled: bool = True, signals: tuple = (signal.SIGINT, signal.SIGTERM)):
    """Around a loop: yields a flag the loop reads after each unit of work (so the state is never
    saved half-updated). Inside a SLURM task it is the task's flag; otherwise ``signals`` set it
    and a second signal interrupts at once (``KeyboardInterrupt``). Not ``enabled`` (several
    processes that must stop together): a flag that nothing sets."""
    if not enabled:
        yield StopFlag()
        return
    if _task is not None:
        yield _task
        return
    flag = StopFlag()
    if not _main_thread():
        yield flag
        return
    previous = {}

    def handler(signum, frame):
        if flag.signal is not None:  # asked twice: stop now
            signal.signal(signum, previous.get(signum, signal.SIG_DFL))
            raise KeyboardInterrupt
        flag.record(signum)

    for sig in signals:
        previous[sig] = signal.signal(sig, handler)
    try:
        yield flag
    finally:
        for sig, h in previous.items():
            signal.signal(sig, h)


def quiet_interrupts() -> None:
    """For the command line: Ctrl-C where no command catches it (while the modules load, before
    a command starts or after it ended) prints one line instead of a traceback."""
    import sys

    def hook(kind, value, tb):
        if issubclass(kind, KeyboardInterrupt):
            print("stopped: interrupted", file=sys.stderr)
            return
        sys.__excepthook__(kind, value, tb)

    sys.excepthook = hook
