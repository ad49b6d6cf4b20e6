"""The figures, drawn from the aggregated tables (``results/<profile>/tables/*.csv``) with
matplotlib's Agg backend. A figure is drawn only when its table exists.

What every figure shows, and says it shows:

- Each point or bar is the mean over seeds, and the figure states how many seeds ("mean of 3
  seeds") in its title.
- Each error bar or band is the 95% Student-t interval over seeds (``common.results.stats.t_interval``),
  computed here from the table's per-seed column (``<metric>_by_seed``, one value per ``seeds``):
  the interval the scorecard's verdicts read, named in the legend. (A verdict reads it on the
  per-seed differences between two arms, which can be narrower than either arm's bar: bars that
  overlap do not mean "no difference".) The tables' ``*_ci_low``/``*_ci_high`` columns (the
  hierarchical bootstrap) are not drawn: over 3 seeds they are the seeds' minimum and maximum,
  about 75% coverage.
- A row without per-seed values but with ``<metric>_min``/``_max`` gets a bar labelled "range of
  N seeds". With one seed, or no per-seed values at all, there is no bar, and the figure says so.
- ``posrnn stability --plot`` draws a single run: its band is the 95% bootstrap interval over
  that run's triplets, and is labelled so.
- Token-accuracy axes of every task ``tasks.floors`` declares lines for (reverse, copy, sort,
  predecessor, MQAR) carry those floor lines: chance (1/V, a uniform guess; 1/P for MQAR, a guess among the
  values in context), dashed, and the highest line a baseline model reaches, dotted and named
  (recall-last for reverse and copy, order-blind for predecessor, position for sorting and MQAR). The
  scorecard reads the same lines: a comparison with any arm not shown above them is "not testable".
- Models appear in one order everywhere (``MODEL_ORDER``: the model registry's), PE forms in
  the catalogue's; at most ``MAX_COLUMNS`` panels a row; titles wrap to the figure's width; a
  sweep over a single value is drawn as points on a linear axis, never as a line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from ..common import catalog
from ..common.errors import PosrnnError
from ..common.stages.experiments import EXPERIMENTS, resolve
from ..common.files.io import read_csv, write_owned_together
from ..common.results.tables import check_table
from .aggregate import DUAL_CONDITIONS
from .figkit import (
    pe_label, pe_color, model_label, models_in_order, model_key, pe_key, arm_key, pyplot, collecting, save_bytes,
    Spread, seed_count, spread, describe, errorbars, draw_series, sweep_axis, draw_floors, add_legend, panel_grid,
    ax_title,
    finish)

# ---- the figures ------------------------------------------------------------------------------
#: the columns each figure reads from its table (the experiment registry's ``Figure.columns``)
COLUMNS = {e.name: e.figure.columns for e in EXPERIMENTS.values() if e.figure is not None and e.figure.columns}


def _pe_sorted(pes) -> list[str]:
    return catalog.order(catalog.PE_FORMS, pes)


def _setting(r: dict) -> str:
    """The training setting of a row (the seed count is in the figure's title)."""
    return f"H={r['hidden_size']}, L={r['length']}, {r['iterations']:,} it, batch {r['batch_size']}"


def fig_vocab(rows: list[dict], path: Path, task: str = "Reverse ordering",
              setting: Callable[[dict], str] = _setting) -> None:
    """Fig. 2: token accuracy (top) and Damerau–Levenshtein distance (bottom) vs V, per model
    (``task`` names the task in the title; ``setting`` describes a model's training setting)."""
    models = models_in_order(rows)
    fig, items = panel_grid(len(models), rows_each=2, w=4.6, h=3.0)
    spreads: list[Spread] = []
    for model, (acc, dl) in zip(models, items):
        mrows = [r for r in rows if r["model"] == model]
        for pe in _pe_sorted(r["pe"] for r in mrows):
            rs = sorted((r for r in mrows if r["pe"] == pe), key=lambda r: r["vocab_size"])
            for ax, key in ((acc, "token_accuracy"), (dl, "damerau_levenshtein")):
                spreads += draw_series(ax, [r["vocab_size"] for r in rs], rs, key, pe_color(pe), pe_label(pe))
        draw_floors(acc, [r["vocab_size"] for r in mrows], mrows, half=None)
        for ax, ylabel in ((acc, "token accuracy"), (dl, "Damerau–Levenshtein distance")):
            sweep_axis(ax, [r["vocab_size"] for r in mrows])
            ax.set_ylabel(ylabel)
            ax.set_xlabel("vocabulary size V")
            ax.grid(alpha=0.3)
        ax_title(acc, f"{model_label(model)} ({setting(mrows[0])})")
    note, name = describe(spreads)
    add_legend(items[0][0], name)
    finish(fig, f"{task}: accuracy and edit distance vs vocabulary size ({note})", path)


def fig_dual(rows: list[dict], path: Path) -> None:
    """The dual-frequency grid: accuracy on the target token per (target kind / disturbant kind)."""
    models = models_in_order(rows)
    fig, items = panel_grid(len(models), w=5.2, h=3.6)
    spreads: list[Spread] = []
    for model, (ax,) in zip(models, items):
        pes = _pe_sorted(r["pe"] for r in rows if r["model"] == model)
        width = 0.8 / len(pes)
        for k, pe in enumerate(pes):
            rs = [next(r for r in rows if r["model"] == model and r["pe"] == pe and r["condition"] == c
                       and r.get("half", "all") == "all") for c in DUAL_CONDITIONS]
            xs = [i + (k - (len(pes) - 1) / 2) * width for i in range(len(DUAL_CONDITIONS))]
            ax.bar(xs, [r["token_accuracy"] for r in rs], width, color=pe_color(pe), label=pe_label(pe))
            spreads += [spread(r, "token_accuracy") for r in rs]
            errorbars(ax, xs, [r["token_accuracy"] for r in rs], spreads[-len(rs):], "black")
        draw_floors(ax, list(range(len(DUAL_CONDITIONS))), rs)
        ax.set_xticks(range(len(DUAL_CONDITIONS)), [f"{c[0]} target\n{c[2]} disturbants" for c in DUAL_CONDITIONS],
                      fontsize=8)
        ax.set_ylabel("accuracy on the target token")
        ax.set_ylim(0, 1.3)
        ax.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
        ax.grid(alpha=0.3, axis="y")
        ax_title(ax, f"{model_label(model)}, V={rs[0]['vocab_size']}, rarity={rs[0]['rarity']:g} ({_setting(rs[0])})")
    note, name = describe(spreads)
    for (ax,) in items:
        add_legend(ax, name, loc="upper center", ncol=2)
    finish(fig, f"Dual-frequency vocabulary: F = Frequent half, R = Rare half ({note})", path)


def _conditions(rows: list[dict]) -> list[str]:
    names = list(dict.fromkeys(r["condition"] for r in rows))
    return sorted(names, key=lambda c: (DUAL_CONDITIONS.index(c) if c in DUAL_CONDITIONS else len(DUAL_CONDITIONS), c))


#: the characters of one line of a stability panel's note (fontsize 6 in a panel 4.2 inches wide)
NOTE_COLUMNS = 50
#: why a panel of a core not 1 by construction reads 1 at every step, by its pair
FLAT_ONE = {
    "common_suffix": "1 at every step: the pair shares every input after the target, so equal Jacobians for "
                     "any target mean h_2L is affine in z_t (a state update linear in the state)",
    "common_target": "1 at every step: each pair's two Jacobians point the same way, row by row",
}


def _panel_notes(ax, model: str, drawn: dict[str, tuple], pair: str = "") -> None:
    """What a stability panel cannot show by itself, written in it (gid "note"): conditions whose
    values are exactly equal (drawn dashed over the first), values that are 1 by construction, and
    a panel at 1 throughout, with why."""
    notes = []
    if model in catalog.ONE_BY_CONSTRUCTION:
        notes.append("1 by construction (diagonal positive state Jacobian): measures nothing")
    elif drawn and all(float(v) == 1.0 for series in drawn.values() for _, v, _ in series):
        notes.append(FLAT_ONE.get(pair, "1 at every step"))
    firsts: dict[tuple, list[str]] = {}
    for cond, series in drawn.items():
        firsts.setdefault(series, []).append(cond)
    groups = [conds for conds in firsts.values() if len(conds) > 1]
    if groups:
        shared = all(len({c.split("/")[-1] for c in conds}) == 1 and "/" in conds[0] for conds in groups)
        why = " (the same disturbants: the target does not change the Jacobian)" if shared else ""
        notes.append(f"equal values, dashed over the first: {'; '.join(' = '.join(c) for c in groups)}{why}")
    if notes:  # wrapped to the panel's width; bottom right, clear of an early dip
        import textwrap

        text = "\n".join(textwrap.fill(n, NOTE_COLUMNS) for n in notes)
        ax.text(0.98, 0.02, text, transform=ax.transAxes, fontsize=6, va="bottom", ha="right", color="0.25",
                gid="note")


def fig_stability(rows: list[dict], path: Path) -> None:
    """Fig. 5: gradient stability over training, per arm (model, PE), each with its two pairs
    stacked; a single run's rows (``posrnn stability --plot``) or a table's over seeds."""
    import matplotlib as mpl

    arms = sorted(dict.fromkeys((r["model"], r["pe"]) for r in rows), key=lambda a: arm_key(*a))
    pairs, conds = ["common_target", "common_suffix"], _conditions(rows)
    colors = {c: mpl.colormaps["tab10"](i % 10) for i, c in enumerate(conds)}
    fig, items = panel_grid(len(arms), rows_each=2, w=4.2, h=2.9, sharey=True)
    spreads: list[Spread] = []
    several = len({r["step"] for r in rows}) > 1
    for (model, pe), panels in zip(arms, items):
        for pair, ax in zip(pairs, panels):
            series = {cond: sorted((r for r in rows if (r["model"], r["pe"], r["pair"], r["condition"])
                                    == (model, pe, pair, cond)), key=lambda r: r["step"]) for cond in conds}
            drawn = {cond: tuple((r["step"], r["stability"], str(r.get("stability_by_seed", ""))) for r in rs)
                     for cond, rs in series.items() if rs}
            for cond in drawn:
                rs, same = series[cond], [c for c in drawn if drawn[c] == drawn[cond]]
                k, n = same.index(cond), len(same)  # the k-th of n equal lines: solid first, then dashes in turn
                style = {"ls": (3 * (k - 1), (3, 3 * (n - 1))), "marker": "x"} if k else {}
                spreads += draw_series(ax, [r["step"] for r in rs], rs, "stability", colors[cond], "_nolegend_",
                                       band=True, **style)
            _panel_notes(ax, model, drawn, pair)
            sweep_axis(ax, [r["step"] for r in rows], log2=False)
            ax_title(ax, f"{model_label(model)} {pe_label(pe)}: {pair.replace('_', ' ')}", fontsize=9)
            ax.grid(alpha=0.3)
            ax.set_xlabel("training iteration")
            ax.set_ylabel("gradient stability")
    mark = "bands" if several else "bars"
    note, name = describe(spreads, mark)
    for cond in conds:  # every condition in the legend, whichever lines the first panel drew dashed
        items[0][0].plot([], [], marker="o", ms=4, color=colors[cond], label=cond)
    add_legend(items[0][0], name, mark, title="target/disturbant", title_fontsize=7)
    at = sorted({int(r.get("target_position") or 1) for r in rows})  # a row without the column: the first token
    where = "" if at == [1] else f"; target at t = {', '.join(map(str, at))}"
    finish(fig, f"Gradient stability over training (row-wise Jacobian similarity; {note}{where})", path, fontsize=9)


def fig_bars(rows: list[dict], path: Path, title: str, key: str = "token_accuracy",
             label: Optional[Callable] = None) -> None:
    """One bar per row (e.g. PE forms, double vanilla, vocabulary extension)."""
    plt = pyplot()
    width = max(4.0, 1.2 * len(rows) + 1.5) + 2.4  # + the legend beside the axes
    spreads = [spread(r, key) for r in rows]
    fig, ax = plt.subplots(figsize=(width, 3.8))
    xs = list(range(len(rows)))
    labels = [(label(r) if label else pe_label(r["pe"])) + f"\n{seed_count(r)} seed{'' if seed_count(r) == 1 else 's'}"
              for r in rows]
    ax.bar(xs, [r[key] for r in rows], color=[pe_color(r["pe"]) for r in rows])
    errorbars(ax, xs, [r[key] for r in rows], spreads, "black")
    if key == "token_accuracy":
        draw_floors(ax, xs, rows)
    ax.set_xticks(xs, labels, fontsize=8)
    ax.set_ylabel(key.replace("_", " "))
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3, axis="y")
    note, name = describe(spreads)
    add_legend(ax, name, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    finish(fig, f"{title} ({note})", path, fontsize=9)


def fig_length(rows: list[dict], path: Path) -> None:
    """The length sweep at V = 2: token accuracy vs L (points only when it holds one length)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    spreads: list[Spread] = []
    pes = _pe_sorted(r["pe"] for r in rows)
    dodge = 0.0 if len({r["length"] for r in rows}) > 1 else 0.12  # one length: the PEs' bars side by side
    for k, pe in enumerate(pes):
        rs = sorted((r for r in rows if r["pe"] == pe), key=lambda r: r["length"])
        xs = [r["length"] + (k - (len(pes) - 1) / 2) * dodge for r in rs]
        spreads += draw_series(ax, xs, rs, "token_accuracy", pe_color(pe), pe_label(pe))
    draw_floors(ax, [r["length"] for r in rows], rows, half=None)
    sweep_axis(ax, [r["length"] for r in rows])
    ax.set_xlabel("input length L")
    ax.set_ylabel("token accuracy")
    ax.grid(alpha=0.3)
    note, name = describe(spreads)
    add_legend(ax, name, loc="lower right")
    r0 = rows[0]
    finish(fig, f"Length sweep, V = {r0['vocab_size']} ({model_label(r0['model'])}, H={r0['hidden_size']}, "
                 f"{r0['iterations']:,} it; {note})", path, fontsize=9)


def fig_sweep(rows: list[dict], path: Path, x: str, key: str, xlabel: str, title: str,
              split: Optional[str] = None) -> None:
    """``key`` vs ``x`` on a log2 axis, a panel per (task, model), a line per PE form (colour) and,
    with ``split`` (e.g. ``feedback``), per value of that column (solid, then dashed)."""
    panels = sorted({(r.get("task", ""), r["model"]) for r in rows}, key=lambda p: (str(p[0]), model_key(p[1])))
    fig, items = panel_grid(len(panels))
    spreads: list[Spread] = []
    for (task, model), (ax,) in zip(panels, items):
        prow = [r for r in rows if r.get("task", "") == task and r["model"] == model]
        kinds = catalog.order(catalog.FEEDBACK, (r[split] for r in prow)) if split else [None]
        for pe in _pe_sorted(r["pe"] for r in prow):
            for k, kind in enumerate(kinds):
                rs = sorted((r for r in prow if r["pe"] == pe and (split is None or r[split] == kind)),
                            key=lambda r: r[x])
                label = pe_label(pe) + (f", {catalog.label(catalog.FEEDBACK, kind)}" if split else "")
                if rs:
                    spreads += draw_series(ax, [r[x] for r in rs], rs, key, pe_color(pe), label,
                                           ls=("-", "--", ":")[k % 3],
                                       marker="os^"[k % 3])
        if key == "token_accuracy":
            draw_floors(ax, [r[x] for r in prow], prow, half=None)
        sweep_axis(ax, [r[x] for r in prow])
        ax.set_xlabel(xlabel)
        ax.set_ylabel(key.replace("_", " "))
        ax.grid(alpha=0.3)
        ax_title(ax, f"{task + ': ' if task and split else ''}{model_label(model)} ({_setting(prow[0])})")
    note, name = describe(spreads)
    add_legend(items[0][0], name, handlelength=3)
    finish(fig, f"{title} ({note})", path)


def _same_setting(a: dict, b: dict) -> bool:
    keys = ("model", "vocab_size", "length", "hidden_size", "iterations", "batch_size")
    return all(a[k] == b[k] for k in keys) and not a.get("rarity") and not b.get("rarity")


def lm_table(rows: list[dict]) -> str:
    lines = ["| model | PE | seeds | test perplexity (min / mean / max) | per seed |", "|---|---|---|---|---|"]
    for r in rows:
        each = ", ".join(f"{s}: {float(v):.2f}"
                         for s, v in zip(str(r["seeds"]).split(), str(r["perplexity_by_seed"]).split()))
        lines.append(f"| {r['model']} | {pe_label(r['pe'])} | {r['n_seeds']} | {float(r['perplexity_min']):.2f} / "
                     f"{float(r['perplexity']):.2f} / {float(r['perplexity_max']):.2f} | {each} |")
    return "\n".join(lines) + "\n"


# ---- the figures the experiment registry names (common.stages.experiments: ``Figure.draw``) ----------
def _beside_fig2(t: dict, name: str) -> list[dict]:
    """``name``'s rows after fig2's vanilla and sinusoidal rows of the same setting, in PE order."""
    rows = [r for r in t.get("fig2", []) if r["pe"] in ("none", "sinusoidal")
            and _same_setting(r, t[name][0])] + t[name]
    return sorted(rows, key=lambda r: arm_key(r["model"], r["pe"]))


def draw_fig2(t: dict, path: Path) -> None:
    fig_vocab(t["fig2"], path)


def draw_delayed(t: dict, path: Path) -> None:
    fig_vocab(t["delayed"], path, "Delayed addition")


def draw_predecessor(t: dict, path: Path) -> None:
    fig_vocab(t["predecessor"], path, "Predecessor query")


def draw_patterns(t: dict, path: Path) -> None:
    """The constant-pattern-count sweep: V = K grows as L falls (K^L fixed), so the setting
    names the pairs instead of one L."""
    pairs = ", ".join(f"({k}, {L})" for k, L in sorted({(r["vocab_size"], r["length"]) for r in t["patterns"]}))
    fig_vocab(t["patterns"], path, f"Constant pattern count, (K, L) in {pairs}",
              setting=lambda r: f"H={r['hidden_size']}, {r['iterations']:,} it, batch {r['batch_size']}")


def draw_mqar(t: dict, path: Path) -> None:
    pairs = ", ".join(str(p) for p in sorted({r.get("pairs", "?") for r in t["mqar"]}, key=str))
    fig_vocab(t["mqar"], path, f"Multi-query associative recall ({pairs} key-value pairs)")


def fig_map(rows: list[dict], path: Path) -> None:
    """The map: one panel per core, token accuracy vs V, one line per arm of {PE} × {its short
    convolution on (solid), off (dashed)}, with the chance line."""
    models = models_in_order(rows)
    fig, items = panel_grid(len(models), w=4.2, h=3.2)
    spreads: list[Spread] = []
    for model, (ax,) in zip(models, items):
        mrows = [r for r in rows if r["model"] == model]
        for conv in (True, False):
            for pe in _pe_sorted({r["pe"] for r in mrows}):
                rs = sorted((r for r in mrows if r["pe"] == pe and bool(r.get("conv", True)) == conv),
                            key=lambda r: r["vocab_size"])
                if rs:
                    spreads += draw_series(ax, [r["vocab_size"] for r in rs], rs, "token_accuracy", pe_color(pe),
                                       f"{pe_label(pe)}, {'conv' if conv else 'no conv'}", ls="-" if conv else "--",
                                       marker="o" if conv else "s")
        draw_floors(ax, [r["vocab_size"] for r in mrows], mrows, half=None)
        sweep_axis(ax, [r["vocab_size"] for r in mrows])
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("vocabulary size V")
        ax.set_ylabel("token accuracy")
        ax.grid(alpha=0.3)
        block = " in its full block" if mrows[0].get("block") == "full" else ""
        ax_title(ax, f"{model_label(model)}{block} ({_setting(mrows[0])})")
    note, name = describe(spreads)
    add_legend(items[0][0], name)
    finish(fig, f"The map, reverse ordering: PE × the short convolution × V ({note})", path)


def draw_mamba_conv(t: dict, path: Path) -> None:
    """Mamba ± its convolution; with several cores or vocabularies (the map), one panel a core."""
    rows = sorted(t["mamba_conv"], key=lambda r: (model_key(r["model"]), r["vocab_size"], not r.get("conv", True),
                                                  pe_key(r["pe"])))
    if len({r["model"] for r in rows}) > 1 or len({r["vocab_size"] for r in rows}) > 2:
        return fig_map(rows, path)
    fig_bars(rows, path, f"Mamba with and without its convolution, reverse ({_setting(rows[0])})",
             label=lambda r: f"{'conv' if r.get('conv', True) else 'no conv'} {pe_label(r['pe'])}\nV {r['vocab_size']}")


def draw_irie(t: dict, path: Path) -> None:
    """Irie's Transformers: accuracy per core, layer count and PE (the permutation shares are in the table)."""
    rows = sorted(t["irie"], key=lambda r: (model_key(r["model"]), r["layers"], pe_key(r["pe"])))
    fig_bars(rows, path, f"Irie's task: Transformers by layers ({_setting(rows[0])})",
             label=lambda r: f"{model_label(r['model'])}\n{r['layers']} layer{'' if r['layers'] == 1 else 's'} "
                             f"{pe_label(r['pe'])}")


def draw_dual(t: dict, path: Path) -> None:
    fig_dual(t["dual"], path)


def draw_stability(t: dict, path: Path) -> None:
    fig_stability(t["stability"], path)


def draw_stability_mid(t: dict, path: Path) -> None:
    fig_stability(t["stability_mid"], path)


def draw_forms(t: dict, path: Path) -> None:
    rows = _beside_fig2(t, "forms")
    fig_bars(rows, path, f"PE forms ({model_label(rows[0]['model'])}, V={rows[0]['vocab_size']}, {_setting(rows[0])})")


def draw_double(t: dict, path: Path) -> None:
    rows = _beside_fig2(t, "double")
    fig_bars(rows, path, f"Double vanilla control ({model_label(rows[0]['model'])}, V={rows[0]['vocab_size']}, "
                         f"{_setting(rows[0])})")


def draw_extend(t: dict, path: Path) -> None:
    rows = sorted(t["extend"], key=lambda r: (model_key(r["model"]), r["base_vocab"], pe_key(r["pe"])))
    fig_bars(rows, path, "Vocabulary extension: accuracy on sequences of new ids only (frozen trained weights)",
             label=lambda r: f"{model_label(r['model'])} {pe_label(r['pe'])}\nV {r['base_vocab']}+{r['extra_vocab']}")


def draw_length(t: dict, path: Path) -> None:
    fig_length(t["length"], path)


def draw_lm(t: dict, path: Path) -> None:
    save_bytes(path, lm_table(t["lm"]).encode())


def draw_autoreg(t: dict, path: Path) -> None:
    fig_sweep(t["autoreg"], path, "vocab_size", "token_accuracy", "vocabulary size V",
              "Autoregressive output phase: accuracy vs vocabulary size, self-fed vs ground-truth-fed",
              split="feedback")


def draw_continuous(t: dict, path: Path) -> None:
    fig_sweep(t["continuous"], path, "dim", "cosine", "dimension d of the unit vectors",
              "Infinite vocabulary: mean per-token cosine of reversed unit vectors vs dimension")


def draw_all(results: Path, out_dir: Path) -> list[Path]:
    """Draw the figure of every experiment whose table exists in ``results``, each checked first
    (``check_table``); every figure is drawn before the first replaces an old one. Returns the files."""
    results, out_dir = Path(results), Path(out_dir)
    t = {}
    for p in sorted(results.glob("*.csv")):
        rows = read_csv(p)
        t[p.stem] = check_table(rows, p, COLUMNS.get(p.stem, ()), what=f"{p.stem} table",
                                fix="re-run `posrnn aggregate` (or dvc repro) to rewrite it")
    if out_dir.exists() and not out_dir.is_dir():
        raise PosrnnError(f"--out {out_dir} is a file, not a directory; pass another --out")
    with collecting() as files:
        drawn = _draw(t, out_dir)
    write_owned_together(files)  # every figure drawn before the first replaces an old one
    return drawn


def _draw(t: dict, out_dir: Path) -> list[Path]:
    drawn: list[Path] = []
    for exp in EXPERIMENTS.values():
        if exp.figure is not None and t.get(exp.name):
            path = out_dir / exp.figure.file
            try:
                resolve(exp.figure.draw)(t, path)
            except (KeyError, TypeError, ValueError, ZeroDivisionError, StopIteration, IndexError) as e:
                raise PosrnnError(f"cannot draw {exp.figure.file} from its table ({type(e).__name__}: {str(e)[:80]}); "
                                  f"re-run `posrnn aggregate` to rewrite the tables") from None
            drawn.append(path)
    return drawn
