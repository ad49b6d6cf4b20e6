"""Scoring: each claim's test on each model and scope, Holm's correction for "not reproduced",
the seeds an open verdict needs, and the counts."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional

import numpy as np

from posrnn_cli.tasks import floors
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.results.stats import t_interval

from .core import (DIRECTION_ONLY, INCONCLUSIVE, MIN_SEEDS, NOT_MEASURED, NOT_REPRODUCED, NOT_TESTABLE, OPEN, Outcome,
                   SCOPES, TOO_FEW_SEEDS, UNDERPOWERED, VERDICTS, NotMeasured, Reading, Settled,
                   describe_filter, float_list, row_matches, sort_key, worst_of)
from .result_tables import TableSet
from .seeds import combine_needs, seeds_both_ways
from .claims import (GROUPS, KINDS, REGIME_WORDS, SECTIONS, claim_group, TESTS, load_claims, validate_claim,
                     validate_power)


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


def _test(claim: dict, ts: TableSet, trace: Optional[list] = None, rejected: Optional[frozenset] = None,
          force: Optional[dict] = None) -> Outcome:
    """Run the claim's test kind, its comparisons traced; with ``rejected`` (Holm's second
    reading), every comparison not in it reads "across"; with ``force``, the comparisons it
    names take the sides it gives (the seeds an open verdict needs, ``seeds.py``)."""
    try:
        return TESTS[claim["kind"]](claim, ts, Reading.of(claim, trace, rejected, force))
    except Settled as e:
        return e.outcome


def holm_rejected(comparisons: list[tuple[tuple, float]], alpha: float = 0.05) -> frozenset:
    """Holm's step-down over k comparisons (key, two-sided p): the smallest p is tested at
    alpha/k, the next at alpha/(k − 1), …, stopping at the first that is not rejected; returns
    the keys rejected."""
    k, out = len(comparisons), set()
    for i, (key, p) in enumerate(sorted(comparisons, key=lambda c: c[1])):
        if not p < alpha / (k - i):
            break
        out.add(key)
    return frozenset(out)


def _holm(claim: dict, ts: TableSet, out: Outcome, trace: list) -> Outcome:
    """"Not reproduced" needs only one of the test's k comparisons against the claim, so it must
    hold after Holm's correction across them: the comparisons are ordered by p and tested at
    0.05/k, 0.05/(k − 1), … until one is not rejected (``holm_rejected``); the test is read
    again with the rejected comparisons decided as at 95% and every other one open ("across"),
    and must still give "not reproduced". A gate (a baseline effect a cell needs) is an
    intersection with its cell's comparison and stays at 95%. "Reproduced" needs every
    comparison (an intersection–union test) and takes no correction."""
    sides = [(sort_key(e[1], e[2]), e[1].p_value(e[2])) for e in trace if e[0] == "side"]
    k = len(sides)
    if out.verdict != NOT_REPRODUCED or k < 2:
        return out
    rejected = holm_rejected(sides)
    try:
        again = _test(claim, ts, rejected=rejected).verdict
    except NotMeasured:
        again = NOT_MEASURED
    steps = (f"Holm's step-down across the test's {k} comparisons ({len(rejected)} rejected, the first at "
             f"{0.05 / k:.2%})")
    if again == NOT_REPRODUCED:
        return Outcome(out.verdict, out.measured, f"{out.reason} (holds after {steps})", out.details, out.n_seeds)
    return Outcome(INCONCLUSIVE, out.measured, f"{out.reason} at 95%, but not after {steps}", out.details,
                   out.n_seeds)


def _seeds_needed(claim: dict, ts: TableSet, trace: list, verdict: str) -> Optional[dict]:
    """For an open verdict: the seeds to reproduce and to reject, and which way the data point
    (``seeds.seeds_both_ways``)."""
    if verdict not in OPEN:
        return None
    return seeds_both_ways(lambda tr, force: _test(claim, ts, tr, force=force).verdict, trace)


#: the ceiling guard's threshold: an arm *sits at the ceiling* when its mean token accuracy over
#: seeds is at or above this; a comparison whose every arm sits there could not show a difference
#: either way. (The floor guard reads the interval instead: an arm sits at its floor when its
#: seed-level 95% interval reaches down to its floor line, i.e. it is not shown above the baseline.)
CEILING = 0.98


def _bounds(r: dict) -> Optional[tuple[float, float, float]]:
    """A row's token accuracy: its mean over seeds and the bounds of its seed-level 95% interval
    (the mean itself with one seed); None without per-seed values."""
    vals = float_list(r.get("token_accuracy_by_seed"))
    if not vals:
        return None
    m, lo, hi = t_interval(vals)
    return m, (m if math.isnan(lo) else lo), (m if math.isnan(hi) else hi)


def _compared_rows(out: Outcome, trace: list) -> list[dict]:
    """The table rows a token-accuracy test compared (through its traced comparisons). A gate's
    rows are not among them: a gate is a baseline effect a cell needs, and a baseline that falls
    to its floor shows that effect rather than hiding one."""
    if (out.details or {}).get("metric") != "token_accuracy":
        return []
    return list({id(r): r for e in trace if e[0] == "side" for r in e[1].rows}.values())


def _arm_name(r: dict) -> str:
    conv = {True: "conv", False: "no conv"}.get(r.get("conv"))
    return " ".join(str(x) for x in (r.get("model"), r.get("pe"), conv, f"V={r.get('vocab_size')}", r.get("condition"),
                                     r.get("half") if r.get("half") not in (None, "all") else None) if x)


def _at_floor(out: Outcome, trace: list) -> Optional[Outcome]:
    """``not testable`` when any arm a token-accuracy test compared sits at its floor: the
    seed-level 95% interval of its token accuracy reaches down to the highest line its task
    declares (``tasks.floors``: chance, and the baseline a reader would name: recall-last,
    order-blind, order statistics, position), so the arm is not shown to beat that baseline and a
    difference involving it may be the baseline's, not anything the task asks for."""
    found = []
    for r in _compared_rows(out, trace):
        cell, b = floors.Cell.from_row(r), _bounds(r)
        top = floors.highest(cell) if cell else None
        if top is not None and b is not None and b[1] <= top.value:
            found.append((r, b, top, cell))
    if not found:
        return None
    cells = dict.fromkeys(f"{r.get('task')} {_arm_name(r)}: {m:.3f} (interval from {lo:.3f}), not above its "
                          f"{top.name} line {top.value:.3f}" for r, (m, lo, _), top, _ in found)
    reason = (f"an arm sits at its floor ({floors.floor_words(found[0][3])}): " + "; ".join(cells)
              + ": a difference involving it may be the baseline's, so the comparison shows nothing the task asks for")
    return Outcome(NOT_TESTABLE, out.measured, reason, {**out.details, "floor": [
        {"row": _arm_name(r), "token_accuracy": m, "ci_low": lo, "floor": top.value, "line": top.name}
        for r, (m, lo, _), top, _ in found]}, out.n_seeds)


def _at_ceiling(out: Outcome, trace: list) -> Optional[Outcome]:
    """``not testable`` (ceiling) when every arm a token-accuracy test compared sits at the
    ceiling, its mean over seeds at or above ``CEILING``: neither a gain nor a loss could show."""
    found = []
    for r in _compared_rows(out, trace):
        b = _bounds(r)
        if b is None or b[0] < CEILING:
            return None
        found.append((r, b))
    if not found:
        return None
    cells = dict.fromkeys(f"{r.get('task')} {_arm_name(r)}: {m:.3f}" for r, (m, _, _) in found)
    reason = (f"ceiling: every compared arm's token accuracy is at or above {CEILING:g} ("
              + "; ".join(cells) + "): no arm has room to show an effect")
    return Outcome(NOT_TESTABLE, out.measured, reason, {**out.details, "ceiling": CEILING, "at_ceiling": [
        {"row": _arm_name(r), "token_accuracy": m} for r, (m, _, _) in found]}, out.n_seeds)


def _guarded(claim: dict, out: Outcome) -> bool:
    """Whether the floor and ceiling guards read this outcome: every comparison of arms, but not a
    threshold claim's level against the paper's stated figure ("reaches 95%" can be met at the
    ceiling and missed at the floor), unless its verdict rests on the arms' comparison (direction
    only: ahead of the baseline, short of the figure)."""
    if getattr(KINDS.get(claim.get("kind")), "reads_floor", False):
        return False  # its prediction is about the floor, read by the test itself
    return claim.get("kind") != "threshold" or out.verdict == DIRECTION_ONLY


def _run(claim: dict, ts: TableSet) -> dict:
    """One test on one view of the tables: verdict, measured, reason, details, n_seeds, and the
    seeds an open verdict needs."""
    trace: list = []
    try:
        out = _test(claim, ts, trace)
        guarded = _guarded(claim, out)
        out = (guarded and (_at_floor(out, trace) or _at_ceiling(out, trace))) or _holm(claim, ts, out, trace)
    except NotMeasured as e:
        return {"verdict": NOT_MEASURED, "measured": "—", "reason": str(e), "details": {}, "n_seeds": 0,
                "seeds_needed": None}
    verdict, reason = out.verdict, out.reason
    if out.n_seeds < MIN_SEEDS:
        reason = (f"{out.n_seeds} seed(s) per arm, fewer than {MIN_SEEDS}: not judged (on these seeds the test "
                  f"reads {verdict}: {reason})")
        verdict = TOO_FEW_SEEDS
    return {"verdict": verdict, "measured": out.measured, "reason": reason, "details": _plain(out.details),
            "n_seeds": out.n_seeds, "seeds_needed": _seeds_needed(claim, ts, trace, verdict)}


def _combine(per_model: dict[str, dict]) -> dict:
    """One scope's result from its models' results: the worst verdict among the measured
    models; a model with nothing measured makes the result partial."""
    measured = {m: r for m, r in per_model.items() if r["verdict"] != NOT_MEASURED}
    missing = [m for m in per_model if m not in measured]
    if not measured:
        reason = "; ".join(f"{m}: {r['reason']}" if m else r["reason"] for m, r in per_model.items())
        return {"verdict": NOT_MEASURED, "measured": "—", "reason": reason, "partial": False, "missing": missing,
                "models": per_model, "seeds_needed": None}
    verdict = worst_of(r["verdict"] for r in measured.values())
    several = len(per_model) > 1
    needs = [r["seeds_needed"] for r in measured.values() if r["verdict"] in OPEN and r.get("seeds_needed")]
    measured_text = " || ".join(f"{m.upper()}: {r['measured']}" if several else r["measured"]
                                for m, r in measured.items())
    reason = " || ".join(f"{m.upper()}: {r['verdict']}: {r['reason']}" if several else r["reason"]
                         for m, r in measured.items())
    if missing:
        reason += " || partial: " + "; ".join(f"{m.upper()} not measured ({per_model[m]['reason']})" for m in missing)
    return {"verdict": verdict, "measured": measured_text, "reason": reason, "partial": bool(missing),
            "missing": missing, "models": per_model, "seeds_needed": combine_needs(needs) if verdict in OPEN else None}


def _regime_text(regime: dict) -> str:
    return describe_filter(regime) if regime else "any cell"


def _by_design(res: dict, claim_id: str, power: Optional[dict]) -> dict:
    """An inconclusive result of a claim to which the profile's design gives fewer seeds than its
    pilot says the claim needs (``power.seeds_needed``, stated in params.yaml before the runs)
    reads ``underpowered``: measured, its numbers and reason kept, but not a test the design
    expected to decide. A decided result stays as it is, whatever the design expected."""
    need = ((power or {}).get("seeds_needed") or {}).get(claim_id)
    if need is None or res["verdict"] != INCONCLUSIVE:
        return res
    now = max((r["n_seeds"] for r in res["models"].values() if r["verdict"] != NOT_MEASURED), default=0)
    if now >= need:
        return res
    reason = (f"this profile's design gives it {now} seeds, and its pilot ({power['pilot']}) put its need at "
              f"{need:,} (80% power): not expected to decide here; the test reads: {res['reason']}")
    return {**res, "verdict": UNDERPOWERED, "reason": reason, "design_seeds": need}


def evaluate_claim(claim: dict, tables: TableSet, power: Optional[dict] = None) -> dict:
    """One scorecard row: the claim, its regime and models, and two results: ``at_regime`` (the
    verdict, read on cells inside the regime) and ``indication`` (cells outside it). ``power``:
    the profile's design (``validate_power``), which marks the claims it does not give enough
    seeds as underpowered."""
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
                return (m is None or r.get("model") == m) and row_matches(r, regime) == inside
            res = _run(claim, tables.view(keep))
            if res["verdict"] == NOT_MEASURED and _rows_in_view(claim, tables.view(keep)) == 0:
                if not regime and not inside:
                    res["reason"] = "every cell is inside this claim's regime (any cell), so no indication stands apart"
                else:
                    at = REGIME_WORDS[claim.get("section", "papers")]
                    where = at if inside else f"outside {at.split(' ', 1)[1]}"
                    res["reason"] = f"no cell {where} ({_regime_text(regime)}) in this profile"
            per_model[m or ""] = res
        out[scope] = _by_design(_combine(per_model), claim["id"], power)
    return {**base, **out}


def _rows_in_view(claim: dict, ts: TableSet) -> Optional[int]:
    """How many rows of the claim's tables a view keeps (``None`` when a table is absent)."""
    try:
        return len(ts.rows(claim["tables"])[0])
    except NotMeasured:
        return None


def scorecard(results_dir: Path, claims: Optional[list[dict]] = None, power: Optional[dict] = None) -> list[dict]:
    """Apply every claim's test to the tables in ``results_dir``; one row per claim, in order.
    ``power``: the profile's ``power:`` section (the seeds its design expects each claim needs)."""
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise PosrnnError(f"results directory {results_dir} does not exist; run the pipeline for this profile first")
    if claims is None:
        known = claims = load_claims()  # validated as it is read
    else:
        for c in claims:
            validate_claim(c)
        known = load_claims() + claims  # the power section may name the registry's claims and these
    power = validate_power(power, known)
    ts = TableSet(results_dir)
    return [evaluate_claim(c, ts, power) for c in claims]


def summarize(rows: list[dict]) -> dict:
    """Counts per section and scope: verdicts of claims with every model measured, and partial
    claims apart (``partial``: counts of their verdicts); ``groups``: the same per count group
    (``claims.GROUPS``: Morita's, Irie's, checks of the implementation, the project's hypotheses)."""
    out: dict = {}
    for section in SECTIONS:
        rs = [r for r in rows if r["section"] == section]
        if not rs:
            continue
        out[section] = {}
        for scope in SCOPES:
            out[section][scope] = _counts(rs, scope)
        groups = [g for g, (sec, _) in GROUPS.items() if sec == section]
        out[section]["groups"] = {g: {scope: _counts([r for r in rs if claim_group(r) == g], scope) for scope in SCOPES}
                                  for g in groups if any(claim_group(r) == g for r in rs)}
    return out


def at_ceiling(x: dict) -> bool:
    """Whether a scope's result is a ceiling read: "not testable" with a measured model's arms
    all at the ceiling (``_at_ceiling``)."""
    return x["verdict"] == NOT_TESTABLE and any("at_ceiling" in (m.get("details") or {})
                                                for m in (x.get("models") or {}).values())


def _counts(rs: list[dict], scope: str) -> dict:
    full = [r[scope]["verdict"] for r in rs if not r[scope]["partial"]]
    part = [r[scope]["verdict"] for r in rs if r[scope]["partial"]]
    return {"claims": len(rs), **{v: full.count(v) for v in VERDICTS},
            "partial": {v: part.count(v) for v in VERDICTS if part.count(v)},
            "ceiling": sum(at_ceiling(r[scope]) for r in rs)}
