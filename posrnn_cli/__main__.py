"""``python -m posrnn_cli`` is ``posrnn``."""

from .cli import run

run()
