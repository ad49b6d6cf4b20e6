"""claims.yaml: the one registry of test kinds (each kind's function and the parameters it
accepts), and loading and validating the claims against it."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import yaml

from posrnn_cli.common.errors import PosrnnError, did_you_mean
from posrnn_cli.common.settings.keys import BOOLEAN_COLUMNS
from posrnn_cli.common.results.tables import is_number

from .core import CLAIMS_PATH, Outcome, Reading, TABLES, as_list
from .result_tables import TableSet
from .kinds import (check_ahead, check_decline, check_lm_no_gain, check_no_gain, check_threshold, check_trend)
from .contrasts import check_additive, check_gap_contrast, check_robust, check_stability_decay
from .exact import check_permutation_invariant, check_permutation_sensitive, check_permutation_split
from .floored import check_learns, check_needs


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
            if not spec or set(spec) - {"min", "max"} or not all(is_number(v) for v in spec.values()):
                raise ValueError(f"{where}.{col}: a range is {{min: number, max: number}}")
        elif isinstance(spec, list):
            if not spec or not all(isinstance(v, _SCALAR) and not isinstance(v, bool) for v in spec):
                raise ValueError(f"{where}.{col}: a list of plain values is expected")
        elif not isinstance(spec, _SCALAR) or isinstance(spec, bool) != (col in BOOLEAN_COLUMNS):
            kind = "true or false" if col in BOOLEAN_COLUMNS else "a plain value (not true/false)"
            raise ValueError(f"{where}.{col}: {spec!r} is not {kind}")


def _filters(where: str, x: Any) -> None:
    for i, f in enumerate(as_list(x)):
        _check_filter(f"{where}[{i}]" if isinstance(x, list) else where, f)


def _number(lo: float = -math.inf, hi: float = math.inf) -> Callable[[str, Any], None]:
    def check(where: str, x: Any) -> None:
        if not is_number(x) or not lo <= x <= hi:
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
@dataclass(frozen=True)
class Kind:
    """A test kind: the function that scores a claim (claim, TableSet) → Outcome, and the
    parameters claims.yaml may give it: (name, required, check)."""

    name: str
    test: Callable[[dict, TableSet, Reading], Outcome]
    params: tuple
    #: its prediction is about a floor line, which it reads itself (the floor guard leaves it alone)
    reads_floor: bool = False


#: the one registry of test kinds; claims.yaml names them by ``kind``
KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("threshold", check_threshold,
         [("select", True, _check_filter), ("baseline", False, _check_filter), ("threshold", True, _number()), _MATCH,
          _METRIC]),
    Kind("decline", check_decline,
         [("select", True, _check_filter), _METRIC]),
    Kind("ahead", check_ahead,
         [("better", True, _filters), ("worse", True, _filters), _SELECT, _WHERE, _MATCH, _METRIC, _LOWER,
          ("min_difference", False, _number(0)), ("ceiling", False, _number())]),
    Kind("trend", check_trend,
         [("better", True, _check_filter), ("worse", True, _check_filter), _SELECT, _METRIC,
          ("diagonal", False, _columns)]),
    Kind("no_gain", check_no_gain,
         [("candidate", True, _check_filter), ("reference", True, _check_filter), _SELECT, _WHERE,
          ("margin", True, _number(0)), ("learned", True, _number(0, 1)), _MATCH, _METRIC, _LOWER,
          ("budget_varies", False, _columns)]),
    Kind("gap_contrast", check_gap_contrast,
         [("a", True, _side_param), ("b", True, _side_param), _MATCH, _METRIC]),
    Kind("robust", check_robust,
         [("select", True, _check_filter), ("baseline", True, _check_filter), ("pairs", True, _pairs("ref", "cond")),
          ("tolerance", True, _number(0)), ("steps", False, _choice("all", "last", "first")),
          ("baseline_ignores", False, _columns), _METRIC]),
    Kind("stability_decay", check_stability_decay,
         [("select", True, _check_filter), ("pairs", True, _pairs("frequent", "rare")),
          ("speed", True, _choice("quick", "gradual")), ("early_fraction", False, _number(0, 1)), _METRIC]),
    Kind("lm_no_gain", check_lm_no_gain,
         [("candidate", True, _check_filter), ("reference", True, _check_filter), _SELECT,
          ("margin", True, _number(0, 1)), _METRIC]),
    Kind("permutation_invariant", check_permutation_invariant,
         [("select", True, _check_filter)]),
    Kind("permutation_sensitive", check_permutation_sensitive,
         [("select", True, _check_filter), ("min_share", True, _number(0, 1))]),
    Kind("permutation_split", check_permutation_split,
         [("select", True, _check_filter), ("one", True, _check_filter), ("many", True, _check_filter),
          ("min_share", True, _number(0, 1))]),
    Kind("learns", check_learns,
         [("select", True, _check_filter), ("margin", True, _number(0, 1)), _MATCH], reads_floor=True),
    Kind("needs", check_needs,
         [("select", False, _optional_filter), ("with", True, _check_filter), ("without", True, _check_filter),
          ("margin", True, _number(0, 1)), _MATCH], reads_floor=True),
    Kind("additive", check_additive,
         [("a", True, _side_param), ("b", True, _side_param), ("margin", True, _number(0)), _MATCH, _METRIC]),
)}
#: views of KINDS, by name: the function, and the parameter schema
TESTS: dict[str, Callable[[dict, TableSet, Reading], Outcome]] = {k: v.test for k, v in KINDS.items()}
SCHEMAS: dict[str, list[tuple[str, bool, Callable[[str, Any], None]]]] = {k: list(v.params) for k, v in KINDS.items()}
#: sections of claims.yaml: the papers' claims, and hypotheses beyond them (scored apart)
SECTIONS = {"papers": "The papers' claims", "beyond": "Beyond the papers"}
#: where a section's verdicts are read: the papers' regime, or the regime a hypothesis states
REGIME_WORDS = {"papers": "at the papers' regime", "beyond": "at the hypothesis's regime"}
#: the papers by their numbers in docs/papers.md: 000–003 are versions of Morita's paper, 004 is
#: Irie's note; a claim of the papers is counted under the author of the papers its ``paper:`` cites
#: a paper's number in a ``paper:`` field: three digits on their own, not part of a figure ("600,000")
PAPER_NUMBER = r"(?<![\d,.])\b(\d{3})\b(?![,.]?\d)"
AUTHORS = {"000": "morita", "001": "morita", "002": "morita", "003": "morita", "004": "irie"}
#: the groups the scorecard counts apart, in the order it counts them: (section, name)
GROUPS = {"morita": ("papers", "Morita's claims"), "irie": ("papers", "Irie's claims"),
          "implementation": ("papers", "Checks of the implementation"),
          "hypotheses": ("beyond", "The project's hypotheses")}


def claim_group(c: dict) -> str:
    """A claim's (or scorecard row's) count group, from its data: ``section: beyond`` is one of
    the project's hypotheses, ``implementation: true`` a check of the implementation, else the
    author of the papers its ``paper:`` field cites (Irie's when it cites only 004, else Morita's)."""
    if c.get("section", "papers") == "beyond":
        return "hypotheses"
    if c.get("implementation"):
        return "implementation"
    cited = {AUTHORS[n] for n in re.findall(PAPER_NUMBER, c.get("paper", "")) if n in AUTHORS}
    return "irie" if cited == {"irie"} else "morita"


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
        if entry["kind"] not in KINDS:
            raise ValueError(f"unknown test kind {entry['kind']!r} (known: {', '.join(KINDS)})")
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


#: the keys of a profile's ``power:`` section; ``stated_before_results`` is the committed record
#: (``design.py``) a clone without its history reads
POWER_KEYS = {"pilot", "seeds_needed", "stated_before_results"}


def validate_power(power: Any, claims: list[dict], where: str = "power") -> Optional[dict]:
    """A profile's ``power:`` section, checked: ``pilot`` (the results its numbers come from, as
    text), ``seeds_needed`` (claim id → the seeds per arm that claim needs for 80% power) and
    ``stated_before_results`` (the record that git showed it committed before the profile's
    first result; ``design.py``).
    ``None`` when the profile has none. A claim id the scorecard does not know is refused with a
    suggestion."""
    if power is None:
        return None
    if not isinstance(power, dict) or not {"pilot", "seeds_needed"} <= set(power) <= POWER_KEYS:
        raise PosrnnError(f"{where} must be a mapping with exactly `pilot` (text) and `seeds_needed` "
                          "(claim id: seeds), and optionally `stated_before_results` (true/false); fix it in "
                          "params.yaml")
    if not isinstance(power.get("stated_before_results", False), bool):
        raise PosrnnError(f"{where}.stated_before_results must be true or false; fix it in params.yaml")
    if not isinstance(power["pilot"], str) or not power["pilot"].strip():
        raise PosrnnError(f"{where}.pilot must name the results the seed counts come from; fix it in params.yaml")
    needs = power["seeds_needed"]
    if not isinstance(needs, dict):
        raise PosrnnError(f"{where}.seeds_needed must map claim ids to seed counts; fix it in params.yaml")
    known = [c["id"] for c in claims]
    for cid, n in needs.items():
        if cid not in known:
            raise PosrnnError(f"{where}.seeds_needed: no claim {cid!r}{did_you_mean(cid, known)}; "
                              f"the ids are in posrnn_cli/analysis/claims.yaml")
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise PosrnnError(f"{where}.seeds_needed.{cid} must be a whole number of seeds, at least 2 (got {n!r})")
    return {"pilot": power["pilot"].strip(), "seeds_needed": dict(needs),
            "stated_before_results": power.get("stated_before_results", False)}
