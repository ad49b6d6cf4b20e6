"""The floor lines every task declares once (tasks/floors.py): chance, and what position alone
reaches, derived and checked against brute force; the task classes and the scorecard read them,
and a comparison of arms all at or below them is "not testable"."""

from __future__ import annotations

import itertools
import json
import pytest
import torch

from posrnn_cli.analysis import scorecard as sc
from posrnn_cli.tasks import floors, mqar_lines, reverse_lines
from posrnn_cli.common.settings.config import TaskConfig
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
    est = mqar_lines._mqar_draws(6, 2, floors.MQAR_POWER_A)
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
    # and what guessing each position's likeliest order statistic scores on the task's own draws
    task = build_task(TaskConfig(name="sort", vocab_size=32, length=8, n_test=64))
    fit, held = task.sample(100_000, _gen(0), "cpu"), task.sample(100_000, _gen(1), "cpu")
    mode = torch.stack([torch.bincount(fit.targets[:, k], minlength=32).argmax() for k in range(8)])  # (L)
    acc = (held.targets == mode).double().mean().item()
    assert acc == pytest.approx(floors.sort_position_line(32, 8), abs=0.004)
    assert [x.name for x in floors.lines(floors.Cell("sort", 32, 8))] == ["chance", "from position alone"]


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
    # ANY arm at its floor is enough: a fall onto the line may be the baseline's
    rows = [_mqar_row("none", 64, 0.70), _mqar_row("none", 1024, 0.16)]
    assert at(score(tmp_path, "beyond_mqar_vanilla_degrades", mqar=rows)) == NT
    # an arm whose interval reaches down to the line is not shown above it
    wide = [_mqar_row("none", 64, 0.70), {**_mqar_row("none", 1024, 0.45), **measure(
        "token_accuracy", [0.30, 0.45, 0.60], SEEDS)}]
    assert at(score(tmp_path, "beyond_mqar_vanilla_degrades", mqar=wide)) == NT
    # every arm shown above the line: the comparison is read
    rows = [_mqar_row("none", 64, 0.70), _mqar_row("none", 1024, 0.45)]
    assert at(score(tmp_path, "beyond_mqar_vanilla_degrades", mqar=rows)) == R


def test_beyond2s_mqar_claims_read_not_testable():
    rows = {r["id"]: r
            for r in json.loads((ROOT / "results" / "beyond2" / "scorecard" / "scorecard.json").read_text())["rows"]}
    for cid in ("beyond_mqar_vanilla_degrades", "beyond_pe_helps_mqar"):
        assert rows[cid]["at_regime"]["verdict"] == NT, cid
        assert "sits at its floor" in rows[cid]["at_regime"]["reason"]


# ---- the baselines a reader would name, each simulated on its task's own generator -------------------
def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _hits(pred, batch):
    ok = pred == batch.targets
    if batch.mask is None:
        return ok.double().mean().item()
    return (ok & batch.mask).sum().item() / batch.mask.sum().item()


def test_the_predecessor_order_blind_line_is_what_a_guess_among_the_context_scores():
    """A model that knows which tokens the context held, not their order, guesses one of the
    L − 1 others than the query: 1/(L − 1), 0.143 at L = 8, far above chance 1/V."""
    for V, L in ((64, 8), (16, 8), (32, 5)):
        task = build_task(TaskConfig(name="predecessor", vocab_size=V, length=L, n_test=64))
        b = task.sample(100_000, _gen(0), "cpu")
        x, query = b.inputs[:, :L], b.inputs[:, L:]
        score = torch.rand(x.shape, generator=_gen(1)).masked_fill(x == query, -1.0)  # never the query itself
        pred = x.gather(1, score.argmax(1, keepdim=True))
        acc = (pred == b.targets).double().mean().item()
        line = floors.order_blind_line(floors.Cell("predecessor", V, L))
        assert line == pytest.approx(1 / (L - 1)) and acc == pytest.approx(line, abs=0.004)
        assert floors.floor_line("predecessor", V, L) == line  # the highest line, above 1/V
    top = floors.highest(floors.Cell("predecessor", 64, 8))
    assert top.name == "order-blind" and round(top.value, 3) == 0.143


def _recall_last(batch, L, V, gen):
    """(B L) what a causal model that recalls only the last input answers: x_L at the output step
    whose target it is (step 0 when reversing), a uniform guess elsewhere."""
    pred = torch.randint(V, batch.targets.shape, generator=gen)
    pred[:, 0] = batch.inputs[:, L - 1]
    return pred


def test_the_reverse_recall_last_line_is_what_recalling_the_last_input_scores():
    for V, L in ((64, 12), (256, 12), (16, 12), (32, 8)):
        task = build_task(TaskConfig(name="reverse", vocab_size=V, length=L, n_test=64))
        b = task.sample(100_000, _gen(0), "cpu")
        acc = _hits(_recall_last(b, L, V, _gen(1)), b)
        assert acc == pytest.approx(floors.recall_last_line(floors.Cell("reverse", V, L)), abs=0.003)
    # the map's settings (L = 12): 0.087 at V = 256, 0.098 at V = 64, 0.141 at V = 16
    assert [round(floors.floor_line("reverse", V, 12), 3) for V in (256, 64, 16)] == [0.087, 0.098, 0.141]
    assert floors.highest(floors.Cell("reverse", 64, 12)).name == "recall-last"


def test_the_recall_last_line_with_variable_lengths_and_on_the_dual_grid():
    task = build_task(TaskConfig(name="reverse", vocab_size=32, length=8, min_length=3, n_test=4000))
    b = task.test_set()
    pred = torch.randint(32, b.targets.shape, generator=_gen(1))
    pred[:, 0] = b.inputs.gather(1, (b.lengths - 1)[:, None])[:, 0]  # each sequence's own last input
    assert _hits(pred, b) == pytest.approx(floors.recall_last_line(floors.Cell("reverse", 32, 8, min_length=3)),
                                           abs=0.004)
    V, L = 32, 8
    task = build_task(TaskConfig(name="reverse", vocab_size=V, length=L, rarity=0.0625, n_test=16_000))
    b = task.test_set()
    kind, t = b.group // L, b.group % L
    last = b.inputs[:, L - 1]
    same = (kind == 0) | (kind == 3)  # F/F and R/R: x_L shares the target's half
    guess = torch.where(same, last, torch.randint(V, last.shape, generator=_gen(2)))
    hit = torch.where(t == L - 1, torch.ones_like(same), guess == b.targets.gather(1, (L - 1 - t)[:, None])[:, 0])
    from posrnn_cli.analysis.aggregate import POSITIONS
    assert POSITIONS == reverse_lines._POSITIONS
    for k, cond in enumerate(("F/F", "F/R", "R/F", "R/R")):
        for half, (lo, hi) in POSITIONS.items():
            pick = (kind == k) & (t >= lo * L) & (t < hi * L)
            line = floors.recall_last_line(floors.Cell("reverse", V, L, condition=cond, half=half))
            assert hit[pick].double().mean().item() == pytest.approx(line, abs=0.02), (cond, half)


def test_the_copy_recall_last_line():
    task = build_task(TaskConfig(name="copy", vocab_size=32, length=8, n_test=64))
    b = task.sample(100_000, _gen(0), "cpu")
    pred = torch.randint(32, b.targets.shape, generator=_gen(1))
    pred[:, -1] = b.inputs[:, 7]  # the last output step's target is x_L
    assert _hits(pred, b) == pytest.approx(floors.recall_last_line(floors.Cell("copy", 32, 8)), abs=0.003)


def test_the_mqar_position_line_with_zero_filler_is_what_answering_by_query_rank_scores():
    """With filler of zeros a model can count the queries: answering the r-th query with the value
    of the pair most often asked r-th reaches the line by rank (0.550 at P = 2, L = 32)."""
    for L, P in ((32, 2), (64, 4)):
        task = build_task(TaskConfig(name="mqar", vocab_size=2 * L, length=L, pairs=P, filler="zero", n_test=64))
        fit, held = task.sample(50_000, _gen(0), "cpu"), task.sample(50_000, _gen(1), "cpu")
        def asked(b):  # (B P): which pair the r-th query asks
            return (b.targets[:, :, None] == b.inputs[:, 1:2 * P:2][:, None, :]).long().argmax(2)
        best = torch.stack([torch.bincount(asked(fit)[:, r], minlength=P).argmax() for r in range(P)])  # (P)
        acc = (asked(held) == best).double().mean().item()
        assert acc == pytest.approx(floors.mqar_position_line(L, P, "zero"), abs=0.01)
    assert round(floors.mqar_position_line(32, 2, "zero"), 2) == 0.55


def test_the_ceiling_guard_reads_arms_all_at_the_ceiling_not_testable(tmp_path):
    from fabricate import ev
    rows = [ev("lstm", "dummy", 32, 0.998, at={"length": 8, "hidden_size": 64}, task="sort", spread=0.001),
            ev("lstm", "none", 32, 0.996, at={"length": 8, "hidden_size": 64}, task="sort", spread=0.001)]
    row = score(tmp_path, "double_no_help_sort", double=rows)
    x = row["indication"]
    assert x["verdict"] == NT and "ceiling" in x["reason"] and f"{sc.score.CEILING:g}" in x["reason"]
    assert sc.summarize([row])["papers"]["indication"]["ceiling"] == 1
    assert "(1 at the ceiling)" in sc.count_text(sc.summarize([row])["papers"]["indication"])
    # one arm below the ceiling: read
    rows[1] = ev("lstm", "none", 32, 0.90, at={"length": 8, "hidden_size": 64}, task="sort")
    assert score(tmp_path, "double_no_help_sort", double=rows)["indication"]["verdict"] != NT


def test_the_committed_reads_the_floors_and_ceiling_change():
    def rows(p):
        path = ROOT / "results" / p / "scorecard" / "scorecard.json"
        return {r["id"]: r for r in json.loads(path.read_text())["rows"]}
    x = rows("lite_round2")["predecessor_pe_helps"]["indication"]
    assert x["verdict"] == NT and "order-blind" in x["reason"]
    for p, cid in (("lite_round2", "pattern_count_vocab_over_length"), ("lite_extra", "double_no_help_sort")):
        assert rows(p)[cid]["indication"]["verdict"] == NT and "ceiling" in rows(p)[cid]["indication"]["reason"]
    x = rows("beyond_map")["map_pe_conv_add_hawk"]["at_regime"]
    assert x["verdict"] == NT and "recall-last" in x["reason"]


def test_a_threshold_claims_level_is_read_at_the_ceiling_and_at_the_floor(tmp_path):
    """"PE reaches 95%" is met at the ceiling and missed at the floor: the guards read comparisons
    of arms, not a level against the paper's figure; a "direction only" that rests on the arms'
    comparison is guarded."""
    from fabricate import ev
    top = [ev("gru", "sinusoidal", 64, 0.995, spread=0.001), ev("gru", "none", 64, 0.99, spread=0.001)]
    assert at(score(tmp_path, "fig2_gru_pe_95", fig2=top)) == R
    low = [ev("gru", "sinusoidal", 64, 0.02, spread=0.001), ev("gru", "none", 64, 0.02, spread=0.001)]
    assert at(score(tmp_path, "fig2_gru_pe_95", fig2=low)) == sc.NOT_REPRODUCED
    ahead = [ev("gru", "sinusoidal", 64, 0.5), ev("gru", "none", 64, 0.02, spread=0.001)]
    x = score(tmp_path, "fig2_gru_pe_95", fig2=ahead)["at_regime"]
    assert x["verdict"] == NT and "recall-last" in x["reason"]  # ahead of a vanilla arm on its floor
