"""Run directories: what state a run is in, decided once, without torch.

A run directory holds ``config.yaml`` (the resolved config), ``metrics.jsonl`` (the training
log), ``checkpoints/step_NNNNNNN.pt`` and, after ``eval``, ``eval.json``. ``run_state`` compares
one with a config and says what it holds for it:

* ``new`` — nothing of a run is there;
* ``resume`` — the same config, not yet at its last iteration (possibly no checkpoint yet);
* ``done`` — the same config, with a checkpoint at its last iteration;
* ``different`` — a run of another config, run files without a readable ``config.yaml``.

``posrnn train`` (``prepare_run_dir``), the sweep's jobs and ``posrnn sweep --dry-run`` all read it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import socket
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..common.checkpoints import _STEP_RE, CKPT_DIR, list_checkpoints  # noqa: F401  (read from here too)
from ..common.config import RunConfig, config_diff, safe_load_bounded
from ..common.errors import PosrnnError
from ..common.io import MARKER, atomic_write_text

RUN_FILES = ("config.yaml", "metrics.jsonl", "eval.json", "eval_sequences.npz", CKPT_DIR)
#: the fingerprint of the code that trained the run (``record_code``)
CODE_FILE = "code.json"
#: what ``--force`` replaces: the run files, the ownership marker and what eval / extend-vocab write
REPLACED = (*RUN_FILES, MARKER, CODE_FILE, "extend.json", "extend_sequences.npz", "nll_by_position.csv")
STATES = ("new", "resume", "done", "different")


def prune_checkpoints(run_dir: Path) -> int:
    """``keep_checkpoints: last``: remove every checkpoint but the latest (only ever after the
    latest was written in full, so a run can always resume). Returns how many were removed."""
    ckpts = list_checkpoints(run_dir)
    for _, path in ckpts[:-1]:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return max(0, len(ckpts) - 1)


def record_code(run_dir: Path, module: str) -> None:
    """Record which code trains the run from step 0: ``module`` and the fingerprint of every module
    it can run (``common.sources.code_fingerprint``). A resumed run keeps the record of its start."""
    from ..common.sources import code_fingerprint

    atomic_write_text(Path(run_dir) / CODE_FILE, json.dumps({"module": module, "fingerprint": code_fingerprint(module)}) + "\n")


def code_state(run_dir: Path, module: str) -> str:
    """``current`` when the run was trained by this code, ``other`` when by other code, ``unknown``
    when it records none (trained before runs recorded it, or its record is unreadable)."""
    from ..common.sources import code_fingerprint, module_files

    try:
        rec = json.loads((Path(run_dir) / CODE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return "unknown"
    if not isinstance(rec, dict) or not isinstance(rec.get("fingerprint"), str):
        return "unknown"
    named = rec.get("module") or module
    if not isinstance(named, str) or named not in module_files():  # a record is data: a module of this package, or none
        return "unknown"
    return "current" if rec["fingerprint"] == code_fingerprint(named) else "other"


def read_run_config(run_dir: Path) -> Optional[RunConfig]:
    """The config saved in a run directory, or None when there is none. One that is not UTF-8,
    not YAML, not a mapping of sections, or whose aliases expand without bound is refused."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        return None
    import yaml

    try:
        data = safe_load_bounded(path.read_text(encoding="utf-8"), str(path))
    except UnicodeDecodeError:
        raise PosrnnError(f"{path} is not text (not UTF-8); it is not a config posrnn wrote: restore or remove it") from None
    except yaml.YAMLError:
        raise PosrnnError(f"{path} is not valid YAML; fix or remove it") from None
    except OSError as e:
        raise PosrnnError(f"cannot read {path} ({e.strerror or type(e).__name__})") from None
    if not isinstance(data, dict) or not data:
        raise PosrnnError(f"{path} is not a run's config (not a mapping of sections); restore or remove it")
    return RunConfig.from_dict(data, source=str(path))


@dataclass(frozen=True)
class RunState:
    """What ``run_dir`` holds for a config (see the module's doc)."""

    state: str
    saved: Optional[RunConfig] = None  # the run's own config, when readable
    diff: list[str] = field(default_factory=list)  # the keys where it differs from the asked config
    checkpoints: list[tuple[int, Path]] = field(default_factory=list)
    problem: Optional[str] = None  # why the saved config could not be read

    @property
    def latest(self) -> int:
        return self.checkpoints[-1][0] if self.checkpoints else 0


def run_state(run_dir: Path, cfg: RunConfig) -> RunState:
    """The state of ``run_dir`` for ``cfg``: new, resume, done or different. Reads only."""
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise PosrnnError(f"{run_dir} is a file, not a run directory; pass another directory")
    occupied = run_dir.is_dir() and any((run_dir / name).exists() for name in RUN_FILES)
    if not occupied:
        return RunState("new")
    ckpts = list_checkpoints(run_dir)
    try:
        saved = read_run_config(run_dir)
    except PosrnnError as e:
        return RunState("different", checkpoints=ckpts, problem=str(e))
    if saved is None:
        return RunState("different", checkpoints=ckpts, problem=f"{run_dir} holds run files but no config.yaml")
    diff = config_diff(saved, cfg)
    if diff:
        return RunState("different", saved, diff, ckpts)
    done = bool(ckpts) and ckpts[-1][0] >= cfg.train.iterations
    return RunState("done" if done else "resume", saved, [], ckpts)


def describe_diff(st: RunState, cfg: RunConfig, saved_word: str = "saved", now_word: str = "now", limit: int = 3) -> str:
    """``key: saved X vs now Y, …`` for the first ``limit`` differing keys."""
    a, b = st.saved.flat(), cfg.flat()
    return ", ".join(f"{k}: {saved_word} {a[k]!r} vs {now_word} {b[k]!r}" for k in st.diff[:limit])


@dataclass
class Resumption:
    """Where a run continues from: its checkpoint (None: step 0) and, when ``train.iterations``
    grew, the total it had before."""

    checkpoint: Optional[Path] = None
    extended_from: Optional[int] = None


def prepare_run_dir(run_dir: Path, cfg: RunConfig, resume: bool, force: bool) -> Resumption:
    """Check ``run_dir`` against ``cfg`` without touching anything; say where to continue from.

    Refuses a directory that holds another run, unless ``force``. ``resume`` needs the run's
    saved config: with no checkpoint yet it starts again from step 0; a config that differs
    only in a larger ``train.iterations`` extends the run."""
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise PosrnnError(f"--out {run_dir} is a file, not a directory; pass another --out")
    if resume and force:
        raise PosrnnError("--resume and --force contradict each other; pass one")
    st = run_state(run_dir, cfg)
    if st.problem and (resume or not force) and st.saved is None and (run_dir / "config.yaml").is_file():
        raise PosrnnError(st.problem)  # an unreadable config.yaml: never guess what it held
    if resume:
        if st.saved is None:
            raise PosrnnError(f"nothing to resume in {run_dir}: it holds no run (no config.yaml); drop --resume")
        extended = None
        if st.diff == ["train.iterations"]:
            if cfg.train.iterations <= st.latest:
                raise PosrnnError(f"{run_dir} is already at step {st.latest}; --iterations must exceed it to train longer")
            extended = st.saved.train.iterations
        elif st.diff:
            raise PosrnnError(f"--resume with a config that contradicts the saved run ({describe_diff(st, cfg)}); "
                              f"drop those options or use another --out")
        return Resumption(st.checkpoints[-1][1] if st.checkpoints else None, extended)
    if st.state != "new" and not force:
        what = "a different run" if st.diff else "a run"
        raise PosrnnError(f"{run_dir} already holds {what}; pass --resume to continue it, --force to replace it, or another --out")
    return Resumption()


def clear_run_dir(run_dir: Path) -> None:
    for name in RUN_FILES:
        p = Path(run_dir) / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def truncate_log(path: Path, step: int) -> None:
    """Drop log lines written after ``step`` (a crash after the last checkpoint)."""
    if not path.is_file():
        return
    lines = []
    for ln in path.read_bytes().decode("utf-8", errors="replace").splitlines():
        try:
            x = json.loads(ln)
            if isinstance(x, dict) and isinstance(x.get("step"), int) and x["step"] <= step:
                lines.append(ln)
        except ValueError:
            continue  # a line cut by a crash (or anything else train never writes)
    atomic_write_text(path, "".join(ln + "\n" for ln in lines))


# ---- one process per run directory -----------------------------------------------------------------
LOCK = ".lock"
#: the fallback lock where the filesystem has no flock: a file created with O_CREAT|O_EXCL naming host and pid
LOCK_FILE = ".lock.excl"
#: ``POSRNN_LOCK=file`` uses the lock file even where flock works (BeeGFS and some NFS set-ups lock within
#: one node only, so runs written from several nodes need it); ``flock`` (the default) falls back on its own
LOCK_ENV = "POSRNN_LOCK"
#: what flock raises on a filesystem that does not support it (Lustre mounted without flock, some NFS)
NO_FLOCK = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EINVAL})
_held: dict[str, int] = {}  # run directories this process holds (realpath → depth), so a sweep job may train its run
_lock_files: dict[str, Path] = {}  # realpath → the lock file naming this process as holder


class LockBusy(PosrnnError):
    """``run_lock``: the directory is held by another process (``holder`` names it)."""

    def __init__(self, message: str, holder: str = ""):
        super().__init__(message)
        self.holder = holder


def _holder(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        text = ""
    return text.splitlines()[0][:200] if text else "a process that did not say which"


def _busy(run_dir: Path, holder: str) -> LockBusy:
    return LockBusy(f"{run_dir} is in use by another process ({holder}); wait for it to finish or stop it", holder)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _flock(run_dir: Path, path: Path, what: str) -> Optional[int]:
    """Take the flock on ``path``: its descriptor, or None when this filesystem has no flock."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise PosrnnError(f"cannot lock {run_dir} ({e.strerror or type(e).__name__}: {path}); "
                              f"check its permissions") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(path)
            os.close(fd)
            raise _busy(run_dir, holder) from None
        except OSError as e:
            os.close(fd)
            with contextlib.suppress(OSError):
                if os.stat(path).st_size == 0:
                    os.unlink(path)  # the empty file this call created
            if e.errno not in NO_FLOCK:
                raise PosrnnError(f"cannot lock {run_dir} ({e.strerror or type(e).__name__}: {path})") from None
            return None  # no flock here: the lock file takes over
        try:  # the file may have been removed by its last holder between our open and flock: retry then
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}: {what}\n".encode())
    except OSError:
        pass  # the holder's name is a courtesy; the flock is what excludes
    return fd


def _lock_file(run_dir: Path, what: str) -> Path:
    """The lock without flock: ``run_dir/.lock.excl`` created with O_CREAT|O_EXCL (atomic on local
    filesystems, NFS v3+, Lustre, BeeGFS), holding ``host <name> pid <n>: <what>``. A lock file of
    this host whose pid is gone is stale: it is removed (with a line on stderr saying so) and taken.
    One of another host cannot be checked from here: the error names it and says to remove the
    file once that process is gone."""
    path = run_dir / LOCK_FILE
    host = socket.gethostname()
    for _ in range(3):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            text = _holder(path)
            m = re.match(r"host (\S+) pid (\d+)", text)
            if m and m.group(1) == host and not _pid_alive(int(m.group(2))):
                print(f"posrnn: removing the stale lock {path} (pid {m.group(2)} on {host} is gone)", file=sys.stderr)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                continue
            hint = "" if not m or m.group(1) == host else f"; if that process is gone, remove {path}"
            raise _busy(run_dir, text + hint) from None
        except OSError as e:
            raise PosrnnError(f"cannot lock {run_dir}: its filesystem supports no flock and the lock file {path} "
                              f"cannot be created ({e.strerror or type(e).__name__})") from None
        try:
            os.write(fd, f"host {host} pid {os.getpid()}: {what}\n".encode())
        finally:
            os.close(fd)
        return path
    raise _busy(run_dir, _holder(path))


@contextmanager
def run_lock(run_dir: Path, what: str = "posrnn"):
    """Hold ``run_dir``'s lock for the block; another process gets one line naming the holder.
    Re-entrant within one process; ``run_dir`` must exist. The lock is an flock on
    ``run_dir/.lock`` (which names its holder); where the filesystem has no flock, or
    ``POSRNN_LOCK=file`` asks for it, a lock file (``_lock_file``). Either is removed on release."""
    run_dir = Path(run_dir)
    key = os.path.realpath(run_dir)
    if key in _held:
        _held[key] += 1
        try:
            yield
        finally:
            _held[key] -= 1
        return
    mode = os.environ.get(LOCK_ENV, "flock")
    if mode not in ("flock", "file"):
        raise PosrnnError(f"{LOCK_ENV}={mode!r} is not a lock kind; use flock (the default) or file")
    fd = _flock(run_dir, run_dir / LOCK, what) if mode == "flock" else None
    path = run_dir / LOCK if fd is not None else _lock_file(run_dir, what)
    _held[key] = 1
    _lock_files[key] = path
    try:
        yield
    finally:
        del _held[key]
        _lock_files.pop(key, None)
        with contextlib.suppress(OSError):
            os.unlink(path)
        if fd is not None:
            os.close(fd)


def relabel(run_dir: Path, what: str) -> None:
    """Rewrite the holder's description of a lock this process holds (e.g. a sweep's arrays)."""
    path = _lock_files.get(os.path.realpath(run_dir))
    if path is None:
        return
    prefix = f"host {socket.gethostname()} " if path.name == LOCK_FILE else ""
    try:
        path.write_text(f"{prefix}pid {os.getpid()}: {what}\n")
    except OSError:
        pass  # a courtesy, as in run_lock


def holding(run_dir: Path) -> bool:
    """Whether this process holds ``run_dir``'s lock."""
    return os.path.realpath(run_dir) in _held


# ---- replacing a run only on success -------------------------------------------------------------------
class Replacement:
    """``--force``: the old run's files move into ``run_dir/.posrnn-replaced-<pid>/`` while the
    new run trains; ``commit()`` deletes them once it has finished, ``rollback()`` removes
    whatever the new run wrote and moves them back, byte-identical."""

    def __init__(self, run_dir: Path, names: tuple[str, ...]):
        self.run_dir = Path(run_dir)
        self.aside = self.run_dir / f".posrnn-replaced-{os.getpid()}"
        self.names = names
        self.moved: list[str] = []

    def start(self) -> None:
        present = [n for n in self.names if (self.run_dir / n).exists() or (self.run_dir / n).is_symlink()]
        if not present:
            return
        self.aside.mkdir()
        for n in present:
            os.rename(self.run_dir / n, self.aside / n)
            self.moved.append(n)

    def commit(self) -> None:
        if self.aside.exists():
            shutil.rmtree(self.aside)

    def rollback(self) -> None:
        for n in self.names:
            p = self.run_dir / n
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            elif p.exists() or p.is_symlink():
                p.unlink()
        for n in self.moved:
            os.rename(self.aside / n, self.run_dir / n)
        if self.aside.exists():
            shutil.rmtree(self.aside)
