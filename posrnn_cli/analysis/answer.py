"""The README's answer in words: for each of Morita's recurrent cores, what the committed
scorecards say of positional encoding against vanilla, with its effect, interval and seeds.

The rule that picks the reading (``pick_lead``), stated once here so no sentence is chosen by hand:

1. the papers' claims (Morita's) whose test compares the PE model (``pe: sinusoidal``) with the
   vanilla one (``pe: none``), nothing else set apart, on token accuracy (``PE_VS_VANILLA``);
2. each compared cell of each committed profile's reading of such a claim for the core, off the
   papers' regime or at it, with a verdict that reads the data (not "not measured", not "not
   testable": a floor or the ceiling decides nothing);
3. the largest vocabulary first (the papers' question is a large vocabulary), then the most
   seeds, then the claims' order in claims.yaml, then the profiles' order.

It reads scorecard rows only (``results/NAME/scorecard/scorecard.json``) and claims.yaml.
"""

from __future__ import annotations

import re
from typing import Optional

from .scorecard import NOT_MEASURED, NOT_TESTABLE, OPEN, SCOPES, claim_group, load_claims

#: the recurrent cores the answer speaks of, and how it names them
CORES = {"gru": "GRU", "lstm": "LSTM", "elman": "Elman RNN"}
#: a lead whose interval is above 0 but whose mean is below this (token accuracy) reads "small"
SMALL_LEAD = 0.05


def pe_vs_vanilla(claims: Optional[list[dict]] = None) -> list[str]:
    """The ids, in claims.yaml's order, of Morita's claims that test the PE model ahead of the
    vanilla one on token accuracy, the two arms differing in ``pe`` alone."""
    out = []
    for c in claims if claims is not None else load_claims():
        p = c.get("params") or {}
        if (c.get("kind") == "ahead" and claim_group(c) == "morita" and p.get("better") == {"pe": "sinusoidal"}
                and p.get("worse") == {"pe": "none"} and p.get("metric", "token_accuracy") == "token_accuracy"
                and not p.get("select")):
            out.append(c["id"])
    return out


def _vocab(cell: str) -> int:
    m = re.search(r"\bV=(\d+)", cell)
    return int(m.group(1)) if m else 0


def _readings(scored: dict[str, list[dict]], core: str, ids: list[str]):
    for pi, (profile, rows) in enumerate(scored.items()):
        for r in rows:
            if r["id"] not in ids:
                continue
            for scope in SCOPES:
                x = (r[scope].get("models") or {}).get(core)
                if not x or x["verdict"] in (NOT_MEASURED, NOT_TESTABLE):
                    continue
                comps = (x.get("details") or {}).get("comparisons") or []
                for c in comps:  # each compared cell, one effect to quote
                    yield {"profile": profile, "claim": r["id"], "scope": scope, "verdict": x["verdict"],
                           "cell": c["cell"], "vocab": _vocab(c["cell"]), "lead": c["lead"],
                           "seeds": len(c["lead"]["seeds"]), "order": (ids.index(r["id"]), pi),
                           "seeds_needed": x.get("seeds_needed") if len(comps) == 1 else None}


def pick_lead(scored: dict[str, list[dict]], core: str) -> Optional[dict]:
    """The reading of PE against vanilla that answers for ``core`` (the module's rule); None when
    no committed profile reads one."""
    found = list(_readings(scored, core, pe_vs_vanilla()))
    if not found:
        return None
    return min(found, key=lambda x: (-x["vocab"], -x["seeds"], x["order"]))


def signed(v: float) -> str:
    return f"{v:+.3f}".replace("-", "−")


def lead_sentence(core: str, x: dict) -> str:
    """"GRU: PE's lead is small but holds, +0.021 [+0.005, +0.037] over 9 seeds at V = 64 ...": one
    core's reading in words."""
    d = x["lead"]
    lo, hi, mean = d["ci_low"], d["ci_high"], d["mean"]
    if lo > 0:
        words = "PE's lead is small but holds" if mean < SMALL_LEAD else "PE leads"
    elif hi < 0:
        words = "PE trails vanilla"
    else:
        words = "no lead shown"
    n = x["seeds_needed"] or {}
    settle = (f"; about {n['clear']:,} seeds would settle it" if x["verdict"] in OPEN and n.get("clear")
              else "")
    where = "" if x["scope"] == "indication" else ", at the papers' regime"
    cell = x["cell"][x["cell"].find("V="):]
    return (f"**{CORES[core]}**: {words}, {signed(mean)} [{signed(lo)}, {signed(hi)}] over {x['seeds']} seeds at "
            f"{cell}{where} (`{x['profile']}`, claim `{x['claim']}`){settle}.")


def _picks(scored: dict[str, list[dict]]) -> dict[str, dict]:
    picks = {core: pick_lead(scored, core) for core in CORES}
    return {k: v for k, v in picks.items() if v is not None}


def lead_lines(scored: dict[str, list[dict]]) -> list[str]:
    """One bullet per core a committed profile reads (``lead_sentence``), in ``CORES``' order."""
    return [f"- {lead_sentence(core, x)}" for core, x in _picks(scored).items()]


#: how the standing sentence names the regime's columns
_REGIME_NAMES = {"length": "L", "hidden_size": "H"}


def standing(scored: dict[str, list[dict]]) -> str:
    """Where the readings of ``lead_lines`` stand: off the papers' regime (its length and hidden
    size, from claims.yaml) when every one is; "" otherwise."""
    picks = _picks(scored)
    if not picks or any(x["scope"] != "indication" for x in picks.values()):
        return ""
    regimes = {c["id"]: c.get("regime") or {} for c in load_claims()}
    said = dict.fromkeys(", ".join(f"{n} = {regimes[x['claim']][k]}" for k, n in _REGIME_NAMES.items()
                                   if k in regimes[x["claim"]]) for x in picks.values())
    return f"All at CPU scale, off the papers' regime ({'; '.join(s for s in said if s)}): indications, not verdicts."


def open_claims(scored: dict[str, list[dict]], models: tuple[str, ...]) -> list[str]:
    """Morita's claims about ``models`` that some profile measures but none decides: every reading
    open (inconclusive, underpowered) or not testable."""
    out = []
    rows = [r for rs in scored.values() for r in rs
            if claim_group(r) == "morita" and set(r.get("models") or []) & set(models)]
    for i in dict.fromkeys(r["id"] for r in rows):
        vs = [r[s]["verdict"] for r in rows if r["id"] == i for s in SCOPES]
        read = [v for v in vs if v != NOT_MEASURED]
        if read and all(v in OPEN or v == NOT_TESTABLE for v in read):
            out.append(i)
    return out
