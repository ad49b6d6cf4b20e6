"""The one check of a result table, for every reader (aggregate before writing, plot and the
scorecard after reading): what one of them refuses, none draws or scores.

A table passes when it has rows and the asked columns, and every row is well formed:

* types: each measurement (``MEASURES``) and its CI bounds are finite numbers, and the asked
  columns of ``REQUIRED_NUMBERS`` hold one in every row; counts (``n_seeds``, ``n_sequences``, …)
  are positive integers;
* ranges: accuracies and shares in [0, 1], stability in [−1, 1], perplexity ≥ 1, distances ≥ 0,
  for the mean, its CI and each seed's value;
* consistency: ``seeds`` are distinct integers, ``n_seeds`` counts them, each ``X_by_seed``
  holds one value per seed and ``X`` is their mean (to the table's six significant digits),
  ``ci_low ≤ X ≤ ci_high``, ``perplexity_min`` / ``_max`` are the seeds' extremes;
* exact key cells: text cells carry no stray space or control character, ``task``, ``model``
  and ``pe`` are names posrnn knows, and no two rows name the same cell (``key_columns``).

Each failure is one ``PosrnnError`` naming the file, the line and the fix.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Optional

from .. import catalog, plugins
from ..settings import keys
from ..errors import PosrnnError

#: the percentiles of the per-token cosines a continuous-task evaluation reports (``cosine_q10`` …)
COSINE_QUANTILES = (10, 50, 90)
#: measurement → (lowest, highest) value it can take
MEASURES: dict[str, tuple[float, float]] = {
    "token_accuracy": (0.0, 1.0), "sequence_accuracy": (0.0, 1.0), "non_decreasing_share": (0.0, 1.0),
    "permutation_sensitive_share": (0.0, 1.0), "damerau_levenshtein": (0.0, math.inf), "stability": (-1.0, 1.0),
    "perplexity": (1.0, math.inf), "perplexity_min": (1.0, math.inf), "perplexity_max": (1.0, math.inf),
    "early_train_loss": (0.0, math.inf), "max_logit_change": (0.0, math.inf), "token_nll": (0.0, math.inf),
    "cosine": (-1.0, 1.0), **{f"cosine_q{p}": (-1.0, 1.0) for p in COSINE_QUANTILES},
}
#: counts: positive integers
COUNTS = ("n_seeds", "n_sequences", "n_triplets", "n_tokens", "permutations")
#: columns that name a cell (a config without its seed), whatever their type (``common.settings.keys``)
KEY_COLUMNS = keys.KEY_COLUMNS
#: columns that hold a measurement or a count; any other column is a cell column when its values
#: are text or integers, and a measurement when they are fractional
VALUE_COLUMNS = {*MEASURES, *COUNTS, "ci_low", "ci_high", "seeds", "tolerance"}
#: columns that must hold a finite number in every row of a table that is asked for them (an empty
#: cell in one of them leaves nothing to draw or score)
REQUIRED_NUMBERS = frozenset({"vocab_size", "step", "layers", "token_accuracy", "token_accuracy_ci_low",
                              "token_accuracy_ci_high", "stability", "ci_low", "ci_high", "perplexity",
                              "permutation_sensitive_share", "max_logit_change", "tolerance"})
#: columns whose text must be a name of the catalogue
NAMES = {"task": catalog.TASKS, "model": catalog.CORES, "pe": catalog.PE_FORMS, "feedback": catalog.FEEDBACK}
#: the name columns a plugin's name may fill too (``common.plugins``: a core from outside posrnn)
PLUGGABLE = ("model",)
#: the relative tolerance of a mean recomputed from per-seed values written to six significant digits
ROUNDING = 2e-5


def is_number(v: Any) -> bool:
    """A finite int or float, not a bool: what a measurement holds (in a table or a record)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def key_columns(rows: list[dict]) -> list[str]:
    """The columns that name a row's cell: ``KEY_COLUMNS``, and any other column that is no
    measurement and holds only text or integers."""
    out = []
    for c in dict.fromkeys(k for r in rows for k in r):
        if c in KEY_COLUMNS:
            out.append(c)
        elif c in VALUE_COLUMNS or c.endswith(("_ci_low", "_ci_high", "_by_seed")) or c.startswith("_"):
            continue
        elif all(v is None
                 or (isinstance(v, (str, int)) and not isinstance(v, bool)) for v in (r.get(c) for r in rows)):
            out.append(c)
    return out


def _values(v: Any) -> Optional[list[float]]:
    """A ``*_by_seed`` or ``seeds`` cell ("0.5 0.25", or one number) as numbers, None when not."""
    if is_number(v):
        return [float(v)]
    try:
        out = [float(s) for s in str(v).split()] if isinstance(v, str) else None
    except ValueError:
        return None
    return out if out and all(math.isfinite(x) for x in out) else None


def _measure_of(col: str, row: dict) -> Optional[str]:
    """The measurement a column reports (itself, or the X of X_ci_low / X_by_seed; the bare
    ci_low / ci_high of the stability table belong to stability)."""
    if col in ("ci_low", "ci_high"):
        return "stability" if "stability" in row else None
    for suffix in ("_ci_low", "_ci_high", "_by_seed"):
        if col.endswith(suffix):
            col = col[: -len(suffix)]
            break
    return col if col in MEASURES else None


def _check_cells(r: dict, where: str, fix: str) -> None:
    for k, v in r.items():
        if k.startswith("_"):
            continue
        if isinstance(v, float) and not math.isfinite(v):
            raise PosrnnError(f"{where}: {k} is {v}, not a finite number; {fix}")
        if isinstance(v, str) and (v != v.strip() or not v or any(ord(ch) < 32 for ch in v)):
            raise PosrnnError(f"{where}: {k} is {v!r}, with a stray space or control character; {fix}")
        if k in NAMES and v is not None and v not in NAMES[k] and not (k in PLUGGABLE and plugins.is_plugin_name(v)):
            raise PosrnnError(f"{where}: {k} is {v!r}, not a {k} posrnn knows ({', '.join(NAMES[k])}); {fix}")
        if k in COUNTS and v is not None and not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
            raise PosrnnError(f"{where}: {k} is {v!r}, not a positive count; {fix}")
        m = _measure_of(k, r)
        if m is None or v is None:
            continue
        lo, hi = MEASURES[m]
        vals = _values(v) if k.endswith("_by_seed") else ([float(v)] if is_number(v) else None)
        if vals is None:
            raise PosrnnError(f"{where}: {k} is {v!r}, not "
                              f"{'one finite number per seed' if k.endswith('_by_seed') else 'a finite number'}; {fix}")
        bad = [x for x in vals if not lo - 1e-6 <= x <= hi + 1e-6]
        if bad:
            raise PosrnnError(f"{where}: {k} = {bad[0]:g} lies outside [{lo:g}, {hi:g}], the range of {m}; {fix}")


def _check_seeds(r: dict, where: str, fix: str) -> None:
    """Seeds distinct integers; per-seed values one per seed; the mean, CI and extremes agree with them."""
    if "seeds" not in r:
        return
    seeds = _values(r["seeds"])
    if seeds is None or not all(s.is_integer() for s in seeds) or len(set(seeds)) != len(seeds):
        raise PosrnnError(f"{where}: seeds = {r['seeds']!r}, not distinct integers; {fix}")
    if r.get("n_seeds") is not None and r["n_seeds"] != len(seeds):
        raise PosrnnError(f"{where}: n_seeds = {r['n_seeds']!r} but {len(seeds)} seeds are listed; {fix}")
    for c in [c for c in r if c.endswith("_by_seed")]:
        if r[c] is None:
            continue
        vals = _values(r[c])
        if vals is None or len(vals) != len(seeds):
            raise PosrnnError(f"{where}: {c} = {r[c]!r}, not one finite number per seed ({len(seeds)}); {fix}")
        stem = c[: -len("_by_seed")]
        checks = [(stem, sum(vals) / len(vals), "their mean")]
        if stem == "perplexity":
            checks += [("perplexity_min", min(vals), "their least"), ("perplexity_max", max(vals), "their largest")]
        for col, want, what in checks:
            got = r.get(col)
            if is_number(got) and abs(got - want) > ROUNDING * max(1.0, abs(want), *(abs(x) for x in vals)):
                raise PosrnnError(f"{where}: {col} = {got:g}, but {what} over the seeds' values ({c}) is {want:g}; "
                                  f"{fix}")


def _check_ci(r: dict, where: str, fix: str) -> None:
    for k in r:
        if not (k.endswith("_ci_low") or k == "ci_low"):
            continue
        stem = k[: -len("ci_low")]
        value = stem[:-1] if stem else next((c for c in ("stability", "value", "mean") if c in r), None)
        hi = stem + "ci_high"
        if hi not in r or value is None or value not in r:
            continue
        lo_v, v, hi_v = r[k], r[value], r[hi]
        if all(is_number(x) for x in (lo_v, v, hi_v)) and not lo_v - 1e-9 <= v <= hi_v + 1e-9:
            raise PosrnnError(f"{where}: {value} = {v} lies outside its CI [{lo_v}, {hi_v}] (bounds swapped or "
                              f"edited?); {fix}")


def check_table(rows: list[dict], path: Path, columns: Iterable[str] = (), what: str = "table",
                fix: str = "re-run the step that writes it") -> list[dict]:
    """Validate a result table (rows as ``io.read_csv`` reads them, or as aggregation makes them):
    see the module's docstring. Returns ``rows``; a table that fails is one ``PosrnnError``."""
    if not rows:
        raise PosrnnError(f"{path} holds no rows (an empty {what}); {fix}")
    missing = [c for c in columns if c not in rows[0]]
    if missing:
        raise PosrnnError(f"{path} lacks the column(s) {', '.join(missing)} of a {what}; {fix}")
    numbers = [c for c in columns if c in REQUIRED_NUMBERS]
    for i, r in enumerate(rows, start=2):
        where = f"{path} line {i}"
        if None in r:  # csv.DictReader's key for the cells past the header's
            raise PosrnnError(f"{where} has more cells than the header; {fix}")
        for c in numbers:
            if not is_number(r[c]):
                raise PosrnnError(f"{where}: {c} is {r[c]!r}, not a finite number; {fix}")
        _check_cells(r, where, fix)
        _check_seeds(r, where, fix)
        _check_ci(r, where, fix)
    keys = key_columns(rows)
    seen: dict[tuple, int] = {}
    for i, r in enumerate(rows, start=2):
        k = tuple(r.get(c) for c in keys)
        if k in seen:
            raise PosrnnError(f"{path}: lines {seen[k]} and {i} describe the same cell ({', '.join(keys)}); {fix}")
        seen[k] = i
    return rows
