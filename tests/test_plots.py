"""Figures: what their bars are (the verdicts' t interval over seeds, or a plainly labelled
range), the seed count, chance lines, one-point sweeps, panel grids, one model order, titles that
fit. Every check reads the figure's matplotlib artists, drawn from fabricated tables."""

from __future__ import annotations

import math
import re
from typing import Optional

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.text import Text

from posrnn_cli.analysis import figkit, plots
from posrnn_cli.common.errors import PosrnnError
from posrnn_cli.common.results.stats import t_interval

SETTING = {"length": 8, "hidden_size": 8, "iterations": 100, "batch_size": 4}


def _metric(name: str, vals) -> dict:
    """A metric's columns as ``posrnn aggregate`` writes them, with CI columns that are NOT the
    t interval (mean ± 0.001), so a figure drawing them is caught."""
    m = float(np.mean(vals))
    return {name: m, f"{name}_by_seed": " ".join(f"{v:g}" for v in vals), f"{name}_ci_low": m - 0.001,
            f"{name}_ci_high": m + 0.001}


def acc_row(model, pe, vals, V=16, task="reverse", **over) -> dict:
    r = {"task": task, "model": model, "pe": pe, "vocab_size": V, **SETTING, "rarity": None,
         "seeds": " ".join(str(111 * (i + 1)) for i in range(len(vals))), "n_seeds": len(vals),
         **_metric("token_accuracy", vals), **_metric("damerau_levenshtein", [8 * (1 - v) for v in vals])}
    r.update(over)
    return r


def _vals(k: int, n: int = 3) -> list[float]:
    """Per-seed values, different for every k (so each drawn interval can be told apart)."""
    return [round(0.3 + 0.05 * k + 0.07 * i * (1 + k % 3), 4) for i in range(n)]


def stability_rows(arms, steps=(0, 10), n=3) -> list[dict]:
    rows = []
    for k, (model, pe) in enumerate(arms):
        for step in steps:
            for c, cond in enumerate(("F/F", "F/R", "R/F", "R/R")):
                for pair in ("common_target", "common_suffix"):
                    vals = [min(0.99, 0.5 + 0.01 * (k + c + step / 10) + 0.03 * i) for i in range(n)]
                    m = float(np.mean(vals))
                    rows.append({"model": model, "pe": pe, "step": step, "condition": cond, "pair": pair,
                                 "stability": m, "stability_by_seed": " ".join(f"{v:g}" for v in vals),
                                 "ci_low": m - 0.001, "ci_high": m + 0.001,
                                 "seeds": " ".join(map(str, range(1, n + 1))),
                                 "n_seeds": n, "n_triplets": 64 * n})
    return rows


#: models listed against the registry's order (elman, gru, lstm, s4d, mamba, mingru, transformer)
EIGHT_ARMS = [(m, pe) for m in ("mingru", "s4d", "mamba", "gru") for pe in ("sinusoidal", "none")]


def tables() -> dict:
    fig2 = [acc_row(m, pe, _vals(k * 4 + j * 2 + p), V=V)
            for k, m in enumerate(("mamba", "lstm", "gru")) for j, V in enumerate((16, 64))
            for p, pe in enumerate(("sinusoidal", "none"))]
    dual = [acc_row(m, pe, _vals(k * 8 + p * 4 + c), V=32, rarity=0.25, condition=cond, half="all")
            for k, m in enumerate(("lstm", "gru")) for p, pe in enumerate(("none", "sinusoidal"))
            for c, cond in enumerate(("F/F", "F/R", "R/F", "R/R"))]
    extend = [acc_row(m, pe, _vals(20 + k * 2 + p), V=64, base_vocab=32, extra_vocab=32)
              for k, m in enumerate(("mamba", "gru")) for p, pe in enumerate(("sinusoidal", "none"))]
    return {
        "fig2": fig2, "dual": dual, "extend": extend,
        "stability": stability_rows(EIGHT_ARMS),
        "forms": [acc_row("lstm", pe, _vals(30 + p)) for p, pe in enumerate(("random", "learnable"))],
        "double": [acc_row("lstm", "dummy", _vals(33))],
        "length": [acc_row("lstm", pe, _vals(40 + p * 2 + j), V=2, length=L)
                   for p, pe in enumerate(("none", "sinusoidal")) for j, L in enumerate((8, 16))],
        "lm": [{"model": "lstm", "pe": "none", "perplexity": 40.0, "perplexity_by_seed": "39 40 41",
                "perplexity_min": 39.0, "perplexity_max": 41.0, "seeds": "1 2 3", "n_seeds": 3}],
        "autoreg": [acc_row("lstm", pe, _vals(50 + k * 8 + p * 4 + f * 2 + j), V=V, task=task, feedback=fb)
                    for k, task in enumerate(("reverse", "sort")) for p, pe in enumerate(("none", "sinusoidal"))
                    for f, fb in enumerate(("self", "truth")) for j, V in enumerate((16, 64))],
        "delayed": [acc_row("lstm", pe, _vals(80 + p * 2 + j), V=V, task="delayed-add")
                    for p, pe in enumerate(("none", "sinusoidal")) for j, V in enumerate((32, 64))],
        "predecessor": [acc_row("lstm", pe, _vals(84 + p * 2 + j), V=V, task="predecessor")
                        for p, pe in enumerate(("none", "sinusoidal")) for j, V in enumerate((32, 64))],
        "patterns": [acc_row("lstm", pe, _vals(88 + p * 3 + j), V=K, length=L)
                     for p, pe in enumerate(("none", "sinusoidal"))
                     for j, (K, L) in enumerate(((2, 12), (8, 4), (64, 2)))],
        "stability_mid": [{**r, "target_position": 3}
                          for r in stability_rows([("s4d", "none"), ("s4d", "sinusoidal")])],
        "mqar": [acc_row("gru", pe, _vals(90 + p * 2 + j), V=V, task="mqar", pairs=4)
                 for p, pe in enumerate(("none", "sinusoidal")) for j, V in enumerate((64, 512))],
        "mamba_conv": [acc_row("mamba", pe, _vals(94 + c * 2 + p), V=64, conv=conv)
                       for c, conv in enumerate((True, False)) for p, pe in enumerate(("none", "sinusoidal"))],
        "continuous": [{"task": "continuous", "model": m, "pe": pe, "dim": d, **SETTING,
                        "seeds": "111 222 333", "n_seeds": 3, **_metric("cosine", _vals(70 + k * 4 + p * 2 + j))}
                       for k, m in enumerate(("lstm", "gru")) for p, pe in enumerate(("none", "sinusoidal"))
                       for j, d in enumerate((8, 32))],
    }


def _keeping(mp):
    """Figures are kept (file name → Figure) instead of saved, then closed."""
    figs: dict = {}
    mp.setattr(figkit, "_save", lambda fig, path: figs.__setitem__(path.name, fig))
    yield figs
    for fig in figs.values():
        plt.close(fig)


@pytest.fixture
def kept(monkeypatch):
    yield from _keeping(monkeypatch)


@pytest.fixture(scope="module")
def figures(tmp_path_factory):
    """Every registered figure, drawn once from the fabricated tables."""
    with pytest.MonkeyPatch.context() as mp:
        for figs in _keeping(mp):
            plots._draw(tables(), tmp_path_factory.mktemp("figs"))
            assert set(figs) == {"fig2_vocab.png", "dual_frequency.png", "stability.png", "pe_forms.png",
                                 "double_vanilla.png", "extend_vocab.png", "length_v2.png", "autoregression.png",
                                 "continuous.png", "delayed_add.png", "predecessor.png", "pattern_count.png",
                                 "stability_mid.png", "mqar_vocab.png", "mamba_conv.png"}
            yield figs


def texts(fig) -> list[str]:
    """The figure's visible texts, each with its wrapping undone."""
    return [" ".join(t.get_text().split()) for t in fig.findobj(Text) if t.get_visible() and t.get_text()]


def drawn_intervals(fig) -> list[tuple[float, float]]:
    """Every interval drawn as error bars or bands, as (low, high) rounded, sorted."""
    out = []
    for ax in fig.axes:
        for c in ax.collections:
            if c.get_gid() != "interval":
                continue
            if isinstance(c, LineCollection):
                out += [(seg[:, 1].min(), seg[:, 1].max()) for seg in c.get_segments()]
            elif isinstance(c, PolyCollection):
                v = c.get_paths()[0].vertices
                out += [(v[v[:, 0] == x, 1].min(), v[v[:, 0] == x, 1].max()) for x in np.unique(v[:, 0])]
    return sorted((round(float(a), 6), round(float(b), 6)) for a, b in out)


def same(a, b) -> bool:
    return len(a) == len(b) and bool(np.allclose(np.array(a, dtype=float).reshape(-1),
                                                 np.array(b, dtype=float).reshape(-1), atol=1e-6))


def expected_intervals(rows, metric: str) -> list[tuple[float, float]]:
    out = []
    for r in rows:
        _, lo, hi = t_interval([float(v) for v in str(r[f"{metric}_by_seed"]).split()])
        out.append((round(lo, 6), round(hi, 6)))
    return sorted(out)


def test_every_bar_and_band_is_the_t_interval_of_the_seeds_not_the_tables_ci(figures):
    t = tables()
    acc = lambda rows: expected_intervals(rows, "token_accuracy")
    fig2_rows = t["fig2"]
    beside = [r for r in fig2_rows if r["model"] == "lstm" and r["vocab_size"] == 16]
    want = {
        "fig2_vocab.png": sorted(acc(fig2_rows) + expected_intervals(fig2_rows, "damerau_levenshtein")),
        "dual_frequency.png": acc(t["dual"]), "extend_vocab.png": acc(t["extend"]),
        "pe_forms.png": acc(beside + t["forms"]), "double_vanilla.png": acc(beside + t["double"]),
        "length_v2.png": acc(t["length"]), "stability.png": expected_intervals(t["stability"], "stability"),
        "autoregression.png": acc(t["autoreg"]), "continuous.png": expected_intervals(t["continuous"], "cosine"),
    }
    for name, expected in want.items():
        got = drawn_intervals(figures[name])
        assert same(got, expected), name
        ci = [(r.get("token_accuracy_ci_low"), r.get("token_accuracy_ci_high")) for r in t["fig2"]]
        assert not set(got) & {(round(a, 6), round(b, 6)) for a, b in ci}, name


def test_no_figure_calls_an_interval_95_percent_unless_it_is_the_t_interval(figures):
    for name, fig in figures.items():
        words = " ".join(texts(fig))
        assert "CI" not in words and "bootstrap" not in words, name
        assert re.findall(r"95%[^\n]{0,11}", words), name  # named …
        assert all(m.startswith("95% t interval") for m in re.findall(r"95%[^\n]{0,11}", words)), name  # … as it is


def test_every_figure_states_its_seed_count_and_names_its_bars_in_the_legend(figures):
    for name, fig in figures.items():
        assert "mean of 3 seeds" in " ".join(texts(fig)), name
        legends = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
        assert "95% t interval over 3 seeds" in legends, name


def test_the_seed_count_and_interval_follow_the_table(kept, tmp_path):
    five = [acc_row("lstm", pe, _vals(p, n=5)) for p, pe in enumerate(("none", "sinusoidal"))]
    plots.fig_bars(five, tmp_path / "five.png", "five seeds")
    words = " ".join(texts(kept["five.png"]))
    assert "mean of 5 seeds" in words and "95% t interval over 5 seeds" in words and "3 seeds" not in words
    assert same(drawn_intervals(kept["five.png"]), expected_intervals(five, "token_accuracy"))


def test_one_seed_draws_no_bar_and_says_so(kept, tmp_path):
    rows = [acc_row("lstm", pe, [0.4 + 0.1 * p]) for p, pe in enumerate(("none", "sinusoidal"))]
    plots.fig_bars(rows, tmp_path / "one.png", "one seed")
    fig = kept["one.png"]
    assert drawn_intervals(fig) == []
    words = " ".join(texts(fig))
    assert "mean of 1 seed;" in words and "1 seed: no bar" in words and "95%" not in words


def test_a_row_without_per_seed_values_is_drawn_as_the_range_of_its_seeds(kept, tmp_path):
    rows = [{k: v for k, v in acc_row("lstm", "none", [0.2, 0.3, 0.7]).items() if not k.endswith("_by_seed")}]
    rows[0].update(token_accuracy_min=0.2, token_accuracy_max=0.7)
    bare = {k: v for k, v in rows[0].items() if not k.endswith(("_min", "_max"))}
    plots.fig_bars([rows[0], {**bare, "pe": "sinusoidal"}], tmp_path / "r.png", "ranges")
    fig = kept["r.png"]
    assert same(drawn_intervals(fig), [(0.2, 0.7)])  # the bare row (no per-seed values, no range): no bar
    words = " ".join(texts(fig))
    assert "range of 3 seeds" in words and "no bar where no per-seed values" in words and "95%" not in words


def test_a_per_seed_column_that_does_not_match_the_seeds_is_refused(tmp_path):
    row = acc_row("lstm", "none", [0.2, 0.3, 0.7], token_accuracy_by_seed="0.2 0.3")
    with pytest.raises(PosrnnError, match="token_accuracy_by_seed .* not one finite number per seed"):
        plots.fig_bars([row], tmp_path / "x.png", "bad")
    assert not (tmp_path / "x.png").exists()


def chance_lines(fig) -> list[tuple[str, list[float]]]:
    out = []
    for ax in fig.axes:
        for a in ax.lines + ax.collections:
            if a.get_gid() == "chance":
                ys = list(a.get_ydata()) if hasattr(a, "get_ydata") else [s[0][1] for s in a.get_segments()]
                out.append((a.get_label(), [float(y) for y in ys]))
    return out


def test_chance_lines_are_drawn_at_one_over_v_on_token_accuracy(figures):
    want = {"dual_frequency.png": [1 / 32], "pe_forms.png": [1 / 16], "double_vanilla.png": [1 / 16],
            "extend_vocab.png": [1 / 64], "length_v2.png": [1 / 2]}
    for name, levels in want.items():
        lines = chance_lines(figures[name])
        assert lines and all(set(ys) == set(levels) and "chance 1/V" in label for label, ys in lines), name
    fig2 = chance_lines(figures["fig2_vocab.png"])
    # one per model: 1/V at each V
    assert len(fig2) == 3 and all(ys == pytest.approx([1 / 16, 1 / 64]) for _, ys in fig2)
    assert chance_lines(figures["stability.png"]) == [] and chance_lines(figures["continuous.png"]) == []
    autoreg = chance_lines(figures["autoregression.png"])
    assert len(autoreg) == 2 and all(ys == pytest.approx([1 / 16, 1 / 64]) for _, ys in autoreg)  # one per task panel


def test_no_chance_line_where_it_is_not_defined(kept, tmp_path):
    plots.fig_bars([acc_row("lstm", "none", [0.3, 0.4], task="delayed-add")], tmp_path / "c.png", "delayed-add")
    plots.fig_bars([acc_row("lstm", "none", [0.3, 0.4])], tmp_path / "r.png", "reverse")
    assert chance_lines(kept["c.png"]) == [] and chance_lines(kept["r.png"])


def test_every_declared_floor_is_drawn(kept, tmp_path):
    """Each task ``tasks.floors`` declares lines for draws them on its token-accuracy axis: copy
    (chance and recall-last) as reversal does."""
    from posrnn_cli.tasks import floors

    assert set(figkit.CHANCE_TASKS) == set(floors.TASK_LINES)
    row = acc_row("lstm", "none", [0.3, 0.4], task="copy")
    plots.fig_bars([row], tmp_path / "c.png", "copy")
    gids = {ln.get_gid() for ax in kept["c.png"].axes for ln in ax.lines}
    assert chance_lines(kept["c.png"]) and {"chance", "baseline"} <= gids
    assert figkit.baseline_level(row).name == "recall-last"


def _mean_lines(fig):
    """The lines of means (error bars' caps and the chance line are not in the legend)."""
    return [ln for ax in fig.axes for ln in ax.lines
            if ln.get_gid() not in ("chance", "baseline") and not ln.get_label().startswith("_")]


@pytest.mark.parametrize("what", ["length", "fig2"])
def test_a_one_point_sweep_is_drawn_as_points_on_a_linear_axis(kept, tmp_path, what):
    for n in (1, 2):
        if what == "length":
            rows = [acc_row("lstm", pe, _vals(p + j), V=2, length=L) for p, pe in enumerate(("none", "sinusoidal"))
                    for j, L in enumerate((8, 16)[:n])]
            plots.fig_length(rows, tmp_path / f"{n}.png")
        else:
            rows = [acc_row("gru", pe, _vals(p + j), V=V) for p, pe in enumerate(("none", "sinusoidal"))
                    for j, V in enumerate((16, 64)[:n])]
            plots.fig_vocab(rows, tmp_path / f"{n}.png")
    one, two = kept["1.png"], kept["2.png"]
    assert _mean_lines(one) and all(ln.get_linestyle() == "None" and ln.get_marker() == "o" for ln in _mean_lines(one))
    assert all(ax.get_xscale() == "linear" for ax in one.axes)
    assert all(ln.get_linestyle() == "-" for ln in _mean_lines(two))  # the flip: two points make a line
    assert all(ax.get_xscale() == "log" for ax in two.axes)


def _columns(fig) -> int:
    return len({round(ax.get_position().x0, 2) for ax in fig.axes})


def test_many_panels_wrap_into_a_grid(figures):
    fig = figures["stability.png"]
    assert len(fig.axes) == 16 and _columns(fig) == figkit.MAX_COLUMNS == 4  # 8 arms × 2 pairs, 4 arms a row
    assert fig.get_figwidth() * figkit._DPI <= 2000


def test_few_panels_stay_in_one_row(kept, tmp_path):
    plots.fig_stability(stability_rows(EIGHT_ARMS[:3]), tmp_path / "s.png")
    fig = kept["s.png"]
    assert len(fig.axes) == 6 and _columns(fig) == 3


def _reading_order(fig) -> list[str]:
    axes = sorted(fig.axes, key=lambda ax: (-round(ax.get_position().y1, 2), ax.get_position().x0))
    return [ax.get_title() for ax in axes if ax.get_title()]


def _models_named(words: list[str]) -> list[str]:
    names = [figkit.model_label(m) for m in figkit.MODEL_ORDER]
    found = [next((n for n in names if re.match(rf"{re.escape(n)}\b", w)), None) for w in words]
    return list(dict.fromkeys(n for n in found if n))


def test_one_model_order_in_every_figure(figures):
    order = [figkit.model_label(m) for m in figkit.MODEL_ORDER]

    def in_registry_order(models):
        return models == sorted(models, key=order.index) and len(models) > 1

    assert _models_named(_reading_order(figures["fig2_vocab.png"])) == ["GRU", "LSTM", "Mamba"]
    assert _models_named(_reading_order(figures["dual_frequency.png"])) == ["GRU", "LSTM"]
    assert _models_named(_reading_order(figures["stability.png"])) == ["GRU", "S4D", "Mamba", "minGRU"]
    assert _models_named(_reading_order(figures["continuous.png"])) == ["GRU", "LSTM"]
    ticks = [t.get_text() for t in figures["extend_vocab.png"].axes[0].get_xticklabels()]
    assert _models_named(ticks) == ["GRU", "Mamba"]
    for name in ("fig2_vocab.png", "dual_frequency.png", "stability.png"):
        assert in_registry_order(_models_named(_reading_order(figures[name]))), name


def assert_text_inside(fig) -> None:
    """Everything drawn (titles, legends, tick labels) lies inside the image."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    drawn = fig.get_tightbbox(renderer)  # inches
    w, h = fig.get_size_inches()
    assert drawn.x0 >= -0.01 and drawn.y0 >= -0.01 and drawn.x1 <= w + 0.01 and drawn.y1 <= h + 0.01, (drawn, w, h)
    title = fig.get_suptitle() and fig._suptitle.get_window_extent(renderer)
    assert title and 0 <= title.x0 and title.x1 <= fig.bbox.x1 and title.y1 <= fig.bbox.y1


def test_no_text_is_clipped(figures):
    for fig in figures.values():
        assert_text_inside(fig)


@pytest.mark.parametrize("n_bars", [1, 2, 3, 6])
def test_bar_titles_are_not_clipped(kept, tmp_path, n_bars):
    rows = [acc_row("lstm", pe, _vals(k)) for k, pe in
            enumerate(["none", "sinusoidal", "random", "learnable", "dummy", "phase"][:n_bars])]
    plots.fig_bars(rows, tmp_path / "f.png",
                   "Vocabulary extension: accuracy on sequences of new ids only (frozen trained weights)")
    assert_text_inside(kept["f.png"])


def test_the_single_run_stability_plot_fits_and_says_what_its_band_is(kept, tmp_path):
    """``posrnn stability --plot`` draws one run's rows: no seeds, a bootstrap over its triplets."""
    rows = [{k: v for k, v in r.items() if k not in ("seeds", "stability_by_seed")} | {"n_seeds": 1, "n_triplets": 16}
            for r in stability_rows([("lstm", "none")], n=1)]
    plots.fig_stability(rows, tmp_path / "one.png")
    fig = kept["one.png"]
    assert_text_inside(fig)
    words = " ".join(texts(fig))
    assert "95% bootstrap interval over 16 triplets of one run" in words and "seeds" not in words
    assert same(drawn_intervals(fig), sorted((r["ci_low"], r["ci_high"]) for r in rows))
    assert not math.isnan(drawn_intervals(fig)[0][0])


def test_matplotlibs_font_warnings_stay_off_the_commands_stderr():
    """A fresh font cache makes matplotlib log every missing font family (STIX, …) as a warning;
    the console entry point keeps those off stderr, where a failing command's one line goes."""
    import logging

    from posrnn_cli.cli import run

    logging.getLogger("matplotlib").setLevel(logging.NOTSET)
    with pytest.raises(SystemExit):
        run(["--version"])
    assert logging.getLogger("matplotlib.font_manager").getEffectiveLevel() == logging.ERROR


def test_the_autoregression_figure_tells_the_feedback_modes_apart(figures):
    """Colour is the PE form; the line style and marker are the feedback (solid circles: self-fed)."""
    lines = {ln.get_label(): ln for ln in _mean_lines(figures["autoregression.png"])}
    assert (lines["vanilla, self-feedback"].get_linestyle(), lines["vanilla, self-feedback"].get_marker()) == ("-", "o")
    truth = lines["PE (sinusoidal), ground-truth feedback"]
    assert (truth.get_linestyle(), truth.get_marker()) == ("--", "s")
    assert truth.get_color() == figkit.pe_color("sinusoidal")


def test_the_map_is_one_panel_a_core_with_an_arm_a_line_and_its_chance_curve(kept, tmp_path):
    """The map (several cores, three V): a panel per core in the registry's order, x = V, one line
    per {PE} × {convolution on (solid), off (dashed)}, each at its rows' means with their t
    intervals, and the chance curve 1/V."""
    cores = ("xlstm", "mamba")
    rows = [acc_row(m, pe, _vals(k * 12 + c * 6 + p * 3 + j), V=V, conv=conv)
            for k, m in enumerate(cores) for c, conv in enumerate((True, False))
            for p, pe in enumerate(("none", "sinusoidal")) for j, V in enumerate((16, 64, 256))]
    plots.draw_mamba_conv({"mamba_conv": rows}, tmp_path / "map.png")
    fig = kept["map.png"]
    panels = [ax for ax in fig.axes if ax.lines]
    assert [ax.get_title().split(" (")[0] for ax in panels] == [figkit.model_label(m)
                                                                for m in figkit.models_in_order(rows)]
    for ax, model in zip(panels, figkit.models_in_order(rows)):
        lines = {ln.get_label(): ln for ln in ax.lines if ln.get_gid() is None and not ln.get_label().startswith("_")}
        assert set(lines) == {f"{figkit.pe_label(pe)}, {c}" for pe in ("none", "sinusoidal")
                              for c in ("conv", "no conv")}
        for label, ln in lines.items():
            conv = not label.endswith("no conv")
            assert ln.get_linestyle() == ("-" if conv else "--")
            pe = "none" if label.startswith(figkit.pe_label("none")) else "sinusoidal"
            want = [r["token_accuracy"] for r in rows if r["model"] == model and r["conv"] == conv and r["pe"] == pe]
            assert list(ln.get_xdata()) == [16, 64, 256] and same(ln.get_ydata(), want)
    assert drawn_intervals(fig) == expected_intervals(rows, "token_accuracy")
    assert (all(ys == pytest.approx([1 / 16, 1 / 64, 1 / 256]) for _, ys in chance_lines(fig))
            and len(chance_lines(fig)) == 2)


def _notes(fig) -> list[str]:
    return [" ".join(t.get_text().split()) for ax in fig.axes for t in ax.texts if t.get_gid() == "note"]


def _equal_to(rows: list[dict], model: str, cond: str, other: str, pair: Optional[str] = None) -> None:
    for r in rows:
        if r["model"] == model and r["condition"] == cond and pair in (None, r["pair"]):
            twin = next(o for o in rows if (o["model"], o["pair"], o["step"], o["condition"]) ==
                        (r["model"], r["pair"], r["step"], other))
            r.update({k: twin[k] for k in ("stability", "stability_by_seed", "ci_low", "ci_high")})


def test_equal_stability_lines_and_values_one_by_construction_are_said(kept, tmp_path):
    """A panel whose conditions give exactly equal values says which and draws the later ones
    dashed over the first (both stay visible); a core whose stability is 1 by construction says
    so; a panel with distinct lines says nothing."""
    rows = stability_rows([("gru", "none"), ("mingru", "none")])
    _equal_to(rows, "gru", "F/R", "F/F")
    for r in rows:
        if r["model"] == "mingru":
            r.update(stability=1.0, stability_by_seed="1 1 1", ci_low=1.0, ci_high=1.0)
    plots.fig_stability(rows, tmp_path / "s.png")
    fig = kept["s.png"]
    notes = _notes(fig)
    assert notes.count("equal values, dashed over the first: F/F = F/R") == 2  # both pairs of the GRU
    assert sum("by construction" in n for n in notes) == 2 and sum("F/F = F/R = R/F = R/R" in n for n in notes) == 2
    gru = [ax for ax in fig.axes if ax.get_title().startswith("GRU")]
    for ax in gru:  # F/R drawn dashed, with its own marker, over the solid F/F
        styles = [(ln.get_linestyle(), ln.get_marker()) for ln in ax.lines if len(ln.get_xdata())]
        assert styles == [("-", "o"), ("--", "x"), ("-", "o"), ("-", "o")], styles
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend[:4] == ["F/F", "F/R", "R/F", "R/R"]  # every condition named, though the panel dashes three
    plots.fig_stability(stability_rows([("gru", "none")]), tmp_path / "t.png")
    assert _notes(kept["t.png"]) == []


def test_a_panel_at_one_throughout_says_why_and_equal_disturbants_are_named(kept, tmp_path):
    """As the Gated DeltaNet's panels read: its common-suffix pair is 1 at every step (the pair
    shares the inputs after the target, and its output is affine in the state), and conditions
    with the same disturbants give equal values (the target does not change the Jacobian)."""
    rows = stability_rows([("gru", "none")])
    _equal_to(rows, "gru", "R/F", "F/F", "common_target")
    _equal_to(rows, "gru", "R/R", "F/R", "common_target")
    for r in rows:
        if r["pair"] == "common_suffix":
            r.update(stability=1.0, stability_by_seed="1 1 1", ci_low=1.0, ci_high=1.0)
    plots.fig_stability(rows, tmp_path / "s.png")
    notes = _notes(kept["s.png"])
    assert sum(n.startswith("1 at every step: the pair shares every input after the target") for n in notes) == 1
    assert "equal values, dashed over the first: F/F = R/F; F/R = R/R (the same disturbants: the target does not " \
           "change the Jacobian)" in notes


def test_the_baseline_line_a_reader_would_name_is_drawn_and_named(kept, tmp_path):
    """Beside chance, each token-accuracy axis draws the highest line a baseline model reaches
    (``tasks.floors``), named: recall-last for reversal (a curve over V), order-blind for the
    predecessor query."""
    from posrnn_cli.tasks import floors

    rows = [acc_row("gru", pe, _vals(p + j), V=V) for p, pe in enumerate(("none", "sinusoidal"))
            for j, V in enumerate((16, 64))]
    plots.fig_vocab(rows, tmp_path / "v.png")
    drawn = [(ln.get_label(), list(ln.get_ydata())) for ax in kept["v.png"].axes for ln in ax.lines
             if ln.get_gid() == "baseline"]
    L = rows[0]["length"]
    want = [floors.recall_last_line(floors.Cell("reverse", V, L)) for V in (16, 64)]
    assert drawn and all(label == "recall-last" and ys == pytest.approx(want) for label, ys in drawn)
    pred = [acc_row("lstm", pe, _vals(p), task="predecessor") for p, pe in enumerate(("none", "sinusoidal"))]
    assert figkit.baseline_level(pred[0]).name == "order-blind"
    assert figkit.baseline_level(pred[0]).value == pytest.approx(1 / (L - 1))
