"""The figures, drawn from the aggregated tables (``results/<profile>/*.csv``) with
matplotlib's Agg backend. Every error bar / band is the hierarchical 95% bootstrap CI (seeds,
then sequences within each seed) that ``posrnn aggregate`` computed. A figure is drawn only when its table exists.
"""

from __future__ import annotations

import io
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Callable, Optional

from ..common import catalog
from ..common.errors import PosrnnError
from ..common.experiments import EXPERIMENTS, resolve
from ..common.io import atomic_write_bytes, atomic_write_text, check_table, read_csv, write_files_together
from .aggregate import DUAL_CONDITIONS

PE_ORDER = list(catalog.PE_FORMS)


def pe_label(pe: str) -> str:
    return catalog.label(catalog.PE_FORMS, pe)


def pe_color(pe: str) -> str:
    return catalog.color(catalog.PE_FORMS, pe)


def model_label(model: str) -> str:
    return catalog.label(catalog.CORES, model)


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


#: while ``draw_all`` runs: the figures drawn so far (path → bytes), written together at the end
_pending: Optional[dict] = None


def _save(fig, path: Path) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    _plt().close(fig)
    if _pending is not None:
        _pending[Path(path)] = buf.getvalue()
    else:
        atomic_write_bytes(Path(path), buf.getvalue())


_CELL = ("model", "pe", "hidden_size", "length", "iterations", "batch_size")
_ACC = ("token_accuracy", "token_accuracy_ci_low", "token_accuracy_ci_high")
#: the columns each figure reads from its table
COLUMNS = {
    "fig2": (*_CELL, "vocab_size", *_ACC, "damerau_levenshtein", "damerau_levenshtein_ci_low", "damerau_levenshtein_ci_high"),
    "dual": (*_CELL, "vocab_size", "rarity", "condition", *_ACC),
    "stability": ("model", "pe", "step", "condition", "pair", "stability", "ci_low", "ci_high"),
    "forms": (*_CELL, "vocab_size", *_ACC),
    "double": (*_CELL, "vocab_size", *_ACC),
    "extend": ("model", "pe", "base_vocab", "extra_vocab", *_ACC),
    "length": (*_CELL, "vocab_size", *_ACC),
    "lm": ("model", "pe", "perplexity"),
}


def _err(rows: list[dict], key: str = "token_accuracy", lo: str = None, hi: str = None):
    lo, hi = lo or f"{key}_ci_low", hi or f"{key}_ci_high"
    return [[r[key] - r[lo] for r in rows], [r[hi] - r[key] for r in rows]]


def _pe_sorted(pes) -> list[str]:
    return catalog.order(catalog.PE_FORMS, pes)


def _setting(r: dict, seeds: bool = True) -> str:
    s = f"H={r['hidden_size']}, L={r['length']}, {r['iterations']:,} it, batch {r['batch_size']}"
    return s + (f", seeds: {r.get('n_seeds', '?')}" if seeds else "")


def fig_vocab(rows: list[dict], path: Path) -> None:
    """Fig. 2: token accuracy (top) and Damerau–Levenshtein distance (bottom) vs V, per model."""
    plt = _plt()
    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(2, len(models), figsize=(max(7.5, 4.6 * len(models)), 6.4), squeeze=False, sharex="col")
    for j, model in enumerate(models):
        for pe in _pe_sorted(r["pe"] for r in rows if r["model"] == model):
            rs = sorted((r for r in rows if r["model"] == model and r["pe"] == pe), key=lambda r: r["vocab_size"])
            V = [r["vocab_size"] for r in rs]
            for i, key in enumerate(("token_accuracy", "damerau_levenshtein")):
                axes[i][j].errorbar(V, [r[key] for r in rs], yerr=_err(rs, key), marker="o", capsize=3,
                                    color=pe_color(pe), label=pe_label(pe))
        axes[0][j].set_title(f"{model_label(model)}  ({_setting(rs[0])})", fontsize=8)
        axes[0][j].set_ylabel("token accuracy")
        axes[1][j].set_ylabel("Damerau–Levenshtein distance")
        axes[1][j].set_xlabel("vocabulary size V")
        for ax in (axes[0][j], axes[1][j]):
            ax.set_xscale("log", base=2)
            ax.grid(alpha=0.3)
        axes[0][j].legend(fontsize=8)
    fig.suptitle("Reverse ordering: accuracy vs vocabulary size (mean over seeds, 95% CI resampling seeds then sequences)", fontsize=10)
    fig.tight_layout()
    _save(fig, path)


def fig_dual(rows: list[dict], path: Path) -> None:
    """The dual-frequency grid: accuracy on the target token per (target kind / disturbant kind)."""
    plt = _plt()
    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(1, len(models), figsize=(max(7.5, 5.2 * len(models)), 4.0), squeeze=False)
    for ax, model in zip(axes[0], models):
        pes = _pe_sorted(r["pe"] for r in rows if r["model"] == model)
        width = 0.8 / len(pes)
        for k, pe in enumerate(pes):
            rs = [next(r for r in rows if r["model"] == model and r["pe"] == pe and r["condition"] == c
                       and r.get("half", "all") == "all") for c in DUAL_CONDITIONS]
            xs = [i + (k - (len(pes) - 1) / 2) * width for i in range(len(DUAL_CONDITIONS))]
            ax.bar(xs, [r["token_accuracy"] for r in rs], width, yerr=_err(rs), capsize=3,
                   color=pe_color(pe), label=pe_label(pe))
        ax.set_xticks(range(len(DUAL_CONDITIONS)), [f"{c[0]} target\n{c[2]} disturbants" for c in DUAL_CONDITIONS], fontsize=8)
        ax.set_ylabel("accuracy on the target token")
        ax.set_ylim(0, 1.05)
        ax.set_title(f"{model_label(model)}, V={rs[0]['vocab_size']}, rarity={rs[0]['rarity']:g} ({_setting(rs[0])})", fontsize=8)
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8)
    fig.suptitle("Dual-frequency vocabulary: F = Frequent half, R = Rare half (95% bootstrap CI)", fontsize=10)
    fig.tight_layout()
    _save(fig, path)


def fig_stability(rows: list[dict], path: Path) -> None:
    """Fig. 5: gradient stability over training, per pair (rows) and model/PE (columns)."""
    plt = _plt()
    arms = list(dict.fromkeys((r["model"], r["pe"]) for r in rows))
    arms.sort(key=lambda a: (a[0], PE_ORDER.index(a[1]) if a[1] in PE_ORDER else 99))
    pairs = ["common_target", "common_suffix"]
    fig, axes = plt.subplots(2, len(arms), figsize=(4.2 * len(arms), 6.2), squeeze=False, sharey=True)
    for j, (model, pe) in enumerate(arms):
        for i, pair in enumerate(pairs):
            ax = axes[i][j]
            for cond in dict.fromkeys(r["condition"] for r in rows):
                rs = sorted((r for r in rows if r["model"] == model and r["pe"] == pe and r["pair"] == pair
                             and r["condition"] == cond), key=lambda r: r["step"])
                steps = [r["step"] for r in rs]
                ax.plot(steps, [r["stability"] for r in rs], marker="o", ms=3, label=cond)
                ax.fill_between(steps, [r["ci_low"] for r in rs], [r["ci_high"] for r in rs], alpha=0.2)
            ax.set_title(f"{model_label(model)} {pe_label(pe)}: {pair.replace('_', ' ')}", fontsize=9)
            ax.grid(alpha=0.3)
            if i == 1:
                ax.set_xlabel("training iteration")
            if j == 0:
                ax.set_ylabel("gradient stability")
    axes[0][0].legend(title="target/disturbant", fontsize=7, title_fontsize=7)
    fig.suptitle("Gradient stability over training (row-wise Jacobian similarity, 95% CI resampling seeds then triplets)",
                 fontsize=9)
    fig.tight_layout()
    _save(fig, path)


def fig_bars(rows: list[dict], path: Path, title: str, key: str = "token_accuracy", label: Optional[Callable] = None) -> None:
    """One bar per row (e.g. PE forms, double vanilla, vocabulary extension)."""
    plt = _plt()
    width = max(4.0, 1.2 * len(rows) + 1.5)
    fig, ax = plt.subplots(figsize=(width, 3.6))
    labels = [(label(r) if label else pe_label(r["pe"])) + f"\n{r.get('n_seeds', '?')} seed(s)" for r in rows]
    ax.bar(range(len(rows)), [r[key] for r in rows], yerr=_err(rows, key), capsize=4,
           color=[pe_color(r["pe"]) for r in rows])
    ax.set_xticks(range(len(rows)), labels, fontsize=8)
    ax.set_ylabel(key.replace("_", " "))
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3, axis="y")
    ax.set_title(textwrap.fill(title, int(11 * width)), fontsize=9)  # about 11 characters of 9 pt per inch
    fig.tight_layout()
    _save(fig, path)


def fig_length(rows: list[dict], path: Path) -> None:
    """The length sweep at V = 2: token accuracy vs L."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.0, 3.6))
    for pe in _pe_sorted(r["pe"] for r in rows):
        rs = sorted((r for r in rows if r["pe"] == pe), key=lambda r: r["length"])
        ax.errorbar([r["length"] for r in rs], [r["token_accuracy"] for r in rs], yerr=_err(rs), marker="o", capsize=3,
                    color=pe_color(pe), label=pe_label(pe))
    r0 = rows[0]
    ax.set_xscale("log", base=2)
    ax.set_xlabel("input length L")
    ax.set_ylabel("token accuracy")
    ax.set_title(f"Length sweep, V = {r0['vocab_size']} ({model_label(r0['model'])}, H={r0['hidden_size']}, "
                 f"{r0['iterations']:,} it, seeds: {r0['n_seeds']})", fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    _save(fig, path)


def _same_setting(a: dict, b: dict) -> bool:
    keys = ("model", "vocab_size", "length", "hidden_size", "iterations", "batch_size")
    return all(a[k] == b[k] for k in keys) and not a.get("rarity") and not b.get("rarity")


def lm_table(rows: list[dict]) -> str:
    lines = ["| model | PE | seeds | test perplexity (min / mean / max) | per seed |", "|---|---|---|---|---|"]
    for r in rows:
        per_seed = ", ".join(f"{s}: {float(v):.2f}" for s, v in zip(str(r["seeds"]).split(), str(r["perplexity_by_seed"]).split()))
        lines.append(f"| {r['model']} | {pe_label(r['pe'])} | {r['n_seeds']} | {float(r['perplexity_min']):.2f} / "
                     f"{float(r['perplexity']):.2f} / {float(r['perplexity_max']):.2f} | {per_seed} |")
    return "\n".join(lines) + "\n"


# ---- the figures the experiment registry names (common.experiments: ``Figure.draw``) ----------
def _beside_fig2(t: dict, name: str) -> list[dict]:
    """``name``'s rows after fig2's vanilla and sinusoidal rows of the same setting, in PE order."""
    rows = [r for r in t.get("fig2", []) if r["pe"] in ("none", "sinusoidal") and _same_setting(r, t[name][0])] + t[name]
    return sorted(rows, key=lambda r: PE_ORDER.index(r["pe"]) if r["pe"] in PE_ORDER else 99)


def draw_fig2(t: dict, path: Path) -> None:
    fig_vocab(t["fig2"], path)


def draw_dual(t: dict, path: Path) -> None:
    fig_dual(t["dual"], path)


def draw_stability(t: dict, path: Path) -> None:
    fig_stability(t["stability"], path)


def draw_forms(t: dict, path: Path) -> None:
    rows = _beside_fig2(t, "forms")
    fig_bars(rows, path, f"PE forms ({model_label(rows[0]['model'])}, V={rows[0]['vocab_size']}, {_setting(rows[0], seeds=False)})")


def draw_double(t: dict, path: Path) -> None:
    rows = _beside_fig2(t, "double")
    fig_bars(rows, path, f"Double vanilla control ({model_label(rows[0]['model'])}, V={rows[0]['vocab_size']}, "
                         f"{_setting(rows[0], seeds=False)})")


def draw_extend(t: dict, path: Path) -> None:
    rows = sorted(t["extend"], key=lambda r: (r["model"], r["base_vocab"], PE_ORDER.index(r["pe"]) if r["pe"] in PE_ORDER else 99))
    fig_bars(rows, path, "Vocabulary extension: accuracy on sequences of new ids only (frozen trained weights)",
             label=lambda r: f"{model_label(r['model'])} {pe_label(r['pe'])}\nV {r['base_vocab']}+{r['extra_vocab']}")


def draw_length(t: dict, path: Path) -> None:
    fig_length(t["length"], path)


def draw_lm(t: dict, path: Path) -> None:
    if _pending is not None:
        _pending[Path(path)] = lm_table(t["lm"]).encode()
    else:
        atomic_write_text(path, lm_table(t["lm"]))


def draw_all(results: Path, out_dir: Path) -> list[Path]:
    """Draw the figure of every experiment whose table exists in ``results``, each checked first
    (``check_table``); every figure is drawn before the first replaces an old one. Returns the files."""
    global _pending
    results, out_dir = Path(results), Path(out_dir)
    t = {}
    for p in sorted(results.glob("*.csv")):
        rows = read_csv(p)
        t[p.stem] = check_table(rows, p, COLUMNS.get(p.stem, ()), what=f"{p.stem} table",
                                fix="re-run `posrnn aggregate` (or dvc repro) to rewrite it")
    if out_dir.exists() and not out_dir.is_dir():
        raise PosrnnError(f"--out {out_dir} is a file, not a directory; pass another --out")
    _pending = {}
    try:
        drawn = _draw(t, out_dir)
        files, _pending = _pending, None
    finally:
        _pending = None
    write_files_together(files)  # every figure drawn before the first replaces an old one
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
