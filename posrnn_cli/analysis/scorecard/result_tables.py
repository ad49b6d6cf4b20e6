"""The result tables a scorecard reads (``results/<profile>/tables/<name>.csv``), each checked
once by the shared table check and read once per scorecard."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional

from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.io import read_csv
from ...common.tables import check_table
from posrnn_cli.common.tables import is_number

from .core import (KEY_COLUMNS, NUMERIC_COLUMNS, REQUIRED_COLUMNS, VALUE_COLUMNS, FIX, NotMeasured, float_list,
                   seed_list)


# ---- tables ---------------------------------------------------------------------------------
@dataclass
class Table:
    name: str
    path: Path
    rows: list[dict]
    key_columns: list[str]


def _key_columns(rows: list[dict]) -> list[str]:
    cols = list(dict.fromkeys(k for r in rows for k in r))
    out = []
    for c in cols:
        if c in KEY_COLUMNS:
            out.append(c)
        elif (c in VALUE_COLUMNS or c.endswith("_ci_low") or c.endswith("_ci_high") or c.endswith("_by_seed")
              or c.startswith("_")):
            continue
        elif all(v is None or isinstance(v, (str, int)) for v in (r.get(c) for r in rows)):
            out.append(c)
    return out


def _check_row(path: Path, i: int, r: dict) -> None:
    """A row's seeds, per-seed values and CIs: well formed, finite, low ≤ value ≤ high."""
    seeds = seed_list(r.get("seeds"))
    if not seeds or len(set(seeds)) != len(seeds):
        raise PosrnnError(f"{path}: row {i + 2} has seeds = {r.get('seeds')!r}, not distinct integers; {FIX}")
    for c in [c for c in r if c.endswith("_by_seed")]:
        vals = float_list(r[c])
        if vals is None or len(vals) != len(seeds):
            raise PosrnnError(f"{path}: row {i + 2} has {c} = {r[c]!r}, not one finite number per seed; {FIX}")
    for c in r:
        if c.endswith("_ci_low") or c == "ci_low":
            metric = "stability" if c == "ci_low" else c[: -len("_ci_low")]
            hi = "ci_high" if c == "ci_low" else f"{metric}_ci_high"
            lo_v, v, hi_v = r.get(c), r.get(metric), r.get(hi)
            if is_number(lo_v) and is_number(v) and is_number(hi_v) and not lo_v - 1e-9 <= v <= hi_v + 1e-9:
                raise PosrnnError(f"{path}: row {i + 2} has {metric} = {v} outside its CI [{lo_v}, {hi_v}] "
                                  f"(bounds swapped?); {FIX}")


def load_table(results_dir: Path, name: str) -> Optional[Table]:
    """``results_dir/<name>.csv`` as a ``Table`` (rows tagged with ``_table``), or ``None`` when
    the file is absent. A file that cannot be read, is empty, lacks a required column, holds a
    non-numeric measurement, per-seed values that do not match its seeds, a value outside its
    CI, or names the same cell twice raises ``PosrnnError``."""
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
    # the one check plot makes too
    check_table(raw, path, REQUIRED_COLUMNS.get(name, []), what=f"{name} table", fix=FIX)
    rows = []
    for i, r in enumerate(raw):
        if None in r:
            raise PosrnnError(f"{path}: row {i + 2} has more cells than the header; {FIX}")
        rows.append({**r, "_table": name})
    missing = [c for c in REQUIRED_COLUMNS.get(name, []) if c not in rows[0]]
    if missing:
        raise PosrnnError(f"{path} lacks the column(s) {', '.join(missing)}; {FIX}")
    for i, r in enumerate(rows):
        for c in REQUIRED_COLUMNS.get(name, []):
            if c in NUMERIC_COLUMNS and not is_number(r[c]):
                raise PosrnnError(f"{path}: row {i + 2} has {c} = {r[c]!r}, not a finite number; {FIX}")
        _check_row(path, i, r)
    keys = _key_columns(rows)
    seen: dict[tuple, int] = {}
    for i, r in enumerate(rows):
        k = tuple(r.get(c) for c in keys)
        if k in seen:
            raise PosrnnError(f"{path}: rows {seen[k] + 2} and {i + 2} describe the same cell; {FIX}")
        seen[k] = i
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
