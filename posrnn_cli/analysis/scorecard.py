"""The reproduction scorecard: every claim of the papers (docs/papers.md lists the versions
000–004) against what one profile of the pipeline measured, with a verdict from a test declared
in advance as data.

``claims.yaml`` (beside this module) lists the claims: an id, the claim, the paper's words and
section, the aggregated tables it reads, the *regime* the paper states it at, the models it
names, a test kind with its parameters, and the test in plain words. The test kinds are the
functions in ``TESTS`` below; the YAML only names them. A claim that no profile can measure yet
says why in ``unscored`` instead of a test.

How a claim is scored:

- **Seeds are the unit of replication.** Every table row lists its seeds and each seed's value.
  Two arms are compared only on identical seed sets and training budgets (iterations, batch
  size, warm-up); otherwise the claim is not measured, with the reason. A difference is read per
  seed (paired), and its 95% interval is Student's t over the seeds
  (``common.stats.t_interval``). With fewer than ``MIN_SEEDS`` seeds per arm the verdict is
  ``too few seeds``, never ``reproduced``.
- **Regime.** ``regime`` is a filter on the table rows (e.g. L = 64, H = 512, V in the paper's
  range). The *verdict* is read on the cells inside it; cells outside it give an *indication*,
  shown beside the verdict and counted apart, never as reproduced or refuted.
- **Models.** A claim that names several models is scored on each; a model with no cell makes
  the claim *partial*, counted apart.
- **Fair tests.** "Reproduced" and "not reproduced" need the interval of the difference to lie
  on one side of the claim's bound; an interval across it is ``inconclusive``. "Direction only"
  means the difference is shown (its interval excludes 0) but the size the paper states is not.
  A contrast claim is scored only where its baseline effect is shown; a null claim needs an
  equivalence margin and a power guard (the reference learned something, and the interval is
  narrower than the margin); a decay speed needs at least 5 checkpoints, the first at step 0.

Everything here reads CSV files only: no torch, no training code, so the pipeline stage that
writes the scorecard depends on the result tables alone.

Filters: a filter maps a column to a value, a list of values (any of them) or ``{min, max}``
(an inclusive numeric range); ``null`` matches an empty cell. Rows of two *arms* (e.g.
``pe: sinusoidal`` vs ``pe: none``) are paired on the ``match`` columns; by default all the cell
columns the rows share, less those the arms set.
"""

from __future__ import annotations

import contextvars
import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import numpy as np
import yaml

from posrnn_cli.common import catalog, experiments
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.io import atomic_write_json, atomic_write_text, check_table, read_csv
from posrnn_cli.common.stats import seeds_for_power, seeds_to_clear, seeds_to_narrow, t_interval, t_interval_at

CLAIMS_PATH = Path(__file__).with_name("claims.yaml")

REPRODUCED = "reproduced"
DIRECTION_ONLY = "direction only"
TOO_FEW_SEEDS = "too few seeds"
INCONCLUSIVE = "inconclusive"
NOT_REPRODUCED = "not reproduced"
UNDERPOWERED = "underpowered"
NOT_TESTABLE = "not testable"
NOT_MEASURED = "not measured"
VERDICTS = (REPRODUCED, DIRECTION_ONLY, TOO_FEW_SEEDS, INCONCLUSIVE, UNDERPOWERED, NOT_REPRODUCED, NOT_TESTABLE,
            NOT_MEASURED)
#: the verdicts that leave the question open for want of seeds: the seeds-needed table lists them
OPEN = (INCONCLUSIVE, UNDERPOWERED)
#: the two scopes of a claim: its verdict at the papers' regime, and an indication outside it
SCOPES = ("at_regime", "indication")
SCOPE_NAMES = {"at_regime": "at the papers' regime", "indication": "indication off the papers' regime"}
#: seeds per arm a verdict needs
MIN_SEEDS = 3
#: the training budget two compared arms must share
BUDGET_COLUMNS = ("iterations", "batch_size", "warmup")

#: the result tables a claim may read, and the columns each must hold (the experiment registry)
EVAL_TABLES = experiments.eval_tables()
TABLES = experiments.result_tables()
REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {t: experiments.required_columns(t) for t in TABLES}
#: of those, the ones that must hold a finite number in every row
NUMERIC_COLUMNS = {"vocab_size", "step", "layers", "token_accuracy", "token_accuracy_ci_low",
                   "token_accuracy_ci_high", "stability", "ci_low", "ci_high", "perplexity",
                   "permutation_sensitive_share", "max_logit_change", "tolerance"}

#: columns that name a cell (a config without its seed), whatever their type
KEY_COLUMNS = {"task", "model", "pe", "vocab_size", "length", "min_length", "rarity", "hidden_size", "layers",
               "heads", "delay", "iterations", "batch_size", "warmup", "condition", "half", "step", "pair", "base_vocab",
               "extra_vocab", "max_tokens", "combine", "embed_size"}
#: columns that hold a measurement or a count; any other column is a cell column when its values
#: are text or integers, and a measurement when they are fractional
VALUE_COLUMNS = {"token_accuracy", "sequence_accuracy", "damerau_levenshtein", "stability", "ci_low", "ci_high",
                 "seeds", "n_seeds", "n_sequences", "n_triplets", "n_tokens", "perplexity", "perplexity_min",
                 "perplexity_max", "token_nll", "early_train_loss", "non_decreasing_share",
                 "permutation_sensitive_share", "max_logit_change", "tolerance", "permutations"}

_FIX = "re-run the aggregate stage for this profile (dvc repro) to rewrite it"


class _NotMeasured(Exception):
    """Raised inside a test: the rows the claim needs are not in this profile."""


class _Settled(Exception):
    """Raised inside a test that ends before its comparison: data were measured, but the test
    cannot decide (``underpowered``) or cannot apply (``not testable``); carries the Outcome."""

    def __init__(self, outcome: "Outcome"):
        super().__init__(outcome.reason)
        self.outcome = outcome


#: while a test runs: every interval it reads against a bound (``_side``) and every power-guard
#: width it checks, so the seeds a comparison needs can be computed afterwards
_TRACE: contextvars.ContextVar[Optional[list]] = contextvars.ContextVar("_TRACE", default=None)
#: the confidence level of every interval a test reads (0.95; 1 − 0.05/k on a Holm step)
_LEVEL: contextvars.ContextVar[float] = contextvars.ContextVar("_LEVEL", default=0.95)


def _trace(*entry: Any) -> None:
    trace = _TRACE.get()
    if trace is not None:
        trace.append(entry)


# ---- tables ---------------------------------------------------------------------------------
@dataclass
class Table:
    name: str
    path: Path
    rows: list[dict]
    key_columns: list[str]


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


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


def _seed_list(v: Any) -> list[int]:
    """A row's ``seeds`` cell ("111 222 333", or one number) as a list of ints."""
    try:
        out = [int(s) for s in str(v).split()] if v is not None else []
    except ValueError:
        return []
    return out


def _float_list(v: Any) -> Optional[list[float]]:
    try:
        out = [float(s) for s in str(v).split()] if v is not None else []
    except ValueError:
        return None
    return out if out and all(math.isfinite(x) for x in out) else None


def _check_row(path: Path, i: int, r: dict) -> None:
    """A row's seeds, per-seed values and CIs: well formed, finite, low ≤ value ≤ high."""
    seeds = _seed_list(r.get("seeds"))
    if not seeds or len(set(seeds)) != len(seeds):
        raise PosrnnError(f"{path}: row {i + 2} has seeds = {r.get('seeds')!r}, not distinct integers; {_FIX}")
    for c in [c for c in r if c.endswith("_by_seed")]:
        vals = _float_list(r[c])
        if vals is None or len(vals) != len(seeds):
            raise PosrnnError(f"{path}: row {i + 2} has {c} = {r[c]!r}, not one finite number per seed; {_FIX}")
    for c in r:
        if c.endswith("_ci_low") or c == "ci_low":
            metric = "stability" if c == "ci_low" else c[: -len("_ci_low")]
            hi = "ci_high" if c == "ci_low" else f"{metric}_ci_high"
            lo_v, v, hi_v = r.get(c), r.get(metric), r.get(hi)
            if _is_number(lo_v) and _is_number(v) and _is_number(hi_v) and not lo_v - 1e-9 <= v <= hi_v + 1e-9:
                raise PosrnnError(f"{path}: row {i + 2} has {metric} = {v} outside its CI [{lo_v}, {hi_v}] "
                                  f"(bounds swapped?); {_FIX}")


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
        raise PosrnnError(f"{path} is not a CSV table (corrupt or not text); {_FIX}") from None
    except (OSError, ValueError, TypeError, csv.Error) as e:  # ValueError covers undecodable bytes
        raise PosrnnError(f"cannot read {path} ({type(e).__name__}: {e}); {_FIX}") from None
    if not raw:
        raise PosrnnError(f"{path} is empty (no rows); {_FIX}")
    check_table(raw, path, REQUIRED_COLUMNS.get(name, []), what=f"{name} table", fix=_FIX)  # the one check plot makes too
    rows = []
    for i, r in enumerate(raw):
        if None in r:
            raise PosrnnError(f"{path}: row {i + 2} has more cells than the header; {_FIX}")
        rows.append({**r, "_table": name})
    missing = [c for c in REQUIRED_COLUMNS.get(name, []) if c not in rows[0]]
    if missing:
        raise PosrnnError(f"{path} lacks the column(s) {', '.join(missing)}; {_FIX}")
    for i, r in enumerate(rows):
        for c in REQUIRED_COLUMNS.get(name, []):
            if c in NUMERIC_COLUMNS and not _is_number(r[c]):
                raise PosrnnError(f"{path}: row {i + 2} has {c} = {r[c]!r}, not a finite number; {_FIX}")
        _check_row(path, i, r)
    keys = _key_columns(rows)
    seen: dict[tuple, int] = {}
    for i, r in enumerate(rows):
        k = tuple(r.get(c) for c in keys)
        if k in seen:
            raise PosrnnError(f"{path}: rows {seen[k] + 2} and {i + 2} describe the same cell; {_FIX}")
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
            raise _NotMeasured(f"{', '.join(f'{n}.csv' for n in names)} {'is' if len(names) == 1 else 'are'} absent")
        for n, t in present:
            if t is None:
                continue
            rows += [r for r in t.rows if self.keep is None or self.keep(r)]
            common = t.key_columns if common is None else [c for c in common if c in t.key_columns]
        return rows, common or []


# ---- filters, values, cells -----------------------------------------------------------------
def _matches(row: dict, filt: Optional[dict]) -> bool:
    for col, spec in (filt or {}).items():
        v = row.get(col)
        if isinstance(spec, dict):
            if not _is_number(v):
                return False
            if "min" in spec and v < spec["min"]:
                return False
            if "max" in spec and v > spec["max"]:
                return False
        elif isinstance(spec, list):
            if v not in spec:
                return False
        elif v != spec:
            return False
    return True


def _select(rows: list[dict], filt: Optional[dict]) -> list[dict]:
    return [r for r in rows if _matches(r, filt)]


def _filter_name(filt: dict) -> str:
    """A condition's short name in a measured string: "F/R", "R/R second half", "layers=2"."""
    parts = []
    for col, spec in filt.items():
        if col == "condition":
            parts.append(str(spec))
        elif col == "half":
            parts.append("all positions" if spec == "all" else f"{spec} half")
        else:
            parts.append(_describe_filter({col: spec}))
    return " ".join(parts)


def _describe_filter(filt: Optional[dict]) -> str:
    parts = []
    for col, spec in (filt or {}).items():
        if isinstance(spec, dict):
            lo, hi = spec.get("min", "…"), spec.get("max", "…")
            parts.append(f"{col} {lo}–{hi}")
        elif isinstance(spec, list):
            parts.append(f"{col} ∈ {{{', '.join(map(str, spec))}}}")
        else:
            parts.append(f"{col}={spec}")
    return ", ".join(parts) or "any row"


def _num(row: dict, col: str) -> float:
    v = row.get(col)
    if not _is_number(v):
        raise PosrnnError(f"results table {row.get('_table')}.csv has {col} = {v!r} in a row the scorecard "
                          f"needs, not a finite number; {_FIX}")
    return float(v)


def _fmt(x: float, digits: int = 3) -> str:
    return f"{x:.{digits}f}"


_PE_NAMES = {"none": "vanilla", "sinusoidal": "PE", "dummy": "double vanilla"}


def _pe_name(pe: Any) -> str:
    return _PE_NAMES.get(pe, f"PE {pe}") if pe is not None else "?"


def _label(row: dict, skip: Iterable[str] = ()) -> str:
    """A short name for a row's cell: "GRU V=32 L=64 H=512" (+ the cell's other axes)."""
    skip = set(skip)
    parts = []
    if "model" not in skip and row.get("model") is not None:
        model = str(row["model"])
        name = catalog.label(catalog.CORES, model) if model in catalog.CORES else model
        if row.get("layers") not in (None, 1) and "layers" not in skip:
            name = f"{row['layers']}-layer {name}"
        parts.append(name)
    if "vocab_size" not in skip and row.get("vocab_size") is not None:
        parts.append(f"V={row['vocab_size']}")
    if "length" not in skip and row.get("length") is not None:
        lo = row.get("min_length")
        parts.append(f"L={lo}–{row['length']}" if lo not in (None, row["length"]) else f"L={row['length']}")
    if "hidden_size" not in skip and row.get("hidden_size") is not None:
        parts.append(f"H={row['hidden_size']}")
    for col, fmt in (("condition", "{}"), ("half", "{} half"), ("step", "step {}")):
        v = row.get(col)
        if col not in skip and v is not None and not (col == "half" and v == "all"):
            parts.append(fmt.format(v))
    return " ".join(parts)


def _require(rows: list[dict], filt: Optional[dict], tables: Iterable[str]) -> list[dict]:
    """The rows that match ``filt``; none makes the claim unmeasured."""
    sel = _select(rows, filt)
    if not sel:
        raise _NotMeasured(f"no row of {'/'.join(tables)} matches {_describe_filter(filt)}")
    return sel


def _cells(rows: list[dict], key_cols: list[str], arms: dict[str, dict],
           match: Optional[list[str]] = None) -> tuple[list[str], dict[tuple, dict[str, dict]]]:
    """Pair the rows of several arms (name → filter) on the ``match`` columns (default: the
    shared cell columns the arms do not set). Returns the match columns and
    ``{key: {arm: row}}``. A cell found in an earlier table wins; two rows of one table for
    the same arm and key make the claim ambiguous (unmeasured)."""
    if match is None:
        differing = _differing(list(arms.values()))
        match = [c for c in key_cols if c not in differing]
    out: dict[tuple, dict[str, dict]] = {}
    for name, filt in arms.items():
        for r in rows:
            if not _matches(r, filt):
                continue
            k = tuple(r.get(c) for c in match)
            cell = out.setdefault(k, {})
            if name in cell:
                if cell[name]["_table"] == r["_table"]:
                    raise _NotMeasured(f"two rows of {r['_table']}.csv match {name} ({_describe_filter(filt)}) "
                                       f"at {dict(zip(match, k))}: the claim's match columns do not pin one cell")
                continue
            cell[name] = r
    return match, out


def _natural(k: Any) -> tuple:
    """Sort key for cell keys: numbers by value (V=256 before V=1024), then text, None last."""
    items = k if isinstance(k, tuple) else (k,)
    return tuple((0, v, "") if _is_number(v) else (2, 0, "") if v is None else (1, 0, str(v)) for v in items)


def _complete(cells: dict[tuple, dict[str, dict]], names: Iterable[str]) -> dict[tuple, dict[str, dict]]:
    names = list(names)
    return {k: c for k, c in cells.items() if all(n in c for n in names)}


def _largest_vocab(match: list[str], cells: dict[tuple, dict[str, dict]]) -> dict[tuple, dict[str, dict]]:
    """Keep, in each group of cells that differ only in V, the cell of the largest V."""
    if "vocab_size" not in match:
        return cells
    i = match.index("vocab_size")
    best: dict[tuple, tuple] = {}
    for k in cells:
        g = k[:i] + k[i + 1:]
        if g not in best or (k[i] or 0) > (best[g][i] or 0):
            best[g] = k
    return {k: cells[k] for k in best.values()}


def _differing(filters: list[dict]) -> set[str]:
    """The columns on which some of ``filters`` disagree (set in one and not another, or to
    another value): the columns that tell arms apart, left out of the match."""
    cols = {c for f in filters for c in f}
    return {c for c in cols if any(c not in f or f[c] != filters[0].get(c) for f in filters)}


_ORDER = {REPRODUCED: 0, DIRECTION_ONLY: 1, TOO_FEW_SEEDS: 2, INCONCLUSIVE: 3, UNDERPOWERED: 4, NOT_REPRODUCED: 5,
          NOT_TESTABLE: 6}


def _worst(verdicts: Iterable[str]) -> str:
    return max(verdicts, key=_ORDER.__getitem__)


def _as_list(x: Any) -> list:
    return x if isinstance(x, list) else [x]


# ---- per-seed values: the unit of replication ---------------------------------------------------
@dataclass(frozen=True)
class Seeded:
    """A measure per seed (seed → value): one table row's values, or a combination of rows on
    the same seeds. ``a - b`` pairs seeds, and refuses arms on different seeds or, for two
    single rows, different training budgets."""

    values: dict
    rows: tuple

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def seeds(self) -> list[int]:
        return sorted(self.values)

    @property
    def mean(self) -> float:
        return float(np.mean([self.values[s] for s in self.seeds]))

    @property
    def sd(self) -> float:
        """The standard deviation over the seeds (nan with one seed)."""
        return float(np.std([self.values[s] for s in self.seeds], ddof=1)) if self.n >= 2 else math.nan

    def interval(self) -> tuple[float, float, float]:
        """Mean and t-interval over the seeds (nan bounds with one seed): 95%, or the level a
        Holm step sets."""
        level = _LEVEL.get()
        vals = [self.values[s] for s in self.seeds]
        return t_interval(vals) if level == 0.95 else t_interval_at(vals, level)

    def _pair(self, other: "Seeded", op: Callable[[float, float], float]) -> "Seeded":
        if set(self.values) != set(other.values):
            raise _NotMeasured(f"arms ran on different seeds ({_who(self)}: seeds {_seed_text(self)}; {_who(other)}: "
                               f"seeds {_seed_text(other)}); arms are compared only on identical seed sets")
        if len(self.rows) == 1 and len(other.rows) == 1:
            a, b = self.rows[0], other.rows[0]
            for c in BUDGET_COLUMNS:
                if c in a and c in b and a[c] != b[c]:
                    raise _NotMeasured(f"training budgets differ ({_who(self)}: {c} {a[c]}; {_who(other)}: {c} {b[c]}); "
                                       f"arms are compared only at equal budgets")
        return Seeded({s: op(self.values[s], other.values[s]) for s in self.values}, self.rows + other.rows)

    def __sub__(self, other: "Seeded") -> "Seeded":
        return self._pair(other, lambda x, y: x - y)

    def map(self, f: Callable[[float], float]) -> "Seeded":
        return Seeded({s: f(v) for s, v in self.values.items()}, self.rows)


def _seed_text(sd: Seeded) -> str:
    return " ".join(map(str, sd.seeds))


def _who(sd: Seeded) -> str:
    r = sd.rows[0]
    return f"{_label(r)} {_pe_name(r.get('pe'))}".strip()


def _seeded(row: dict, metric: str) -> Seeded:
    """A row's per-seed values of ``metric`` (the ``<metric>_by_seed`` column)."""
    col = f"{metric}_by_seed"
    if col not in row:
        raise _NotMeasured(f"{row.get('_table')}.csv has no per-seed {metric}")
    seeds, vals = _seed_list(row.get("seeds")), _float_list(row.get(col))
    if not seeds or vals is None or len(vals) != len(seeds):
        raise PosrnnError(f"results table {row.get('_table')}.csv: {col} does not hold one value per seed; {_FIX}")
    return Seeded(dict(zip(seeds, vals)), (row,))


def _side(sd: Seeded, bound: float = 0.0, gate: bool = False) -> str:
    """Where the seed-level interval lies against ``bound``: "above", "below" or "across".
    With one seed the point value decides (such verdicts end as "too few seeds")."""
    m, lo, hi = sd.interval()
    if sd.n < 2:
        return "above" if m > bound else "below" if m < bound else "across"
    side = "above" if lo > bound else "below" if hi < bound else "across"
    _trace("gate" if gate else "side", sd, bound, side)
    return side


def _fmt_sd(sd: Seeded, digits: int = 3, sign: bool = False) -> str:
    m, lo, hi = sd.interval()
    f = f"{{:{'+' if sign else ''}.{digits}f}}"
    per = ", ".join(f.format(sd.values[s]) for s in sd.seeds)
    ci = f" [{f.format(lo)}, {f.format(hi)}]" if sd.n >= 2 else ""
    return f"{f.format(m)}{ci} (per seed {per})"


def _sd_dict(sd: Optional[Seeded]) -> Optional[dict]:
    if sd is None:
        return None
    m, lo, hi = sd.interval()
    return {"mean": m, "ci_low": None if math.isnan(lo) else lo, "ci_high": None if math.isnan(hi) else hi,
            "seeds": sd.seeds, "by_seed": [sd.values[s] for s in sd.seeds]}


def _seeds_note(sds: Iterable[Seeded]) -> str:
    sets = list(dict.fromkeys(_seed_text(s) for s in sds))
    return "seeds " + " | ".join(sets) if sets else "no seeds"


@dataclass
class Outcome:
    """What a test kind found: its verdict, the measurement in words, why, the numbers, and the
    fewest seeds any compared arm had."""

    verdict: str
    measured: str
    reason: str
    details: dict
    n_seeds: int


def _min_n(sds: Iterable[Seeded]) -> int:
    return min((s.n for s in sds), default=0)


# ---- the test kinds -------------------------------------------------------------------------
def check_threshold(claim: dict, ts: TableSet) -> Outcome:
    """The selected (PE) model reaches the paper's figure: the seed-level interval of ``metric``
    lies above ``threshold`` in every selected cell. Direction only: short of that, but ahead of
    its ``baseline`` (vanilla) in every cell, the interval of the paired difference above 0.
    Not reproduced: some cell's interval lies below the figure (or the baseline is ahead)."""
    p = claim["params"]
    metric, thr = p.get("metric", "token_accuracy"), float(p["threshold"])
    rows, keys = ts.rows(claim["tables"])
    arms = {"pe": p["select"]}
    if p.get("baseline"):
        arms["base"] = {**p["select"], **p["baseline"]}
    match, cells = _cells(rows, keys, arms, p.get("match"))
    cells = {k: c for k, c in cells.items() if "pe" in c}
    if not cells:
        raise _NotMeasured(f"no row of {'/'.join(claim['tables'])} matches {_describe_filter(p['select'])}")
    comps = []
    for k, c in sorted(cells.items(), key=lambda kv: _natural(kv[0])):
        pe = _seeded(c["pe"], metric)
        diff = pe - _seeded(c["base"], metric) if "base" in c else None
        comps.append({"cell": _label(c["pe"], skip=["pe"]), "pe": pe, "diff": diff, "level": _side(pe, thr),
                      "ahead": _side(diff) if diff is not None else None})
    if all(x["level"] == "above" for x in comps):
        verdict, reason = REPRODUCED, f"above {thr:g} in every cell"
    elif p.get("baseline") and all(x["ahead"] == "above" for x in comps):
        verdict, reason = DIRECTION_ONLY, f"ahead of the baseline in every cell, but not above {thr:g} in every cell"
    elif any(x["level"] == "below" or x["ahead"] == "below" for x in comps):
        verdict, reason = NOT_REPRODUCED, f"below {thr:g} (or behind the baseline) in some cell"
    else:
        verdict, reason = INCONCLUSIVE, f"the interval crosses {thr:g} in some cell"
    if any(x["diff"] is None for x in comps) and p.get("baseline"):
        reason += " (baseline row missing for some cell)"
    measured = "; ".join(f"{x['cell']}: {_fmt_sd(x['pe'])}" + (f", ahead of the baseline by {_fmt_sd(x['diff'], sign=True)}"
                                                            if x["diff"] is not None else "") for x in comps)
    sds = [x["pe"] for x in comps] + [x["diff"] for x in comps if x["diff"] is not None]
    details = {"metric": metric, "threshold": thr, "cells": [
        {"cell": x["cell"], "value": _sd_dict(x["pe"]), "difference": _sd_dict(x["diff"]), "level": x["level"],
         "ahead": x["ahead"]} for x in comps]}
    return Outcome(verdict, measured + f"; {_seeds_note(sds)}", reason, details, _min_n(sds))


def _groups_by_vocab(claim: dict, rows: list[dict], keys: list[str], sel: dict) -> dict[tuple, list[dict]]:
    group_cols = [c for c in keys if c != "vocab_size"]
    groups: dict[tuple, list[dict]] = {}
    for r in _require(rows, sel, claim["tables"]):
        groups.setdefault(tuple(r.get(c) for c in group_cols), []).append(r)
    groups = {g: sorted(rs, key=lambda r: _num(r, "vocab_size")) for g, rs in groups.items() if len(rs) >= 2}
    if not groups:
        raise _NotMeasured(f"fewer than two vocabulary sizes for {_describe_filter(sel)}")
    return groups


def _by_interval(sd: Seeded, above: str = REPRODUCED) -> str:
    return {"above": above, "below": NOT_REPRODUCED, "across": INCONCLUSIVE}[_side(sd)]


def check_decline(claim: dict, ts: TableSet) -> Outcome:
    """The selected model's metric falls as V grows: the paired difference (smallest V − largest
    V) has its seed-level interval above 0, in every group of cells that differ only in V."""
    p = claim["params"]
    metric = p.get("metric", "token_accuracy")
    rows, keys = ts.rows(claim["tables"])
    groups = _groups_by_vocab(claim, rows, keys, p["select"])
    verdicts, parts, cells, sds = [], [], [], []
    for g, rs in sorted(groups.items(), key=lambda kv: _natural(kv[0])):
        first, last = _seeded(rs[0], metric), _seeded(rs[-1], metric)
        drop = first - last
        v = _by_interval(drop)
        verdicts.append(v)
        sds += [first, last, drop]
        series = " → ".join(f"V={r['vocab_size']} {_fmt(_num(r, metric))}" for r in rs)
        parts.append(f"{_label(rs[0], skip=['vocab_size', 'pe'])} {_pe_name(rs[0].get('pe'))}: {series}; "
                     f"drop {_fmt_sd(drop, sign=True)}")
        cells.append({"cell": _label(rs[0], skip=["vocab_size"]), "verdict": v, "drop": _sd_dict(drop),
                      "series": [{"vocab_size": r["vocab_size"], "value": _num(r, metric)} for r in rs]})
    verdict = _worst(verdicts)
    reason = {REPRODUCED: "lower at the largest V in every group, the interval of the drop above 0",
              INCONCLUSIVE: "the interval of the drop crosses 0 in some group",
              NOT_REPRODUCED: "higher at the largest V in some group"}[verdict]
    return Outcome(verdict, "; ".join(parts) + f"; {_seeds_note(sds)}", reason, {"metric": metric, "groups": cells},
                   _min_n(sds))


def _arm_name(row: dict, filt: dict) -> str:
    """How a measured string names an arm: "PE", "vanilla", "PE random", or "half=first"."""
    if set(filt) == {"pe"}:
        return _pe_name(row.get("pe"))
    return ", ".join(f"{c}={row.get(c)}" for c in filt)


def _pairs_of(claim: dict, ts: TableSet, better: Any, worse: Any, where: str = "all", select: Optional[dict] = None,
              match: Optional[list[str]] = None) -> list[tuple[dict, dict, dict, dict]]:
    """Every (better row, worse row, better filter, worse filter) of the compared cells."""
    tables = claim["tables"]
    rows, keys = ts.rows(tables)
    rows = _require(rows, select, tables)
    out = []
    for b in _as_list(better):
        for w in _as_list(worse):
            m, cells = _cells(rows, keys, {"better": b, "worse": w}, match)
            cells = _complete(cells, ["better", "worse"])
            if where == "largest_vocab":
                cells = _largest_vocab(m, cells)
            elif where == "last_step":
                cells = _keep_steps(cells, m, "last")
            if not cells:
                raise _NotMeasured(f"no cell has both {_describe_filter({**(select or {}), **b})} and "
                                   f"{_describe_filter({**(select or {}), **w})}")
            out += [(cells[k]["better"], cells[k]["worse"], b, w) for k in sorted(cells, key=_natural)]
    return out


def check_ahead(claim: dict, ts: TableSet) -> Outcome:
    """The ``better`` arm(s) ahead of the ``worse`` arm(s) in every compared cell (all cells, or
    each group's largest V): the seed-level interval of the paired difference above 0 (below 0
    with ``lower_is_better``). With ``min_difference``, a shown difference smaller than that is
    direction only."""
    p = claim["params"]
    metric, low = p.get("metric", "token_accuracy"), bool(p.get("lower_is_better", False))
    size = p.get("min_difference")
    if "ceiling" in p:
        _check_ceiling(claim, ts, metric, float(p["ceiling"]))
    comps = []
    for br, wr, bf, wf in _pairs_of(claim, ts, p["better"], p["worse"], p.get("where", "all"), p.get("select"),
                                    p.get("match")):
        b, w = _seeded(br, metric), _seeded(wr, metric)
        lead = w - b if low else b - w
        v = _by_interval(lead)
        if v == REPRODUCED and size is not None and lead.mean < float(size):
            v = DIRECTION_ONLY
        comps.append((br, bf, wf, b, w, lead, v))
    verdict = _worst(c[-1] for c in comps)
    reason = {REPRODUCED: "ahead in every compared cell, the interval of the paired difference above 0",
              DIRECTION_ONLY: f"ahead in every compared cell, but by less than {size} somewhere",
              INCONCLUSIVE: "the interval of the difference crosses 0 in some compared cell",
              NOT_REPRODUCED: "behind in some compared cell, the interval of the difference below 0"}[verdict]
    arm_cols = {c for f in _as_list(p["better"]) + _as_list(p["worse"]) for c in f}
    parts = [f"{_label(br, skip=arm_cols)}: {_arm_name(b.rows[0], bf)} {_fmt(b.mean)} vs {_arm_name(w.rows[0], wf)} "
             f"{_fmt(w.mean)}, lead {_fmt_sd(lead, sign=True)}" for br, bf, wf, b, w, lead, _ in comps]
    sds = [x for c in comps for x in c[3:6]]
    details = {"metric": metric, "lower_is_better": low, "comparisons": [
        {"cell": _label(br, skip=arm_cols), "better": _sd_dict(b), "worse": _sd_dict(w), "lead": _sd_dict(lead),
         "verdict": v} for br, bf, wf, b, w, lead, v in comps]}
    return Outcome(verdict, "; ".join(parts) + f"; {_seeds_note(sds)}", reason, details, _min_n(sds))


def _check_ceiling(claim: dict, ts: TableSet, metric: str, ceiling: float) -> None:
    """``not testable`` when the ``worse`` arm's measure already sits at or above ``ceiling`` at
    its first checkpoint (before training): no rise above it could show."""
    p = claim["params"]
    rows, _ = ts.rows(claim["tables"])
    for worse in _as_list(p["worse"]):
        arm = _select(rows, {**(p.get("select") or {}), **worse})
        steps = [_num(r, "step") for r in arm if _is_number(r.get("step"))]
        if not steps:
            continue
        first = [r for r in arm if _is_number(r.get("step")) and _num(r, "step") == min(steps)]
        at = [(r, _seeded(r, metric)) for r in first]
        top = [(r, sd) for r, sd in at if sd.mean >= ceiling]
        if top:
            r, sd = top[0]
            name = f"{_label(r, skip={'step'})} {_arm_name(r, worse)}"
            raise _Settled(Outcome(
                NOT_TESTABLE, f"{name} at step {r.get('step')}: {metric} {_fmt_sd(sd, digits=5)}",
                f"the {_arm_name(r, worse)} arm's {metric} is {sd.mean:.5f} before training (step {r.get('step')}), at "
                f"or above {ceiling:g}: the measure starts at its ceiling, so a rise cannot show",
                {"metric": metric, "ceiling": ceiling, "at_first_step": _sd_dict(sd)}, sd.n))


def check_trend(claim: dict, ts: TableSet) -> Outcome:
    """The ``better`` arm's lead over the ``worse`` arm grows with V: per seed, the lead at the
    largest V minus the lead at the smallest V, its interval above 0 in every group of cells
    that differ only in V."""
    p = claim["params"]
    metric = p.get("metric", "token_accuracy")
    rows, keys = ts.rows(claim["tables"])
    arms = {"better": p["better"], "worse": p["worse"]}
    m, cells = _cells(_require(rows, p.get("select"), claim["tables"]), keys, arms)
    cells = _complete(cells, arms)
    if "vocab_size" not in m:
        raise _NotMeasured("the rows have no vocabulary sizes to compare")
    i = m.index("vocab_size")
    groups: dict[tuple, list] = {}
    for k, c in cells.items():
        groups.setdefault(k[:i] + k[i + 1:], []).append((k[i], c))
    groups = {g: sorted(v, key=lambda x: x[0]) for g, v in groups.items() if len(v) >= 2}
    if not groups:
        raise _NotMeasured(f"fewer than two vocabulary sizes with both {_describe_filter(p['better'])} and "
                           f"{_describe_filter(p['worse'])}")
    verdicts, parts, det, sds = [], [], [], []
    for g, series in sorted(groups.items(), key=lambda kv: _natural(kv[0])):
        leads = [(v, _seeded(c["better"], metric) - _seeded(c["worse"], metric)) for v, c in series]
        growth = leads[-1][1] - leads[0][1]
        v = _by_interval(growth)
        verdicts.append(v)
        sds += [growth] + [x for _, x in leads]
        row = series[0][1]["better"]
        parts.append(f"{_label(row, skip=['vocab_size', 'pe'])}: lead " +
                     " → ".join(f"V={vv} {lead.mean:+.3f}" for vv, lead in leads) +
                     f"; growth {_fmt_sd(growth, sign=True)}")
        det.append({"cell": _label(row, skip=["vocab_size", "pe"]), "verdict": v, "growth": _sd_dict(growth),
                    "leads": [{"vocab_size": vv, **_sd_dict(lead)} for vv, lead in leads]})
    verdict = _worst(verdicts)
    reason = {REPRODUCED: "the lead at the largest V exceeds the lead at the smallest V, interval above 0",
              INCONCLUSIVE: "the interval of the lead's growth crosses 0 in some group",
              NOT_REPRODUCED: "the lead shrinks as V grows in some group (interval below 0)"}[verdict]
    return Outcome(verdict, "; ".join(parts) + f"; {_seeds_note(sds)}", reason, {"metric": metric, "groups": det},
                   _min_n(sds))


def check_no_gain(claim: dict, ts: TableSet) -> Outcome:
    """A null claim: the ``candidate`` arm gains no more than ``margin`` over the ``reference``
    arm. Reproduced: the seed-level interval of the paired gain lies below ``margin`` in every
    compared cell; not reproduced: above it somewhere. Only cells that pass the power guard
    count: the reference learned something (its interval lies more than ``learned`` above chance,
    1/V for token accuracy) and the gain's interval is narrower than the margin, or lies wholly
    above it (a refutation needs no narrow interval). Cells measured but held back by the width
    guard alone make the claim ``underpowered``."""
    p = claim["params"]
    metric, margin, learned = p.get("metric", "token_accuracy"), float(p["margin"]), float(p["learned"])
    low = bool(p.get("lower_is_better", False))
    comps, skipped, wide = [], [], []
    for cr, rr, cf, rf in _pairs_of(claim, ts, p["candidate"], p["reference"], p.get("where", "all"),
                                    p.get("select"), p.get("match")):
        c, r = _seeded(cr, metric), _seeded(rr, metric)
        gain = r - c if low else c - r
        chance = 1.0 / _num(rr, "vocab_size") if metric == "token_accuracy" and _is_number(rr.get("vocab_size")) else 0.0
        _, r_lo, _ = r.interval()
        _, g_lo, g_hi = gain.interval()
        cell = _label(cr, skip=set(cf) | set(rf))
        if r.n >= 2 and not (r_lo > chance + learned):
            skipped.append((cell, f"the reference did not learn (interval low {r_lo:.3f} ≤ chance {chance:.3f} + {learned:g})"))
            continue
        if r.n >= 2 and not _narrow(gain, margin) and _side(gain, margin) != "above":
            # a wide interval cannot show equivalence; one wholly above the margin still refutes
            skipped.append((cell, f"the interval of the gain (±{(g_hi - g_lo) / 2:.3f}) is not narrower than the "
                                  f"margin {margin:g}"))
            wide.append((cell, c, r, gain, cf, rf))
            continue
        v = {"below": REPRODUCED, "above": NOT_REPRODUCED, "across": INCONCLUSIVE}[_side(gain, margin)]
        comps.append((cell, c, r, gain, v, cf, rf))
    if not comps and wide:
        _underpowered(wide, skipped, margin, lambda g: _fmt_sd(g, sign=True))
    if not comps:
        raise _NotMeasured("power guard: " + "; ".join(f"{cell}: {why}" for cell, why in skipped))
    verdict = _worst(x[4] for x in comps)
    reason = {REPRODUCED: f"the gain's interval lies below the margin {margin:g} in every compared cell",
              INCONCLUSIVE: f"the gain's interval crosses the margin {margin:g} in some cell",
              NOT_REPRODUCED: f"a gain beyond the margin {margin:g} in some cell"}[verdict]
    if skipped:
        reason += "; cells left out by the power guard: " + "; ".join(f"{cell} ({why})" for cell, why in skipped)
    parts = [f"{cell}: {_arm_name(c.rows[0], cf)} {_fmt(c.mean)} vs {_arm_name(r.rows[0], rf)} {_fmt(r.mean)}, "
             f"gain {_fmt_sd(gain, sign=True)}" for cell, c, r, gain, v, cf, rf in comps]
    sds = [x for comp in comps for x in comp[1:4]]
    details = {"metric": metric, "margin": margin, "learned": learned, "comparisons": [
        {"cell": cell, "candidate": _sd_dict(c), "reference": _sd_dict(r), "gain": _sd_dict(gain), "verdict": v}
        for cell, c, r, gain, v, cf, rf in comps], "left_out": [{"cell": c, "why": w} for c, w in skipped]}
    return Outcome(verdict, "; ".join(parts) + f"; {_seeds_note(sds)}", reason, details, _min_n(sds))


def _narrow(gain: Seeded, margin: float) -> bool:
    """The power guard of a null claim: the gain's interval is narrower than the margin (traced,
    so the seeds that would narrow it can be computed)."""
    _, lo, hi = gain.interval()
    ok = (hi - lo) / 2 < margin
    _trace("width", gain, margin, ok)
    return ok


def _underpowered(wide: list, skipped: list, margin: float, fmt: Callable[[Seeded], str]) -> None:
    """End a null claim whose every measured cell failed the width guard: ``underpowered``, with
    the measurement shown (the seeds it needs come from the trace)."""
    parts = [f"{cell}: {_arm_name(c.rows[0], cf)} {_fmt(c.mean)} vs {_arm_name(r.rows[0], rf)} {_fmt(r.mean)}, "
             f"gain {fmt(gain)}" for cell, c, r, gain, cf, rf in wide]
    sds = [x for w in wide for x in w[1:4]]
    reason = ("power guard: " + "; ".join(f"{cell}: {why}" for cell, why in skipped) +
              "; measured, but too few seeds to decide against the margin")
    details = {"margin": margin, "comparisons": [
        {"cell": cell, "candidate": _sd_dict(c), "reference": _sd_dict(r), "gain": _sd_dict(gain)}
        for cell, c, r, gain, cf, rf in wide]}
    raise _Settled(Outcome(UNDERPOWERED, "; ".join(parts) + f"; {_seeds_note(sds)}", reason, details, _min_n(sds)))


def _side_gaps(claim: dict, ts: TableSet, side: dict) -> list[list[tuple[dict, Seeded, dict]]]:
    """For each ``minus`` arm of a side: (cell key, plus − minus per seed, plus row) of every cell."""
    metric = claim["params"].get("metric", "token_accuracy")
    tables = side.get("tables") or claim["tables"]
    rows, keys = ts.rows(tables)
    rows = _require(rows, side.get("select"), tables)
    out = []
    for minus in _as_list(side["minus"]):
        m, cells = _cells(rows, keys, {"plus": side["plus"], "minus": minus})
        cells = _complete(cells, ["plus", "minus"])
        if not cells:
            raise _NotMeasured(f"no cell has both {_describe_filter({**side.get('select', {}), **side['plus']})} and "
                               f"{_describe_filter({**side.get('select', {}), **minus})}")
        out.append([(dict(zip(m, k)), _seeded(c["plus"], metric) - _seeded(c["minus"], metric), c["plus"])
                    for k, c in sorted(cells.items(), key=lambda kv: _natural(kv[0]))])
    return out


def check_gap_contrast(claim: dict, ts: TableSet) -> Outcome:
    """A difference of differences on the same seeds: side ``a``'s gap (plus − minus) is shown
    (interval above 0) and exceeds side ``b``'s gap at the same cell (the interval of gap a −
    gap b above 0)."""
    p = claim["params"]
    a_sets, b_sets = _side_gaps(claim, ts, p["a"]), _side_gaps(claim, ts, p["b"])
    if len(a_sets) != len(b_sets):
        raise PosrnnError(f"claim {claim['id']}: sides a and b list different numbers of minus arms; fix claims.yaml")
    filt_cols = _differing([p["a"].get("select", {}), p["b"].get("select", {})])
    for s in (p["a"], p["b"]):
        filt_cols |= _differing([s["plus"], *_as_list(s["minus"])])
    comps = []
    for a_gaps, b_gaps in zip(a_sets, b_sets):
        match = p.get("match")
        if match is None:
            shared = set(a_gaps[0][0]) & set(b_gaps[0][0])
            match = [c for c in a_gaps[0][0] if c in shared and c not in filt_cols]
        b_index: dict[tuple, tuple] = {}
        for g in b_gaps:
            k = tuple(g[0].get(c) for c in match)
            if k in b_index:
                raise _NotMeasured(f"two cells of side b share {dict(zip(match, k))}: the claim's match columns "
                                   f"do not pin one cell")
            b_index[k] = g
        for g in a_gaps:
            other = b_index.get(tuple(g[0].get(c) for c in match))
            if other is not None:
                comps.append((g, other))
    if not comps:
        raise _NotMeasured(f"no cell of side a pairs with side b on {', '.join(p.get('match') or ['their shared cell columns'])}")
    out, sds = [], []
    for (ka, ga, row), (kb, gb, _) in comps:
        diff = ga - gb
        shown = _side(ga)
        v = (NOT_REPRODUCED if shown == "below" else INCONCLUSIVE if shown == "across" else _by_interval(diff))
        out.append((_label(row, skip=filt_cols), ga, gb, diff, v))
        sds += [ga, gb, diff]
    verdict = _worst(x[-1] for x in out)
    reason = {REPRODUCED: "gap a shown and larger than gap b, the interval of the difference above 0",
              INCONCLUSIVE: "gap a not shown, or the interval of gap a − gap b crosses 0, in some cell",
              NOT_REPRODUCED: "gap a negative, or smaller than gap b, in some cell"}[verdict]
    la, lb = p["a"].get("label", "a"), p["b"].get("label", "b")
    parts = [f"{cell}: {la} {_fmt_sd(ga, sign=True)}; {lb} {_fmt_sd(gb, sign=True)}; difference "
             f"{_fmt_sd(diff, sign=True)}" for cell, ga, gb, diff, _ in out]
    details = {"metric": p.get("metric", "token_accuracy"), "comparisons": [
        {"cell": cell, "gap_a": _sd_dict(ga), "gap_b": _sd_dict(gb), "difference": _sd_dict(diff), "verdict": v}
        for cell, ga, gb, diff, v in out]}
    return Outcome(verdict, "; ".join(parts) + f"; {_seeds_note(sds)}", reason, details, _min_n(sds))


def _keep_steps(cells: dict[tuple, dict], match: list[str], steps: str) -> dict[tuple, dict]:
    if steps == "all" or "step" not in match:
        return cells
    i = match.index("step")
    sign = 1 if steps == "last" else -1
    pick: dict[tuple, tuple] = {}
    for k in cells:
        g = k[:i] + k[i + 1:]
        if g not in pick or sign * k[i] > sign * pick[g][i]:
            pick[g] = k
    return {k: cells[k] for k in pick.values()}


def check_robust(claim: dict, ts: TableSet) -> Outcome:
    """A contrast: the selected (PE) model loses at most ``tolerance`` from each ``ref``
    condition to its paired ``cond`` condition, where the ``baseline`` (vanilla) model is shown
    to lose more than that. Only cells where the baseline's drop has its interval above the
    tolerance count (elsewhere staying near says nothing); with none, the claim is not measured.
    Reproduced: PE's drop has its interval below the tolerance in every such cell. Direction
    only: PE drops more than the tolerance somewhere, but less than the baseline there (interval
    of the difference above 0). The baseline's cell shares every key column but those of the
    baseline's own filter and ``baseline_ignores`` (e.g. ``hidden_size``, where another core is
    compared at a matched parameter count rather than at the same H)."""
    p = claim["params"]
    metric, tol = p.get("metric", "token_accuracy"), float(p["tolerance"])
    rows, keys = ts.rows(claim["tables"])
    sel, base_sel = p["select"], {**p["select"], **p["baseline"]}
    _require(rows, sel, claim["tables"])
    steps = p.get("steps", "all")
    who = _pe_name(sel["pe"]) if "pe" in sel else "PE"  # the arm whose drop is read: PE, or vanilla Mamba
    if who != "PE" and "model" in sel:
        who = f"{who} {catalog.label(catalog.CORES, sel['model'])}"
    drops, unshown = [], []
    for pair in p["pairs"]:
        arms = {"ref": pair["ref"], "cond": pair["cond"]}
        m, cells = _cells(_select(rows, sel), keys, arms)
        cells = _keep_steps(_complete(cells, arms), m, steps)
        if not cells:
            raise _NotMeasured(f"no cell has both {_describe_filter({**sel, **pair['ref']})} and "
                               f"{_describe_filter({**sel, **pair['cond']})}")
        own = set(p["baseline"]) | set(p.get("baseline_ignores", []))  # columns the baseline need not share
        base_m = [c for c in m if c not in own]
        _, bcells = _cells(_select(rows, base_sel), keys, arms, base_m)
        for k, c in sorted(cells.items(), key=lambda kv: _natural(kv[0])):
            bk = tuple(v for c_, v in zip(m, k) if c_ not in own)
            bc = bcells.get(bk, {})
            name = _label(c["ref"], skip=set(pair["ref"]) | set(pair["cond"]) | {"pe"})
            ref_name, cond_name = _filter_name(pair["ref"]), _filter_name(pair["cond"])
            if "ref" not in bc or "cond" not in bc:
                unshown.append(f"{name} {ref_name}→{cond_name}: no baseline row")
                continue
            drop = _seeded(c["ref"], metric) - _seeded(c["cond"], metric)
            base_drop = _seeded(bc["ref"], metric) - _seeded(bc["cond"], metric)
            if _side(base_drop, tol, gate=True) != "above":
                unshown.append(f"{name} {ref_name}→{cond_name}: baseline drop {base_drop.mean:+.3f}")
                continue
            within = _side(drop, tol)
            if within == "below":
                v = REPRODUCED
            elif within == "above":
                v = DIRECTION_ONLY if _side(base_drop - drop) == "above" else NOT_REPRODUCED
            else:
                v = INCONCLUSIVE
            drops.append({"cell": name, "ref": ref_name, "cond": cond_name, "drop": drop, "base": base_drop, "v": v})
    if not drops:
        raise _NotMeasured(f"the baseline effect is not shown: the baseline's drop has its interval above the "
                           f"tolerance {tol:g} in no compared cell ({'; '.join(unshown[:4])}"
                           f"{'; …' if len(unshown) > 4 else ''})")
    verdict = _worst(d["v"] for d in drops)
    reason = {REPRODUCED: f"where the baseline drops by more than {tol:g}, the {who} model's drop lies below {tol:g}",
              DIRECTION_ONLY: f"some {who} drop exceeds {tol:g}, but the baseline drops more there",
              INCONCLUSIVE: f"the interval of some {who} drop crosses {tol:g}",
              NOT_REPRODUCED: f"a {who} drop above {tol:g}, not shown to be smaller than the baseline's drop there"}[verdict]
    if unshown:
        reason += f" ({len(unshown)} cell(s) left out: the baseline effect is not shown there)"
    worst = sorted(drops, key=lambda d: -d["drop"].mean)
    shown = worst if len(worst) <= 4 else worst[:3]
    parts = [f"{d['cell']} {d['ref']}→{d['cond']}: {who} drop {_fmt_sd(d['drop'], sign=True)}, baseline drop "
             f"{d['base'].mean:+.3f}" for d in shown]
    if len(shown) < len(drops):
        parts.append(f"largest {len(shown)} of {len(drops)} drops shown")
    sds = [x for d in drops for x in (d["drop"], d["base"])]
    details = {"metric": metric, "tolerance": tol, "steps": steps, "left_out": unshown, "drops": [
        {"cell": d["cell"], "ref": d["ref"], "cond": d["cond"], "drop": _sd_dict(d["drop"]),
         "baseline_drop": _sd_dict(d["base"]), "verdict": d["v"]} for d in drops]}
    return Outcome(verdict, "; ".join(parts) + f"; {_seeds_note(sds)}", reason, details, _min_n(sds))


#: checkpoints a decay speed needs, the first at step 0
MIN_CHECKPOINTS = 5


def check_stability_decay(claim: dict, ts: TableSet) -> Outcome:
    """The selected (vanilla) model's stability with Rare disturbants decays over training, at
    the declared speed. Needs at least 5 checkpoints, the first at step 0. For every target
    kind: the decline (first − last checkpoint, ``rare`` condition) and the separation at the
    last checkpoint (``frequent`` − ``rare``) have their intervals above 0; the speed is
    ``quick`` when the mean over seeds reaches half its decline within the first
    ``early_fraction`` of the span, else ``gradual``. Direction only: both shown, at the other
    speed."""
    p = claim["params"]
    metric, speed, early = p.get("metric", "stability"), p["speed"], float(p.get("early_fraction", 0.25))
    rows, keys = ts.rows(claim["tables"])
    sel = _require(rows, p["select"], claim["tables"])
    results = []
    for pair in p["pairs"]:
        m, cells = _cells(sel, keys, {"frequent": pair["frequent"], "rare": pair["rare"]})
        cells = _complete(cells, ["frequent", "rare"])
        if "step" not in m:
            raise PosrnnError(f"claim {claim['id']}: the stability rows have no step column to follow; {_FIX}")
        i = m.index("step")
        groups: dict[tuple, list] = {}
        for k, c in cells.items():
            groups.setdefault(k[:i] + k[i + 1:], []).append((k[i], c))
        if not groups:
            raise _NotMeasured(f"no checkpoint has both {_describe_filter({**p['select'], **pair['frequent']})} and "
                               f"{_describe_filter({**p['select'], **pair['rare']})}")
        for g, series in sorted(groups.items(), key=lambda kv: _natural(kv[0])):
            series.sort(key=lambda x: x[0])
            steps = [s for s, _ in series]
            if len(steps) < MIN_CHECKPOINTS or steps[0] != 0:
                raise _NotMeasured(f"a decay's speed needs at least {MIN_CHECKPOINTS} checkpoints, the first at step 0; "
                                   f"this profile has {len(steps)}, the first at step {steps[0]}")
            rare = [_seeded(c["rare"], metric) for _, c in series]
            freq_last = _seeded(series[-1][1]["frequent"], metric)
            decline, separation = rare[0] - rare[-1], freq_last - rare[-1]
            means = [r.mean for r in rare]
            if means[-1] < means[0]:
                target = means[0] - (means[0] - means[-1]) / 2
                t_half = next(s for s, v in zip(steps, means) if v <= target)
                frac: Optional[float] = (t_half - steps[0]) / (steps[-1] - steps[0])
                observed = "quick" if frac <= early else "gradual"
            else:
                frac, observed = None, "no decline"
            sides = (_side(decline), _side(separation))
            if sides == ("above", "above"):
                v = REPRODUCED if observed == speed else DIRECTION_ONLY
            elif "below" in sides:
                v = NOT_REPRODUCED
            else:
                v = INCONCLUSIVE
            results.append({"cell": _label(series[0][1]["rare"], skip={"step", "condition", "pe"}),
                            "rare_name": pair["rare"].get("condition", _describe_filter(pair["rare"])),
                            "frequent_name": pair["frequent"].get("condition", _describe_filter(pair["frequent"])),
                            "steps": steps, "means": means, "decline": decline, "separation": separation,
                            "fraction": frac, "speed": observed, "verdict": v})
    verdict = _worst(x["verdict"] for x in results)
    reason = {REPRODUCED: f"Rare-disturbant stability declines and ends below the Frequent one, {speed}",
              DIRECTION_ONLY: f"the decline and the separation are shown, but not at the declared speed ({speed})",
              INCONCLUSIVE: "the interval of the decline or of the separation crosses 0",
              NOT_REPRODUCED: "Rare-disturbant stability rises, or ends above the Frequent one"}[verdict]
    parts = [f"{x['cell']} {x['rare_name']}: " + " → ".join(f"{v:.3f}" for v in x["means"]) +
             f" at steps {x['steps'][0]}…{x['steps'][-1]}; decline {_fmt_sd(x['decline'], sign=True)}; below "
             f"{x['frequent_name']} by {_fmt_sd(x['separation'], sign=True)}; " +
             (f"half the decline by {x['fraction']:.0%} of the span ({x['speed']})" if x["fraction"] is not None
              else "no decline") for x in results]
    sds = [s for x in results for s in (x["decline"], x["separation"])]
    details = {"metric": metric, "declared_speed": speed, "early_fraction": early, "series": [
        {"cell": x["cell"], "rare": x["rare_name"], "steps": x["steps"], "means": x["means"],
         "decline": _sd_dict(x["decline"]), "separation": _sd_dict(x["separation"]), "half_fraction": x["fraction"],
         "speed": x["speed"], "verdict": x["verdict"]} for x in results]}
    return Outcome(verdict, "; ".join(parts) + f"; {_seeds_note(sds)}", reason, details, _min_n(sds))


def check_lm_no_gain(claim: dict, ts: TableSet) -> Outcome:
    """Language modelling, a null claim: PE's relative gain in test perplexity, per seed
    (vanilla − PE) / vanilla, has its interval below ``margin``. Power guard: the reference
    learned something (its perplexity's interval lies below the vocabulary size, a uniform
    guess) and the gain's interval is narrower than the margin."""
    p = claim["params"]
    metric, margin = p.get("metric", "perplexity"), float(p["margin"])
    comps = []
    for cr, rr, cf, rf in _pairs_of(claim, ts, p["candidate"], p["reference"], select=p.get("select")):
        c, r = _seeded(cr, metric), _seeded(rr, metric)
        ratio = c - r  # checks seeds and budgets
        gain = Seeded({s: -ratio.values[s] / r.values[s] for s in ratio.values}, ratio.rows)
        _, _, r_hi = r.interval()
        _, g_lo, g_hi = gain.interval()
        cell = _label(cr, skip={"pe"})
        if r.n >= 2 and not r_hi < _num(rr, "vocab_size"):
            raise _NotMeasured(f"power guard: {cell}: the reference's perplexity is not below its vocabulary size")
        if r.n >= 2 and not _narrow(gain, margin) and _side(gain, margin) != "above":
            why = f"the interval of the relative gain (±{(g_hi - g_lo) / 2:.1%}) is not narrower than the margin {margin:.1%}"
            _underpowered([(cell, c, r, gain, cf, rf)], [(cell, why)], margin, lambda g: _fmt_sd(g, sign=True))
        v = {"below": REPRODUCED, "above": NOT_REPRODUCED, "across": INCONCLUSIVE}[_side(gain, margin)]
        comps.append((cell, c, r, gain, v))
    verdict = _worst(x[-1] for x in comps)
    reason = {REPRODUCED: f"PE's relative gain lies below {margin:.1%}",
              INCONCLUSIVE: f"the interval of PE's relative gain crosses {margin:.1%}",
              NOT_REPRODUCED: f"PE better by more than {margin:.1%} (a gain)"}[verdict]
    parts = [f"{cell}: PE {_fmt(c.mean, 2)} (per seed {', '.join(f'{c.values[s]:.2f}' for s in c.seeds)}) vs vanilla "
             f"{_fmt(r.mean, 2)} (per seed {', '.join(f'{r.values[s]:.2f}' for s in r.seeds)}); relative gain "
             f"{_fmt_sd(gain, sign=True)}" for cell, c, r, gain, _ in comps]
    sds = [x for comp in comps for x in comp[1:4]]
    details = {"metric": metric, "margin": margin, "cells": [
        {"cell": cell, "candidate": _sd_dict(c), "reference": _sd_dict(r), "relative_gain": _sd_dict(gain),
         "verdict": v} for cell, c, r, gain, v in comps]}
    return Outcome(verdict, "; ".join(parts) + f"; {_seeds_note(sds)}", reason, details, _min_n(sds))


def _irie_rows(claim: dict, ts: TableSet) -> list[dict]:
    rows, _ = ts.rows(claim["tables"])
    sel = _require(rows, claim["params"]["select"], claim["tables"])
    return sorted(sel, key=lambda r: (str(r.get("layers")), str(r.get("vocab_size")), str(r.get("length"))))


def _irie_measured(rows: list[dict]) -> str:
    return "; ".join(
        f"{_label(r)} ({_pe_name(r.get('pe'))}): sensitive share {_num(r, 'permutation_sensitive_share'):.3f} of "
        f"{r.get('n_sequences', '?')} sequences, max logit change {_num(r, 'max_logit_change'):.2e} "
        f"(tolerance {_num(r, 'tolerance'):.0e}), seeds {r.get('seeds')}" for r in rows)


def _irie_details(rows: list[dict]) -> list[dict]:
    return [{"cell": _label(r), "permutation_sensitive_share": _num(r, "permutation_sensitive_share"),
             "max_logit_change": _num(r, "max_logit_change"), "tolerance": _num(r, "tolerance"),
             "n_sequences": r.get("n_sequences"), "seeds": _seed_list(r.get("seeds"))} for r in rows]


def _irie_seeds(rows: list[dict]) -> int:
    return min(len(_seed_list(r.get("seeds"))) for r in rows)


def check_permutation_invariant(claim: dict, ts: TableSet) -> Outcome:
    """No test sequence's last-position logits change under any permutation of the earlier
    positions: the sensitive share is 0 and the largest change within the tolerance, in every
    selected row, on every seed. (An exact property: no direction-only verdict.)"""
    rows = _irie_rows(claim, ts)
    ok = [_num(r, "permutation_sensitive_share") == 0 and _num(r, "max_logit_change") <= _num(r, "tolerance")
          for r in rows]
    verdict = REPRODUCED if all(ok) else NOT_REPRODUCED
    reason = ("no permutation changed a last-position logit beyond the tolerance" if all(ok) else
              "some permutation changed a last-position logit beyond the tolerance")
    return Outcome(verdict, _irie_measured(rows), reason, {"rows": _irie_details(rows)}, _irie_seeds(rows))


def check_permutation_sensitive(claim: dict, ts: TableSet) -> Outcome:
    """In every selected row, on every seed, at least ``min_share`` of the test sequences have a
    permutation of the earlier positions that changes the last-position logits beyond the
    tolerance. Direction only: above 0 on every seed but below ``min_share`` somewhere."""
    rows = _irie_rows(claim, ts)
    need = float(claim["params"]["min_share"])
    shares = [min(_float_list(r.get("permutation_sensitive_share_by_seed"))
                  or [_num(r, "permutation_sensitive_share")]) for r in rows]
    if all(s >= need for s in shares):
        verdict, reason = REPRODUCED, f"sensitive share ≥ {need:g} in every row, on every seed"
    elif all(s > 0 for s in shares):
        verdict, reason = DIRECTION_ONLY, f"some sequences are told apart on every seed, but the share is below {need:g} somewhere"
    else:
        verdict, reason = NOT_REPRODUCED, "no sequence told apart in some row or seed"
    return Outcome(verdict, _irie_measured(rows), reason, {"min_share": need, "rows": _irie_details(rows)},
                   _irie_seeds(rows))


#: test kind → function(claim, TableSet) → Outcome. claims.yaml names these.
TESTS: dict[str, Callable[[dict, TableSet], Outcome]] = {
    "threshold": check_threshold,
    "decline": check_decline,
    "ahead": check_ahead,
    "trend": check_trend,
    "no_gain": check_no_gain,
    "gap_contrast": check_gap_contrast,
    "robust": check_robust,
    "stability_decay": check_stability_decay,
    "lm_no_gain": check_lm_no_gain,
    "permutation_invariant": check_permutation_invariant,
    "permutation_sensitive": check_permutation_sensitive,
}

# ---- claims: loading and validation ---------------------------------------------------------
_SCALAR = (str, int, float, type(None))


def _check_filter(where: str, f: Any, allow_empty: bool = False) -> None:
    if not isinstance(f, dict):
        raise ValueError(f"{where} must be a mapping column → value")
    if not f and not allow_empty:
        raise ValueError(f"{where} must set at least one column")
    for col, spec in f.items():
        if not isinstance(col, str):
            raise ValueError(f"{where}: column {col!r} is not a name")
        if isinstance(spec, dict):
            if not spec or set(spec) - {"min", "max"} or not all(_is_number(v) for v in spec.values()):
                raise ValueError(f"{where}.{col}: a range is {{min: number, max: number}}")
        elif isinstance(spec, list):
            if not spec or not all(isinstance(v, _SCALAR) and not isinstance(v, bool) for v in spec):
                raise ValueError(f"{where}.{col}: a list of plain values is expected")
        elif not isinstance(spec, _SCALAR) or isinstance(spec, bool):
            raise ValueError(f"{where}.{col}: {spec!r} is not a plain value")


def _filters(where: str, x: Any) -> None:
    for i, f in enumerate(_as_list(x)):
        _check_filter(f"{where}[{i}]" if isinstance(x, list) else where, f)


def _number(lo: float = -math.inf, hi: float = math.inf) -> Callable[[str, Any], None]:
    def check(where: str, x: Any) -> None:
        if not _is_number(x) or not lo <= x <= hi:
            raise ValueError(f"{where} must be a number in [{lo:g}, {hi:g}]")
    return check


def _choice(*options: str) -> Callable[[str, Any], None]:
    def check(where: str, x: Any) -> None:
        if x not in options:
            raise ValueError(f"{where} must be one of {', '.join(options)}")
    return check


def _columns(where: str, x: Any) -> None:
    if not isinstance(x, list) or not x or not all(isinstance(c, str) for c in x):
        raise ValueError(f"{where} must be a non-empty list of column names")


def _boolean(where: str, x: Any) -> None:
    if not isinstance(x, bool):
        raise ValueError(f"{where} must be true or false")


def _metric(where: str, x: Any) -> None:
    if not isinstance(x, str) or not x:
        raise ValueError(f"{where} must be a column name")


def _pairs(*names: str) -> Callable[[str, Any], None]:
    def check(where: str, x: Any) -> None:
        if not isinstance(x, list) or not x:
            raise ValueError(f"{where} must be a non-empty list")
        for i, pair in enumerate(x):
            if not isinstance(pair, dict) or set(pair) != set(names):
                raise ValueError(f"{where}[{i}] must have exactly the keys {', '.join(names)}")
            for n in names:
                _check_filter(f"{where}[{i}].{n}", pair[n])
    return check


def _optional_filter(where: str, f: Any) -> None:
    _check_filter(where, f, allow_empty=True)


def _side_param(where: str, x: Any) -> None:
    if not isinstance(x, dict):
        raise ValueError(f"{where} must be a mapping")
    extra = set(x) - {"tables", "select", "plus", "minus", "label"}
    if extra or not {"plus", "minus"} <= set(x):
        raise ValueError(f"{where} takes plus, minus and optionally tables, select, label")
    if "tables" in x and (not isinstance(x["tables"], list) or not set(x["tables"]) <= set(TABLES)):
        raise ValueError(f"{where}.tables must list known tables")
    if "select" in x:
        _optional_filter(f"{where}.select", x["select"])
    _check_filter(f"{where}.plus", x["plus"])
    _filters(f"{where}.minus", x["minus"])


_MATCH = ("match", False, _columns)
_METRIC = ("metric", False, _metric)
_SELECT = ("select", False, _optional_filter)
_LOWER = ("lower_is_better", False, _boolean)
_WHERE = ("where", False, _choice("all", "largest_vocab", "last_step"))
#: kind → [(param, required, check)]
SCHEMAS: dict[str, list[tuple[str, bool, Callable[[str, Any], None]]]] = {
    "threshold": [("select", True, _check_filter), ("baseline", False, _check_filter), ("threshold", True, _number()),
                  _MATCH, _METRIC],
    "decline": [("select", True, _check_filter), _METRIC],
    "ahead": [("better", True, _filters), ("worse", True, _filters), _SELECT, _WHERE, _MATCH, _METRIC, _LOWER,
              ("min_difference", False, _number(0)), ("ceiling", False, _number())],
    "trend": [("better", True, _check_filter), ("worse", True, _check_filter), _SELECT, _METRIC],
    "no_gain": [("candidate", True, _check_filter), ("reference", True, _check_filter), _SELECT, _WHERE,
                ("margin", True, _number(0)), ("learned", True, _number(0, 1)), _MATCH, _METRIC, _LOWER],
    "gap_contrast": [("a", True, _side_param), ("b", True, _side_param), _MATCH, _METRIC],
    "robust": [("select", True, _check_filter), ("baseline", True, _check_filter),
               ("pairs", True, _pairs("ref", "cond")),
               ("tolerance", True, _number(0)), ("steps", False, _choice("all", "last", "first")),
               ("baseline_ignores", False, _columns), _METRIC],
    "stability_decay": [("select", True, _check_filter), ("pairs", True, _pairs("frequent", "rare")),
                        ("speed", True, _choice("quick", "gradual")), ("early_fraction", False, _number(0, 1)),
                        _METRIC],
    "lm_no_gain": [("candidate", True, _check_filter), ("reference", True, _check_filter), _SELECT,
                   ("margin", True, _number(0, 1)), _METRIC],
    "permutation_invariant": [("select", True, _check_filter)],
    "permutation_sensitive": [("select", True, _check_filter), ("min_share", True, _number(0, 1))],
}
#: sections of claims.yaml: the papers' claims, and hypotheses beyond them (scored apart)
SECTIONS = {"papers": "The papers' claims", "beyond": "Beyond the papers"}
#: where a section's verdicts are read: the papers' regime, or the regime a hypothesis states
REGIME_WORDS = {"papers": "at the papers' regime", "beyond": "at the hypothesis's regime"}
_TEXT_KEYS = ("id", "claim", "paper", "test")
_SCORED_KEYS = {"id", "claim", "paper", "tables", "regime", "kind", "params", "test"}
_OPTIONAL_KEYS = {"models", "section", "implementation"}
_UNSCORED_KEYS = {"id", "claim", "paper", "tables", "regime", "unscored"}


def validate_claim(entry: Any) -> None:
    """Raise ``PosrnnError`` unless ``entry`` is a well-formed claim: the required keys, the
    regime and models, a known test kind with parameters it accepts — or, for a claim no
    profile can measure, the reason in ``unscored``."""
    cid = entry.get("id", "?") if isinstance(entry, dict) else "?"
    try:
        if not isinstance(entry, dict):
            raise ValueError("an entry must be a mapping")
        want = _UNSCORED_KEYS if "unscored" in entry else _SCORED_KEYS
        keys = set(entry) - _OPTIONAL_KEYS
        if keys != want:
            missing, extra = want - keys, keys - want
            raise ValueError(f"keys missing: {sorted(missing)}, unknown: {sorted(extra)}")
        for k in [k for k in _TEXT_KEYS + ("kind", "unscored") if k in want]:
            if not isinstance(entry[k], str) or not entry[k].strip():
                raise ValueError(f"{k} must be non-empty text")
        if not isinstance(entry["tables"], list) or not entry["tables"] or not set(entry["tables"]) <= set(TABLES):
            raise ValueError(f"tables must list some of {', '.join(TABLES)}")
        _check_filter("regime", entry["regime"], allow_empty=True)
        if "models" in entry and (not isinstance(entry["models"], list) or not entry["models"]
                                  or not all(isinstance(m, str) and m for m in entry["models"])):
            raise ValueError("models must be a non-empty list of model names")
        if not isinstance(entry.get("implementation", False), bool):
            raise ValueError("implementation must be true or false")
        if entry.get("section", "papers") not in SECTIONS:
            raise ValueError(f"section must be one of {', '.join(SECTIONS)}")
        if "unscored" in entry:
            return
        if entry["kind"] not in TESTS or entry["kind"] not in SCHEMAS:
            raise ValueError(f"unknown test kind {entry['kind']!r} (known: {', '.join(TESTS)})")
        params = entry["params"]
        if not isinstance(params, dict):
            raise ValueError("params must be a mapping")
        schema = {name: (req, check) for name, req, check in SCHEMAS[entry["kind"]]}
        unknown = set(params) - set(schema)
        if unknown:
            raise ValueError(f"kind {entry['kind']} takes no parameter(s) {', '.join(sorted(unknown))}")
        for name, (req, check) in schema.items():
            if name in params:
                check(f"params.{name}", params[name])
            elif req:
                raise ValueError(f"kind {entry['kind']} needs params.{name}")
        for s in ("a", "b"):
            side = params.get(s) if entry["kind"] == "gap_contrast" else None
            if side and "tables" in side and not set(side["tables"]) <= set(entry["tables"]):
                raise ValueError(f"params.{s}.tables must be among the claim's tables")
    except ValueError as e:
        raise PosrnnError(f"claims file: claim {cid!r} is malformed ({e}); fix its entry in claims.yaml") from None


def load_claims(path: Optional[Path] = None) -> list[dict]:
    """The claims of ``path`` (default: ``claims.yaml`` beside this module), validated."""
    path = Path(path) if path is not None else CLAIMS_PATH
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as e:
        raise PosrnnError(f"cannot read the claims file {path} ({type(e).__name__}); fix or restore it") from None
    claims = data.get("claims") if isinstance(data, dict) else None
    if not isinstance(claims, list) or not claims:
        raise PosrnnError(f"{path} holds no 'claims:' list; restore it from the repository")
    ids = set()
    for c in claims:
        validate_claim(c)
        if c["id"] in ids:
            raise PosrnnError(f"{path}: claim id {c['id']!r} appears twice; give each claim its own id")
        ids.add(c["id"])
    return claims


# ---- the scorecard --------------------------------------------------------------------------
def _plain(x: Any) -> Any:
    """JSON-safe copy (numpy scalars to Python numbers, nan to None)."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _test(claim: dict, ts: TableSet, trace: Optional[list] = None, level: float = 0.95) -> Outcome:
    """Run the claim's test kind, its intervals read at ``level``, its comparisons traced."""
    t_tok, l_tok = _TRACE.set(trace), _LEVEL.set(level)
    try:
        return TESTS[claim["kind"]](claim, ts)
    except _Settled as e:
        return e.outcome
    finally:
        _TRACE.reset(t_tok)
        _LEVEL.reset(l_tok)


def _holm(claim: dict, ts: TableSet, out: Outcome, trace: list) -> Outcome:
    """"Not reproduced" needs only one of the test's k comparisons against the claim, so it must
    hold after Holm's correction across them: its first step, every interval at 1 − 0.05/k, must
    still give "not reproduced" (Holm's later steps cannot add a first rejection). "Reproduced"
    needs every comparison (an intersection–union test) and takes no correction."""
    k = sum(1 for e in trace if e[0] == "side")
    if out.verdict != NOT_REPRODUCED or k < 2:
        return out
    level = 1 - 0.05 / k
    try:
        again = _test(claim, ts, level=level).verdict
    except _NotMeasured:
        again = NOT_MEASURED
    if again == NOT_REPRODUCED:
        return Outcome(out.verdict, out.measured, f"{out.reason} (holds after Holm's correction across the test's "
                       f"{k} comparisons)", out.details, out.n_seeds)
    return Outcome(INCONCLUSIVE, out.measured, f"{out.reason} at 95%, but not after Holm's correction across the "
                   f"test's {k} comparisons (intervals at {level:.2%})", out.details, out.n_seeds)


def _seeds_needed(trace: list, verdict: str) -> Optional[dict]:
    """For an open verdict: the seeds at which every undecided comparison of the test would
    clear its bound (and every power guard narrow), if the effects and spreads stayed as observed,
    and the seeds for 80% power. ``None`` in a field: beyond reach (over 1,000 seeds)."""
    if verdict not in OPEN:
        return None
    clear: list[Optional[int]] = []
    power: list[Optional[int]] = []
    for kind, sd, bound, state in trace:
        if kind in ("side", "gate") and state == "across":
            clear.append(seeds_to_clear(sd.mean - bound, sd.sd))
            power.append(seeds_for_power(sd.mean - bound, sd.sd))
        elif kind == "width" and not state:
            n = seeds_to_narrow(sd.sd, bound)
            clear.append(n)
            power.append(n)
    if not clear:
        return None
    worst = (lambda xs: None if any(x is None for x in xs) else max(xs))
    now = max((e[1].n for e in trace), default=0)
    return {"now": now, "clear": worst(clear), "power80": worst(power)}


def _run(claim: dict, ts: TableSet) -> dict:
    """One test on one view of the tables: verdict, measured, reason, details, n_seeds, and the
    seeds an open verdict needs."""
    trace: list = []
    try:
        out = _holm(claim, ts, _test(claim, ts, trace), trace)
    except _NotMeasured as e:
        return {"verdict": NOT_MEASURED, "measured": "—", "reason": str(e), "details": {}, "n_seeds": 0,
                "seeds_needed": None}
    verdict, reason = out.verdict, out.reason
    if out.n_seeds < MIN_SEEDS:
        reason = (f"{out.n_seeds} seed(s) per arm, fewer than {MIN_SEEDS}: not judged (on these seeds the test "
                  f"reads {verdict}: {reason})")
        verdict = TOO_FEW_SEEDS
    return {"verdict": verdict, "measured": out.measured, "reason": reason, "details": _plain(out.details),
            "n_seeds": out.n_seeds, "seeds_needed": _seeds_needed(trace, verdict)}


def _combine(per_model: dict[str, dict]) -> dict:
    """One scope's result from its models' results: the worst verdict among the measured
    models; a model with nothing measured makes the result partial."""
    measured = {m: r for m, r in per_model.items() if r["verdict"] != NOT_MEASURED}
    missing = [m for m in per_model if m not in measured]
    if not measured:
        reason = "; ".join(f"{m}: {r['reason']}" if m else r["reason"] for m, r in per_model.items())
        return {"verdict": NOT_MEASURED, "measured": "—", "reason": reason, "partial": False, "missing": missing,
                "models": per_model, "seeds_needed": None}
    verdict = _worst(r["verdict"] for r in measured.values())
    several = len(per_model) > 1
    needs = [r["seeds_needed"] for r in measured.values() if r["verdict"] in OPEN and r.get("seeds_needed")]
    measured_text = " || ".join(f"{m.upper()}: {r['measured']}" if several else r["measured"] for m, r in measured.items())
    reason = " || ".join(f"{m.upper()}: {r['verdict']}: {r['reason']}" if several else r["reason"]
                         for m, r in measured.items())
    if missing:
        reason += " || partial: " + "; ".join(f"{m.upper()} not measured ({per_model[m]['reason']})" for m in missing)
    return {"verdict": verdict, "measured": measured_text, "reason": reason, "partial": bool(missing),
            "missing": missing, "models": per_model, "seeds_needed": _max_needs(needs) if verdict in OPEN else None}


def _max_needs(needs: list[dict]) -> Optional[dict]:
    """The seeds every model of a claim needs: the largest of each field (None: out of reach)."""
    if not needs:
        return None
    def most(key: str) -> Optional[int]:
        vals = [n[key] for n in needs]
        return None if any(v is None for v in vals) else max(vals)
    return {"now": most("now"), "clear": most("clear"), "power80": most("power80")}


def _regime_text(regime: dict) -> str:
    return _describe_filter(regime) if regime else "any cell"


def evaluate_claim(claim: dict, tables: TableSet) -> dict:
    """One scorecard row: the claim, its regime and models, and two results: ``at_regime`` (the
    verdict, read on cells inside the regime) and ``indication`` (cells outside it)."""
    regime = claim.get("regime") or {}
    base = {"id": claim["id"], "section": claim.get("section", "papers"), "claim": claim["claim"],
            "paper": claim["paper"], "tables": list(claim["tables"]), "regime": _regime_text(regime),
            "models": list(claim.get("models") or []), "kind": claim.get("kind", "unscored"),
            "test": claim.get("test", claim.get("unscored", "")),
            "implementation": bool(claim.get("implementation", False))}
    if "unscored" in claim:
        res = {"verdict": NOT_MEASURED, "measured": "—", "reason": f"cannot be scored: {claim['unscored']}",
               "partial": False, "missing": [], "models": {}, "seeds_needed": None}
        return {**base, "at_regime": res, "indication": dict(res)}
    models = claim.get("models") or [None]
    out = {}
    for scope in SCOPES:
        inside = scope == "at_regime"
        per_model = {}
        for m in models:
            def keep(r: dict, m=m, inside=inside) -> bool:
                return (m is None or r.get("model") == m) and _matches(r, regime) == inside
            res = _run(claim, tables.view(keep))
            if res["verdict"] == NOT_MEASURED and _rows_in_view(claim, tables.view(keep)) == 0:
                if not regime and not inside:
                    res["reason"] = "every cell is inside this claim's regime (any cell), so no indication stands apart"
                else:
                    at = REGIME_WORDS[claim.get("section", "papers")]
                    where = at if inside else f"outside {at.split(' ', 1)[1]}"
                    res["reason"] = f"no cell {where} ({_regime_text(regime)}) in this profile"
            per_model[m or ""] = res
        out[scope] = _combine(per_model)
    return {**base, **out}


def _rows_in_view(claim: dict, ts: TableSet) -> Optional[int]:
    """How many rows of the claim's tables a view keeps (``None`` when a table is absent)."""
    try:
        return len(ts.rows(claim["tables"])[0])
    except _NotMeasured:
        return None


def scorecard(results_dir: Path, claims: Optional[list[dict]] = None) -> list[dict]:
    """Apply every claim's test to the tables in ``results_dir``; one row per claim, in order."""
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise PosrnnError(f"results directory {results_dir} does not exist; run the pipeline for this profile first")
    claims = load_claims() if claims is None else claims
    for c in claims:
        validate_claim(c)
    ts = TableSet(results_dir)
    return [evaluate_claim(c, ts) for c in claims]


def summarize(rows: list[dict]) -> dict:
    """Counts per section and scope: verdicts of claims with every model measured, and partial
    claims apart (``partial``: counts of their verdicts)."""
    out: dict = {}
    for section in SECTIONS:
        rs = [r for r in rows if r["section"] == section]
        if not rs:
            continue
        out[section] = {}
        for scope in SCOPES:
            full = [r[scope]["verdict"] for r in rs if not r[scope]["partial"]]
            part = [r[scope]["verdict"] for r in rs if r[scope]["partial"]]
            out[section][scope] = {"claims": len(rs), **{v: full.count(v) for v in VERDICTS},
                                   "partial": {v: part.count(v) for v in VERDICTS if part.count(v)}}
    return out


def _count_text(c: dict) -> str:
    text = ", ".join(f"{c[v]} {v}" for v in VERDICTS if c[v])
    if c["partial"]:
        text += "; partial (a named model not measured), counted apart: " + ", ".join(
            f"{n} {v}" for v, n in c["partial"].items())
    return text or "none"


def _md(text: Any) -> str:
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def scorecard_markdown(rows: list[dict], title: str = "Reproduction scorecard") -> str:
    """Markdown: the counts per scope, then one table per section: claim | paper | regime |
    at the papers' regime | indication off the regime."""
    summary = summarize(rows)
    lines = [f"# {title}", "",
             "Verdicts are read at the regime each paper states its claim in; cells outside it give an indication "
             "only. Intervals are 95% Student-t intervals over seeds (paired by seed); fewer than "
             f"{MIN_SEEDS} seeds per arm is never a verdict. *Underpowered*: measured, but a null claim's interval "
             "is too wide to decide against its margin. *Not testable*: the measure starts at its ceiling before "
             "training. *Not measured*: no data. For an open verdict (inconclusive, underpowered) each cell gives "
             "the seeds at which the interval would clear its bound if the effect and spread stayed as observed, "
             "and the seeds for 80% power (seeds.md lists them all).", ""]
    for section, title_s in SECTIONS.items():
        if section not in summary:
            continue
        s = summary[section]
        where = REGIME_WORDS[section]
        lines += [f"## {title_s}", "",
                  f"- {where[0].upper()}{where[1:]} ({s['at_regime']['claims']} claims): {_count_text(s['at_regime'])}.",
                  f"- Indications off {where.split(' ', 1)[1]}: {_count_text(s['indication'])}.", "",
                  f"| claim | paper | regime | {where} | indication off the regime |",
                  "|---|---|---|---|---|"]
        for r in [r for r in rows if r["section"] == section]:
            cells = []
            for scope in SCOPES:
                x = r[scope]
                tag = " (partial)" if x["partial"] else ""
                measured = "" if x["measured"] == "—" else f" Measured: {_md(x['measured'])}"
                cells.append(f"**{_md(x['verdict'])}{tag}**: {_md(x['reason'])}.{measured}{_needs_text(x)}")
            models = f" ({', '.join(r['models'])})" if r["models"] else ""
            impl = " *(a check of the implementation, not a finding)*" if r.get("implementation") else ""
            lines.append(f"| `{_md(r['id'])}`: {_md(r['claim'])}{impl} | {_md(r['paper'])} | {_md(r['regime'])}{_md(models)} | "
                         f"{cells[0]} | {cells[1]} |")
        lines.append("")
    return "\n".join(lines)


def seeds_text(needs: Optional[dict]) -> str:
    """"about 7 (80% power: 10)" — or "over 1,000" — for an open verdict's seeds needed."""
    if not needs:
        return ""
    if needs["clear"] is None:
        return "over 1,000"
    power = f"{needs['power80']:,}" if needs["power80"] is not None else "over 1,000"
    return f"about {needs['clear']:,} (80% power: {power})"


def _needs_text(x: dict) -> str:
    text = seeds_text(x.get("seeds_needed"))
    return f" Seeds needed: {text}, now {x['seeds_needed']['now']}." if text else ""


def write_scorecard(results_dir: Path, claims: Optional[list[dict]] = None, out_dir: Optional[Path] = None) -> list[dict]:
    """Score ``results_dir`` and write ``scorecard.json`` and ``scorecard.md`` into ``out_dir``
    (default: ``results_dir``), atomically."""
    results_dir = Path(results_dir)
    out_dir = Path(out_dir) if out_dir is not None else results_dir
    rows = scorecard(results_dir, claims)
    name = results_dir.parent.name if results_dir.name == "tables" else results_dir.name
    atomic_write_json(out_dir / "scorecard.json", {"results": name, "summary": summarize(rows), "rows": rows})
    atomic_write_text(out_dir / "scorecard.md", scorecard_markdown(rows, title=f"Reproduction scorecard: {name}"))
    return rows


_STYLE = {REPRODUCED: "bold green", DIRECTION_ONLY: "yellow", TOO_FEW_SEEDS: "magenta", INCONCLUSIVE: "cyan",
          NOT_REPRODUCED: "bold red", NOT_MEASURED: "dim"}


def scorecard_rich_table(rows: list[dict]):
    """The scorecard as ``rich`` renderables: the counts, and one table (claim, regime, at the
    papers' regime, indication off it)."""
    from rich.console import Group
    from rich.table import Table as RichTable
    from rich.text import Text

    summary = summarize(rows)
    heads = []
    for section, title in SECTIONS.items():
        if section in summary:
            s = summary[section]
            heads.append(Text(f"{title}: {REGIME_WORDS[section]}: {_count_text(s['at_regime'])}. "
                              f"Indications off the regime: {_count_text(s['indication'])}."))
    t = RichTable(title="Reproduction scorecard", show_lines=True)
    t.add_column("claim", ratio=3, overflow="fold")  # an id folds, never cut: two claims never look the same
    t.add_column("regime", ratio=2, overflow="fold")
    t.add_column("at the papers' regime", ratio=3, overflow="fold")
    t.add_column("indication off the regime", ratio=4, overflow="fold")
    for r in rows:
        cells = []
        for scope in SCOPES:
            x = r[scope]
            cell = Text(x["verdict"] + (" (partial)" if x["partial"] else ""), style=_STYLE.get(x["verdict"], ""))
            cell.append(f"\n{x['reason']}", style="dim")
            if x["measured"] != "—":
                cell.append(f"\n{x['measured']}")
            cells.append(cell)
        models = f" ({', '.join(r['models'])})" if r["models"] else ""
        section = " [beyond the papers]" if r["section"] == "beyond" else ""
        t.add_row(Text(f"{r['id']}{section}\n", style="bold") + Text(r["claim"]), Text(r["regime"] + models), *cells)
    return Group(*heads, t)
