"""Provenance where numbers come from: a sweep's manifest is the cells its sweep wrote (one with a
cell dropped is refused, naming the run it no longer lists), a permutation record edited since it
was written is refused, and two compared runs scored from one checkpoint (a run and its copy) are
refused, each in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fabricate import scratch
from posrnn_cli.analysis.aggregate import aggregate
from posrnn_cli.cli import app
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.files.io import json_digest
from posrnn_cli.common.results.provenance import Proof, proven_record
from posrnn_cli.sweep import SweepOptions, run_sweep

from conftest import tiny_train

GRID = {"cells": [{"model": "gru", "vocab": 6}], "pe": ["none", "sinusoidal"], "seeds": [1], "length": 4,
        "hidden": 8, "iterations": 6, "batch": 8, "warmup": 1, "checkpoint_every": 6}


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("swept")
    run_sweep(scratch(root, fig2=GRID), "t", ["fig2"], SweepOptions(workers=1), runs_root=root / "runs" / "t")
    return root / "runs" / "t"


def test_a_manifest_with_a_cell_dropped_is_refused_naming_the_run(tmp_path, swept):
    runs = tmp_path / "runs"
    shutil.copytree(swept, runs)
    aggregate(runs, tmp_path / "tables", n_resamples=20)  # as the sweep wrote it
    manifest = runs / "fig2" / "sweep.json"
    data = json.loads(manifest.read_text())
    dropped = data["cells"].pop()["name"]
    manifest.write_text(json.dumps(data))
    with pytest.raises(PosrnnError) as e:
        aggregate(runs, tmp_path / "tables2", n_resamples=20)
    assert dropped in str(e.value) and "other cells than its sweep wrote" in str(e.value)
    assert not (tmp_path / "tables2").exists()


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("prov") / "a"
    r = CliRunner().invoke(app, ["train", *tiny_train(), "--out", str(run)])
    assert r.exit_code == 0, r.output
    return run


def test_a_flipped_permutation_result_is_refused(tmp_path, trained):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    proof = Proof(run)
    rec = {"sensitive": [True, False, True], "step": proof.step, "checkpoint_sha256": proof.checkpoint_sha256,
           "config_digest": proof.config_digest, "n_sequences": 3}
    (run / "permutation.json").write_text(json.dumps({**rec, "record_sha256": json_digest(rec)}))
    assert proven_record(run / "permutation.json", proof, "sensitive")["sensitive"] == [True, False, True]
    flipped = {**rec, "sensitive": [False, False, True], "record_sha256": json_digest(rec)}
    (run / "permutation.json").write_text(json.dumps(flipped))
    with pytest.raises(PosrnnError, match="edited since posrnn wrote it"):
        proven_record(run / "permutation.json", proof, "sensitive")


def test_compare_refuses_a_run_and_its_copy(tmp_path, trained):
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(trained, a)
    r = CliRunner().invoke(app, ["eval", str(a), "--device", "cpu"])
    assert r.exit_code == 0, r.output
    shutil.copytree(a, b)  # eval.json, scores, checkpoint and all
    r = CliRunner().invoke(app, ["compare", str(a), str(b), "--device", "cpu"])
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code != 0 and len(lines) == 1 and "one checkpoint" in lines[0], r.output


@pytest.mark.parametrize("how", ["copied", "edited"])
def test_a_training_log_copied_from_another_run_or_edited_gives_no_curve(tmp_path, swept, how):
    runs = tmp_path / "runs"
    shutil.copytree(swept, runs)
    a, b = sorted(p for p in (runs / "fig2").iterdir() if p.is_dir() and not p.name.startswith("."))[:2]
    log = a / "metrics.jsonl"
    if how == "copied":
        log.write_bytes((b / "metrics.jsonl").read_bytes())
    else:
        lines = log.read_text().splitlines()
        first = json.loads(lines[0])
        lines[0] = json.dumps({**first, "loss": first["loss"] / 2})
        log.write_text("\n".join(lines) + "\n")
    with pytest.raises(PosrnnError, match="not the log posrnn wrote"):
        aggregate(runs, tmp_path / "tables", n_resamples=20)
    assert not (tmp_path / "tables").exists()
