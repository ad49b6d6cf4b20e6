"""Test kinds whose prediction is about a floor: ``learns`` (an arm is shown above the highest line
its task declares, ``tasks.floors``) and ``needs`` (an arm learns with something and stays at
its floor without it). The floor guard of ``score.py`` reads every other comparison; these read
the floor themselves, since the floor is what they predict.

An arm is *shown above* its line when the seed-level 95% interval of its token accuracy lies
above it, and *shown at* it when that interval lies below the line plus ``margin`` (the arm is
no better than the baseline by more than the margin); in between it is neither.
"""

from __future__ import annotations

from posrnn_cli.tasks import floors

from .core import (INCONCLUSIVE, NOT_REPRODUCED, NOT_TESTABLE, REPRODUCED, Outcome, Reading, NotMeasured, Seeded,
                   cell_label, claim_cells, describe_filter, fmt_sd, measured_outcome, natural, sd_dict)
from .result_tables import TableSet

METRIC = "token_accuracy"


def _line(row: dict) -> floors.Line:
    cell = floors.Cell.from_row(row)
    top = floors.highest(cell) if cell else None
    if top is None:
        raise NotMeasured(f"the {row.get('task')} task declares no floor line, so a floor claim cannot read it")
    return top


def _level(rd: Reading, sd: Seeded, line: float, margin: float) -> str:
    """"above" (shown above the line), "at" (shown within ``margin`` of it or below) or "across"."""
    if rd.side(sd, line) == "above":
        return "above"
    return "at" if rd.side(sd, line + margin) == "below" else "across"


def _cells(claim: dict, ts: TableSet, arms: dict[str, dict]) -> list[dict[str, dict]]:
    p = claim["params"]
    rows, keys = ts.rows(claim["tables"])
    sel = p.get("select") or {}
    _, cells = claim_cells(rows, keys, {n: {**sel, **f} for n, f in arms.items()}, p.get("match"))
    found = [c for _, c in sorted(cells.items(), key=lambda kv: natural(kv[0])) if set(arms) <= set(c)]
    if not found:
        raise NotMeasured(f"no cell of {'/'.join(claim['tables'])} has every arm of "
                          + " and ".join(describe_filter({**sel, **f}) for f in arms.values()))
    return found


def check_learns(claim: dict, ts: TableSet, rd: Reading) -> Outcome:
    """The selected arm learns what its task asks beyond the baseline a reader would name:
    reproduced if in every cell it is shown above its task's highest floor line; not reproduced if
    in some cell it is shown at it (within ``margin``); inconclusive otherwise."""
    margin = float(claim["params"]["margin"])
    comps = []
    for c in _cells(claim, ts, {"arm": {}}):
        line = _line(c["arm"])
        sd = rd.seeded(c["arm"], METRIC)
        comps.append((cell_label(c["arm"]), sd, line, _level(rd, sd, line.value, margin)))
    levels = {lv for *_, lv in comps}
    if levels == {"above"}:
        verdict, reason = REPRODUCED, "shown above its floor line in every cell"
    elif "at" in levels:
        verdict, reason = NOT_REPRODUCED, f"shown at its floor line (within {margin:g}) in some cell"
    else:
        verdict, reason = INCONCLUSIVE, "the interval reaches its floor line in some cell"
    parts = [f"{name}: {fmt_sd(sd)} against the {line.name} line {line.value:.3f}" for name, sd, line, _ in comps]
    details = {"metric": METRIC, "margin": margin, "cells": [
        {"cell": name, "value": sd_dict(sd), "floor": line.value, "line": line.name, "level": lv}
        for name, sd, line, lv in comps]}
    return measured_outcome(verdict, parts, reason, details, [sd for _, sd, _, _ in comps])


def _needs_verdict(comps: list[tuple]) -> tuple[str, str]:
    if any(w != "above" for _, _, _, _, w, _, _ in comps):
        return NOT_TESTABLE, "the arm with it is not shown above its floor line in every cell, so nothing shows a need"
    if any(wo == "above" or gap == "below" for *_, wo, gap in comps):
        return NOT_REPRODUCED, "the arm without it is shown above its floor line (or ahead) in some cell"
    if all(wo == "at" and gap == "above" for *_, wo, gap in comps):
        return REPRODUCED, "with it the arm learns; without it the arm stays at its floor line, in every cell"
    return INCONCLUSIVE, "the arm without it is neither shown at its floor line nor above it in some cell"


def check_needs(claim: dict, ts: TableSet, rd: Reading) -> Outcome:
    """The selected arm needs ``with`` to learn: in every cell, with it the arm is shown above its
    task's highest floor line and ahead of the arm without it (paired by seed), and without it the
    arm is shown at that line (within ``margin``). Not reproduced if the arm without it is shown
    above the line, or behind; not testable if the arm with it is not shown above the line."""
    p = claim["params"]
    margin = float(p["margin"])
    comps = []
    for c in _cells(claim, ts, {"with": p["with"], "without": p["without"]}):
        line = _line(c["without"])
        w, wo = rd.seeded(c["with"], METRIC), rd.seeded(c["without"], METRIC)
        gap = w - wo
        comps.append((cell_label(c["with"], skip=["pe"]), w, wo, line, _level(rd, w, line.value, 0.0),
                      _level(rd, wo, line.value, margin), rd.side(gap)))
    verdict, reason = _needs_verdict(comps)
    parts = [f"{name}: with {fmt_sd(w)}, without {fmt_sd(wo)}, against the {line.name} line {line.value:.3f}"
             for name, w, wo, line, *_ in comps]
    details = {"metric": METRIC, "margin": margin, "cells": [
        {"cell": name, "with": sd_dict(w), "without": sd_dict(wo), "difference": sd_dict(w - wo), "floor": line.value,
         "line": line.name, "with_level": lw, "without_level": lwo, "ahead": gap}
        for name, w, wo, line, lw, lwo, gap in comps]}
    sds: list[Seeded] = [x for name, w, wo, *_ in comps for x in (w, wo)]
    return measured_outcome(verdict, parts, reason, details, sds)
