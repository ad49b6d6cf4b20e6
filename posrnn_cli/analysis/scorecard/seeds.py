"""The seeds an open verdict needs, both ways: to reproduce the claim and to reject it, each
under the claim's own multiplicity rule, and which way the data point.

Every comparison the test read (an interval against a bound, a baseline gate, a null claim's
width guard) keeps its observed mean and spread; at n seeds its interval would exclude the
bound when the t test's p at n falls below the level the rule sets. The test is then read again
with each comparison on the side it would take at n (``core.Reading.force``), repeatedly, so that a
comparison the test only reaches once another is decided (a gap contrast's difference, read only
where gap a is shown) is counted too. The fewest n at which the reading is

- *reproduced*: every comparison at 95% (an intersection–union test, no correction);
- *not reproduced*: Holm's step-down across the test's comparisons at n (gates at 95%),

is the seeds to reproduce and the seeds to reject (about 50% power: the effect as observed).
The 80% power figure takes, for each comparison that n decides and today's seeds do not, the
seeds for 80% power at its level (95%; for a rejection, the first Holm step's 0.05/k, which
bounds the later steps), the largest of them. The data point the way that is reachable; with
every effect held, at most one is. ``None``: beyond 1,000 seeds, or not reachable at the
observed effects.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

from posrnn_cli.common.results.stats import MAX_SEEDS, seeds_for_power, seeds_to_narrow, t975, t_cdf

from .core import NOT_MEASURED, NOT_REPRODUCED, REPRODUCED, NotMeasured, sort_key


def _entries(trace: list) -> dict:
    """key → (kind, Seeded, bound, state now) of every comparison in a trace."""
    out = {}
    for kind, sd, bound, state in trace:
        key = ("width",) + sort_key(sd, bound) if kind == "width" else sort_key(sd, bound)
        out.setdefault(key, (kind, sd, bound, state))
    return out


def _p_at(sd, bound: float, n: int) -> float:
    """Two-sided p of the t test at n seeds, mean and spread as observed."""
    effect = sd.mean - bound
    if not sd.sd or not math.isfinite(sd.sd):
        return 0.0 if effect else 1.0
    return 2.0 * (1.0 - t_cdf(abs(effect) * math.sqrt(n) / sd.sd, n - 1))


def _mean_side(sd, bound: float) -> str:
    return "above" if sd.mean > bound else "below" if sd.mean < bound else "across"


def _holm_at(sides: list, n: int) -> set:
    k, out = len(sides), set()
    for i, (key, p) in enumerate(sorted(((key, _p_at(sd, b, n)) for key, sd, b in sides), key=lambda x: x[1])):
        if not p < 0.05 / (k - i):
            break
        out.add(key)
    return out


def _force_at(seen: dict, n: int, holm: bool) -> dict:
    """The side each seen comparison would take at n seeds (width guards: narrow or not)."""
    sides = [(key, e[1], e[2]) for key, e in seen.items() if e[0] == "side"]
    rejected = _holm_at(sides, n) if holm else None
    force = {}
    for key, (kind, sd, bound, _) in seen.items():
        if kind == "width":
            force[key] = t975(n - 1) * sd.sd / math.sqrt(n) < bound
        elif kind == "side" and rejected is not None:
            force[key] = _mean_side(sd, bound) if key in rejected else "across"
        else:
            force[key] = _mean_side(sd, bound) if _p_at(sd, bound, n) < 0.05 else "across"
    return force


def _reading_at(run: Callable, seen: dict, n: int, holm: bool) -> tuple[str, dict]:
    """The test's verdict with every comparison at n seeds, and the sides that gave it."""
    verdict, force = NOT_MEASURED, {}
    for _ in range(8):
        force = _force_at(seen, n, holm)
        trace: list = []
        try:
            verdict = run(trace, force)
        except NotMeasured:
            verdict = NOT_MEASURED
        new = {k: e for k, e in _entries(trace).items() if k not in seen}
        if not new:
            break
        seen.update(new)
    return verdict, force


def _fewest(run: Callable, seen: dict, now: int, target: str, holm: bool) -> tuple[Optional[int], dict]:
    """The fewest n in (now, 1,000] whose reading is ``target`` (the readings grow more decided
    with n), and the sides at that n; ``seen`` grows by the comparisons the readings reach."""
    verdict, force = _reading_at(run, seen, MAX_SEEDS, holm)
    if verdict != target:
        return None, {}
    lo, hi = now, MAX_SEEDS  # the reading at lo is open, at hi the target
    while hi - lo > 1:
        mid = (lo + hi) // 2
        v, f = _reading_at(run, seen, mid, holm)
        if v == target:
            hi, force = mid, f
        else:
            lo = mid
    return hi, force


def _power80(seen: dict, force: dict, holm: bool, now: int) -> Optional[int]:
    """The largest of the 80%-power seeds of the comparisons ``force`` decides and today's seeds
    do not, under the same rule."""
    k = sum(1 for e in seen.values() if e[0] == "side")
    today = _force_at(seen, now, holm)
    needs = []
    for key, (kind, sd, bound, state) in seen.items():
        decided_now = today.get(key) is True or today.get(key) in ("above", "below")
        decided_then = force.get(key) is True or force.get(key) in ("above", "below")
        if decided_now or not decided_then:
            continue
        if kind == "width":
            needs.append(seeds_to_narrow(sd.sd, bound))
        else:
            alpha = 0.05 / k if holm and kind == "side" and k > 1 else 0.05
            needs.append(seeds_for_power(sd.mean - bound, sd.sd, alpha=alpha))
    if not needs or any(x is None for x in needs):
        return None
    return max(needs)


def seeds_both_ways(run: Callable, trace: list) -> Optional[dict]:
    """``run(trace, force)``: the claim's test read with ``force``, returning its verdict. From
    the trace of today's reading: the seeds to reproduce and to reject, and which way the data
    point (``toward``: "reproduce", "reject" or None); ``clear``/``power80`` are the seeds for
    the way the data point."""
    seen = _entries(trace)
    if not seen:
        return None
    now = max(e[1].n for e in seen.values())
    out: dict = {"now": now}
    for way, target, holm in (("reproduce", REPRODUCED, False), ("reject", NOT_REPRODUCED, True)):
        grown = dict(seen)
        n, force = _fewest(run, grown, now, target, holm)
        out[way] = n
        out[f"{way}80"] = _power80(grown, force, holm, now) if n is not None else None
    toward = "reproduce" if out["reproduce"] is not None else "reject" if out["reject"] is not None else None
    out["toward"] = toward
    out["clear"] = out[toward] if toward else None
    out["power80"] = out[f"{toward}80"] if toward else None
    return out


def combine_needs(needs: list[dict]) -> Optional[dict]:
    """Several models' needs: reproducing needs every model (the largest count, None if any is
    out of reach), rejecting needs one (the smallest reachable)."""
    if not needs:
        return None

    def most(key: str) -> Optional[int]:
        vals = [n.get(key) for n in needs]
        return None if any(v is None for v in vals) else max(vals)

    def least(key: str, among: list) -> Optional[int]:
        vals = [n.get(key) for n in among if n.get(key) is not None]
        return min(vals) if vals else None

    rej = [n for n in needs if n.get("reject") is not None]
    best = min(rej, key=lambda n: n["reject"]) if rej else None
    out = {"now": most("now"), "reproduce": most("reproduce"), "reproduce80": most("reproduce80"),
           "reject": least("reject", needs), "reject80": best.get("reject80") if best else None}
    toward = "reproduce" if out["reproduce"] is not None else "reject" if out["reject"] is not None else None
    out.update(toward=toward, clear=out[toward] if toward else None, power80=out[f"{toward}80"] if toward else None)
    return out
