"""The reproduction scorecard: every headline claim of the papers (SPEC §6, and Irie's note)
against what one profile of the pipeline measured, with a verdict from a test declared in
advance as data.

``claims.yaml`` (beside this module) lists the claims: an id, the claim, the paper's figure,
the aggregated tables it reads, a test kind with its parameters, and the test stated in plain
words. The test kinds are the functions in ``TESTS`` below; the YAML only names them. A test
reads ``results/<profile>/<table>.csv`` (written by the aggregate stage) and returns one of
``VERDICTS``:

- ``reproduced``: the declared test passed (with the paper's figure where SPEC gives one);
- ``direction only``: the sign agrees but the size or the significance the test asks for
  does not (each kind says what that means for it);
- ``not reproduced``: the measurement contradicts the claim;
- ``not measured in this profile``: the table, or the rows the claim needs, are absent.

Everything here reads CSV files only: no torch, no training code, so the pipeline stage that
writes the scorecard depends on the result tables alone.

Conventions shared by the kinds:

- a *filter* maps a column to a value, a list of values (any of them) or ``{min, max}`` (an
  inclusive numeric range); ``null`` matches an empty cell;
- rows of two *arms* (e.g. ``pe: sinusoidal`` vs ``pe: none``) are paired on the ``match``
  columns; by default all the cell columns the rows share, less those the arms set. Where a
  claim reads several tables, a cell found in an earlier table wins over a later one;
- "non-overlapping CIs" means the lower bound of one 95% CI lies above the upper bound of the
  other; for a difference of differences, the 95% interval is the normal approximation
  ``diff ± sqrt(Σ half-width²)`` built from the four rows' CIs (independent test sets).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import numpy as np
import yaml

from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.io import atomic_write_json, atomic_write_text, read_csv

CLAIMS_PATH = Path(__file__).with_name("claims.yaml")

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
DIRECTION_ONLY = "direction only"
NOT_MEASURED = "not measured in this profile"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, DIRECTION_ONLY, NOT_MEASURED)

EVAL_TABLES = ("fig2", "forms", "double", "length", "sort", "copy", "s4d", "varlen")
TABLES = EVAL_TABLES + ("dual", "stability", "extend", "lm", "irie")

_ACC = ["token_accuracy", "token_accuracy_ci_low", "token_accuracy_ci_high"]
#: columns a table must have to be read at all (a table without them is malformed)
REQUIRED_COLUMNS: dict[str, list[str]] = {
    **{t: ["model", "pe", "vocab_size", *_ACC] for t in EVAL_TABLES},
    "extend": ["model", "pe", "vocab_size", *_ACC],
    "dual": ["model", "pe", "vocab_size", "condition", *_ACC],
    "stability": ["model", "pe", "step", "condition", "pair", "stability", "ci_low", "ci_high"],
    "lm": ["model", "pe", "seed", "perplexity"],
    "irie": ["layers", "pe", *_ACC, "permutation_sensitive_share", "max_logit_change", "tolerance"],
}
#: of those, the ones that must hold a finite number in every row
NUMERIC_COLUMNS = {"vocab_size", "step", "seed", "layers", "token_accuracy", "token_accuracy_ci_low",
                   "token_accuracy_ci_high", "stability", "ci_low", "ci_high", "perplexity",
                   "permutation_sensitive_share", "max_logit_change", "tolerance"}
#: a column absent from an older table is read as this value
COLUMN_DEFAULTS = {"half": "all"}

#: columns that name a cell (a config without its seed), whatever their type
KEY_COLUMNS = {"task", "model", "pe", "vocab_size", "length", "min_length", "rarity", "hidden_size", "layers",
               "heads", "iterations", "batch_size", "condition", "half", "step", "pair", "base_vocab",
               "extra_vocab", "max_tokens", "seed", "combine", "embed_size"}
#: columns that hold a measurement or a count; any other column is a cell column when its values
#: are text or integers, and a measurement when they are fractional
VALUE_COLUMNS = {"token_accuracy", "sequence_accuracy", "damerau_levenshtein", "stability", "ci_low", "ci_high",
                 "seeds", "n_seeds", "n_sequences", "n_triplets", "n_tokens", "perplexity", "token_nll",
                 "permutation_sensitive_share", "max_logit_change", "tolerance"}

_FIX = "re-run the aggregate stage for this profile (dvc repro) to rewrite it"


class _NotMeasured(Exception):
    """Raised inside a test: the rows the claim needs are not in this profile."""


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
        elif c in VALUE_COLUMNS or c.endswith("_ci_low") or c.endswith("_ci_high") or c.startswith("_"):
            continue
        elif all(v is None or isinstance(v, (str, int)) for v in (r.get(c) for r in rows)):
            out.append(c)
    return out


def load_table(results_dir: Path, name: str) -> Optional[Table]:
    """``results_dir/<name>.csv`` as a ``Table`` (rows tagged with ``_table``), or ``None`` when
    the file is absent. A file that cannot be read, lacks a required column, holds a
    non-numeric measurement or names the same cell twice raises ``PosrnnError``."""
    path = Path(results_dir) / f"{name}.csv"
    if not path.exists():
        return None
    try:
        raw = read_csv(path)
    except PosrnnError:
        raise PosrnnError(f"{path} is not a CSV table (corrupt or not text); {_FIX}") from None
    except (OSError, ValueError, TypeError, csv.Error) as e:  # ValueError covers undecodable bytes
        raise PosrnnError(f"cannot read {path} ({type(e).__name__}: {e}); {_FIX}") from None
    rows = []
    for i, r in enumerate(raw):
        if None in r:
            raise PosrnnError(f"{path}: row {i + 2} has more cells than the header; {_FIX}")
        row = {**{k: v for k, v in COLUMN_DEFAULTS.items() if k not in r}, **r, "_table": name}
        rows.append(row)
    if rows:
        missing = [c for c in REQUIRED_COLUMNS.get(name, []) if c not in rows[0]]
        if missing:
            raise PosrnnError(f"{path} lacks the column(s) {', '.join(missing)}; {_FIX}")
        for i, r in enumerate(rows):
            for c in REQUIRED_COLUMNS.get(name, []):
                if c in NUMERIC_COLUMNS and not _is_number(r[c]):
                    raise PosrnnError(f"{path}: row {i + 2} has {c} = {r[c]!r}, not a finite number; {_FIX}")
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
    """The tables of one results directory, each read once on first use."""

    results_dir: Path
    _cache: dict[str, Optional[Table]] = field(default_factory=dict)

    def table(self, name: str) -> Optional[Table]:
        if name not in self._cache:
            self._cache[name] = load_table(self.results_dir, name)
        return self._cache[name]

    def rows(self, names: Iterable[str]) -> tuple[list[dict], list[str]]:
        """Rows of ``names`` concatenated in that order, and the cell columns they all share.
        An absent or empty table makes the claim unmeasured."""
        rows: list[dict] = []
        common: Optional[list[str]] = None
        for n in names:
            t = self.table(n)
            if t is None:
                raise _NotMeasured(f"{n}.csv is absent")
            if not t.rows:
                raise _NotMeasured(f"{n}.csv has no rows")
            rows += t.rows
            common = t.key_columns if common is None else [c for c in common if c in t.key_columns]
        return rows, common or []

    def path(self, name: str) -> Path:
        return Path(self.results_dir) / f"{name}.csv"


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


def _ci_columns(row: dict, metric: str) -> tuple[str, str]:
    if f"{metric}_ci_low" in row:
        return f"{metric}_ci_low", f"{metric}_ci_high"
    return "ci_low", "ci_high"


@dataclass(frozen=True)
class Est:
    """A point estimate with its 95% CI, and where it came from."""

    value: float
    low: float
    high: float
    row: dict

    @property
    def half(self) -> float:
        return (self.high - self.low) / 2


def _est(row: dict, metric: str) -> Est:
    lo, hi = _ci_columns(row, metric)
    return Est(_num(row, metric), _num(row, lo), _num(row, hi), row)


def _above(a: Est, b: Est) -> bool:
    """``a`` ahead of ``b`` with non-overlapping 95% CIs."""
    return a.low > b.high


def _fmt(x: float, digits: int = 3) -> str:
    return f"{x:.{digits}f}"


def _fmt_est(e: Est, digits: int = 3) -> str:
    return f"{_fmt(e.value, digits)} [{_fmt(e.low, digits)}, {_fmt(e.high, digits)}]"


_PE_NAMES = {"none": "vanilla", "sinusoidal": "PE", "dummy": "double vanilla"}


def _pe_name(pe: Any) -> str:
    return _PE_NAMES.get(pe, f"PE {pe}") if pe is not None else "?"


def _label(row: dict, skip: Iterable[str] = ()) -> str:
    """A short name for a row's cell: "GRU V=32 L=64 H=512" (+ the cell's other axes)."""
    skip = set(skip)
    parts = []
    if "model" not in skip and row.get("model") is not None:
        model = str(row["model"])
        if row.get("layers") is not None and "layers" not in skip and model == "transformer":
            model = f"{row['layers']}-layer transformer"
        parts.append(model.upper() if len(model) <= 5 else model)
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


def _seeds_of(row: dict) -> str:
    """"seeds 111 222 333", or "3 seeds" where a table records only the count."""
    if row.get("seeds") not in (None, ""):
        return f"seeds {row['seeds']}"
    if row.get("n_seeds") is not None:
        return f"{row['n_seeds']} seed{'s' if row['n_seeds'] != 1 else ''}"
    return "seeds not recorded"


def _seeds_note(rows: Iterable[dict]) -> str:
    seen = list(dict.fromkeys(_seeds_of(r) for r in rows))
    if len(seen) == 1:
        return seen[0]
    return "seeds differ between rows: " + " | ".join(seen)


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


_ORDER = {REPRODUCED: 0, DIRECTION_ONLY: 1, NOT_REPRODUCED: 2}


def _worst(verdicts: Iterable[str]) -> str:
    return max(verdicts, key=_ORDER.__getitem__)


def _as_list(x: Any) -> list:
    return x if isinstance(x, list) else [x]


@dataclass
class Outcome:
    verdict: str
    measured: str
    reason: str
    details: dict


# ---- the test kinds -------------------------------------------------------------------------
def check_threshold(claim: dict, ts: TableSet) -> Outcome:
    """The PE model reaches the paper's figure (``metric ≥ threshold``) in every cell of the
    selected range measured at the paper's setting. Direction only: in every considered cell
    the PE model is ahead of its baseline (vanilla) with non-overlapping CIs, but some cell is
    below the figure or no cell was run at the paper's setting."""
    p = claim["params"]
    metric, thr = p.get("metric", "token_accuracy"), float(p["threshold"])
    rows, keys = ts.rows(claim["tables"])
    arms = {"pe": p["select"], "base": {**p["select"], **p["baseline"]}}
    match, cells = _cells(rows, keys, arms, p.get("match"))
    pe_cells = {k: c for k, c in cells.items() if "pe" in c}
    if not pe_cells:
        raise _NotMeasured(f"no row of {'/'.join(claim['tables'])} matches {_describe_filter(p['select'])}")
    setting = p.get("paper_setting") or {}
    at_paper = {k: c for k, c in pe_cells.items() if _matches(c["pe"], setting)}
    considered = at_paper or pe_cells
    comps = []
    for k, c in sorted(considered.items(), key=lambda kv: _natural(kv[0])):
        pe = _est(c["pe"], metric)
        base = _est(c["base"], metric) if "base" in c else None
        comps.append({"cell": _label(c["pe"], skip=["pe"]), "pe": pe, "base": base,
                      "meets": pe.value >= thr, "ahead": base is not None and _above(pe, base)})
    meets = all(x["meets"] for x in comps)
    ahead = all(x["ahead"] for x in comps)
    setting_txt = _describe_filter(setting)
    if at_paper and meets:
        verdict, reason = REPRODUCED, f"≥ {thr:g} in every cell at the paper's setting ({setting_txt})"
    elif ahead:
        verdict = DIRECTION_ONLY
        if not at_paper:
            reason = (f"no cell at the paper's setting ({setting_txt}); PE ahead of the baseline with "
                      f"non-overlapping CIs in every cell measured")
        else:
            reason = f"PE ahead of the baseline with non-overlapping CIs, but below {thr:g} in some cell"
    else:
        verdict = NOT_REPRODUCED
        lacking = [x["cell"] for x in comps if not x["meets"]]
        reason = (f"below {thr:g} at {', '.join(lacking)}" if lacking and at_paper else
                  "PE not ahead of the baseline with non-overlapping CIs in every cell")
        if any(x["base"] is None for x in comps):
            reason += " (baseline row missing for some cell)"
    measured = "; ".join(
        f"{x['cell']}: PE {_fmt_est(x['pe'])}" + (f" vs {_pe_name(x['base'].row.get('pe'))} {_fmt_est(x['base'])}"
                                                  if x["base"] else "")
        for x in comps)
    measured += f"; {_seeds_note([x['pe'].row for x in comps] + [x['base'].row for x in comps if x['base']])}"
    details = {"metric": metric, "threshold": thr, "at_paper_setting": bool(at_paper),
               "cells": [{"cell": x["cell"], "pe": _est_dict(x["pe"]), "baseline": _est_dict(x["base"]),
                          "meets_threshold": x["meets"], "ahead": x["ahead"]} for x in comps]}
    return Outcome(verdict, measured, reason, details)


def _est_dict(e: Optional[Est]) -> Optional[dict]:
    if e is None:
        return None
    return {"value": e.value, "ci_low": e.low, "ci_high": e.high, "seeds": _seeds_of(e.row),
            "table": e.row.get("_table")}


def check_decline(claim: dict, ts: TableSet) -> Outcome:
    """The selected model's metric falls as V grows: at the largest V it lies below the
    smallest V's with non-overlapping CIs, in every group of cells that differ only in V.
    Direction only: lower at the largest V, CIs overlapping."""
    p = claim["params"]
    metric = p.get("metric", "token_accuracy")
    rows, keys = ts.rows(claim["tables"])
    sel = _require(rows, p["select"], claim["tables"])
    group_cols = [c for c in keys if c != "vocab_size"]
    groups: dict[tuple, list[dict]] = {}
    for r in sel:
        groups.setdefault(tuple(r.get(c) for c in group_cols), []).append(r)
    groups = {g: sorted(rs, key=lambda r: _num(r, "vocab_size")) for g, rs in groups.items() if len(rs) >= 2}
    if not groups:
        raise _NotMeasured(f"fewer than two vocabulary sizes for {_describe_filter(p['select'])}")
    verdicts, parts, cells = [], [], []
    for g, rs in sorted(groups.items(), key=lambda kv: _natural(kv[0])):
        first, last = _est(rs[0], metric), _est(rs[-1], metric)
        v = REPRODUCED if last.high < first.low else DIRECTION_ONLY if last.value < first.value else NOT_REPRODUCED
        verdicts.append(v)
        middle = "".join(f" → V={r['vocab_size']} {_fmt(_num(r, metric))}" for r in rs[1:-1])
        parts.append(f"{_label(rs[0], skip=['vocab_size', 'pe'])} {_pe_name(rs[0].get('pe'))}: "
                     f"V={rs[0]['vocab_size']} {_fmt_est(first)}{middle} → V={rs[-1]['vocab_size']} {_fmt_est(last)}")
        cells.append({"cell": _label(rs[0], skip=["vocab_size"]), "verdict": v,
                      "series": [{"vocab_size": r["vocab_size"], **_est_dict(_est(r, metric))} for r in rs]})
    verdict = _worst(verdicts)
    reason = {REPRODUCED: "lower at the largest V with non-overlapping CIs in every group",
              DIRECTION_ONLY: "lower at the largest V, but the CIs overlap in some group",
              NOT_REPRODUCED: "not lower at the largest V in some group"}[verdict]
    measured = "; ".join(parts) + f"; {_seeds_note(r for rs in groups.values() for r in rs)}"
    return Outcome(verdict, measured, reason, {"metric": metric, "groups": cells})


def _comparisons(claim: dict, ts: TableSet, better: dict, worse_list: list[dict], where: str,
                 tables: Optional[list[str]] = None, select: Optional[dict] = None,
                 match: Optional[list[str]] = None) -> list[tuple[dict, Est, Est, dict]]:
    metric = claim["params"].get("metric", "token_accuracy")
    tables = tables or claim["tables"]
    rows, keys = ts.rows(tables)
    rows = _require(rows, select, tables)
    out = []
    for worse in worse_list:
        m, cells = _cells(rows, keys, {"better": better, "worse": worse}, match)
        cells = _complete(cells, ["better", "worse"])
        if where == "largest_vocab":
            cells = _largest_vocab(m, cells)
        if not cells:
            raise _NotMeasured(f"no cell has both {_describe_filter({**(select or {}), **better})} and "
                               f"{_describe_filter({**(select or {}), **worse})}")
        for k in sorted(cells, key=_natural):
            c = cells[k]
            out.append((c["better"], _est(c["better"], metric), _est(c["worse"], metric), worse))
    return out


def _arm_name(row: dict, filt: dict) -> str:
    """How a measured string names an arm: "PE", "vanilla", "PE random", or "half=first"."""
    if set(filt) == {"pe"}:
        return _pe_name(row.get("pe"))
    return ", ".join(f"{c}={row.get(c)}" for c in filt)


def check_ahead(claim: dict, ts: TableSet) -> Outcome:
    """The ``better`` arm is ahead of every ``worse`` arm with non-overlapping 95% CIs in every
    compared cell (all cells, or each group's largest V). Direction only: ahead in every
    cell, but the CIs overlap somewhere."""
    p = claim["params"]
    worse_list = _as_list(p["worse"])
    comps = _comparisons(claim, ts, p["better"], worse_list, p.get("where", "all"), select=p.get("select"),
                         match=p.get("match"))
    sig = [_above(b, w) for _, b, w, _ in comps]
    point = [b.value > w.value for _, b, w, _ in comps]
    verdict = REPRODUCED if all(sig) else DIRECTION_ONLY if all(point) else NOT_REPRODUCED
    reason = {REPRODUCED: "ahead with non-overlapping CIs in every compared cell",
              DIRECTION_ONLY: "ahead in every compared cell, but the CIs overlap in some",
              NOT_REPRODUCED: "not ahead in some compared cell"}[verdict]
    arm_cols = set(p["better"]) | {c for w in worse_list for c in w}
    parts = [f"{_label(r, skip=arm_cols)}: {_arm_name(b.row, p['better'])} {_fmt_est(b)} vs "
             f"{_arm_name(w.row, wf)} {_fmt_est(w)}" for r, b, w, wf in comps]
    measured = "; ".join(parts) + f"; {_seeds_note([x for _, b, w, _ in comps for x in (b.row, w.row)])}"
    details = {"metric": p.get("metric", "token_accuracy"),
               "comparisons": [{"cell": _label(r, skip=arm_cols), "better": _est_dict(b), "worse": _est_dict(w),
                                "difference": b.value - w.value, "non_overlapping": s}
                               for (r, b, w, _), s in zip(comps, sig)]}
    return Outcome(verdict, measured, reason, details)


def check_no_gain(claim: dict, ts: TableSet) -> Outcome:
    """The ``candidate`` arm shows no gain over the ``reference`` arm: in no compared cell is
    it ahead with non-overlapping CIs by more than ``margin``. (A null claim: no direction-only
    verdict.)"""
    p = claim["params"]
    margin = float(p.get("margin", 0.0))
    comps = _comparisons(claim, ts, p["candidate"], [p["reference"]], p.get("where", "all"),
                         select=p.get("select"), match=p.get("match"))
    gains = [_above(c, r) and c.value - r.value > margin for _, c, r, _ in comps]
    verdict = NOT_REPRODUCED if any(gains) else REPRODUCED
    arm_cols = set(p["candidate"]) | set(p["reference"])
    if verdict == REPRODUCED:
        reason = "no compared cell shows a gain with non-overlapping CIs" + (f" beyond {margin:g}" if margin else "")
    else:
        reason = "gain with non-overlapping CIs at " + ", ".join(
            _label(r, skip=arm_cols) for (r, _, _, _), g in zip(comps, gains) if g)
    parts = [f"{_label(r, skip=arm_cols)}: {_arm_name(c.row, p['candidate'])} {_fmt_est(c)} vs "
             f"{_arm_name(f.row, p['reference'])} {_fmt_est(f)}" for r, c, f, _ in comps]
    measured = "; ".join(parts) + f"; {_seeds_note([x for _, c, f, _ in comps for x in (c.row, f.row)])}"
    details = {"metric": p.get("metric", "token_accuracy"), "margin": margin,
               "comparisons": [{"cell": _label(r, skip=arm_cols), "candidate": _est_dict(c), "reference": _est_dict(f),
                                "difference": c.value - f.value, "gain": g}
                               for (r, c, f, _), g in zip(comps, gains)]}
    return Outcome(verdict, measured, reason, details)


@dataclass
class _Gap:
    key: dict
    plus: Est
    minus: Est
    minus_name: str = ""

    @property
    def value(self) -> float:
        return self.plus.value - self.minus.value


def _side_gaps(claim: dict, ts: TableSet, side: dict) -> list[list[_Gap]]:
    """For each ``minus`` arm of a side, the gaps plus − minus of every cell."""
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
        out.append([_Gap(dict(zip(m, k)), _est(c["plus"], metric), _est(c["minus"], metric), _filter_name(minus))
                    for k, c in sorted(cells.items(), key=lambda kv: _natural(kv[0]))])
    return out


def check_gap_contrast(claim: dict, ts: TableSet) -> Outcome:
    """A difference of differences: side ``a``'s gap (plus − minus) exceeds side ``b``'s gap at
    the same cell (paired on ``match``) with the 95% interval of (gap a − gap b) above 0, and
    gap a > 0 (and, with ``separated_a``, a's plus and minus rows with non-overlapping CIs).
    Direction only: gap a > 0 and gap a > gap b, short of that significance."""
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
            shared = set(a_gaps[0].key) & set(b_gaps[0].key)
            match = [c for c in a_gaps[0].key if c in shared and c not in filt_cols]
        b_index: dict[tuple, _Gap] = {}
        for g in b_gaps:
            k = tuple(g.key.get(c) for c in match)
            if k in b_index:
                raise _NotMeasured(f"two cells of side b share {dict(zip(match, k))}: the claim's match columns "
                                   f"do not pin one cell")
            b_index[k] = g
        for g in a_gaps:
            other = b_index.get(tuple(g.key.get(c) for c in match))
            if other is not None:
                comps.append((g, other))
    if not comps:
        raise _NotMeasured(f"no cell of side a ({'/'.join(p['a'].get('tables') or claim['tables'])}) pairs with "
                           f"side b ({'/'.join(p['b'].get('tables') or claim['tables'])}) on "
                           f"{', '.join(p.get('match') or ['their shared cell columns'])}")
    sep = bool(p.get("separated_a", False))
    rows_out, verdicts = [], []
    for a, b in comps:
        diff = a.value - b.value
        half = math.sqrt(a.plus.half ** 2 + a.minus.half ** 2 + b.plus.half ** 2 + b.minus.half ** 2)
        separated = _above(a.plus, a.minus)
        if a.value > 0 and diff - half > 0 and (separated or not sep):
            v = REPRODUCED
        elif a.value > 0 and diff > 0:
            v = DIRECTION_ONLY
        else:
            v = NOT_REPRODUCED
        verdicts.append(v)
        rows_out.append({"cell": _label(a.plus.row, skip=filt_cols), "a": a, "b": b, "diff": diff, "half": half,
                         "separated": separated, "verdict": v})
    verdict = _worst(verdicts)
    reason = {REPRODUCED: "gap a exceeds gap b, the 95% interval of the difference above 0"
                          + (", and a's rows separated" if sep else ""),
              DIRECTION_ONLY: "gap a > 0 and larger than gap b, short of the declared significance",
              NOT_REPRODUCED: "gap a not positive or not larger than gap b"}[verdict]
    la, lb = p["a"].get("label", "a"), p["b"].get("label", "b")
    several = len(a_sets) > 1
    parts = [f"{x['cell']}" + (f" (vs {x['a'].minus_name})" if several else "")
             + f": {la} {_fmt_est(x['a'].plus)} − {_fmt_est(x['a'].minus)} = {_fmt(x['a'].value)}; "
             f"{lb} {_fmt_est(x['b'].plus)} − {_fmt_est(x['b'].minus)} = {_fmt(x['b'].value)}; "
             f"difference {_fmt(x['diff'])} ± {_fmt(x['half'])}" for x in rows_out]
    seeds = _seeds_note([e.row for x in rows_out for g in (x["a"], x["b"]) for e in (g.plus, g.minus)])
    details = {"metric": p.get("metric", "token_accuracy"), "comparisons": [
        {"cell": x["cell"], "minus": x["a"].minus_name, "a_plus": _est_dict(x["a"].plus),
         "a_minus": _est_dict(x["a"].minus),
         "b_plus": _est_dict(x["b"].plus), "b_minus": _est_dict(x["b"].minus), "gap_a": x["a"].value,
         "gap_b": x["b"].value, "difference": x["diff"], "interval_half_width": x["half"],
         "a_separated": x["separated"], "verdict": x["verdict"]} for x in rows_out]}
    return Outcome(verdict, "; ".join(parts) + f"; {seeds}", reason, details)


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
    """The selected (PE) model loses at most ``tolerance`` from each ``ref`` condition to its
    paired ``cond`` condition, in every cell (and at every checkpoint with ``steps: all``).
    Direction only: some drop exceeds the tolerance, but wherever it does the baseline
    (vanilla) model drops more at the same cell."""
    p = claim["params"]
    metric, tol = p.get("metric", "token_accuracy"), float(p["tolerance"])
    rows, keys = ts.rows(claim["tables"])
    sel, base_sel = p["select"], {**p["select"], **p["baseline"]}
    _require(rows, sel, claim["tables"])
    steps = p.get("steps", "all")
    drops = []
    for pair in p["pairs"]:
        arms = {"ref": pair["ref"], "cond": pair["cond"]}
        m, cells = _cells(_select(rows, sel), keys, arms)
        cells = _keep_steps(_complete(cells, arms), m, steps)
        if not cells:
            raise _NotMeasured(f"no cell has both {_describe_filter({**sel, **pair['ref']})} and "
                               f"{_describe_filter({**sel, **pair['cond']})}")
        base_m = [c for c in m if c not in p["baseline"]]
        _, bcells = _cells(_select(rows, base_sel), keys, arms, base_m)
        for k, c in sorted(cells.items(), key=lambda kv: _natural(kv[0])):
            bk = tuple(v for c_, v in zip(m, k) if c_ not in p["baseline"])
            bc = bcells.get(bk, {})
            base_drop = (_num(bc["ref"], metric) - _num(bc["cond"], metric)) if "ref" in bc and "cond" in bc else None
            ref, cond = _est(c["ref"], metric), _est(c["cond"], metric)
            drops.append({"cell": _label(c["ref"], skip=set(pair["ref"]) | set(pair["cond"]) | {"pe"}),
                          "ref": ref, "cond": cond, "ref_name": _filter_name(pair["ref"]),
                          "cond_name": _filter_name(pair["cond"]), "drop": ref.value - cond.value,
                          "baseline_drop": base_drop})
    within = [d["drop"] <= tol for d in drops]
    if all(within):
        verdict, reason = REPRODUCED, f"every drop ≤ {tol:g}"
    elif all(ok or (d["baseline_drop"] is not None and d["baseline_drop"] > d["drop"]) for d, ok in zip(drops, within)):
        verdict, reason = DIRECTION_ONLY, f"some drop > {tol:g}, but the baseline drops more wherever it does"
    else:
        verdict = NOT_REPRODUCED
        reason = f"a drop > {tol:g} where the baseline drops no more (or has no row)"
    worst = sorted(drops, key=lambda d: -d["drop"])
    shown = worst if steps != "all" or len(worst) <= 4 else worst[:3]
    parts = [f"{d['cell']}: {d['ref_name']} {_fmt_est(d['ref'])} → {d['cond_name']} {_fmt_est(d['cond'])} "
             f"(drop {_fmt(d['drop'])}" + (f", baseline {_fmt(d['baseline_drop'])})" if d["baseline_drop"] is not None
                                          else ", no baseline)") for d in shown]
    if len(shown) < len(drops):
        parts.append(f"largest {len(shown)} of {len(drops)} drops shown")
    measured = "; ".join(parts) + f"; {_seeds_note([e.row for d in drops for e in (d['ref'], d['cond'])])}"
    details = {"metric": metric, "tolerance": tol, "steps": steps, "drops": [
        {"cell": d["cell"], "ref": d["ref_name"], "cond": d["cond_name"], "ref_value": _est_dict(d["ref"]),
         "cond_value": _est_dict(d["cond"]), "drop": d["drop"], "baseline_drop": d["baseline_drop"]} for d in drops]}
    return Outcome(verdict, measured, reason, details)


def check_stability_decay(claim: dict, ts: TableSet) -> Outcome:
    """The selected (vanilla) model's stability with Rare disturbants decays over training:
    for every target kind, at the last checkpoint the ``rare`` condition lies below the
    ``frequent`` one with non-overlapping CIs, and below its own first-checkpoint value with
    non-overlapping CIs, at the declared speed: ``quick`` when half of the first-to-last
    decline is reached within the first ``early_fraction`` of the checkpoint span,
    ``gradual`` when later. Direction only: both orderings hold in the point estimates, but
    a CI overlaps or the speed differs."""
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
        groups = {g: sorted(v, key=lambda x: x[0]) for g, v in groups.items() if len(v) >= 2}
        if not groups:
            raise _NotMeasured(f"fewer than two checkpoints with both "
                               f"{_describe_filter({**p['select'], **pair['frequent']})}"
                               f" and {_describe_filter({**p['select'], **pair['rare']})}")
        for g, series in sorted(groups.items(), key=lambda kv: _natural(kv[0])):
            steps = [s for s, _ in series]
            rare = [_est(c["rare"], metric) for _, c in series]
            freq_last = _est(series[-1][1]["frequent"], metric)
            r0, r1 = rare[0], rare[-1]
            if r1.value < r0.value:
                target = r0.value - (r0.value - r1.value) / 2
                t_half = next(s for s, e in zip(steps, rare) if e.value <= target)
                frac: Optional[float] = (t_half - steps[0]) / (steps[-1] - steps[0])
                observed = "quick" if frac <= early else "gradual"
            else:
                t_half, frac, observed = None, None, "no decline"
            results.append({
                "cell": _label(series[0][1]["rare"], skip={"step", "condition", "pe"}),
                "frequent_name": pair["frequent"].get("condition", _describe_filter(pair["frequent"])),
                "rare_name": pair["rare"].get("condition", _describe_filter(pair["rare"])),
                "first_step": steps[0], "last_step": steps[-1], "rare_first": r0, "rare_last": r1,
                "frequent_last": freq_last, "separated": r1.high < freq_last.low,
                "sep_point": r1.value < freq_last.value,
                "decayed": r1.high < r0.low, "decay_point": r1.value < r0.value, "half_step": t_half,
                "half_fraction": frac, "speed": observed})
    full = all(x["separated"] and x["decayed"] and x["speed"] == speed for x in results)
    point = all(x["sep_point"] and x["decay_point"] for x in results)
    verdict = REPRODUCED if full else DIRECTION_ONLY if point else NOT_REPRODUCED
    reason = {REPRODUCED: f"Rare-disturbant stability below the Frequent one and below its start, {speed}",
              DIRECTION_ONLY: "the orderings hold in the point estimates, short of non-overlapping CIs or the "
                              f"declared speed ({speed})",
              NOT_REPRODUCED: "Rare-disturbant stability not below the Frequent one or not below its start"}[verdict]
    parts = [f"{x['cell']} {x['rare_name']}: {_fmt_est(x['rare_first'])} at step {x['first_step']} → "
             f"{_fmt_est(x['rare_last'])} at step {x['last_step']} vs {x['frequent_name']} "
             f"{_fmt_est(x['frequent_last'])}; "
             + (f"half the decline by {x['half_fraction']:.0%} of the checkpoint span ({x['speed']})"
                if x["half_fraction"] is not None else "no decline")
             for x in results]
    seeds = _seeds_note([x["rare_last"].row for x in results])
    details = {"metric": metric, "declared_speed": speed, "early_fraction": early, "series": [
        {k: (_est_dict(v) if isinstance(v, Est) else v) for k, v in x.items()} for x in results]}
    return Outcome(verdict, "; ".join(parts) + f"; {seeds}", reason, details)


def _bootstrap_mean_ci(x: np.ndarray, n: int = 10_000, seed: int = 0) -> tuple[float, float]:
    if x.size == 1:
        return float(x[0]), float(x[0])
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n, x.size))].mean(1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return float(lo), float(hi)


def check_lm_no_gain(claim: dict, ts: TableSet) -> Outcome:
    """Language modelling, one row per seed: the relative difference of mean test perplexities
    r = (PE − vanilla) / vanilla lies within ±``relative_tolerance``. Not reproduced: PE
    better by more than that (a gain). Direction only: PE worse by more than that (no gain,
    as in the paper, but by more than the paper's margin)."""
    p = claim["params"]
    metric, tol = p.get("metric", "perplexity"), float(p["relative_tolerance"])
    rows, keys = ts.rows(claim["tables"])
    sel = _require(rows, p.get("select"), claim["tables"])
    arm_cols = set(p["candidate"]) | set(p["reference"]) | {"seed"}
    group_cols = [c for c in keys if c not in arm_cols]
    groups: dict[tuple, dict[str, list]] = {}
    for r in sel:
        for arm in ("candidate", "reference"):
            if _matches(r, p[arm]):
                groups.setdefault(tuple(r.get(c) for c in group_cols), {}).setdefault(arm, []).append(r)
    groups = {g: a for g, a in groups.items() if "candidate" in a and "reference" in a}
    if not groups:
        raise _NotMeasured(f"no cell has both {_describe_filter({**p.get('select', {}), **p['candidate']})} and "
                           f"{_describe_filter({**p.get('select', {}), **p['reference']})} rows")
    verdicts, parts, det = [], [], []
    for g, arms in sorted(groups.items(), key=lambda kv: _natural(kv[0])):
        stats = {}
        for arm, rs in arms.items():
            x = np.array([_num(r, metric) for r in rs])
            lo, hi = _bootstrap_mean_ci(x)
            stats[arm] = {"mean": float(x.mean()), "min": float(x.min()), "max": float(x.max()), "ci_low": lo,
                          "ci_high": hi, "seeds": sorted(r.get("seed") for r in rs), "n_seeds": int(x.size)}
        c, r_ = stats["candidate"], stats["reference"]
        rel = (c["mean"] - r_["mean"]) / r_["mean"]
        v = REPRODUCED if abs(rel) <= tol else NOT_REPRODUCED if rel < -tol else DIRECTION_ONLY
        verdicts.append(v)
        label = _label(arms["candidate"][0], skip=arm_cols)

        def show(s: dict, name: str) -> str:
            return (f"{name} {s['min']:.2f}/{s['mean']:.2f}/{s['max']:.2f} (min/mean/max; mean CI "
                    f"[{s['ci_low']:.2f}, {s['ci_high']:.2f}], seeds {' '.join(map(str, s['seeds']))})")

        parts.append(f"{label}: {show(c, _pe_name(arms['candidate'][0].get('pe')))} vs "
                     f"{show(r_, _pe_name(arms['reference'][0].get('pe')))}; difference {rel:+.1%}")
        det.append({"cell": label, "candidate": c, "reference": r_, "relative_difference": rel, "verdict": v})
    verdict = _worst(verdicts)
    reason = {REPRODUCED: f"mean perplexities within ±{tol:.1%} of each other",
              NOT_REPRODUCED: f"PE's mean perplexity lower by more than {tol:.1%} (a gain)",
              DIRECTION_ONLY: f"PE worse (no gain) but by more than {tol:.1%}"}[verdict]
    return Outcome(verdict, "; ".join(parts) + " (95% CI of the mean over seeds)", reason,
                   {"metric": metric, "relative_tolerance": tol, "cells": det})


def _irie_rows(claim: dict, ts: TableSet) -> list[dict]:
    rows, _ = ts.rows(claim["tables"])
    sel = _require(rows, claim["params"]["select"], claim["tables"])
    return sorted(sel, key=lambda r: (str(r.get("layers")), str(r.get("vocab_size")), str(r.get("length"))))


def _transformer_pe(row: dict) -> str:
    return "no PE" if row.get("pe") == "none" else f"PE {row.get('pe')}"


def _irie_measured(rows: list[dict]) -> str:
    return "; ".join(
        f"{_label(r)} ({_transformer_pe(r)}): sensitive share {_num(r, 'permutation_sensitive_share'):.3f} of "
        f"{r.get('n_sequences', '?')} sequences, max logit change {_num(r, 'max_logit_change'):.2e} "
        f"(tolerance {_num(r, 'tolerance'):.0e})" for r in rows) + f"; {_seeds_note(rows)}"


def _irie_details(rows: list[dict]) -> list[dict]:
    return [{"cell": _label(r), "permutation_sensitive_share": _num(r, "permutation_sensitive_share"),
             "max_logit_change": _num(r, "max_logit_change"), "tolerance": _num(r, "tolerance"),
             "n_sequences": r.get("n_sequences"), "seeds": _seeds_of(r)} for r in rows]


def check_permutation_invariant(claim: dict, ts: TableSet) -> Outcome:
    """No test sequence's last-position logits change under any permutation of the earlier
    positions: the sensitive share is 0 and the largest change within the tolerance, in every
    selected row. (An exact property: no direction-only verdict.)"""
    rows = _irie_rows(claim, ts)
    ok = [_num(r, "permutation_sensitive_share") == 0 and _num(r, "max_logit_change") <= _num(r, "tolerance")
          for r in rows]
    verdict = REPRODUCED if all(ok) else NOT_REPRODUCED
    reason = ("no permutation changed a last-position logit beyond the tolerance" if all(ok) else
              "some permutation changed a last-position logit beyond the tolerance")
    return Outcome(verdict, _irie_measured(rows), reason, {"rows": _irie_details(rows)})


def check_permutation_sensitive(claim: dict, ts: TableSet) -> Outcome:
    """In every selected row at least ``min_share`` of the test sequences have a permutation
    of the earlier positions that changes the last-position logits beyond the tolerance.
    Direction only: the share is above 0 in every row but below ``min_share`` in some."""
    rows = _irie_rows(claim, ts)
    need = float(claim["params"]["min_share"])
    shares = [_num(r, "permutation_sensitive_share") for r in rows]
    if all(s >= need for s in shares):
        verdict, reason = REPRODUCED, f"sensitive share ≥ {need:g} in every row"
    elif all(s > 0 for s in shares):
        verdict, reason = DIRECTION_ONLY, f"some sequences are told apart, but the share is below {need:g} somewhere"
    else:
        verdict, reason = NOT_REPRODUCED, "no sequence told apart in some row"
    return Outcome(verdict, _irie_measured(rows), reason, {"min_share": need, "rows": _irie_details(rows)})


#: test kind → function(claim, TableSet) → Outcome. claims.yaml names these.
TESTS: dict[str, Callable[[dict, TableSet], Outcome]] = {
    "threshold": check_threshold,
    "decline": check_decline,
    "ahead": check_ahead,
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


def _side(where: str, x: Any) -> None:
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
def _optional_filter(where: str, f: Any) -> None:
    _check_filter(where, f, allow_empty=True)


_SELECT = ("select", False, _optional_filter)
#: kind → [(param, required, check)]
SCHEMAS: dict[str, list[tuple[str, bool, Callable[[str, Any], None]]]] = {
    "threshold": [("select", True, _check_filter), ("baseline", True, _check_filter), ("threshold", True, _number()),
                  ("paper_setting", False, _optional_filter), _MATCH, _METRIC],
    "decline": [("select", True, _check_filter), _METRIC],
    "ahead": [("better", True, _check_filter), ("worse", True, _filters), _SELECT,
              ("where", False, _choice("all", "largest_vocab")), _MATCH, _METRIC],
    "no_gain": [("candidate", True, _check_filter), ("reference", True, _check_filter), _SELECT,
                ("where", False, _choice("all", "largest_vocab")), ("margin", False, _number(0)), _MATCH, _METRIC],
    "gap_contrast": [("a", True, _side), ("b", True, _side), _MATCH, ("separated_a", False, _boolean), _METRIC],
    "robust": [("select", True, _check_filter), ("baseline", True, _check_filter),
               ("pairs", True, _pairs("ref", "cond")),
               ("tolerance", True, _number(0)), ("steps", False, _choice("all", "last", "first")), _METRIC],
    "stability_decay": [("select", True, _check_filter), ("pairs", True, _pairs("frequent", "rare")),
                        ("speed", True, _choice("quick", "gradual")), ("early_fraction", False, _number(0, 1)),
                        _METRIC],
    "lm_no_gain": [("candidate", True, _check_filter), ("reference", True, _check_filter), _SELECT,
                   ("relative_tolerance", True, _number(0, 1)), _METRIC],
    "permutation_invariant": [("select", True, _check_filter)],
    "permutation_sensitive": [("select", True, _check_filter), ("min_share", True, _number(0, 1))],
}
_ENTRY_KEYS = {"id", "claim", "paper", "tables", "kind", "params", "test"}


def validate_claim(entry: Any) -> None:
    """Raise ``PosrnnError`` unless ``entry`` is a well-formed claim: the required keys, a
    known test kind, and parameters that kind accepts."""
    cid = entry.get("id", "?") if isinstance(entry, dict) else "?"
    try:
        if not isinstance(entry, dict):
            raise ValueError("an entry must be a mapping")
        if set(entry) != _ENTRY_KEYS:
            missing, extra = _ENTRY_KEYS - set(entry), set(entry) - _ENTRY_KEYS
            raise ValueError(f"keys missing: {sorted(missing)}, unknown: {sorted(extra)}")
        for k in ("id", "claim", "paper", "test", "kind"):
            if not isinstance(entry[k], str) or not entry[k].strip():
                raise ValueError(f"{k} must be non-empty text")
        if not isinstance(entry["tables"], list) or not entry["tables"] or not set(entry["tables"]) <= set(TABLES):
            raise ValueError(f"tables must list some of {', '.join(TABLES)}")
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
    except (OSError, yaml.YAMLError) as e:
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
    """JSON-safe copy (numpy scalars to Python numbers)."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x


def evaluate_claim(claim: dict, tables: TableSet) -> dict:
    """One scorecard row: id, claim, paper, measured, test, verdict, reason, tables, kind, details."""
    base = {"id": claim["id"], "claim": claim["claim"], "paper": claim["paper"], "test": claim["test"],
            "kind": claim["kind"], "tables": list(claim["tables"])}
    try:
        out = TESTS[claim["kind"]](claim, tables)
    except _NotMeasured as e:
        return {**base, "measured": "—", "verdict": NOT_MEASURED, "reason": str(e), "details": {}}
    assert out.verdict in VERDICTS
    return {**base, "measured": out.measured, "verdict": out.verdict, "reason": out.reason,
            "details": _plain(out.details)}


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


def _md(text: Any) -> str:
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def scorecard_markdown(rows: list[dict], title: str = "Reproduction scorecard") -> str:
    """A markdown table: claim | paper | measured (95% CI, seeds) | test | verdict."""
    counts = {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}
    lines = [f"# {title}", "", ", ".join(f"{n} {v}" for v, n in counts.items()) + f" (of {len(rows)} claims).", "",
             "| claim | paper | measured (95% CI, seeds) | test | verdict |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| `{_md(r['id'])}`: {_md(r['claim'])} | {_md(r['paper'])} | {_md(r['measured'])} | "
                     f"{_md(r['test'])} | **{_md(r['verdict'])}**: {_md(r['reason'])} |")
    return "\n".join(lines) + "\n"


def write_scorecard(results_dir: Path, claims: Optional[list[dict]] = None, out_dir: Optional[Path] = None) -> list[dict]:
    """Score ``results_dir`` and write ``scorecard.json`` and ``scorecard.md`` into ``out_dir``
    (default: ``results_dir``), atomically."""
    results_dir = Path(results_dir)
    out_dir = Path(out_dir) if out_dir is not None else results_dir
    rows = scorecard(results_dir, claims)
    summary = {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}
    name = results_dir.parent.name if results_dir.name == "tables" else results_dir.name
    atomic_write_json(out_dir / "scorecard.json", {"results": name, "summary": summary, "rows": rows})
    atomic_write_text(out_dir / "scorecard.md", scorecard_markdown(rows, title=f"Reproduction scorecard: {name}"))
    return rows


_STYLE = {REPRODUCED: "bold green", DIRECTION_ONLY: "yellow", NOT_REPRODUCED: "bold red", NOT_MEASURED: "dim"}


def scorecard_rich_table(rows: list[dict]):
    """The scorecard as a ``rich.table.Table`` (claim, paper, measured, test, verdict)."""
    from rich.table import Table as RichTable
    from rich.text import Text

    t = RichTable(title="Reproduction scorecard", show_lines=True)
    t.add_column("claim", ratio=3)
    t.add_column("paper", ratio=2)
    t.add_column("measured (95% CI, seeds)", ratio=4)
    t.add_column("test", ratio=3)
    t.add_column("verdict", ratio=2)
    for r in rows:
        verdict = Text(r["verdict"], style=_STYLE.get(r["verdict"], ""))
        verdict.append(f"\n{r['reason']}", style="dim")
        t.add_row(Text(f"{r['id']}\n", style="bold") + Text(r["claim"]), Text(r["paper"]), Text(r["measured"]),
                  Text(r["test"]), verdict)
    return t
