"""Messages that name the truth (fabricated inputs, beside the bad-input table): a lock names its
holder's command only when the holder is a posrnn process, and a holder in another pid namespace
is never taken for dead; a race names the lock kind it met; a run directory that is a sweep's
experiment directory or run root is refused; a table and its figure are swapped in together;
threads beyond the cores are refused by the dry run."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from typer.testing import CliRunner

from posrnn_cli.cli import app
from posrnn_cli.common.files import io
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.engine.lock import LOCK_FILE, LockBusy, run_lock
from posrnn_cli.sweep import SweepOptions, run_sweep

from conftest import tiny_train
from fabricate import scratch

HOST = socket.gethostname()


@pytest.fixture
def file_lock(monkeypatch):
    monkeypatch.setenv("POSRNN_LOCK", "file")


def test_a_lock_naming_a_live_process_that_is_not_posrnn_does_not_name_its_command(tmp_path, file_lock):
    (tmp_path / LOCK_FILE).write_text(f"host {HOST} pid 1: posrnn train --out run\n")
    with pytest.raises(PosrnnError) as e:
        with run_lock(tmp_path):
            pass
    msg = str(e.value)
    assert "names pid 1, which is running but is not a posrnn process" in msg and "in use by" not in msg
    assert f"rm {tmp_path / LOCK_FILE}" in msg and (tmp_path / LOCK_FILE).is_file()  # never taken over


def test_a_holder_in_another_pid_namespace_is_never_taken_for_dead(tmp_path, file_lock):
    line = f"host {HOST} pid 4194000: posrnn train --out run (pid namespace pid:[1])\n"  # no such pid here
    (tmp_path / LOCK_FILE).write_text(line)
    with pytest.raises(LockBusy, match="in another pid namespace, which posrnn cannot see"):
        with run_lock(tmp_path, "posrnn train --resume"):
            pass
    assert (tmp_path / LOCK_FILE).read_text() == line


def test_a_lock_file_line_names_this_pid_namespace(tmp_path, file_lock):
    with run_lock(tmp_path, "mine"):
        text = (tmp_path / LOCK_FILE).read_text()
        assert f"(pid namespace {os.readlink('/proc/self/ns/pid')}, started " in text and text.endswith(")\n")


def test_a_racer_that_has_not_yet_written_its_line_is_named_with_the_kind_it_holds(tmp_path, file_lock):
    path = tmp_path / LOCK_FILE
    path.write_text("")  # created by a racer an instant before it writes who it is
    racer = subprocess.Popen([sys.executable, "-c", "import time; print(1, flush=True); time.sleep(30)", "posrnn"],
                             stdout=subprocess.PIPE)
    racer.stdout.readline()

    def write_soon():
        time.sleep(0.1)
        path.write_text(f"host {HOST} pid {racer.pid}: posrnn train --out racer\n")

    t = threading.Thread(target=write_soon)
    t.start()
    try:
        with pytest.raises(LockBusy) as e:
            with run_lock(tmp_path):
                pass
    finally:
        t.join()
        racer.kill()
        racer.wait()
    assert "names no holder" not in str(e.value) and f"holding its lock file {LOCK_FILE}" in str(e.value)


@pytest.mark.parametrize("where", ["experiment", "root"])
def test_train_into_an_experiment_directory_or_a_run_root_is_refused(tmp_path, where):
    exp = tmp_path / "runs" / "fig2"
    exp.mkdir(parents=True)
    (exp / "sweep.json").write_text('{"cells": []}\n')
    out = exp if where == "experiment" else exp.parent
    before = sorted(p.name for p in out.rglob("*"))
    r = CliRunner().invoke(app, ["train", *tiny_train(), "--out", str(out)])
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code != 0 and len(lines) == 1, r.output
    assert ("experiment directory" if where == "experiment" else "run root") in lines[0]
    assert sorted(p.name for p in out.rglob("*")) == before


class Killed(BaseException):
    pass


@pytest.mark.parametrize("at", [0, 1])
def test_a_table_and_its_figure_swap_together_whatever_moment_kills_it(tmp_path, monkeypatch, at):
    table, figure = tmp_path / "stability.csv", tmp_path / "stability.png"
    table.write_bytes(b"old table\n")
    figure.write_bytes(b"old figure")
    real, count = os.replace, [0]

    def replace(a, b):
        if count[0] == at:
            raise Killed()
        count[0] += 1
        return real(a, b)

    monkeypatch.setattr(io.os, "replace", replace)
    with pytest.raises(Killed):
        io.write_table_and_figure(b"new table\n", table, figure, lambda p: p.write_bytes(b"new figure"))
    monkeypatch.undo()
    state = (table.read_bytes(), figure.read_bytes() if figure.exists() else None)
    assert state in ((b"old table\n", None), (b"new table\n", None))  # never the new table beside the old figure
    io.write_table_and_figure(b"new table\n", table, figure, lambda p: p.write_bytes(b"new figure"))
    assert (table.read_bytes(), figure.read_bytes()) == (b"new table\n", b"new figure")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != io.LEDGER) == ["stability.csv", "stability.png"]


def test_threads_beyond_the_cores_are_refused_by_the_dry_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fig2 = {"cells": [{"model": "gru", "vocab": 4}], "pe": ["none"], "seeds": [1], "length": 4, "hidden": 8,
            "iterations": 4}
    cores = len(os.sched_getaffinity(0))
    params = scratch(tmp_path, fig2=fig2, threads=cores + 1)
    with pytest.raises(PosrnnError, match=rf"asks for {cores + 1} CPU threads .*beyond the {cores} core"):
        run_sweep(params, "t", ["fig2"], SweepOptions(dry_run=True))
    assert not (tmp_path / "runs").exists()


def test_outside_a_repository_the_fix_is_to_change_into_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["status"])
    assert r.exit_code != 0
    assert "params file params.yaml does not exist here" in r.output
    assert "change into the repository (or pass --params FILE)" in r.output
    r = CliRunner().invoke(app, ["status", "--params", "other.yaml"])
    assert "pass an existing --params file" in r.output and "change into" not in r.output
