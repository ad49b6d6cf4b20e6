"""Files: every write is atomic (a temporary file in the same directory, fsync'd, then
renamed over the target), so a crash or ``kill -9`` never leaves a half-written file where a
reader would pick it up. Temporary files are named ``.<name>.<random>.tmp``; no reader in
posrnn looks at such names, and ``remove_stale_temps`` clears them.

CSV tables and NumPy ``.npz`` archives are the interface between evaluation, aggregation and
the figures: aggregation and plotting read only these files.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

TEMP_SUFFIX = ".tmp"


def atomic_write(path: Path, write: Callable[[Any], None]) -> None:
    """Call ``write(f)`` on a temporary binary file beside ``path``, then rename it over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
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


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2) + "\n")


def remove_stale_temps(folder: Path) -> int:
    """Delete ``.*.tmp`` files that an interrupted writer left in ``folder`` (recursively)."""
    n = 0
    folder = Path(folder)
    if folder.is_dir():
        for p in folder.rglob(f".*{TEMP_SUFFIX}"):
            if p.is_file():
                p.unlink(missing_ok=True)
                n += 1
    return n


def _cell(v: Any) -> Any:
    return f"{v:.6g}" if isinstance(v, float) else v


def write_csv(rows: Iterable[Mapping[str, Any]], path: Path) -> None:
    """Rows → CSV (floats to 6 significant digits; the columns are the union of the rows' keys)."""
    rows = list(rows)
    buf = io.StringIO()
    fields = list(dict.fromkeys(k for r in rows for k in r))
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: _cell(v) for k, v in r.items()})
    atomic_write_text(path, buf.getvalue())


def _parse(v: str) -> Any:
    if v == "":
        return None
    for t in (int, float):
        try:
            return t(v)
        except ValueError:
            continue
    return v


def read_csv(path: Path) -> list[dict]:
    """CSV → rows, numbers parsed (int, then float), empty cells as None."""
    try:
        with open(path, newline="") as f:
            return [{k: _parse(v) for k, v in r.items()} for r in csv.DictReader(f)]
    except (UnicodeDecodeError, csv.Error):
        from .errors import PosrnnError

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

    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile) as e:
        from .errors import PosrnnError

        if isinstance(e, OSError) and not Path(path).exists():
            raise
        raise PosrnnError(f"{path} is not a readable .npz file (truncated or corrupt); re-run the step that writes it") from None


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


def read_json(path: Path) -> Any:
    """JSON → data; a file that is not JSON is an error naming it."""
    try:
        return json.loads(Path(path).read_text())
    except (ValueError, UnicodeDecodeError):
        from .errors import PosrnnError

        raise PosrnnError(f"{path} is not valid JSON (truncated or corrupt); re-run the step that writes it") from None
