"""The floor lines every task declares once (common/floors.py): chance, and what position alone
reaches, derived and checked against brute force; the task classes and the scorecard read them,
and a comparison of arms all at or below them is "not testable"."""

from __future__ import annotations

import itertools
import json
import pytest

from posrnn_cli.analysis import scorecard as sc
from posrnn_cli.common import floors
from posrnn_cli.common.config import TaskConfig
from posrnn_cli.tasks import build_task
from posrnn_cli.tasks import mqar as mqar_task
from fabricate import R, NT, at, score, vals, measure, SEEDS

from conftest import ROOT


def _q_by_permutations(S, P, a=floors.MQAR_POWER_A):
    w = [(i + 1) ** (a - 1) for i in range(S)]
    q = [[0.0] * P for _ in range(S)]
    for seq in itertools.permutations(range(S), P):
        pr, rest = 1.0, sum(w)
        for s in seq:
            pr *= w[s] / rest
            rest -= w[s]
        for j, s in enumerate(seq):
            q[s][j] += pr
    return q


def test_the_mqar_position_line_is_derived_from_the_draw():
    assert floors.MQAR_POWER_A == mqar_task.POWER_A  # the same power law as the task's draw
    for S, P in ((4, 4), (6, 2), (5, 3)):
        exact = _q_by_permutations(S, P)
        got = floors.mqar_slot_probs(S, P)
        assert [x for r in got for x in r] == pytest.approx([x for r in exact for x in r], abs=1e-12)
    assert floors.mqar_position_line(16, 4) == pytest.approx(0.3857, abs=1e-4)  # L = 4P: every slot filled
    assert floors.mqar_position_line(8, 2) == pytest.approx(0.6651, abs=1e-4)
    # the seeded estimate beyond the exact range agrees with the recursion where both apply
    est = floors._mqar_draws(6, 2, floors.MQAR_POWER_A)
    share = sum(max(sum(1 for d in est[:, j] if d == i) for j in range(2)) for i in range(6)) / (len(est) * 2)
    assert share == pytest.approx(floors.mqar_position_line(16, 2), abs=0.01)
    # with zeros as filler a model can count the queries: by rank, the same line at L = 4P
    assert floors.mqar_position_line(16, 4, "zero") == pytest.approx(0.3857, abs=0.01)


def test_the_sort_position_line_matches_brute_force():
    V, L = 4, 3
    counts = [[0] * V for _ in range(L)]
    for x in itertools.product(range(V), repeat=L):
        for k, v in enumerate(sorted(x)):
            counts[k][v] += 1
    brute = sum(max(c) for c in counts) / (L * V ** L)
    assert floors.sort_position_line(V, L) == pytest.approx(brute, abs=1e-12)
    assert floors.position_line("reverse", 32, 8) is None and floors.position_line("copy", 32, 8) is None


def test_the_tasks_read_their_lines_from_one_place():
    m = build_task(TaskConfig(name="mqar", vocab_size=64, length=16, pairs=4, n_test=64))
    assert m.chance_line == 0.25 and m.position_line == pytest.approx(0.3857, abs=1e-4)
    r = build_task(TaskConfig(name="reverse", vocab_size=32, length=8, n_test=64))
    assert r.chance_line == 1 / 32 and r.position_line is None
    s = build_task(TaskConfig(name="sort", vocab_size=32, length=8, n_test=64))
    assert s.chance_line == 1 / 32 and s.position_line == pytest.approx(floors.sort_position_line(32, 8))


def _mqar_row(pe, V, acc):
    per = vals(acc, 0.01)
    return {"task": "mqar", "model": "gru", "pe": pe, "vocab_size": V, "length": 16, "pairs": 4, "hidden_size": 64,
            "layers": 1, "iterations": 1500, "batch_size": 128, "warmup": 100, "seeds": " ".join(map(str, SEEDS)),
            "n_seeds": 3, "n_sequences": 3072, **measure("token_accuracy", per, SEEDS),
            **measure("damerau_levenshtein", vals(1.0), SEEDS)}


def test_arms_at_or_below_the_floor_are_not_testable_and_counted_apart(tmp_path):
    # the vanilla GRU "falls" with V, but both arms sit below what position alone reaches (0.386)
    rows = [_mqar_row("none", 64, 0.30), _mqar_row("none", 1024, 0.16)]
    row = score(tmp_path, "beyond_mqar_vanilla_degrades", mqar=rows)
    x = row["at_regime"]
    assert x["verdict"] == NT and "from position alone" in x["reason"] and "0.386" in x["reason"]
    assert sc.summarize([row])["beyond"]["at_regime"][NT] == 1 and x["seeds_needed"] is None
    # one arm above the line: the comparison is read
    rows = [_mqar_row("none", 64, 0.70), _mqar_row("none", 1024, 0.16)]
    assert at(score(tmp_path, "beyond_mqar_vanilla_degrades", mqar=rows)) == R


def test_beyond2s_mqar_claims_read_not_testable():
    rows = {r["id"]: r
            for r in json.loads((ROOT / "results" / "beyond2" / "scorecard" / "scorecard.json").read_text())["rows"]}
    for cid in ("beyond_mqar_vanilla_degrades", "beyond_pe_helps_mqar"):
        assert rows[cid]["at_regime"]["verdict"] == NT, cid
        assert "at or below its floor" in rows[cid]["at_regime"]["reason"]
