"""Bounded everything: readers of a user-given path refuse a FIFO or device before opening it, a
committed scorecard nested without bound is refused in one line by ``--across``, a large test set
an option asks for is estimated first and refused with the size that fits, and the GPU check's
report holds a training stage skipped for time."""

from __future__ import annotations

import os
import shutil
import signal

import pytest
from typer.testing import CliRunner

from posrnn_cli.cli import app
from posrnn_cli.common.host import memory
from posrnn_cli.common.settings.config import RunConfig
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.files.io import read_csv, read_npz
from posrnn_cli.engine.train import build_run
from posrnn_cli.measure import gpu_check

from conftest import ROOT


def one_line(r) -> str:
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code != 0 and len(lines) == 1 and not isinstance(r.exception, RecursionError), r.output
    return lines[0]


def test_across_refuses_a_committed_scorecard_nested_without_bound(tmp_path):
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    card = tmp_path / "results" / "lite" / "scorecard" / "scorecard.json"
    card.parent.mkdir(parents=True)
    card.write_text('{"rows": ' + "[" * 200_000 + "]" * 200_000 + "}")
    line = one_line(CliRunner().invoke(app, ["scorecard", "--across", "--params", str(tmp_path / "params.yaml")]))
    assert "scorecard.json" in line


def test_a_continuous_test_set_too_large_is_refused_with_the_size_that_fits(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda: 2 * 10**9)
    cfg = RunConfig()
    cfg.task.name, cfg.task.n_test, cfg.train.device = "continuous", 100_000, "cpu"
    with pytest.raises(PosrnnError) as e:
        build_run(cfg)
    words = str(e.value)
    assert "the held-out test set" in words and "task.n_test" in words and "fits" in words
    fit = int(words.rsplit("task.n_test ", 1)[1].split()[0].replace(",", ""))
    cfg.task.n_test = fit
    build_run(cfg)  # the size it names does fit


def test_the_gpu_check_reports_a_training_stage_skipped_for_time():
    rows = gpu_check.figures({"train": {"status": "skipped: out of time", "seconds": 0.0}})
    assert ("train", "status", "skipped: out of time") in rows


@pytest.mark.parametrize("reader", [read_csv, read_npz])
def test_table_readers_never_open_a_fifo(tmp_path, reader):
    fifo = tmp_path / "fig2.csv"
    os.mkfifo(fifo)

    def boom(*_):
        raise AssertionError("the FIFO was opened")
    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(30)
    try:
        with pytest.raises(PosrnnError, match="not a regular file"):
            reader(fifo)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_a_params_fifo_is_named_as_one(tmp_path):
    os.mkfifo(tmp_path / "params.yaml")
    line = one_line(CliRunner().invoke(app, ["profile", "list", "--params", str(tmp_path / "params.yaml")]))
    assert "not a regular file" in line
