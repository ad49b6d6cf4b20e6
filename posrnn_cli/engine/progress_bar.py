"""The progress bar of ``posrnn train``: loss, accuracy and it/s on a terminal, silent otherwise."""

from __future__ import annotations

import time


class ProgressBar:
    """A rich progress bar with loss/accuracy/it/s on a terminal; silent otherwise."""

    def __init__(self, enabled: bool, total: int, start: int):
        from rich.console import Console

        self.console = Console(stderr=True)
        self.enabled = enabled and self.console.is_terminal
        self.total, self.start = total, start

    def __enter__(self):
        if not self.enabled:
            return (lambda step, m: None), None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.p = Progress(
            TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]} acc {task.fields[acc]} {task.fields[its]} it/s"),
            TimeRemainingColumn(), console=self.console, transient=False,
        )
        self.p.__enter__()
        self.tid = self.p.add_task("train", total=self.total, completed=self.start, loss="-", acc="-", its="-")
        t0, s0 = time.perf_counter(), self.start

        def update(step, m):
            its = (step - s0) / max(time.perf_counter() - t0, 1e-9)
            self.p.update(self.tid, completed=step, loss=f"{m['loss']:.4f}", acc=f"{m['accuracy']:.3f}",
                          its=f"{its:.1f}")

        return update, self.p

    def __exit__(self, *exc):
        if self.enabled:
            self.p.__exit__(*exc)
        return False
