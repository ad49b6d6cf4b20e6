"""Files: every write is atomic (a temporary file in the same directory, fsync'd, then
renamed over the target), so a crash or ``kill -9`` never leaves a half-written file where a
reader would pick it up. Temporary files are named ``.<name>.posrnn-<pid>.<random>.tmp`` after
the process that writes them: ``remove_stale_temps`` deletes only such names whose process is
gone, in the one directory it is given, never a pattern swept over a tree.

A directory posrnn writes as a whole (a run, a sweep, a results directory) holds an ownership
marker, ``.posrnn.json`` (its kind and id): posrnn replaces or deletes files only in a directory
it recognises as its own.

CSV tables and NumPy ``.npz`` archives are the interface between evaluation, aggregation and
the figures: aggregation and plotting read only these files.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping


TEMP_SUFFIX = ".tmp"
TEMP_RE = re.compile(r"^\..+\.posrnn-(\d+)\.[^.]+\.tmp$")
MARKER = ".posrnn.json"


def temp_prefix(path: Path) -> str:
    """The start of a temporary file's name for ``path``: it names this process."""
    return f".{Path(path).name}.posrnn-{os.getpid()}."


def temp_path(path: Path) -> Path:
    """A fresh temporary name beside ``path``, naming this process."""
    path = Path(path)
    return path.with_name(f"{temp_prefix(path)}{uuid.uuid4().hex[:8]}{TEMP_SUFFIX}")


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def atomic_write(path: Path, write: Callable[[Any], None]) -> None:
    """Call ``write(f)`` on a temporary binary file beside ``path``, then rename it over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        if e.filename is None:  # a full disk, say: name the file it happened to
            raise OSError(e.errno, e.strerror or str(e), str(path)) from None
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def temp_beside(path: Path) -> Path:
    """A fresh name in the same convention (``.<name>.<random>.tmp`` beside ``path``) for writers
    that create the file themselves (SentencePiece, NumPy), before ``os.replace(tmp, path)``."""
    return Path(path).with_name(f".{Path(path).name}.{os.getpid()}.{uuid.uuid4().hex[:8]}{TEMP_SUFFIX}")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    atomic_write(path, lambda f: f.write(data))


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def json_text(obj: Any) -> str:
    """``obj`` as posrnn writes JSON files: indented by two, a newline at the end."""
    return json.dumps(obj, indent=2) + "\n"


def json_digest(obj: Any) -> str:
    """The SHA-256 of ``obj`` as canonical JSON (sorted keys, no spaces)."""
    return sha256_bytes(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode())


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json_text(obj))


def remove_stale_temps(folder: Path) -> int:
    """Delete the temporary files that an interrupted posrnn writer left directly in ``folder``:
    only names this module makes (``.<name>.posrnn-<pid>.<random>.tmp``) whose process is gone.
    Nothing else is touched, and sub-directories are not searched."""
    n = 0
    folder = Path(folder)
    if folder.is_dir():
        for p in folder.iterdir():
            m = TEMP_RE.match(p.name)
            if m and not _alive(int(m.group(1))) and p.is_file() and not p.is_symlink():
                p.unlink(missing_ok=True)
                n += 1
    return n


# ---- ownership -----------------------------------------------------------------------------------
def read_marker(folder: Path) -> "dict | None":
    """The ownership marker of ``folder`` (``{"kind": …, "id": …}``), or None when it has none
    (or one posrnn cannot read: then it is not recognised as posrnn's)."""
    from ..errors import PosrnnError

    path = Path(folder) / MARKER
    try:
        data = loads_bounded(read_bounded(path, "marker").decode("utf-8"), path)
    except (OSError, ValueError, UnicodeDecodeError, PosrnnError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str) or not isinstance(data.get("id"), str):
        return None
    return data


def write_marker(folder: Path, kind: str, ident: "str | None" = None) -> dict:
    """Mark ``folder`` as a posrnn directory of ``kind`` (a new id unless given); returns the marker."""
    data = {"kind": kind, "id": ident or uuid.uuid4().hex, "written_by": "posrnn"}
    atomic_write_text(Path(folder) / MARKER, json.dumps(data) + "\n")
    return data


def file_digest(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in chunks."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def mark_files(folder: Path, rels: "Iterable[str]" = (), removed: "Iterable[str]" = (),
               log: "str | None" = None) -> None:
    """Enter each file (a path relative to ``folder``) with its SHA-256 in ``folder``'s marker
    (``files``), so the marker proves which files posrnn wrote there, and drop those ``removed``;
    ``log`` (a file that grows, the training log): its length and the SHA-256 of its bytes so far
    (``log``). A folder without a marker gets none. The caller holds the folder's lock."""
    marker = read_marker(folder)
    if marker is None:
        return
    files = marker.get("files") if isinstance(marker.get("files"), dict) else {}
    for rel in removed:
        files.pop(rel, None)
    for rel in rels:
        files[rel] = file_digest(Path(folder) / rel)
    extra = {}
    if log is not None and (Path(folder) / log).is_file():
        data = (Path(folder) / log).read_bytes()
        extra = {"log": {"name": log, "bytes": len(data), "sha256": sha256_bytes(data)}}
    atomic_write_text(Path(folder) / MARKER, json.dumps({**marker, "files": files, **extra}) + "\n")


def log_mismatch(folder: Path) -> "str | None":
    """Why ``folder``'s training log is not the one posrnn wrote there, or None: its marker's ``log``
    records the length and digest of the log at the last checkpoint, which the file must begin with
    (lines logged since may follow). A marker without it (an older run) vouches for nothing."""
    marker = read_marker(folder)
    rec = marker.get("log") if marker else None
    if not isinstance(rec, dict) or not isinstance(rec.get("bytes"), int) or not isinstance(rec.get("name"), str):
        return None
    path = Path(folder) / rec["name"]
    try:
        with open(path, "rb") as f:
            head = f.read(rec["bytes"])
    except OSError:
        return f"{path} is missing, but the run's marker records it"
    if len(head) < rec["bytes"] or sha256_bytes(head) != rec.get("sha256"):
        return f"{path} is not the log posrnn wrote for this run (copied from another run, or edited since)"
    return None


def marker_mismatch(folder: Path, marker: dict) -> "str | None":
    """The first file the marker lists (``files``) that is present with other bytes than it wrote
    there: the marker does not describe this folder; None when every listed file present matches."""
    files = marker.get("files")
    if files is None:
        return None
    if not isinstance(files, dict):
        return "its marker's list of files is not one posrnn writes"
    for rel, digest in files.items():
        p = Path(folder) / str(rel)
        if ".." in Path(str(rel)).parts or not isinstance(digest, str):
            return "its marker lists a file outside it"
        if p.is_file() and not p.is_symlink() and file_digest(p) != digest:
            return f"its {rel} is not the file posrnn wrote there (the marker records another digest)"
    return None


def same_path(a: Path, b: Path) -> bool:
    """Whether two paths name the same file or directory (symlinks followed; either may be missing)."""
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError):
        return False


def inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` lies inside ``folder`` or is it (symlinks followed)."""
    p, f = os.path.realpath(path), os.path.realpath(folder)
    return p == f or p.startswith(f.rstrip(os.sep) + os.sep)


def check_out_path(out: Path, option: str = "--out") -> Path:
    """Refuse an output path that is empty, the current directory or a symlink loop (one line)."""
    from ..errors import PosrnnError

    text = str(out)
    if text.strip() == "":
        raise PosrnnError(f"{option} is empty; pass a path")
    try:
        os.path.realpath(out, strict=False)
        Path(out).exists()
    except (OSError, RuntimeError, ValueError) as e:
        raise PosrnnError(f"{option} {out} cannot be used ({type(e).__name__}: a symlink loop or a bad name); pass "
                          "another path") from None
    if Path(out).is_symlink() and not Path(out).exists():
        target = os.readlink(out)
        raise PosrnnError(f"{option} {out} is a symlink to {target}, which does not resolve (a loop or a missing "
                          "target); pass another path")
    if same_path(out, os.getcwd()):
        raise PosrnnError(f"{option} {out} is the current directory; pass a new directory for the output")
    return Path(out)


def write_files_together(files: "Mapping[Path, bytes]") -> None:
    """Write every ``path: bytes`` so that either all are replaced or none: each is first written
    to a temporary file beside its target, then all are renamed into place."""
    staged: list[tuple[str, Path]] = []
    try:
        for path, data in files.items():
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), suffix=TEMP_SUFFIX, dir=path.parent)
            staged.append((tmp, path))
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        for tmp, path in staged:
            os.replace(tmp, path)
    except OSError as e:
        if e.filename is None:
            raise OSError(e.errno, e.strerror or str(e), str(staged[-1][1]) if staged else None) from None
        raise
    finally:
        for tmp, _ in staged:
            Path(tmp).unlink(missing_ok=True)


def write_table_and_figure(table: bytes, table_path: Path, figure_path: Path, draw: Callable[[Path], None]) -> None:
    """A table and the figure drawn from it, swapped in together: both are made first (``draw``
    writes the figure into a scratch folder beside it), then the old figure is removed and the two
    renamed into place. Killed at any moment, the folder holds the old pair, the old table alone,
    the new table alone or the new pair: never a new table beside an old figure."""
    table_path, figure_path = Path(table_path), Path(figure_path)
    scratch = Path(tempfile.mkdtemp(prefix=temp_prefix(figure_path), dir=figure_path.parent))
    try:
        draw(scratch / figure_path.name)
        fd, tmp = tempfile.mkstemp(prefix=temp_prefix(table_path), suffix=TEMP_SUFFIX, dir=table_path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(table)
                f.flush()
                os.fsync(f.fileno())
            if figure_path.exists() or figure_path.is_symlink():
                figure_path.unlink()
            os.replace(tmp, table_path)
        finally:
            Path(tmp).unlink(missing_ok=True)
        os.replace(scratch / figure_path.name, figure_path)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    record_written([table_path, figure_path])


def _cell(v: Any) -> Any:
    return f"{v:.6g}" if isinstance(v, float) else v


def csv_text(rows: Iterable[Mapping[str, Any]]) -> str:
    """Rows → CSV text (floats to 6 significant digits; the columns are the union of the rows' keys)."""
    rows = list(rows)
    buf = io.StringIO()
    fields = list(dict.fromkeys(k for r in rows for k in r))
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: _cell(v) for k, v in r.items()})
    return buf.getvalue()


def write_csv(rows: Iterable[Mapping[str, Any]], path: Path) -> None:
    """Rows → CSV, written atomically (see ``csv_text``)."""
    atomic_write_text(path, csv_text(rows))


def _parse(v: str) -> Any:
    if v == "":
        return None
    if v in ("True", "False"):  # a setting's column (conv), as csv_text writes a bool
        return v == "True"
    for t in (int, float):
        try:
            return t(v)
        except ValueError:
            continue
    return v


def read_csv(path: Path) -> list[dict]:
    """CSV → rows, numbers parsed (int, then float), True/False as booleans, empty cells as None."""
    from ..errors import PosrnnError

    regular(path, "CSV table")
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if not header:
                raise PosrnnError(f"{path} is empty (no header row); re-run the step that writes it")
            if len(set(header)) != len(header) or any(not h.strip() for h in header):
                repeated = sorted({h for h in header if header.count(h) > 1}) or ["(an empty name)"]
                raise PosrnnError(f"{path} has a malformed header (repeated or empty column: {', '.join(repeated)}); "
                                  f"re-run the step that writes it")
            rows = []
            for n, cells in enumerate(reader, start=2):
                if not cells:
                    continue
                if len(cells) != len(header):
                    raise PosrnnError(f"{path} line {n} has {len(cells)} cells for {len(header)} columns; "
                                      f"re-run the step that writes it")
                rows.append({k: _parse(v) for k, v in zip(header, cells)})
            return rows
    except (UnicodeDecodeError, csv.Error, ValueError):
        raise PosrnnError(f"{path} is not a CSV table (corrupt or not text); re-run the step that writes it") from None


def write_npz(path: Path, arrays: Mapping[str, Any]) -> None:
    """Arrays → one uncompressed ``.npz``, written atomically."""
    import numpy as np

    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    atomic_write_bytes(path, buf.getvalue())


def read_npz(path: Path) -> dict:
    """``.npz`` → ``{name: array}`` (no pickled objects); a file numpy cannot read is an error
    naming it."""
    import zipfile

    import numpy as np

    regular(path, ".npz file")
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile) as e:
        from ..errors import PosrnnError

        if isinstance(e, OSError) and not Path(path).exists():
            raise
        raise PosrnnError(
            f"{path} is not a readable .npz file (truncated or corrupt); re-run the step that writes it") from None


@contextmanager
def undo_new_dirs(path: Path):
    """Directories created on the way to ``path`` inside the block are removed again if the
    block fails, so a failed command leaves the disk as it found it."""
    path = Path(path)
    top = None
    p = path
    while not p.exists() and p != p.parent:
        top, p = p, p.parent
    try:
        yield
    except BaseException:
        if top is not None and top.is_dir():
            shutil.rmtree(top, ignore_errors=True)
        raise


#: the deepest nesting and the largest file the JSON reader takes: posrnn's files nest a few levels
#: and weigh kilobytes to megabytes, so anything beyond is not a file posrnn wrote
MAX_JSON_DEPTH = 64
MAX_JSON_BYTES = 256 << 20


def _deeper_than(data: Any, limit: int) -> bool:
    """Whether ``data`` (parsed JSON) nests beyond ``limit`` levels; walked without recursion."""
    stack = [(data, 1)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, (dict, list)):
            if d > limit:
                return True
            stack.extend((v, d + 1) for v in (x.values() if isinstance(x, dict) else x))
    return False


def loads_bounded(text: "str | bytes", source: Any) -> Any:
    """``json.loads``, but a document nested beyond ``MAX_JSON_DEPTH`` levels is refused in one
    line naming ``source`` (json itself would raise ``RecursionError`` far below a crafted depth).
    A document that is not JSON raises ``ValueError`` as json does."""
    from ..errors import PosrnnError

    try:
        data = json.loads(text)
    except RecursionError:
        data = None
        deep = True
    else:
        deep = _deeper_than(data, MAX_JSON_DEPTH)
    if deep:
        raise PosrnnError(f"{source} nests deeper than {MAX_JSON_DEPTH} levels, which no file posrnn writes does; "
                          f"re-run the step that writes it")
    return data


def regular(path: Path, what: str = "file") -> None:
    """Refuse, before it is opened, a ``path`` that exists but is not a regular file (a FIFO would
    block the reader, a device never end); a missing one is left to the reader's own error."""
    import stat

    from ..errors import PosrnnError

    try:
        st = os.stat(path)
    except OSError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise PosrnnError(f"{path} is not a regular file (a directory, FIFO or device); it is not a {what} posrnn "
                          f"wrote: remove it and re-run the step that writes it")


def read_bounded(path: Path, what: str = "file") -> bytes:
    """The bytes of ``path``, refused in one line when it is not a regular file (a FIFO, a device,
    a directory: never opened) or larger than ``MAX_JSON_BYTES``."""
    import stat

    from ..errors import PosrnnError

    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise PosrnnError(f"{path} is not a regular file (a directory, FIFO or device); it is not a {what} posrnn "
                          f"wrote: remove it and re-run the step that writes it")
    if st.st_size > MAX_JSON_BYTES:
        raise PosrnnError(f"{path} holds {st.st_size:,} bytes, beyond the {MAX_JSON_BYTES:,} of any {what} posrnn "
                          f"writes; re-run the step that writes it")
    with open(path, "rb") as f:
        return f.read(MAX_JSON_BYTES + 1)


def read_json(path: Path) -> Any:
    """JSON → data, bounded (``read_bounded``, ``loads_bounded``); a file that is not JSON is an
    error naming it."""
    from ..errors import PosrnnError

    try:
        return loads_bounded(read_bounded(path, "JSON file").decode("utf-8"), path)
    except (ValueError, UnicodeDecodeError):
        raise PosrnnError(f"{path} is not valid JSON (truncated or corrupt); re-run the step that writes it") from None


# ---- one rule for every file posrnn writes -------------------------------------------------------
#: each folder posrnn writes files into holds this ledger: the name and SHA-256 of each file it wrote
#: there. A file is replaced only when posrnn can prove it wrote it: the ledger lists it with its
#: present digest, it already holds the new bytes, git holds it unchanged from a commit, or the
#: writer recognises it (``recognise``). Kept out of git and of DVC's hashes (.gitignore, .dvcignore).
LEDGER = ".posrnn-files.json"


def sha256_bytes(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _ledger(folder: Path) -> dict:
    from ..errors import PosrnnError

    try:
        data = loads_bounded(read_bounded(Path(folder) / LEDGER, "ledger").decode("utf-8"), folder)
    except (OSError, ValueError, UnicodeDecodeError, PosrnnError):
        return {}
    files = data.get("files") if isinstance(data, dict) else None
    return {k: v for k, v in files.items() if isinstance(k, str) and isinstance(v, str)} if isinstance(files, dict) \
        else {}


def _git_unchanged(path: Path, data: bytes) -> bool:
    """Whether git's index holds ``path`` with exactly these bytes (a committed output)."""
    import hashlib
    import subprocess

    try:
        out = subprocess.run(["git", "ls-files", "-s", "--", path.name], cwd=path.parent, capture_output=True,
                             text=True, timeout=30, check=False).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return False
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    return len(out) >= 2 and out[1] == blob


def check_owned(path: Path, new: "bytes | None" = None, option: str = "--out",
                recognise: "Callable[[bytes], bool] | None" = None) -> None:
    """Refuse, in one line naming ``path`` and the way out, to replace what posrnn cannot prove it
    wrote: a symlink (never written through), a directory, FIFO or device (never opened), or a
    regular file that neither the folder's ledger, the new bytes, git nor ``recognise`` vouch for."""
    import stat

    from ..errors import PosrnnError

    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise PosrnnError(f"{option} {path} cannot be used ({e.strerror}); pass another path") from None
    if stat.S_ISLNK(st.st_mode):
        raise PosrnnError(f"{option} {path} is a symbolic link (to {os.readlink(path)}); posrnn never writes through "
                          f"a link: write to the link's target itself, or pass another path")
    if not stat.S_ISREG(st.st_mode):
        raise PosrnnError(f"{option} {path} is not a regular file (a directory, FIFO or device); posrnn writes only "
                          f"regular files: pass another path")
    old = read_bounded(path, "file")
    if old == new or _ledger(path.parent).get(path.name) == sha256_bytes(old) or (
            recognise is not None and recognise(old)) or _git_unchanged(path, old):
        return
    raise PosrnnError(f"{option} {path} exists and posrnn did not write it (no record of it, or edited since); "
                      f"it is never overwritten: move it away, or pass another path")


def record_written(paths: "Iterable[Path]") -> None:
    """Enter each file's present digest in its folder's ledger (under a lock on the folder)."""
    import fcntl

    by_folder: dict[Path, list[Path]] = {}
    for p in paths:
        by_folder.setdefault(Path(p).parent, []).append(Path(p))
    for folder, files in by_folder.items():
        fd = os.open(folder, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            ledger = _ledger(folder)
            for p in files:
                with open(p, "rb") as f:
                    ledger[p.name] = sha256_bytes(f.read())
            atomic_write_text(folder / LEDGER, json.dumps({"written_by": "posrnn", "files": ledger}, indent=1,
                                                          sort_keys=True) + "\n")
        finally:
            os.close(fd)


def write_owned(path: Path, data: "bytes | str", option: str = "--out",
                recognise: "Callable[[bytes], bool] | None" = None) -> None:
    """Write ``data`` to ``path`` atomically, only where ``check_owned`` proves the file posrnn's
    (or there is none), and record it in the folder's ledger."""
    data = data.encode() if isinstance(data, str) else data
    check_owned(path, data, option, recognise)
    atomic_write_bytes(path, data)
    record_written([path])


def write_owned_together(files: "Mapping[Path, bytes]", option: str = "--out",
                         recognise: "Callable[[bytes], bool] | None" = None) -> None:
    """``write_files_together``, every target checked first (``check_owned``): one refusal writes none."""
    for path, data in files.items():
        check_owned(path, data, option, recognise)
    write_files_together(files)
    record_written(files)
