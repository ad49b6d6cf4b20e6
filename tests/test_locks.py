"""One lock per run directory (``engine.lock``): it never follows a link, flock and lock-file
holders exclude each other, a dead holder's lock file is taken over by one process only, and a
lock file that names no holder is named with the command that clears it."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.engine import lock
from posrnn_cli.engine.lock import LOCK, LOCK_FILE, LockBusy, run_lock

from conftest import ROOT
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
#: says READY, takes DIR's lock once GO exists; says HELD (or DOUBLE when another holder is inside too) or BUSY; holds
#: it SECONDS
HOLD = """
import os, sys, time
from pathlib import Path
from posrnn_cli.engine.lock import LockBusy, run_lock
d, go, hold = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
print("READY", flush=True)
while not go.exists():
    time.sleep(0.001)
try:
    with run_lock(d, "racer"):
        try:
            os.close(os.open(d / "inside", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            print("HELD", flush=True)
            time.sleep(hold)
            os.unlink(d / "inside")
        except FileExistsError:
            print("DOUBLE", flush=True)
except LockBusy:
    print("BUSY", flush=True)
"""


def holder(run: Path, kind: str, hold: float = 60.0) -> subprocess.Popen:
    """A process holding ``run``'s lock of ``kind`` (once it said HELD)."""
    (run / "go").touch()
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(run), str(run / "go"), str(hold)], text=True,
                         env={**ENV, "POSRNN_LOCK": kind}, stdout=subprocess.PIPE)
    assert [p.stdout.readline().strip() for _ in range(2)] == ["READY", "HELD"]
    return p


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def one_line_error(run: Path) -> str:
    with pytest.raises(PosrnnError) as e:
        with run_lock(run):
            pass
    assert "\n" not in str(e.value)
    return str(e.value)


# ---- never through a link ----------------------------------------------------------------------------
@pytest.mark.parametrize("kind,name", [("flock", LOCK), ("file", LOCK_FILE), ("file", LOCK)])
@pytest.mark.parametrize("link", ["symbolic", "hard"])
def test_a_lock_that_is_a_link_is_refused_and_what_it_points_to_is_untouched(tmp_path, monkeypatch, kind, name, link):
    monkeypatch.setenv("POSRNN_LOCK", kind)
    run, target = tmp_path / "run", tmp_path / "precious.txt"
    run.mkdir()
    target.write_text("keep me\n")
    (os.symlink if link == "symbolic" else os.link)(target, run / name)
    message = one_line_error(run)
    assert "link" in message and f"rm {run / name}" in message
    assert target.read_text() == "keep me\n"
    assert (run / name).is_symlink() == (link == "symbolic")  # the link itself is left for its owner to remove
    (run / name).unlink()
    with run_lock(run):  # once removed, the run can be locked again
        pass
    assert target.read_text() == "keep me\n" and sorted(os.listdir(run)) == []


def test_a_lock_that_is_a_fifo_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / LOCK)
    assert "not a regular file" in one_line_error(tmp_path)


# ---- a lock file that names no holder -------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["flock", "file"])
@pytest.mark.parametrize("text,shown", [("", "it is empty"), ("\x00\x13garbage", "garbage"),
                                        (f"host {socket.gethostname()} pid 99999999999999999999: posrnn train", "9999"),
                                        (f"host {socket.gethostname()} pid 0: posrnn train", "pid 0")])
def test_an_empty_garbled_or_impossible_lock_file_is_named_with_the_command_that_clears_it(tmp_path, monkeypatch, kind,
                                                                                          text, shown):
    monkeypatch.setenv("POSRNN_LOCK", kind)
    (tmp_path / LOCK_FILE).write_text(text)
    message = one_line_error(tmp_path)
    assert "names no holder" in message and shown in message and f"rm {tmp_path / LOCK_FILE}" in message
    assert (tmp_path / LOCK_FILE).read_text() == text and not (tmp_path / LOCK).exists()
    (tmp_path / LOCK_FILE).unlink()  # the command it names clears it
    with run_lock(tmp_path):
        pass


# ---- the two kinds exclude each other ----------------------------------------------------------------------
@pytest.mark.parametrize("first,second", [("flock", "file"), ("file", "flock")])
def test_a_holder_of_either_kind_excludes_the_other_kind(tmp_path, monkeypatch, first, second):
    p = holder(tmp_path, first)
    try:
        monkeypatch.setenv("POSRNN_LOCK", second)
        with pytest.raises(LockBusy, match=rf"in use by another process \(.*pid {p.pid}: racer"):
            with run_lock(tmp_path):
                pass
    finally:
        p.kill()
        p.wait()
    # the flock goes with its holder; a dead holder's lock file is taken over
    with run_lock(tmp_path, "next"):
        pass
    assert not (tmp_path / LOCK).exists() and not (tmp_path / LOCK_FILE).exists()


def test_two_lock_kinds_racing_for_one_run_never_both_hold_it(tmp_path):
    """A flock taker and a lock-file taker started together, four times: never two
    holders at once, and never two refusals (the lock-file taker waits out a flock taker that only checks)."""
    for i in range(4):
        run = tmp_path / str(i)
        run.mkdir()
        go = run / "go"
        racers = [subprocess.Popen([sys.executable, "-c", HOLD, str(run), str(go), "0.3"], text=True,
                                   env={**ENV, "POSRNN_LOCK": kind}, stdout=subprocess.PIPE)
                  for kind in (("flock", "file") if i % 2 else ("file", "flock"))]
        assert [p.stdout.readline().strip() for p in racers] == ["READY", "READY"]
        go.touch()
        said = sorted(p.communicate(timeout=60)[0].strip() for p in racers)
        assert "DOUBLE" not in said and "HELD" in said, said  # (both HELD: one after the other)


# ---- taking over a dead holder's lock file ------------------------------------------------------------------
def test_a_dead_holders_lock_file_taken_over_by_another_process_first_is_left_to_it(tmp_path, monkeypatch):
    """Two takers read the same dead holder; the other one takes over first (between our reading
    it and removing it): we must not remove the other's fresh lock file and take the run too."""
    monkeypatch.setenv("POSRNN_LOCK", "file")
    gone = dead_pid()
    (tmp_path / LOCK_FILE).write_text(f"host {socket.gethostname()} pid {gone}: posrnn train\n")
    real_kill, other = os.kill, []

    def kill(pid, sig):
        if pid == gone and sig == 0 and not other:
            other.append(holder(tmp_path, "file"))  # it takes the dead holder's lock over now
        return real_kill(pid, sig)

    monkeypatch.setattr(os, "kill", kill)
    try:
        with pytest.raises(LockBusy) as e:
            with run_lock(tmp_path, "late"):
                pass
        assert f"pid {other[0].pid}: racer" in str(e.value)
        assert f"pid {other[0].pid}: racer" in (tmp_path / LOCK_FILE).read_text()
    finally:
        for p in other:
            p.kill()
            p.wait()


def test_without_any_flock_takeovers_take_turns_through_a_guard_file(tmp_path, monkeypatch, capsys):
    def refuse(fd, op):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(lock.fcntl, "flock", refuse)
    (tmp_path / LOCK_FILE).write_text(f"host {socket.gethostname()} pid {dead_pid()}: posrnn train\n")
    with run_lock(tmp_path, "mine"):
        assert f"pid {os.getpid()}: mine" in (tmp_path / LOCK_FILE).read_text()
    assert "removing the stale lock" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == []
    # a guard left by a takeover cut short is named, never waited on for good
    (tmp_path / LOCK_FILE).write_text(f"host {socket.gethostname()} pid {dead_pid()}: posrnn train\n")
    (tmp_path / lock.TAKEOVER).touch()
    message = one_line_error(tmp_path)
    assert f"rm {tmp_path / lock.TAKEOVER}" in message


# ---- a run this process may not write -------------------------------------------------------------------------
def test_a_reader_of_a_read_only_run_goes_on_without_the_lock_and_a_writer_is_refused(tmp_path, monkeypatch):
    real_open = os.open

    def read_only(path, flags, *a, **kw):
        if flags & os.O_CREAT:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return real_open(path, flags, *a, **kw)

    monkeypatch.setattr(os, "open", read_only)
    for kind in ("flock", "file"):
        monkeypatch.setenv("POSRNN_LOCK", kind)
        with run_lock(tmp_path, "stability", reading=True):
            pass
        with pytest.raises(lock.LockDenied, match="Read-only file system"):
            with run_lock(tmp_path, "train"):
                pass


# ---- a reader's check ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["flock", "file"])
def test_a_readers_check_names_a_holder_of_either_kind_and_takes_nothing(tmp_path, kind):
    lock.check_free(tmp_path)  # nobody holds it: nothing is created
    assert sorted(os.listdir(tmp_path)) == []
    p = holder(tmp_path, kind)
    try:
        with pytest.raises(LockBusy, match=rf"pid {p.pid}: racer"):
            lock.check_free(tmp_path)
    finally:
        p.kill()
        p.wait()


def test_an_flock_whose_file_its_last_holder_removed_after_our_open_is_taken_on_a_new_file(tmp_path, monkeypatch):
    """The race two lock kinds can meet: our open finds the .lock file an instant before its last
    holder removes it, so the descriptor names a file with no name left (0 links). That is no hard
    link to refuse: the taker opens the lock again and holds it."""
    real_open, calls = lock._open, []

    def open_then_removed(path, flags):
        fd = real_open(path, flags)
        if not calls and Path(path).name == lock.LOCK:
            calls.append(path)
            os.unlink(path)  # the last holder lets go and removes it, after our open
        return fd

    monkeypatch.setattr(lock, "_open", open_then_removed)
    with lock.run_lock(tmp_path, "racer"):
        assert calls and (tmp_path / lock.LOCK).is_file()
        assert "racer" in (tmp_path / lock.LOCK).read_text()
