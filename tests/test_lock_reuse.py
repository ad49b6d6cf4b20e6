"""A lock's holder line names its pid and when that process started, so a pid the kernel has since
given to another process (posrnn's or not) reads as the holder gone, never as a live holder."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from posrnn_cli.engine.lock import LOCK_FILE, run_lock


def test_a_lock_file_whose_pid_was_reused_by_another_posrnn_process_is_taken_over(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("POSRNN_LOCK", "file")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "posrnn"])  # a live posrnn pid
    try:
        ns = os.readlink("/proc/self/ns/pid").replace(" ", "")
        (tmp_path / LOCK_FILE).write_text(f"host {socket.gethostname()} pid {other.pid}: posrnn train "
                                          f"(pid namespace {ns}, started 1)\n")  # written by a process long gone
        with run_lock(tmp_path, "mine"):
            assert f"pid {os.getpid()}: mine" in (tmp_path / LOCK_FILE).read_text()
        assert "removing the stale lock" in capsys.readouterr().err
    finally:
        other.kill()
        other.wait()


def test_a_lock_written_now_names_when_its_process_started(tmp_path, monkeypatch):
    monkeypatch.setenv("POSRNN_LOCK", "file")
    with run_lock(tmp_path, "mine"):
        line = (tmp_path / LOCK_FILE).read_text()
    with open(f"/proc/{os.getpid()}/stat") as f:
        start = f.read().rsplit(")", 1)[1].split()[19]
    assert f", started {start})" in line
