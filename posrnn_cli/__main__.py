"""``python -m posrnn_cli`` is ``posrnn``."""

from .common.signals import quiet_interrupts

quiet_interrupts()  # Ctrl-C while the command line loads: one line, never a traceback

from .cli import run  # noqa: E402

run()
