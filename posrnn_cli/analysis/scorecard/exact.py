"""Test kinds for exact properties (Irie's note): permutation invariance and sensitivity."""

from __future__ import annotations

from .core import (DIRECTION_ONLY, NOT_REPRODUCED, Outcome, Reading, REPRODUCED, float_list, cell_label, num, pe_name,
                   require, seed_list)
from .result_tables import TableSet


def _irie_rows(claim: dict, ts: TableSet) -> list[dict]:
    rows, _ = ts.rows(claim["tables"])
    sel = require(rows, claim["params"]["select"], claim["tables"])
    return sorted(sel, key=lambda r: (str(r.get("layers")), str(r.get("vocab_size")), str(r.get("length"))))


def _irie_measured(rows: list[dict]) -> str:
    return "; ".join(
        f"{cell_label(r)} ({pe_name(r.get('pe'))}): sensitive share {num(r, 'permutation_sensitive_share'):.3f} of "
        f"{r.get('n_sequences', '?')} sequences, max logit change {num(r, 'max_logit_change'):.2e} "
        f"(tolerance {num(r, 'tolerance'):.0e}), seeds {r.get('seeds')}" for r in rows)


def _irie_details(rows: list[dict]) -> list[dict]:
    return [{"cell": cell_label(r), "permutation_sensitive_share": num(r, "permutation_sensitive_share"),
             "max_logit_change": num(r, "max_logit_change"), "tolerance": num(r, "tolerance"),
             "n_sequences": r.get("n_sequences"), "seeds": seed_list(r.get("seeds"))} for r in rows]


def _irie_seeds(rows: list[dict]) -> int:
    return min(len(seed_list(r.get("seeds"))) for r in rows)


def check_permutation_invariant(claim: dict, ts: TableSet, rd: Reading) -> Outcome:
    """No test sequence's last-position logits change under any permutation of the earlier
    positions: the sensitive share is 0 and the largest change within the tolerance, in every
    selected row, on every seed. (An exact property: no direction-only verdict.)"""
    rows = _irie_rows(claim, ts)
    ok = [num(r, "permutation_sensitive_share") == 0 and num(r, "max_logit_change") <= num(r, "tolerance")
          for r in rows]
    verdict = REPRODUCED if all(ok) else NOT_REPRODUCED
    reason = ("no permutation changed a last-position logit beyond the tolerance" if all(ok) else
              "some permutation changed a last-position logit beyond the tolerance")
    return Outcome(verdict, _irie_measured(rows), reason, {"rows": _irie_details(rows)}, _irie_seeds(rows))


def check_permutation_sensitive(claim: dict, ts: TableSet, rd: Reading) -> Outcome:
    """In every selected row, on every seed, at least ``min_share`` of the test sequences have a
    permutation of the earlier positions that changes the last-position logits beyond the
    tolerance. Direction only: above 0 on every seed but below ``min_share`` somewhere."""
    rows = _irie_rows(claim, ts)
    need = float(claim["params"]["min_share"])
    shares = [min(float_list(r.get("permutation_sensitive_share_by_seed"))
                  or [num(r, "permutation_sensitive_share")]) for r in rows]
    if all(s >= need for s in shares):
        verdict, reason = REPRODUCED, f"sensitive share ≥ {need:g} in every row, on every seed"
    elif all(s > 0 for s in shares):
        verdict, reason = DIRECTION_ONLY, ("some sequences are told apart on every seed, but the share is below "
                                           f"{need:g} somewhere")
    else:
        verdict, reason = NOT_REPRODUCED, "no sequence told apart in some row or seed"
    return Outcome(verdict, _irie_measured(rows), reason, {"min_share": need, "rows": _irie_details(rows)},
                   _irie_seeds(rows))


def check_permutation_split(claim: dict, ts: TableSet, rd: Reading) -> Outcome:
    """Irie's split: the ``one`` rows (one layer) are permutation invariant as
    ``check_permutation_invariant`` reads them, and the ``many`` rows (two or more layers)
    permutation sensitive as ``check_permutation_sensitive`` does (``min_share``), both within
    ``select``. Reproduced if both hold; direction only if the ``many`` rows are told apart on
    every seed below ``min_share``; not reproduced otherwise."""
    p = claim["params"]
    one = check_permutation_invariant({**claim, "params": {"select": {**p["select"], **p["one"]}}}, ts, rd)
    many = check_permutation_sensitive({**claim, "params": {"select": {**p["select"], **p["many"]},
                                                            "min_share": p["min_share"]}}, ts, rd)
    verdicts = {one.verdict, many.verdict}
    verdict = (NOT_REPRODUCED if NOT_REPRODUCED in verdicts else DIRECTION_ONLY if DIRECTION_ONLY in verdicts
               else REPRODUCED)
    reason = f"one layer: {one.reason}; several: {many.reason}"
    details = {"one": one.details, "many": many.details}
    return Outcome(verdict, f"{one.measured}; {many.measured}", reason, details, min(one.n_seeds, many.n_seeds))
