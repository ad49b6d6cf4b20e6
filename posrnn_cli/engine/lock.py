"""One process per run directory: ``run_lock``.

Two kinds of lock, which exclude each other:

* ``flock`` (the default): an flock on ``RUN/.lock`` (which names its holder). The kernel
  releases it when its holder dies, however it dies.
* ``file`` (``POSRNN_LOCK=file``, and wherever the filesystem has no flock): ``RUN/.lock.excl``
  created with O_CREAT|O_EXCL, naming host and pid. BeeGFS and some NFS set-ups flock within one
  node only, so runs written from several nodes need it.

A holder of either kind also checks the other kind: a ``flock`` holder refuses while a live
``.lock.excl`` is there, a ``file`` holder also takes the flock where the filesystem has one.

Neither ever follows a link: a ``.lock`` that is a symbolic or hard link (or not a regular file)
is refused in one line naming the command that clears it, and nothing is written through it.
A lock file whose holder on this host is dead is taken over, one taker at a time (an flock on
the directory, or where there is none a ``.lock.takeover`` file), after checking that the file
is still the dead holder's. A lock file that names no holder (empty or garbled), or a holder on
another host, is named with the command that clears it once no process uses the run.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import socket
import stat
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..common.errors import PosrnnError
from .replace import ASIDE, leftovers, recover

LOCK = ".lock"
#: the lock file: created with O_CREAT|O_EXCL naming host and pid
LOCK_FILE = ".lock.excl"
#: held (O_CREAT|O_EXCL) while a dead holder's lock file is taken over, where the directory has no flock
TAKEOVER = ".lock.takeover"
LOCK_ENV = "POSRNN_LOCK"
#: what flock raises on a filesystem that does not support it (Lustre mounted without flock, some NFS)
NO_FLOCK = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EINVAL})
#: what creating a lock raises in a directory this process may not write
NO_WRITE = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
#: the largest pid any Linux kernel hands out (``pid_max`` ≤ 2**22)
MAX_PID = 2**22
_HOLDER_RE = re.compile(r"host (\S+) pid (\d{1,12}): ")
#: how a holder's line ends: the pid namespace its pid belongs to (older lines lack it)
_NS_RE = re.compile(r" \(pid namespace ([^\s,()]+(?:\[\d+\])?)(?:, started (\d+))?\)$")
_FLAGS = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class LockBusy(PosrnnError):
    """``run_lock``: the directory is held by another process (``holder`` names it)."""

    def __init__(self, message: str, holder: str = ""):
        super().__init__(message)
        self.holder = holder


class LockDenied(PosrnnError):
    """``run_lock``: the lock cannot be created (the directory is read-only to this process)."""


@dataclass
class _Held:
    depth: int
    flock_fd: Optional[int] = None  # descriptor holding the flock on RUN/.lock
    file_fd: Optional[int] = None  # descriptor of RUN/.lock.excl, when this process created it


_held: dict[str, _Held] = {}  # run directories this process holds (realpath), so a sweep job may train its run


def _clear(path: Path) -> str:
    return f"if no posrnn process uses {path.parent}, remove it: rm {path}"


def _refuse_link(path: Path, fd: int) -> None:
    """Refuse (closing ``fd``) a lock that is not a regular file of its own."""
    st = os.fstat(fd)
    if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
        return
    os.close(fd)
    what = "not a regular file" if not stat.S_ISREG(st.st_mode) else f"a hard link ({st.st_nlink} names for one file)"
    raise PosrnnError(f"the lock {path} is {what}; posrnn never writes through it: {_clear(path)}")


def _open(path: Path, flags: int) -> int:
    """``os.open`` that never follows a symbolic link at ``path``."""
    try:
        return os.open(path, flags | _FLAGS, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP or (e.errno == errno.EEXIST and path.is_symlink()):
            raise PosrnnError(
                f"the lock {path} is a symbolic link; posrnn never writes through it: {_clear(path)}") from None
        raise


def read_lock_line(path: Path) -> tuple[Optional[str], Optional[int]]:
    """(the lock file's first line, its inode), without following links or blocking on a FIFO;
    (None, None) when it is gone, (None, inode) when it is no regular file of its own (a link)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _FLAGS)
    except FileNotFoundError:
        return None, None
    except OSError:
        with contextlib.suppress(OSError):
            return None, os.lstat(path).st_ino
        return None, None
    try:
        st = os.fstat(fd)
        data = os.read(fd, 4096) if stat.S_ISREG(st.st_mode) and st.st_nlink == 1 else None
    finally:
        os.close(fd)
    if data is None:
        return None, st.st_ino
    text = data.decode("utf-8", errors="replace").strip()
    return (text.splitlines()[0][:400] if text else ""), st.st_ino


def _read_settled(path: Path, wait: float = 2.0) -> tuple[Optional[str], Optional[int]]:
    """``read_lock_line``, but a lock file found empty is read again for up to ``wait`` seconds: a racer
    creates it (O_EXCL) an instant before it writes its holder's line, and is no holder-less lock."""
    deadline = time.monotonic() + wait
    text, ino = read_lock_line(path)
    while text == "" and time.monotonic() < deadline:
        time.sleep(0.02)
        text, ino = read_lock_line(path)
    return text, ino


def _busy(run_dir: Path, holder: str, kind: str = LOCK) -> LockBusy:
    """The one line for a held lock, naming the kind met (the flock on ``.lock`` or the lock file)."""
    met = "its flock on .lock" if kind == LOCK else f"its lock file {LOCK_FILE}"
    return LockBusy(f"{run_dir} is in use by another process ({_who(holder)}, holding {met}); wait for it to finish "
                    f"or stop it", holder)


def _pid_ns() -> str:
    """This process's pid namespace (``pid:[…]``): a pid means the same process only within one."""
    try:
        return os.readlink("/proc/self/ns/pid").replace(" ", "")
    except OSError:
        return "?"


def _start_time(pid: int) -> Optional[str]:
    """When ``pid`` started (clock ticks since boot, ``/proc/PID/stat``): with the pid, names one process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError, UnicodeDecodeError):
        return None


def _ns_and_start() -> str:
    start = _start_time(os.getpid())
    return f"pid namespace {_pid_ns()}" + (f", started {start}" if start else "")


def _reused(pid: int, text: str) -> bool:
    """Whether the line's pid now names another process than the one that wrote it (its start time differs)."""
    m = _NS_RE.search(text or "")
    started = m.group(2) if m else None
    now = _start_time(pid) if started else None
    return started is not None and now is not None and now != started


def _is_posrnn(pid: int) -> Optional[bool]:
    """Whether the live process ``pid`` (of this pid namespace) runs posrnn; None when unknown."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read(4096).split(b"\0")
    except OSError:
        return None
    return any(b"posrnn" in a for a in argv)


def _who(holder: str) -> str:
    """A holder's line as shown: its command only when the pid it names runs posrnn here (a pid of
    this namespace that runs something else, pid 1 say, has not written it)."""
    m = re.search(r"pid (\d{1,12})", holder or "")
    ns = _NS_RE.search(holder or "")
    if not m or (ns and ns.group(1) != _pid_ns()):
        return holder
    if _reused(int(m.group(1)), holder):
        return (f"the lock names pid {m.group(1)}, which has since ended and whose number a later process now has; "
                "the process holding the lock did not name itself")
    if _is_posrnn(int(m.group(1))) is False:
        return f"the lock names pid {m.group(1)}, which is not a posrnn process"
    return holder


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _verdict(path: Path, text: Optional[str]) -> tuple[str, str]:
    """What a lock file says: (``stale`` | ``held`` | ``unknown``, a description)."""
    m = _HOLDER_RE.match(text or "")
    if text is None or not m or not 0 < int(m.group(2)) <= MAX_PID:
        shown = "it is empty" if text == "" else "it is a link or no regular file" if text is None else f"{text[:60]!r}"
        return "unknown", f"the lock {path} names no holder ({shown}); {_clear(path)}"
    host, pid = m.group(1), int(m.group(2))
    ns = _NS_RE.search(text).group(1) if _NS_RE.search(text) else None
    if host != socket.gethostname():
        return "held", f"{text}; if that process is gone, remove {path}"
    if ns is not None and ns != _pid_ns():  # another container's pid: its liveness cannot be seen from here
        return "held", (f"{text}, in another pid namespace, which posrnn cannot see; if that process is gone, remove "
                        f"{path}")
    if not _pid_alive(pid) or _reused(pid, text):  # gone, or its number now another process's
        return "stale", text
    if _is_posrnn(pid) is False:
        return "unknown", (f"the lock {path} names pid {pid}, which is running but is not a posrnn process (the pid "
                           f"was reused, or the file is not posrnn's); {_clear(path)}")
    return "held", text


@contextmanager
def _one_taker(run_dir: Path):
    """Serialise takeovers of a dead holder's lock file: an flock on the directory, or where the
    filesystem has none, ``TAKEOVER`` created with O_EXCL (waited for up to a second)."""
    dfd = os.open(run_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        try:
            fcntl.flock(dfd, fcntl.LOCK_EX)
            yield
            return
        except OSError as e:
            if e.errno not in NO_FLOCK:
                raise
        guard = run_dir / TAKEOVER
        for _ in range(100):
            try:
                os.close(_open(guard, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
                break
            except FileExistsError:
                time.sleep(0.01)
        else:
            raise PosrnnError(f"{guard} is left from a takeover of a dead process's lock that did not finish; "
                              f"{_clear(guard)}")
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.unlink(guard)
    finally:
        os.close(dfd)


def _take_over(run_dir: Path, path: Path, text: str, ino: int) -> None:
    """Remove the dead holder's lock file ``path`` (read as ``text``, inode ``ino``) unless
    another taker was first: then the file there now is left alone."""
    with _one_taker(run_dir):
        now, now_ino = read_lock_line(path)
        if now_ino != ino or now != text:
            return
        m = _HOLDER_RE.match(text)
        print(f"posrnn: removing the stale lock {path} (pid {m.group(2)} on {m.group(1)} is gone)", file=sys.stderr)
        os.unlink(path)


def _check_file_lock(run_dir: Path) -> None:
    """For an flock holder: refuse while ``.lock.excl`` names a live, unknown or remote holder;
    take over a dead one's."""
    path = run_dir / LOCK_FILE
    for _ in range(3):
        text, ino = _read_settled(path)
        if ino is None:
            return
        kind, desc = _verdict(path, text)
        if kind == "stale":
            _take_over(run_dir, path, text, ino)
            continue
        raise (_busy(run_dir, desc, LOCK_FILE) if kind == "held" else PosrnnError(desc))
    raise _busy(run_dir, read_lock_line(path)[0] or "another process", LOCK_FILE)


def _unlink_own(path: Path, fd: int) -> None:
    """Remove ``path`` if it is still the file open as ``fd`` (never another process's)."""
    with contextlib.suppress(OSError):
        if os.lstat(path).st_ino == os.fstat(fd).st_ino:
            os.unlink(path)


def _write_holder(fd: int, line: str) -> None:
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, line.encode(), 0)
    except OSError:
        pass  # the holder's name is a courtesy; the lock is what excludes


def _denied(run_dir: Path, path: Path, e: OSError) -> PosrnnError:
    cls = LockDenied if e.errno in NO_WRITE else PosrnnError
    return cls(f"cannot lock {run_dir} ({e.strerror or type(e).__name__}: {path}); check its permissions")


def _flock(run_dir: Path, path: Path, what: str) -> Optional[int]:
    """Take the flock on ``path``: its descriptor, or None when this filesystem has no flock."""
    while True:
        try:
            fd = _open(path, os.O_RDWR | os.O_CREAT)
        except OSError as e:
            raise _denied(run_dir, path, e) from None
        if os.fstat(fd).st_nlink == 0:  # its last holder removed it after our open (no name left): open anew
            os.close(fd)
            continue
        _refuse_link(path, fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = read_lock_line(path)[0] or "a process that did not say which"
            os.close(fd)
            raise _busy(run_dir, holder) from None
        except OSError as e:
            with contextlib.suppress(OSError):
                if os.fstat(fd).st_size == 0:
                    _unlink_own(path, fd)  # the empty file this call created
            os.close(fd)
            if e.errno not in NO_FLOCK:
                raise PosrnnError(f"cannot lock {run_dir} ({e.strerror or type(e).__name__}: {path})") from None
            return None  # no flock here: the lock file takes over
        try:  # the file may have been removed by its last holder between our open and flock: retry then
            same = os.fstat(fd).st_ino == os.lstat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    _write_holder(fd, f"pid {os.getpid()}: {what} ({_ns_and_start()})\n")
    return fd


def _lock_file(run_dir: Path, what: str, why: str) -> int:
    """Create ``run_dir/.lock.excl`` (O_CREAT|O_EXCL) naming this host and pid: its descriptor.
    A dead holder's (this host) is taken over, with a line on stderr saying so."""
    path = run_dir / LOCK_FILE
    for _ in range(3):
        try:
            fd = _open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            text, ino = _read_settled(path)
            if ino is None:
                continue  # released meanwhile
            kind, desc = _verdict(path, text)
            if kind == "stale":
                _take_over(run_dir, path, text, ino)
                continue
            raise (_busy(run_dir, desc, LOCK_FILE) if kind == "held" else PosrnnError(desc)) from None
        except OSError as e:
            cls = LockDenied if e.errno in NO_WRITE else PosrnnError
            raise cls(f"cannot lock {run_dir}: {why} and the lock file {path} cannot be created "
                      f"({e.strerror or type(e).__name__})") from None
        _write_holder(fd, f"host {socket.gethostname()} pid {os.getpid()}: {what} ({_ns_and_start()})\n")
        return fd
    raise _busy(run_dir, read_lock_line(path)[0] or "another process", LOCK_FILE)


def _acquire(run_dir: Path, what: str, mode: str) -> _Held:
    fd = _flock(run_dir, run_dir / LOCK, what) if mode == "flock" else None
    if fd is not None:
        try:
            _check_file_lock(run_dir)  # a lock file's holder excludes an flock's
        except BaseException:
            _unlink_own(run_dir / LOCK, fd)
            os.close(fd)
            raise
        return _Held(1, flock_fd=fd)
    why = f"{LOCK_ENV}=file asks for it" if mode == "file" else "its filesystem supports no flock"
    ffd = _lock_file(run_dir, what, why)
    try:
        lfd = _flock_soon(run_dir, what) if mode == "file" else None  # an flock's holder excludes too
    except BaseException:
        _unlink_own(run_dir / LOCK_FILE, ffd)
        os.close(ffd)
        raise
    return _Held(1, flock_fd=lfd, file_fd=ffd)


def _flock_soon(run_dir: Path, what: str, wait: float = 0.5) -> Optional[int]:
    """For a lock file's holder: the flock too, waiting ``wait`` seconds for an flock taker that
    is only checking (it lets go on seeing our lock file), so that one of two racers wins."""
    deadline = time.monotonic() + wait
    while True:
        try:
            return _flock(run_dir, run_dir / LOCK, what)
        except LockBusy:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _release(run_dir: Path, held: _Held) -> None:
    for name, fd in ((LOCK_FILE, held.file_fd), (LOCK, held.flock_fd)):
        if fd is not None:
            _unlink_own(run_dir / name, fd)
            os.close(fd)


@contextmanager
def run_lock(run_dir: Path, what: str = "posrnn", reading: bool = False):
    """Hold ``run_dir``'s lock for the block (see the module's doc); another process gets one
    line naming the holder. Re-entrant within one process; ``run_dir`` must exist. Either lock is
    removed on release. On taking it, a run that a killed ``--force`` moved aside is restored
    (``replace.recover``). ``reading``: a command that only reads the run proceeds without the
    lock where this process may not create it (a read-only run)."""
    run_dir = Path(run_dir)
    key = os.path.realpath(run_dir)
    if key in _held:
        _held[key].depth += 1
        try:
            yield
        finally:
            _held[key].depth -= 1
        return
    mode = os.environ.get(LOCK_ENV, "flock")
    if mode not in ("flock", "file"):
        raise PosrnnError(f"{LOCK_ENV}={mode!r} is not a lock kind; use flock (the default) or file")
    try:
        held = _acquire(run_dir, what, mode)
    except LockDenied:
        if not reading:
            raise
        held = None
    if held is None:  # read-only to this process: nothing this user runs can change it meanwhile
        yield
        return
    _held[key] = held
    try:
        recover(run_dir)
        yield
    finally:
        del _held[key]
        _release(run_dir, held)


def relabel(run_dir: Path, what: str) -> None:
    """Rewrite the holder's description of a lock this process holds (e.g. a sweep's arrays)."""
    held = _held.get(os.path.realpath(run_dir))
    if held is None:
        return
    if held.file_fd is not None:
        _write_holder(held.file_fd, f"host {socket.gethostname()} pid {os.getpid()}: {what} (pid namespace "
                                    f"{_pid_ns()})\n")
    if held.flock_fd is not None:
        _write_holder(held.flock_fd, f"pid {os.getpid()}: {what} ({_ns_and_start()})\n")


def check_free(run_dir: Path) -> None:
    """For a reader that must not read a run another process writes (extend-vocab's source):
    LockBusy naming the holder when either kind of lock is held now. Takes nothing, so any
    number of readers may check at once."""
    run_dir = Path(run_dir)
    if holding(run_dir):
        return
    try:
        fd = os.open(run_dir / LOCK, os.O_RDONLY | os.O_NONBLOCK | _FLAGS)
    except OSError:
        fd = None  # no flock holder (or a link, which no holder uses)
    if fd is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BlockingIOError:
            raise _busy(run_dir, read_lock_line(run_dir / LOCK)[0] or "a process that did not say which") from None
        except OSError:
            pass  # no flock on this filesystem
        finally:
            os.close(fd)
    text, ino = read_lock_line(run_dir / LOCK_FILE)
    if ino is not None:
        kind, desc = _verdict(run_dir / LOCK_FILE, text)
        if kind == "held":
            raise _busy(run_dir, desc, LOCK_FILE)


def holding(run_dir: Path) -> bool:
    """Whether this process holds ``run_dir``'s lock."""
    return os.path.realpath(run_dir) in _held


def restore_before_reading(run_dir: Path) -> None:
    """For a command that reads a run without its lock: restore an old run moved aside first
    (taking the lock for that), or name it with what restores it where this process cannot."""
    if not any(f.name.startswith(ASIDE) for f in leftovers(run_dir)):
        return
    try:
        with run_lock(run_dir, "posrnn restoring a replaced run"):
            pass  # taking the lock is the restoration: run_lock puts a moved-aside run back first
    except LockDenied:
        raise PosrnnError(f"{run_dir} holds a half-replaced run: an interrupted `--force` moved the old run into "
                          f"{leftovers(run_dir)[0].name}; any posrnn command on it run by a user who may write "
                          f"{run_dir} restores it (e.g. posrnn eval {run_dir})") from None
