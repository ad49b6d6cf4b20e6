"""The result tables a scorecard reads (``results/<profile>/tables/<name>.csv``), each checked
once by the shared table check and read once per scorecard."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional

from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.files.io import read_csv
from posrnn_cli.common.results.tables import check_table, key_columns

from .core import REQUIRED_COLUMNS, FIX, NotMeasured


# ---- tables ---------------------------------------------------------------------------------
@dataclass
class Table:
    name: str
    path: Path
    rows: list[dict]
    key_columns: list[str]


def load_table(results_dir: Path, name: str) -> Optional[Table]:
    """``results_dir/<name>.csv`` as a ``Table`` (rows tagged with ``_table``), or ``None`` when
    the file is absent. A file that cannot be read or is empty, or fails the one table check
    (``common.results.tables.check_table``: a missing column, a non-numeric measurement, per-seed values
    that do not match its seeds, a value outside its CI, the same cell twice), raises
    ``PosrnnError``."""
    path = Path(results_dir) / f"{name}.csv"
    if not path.exists():
        return None
    try:
        raw = read_csv(path)
    except PosrnnError:
        raise PosrnnError(f"{path} is not a CSV table (corrupt or not text); {FIX}") from None
    except (OSError, ValueError, TypeError, csv.Error) as e:  # ValueError covers undecodable bytes
        raise PosrnnError(f"cannot read {path} ({type(e).__name__}: {e}); {FIX}") from None
    if not raw:
        raise PosrnnError(f"{path} is empty (no rows); {FIX}")
    check_table(raw, path, REQUIRED_COLUMNS.get(name, []), what=f"{name} table", fix=FIX)  # the one check
    rows = [{**r, "_table": name} for r in raw]
    keys = key_columns(rows)
    return Table(name, path, rows, keys)


@dataclass
class TableSet:
    """The tables of one results directory, each read once on first use; ``keep`` narrows the
    rows a test sees (to one model, inside or outside a claim's regime)."""

    results_dir: Path
    keep: Optional[Callable[[dict], bool]] = None
    _cache: dict[str, Optional[Table]] = field(default_factory=dict)

    def table(self, name: str) -> Optional[Table]:
        if name not in self._cache:
            self._cache[name] = load_table(self.results_dir, name)
        return self._cache[name]

    def view(self, keep: Callable[[dict], bool]) -> "TableSet":
        """The same tables (read once), rows narrowed by ``keep`` as well."""
        outer = self.keep
        return TableSet(self.results_dir, keep if outer is None else (lambda r: outer(r) and keep(r)), self._cache)

    def rows(self, names: Iterable[str]) -> tuple[list[dict], list[str]]:
        """Rows of ``names`` concatenated in that order (those ``keep`` passes), and the cell
        columns they all share: a claim reads every table that may hold its cells. Absent tables
        are skipped; with all of them absent the claim is unmeasured."""
        rows: list[dict] = []
        common: Optional[list[str]] = None
        names = list(names)
        present = [(n, self.table(n)) for n in names]
        if all(t is None for _, t in present):
            raise NotMeasured(f"{', '.join(f'{n}.csv' for n in names)} {'is' if len(names) == 1 else 'are'} absent")
        for n, t in present:
            if t is None:
                continue
            rows += [r for r in t.rows if self.keep is None or self.keep(r)]
            common = t.key_columns if common is None else [c for c in common if c in t.key_columns]
        return rows, common or []
