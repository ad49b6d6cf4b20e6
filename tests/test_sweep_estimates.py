"""The CPU estimate per core: each core the plan runs is timed at a representative size, runs are
scaled by FLOPs only within their core, and the estimate of lite and beyond2, priced from the
committed per-core record scaled to each measured repro's calibration step, is within 30% of
the repro's measured wall time (measured_repros.json, the figures docs/results.md states)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from posrnn_cli.common.experiments import EXPERIMENTS, trains
from posrnn_cli.measure import calibrate, cost
from posrnn_cli.sweep.plan import plan

sys.path.insert(0, str(Path(__file__).parent))
from conftest import ROOT
from fabricate import scratch

GRID = {"cells": [{"model": "gru", "vocab": 8}, {"model": "lstm", "vocab": 16}], "pe": ["none", "sinusoidal"],
        "seeds": [1], "length": 6, "hidden": 16, "iterations": 500, "batch": 32, "warmup": 5}


def recorded_rate(profile: str, step_ms: float) -> cost.Rate:
    """The rate the committed per-core record gives ``profile``'s cores at a calibration step of
    ``step_ms`` (each core's step scales with configuration A's, the record's own beside it)."""
    rec = calibrate.load_record()
    cores = {c["core"]: (c["ms_per_iter"] * step_ms / rec["calibration_ms"], c["flops_per_iter"])
             for name, c in rec["cores"].items() if name.startswith(f"{profile}:")}
    return cost.Rate("recorded", "CPU-minutes", "record", 1.0, 1.0, cores=cores, step_ms=step_ms)


@pytest.mark.parametrize("profile", ["lite", "beyond2"])
def test_the_estimate_is_within_30_percent_of_the_measured_repro(profile):
    """Lite's and beyond2's plans priced at their measured calibration step, against their measured
    wall time on the same cores (the FLOP-proportional model erred by −73% on beyond2)."""
    repro = calibrate.last_repro(profile)
    jobs = plan(ROOT / "params.yaml", profile, list(EXPERIMENTS), ROOT / "runs" / profile)
    rate = recorded_rate(profile, repro["calibration_ms"])
    assert set(rate.cores) == {j.config["model"]["name"] for j in jobs if trains(j.kind) and j.config}
    text, secs = cost.summary(jobs, rate, profile)
    wall = sum(s for s in secs.values() if s) / 60 / repro["cores"]
    assert abs(wall / repro["wall_minutes"] - 1) <= 0.30, (profile, wall, repro["wall_minutes"])
    said = re.search(r"this estimate is ([+-]\d+)% of it", text)
    assert said and int(said.group(1)) == round(100 * (wall / repro["wall_minutes"] - 1)), text


def test_the_measured_repros_are_the_figures_docs_results_states():
    doc = " ".join((ROOT / "docs" / "results.md").read_text(encoding="utf-8").split())
    rows = calibrate.load_repros()
    assert {"lite", "beyond2"} <= {r["profile"] for r in rows}
    for r in rows:
        m, s = re.fullmatch(r"(\d+) min (\d+) s", r["wall"]).groups()
        assert r["wall_minutes"] == pytest.approx(int(m) + int(s) / 60, abs=0.01)
        assert r["wall"] in doc and f"{r['calibration_ms']:.2f} ms" in doc and r["date"] in doc, r
        assert r["machine"] in doc and r["cores"] == int(r["machine"].split("-")[0])


def test_the_record_names_its_command_machine_and_date():
    rec = calibrate.load_record()
    assert rec["command"] == calibrate.RECORD_COMMAND and re.fullmatch(r"\d{4}-\d\d-\d\d", rec["date"])
    assert "core" in rec["machine"] and rec["calibration_ms"] > 0
    assert all(c["ms_per_iter"] > 0 and c["flops_per_iter"] > 0 for c in rec["cores"].values())


def test_each_core_is_timed_once_and_scales_its_runs_by_flops(tmp_path):
    params = scratch(tmp_path, fig2={**GRID, "cells": GRID["cells"] + [{"model": "gru", "vocab": 12}]})
    jobs = plan(params, "t", ["fig2"], runs_root=tmp_path / "runs")
    timed = []
    ms = {"gru": 3.0, "lstm": 7.0}
    rate = cost.profile_rate({"device": "cpu", "threads": 1}, calibrate=lambda t: (10.0, 2e9), jobs=jobs,
                             time_core=lambda cfg: timed.append(cfg) or ms[cfg.model.name])
    assert sorted(c.model.name for c in timed) == ["gru", "lstm"]
    assert all(c.train.device == "cpu" and c.train.threads == 1 for c in timed)
    gru = [j.run_config() for j in jobs if j.config["model"]["name"] == "gru"]
    assert sorted(cost.flops_per_iteration(c) for c in gru)[(len(gru) - 1) // 2] == rate.cores["gru"][1]
    text, secs = cost.summary(jobs, rate, "t")
    for j in jobs:
        core_ms, at = rate.cores[j.config["model"]["name"]]
        assert secs[j.label] == pytest.approx(500 * core_ms * cost.flops_per_iteration(j.run_config()) / at / 1000)
    assert "gru 3.0 ms, lstm 7.0 ms" in text and "calibration step (configuration A) 10.0 ms" in text
    assert "no measured repro of t is recorded" in text


def test_the_error_is_stated_against_the_last_repro_at_this_step():
    repro = calibrate.last_repro("lite")
    rate = cost.Rate("here", "CPU-minutes", "src", 1.0, 1.0, step_ms=2 * repro["calibration_ms"])
    lines = cost.repro_lines(2 * 60 * 100.0, rate, "lite")  # 200 CPU-minutes: 100 min on 2 cores
    scaled = 2 * repro["wall_minutes"]
    assert lines[0] == "  on 2 cores, one run per core: about 100 min of wall time for training"
    assert (f"{scaled:,.0f} min at this machine's {2 * repro['calibration_ms']:.1f} ms" in lines[1]
            and repro["wall"] in lines[1])
    assert lines[1].endswith(f"{100 / scaled - 1:+.0%} of it")


def test_a_core_that_cannot_be_timed_here_falls_back_on_configuration_a_and_says_so(tmp_path):
    from posrnn_cli.common.errors import PosrnnError

    jobs = plan(scratch(tmp_path, fig2=GRID), "t", ["fig2"], runs_root=tmp_path / "runs")

    def time_core(cfg):
        if cfg.model.name == "lstm":
            raise PosrnnError("no encoded corpus here")
        return 3.0

    rate = cost.profile_rate({"device": "cpu", "threads": 1}, calibrate=lambda t: (10.0, 2e9), jobs=jobs,
                             time_core=time_core)
    assert set(rate.cores) == {"gru"} and "lstm could not be timed here" in rate.source
    _, secs = cost.summary(jobs, rate)
    lstm = next(j for j in jobs if j.config["model"]["name"] == "lstm")
    assert secs[lstm.label] == pytest.approx(500 * cost.flops_per_iteration(lstm.run_config()) / 2e9)
