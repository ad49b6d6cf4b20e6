"""Progress of a local sweep: a live rich table on a terminal (each run queued / running /
done / failed, its step, it/s and ETA, read from the run's ``metrics.jsonl``), one line per
event otherwise (logs, CI, DVC piping the output)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional, TextIO

from ..common.files.rundir import METRICS_FILE
from ..common.stages.experiments import trains
from .plan import Job

SHOWN = 24  # rows of the live table


def _last_log(run_dir: str) -> Optional[dict]:
    path = Path(run_dir) / METRICS_FILE  # only its last lines: the sweep reads it every second
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 4096))
            lines = f.read().decode(errors="ignore").strip().splitlines()
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError, IndexError):
        return None


class Progress:
    def __init__(self, jobs: list[Job], slots: int, where: str, out: TextIO):
        self.jobs, self.slots, self.where, self.out = jobs, slots, where, out
        self.state = {j.label: "queued" for j in jobs}
        self.info: dict[str, str] = {}
        self.started: dict[str, float] = {}
        self.seen: dict[str, tuple[int, float]] = {}
        self.t0 = time.perf_counter()
        self.live = None
        from rich.console import Console

        self.console = Console(file=out)

    def __enter__(self):
        if self.console.is_terminal:
            from rich.live import Live

            self.live = Live(self.table(), console=self.console, refresh_per_second=2, transient=False)
            self.live.__enter__()
        else:
            self.line(f"sweep: {len(self.jobs)} run(s) on {self.where}")
        return self

    def __exit__(self, *exc):
        if self.live is not None:
            self.live.update(self.table())
            self.live.__exit__(*exc)
        n = {s: sum(1 for v in self.state.values() if v == s) for s in ("done", "failed")}
        self.line(f"sweep: {n['done']} done, {n['failed']} failed in {time.perf_counter() - self.t0:.0f} s")
        return False

    def line(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def event(self, kind: str, job: Job, outcome) -> None:
        if kind == "start":
            self.state[job.label] = "running"
            self.started[job.label] = time.perf_counter()
        else:
            self.state[job.label] = outcome.status
            what = outcome.result.get("training") or next(iter(outcome.result.values()), "") if outcome.result else ""
            self.info[job.label] = f"{outcome.seconds:.0f} s" + (f", {what}" if what
                                                                 else "") if outcome.status == "done" \
                else outcome.error
        if self.live is None:
            if kind == "end":
                n = sum(1 for v in self.state.values() if v in ("done", "failed"))
                self.line(f"[{n}/{len(self.jobs)}] {outcome.status} {job.label}: {self.info[job.label]}")
        else:
            self.live.update(self.table())

    def poll(self, running: dict) -> None:
        if self.live is not None:
            self.live.update(self.table())

    def _speed(self, job: Job) -> tuple[str, str, str]:
        """(step/total, it/s, ETA) of a running training job, from its log."""
        if not job.config or not trains(job.kind):
            return "", "", ""
        total = job.config["train"]["iterations"]
        last = _last_log(job.run_dir)
        step = int(last["step"]) if last and "step" in last else 0
        now = time.perf_counter()
        step0, t0 = self.seen.setdefault(job.label, (step, now))
        its = (step - step0) / (now - t0) if step > step0 and now > t0 else 0.0
        eta = f"{(total - step) / its / 60:.1f} min" if its > 0 else ""
        return f"{step:,}/{total:,}", f"{its:.0f}" if its else "", eta

    def table(self):
        from rich.table import Table

        counts = {s: sum(1 for v in self.state.values() if v == s) for s in ("queued", "running", "done", "failed")}
        t = Table(title=f"posrnn sweep on {self.where}: " + ", ".join(f"{k} {v}" for k, v in counts.items())
                  + f" — {time.perf_counter() - self.t0:.0f} s", title_justify="left")
        for col in ("run", "state", "step", "it/s", "ETA / result"):
            t.add_column(col, no_wrap=col != "ETA / result", overflow="fold")
        order = {"running": 0, "failed": 1, "queued": 2, "done": 3}
        rows = sorted(self.jobs, key=lambda j: order[self.state[j.label]])[:SHOWN]
        for j in rows:
            s = self.state[j.label]
            style = {"running": "bold", "failed": "red", "done": "green", "queued": "dim"}[s]
            step, its, eta = self._speed(j) if s == "running" else ("", "", self.info.get(j.label, ""))
            t.add_row(j.label, f"[{style}]{s}[/]", step, its, eta)
        if len(self.jobs) > SHOWN:
            t.caption = f"{len(self.jobs) - SHOWN} more not shown"
        return t
