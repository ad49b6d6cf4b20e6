"""One answer to "what state is this run in": ``common.files.rundir.run_state``, read by ``posrnn
train``, by the sweep's jobs and by ``posrnn sweep --dry-run``."""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from posrnn_cli.common.settings.config import RunConfig, dump_yaml
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.files.io import write_marker
from posrnn_cli.common.files.rundir import prepare_run_dir, run_state
from posrnn_cli.engine.lock import LOCK_FILE, run_lock
from posrnn_cli.sweep import status
from posrnn_cli.sweep.jobs import run_action
from posrnn_cli.sweep.plan import Job

from conftest import ROOT


def cfg(iterations: int = 10) -> RunConfig:
    c = RunConfig()
    return replace(c, train=replace(c.train, iterations=iterations))


def make_run(d: Path, c: RunConfig, steps: list[int]) -> Path:
    (d / "checkpoints").mkdir(parents=True)
    (d / "config.yaml").write_text(dump_yaml(c))
    for s in steps:
        (d / "checkpoints" / f"step_{s:07d}.pt").write_bytes(b"")
    return d


def job(d: Path, c: RunConfig, kind: str = "train") -> Job:
    return Job(experiment="e", name=d.name, kind=kind, run_dir=str(d), config=c.to_dict())


@pytest.mark.parametrize("steps, saved_iters, expected", [
    ([], 10, "resume"), ([5], 10, "resume"), ([5, 10], 10, "done"), ([5], 20, "different"),
])
def test_the_three_readers_agree(tmp_path, steps, saved_iters, expected):
    d = make_run(tmp_path / "r", cfg(saved_iters), steps)
    st = run_state(d, cfg())
    assert st.state == expected
    assert status(job(d, cfg())) == expected
    if expected == "different":
        with pytest.raises(PosrnnError, match="holds a different run"):
            run_action(d, cfg(), force=False)
        assert run_action(d, cfg(), force=True) == "replace"
    else:
        assert run_action(d, cfg(), force=False) == expected


def test_new_and_files_without_a_config(tmp_path):
    assert run_state(tmp_path / "absent", cfg()).state == "new"
    (tmp_path / "lock-only").mkdir()
    (tmp_path / "lock-only" / ".lock").write_text("")
    assert run_state(tmp_path / "lock-only", cfg()).state == "new"
    d = tmp_path / "orphan"
    (d / "checkpoints").mkdir(parents=True)
    st = run_state(d, cfg())
    assert st.state == "different" and "no config.yaml" in st.problem
    with pytest.raises(PosrnnError, match="no config.yaml"):
        run_action(d, cfg(), force=False)
    for force in (False, True):  # no marker, no config: not posrnn's, so never replaced
        with pytest.raises(PosrnnError, match="holds files posrnn did not write .*--force included"):
            prepare_run_dir(d, cfg(), resume=False, force=force)


def test_an_unreadable_config_is_different_and_never_resumed(tmp_path):
    d = tmp_path / "r"
    d.mkdir()
    (d / "config.yaml").write_text("train: [unclosed\n")
    assert run_state(d, cfg()).state == "different" and run_state(d, cfg()).foreign  # no marker: another tool's
    with pytest.raises(PosrnnError, match="did not write \\(its config.yaml is not a posrnn config\\)"):
        prepare_run_dir(d, cfg(), resume=False, force=True)
    write_marker(d, "run")  # posrnn's run, its config.yaml damaged since
    assert status(job(d, cfg())) == "different"
    with pytest.raises(PosrnnError, match="not valid YAML"):
        prepare_run_dir(d, cfg(), resume=True, force=False)
    assert prepare_run_dir(d, cfg(), resume=False, force=True).checkpoint is None


def test_a_larger_iteration_count_extends_on_resume(tmp_path):
    d = make_run(tmp_path / "r", cfg(10), [10])
    res = prepare_run_dir(d, cfg(20), resume=True, force=False)
    assert res.extended_from == 10 and res.checkpoint.name == "step_0000010.pt"
    with pytest.raises(PosrnnError, match="already at step 10"):
        prepare_run_dir(d, cfg(8), resume=True, force=False)


@pytest.mark.parametrize("module", ["posrnn_cli.common.files.rundir", "posrnn_cli.engine.lifecycle"])
def test_run_state_and_a_run_directorys_lifecycle_need_no_torch(module):
    code = f"import sys, {module}; print('torch' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.stdout.strip() == "False", r.stderr


# ---- locks where the filesystem has no flock ---------------------------------------------------------
def no_flock(monkeypatch, code: int = errno.ENOLCK):
    def refuse(fd, op):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(fcntl, "flock", refuse)


@pytest.mark.parametrize("code", [errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS])
def test_without_flock_a_lock_file_naming_host_and_pid_excludes(tmp_path, monkeypatch, code):
    no_flock(monkeypatch, code)
    with run_lock(tmp_path, "first"):
        text = (tmp_path / LOCK_FILE).read_text()
        assert text.startswith(f"host {socket.gethostname()} pid {os.getpid()}: first (pid namespace "
                               f"{os.readlink('/proc/self/ns/pid')}, started ") and text.endswith(")\n")
        assert not (tmp_path / ".lock").exists()  # the flock file is not left behind
        with run_lock(tmp_path, "re-entered"):  # the same process re-enters, as a sweep job training its run does
            pass
        assert (tmp_path / LOCK_FILE).is_file()
    assert not (tmp_path / LOCK_FILE).exists()
    # another live process of this host holds it: one line naming it
    other = subprocess.Popen([sys.executable, "-c", "import time; print(1, flush=True); time.sleep(30)", "posrnn"],
                             stdout=subprocess.PIPE)  # a posrnn process, by its argv
    try:
        other.stdout.readline()  # started (its argv is its own, no longer the forking parent's)
        (tmp_path / LOCK_FILE).write_text(f"host {socket.gethostname()} pid {other.pid}: posrnn sweep job x\n")
        with pytest.raises(PosrnnError) as e:
            with run_lock(tmp_path):
                pass
        assert f"pid {other.pid}: posrnn sweep job x" in str(e.value) and "\n" not in str(e.value)
    finally:
        other.kill()
        other.wait()
    assert (tmp_path / LOCK_FILE).is_file()  # a refused lock leaves the holder's file alone


def test_a_stale_lock_file_of_this_host_is_taken_and_said_so(tmp_path, monkeypatch, capsys):
    no_flock(monkeypatch)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (tmp_path / LOCK_FILE).write_text(f"host {socket.gethostname()} pid {gone.pid}: posrnn train\n")
    with run_lock(tmp_path, "second"):
        assert f"pid {os.getpid()}: second" in (tmp_path / LOCK_FILE).read_text()
    assert f"stale lock {tmp_path / LOCK_FILE} (pid {gone.pid}" in capsys.readouterr().err


def test_a_lock_file_of_another_host_is_named_with_how_to_clear_it(tmp_path, monkeypatch):
    monkeypatch.setenv("POSRNN_LOCK", "file")  # chosen even where flock works (BeeGFS: flock within one node only)
    (tmp_path / LOCK_FILE).write_text("host node17 pid 4242: posrnn sweep job a\n")
    with pytest.raises(PosrnnError, match=rf"host node17 pid 4242: posrnn sweep job a; if that process is gone, "
                                          rf"remove"):
        with run_lock(tmp_path):
            pass
    monkeypatch.setenv("POSRNN_LOCK", "nfs")
    with pytest.raises(PosrnnError, match="is not a lock kind; use flock"):
        with run_lock(tmp_path):
            pass


def test_no_flock_and_no_lock_file_is_one_line_naming_the_missing_flock(tmp_path, monkeypatch):
    no_flock(monkeypatch, errno.EOPNOTSUPP)
    real_open = os.open

    def no_excl(path, flags, *a):
        if flags & os.O_EXCL:
            raise OSError(errno.EACCES, os.strerror(errno.EACCES))
        return real_open(path, flags, *a)

    monkeypatch.setattr(os, "open", no_excl)
    with pytest.raises(PosrnnError, match=r"filesystem supports no flock and the lock file .* cannot be created"):
        with run_lock(tmp_path):
            pass
    assert sorted(os.listdir(tmp_path)) == []


def test_another_flock_error_is_one_line(tmp_path, monkeypatch):
    no_flock(monkeypatch, errno.EIO)
    with pytest.raises(PosrnnError, match=r"cannot lock .*Input/output error"):
        with run_lock(tmp_path):
            pass
    assert os.listdir(tmp_path) == []
