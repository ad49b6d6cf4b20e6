"""``python -m posrnn_cli`` is ``posrnn``."""

if __name__ == "__main__":  # not when a spawned worker process imports the parent's main module
    from .common.host.signals import quiet_interrupts

    quiet_interrupts()  # Ctrl-C while the command line loads: one line, never a traceback

    from .cli import run

    run()
