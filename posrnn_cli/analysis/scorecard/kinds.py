"""Test kinds that compare arms or levels: threshold, decline, ahead, trend and the null claims
(no_gain, lm_no_gain). Each returns an ``Outcome``; ``registry`` names them for claims.yaml."""

from __future__ import annotations

from typing import Any, Callable, Optional

from posrnn_cli.common.results.tables import is_number

from .core import (DIRECTION_ONLY, INCONCLUSIVE, NOT_REPRODUCED, NOT_TESTABLE, Outcome, Reading, REPRODUCED,
                   Seeded, UNDERPOWERED, NotMeasured, Settled, as_list, claim_cells, complete, describe_filter, fmt_num,
                   fmt_sd, keep_steps, cell_label, at_largest_vocab, natural, num, pe_name, require, sd_dict,
                   select_rows, worst_of, measured_outcome)
from .result_tables import TableSet


# ---- the test kinds -------------------------------------------------------------------------
def check_threshold(claim: dict, ts: TableSet, rd: Reading) -> Outcome:
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
    match, cells = claim_cells(rows, keys, arms, p.get("match"))
    cells = {k: c for k, c in cells.items() if "pe" in c}
    if not cells:
        raise NotMeasured(f"no row of {'/'.join(claim['tables'])} matches {describe_filter(p['select'])}")
    comps = []
    for k, c in sorted(cells.items(), key=lambda kv: natural(kv[0])):
        pe = rd.seeded(c["pe"], metric)
        diff = pe - rd.seeded(c["base"], metric) if "base" in c else None
        comps.append({"cell": cell_label(c["pe"], skip=["pe"]), "pe": pe, "diff": diff, "level": rd.side(pe, thr),
                      "ahead": rd.side(diff) if diff is not None else None})
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
    measured = "; ".join(f"{x['cell']}: {fmt_sd(x['pe'])}" + (", ahead of the baseline by "
                                                              f"{fmt_sd(x['diff'], sign=True)}"
                                                            if x["diff"] is not None else "") for x in comps)
    sds = [x["pe"] for x in comps] + [x["diff"] for x in comps if x["diff"] is not None]
    details = {"metric": metric, "threshold": thr, "cells": [
        {"cell": x["cell"], "value": sd_dict(x["pe"]), "difference": sd_dict(x["diff"]), "level": x["level"],
         "ahead": x["ahead"]} for x in comps]}
    return measured_outcome(verdict, [measured], reason, details, sds)


def _groups_by_vocab(claim: dict, rows: list[dict], keys: list[str], sel: dict) -> dict[tuple, list[dict]]:
    group_cols = [c for c in keys if c != "vocab_size"]
    groups: dict[tuple, list[dict]] = {}
    for r in require(rows, sel, claim["tables"]):
        groups.setdefault(tuple(r.get(c) for c in group_cols), []).append(r)
    groups = {g: sorted(rs, key=lambda r: num(r, "vocab_size")) for g, rs in groups.items() if len(rs) >= 2}
    if not groups:
        raise NotMeasured(f"fewer than two vocabulary sizes for {describe_filter(sel)}")
    return groups


def by_interval(rd: Reading, sd: Seeded, above: str = REPRODUCED) -> str:
    return {"above": above, "below": NOT_REPRODUCED, "across": INCONCLUSIVE}[rd.side(sd)]


def check_decline(claim: dict, ts: TableSet, rd: Reading) -> Outcome:
    """The selected model's metric falls as V grows: the paired difference (smallest V − largest
    V) has its seed-level interval above 0, in every group of cells that differ only in V."""
    p = claim["params"]
    metric = p.get("metric", "token_accuracy")
    rows, keys = ts.rows(claim["tables"])
    groups = _groups_by_vocab(claim, rows, keys, p["select"])
    verdicts, parts, cells, sds = [], [], [], []
    for g, rs in sorted(groups.items(), key=lambda kv: natural(kv[0])):
        first, last = rd.seeded(rs[0], metric), rd.seeded(rs[-1], metric)
        drop = first - last
        v = by_interval(rd, drop)
        verdicts.append(v)
        sds += [first, last, drop]
        series = " → ".join(f"V={r['vocab_size']} {fmt_num(num(r, metric))}" for r in rs)
        parts.append(f"{cell_label(rs[0], skip=['vocab_size', 'pe'])} {pe_name(rs[0].get('pe'))}: {series}; "
                     f"drop {fmt_sd(drop, sign=True)}")
        cells.append({"cell": cell_label(rs[0], skip=["vocab_size"]), "verdict": v, "drop": sd_dict(drop),
                      "series": [{"vocab_size": r["vocab_size"], "value": num(r, metric)} for r in rs]})
    return _worst_group(verdicts, parts, cells, sds, metric, {
        REPRODUCED: "lower at the largest V in every group, the interval of the drop above 0",
        INCONCLUSIVE: "the interval of the drop crosses 0 in some group",
        NOT_REPRODUCED: "higher at the largest V in some group"})


def _worst_group(verdicts: list[str], parts: list[str], groups: list[dict], sds: list[Seeded], metric: str,
                 reasons: dict[str, str]) -> Outcome:
    """A test read group by group: the worst group's verdict, with its kind's reason for it."""
    verdict = worst_of(verdicts)
    return measured_outcome(verdict, parts, reasons[verdict], {"metric": metric, "groups": groups}, sds)


def _arm_name(row: dict, filt: dict) -> str:
    """How a measured string names an arm: "PE", "vanilla", "PE random", or "half=first"."""
    if set(filt) == {"pe"}:
        return pe_name(row.get("pe"))
    return ", ".join(f"{c}={row.get(c)}" for c in filt)


def _pairs_of(claim: dict, ts: TableSet, better: Any, worse: Any, where: str = "all", select: Optional[dict] = None,
              match: Optional[list[str]] = None) -> list[tuple[dict, dict, dict, dict]]:
    """Every (better row, worse row, better filter, worse filter) of the compared cells."""
    tables = claim["tables"]
    rows, keys = ts.rows(tables)
    rows = require(rows, select, tables)
    out = []
    for b in as_list(better):
        for w in as_list(worse):
            m, cells = claim_cells(rows, keys, {"better": b, "worse": w}, match)
            cells = complete(cells, ["better", "worse"])
            if where == "largest_vocab":
                cells = at_largest_vocab(m, cells)
            elif where == "last_step":
                cells = keep_steps(cells, m, "last")
            if not cells:
                raise NotMeasured(f"no cell has both {describe_filter({**(select or {}), **b})} and "
                                   f"{describe_filter({**(select or {}), **w})}")
            out += [(cells[k]["better"], cells[k]["worse"], b, w) for k in sorted(cells, key=natural)]
    return out


def check_ahead(claim: dict, ts: TableSet, rd: Reading) -> Outcome:
    """The ``better`` arm(s) ahead of the ``worse`` arm(s) in every compared cell (all cells, or
    each group's largest V): the seed-level interval of the paired difference above 0 (below 0
    with ``lower_is_better``). With ``min_difference``, a shown difference smaller than that is
    direction only."""
    p = claim["params"]
    metric, low = p.get("metric", "token_accuracy"), bool(p.get("lower_is_better", False))
    size = p.get("min_difference")
    if "ceiling" in p:
        _check_ceiling(claim, ts, rd, metric, float(p["ceiling"]))
    comps = []
    for br, wr, bf, wf in _pairs_of(claim, ts, p["better"], p["worse"], p.get("where", "all"), p.get("select"),
                                    p.get("match")):
        b, w = rd.seeded(br, metric), rd.seeded(wr, metric)
        lead = w - b if low else b - w
        v = by_interval(rd, lead)
        if v == REPRODUCED and size is not None and lead.mean < float(size):
            v = DIRECTION_ONLY
        comps.append((br, bf, wf, b, w, lead, v))
    verdict = worst_of(c[-1] for c in comps)
    reason = {REPRODUCED: "ahead in every compared cell, the interval of the paired difference above 0",
              DIRECTION_ONLY: f"ahead in every compared cell, but by less than {size} somewhere",
              INCONCLUSIVE: "the interval of the difference crosses 0 in some compared cell",
              NOT_REPRODUCED: "behind in some compared cell, the interval of the difference below 0"}[verdict]
    arm_cols = {c for f in as_list(p["better"]) + as_list(p["worse"]) for c in f}
    parts = [f"{cell_label(br, skip=arm_cols)}: {_arm_name(b.rows[0], bf)} {fmt_num(b.mean)} vs "
             f"{_arm_name(w.rows[0], wf)} {fmt_num(w.mean)}, lead {fmt_sd(lead, sign=True)}"
             for br, bf, wf, b, w, lead, _ in comps]
    sds = [x for c in comps for x in c[3:6]]
    details = {"metric": metric, "lower_is_better": low, "comparisons": [
        {"cell": cell_label(br, skip=arm_cols), "better": sd_dict(b), "worse": sd_dict(w), "lead": sd_dict(lead),
         "verdict": v} for br, bf, wf, b, w, lead, v in comps]}
    return measured_outcome(verdict, parts, reason, details, sds)


def _check_ceiling(claim: dict, ts: TableSet, rd: Reading, metric: str, ceiling: float) -> None:
    """``not testable`` when the ``worse`` arm's measure already sits at or above ``ceiling`` at
    its first checkpoint (before training): no rise above it could show."""
    p = claim["params"]
    rows, _ = ts.rows(claim["tables"])
    for worse in as_list(p["worse"]):
        arm = select_rows(rows, {**(p.get("select") or {}), **worse})
        steps = [num(r, "step") for r in arm if is_number(r.get("step"))]
        if not steps:
            continue
        first = [r for r in arm if is_number(r.get("step")) and num(r, "step") == min(steps)]
        at = [(r, rd.seeded(r, metric)) for r in first]
        top = [(r, sd) for r, sd in at if sd.mean >= ceiling]
        if top:
            r, sd = top[0]
            name = f"{cell_label(r, skip={'step'})} {_arm_name(r, worse)}"
            raise Settled(Outcome(
                NOT_TESTABLE, f"{name} at step {r.get('step')}: {metric} {fmt_sd(sd, digits=5)}",
                f"the {_arm_name(r, worse)} arm's {metric} is {sd.mean:.5f} before training (step {r.get('step')}), at "
                f"or above {ceiling:g}: the measure starts at its ceiling, so a rise cannot show",
                {"metric": metric, "ceiling": ceiling, "at_first_step": sd_dict(sd)}, sd.n))


def check_trend(claim: dict, ts: TableSet, rd: Reading) -> Outcome:
    """The ``better`` arm's lead over the ``worse`` arm grows with V: per seed, the lead at the
    largest V minus the lead at the smallest V, its interval above 0 in every group of cells
    that differ only in V. ``diagonal`` names columns that change with V along the series (the
    constant-pattern-count sweep: L falls as V grows, so K^L stays fixed); they do not split a
    group, so the growth is read from the largest V (and shortest L) to the smallest."""
    p = claim["params"]
    metric = p.get("metric", "token_accuracy")
    rows, keys = ts.rows(claim["tables"])
    arms = {"better": p["better"], "worse": p["worse"]}
    m, cells = claim_cells(require(rows, p.get("select"), claim["tables"]), keys, arms)
    cells = complete(cells, arms)
    if "vocab_size" not in m:
        raise NotMeasured("the rows have no vocabulary sizes to compare")
    i = m.index("vocab_size")
    along = [m.index(c) for c in p.get("diagonal", []) if c in m]
    groups: dict[tuple, list] = {}
    for k, c in cells.items():
        groups.setdefault(tuple(x for j, x in enumerate(k) if j != i and j not in along), []).append((k[i], c))
    groups = {g: sorted(v, key=lambda x: x[0]) for g, v in groups.items() if len(v) >= 2}
    if not groups:
        raise NotMeasured(f"fewer than two vocabulary sizes with both {describe_filter(p['better'])} and "
                           f"{describe_filter(p['worse'])}")
    skip = ["vocab_size", "pe", *p.get("diagonal", [])]
    verdicts, parts, det, sds = [], [], [], []
    for g, series in sorted(groups.items(), key=lambda kv: natural(kv[0])):
        leads = [(v, rd.seeded(c["better"], metric) - rd.seeded(c["worse"], metric)) for v, c in series]
        growth = leads[-1][1] - leads[0][1]
        v = by_interval(rd, growth)
        verdicts.append(v)
        sds += [growth] + [x for _, x in leads]
        row = series[0][1]["better"]
        diag = ["".join(f", {col}={c['better'].get(col)}" for col in p.get("diagonal", [])) for _, c in series]
        parts.append(f"{cell_label(row, skip=skip)}: lead " +
                     " → ".join(f"V={vv}{d} {lead.mean:+.3f}" for d, (vv, lead) in zip(diag, leads)) +
                     f"; growth {fmt_sd(growth, sign=True)}")
        det.append({"cell": cell_label(row, skip=skip), "verdict": v, "growth": sd_dict(growth),
                    "leads": [{"vocab_size": vv, **sd_dict(lead)} for vv, lead in leads]})
    return _worst_group(verdicts, parts, det, sds, metric, {
        REPRODUCED: "the lead at the largest V exceeds the lead at the smallest V, interval above 0",
        INCONCLUSIVE: "the interval of the lead's growth crosses 0 in some group",
        NOT_REPRODUCED: "the lead shrinks as V grows in some group (interval below 0)"})


def check_no_gain(claim: dict, ts: TableSet, rd: Reading) -> Outcome:
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
        c, r = rd.seeded(cr, metric), rd.seeded(rr, metric)
        gain = r - c if low else c - r
        chance = 1.0 / num(rr, "vocab_size") if metric == "token_accuracy" and is_number(rr.get("vocab_size")) else 0.0
        _, r_lo, _ = r.interval()
        _, g_lo, g_hi = gain.interval()
        cell = cell_label(cr, skip=set(cf) | set(rf))
        if r.n >= 2 and not (r_lo > chance + learned):
            skipped.append((cell, f"the reference did not learn (interval low {r_lo:.3f} ≤ chance {chance:.3f} + "
                                  f"{learned:g})"))
            continue
        if r.n >= 2 and not rd.narrow(gain, margin) and rd.side(gain, margin) != "above":
            # a wide interval cannot show equivalence; one wholly above the margin still refutes
            skipped.append((cell, f"the interval of the gain (±{(g_hi - g_lo) / 2:.3f}) is not narrower than the "
                                  f"margin {margin:g}"))
            wide.append((cell, c, r, gain, cf, rf))
            continue
        v = {"below": REPRODUCED, "above": NOT_REPRODUCED, "across": INCONCLUSIVE}[rd.side(gain, margin)]
        comps.append((cell, c, r, gain, v, cf, rf))
    if not comps and wide:
        _underpowered(wide, skipped, margin, lambda g: fmt_sd(g, sign=True))
    if not comps:
        raise NotMeasured("power guard: " + "; ".join(f"{cell}: {why}" for cell, why in skipped))
    verdict = worst_of(x[4] for x in comps)
    reason = {REPRODUCED: f"the gain's interval lies below the margin {margin:g} in every compared cell",
              INCONCLUSIVE: f"the gain's interval crosses the margin {margin:g} in some cell",
              NOT_REPRODUCED: f"a gain beyond the margin {margin:g} in some cell"}[verdict]
    if skipped:
        reason += "; cells left out by the power guard: " + "; ".join(f"{cell} ({why})" for cell, why in skipped)
    parts = [f"{cell}: {_arm_name(c.rows[0], cf)} {fmt_num(c.mean)} vs {_arm_name(r.rows[0], rf)} {fmt_num(r.mean)}, "
             f"gain {fmt_sd(gain, sign=True)}" for cell, c, r, gain, v, cf, rf in comps]
    sds = [x for comp in comps for x in comp[1:4]]
    details = {"metric": metric, "margin": margin, "learned": learned, "comparisons": [
        {"cell": cell, "candidate": sd_dict(c), "reference": sd_dict(r), "gain": sd_dict(gain), "verdict": v}
        for cell, c, r, gain, v, cf, rf in comps], "left_out": [{"cell": c, "why": w} for c, w in skipped]}
    return measured_outcome(verdict, parts, reason, details, sds)


def _underpowered(wide: list, skipped: list, margin: float, fmt: Callable[[Seeded], str]) -> None:
    """End a null claim whose every measured cell failed the width guard: ``underpowered``, with
    the measurement shown (the seeds it needs come from the trace)."""
    parts = [f"{cell}: {_arm_name(c.rows[0], cf)} {fmt_num(c.mean)} vs {_arm_name(r.rows[0], rf)} {fmt_num(r.mean)}, "
             f"gain {fmt(gain)}" for cell, c, r, gain, cf, rf in wide]
    sds = [x for w in wide for x in w[1:4]]
    reason = ("power guard: " + "; ".join(f"{cell}: {why}" for cell, why in skipped) +
              "; measured, but too few seeds to decide against the margin")
    details = {"margin": margin, "comparisons": [
        {"cell": cell, "candidate": sd_dict(c), "reference": sd_dict(r), "gain": sd_dict(gain)}
        for cell, c, r, gain, cf, rf in wide]}
    raise Settled(measured_outcome(UNDERPOWERED, parts, reason, details, sds))




def check_lm_no_gain(claim: dict, ts: TableSet, rd: Reading) -> Outcome:
    """Language modelling, a null claim: PE's relative gain in test perplexity, per seed
    (vanilla − PE) / vanilla, has its interval below ``margin``. Power guard: the reference
    learned something (its perplexity's interval lies below the vocabulary size, a uniform
    guess) and the gain's interval is narrower than the margin."""
    p = claim["params"]
    metric, margin = p.get("metric", "perplexity"), float(p["margin"])
    comps = []
    for cr, rr, cf, rf in _pairs_of(claim, ts, p["candidate"], p["reference"], select=p.get("select")):
        c, r = rd.seeded(cr, metric), rd.seeded(rr, metric)
        ratio = c - r  # checks seeds and budgets
        gain = Seeded({s: -ratio.values[s] / r.values[s] for s in ratio.values}, ratio.rows)
        _, _, r_hi = r.interval()
        _, g_lo, g_hi = gain.interval()
        cell = cell_label(cr, skip={"pe"})
        if r.n >= 2 and not r_hi < num(rr, "vocab_size"):
            raise NotMeasured(f"power guard: {cell}: the reference's perplexity is not below its vocabulary size")
        if r.n >= 2 and not rd.narrow(gain, margin) and rd.side(gain, margin) != "above":
            why = (f"the interval of the relative gain (±{(g_hi - g_lo) / 2:.1%}) is not narrower than the margin "
                   f"{margin:.1%}")
            _underpowered([(cell, c, r, gain, cf, rf)], [(cell, why)], margin, lambda g: fmt_sd(g, sign=True))
        v = {"below": REPRODUCED, "above": NOT_REPRODUCED, "across": INCONCLUSIVE}[rd.side(gain, margin)]
        comps.append((cell, c, r, gain, v))
    verdict = worst_of(x[-1] for x in comps)
    reason = {REPRODUCED: f"PE's relative gain lies below {margin:.1%}",
              INCONCLUSIVE: f"the interval of PE's relative gain crosses {margin:.1%}",
              NOT_REPRODUCED: f"PE better by more than {margin:.1%} (a gain)"}[verdict]
    parts = [f"{cell}: PE {fmt_num(c.mean, 2)} (per seed {', '.join(f'{c.values[s]:.2f}' for s in c.seeds)}) vs "
             f"vanilla {fmt_num(r.mean, 2)} (per seed {', '.join(f'{r.values[s]:.2f}' for s in r.seeds)}); relative "
             f"gain {fmt_sd(gain, sign=True)}" for cell, c, r, gain, _ in comps]
    sds = [x for comp in comps for x in comp[1:4]]
    details = {"metric": metric, "margin": margin, "cells": [
        {"cell": cell, "candidate": sd_dict(c), "reference": sd_dict(r), "relative_gain": sd_dict(gain),
         "verdict": v} for cell, c, r, gain, v in comps]}
    return measured_outcome(verdict, parts, reason, details, sds)
