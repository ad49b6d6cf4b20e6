"""Replacing a run only on success (``--force``), and never hiding the old one.

``Replacement.start`` moves every file posrnn wrote for the old run (``common.files.rundir.is_run_file``:
its checkpoints, log, evaluations and analyses, so nothing of it reads as the new run's) into
``RUN/.posrnn-replaced-<pid>-<random>/`` (a name no other replacement can take), after writing
there which files it moves (``replacing.json``). ``commit()`` (the new run finished) renames that folder to
``.posrnn-discarded-…`` and deletes it; ``rollback()`` (the new run failed) removes whatever the
new run wrote and moves the old files back, byte-identical.

A process killed in between (kill -9, the OOM killer, a power cut) leaves the folder behind.
``recover`` finishes the job for the next command that takes the run's lock (``lock.run_lock``
calls it): a replacement never committed is rolled back — the old run is restored — and a
discarded folder is deleted. Every step can itself be interrupted and redone.

A record is checked against the directory before anything moves or is deleted: every file aside
must be one it lists, every name it lists posrnn's, and every file of the new run to be removed
no older than the record. One that does not match is refused, never obeyed.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Iterable, Optional

from ..common.files.rundir import CODE_FILE, RUN_FILES, is_run_file
from ..common.errors import PosrnnError
from ..common.files.io import TEMP_RE, MARKER, atomic_write_text, loads_bounded, read_marker

#: what ``--force`` replaces: the run files, the ownership marker and what eval / extend-vocab write
REPLACED = (*RUN_FILES, MARKER, CODE_FILE, "extend.json", "extend_sequences.npz", "nll_by_position.csv")
ASIDE = ".posrnn-replaced-"
DISCARDED = ".posrnn-discarded-"
MANIFEST = "replacing.json"


def _remove(path: Path) -> None:
    """Remove ``path`` (a link itself, never what it points to)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _there(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def _put_back(run_dir: Path, aside: Optional[Path], names: Iterable[str], planned: list[str]) -> None:
    """Undo a replacement: each of ``names`` that the new run wrote is removed (first, so that once
    no planned file is aside there is nothing left to remove); each file still aside goes back. A
    planned file no longer aside is the old run's own, still (or again) in place."""
    waiting = [n for n in planned if aside is not None and _there(aside / n)]
    if waiting:
        for n in names:
            if n not in planned:
                _remove(run_dir / n)
        for n in waiting:
            _remove(run_dir / n)
            os.rename(aside / n, run_dir / n)
    if aside is not None and aside.exists():
        shutil.rmtree(aside)


class Replacement:
    """``--force``: move the old run aside, then ``commit()`` or ``rollback()`` (see the module's doc)."""

    def __init__(self, run_dir: Path, names: tuple[str, ...]):
        self.run_dir = Path(run_dir)
        self.names = tuple(names)
        self.aside: Optional[Path] = None
        self.planned: list[str] = []

    def start(self) -> None:
        present = sorted(os.listdir(self.run_dir)) if self.run_dir.is_dir() else []
        self.planned = [n for n in present if n in self.names or is_run_file(n)]
        if not self.planned:
            return
        self.aside = Path(tempfile.mkdtemp(prefix=f"{ASIDE}{os.getpid()}-", dir=self.run_dir))
        atomic_write_text(self.aside / MANIFEST, json.dumps({"names": list(self.names), "moved": self.planned}) + "\n")
        for n in self.planned:
            os.rename(self.run_dir / n, self.aside / n)

    def bind(self, new_id: str) -> None:
        """Name in the record the run that replaces the old one (its marker's id, before that marker
        is written): a record is obeyed only in the folder of the run it names."""
        if self.aside is not None:
            atomic_write_text(self.aside / MANIFEST, json.dumps({"names": list(self.names), "moved": self.planned,
                                                                "new_id": new_id}) + "\n")

    def commit(self) -> None:
        if self.aside is None:
            return
        gone = self.run_dir / (DISCARDED + self.aside.name[len(ASIDE):])
        os.rename(self.aside, gone)  # from here on the old run is dropped, even if deleting it is cut short
        shutil.rmtree(gone, ignore_errors=True)

    def rollback(self) -> None:
        _put_back(self.run_dir, self.aside, self.names, self.planned)


def leftovers(run_dir: Path) -> list[Path]:
    """The folders that replacements cut short left in ``run_dir`` (real directories only)."""
    try:
        entries = list(os.scandir(run_dir))
    except OSError:
        return []
    return sorted(Path(e.path) for e in entries
                  if e.name.startswith((ASIDE, DISCARDED)) and e.is_dir(follow_symlinks=False))


def _manifest(aside: Path, allowed: tuple[str, ...]) -> Optional[tuple[list[str], list[str]]]:
    """(names, planned) from ``aside/replacing.json``; None when it is missing (nothing was
    moved yet). One that is not what ``start`` writes, or that does not match the directory
    (``_mismatch``), is refused: what to move back is unknown."""
    path = aside / MANIFEST
    if not path.exists():
        return None
    why = "is not posrnn's"
    try:
        rec = loads_bounded(path.read_bytes(), path)
        names, planned = rec["names"], rec["moved"]
        ok = (all(isinstance(n, str) and n in allowed for n in names) and all(isinstance(n, str) and is_run_file(n)
                                                                              for n in planned) and bool(planned))
        if ok:
            why = _not_its_run(aside.parent, rec.get("new_id")) or _mismatch(aside, path, names, planned) or why
            ok = why == "is not posrnn's"
    except (OSError, ValueError, TypeError, KeyError, PosrnnError):
        ok = False
    if not ok:
        raise PosrnnError(f"{aside} holds a run that an interrupted `--force` moved aside, but its {MANIFEST} {why}; "
                          f"nothing was moved or deleted: move its files back into {aside.parent} by hand, then "
                          "remove it")
    return names, planned


def _not_its_run(run_dir: Path, new_id: object) -> Optional[str]:
    """How the record's new run (``new_id``: bound before its marker is written, None in a record cut
    short before) differs from the run in ``run_dir``; None when the folder is that run's."""
    marker = read_marker(run_dir)
    if marker is None or marker.get("id") == new_id:
        return None
    return (f"names the run {new_id} but {run_dir} holds the run {marker.get('id')} (a record of another run, or "
            "copied)" if new_id is not None else f"names no new run, but {run_dir} holds the run {marker.get('id')}")


def _mismatch(aside: Path, record: Path, names: list[str], planned: list[str]) -> Optional[str]:
    """How the record disagrees with the directory: a file aside it does not list, or a file of
    the new run it would remove that is older than the record itself; None when it agrees."""
    unlisted = [n for n in os.listdir(aside) if n != MANIFEST and not TEMP_RE.match(n) and n not in planned]
    if unlisted:
        return f"does not list {unlisted[0]}, which lies aside"
    if not any(_there(aside / n) for n in planned):
        return None  # all moved back already: nothing will be removed
    since = os.lstat(record).st_mtime_ns
    for n in [*[n for n in names if n not in planned], *planned]:
        p = aside.parent / n
        if _there(p) and (n not in planned or _there(aside / n)) and os.lstat(p).st_mtime_ns < since:
            return f"would remove {n}, which is older than the record (not the new run's)"
    return None


def recover(run_dir: Path) -> None:
    """Finish what replacements cut short in ``run_dir`` (the caller holds its lock): restore
    each old run moved aside, delete each discarded one, saying so on stderr."""
    run_dir = Path(run_dir)
    for folder in leftovers(run_dir):
        if folder.name.startswith(DISCARDED):
            shutil.rmtree(folder, ignore_errors=True)
            continue
        found = _manifest(folder, REPLACED)
        if found is None:  # cut short before anything was moved: at most the record's temporary file is there
            if any(not TEMP_RE.match(n) for n in os.listdir(folder)):
                raise PosrnnError(f"{folder} holds files that an interrupted `--force` moved aside, but no {MANIFEST} "
                                  f"saying which; move them back into {run_dir} by hand (over the files of the same "
                                  f"names), then remove it")
            shutil.rmtree(folder)
            continue
        _put_back(run_dir, folder, *found)
        print(f"posrnn: restored the run in {run_dir} that an interrupted `--force` had moved aside to {folder.name} "
              f"(the unfinished replacement is removed)", file=sys.stderr)
