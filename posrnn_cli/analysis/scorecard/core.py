"""The scorecard's vocabulary: verdicts and scopes, the per-seed values a test reads
(``Seeded``, the unit of replication), the filters that pick table rows and pair them into
cells, and ``Outcome``, what a test kind returns. Each kind is handed a ``Reading``, the context
of one reading of its test: every interval it reads against a bound goes through
``Reading.side``, which traces it (for the seeds an open verdict needs and for Holm's step-down)
and, on the step-down's second reading, leaves open every comparison Holm did not reject."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import numpy as np

from posrnn_cli.common import catalog
from posrnn_cli.common.stages import experiments
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.results.tables import is_number
from posrnn_cli.common.results.stats import t_cdf, t_interval


CLAIMS_PATH = Path(__file__).resolve().parent.parent / "claims.yaml"

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
FIX = "re-run the aggregate stage for this profile (dvc repro) to rewrite it"


class NotMeasured(Exception):
    """Raised inside a test: the rows the claim needs are not in this profile."""


class Settled(Exception):
    """Raised inside a test that ends before its comparison: data were measured, but the test
    cannot decide (``underpowered``) or cannot apply (``not testable``); carries the Outcome."""

    def __init__(self, outcome: "Outcome"):
        super().__init__(outcome.reason)
        self.outcome = outcome


def float_list(v: Any) -> Optional[list[float]]:
    try:
        out = [float(s) for s in str(v).split()] if v is not None else []
    except ValueError:
        return None
    return out if out and all(math.isfinite(x) for x in out) else None



def seed_list(v: Any) -> list[int]:
    """A row's ``seeds`` cell ("111 222 333", or one number) as a list of ints."""
    try:
        out = [int(s) for s in str(v).split()] if v is not None else []
    except ValueError:
        return []
    return out


# ---- filters, values, cells -----------------------------------------------------------------
def row_matches(row: dict, filt: Optional[dict]) -> bool:
    for col, spec in (filt or {}).items():
        v = row.get(col)
        if isinstance(spec, dict):
            if not is_number(v):
                return False
            if "min" in spec and v < spec["min"]:
                return False
            if "max" in spec and v > spec["max"]:
                return False
        elif isinstance(spec, list):
            if v not in spec:
                return False
        elif v != spec or isinstance(spec, bool) != isinstance(v, bool):  # True is not the number 1
            return False
    return True


def select_rows(rows: list[dict], filt: Optional[dict]) -> list[dict]:
    return [r for r in rows if row_matches(r, filt)]


def filter_name(filt: dict) -> str:
    """A condition's short name in a measured string: "F/R", "R/R second half", "layers=2"."""
    parts = []
    for col, spec in filt.items():
        if col == "condition":
            parts.append(str(spec))
        elif col == "half":
            parts.append("all positions" if spec == "all" else f"{spec} half")
        else:
            parts.append(describe_filter({col: spec}))
    return " ".join(parts)


def describe_filter(filt: Optional[dict]) -> str:
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


def num(row: dict, col: str) -> float:
    v = row.get(col)
    if not is_number(v):
        raise PosrnnError(f"results table {row.get('_table')}.csv has {col} = {v!r} in a row the scorecard "
                          f"needs, not a finite number; {FIX}")
    return float(v)


def fmt_num(x: float, digits: int = 3) -> str:
    return f"{x:.{digits}f}"


_PE_NAMES = {"none": "vanilla", "sinusoidal": "PE", "dummy": "double vanilla"}


def pe_name(pe: Any) -> str:
    return _PE_NAMES.get(pe, f"PE {pe}") if pe is not None else "?"


def cell_label(row: dict, skip: Iterable[str] = ()) -> str:
    """A short name for a row's cell: "GRU V=32 L=64 H=512" (+ the cell's other axes: "2-layer",
    "(full block)", the condition, half and step)."""
    skip = set(skip)
    parts = []
    if "model" not in skip and row.get("model") is not None:
        model = str(row["model"])
        name = catalog.label(catalog.CORES, model) if model in catalog.CORES else model
        if row.get("layers") not in (None, 1) and "layers" not in skip:
            name = f"{row['layers']}-layer {name}"
        if row.get("block") == "full" and "block" not in skip:
            name = f"{name} (full block)"
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


def require(rows: list[dict], filt: Optional[dict], tables: Iterable[str]) -> list[dict]:
    """The rows that match ``filt``; none makes the claim unmeasured."""
    sel = select_rows(rows, filt)
    if not sel:
        raise NotMeasured(f"no row of {'/'.join(tables)} matches {describe_filter(filt)}")
    return sel


def claim_cells(rows: list[dict], key_cols: list[str], arms: dict[str, dict],
           match: Optional[list[str]] = None) -> tuple[list[str], dict[tuple, dict[str, dict]]]:
    """Pair the rows of several arms (name → filter) on the ``match`` columns (default: the
    shared cell columns the arms do not set). Returns the match columns and
    ``{key: {arm: row}}``. A cell found in an earlier table wins; two rows of one table for
    the same arm and key make the claim ambiguous (unmeasured)."""
    if match is None:
        differing = differing_keys(list(arms.values()))
        match = [c for c in key_cols if c not in differing]
    out: dict[tuple, dict[str, dict]] = {}
    for name, filt in arms.items():
        for r in rows:
            if not row_matches(r, filt):
                continue
            k = tuple(r.get(c) for c in match)
            cell = out.setdefault(k, {})
            if name in cell:
                if cell[name]["_table"] == r["_table"]:
                    raise NotMeasured(f"two rows of {r['_table']}.csv match {name} ({describe_filter(filt)}) "
                                       f"at {dict(zip(match, k))}: the claim's match columns do not pin one cell")
                continue
            cell[name] = r
    return match, out


def natural(k: Any) -> tuple:
    """Sort key for cell keys: numbers by value (V=256 before V=1024), then text, None last."""
    items = k if isinstance(k, tuple) else (k,)
    return tuple((0, v, "") if is_number(v) else (2, 0, "") if v is None else (1, 0, str(v)) for v in items)


def complete(cells: dict[tuple, dict[str, dict]], names: Iterable[str]) -> dict[tuple, dict[str, dict]]:
    names = list(names)
    return {k: c for k, c in cells.items() if all(n in c for n in names)}


def at_largest_vocab(match: list[str], cells: dict[tuple, dict[str, dict]]) -> dict[tuple, dict[str, dict]]:
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


def differing_keys(filters: list[dict]) -> set[str]:
    """The columns on which some of ``filters`` disagree (set in one and not another, or to
    another value): the columns that tell arms apart, left out of the match."""
    cols = {c for f in filters for c in f}
    return {c for c in cols if any(c not in f or f[c] != filters[0].get(c) for f in filters)}


_ORDER = {REPRODUCED: 0, DIRECTION_ONLY: 1, TOO_FEW_SEEDS: 2, INCONCLUSIVE: 3, UNDERPOWERED: 4, NOT_REPRODUCED: 5,
          NOT_TESTABLE: 6}


def worst_of(verdicts: Iterable[str]) -> str:
    return max(verdicts, key=_ORDER.__getitem__)


def as_list(x: Any) -> list:
    return x if isinstance(x, list) else [x]


# ---- per-seed values: the unit of replication ---------------------------------------------------
@dataclass(frozen=True)
class Seeded:
    """A measure per seed (seed → value): one table row's values, or a combination of rows on
    the same seeds. ``a - b`` pairs seeds, and refuses arms on different seeds or, for two
    single rows, different training budgets."""

    values: dict
    rows: tuple
    #: the budget columns the claim compares on purpose (its ``budget_varies``): arms may differ in those
    budget_varies: tuple = ()

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
        """Mean and 95% t-interval over the seeds (nan bounds with one seed)."""
        return t_interval([self.values[s] for s in self.seeds])

    def p_value(self, bound: float = 0.0) -> float:
        """Two-sided p of the one-sample t test of the mean against ``bound`` (the 95% interval
        excludes ``bound`` exactly when this is below 0.05); nan with one seed."""
        if self.n < 2:
            return math.nan
        se = self.sd / math.sqrt(self.n)
        if se == 0:
            return 1.0 if self.mean == bound else 0.0
        return 2.0 * (1.0 - t_cdf(abs(self.mean - bound) / se, self.n - 1))

    def _pair(self, other: "Seeded", op: Callable[[float, float], float]) -> "Seeded":
        if set(self.values) != set(other.values):
            raise NotMeasured(f"arms ran on different seeds ({_who(self)}: seeds {_seed_text(self)}; {_who(other)}: "
                               f"seeds {_seed_text(other)}); arms are compared only on identical seed sets")
        if len(self.rows) == 1 and len(other.rows) == 1:
            a, b = self.rows[0], other.rows[0]
            for c in BUDGET_COLUMNS:
                if c in a and c in b and a[c] != b[c] and c not in self.budget_varies + other.budget_varies:
                    raise NotMeasured(f"training budgets differ ({_who(self)}: {c} {a[c]}; {_who(other)}: {c} {b[c]}); "
                                       f"arms are compared only at equal budgets")
        return Seeded({s: op(self.values[s], other.values[s]) for s in self.values}, self.rows + other.rows,
                      tuple(dict.fromkeys(self.budget_varies + other.budget_varies)))

    def __sub__(self, other: "Seeded") -> "Seeded":
        return self._pair(other, lambda x, y: x - y)

    def map(self, f: Callable[[float], float]) -> "Seeded":
        return Seeded({s: f(v) for s, v in self.values.items()}, self.rows, self.budget_varies)


def _seed_text(sd: Seeded) -> str:
    return " ".join(map(str, sd.seeds))


def _who(sd: Seeded) -> str:
    r = sd.rows[0]
    return f"{cell_label(r)} {pe_name(r.get('pe'))}".strip()


def sort_key(sd: Seeded, bound: float) -> tuple:
    """A comparison's identity across two readings of one test: its per-seed values and bound."""
    return tuple(sorted(sd.values.items())), float(bound)


@dataclass(frozen=True)
class Reading:
    """How one reading of a claim's test goes, passed to its kind: where each comparison against
    a bound is traced (``trace``: for the seeds an open verdict needs and for Holm's step-down),
    which comparisons Holm's step-down rejected (``rejected``: on its second reading every other
    comparison reads "across"; ``None`` reads every interval at 95%), the sides some comparisons
    are forced to (``force``: ``sort_key`` → side, ``("width",) + sort_key`` → narrow or not, while
    ``seeds.py`` works out the seeds an open verdict needs), and the budget columns the claim
    compares on purpose (``budget_varies``: its arms may differ in those)."""

    trace: Optional[list] = None
    rejected: Optional[frozenset] = None
    force: Optional[dict] = None
    budget_varies: tuple = ()

    @classmethod
    def of(cls, claim: dict, trace: Optional[list] = None, rejected: Optional[frozenset] = None,
           force: Optional[dict] = None) -> "Reading":
        return cls(trace, rejected, force, tuple((claim.get("params") or {}).get("budget_varies", ())))

    def note(self, *entry: Any) -> None:
        """Trace one entry (a comparison's side, a gate, a power guard's width)."""
        if self.trace is not None:
            self.trace.append(entry)

    def seeded(self, row: dict, metric: str) -> Seeded:
        """A row's per-seed values of ``metric`` (the ``<metric>_by_seed`` column)."""
        col = f"{metric}_by_seed"
        if col not in row:
            raise NotMeasured(f"{row.get('_table')}.csv has no per-seed {metric}")
        seeds, vals = seed_list(row.get("seeds")), float_list(row.get(col))
        if not seeds or vals is None or len(vals) != len(seeds):
            raise PosrnnError(f"results table {row.get('_table')}.csv: {col} does not hold one value per seed; {FIX}")
        return Seeded(dict(zip(seeds, vals)), (row,), self.budget_varies)

    def side(self, sd: Seeded, bound: float = 0.0, gate: bool = False) -> str:
        """Where the seed-level 95% interval lies against ``bound``: "above", "below" or "across".
        With one seed the point value decides (such verdicts end as "too few seeds"). A ``gate`` is
        a precondition (a baseline's effect that must be shown for a cell to count): it joins its
        cell's comparison as an intersection and is always read at 95%. On Holm's second reading a
        comparison the step-down did not reject reads "across"."""
        m, lo, hi = sd.interval()
        if sd.n < 2:
            return "above" if m > bound else "below" if m < bound else "across"
        side = "above" if lo > bound else "below" if hi < bound else "across"
        if self.rejected is not None and not gate and sort_key(sd, bound) not in self.rejected:
            side = "across"
        self.note("gate" if gate else "side", sd, bound, side)
        return self.force.get(sort_key(sd, bound), side) if self.force is not None else side

    def narrow(self, gain: Seeded, margin: float) -> bool:
        """The power guard of a null claim: the gain's interval is narrower than the margin (traced,
        so the seeds that would narrow it can be computed)."""
        _, lo, hi = gain.interval()
        ok = (hi - lo) / 2 < margin
        self.note("width", gain, margin, ok)
        return self.force.get(("width",) + sort_key(gain, margin), ok) if self.force is not None else ok


def fmt_sd(sd: Seeded, digits: int = 3, sign: bool = False) -> str:
    m, lo, hi = sd.interval()
    f = f"{{:{'+' if sign else ''}.{digits}f}}"
    per = ", ".join(f.format(sd.values[s]) for s in sd.seeds)
    ci = f" [{f.format(lo)}, {f.format(hi)}]" if sd.n >= 2 else ""
    return f"{f.format(m)}{ci} (per seed {per})"


def sd_dict(sd: Optional[Seeded]) -> Optional[dict]:
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


def measured_outcome(verdict: str, parts: list[str], reason: str, details: dict, sds: list[Seeded]) -> Outcome:
    """The Outcome of a test that measured ``parts`` (one text each), from the seeded values ``sds``:
    the parts, then the seeds they came from."""
    return Outcome(verdict, "; ".join(parts) + f"; {_seeds_note(sds)}", reason, details, _min_n(sds))


def keep_steps(cells: dict[tuple, dict], match: list[str], steps: str) -> dict[tuple, dict]:
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
