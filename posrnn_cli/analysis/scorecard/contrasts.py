"""Test kinds that contrast two effects: a gap against a gap, robustness where a baseline is
shown to fall, and the speed of a stability decay."""

from __future__ import annotations

from typing import Optional

from posrnn_cli.common import catalog
from posrnn_cli.common.errors import PosrnnError

from .core import (DIRECTION_ONLY, INCONCLUSIVE, NOT_REPRODUCED, Outcome, Reading, REPRODUCED, Seeded, FIX, NotMeasured,
                   as_list, claim_cells, complete, describe_filter, differing_keys, filter_name, fmt_sd, keep_steps,
                   cell_label, natural, pe_name, require, sd_dict, select_rows, worst_of, measured_outcome)
from .result_tables import TableSet
from .kinds import by_interval


def _side_gaps(claim: dict, ts: TableSet, rd: Reading, side: dict) -> list[list[tuple[dict, Seeded, dict]]]:
    """For each ``minus`` arm of a side: (cell key, plus − minus per seed, plus row) of every cell."""
    metric = claim["params"].get("metric", "token_accuracy")
    tables = side.get("tables") or claim["tables"]
    rows, keys = ts.rows(tables)
    rows = require(rows, side.get("select"), tables)
    out = []
    for minus in as_list(side["minus"]):
        m, cells = claim_cells(rows, keys, {"plus": side["plus"], "minus": minus})
        cells = complete(cells, ["plus", "minus"])
        if not cells:
            raise NotMeasured(f"no cell has both {describe_filter({**side.get('select', {}), **side['plus']})} and "
                               f"{describe_filter({**side.get('select', {}), **minus})}")
        out.append([(dict(zip(m, k)), rd.seeded(c["plus"], metric) - rd.seeded(c["minus"], metric), c["plus"])
                    for k, c in sorted(cells.items(), key=lambda kv: natural(kv[0]))])
    return out


def _paired_gaps(claim: dict, ts: TableSet, rd: Reading) -> tuple[list, set]:
    """Side a's and side b's gaps paired by cell: [((key, gap a, row), (key, gap b, row))], and
    the columns the sides' filters set (left out of a cell's label)."""
    p = claim["params"]
    a_sets, b_sets = _side_gaps(claim, ts, rd, p["a"]), _side_gaps(claim, ts, rd, p["b"])
    if len(a_sets) != len(b_sets):
        raise PosrnnError(f"claim {claim['id']}: sides a and b list different numbers of minus arms; fix claims.yaml")
    filt_cols = differing_keys([p["a"].get("select", {}), p["b"].get("select", {})])
    for s in (p["a"], p["b"]):
        filt_cols |= differing_keys([s["plus"], *as_list(s["minus"])])
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
                raise NotMeasured(f"two cells of side b share {dict(zip(match, k))}: the claim's match columns "
                                   f"do not pin one cell")
            b_index[k] = g
        for g in a_gaps:
            other = b_index.get(tuple(g[0].get(c) for c in match))
            if other is not None:
                comps.append((g, other))
    if not comps:
        raise NotMeasured("no cell of side a pairs with side b on "
                          f"{', '.join(p.get('match') or ['their shared cell columns'])}")
    return comps, filt_cols


def check_gap_contrast(claim: dict, ts: TableSet, rd: Reading) -> Outcome:
    """A difference of differences on the same seeds: side ``a``'s gap (plus − minus) is shown
    (interval above 0) and exceeds side ``b``'s gap at the same cell (the interval of gap a −
    gap b above 0). The gate: a cell's difference counts toward "reproduced" only where gap a is
    itself shown. The refutation route: a cell where gap a is shown negative, or gap a − gap b
    has its interval below 0 (whether or not gap a is shown), goes against the hypothesis and
    reads "not reproduced" (which must then survive Holm's step-down, as every such verdict)."""
    p = claim["params"]
    comps, filt_cols = _paired_gaps(claim, ts, rd)
    out, sds = [], []
    for (ka, ga, row), (kb, gb, _) in comps:
        diff = ga - gb
        shown = rd.side(ga)
        if shown == "above":
            v = by_interval(rd, diff)
        else:
            v = NOT_REPRODUCED if shown == "below" or rd.side(diff) == "below" else INCONCLUSIVE
        out.append((cell_label(row, skip=filt_cols), ga, gb, diff, v))
        sds += [ga, gb, diff]
    verdict = worst_of(x[-1] for x in out)
    reason = {REPRODUCED: "gap a shown and larger than gap b, the interval of the difference above 0",
              INCONCLUSIVE: "gap a not shown, or the interval of gap a − gap b crosses 0, in some cell",
              NOT_REPRODUCED: "gap a negative, or smaller than gap b (shown or not), in some cell"}[verdict]
    la, lb = p["a"].get("label", "a"), p["b"].get("label", "b")
    parts = [f"{cell}: {la} {fmt_sd(ga, sign=True)}; {lb} {fmt_sd(gb, sign=True)}; difference "
             f"{fmt_sd(diff, sign=True)}" for cell, ga, gb, diff, _ in out]
    details = {"metric": p.get("metric", "token_accuracy"), "comparisons": [
        {"cell": cell, "gap_a": sd_dict(ga), "gap_b": sd_dict(gb), "difference": sd_dict(diff), "verdict": v}
        for cell, ga, gb, diff, v in out]}
    return measured_outcome(verdict, parts, reason, details, sds)


def check_additive(claim: dict, ts: TableSet, rd: Reading) -> Outcome:
    """Two effects add up: side ``a``'s gap and side ``b``'s gap (one effect measured with and
    without the other) differ by less than ``margin`` at every cell — the interval of gap a −
    gap b (their interaction, paired by seed) inside ±margin. Not reproduced where that interval
    lies wholly beyond the margin; inconclusive otherwise."""
    p = claim["params"]
    margin = float(p["margin"])
    comps, filt_cols = _paired_gaps(claim, ts, rd)
    out, sds = [], []
    for (_, ga, row), (_, gb, _) in comps:
        diff = ga - gb
        lo_side, hi_side = rd.side(diff, -margin), rd.side(diff, margin)
        v = (REPRODUCED if lo_side == "above" and hi_side == "below" else
             NOT_REPRODUCED if hi_side == "above" or lo_side == "below" else INCONCLUSIVE)
        out.append((cell_label(row, skip=filt_cols), ga, gb, diff, v))
        sds += [ga, gb, diff]
    verdict = worst_of(x[-1] for x in out)
    reason = {REPRODUCED: f"the interaction's interval lies inside ±{margin:g} in every cell",
              INCONCLUSIVE: f"the interaction's interval crosses ±{margin:g} in some cell",
              NOT_REPRODUCED: f"the interaction's interval lies beyond ±{margin:g} in some cell"}[verdict]
    la, lb = p["a"].get("label", "a"), p["b"].get("label", "b")
    parts = [f"{cell}: {la} {fmt_sd(ga, sign=True)}; {lb} {fmt_sd(gb, sign=True)}; interaction "
             f"{fmt_sd(diff, sign=True)}" for cell, ga, gb, diff, _ in out]
    details = {"metric": p.get("metric", "token_accuracy"), "margin": margin, "comparisons": [
        {"cell": cell, "gap_a": sd_dict(ga), "gap_b": sd_dict(gb), "interaction": sd_dict(diff), "verdict": v}
        for cell, ga, gb, diff, v in out]}
    return measured_outcome(verdict, parts, reason, details, sds)


def _robust_drops(rd: Reading, p: dict, rows: list, keys: list, sel: dict, base_sel: dict, metric: str,
                  tol: float) -> tuple[list[dict], list[str]]:
    """Each compared cell's drop from ``ref`` to ``cond`` for the selected arm and the baseline,
    with its verdict, where the baseline's drop is shown above the tolerance; and the cells left
    out (no baseline row, or a baseline drop not shown)."""
    steps = p.get("steps", "all")
    drops, unshown = [], []
    for pair in p["pairs"]:
        arms = {"ref": pair["ref"], "cond": pair["cond"]}
        m, cells = claim_cells(select_rows(rows, sel), keys, arms)
        cells = keep_steps(complete(cells, arms), m, steps)
        if not cells:
            raise NotMeasured(f"no cell has both {describe_filter({**sel, **pair['ref']})} and "
                               f"{describe_filter({**sel, **pair['cond']})}")
        own = set(p["baseline"]) | set(p.get("baseline_ignores", []))  # columns the baseline need not share
        base_m = [c for c in m if c not in own]
        _, bcells = claim_cells(select_rows(rows, base_sel), keys, arms, base_m)
        for k, c in sorted(cells.items(), key=lambda kv: natural(kv[0])):
            bk = tuple(v for c_, v in zip(m, k) if c_ not in own)
            bc = bcells.get(bk, {})
            name = cell_label(c["ref"], skip=set(pair["ref"]) | set(pair["cond"]) | {"pe"})
            ref_name, cond_name = filter_name(pair["ref"]), filter_name(pair["cond"])
            if "ref" not in bc or "cond" not in bc:
                unshown.append(f"{name} {ref_name}→{cond_name}: no baseline row")
                continue
            drop = rd.seeded(c["ref"], metric) - rd.seeded(c["cond"], metric)
            base_drop = rd.seeded(bc["ref"], metric) - rd.seeded(bc["cond"], metric)
            if rd.side(base_drop, tol, gate=True) != "above":
                unshown.append(f"{name} {ref_name}→{cond_name}: baseline drop {base_drop.mean:+.3f}")
                continue
            within = rd.side(drop, tol)
            if within == "below":
                v = REPRODUCED
            elif within == "above":
                v = DIRECTION_ONLY if rd.side(base_drop - drop) == "above" else NOT_REPRODUCED
            else:
                v = INCONCLUSIVE
            drops.append({"cell": name, "ref": ref_name, "cond": cond_name, "drop": drop, "base": base_drop, "v": v})
    return drops, unshown


def check_robust(claim: dict, ts: TableSet, rd: Reading) -> Outcome:
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
    sel = p["select"]
    require(rows, sel, claim["tables"])
    who = pe_name(sel["pe"]) if "pe" in sel else "PE"  # the arm whose drop is read: PE, or vanilla Mamba
    if who != "PE" and "model" in sel:
        who = f"{who} {catalog.label(catalog.CORES, sel['model'])}"
    drops, unshown = _robust_drops(rd, p, rows, keys, sel, {**sel, **p["baseline"]}, metric, tol)
    if not drops:
        raise NotMeasured(f"the baseline effect is not shown: the baseline's drop has its interval above the "
                           f"tolerance {tol:g} in no compared cell ({'; '.join(unshown[:4])}"
                           f"{'; …' if len(unshown) > 4 else ''})")
    verdict = worst_of(d["v"] for d in drops)
    reason = {REPRODUCED: f"where the baseline drops by more than {tol:g}, the {who} model's drop lies below {tol:g}",
              DIRECTION_ONLY: f"some {who} drop exceeds {tol:g}, but the baseline drops more there",
              INCONCLUSIVE: f"the interval of some {who} drop crosses {tol:g}",
              NOT_REPRODUCED: f"a {who} drop above {tol:g}, not shown to be smaller than the baseline's drop "
                              "there"}[verdict]
    if unshown:
        reason += f" ({len(unshown)} cell(s) left out: the baseline effect is not shown there)"
    worst = sorted(drops, key=lambda d: -d["drop"].mean)
    shown = worst if len(worst) <= 4 else worst[:3]
    parts = [f"{d['cell']} {d['ref']}→{d['cond']}: {who} drop {fmt_sd(d['drop'], sign=True)}, baseline drop "
             f"{d['base'].mean:+.3f}" for d in shown]
    if len(shown) < len(drops):
        parts.append(f"largest {len(shown)} of {len(drops)} drops shown")
    sds = [x for d in drops for x in (d["drop"], d["base"])]
    details = {"metric": metric, "tolerance": tol, "steps": p.get("steps", "all"), "left_out": unshown, "drops": [
        {"cell": d["cell"], "ref": d["ref"], "cond": d["cond"], "drop": sd_dict(d["drop"]),
         "baseline_drop": sd_dict(d["base"]), "verdict": d["v"]} for d in drops]}
    return measured_outcome(verdict, parts, reason, details, sds)


#: checkpoints a decay speed needs, the first at step 0
MIN_CHECKPOINTS = 5


def _decay_series(rd: Reading, series: list, pair: dict, metric: str, speed: str, early: float) -> dict:
    """One cell's checkpoints (step, cells) read as a decay: its Rare-condition decline, the
    separation from the Frequent condition at the last checkpoint, the speed and the verdict."""
    steps = [s for s, _ in series]
    if len(steps) < MIN_CHECKPOINTS or steps[0] != 0:
        raise NotMeasured(f"a decay's speed needs at least {MIN_CHECKPOINTS} checkpoints, the first at step 0; "
                           f"this profile has {len(steps)}, the first at step {steps[0]}")
    rare = [rd.seeded(c["rare"], metric) for _, c in series]
    freq_last = rd.seeded(series[-1][1]["frequent"], metric)
    decline, separation = rare[0] - rare[-1], freq_last - rare[-1]
    means = [r.mean for r in rare]
    if means[-1] < means[0]:
        target = means[0] - (means[0] - means[-1]) / 2
        t_half = next(s for s, v in zip(steps, means) if v <= target)
        frac: Optional[float] = (t_half - steps[0]) / (steps[-1] - steps[0])
        observed = "quick" if frac <= early else "gradual"
    else:
        frac, observed = None, "no decline"
    sides = (rd.side(decline), rd.side(separation))
    if sides == ("above", "above"):
        v = REPRODUCED if observed == speed else DIRECTION_ONLY
    elif "below" in sides:
        v = NOT_REPRODUCED
    else:
        v = INCONCLUSIVE
    return {"cell": cell_label(series[0][1]["rare"], skip={"step", "condition", "pe"}),
            "rare_name": pair["rare"].get("condition", describe_filter(pair["rare"])),
            "frequent_name": pair["frequent"].get("condition", describe_filter(pair["frequent"])),
            "steps": steps, "means": means, "decline": decline, "separation": separation,
            "fraction": frac, "speed": observed, "verdict": v}


def check_stability_decay(claim: dict, ts: TableSet, rd: Reading) -> Outcome:
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
    sel = require(rows, p["select"], claim["tables"])
    results = []
    for pair in p["pairs"]:
        m, cells = claim_cells(sel, keys, {"frequent": pair["frequent"], "rare": pair["rare"]})
        cells = complete(cells, ["frequent", "rare"])
        if "step" not in m:
            raise PosrnnError(f"claim {claim['id']}: the stability rows have no step column to follow; {FIX}")
        i = m.index("step")
        groups: dict[tuple, list] = {}
        for k, c in cells.items():
            groups.setdefault(k[:i] + k[i + 1:], []).append((k[i], c))
        if not groups:
            raise NotMeasured(f"no checkpoint has both {describe_filter({**p['select'], **pair['frequent']})} and "
                               f"{describe_filter({**p['select'], **pair['rare']})}")
        for g, series in sorted(groups.items(), key=lambda kv: natural(kv[0])):
            results.append(_decay_series(rd, sorted(series, key=lambda x: x[0]), pair, metric, speed, early))
    verdict = worst_of(x["verdict"] for x in results)
    reason = {REPRODUCED: f"Rare-disturbant stability declines and ends below the Frequent one, {speed}",
              DIRECTION_ONLY: f"the decline and the separation are shown, but not at the declared speed ({speed})",
              INCONCLUSIVE: "the interval of the decline or of the separation crosses 0",
              NOT_REPRODUCED: "Rare-disturbant stability rises, or ends above the Frequent one"}[verdict]
    parts = [f"{x['cell']} {x['rare_name']}: " + " → ".join(f"{v:.3f}" for v in x["means"]) +
             f" at steps {x['steps'][0]}…{x['steps'][-1]}; decline {fmt_sd(x['decline'], sign=True)}; below "
             f"{x['frequent_name']} by {fmt_sd(x['separation'], sign=True)}; " +
             (f"half the decline by {x['fraction']:.0%} of the span ({x['speed']})" if x["fraction"] is not None
              else "no decline") for x in results]
    sds = [s for x in results for s in (x["decline"], x["separation"])]
    details = {"metric": metric, "declared_speed": speed, "early_fraction": early, "series": [
        {"cell": x["cell"], "rare": x["rare_name"], "steps": x["steps"], "means": x["means"],
         "decline": sd_dict(x["decline"]), "separation": sd_dict(x["separation"]), "half_fraction": x["fraction"],
         "speed": x["speed"], "verdict": x["verdict"]} for x in results]}
    return measured_outcome(verdict, parts, reason, details, sds)
