"""Runs per hour of the local executor with k workers: the same small grid (GRU runs of the lite
profile's size) swept once per k in a scratch directory, so the figures compare k directly."""

from __future__ import annotations

import io
import tempfile
import time
from pathlib import Path

import yaml

from ..common.settings.config import load_yaml
from ..common.errors import PosrnnError
from ..sweep import SweepOptions, run_sweep


def sweep_throughput(workers: tuple[int, ...] = (1, 2), runs: int = 8, iterations: int = 1000,
                     params: Path = Path("params.yaml")) -> list[dict]:
    """For each k in ``workers``: wall seconds and runs per hour of ``runs`` identical-size GRU
    runs (V = 16, L = 8, H = 64, batch 128, ``iterations`` each, one thread per run)."""
    if runs < 1 or iterations < 1 or not workers or min(workers) < 1:
        raise PosrnnError("--runs, --iterations and every --workers value must be at least 1")
    base = load_yaml(Path(params)) if Path(params).is_file() else {}  # as DVC reads it
    grid = {"cells": [{"model": "gru", "vocab": 16}], "pe": ["none", "sinusoidal"],
            "seeds": list(range(1, (runs + 1) // 2 + 1)), "length": 8, "hidden": 64, "iterations": iterations,
            "batch": 128, "checkpoint_every": iterations}
    profile = {"device": "cpu", "threads": 1, "n_test": 1024, "fig2": grid}
    out = []
    for k in workers:
        with tempfile.TemporaryDirectory(prefix="posrnn-sweep-bench-") as tmp:
            p = Path(tmp) / "params.yaml"
            data = {key: base[key] for key in ("task", "model", "train") if key in base}
            p.write_text(yaml.safe_dump({**data, "profile": ["bench"], "profiles": {"bench": profile}}))
            t0 = time.perf_counter()
            done = run_sweep(p, "bench", ["fig2"], SweepOptions(workers=k), out=io.StringIO(),
                             runs_root=Path(tmp) / "runs")
            secs = time.perf_counter() - t0
        n = len(done)
        out.append({"workers": k, "runs": n, "iterations": iterations, "seconds": secs,
                    "runs_per_hour": 3600 * n / secs})
    base_rate = next((o["runs_per_hour"] for o in out if o["workers"] == 1), None)
    for o in out:
        o["speedup_vs_1"] = o["runs_per_hour"] / base_rate if base_rate else None
    return out
