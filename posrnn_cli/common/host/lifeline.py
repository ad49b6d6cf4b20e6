"""A child process that dies with the process that started it, however that one ends.

The starter (a sweep, a bench) creates a one-way pipe and keeps one end; the child watches the
other. When the starter dies (``kill -9`` included) its end closes and the child exits at once,
so no orphaned worker keeps running. Torch-free.
"""

from __future__ import annotations

import contextlib
import os
import threading


def die_with_starter(alive) -> None:
    """Exit at once when the starter's end of ``alive`` closes (the starter died: the pipe's other
    end was held by it alone). A sweep worker's parent is the forkserver, so PR_SET_PDEATHSIG
    cannot tell; the pipe can."""
    def watch():
        with contextlib.suppress(EOFError, OSError):  # closed: the starter is gone
            alive.recv()
        os._exit(137)

    threading.Thread(target=watch, daemon=True).start()
