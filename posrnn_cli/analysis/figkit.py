"""The figures' kit: labels, colours and one order for models and PE forms, the per-seed spread
each error bar draws (a 95% Student-t interval over seeds, or the range of N seeds) and how a
legend names it, chance lines, panel grids, wrapped titles and saving (Agg backend). What each
figure shows is ``plots``; what every figure promises is said there."""

from __future__ import annotations

import io
import math
import textwrap
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..common import catalog
from ..tasks import floors
from ..common.errors import PosrnnError
from ..common.files.io import write_owned
from ..common.results.stats import t_interval

PE_ORDER = list(catalog.PE_FORMS)
#: the order of the models in every figure (panels, bars): the model registry's
MODEL_ORDER = tuple(catalog.CORES)
#: at most this many panels (or groups of stacked panels) side by side; more wrap to a new row
MAX_COLUMNS = 4
#: the tasks whose token-accuracy axes carry their floor lines: every task ``tasks.floors`` declares
#: lines for (chance, and the highest line a baseline model reaches: recall-last, order-blind, order
#: statistics, position), so a declared floor is never left undrawn
CHANCE_TASKS = tuple(floors.TASK_LINES)
_DPI = 110
_FIX = "re-run `posrnn aggregate` to rewrite the tables"


def pe_label(pe: str) -> str:
    return catalog.label(catalog.PE_FORMS, pe)


def pe_color(pe: str) -> str:
    return catalog.color(catalog.PE_FORMS, pe)


def model_label(model: str) -> str:
    return catalog.label(catalog.CORES, model)


def models_in_order(rows: list[dict]) -> list[str]:
    """The models of ``rows`` in ``MODEL_ORDER`` (unknown names last)."""
    return catalog.order(catalog.CORES, (r["model"] for r in rows))


def model_key(model: str) -> tuple:
    return (MODEL_ORDER.index(model) if model in MODEL_ORDER else len(MODEL_ORDER), str(model))


def pe_key(pe: str) -> tuple:
    return (PE_ORDER.index(pe) if pe in PE_ORDER else len(PE_ORDER), str(pe))


def arm_key(model: str, pe: str) -> tuple:
    return (*model_key(model), *pe_key(pe))


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


#: while ``collecting`` holds: the files drawn so far (path → bytes), written together at the end
_pending: Optional[dict] = None


@contextmanager
def collecting():
    """Keep every file ``save_bytes`` is given in the yielded dict instead of writing it (so a
    caller writes them all together, or none when a later figure fails)."""
    global _pending
    _pending = files = {}
    try:
        yield files
    finally:
        _pending = None


def save_bytes(path: Path, data: bytes) -> None:
    if _pending is not None:
        _pending[Path(path)] = data
    else:
        write_owned(Path(path), data)


def _save(fig, path: Path) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI)
    pyplot().close(fig)
    save_bytes(path, buf.getvalue())


# ---- what a bar shows ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Spread:
    """The interval drawn around one mean. ``kind``: "t" (95% Student-t interval over the seeds),
    "range" (the seeds' minimum and maximum), "triplets" (one run's 95% bootstrap interval over
    its triplets) or "none" (no bar). ``n``: the seeds (the triplets for "triplets")."""

    lo: float
    hi: float
    kind: str
    n: int


def seed_count(r: dict) -> int:
    if isinstance(r.get("n_seeds"), int):
        return r["n_seeds"]
    return len(str(r.get("seeds") or "").split()) or 1


def per_seed(r: dict, metric: str) -> Optional[list[float]]:
    """Row ``r``'s value of ``metric`` per seed (its ``<metric>_by_seed`` column, in the order of
    ``seeds``); None when the table has no such column."""
    cell = r.get(f"{metric}_by_seed")
    if cell is None:
        return None
    try:
        vals = [float(x) for x in str(cell).split()]
    except ValueError:
        vals = []
    seeds = str(r.get("seeds") or "").split()
    if not vals or not all(math.isfinite(v) for v in vals) or (seeds and len(seeds) != len(vals)):
        raise PosrnnError(f"{metric}_by_seed = {cell!r} is not one finite number per seed "
                          f"(seeds: {r.get('seeds')}); {_FIX}")
    return vals


def spread(r: dict, metric: str) -> Spread:
    """The interval drawn around row ``r``'s mean of ``metric``: the 95% t interval of its per-seed
    values (the verdicts' interval), else the range of its seeds (``<metric>_min``/``_max``), else,
    for one run's stability rows, the bootstrap interval over its triplets, else none."""
    vals = per_seed(r, metric)
    if vals is not None:
        _, lo, hi = t_interval(vals)
        return Spread(lo, hi, "t", len(vals)) if len(vals) >= 2 else Spread(math.nan, math.nan, "none", 1)
    n = seed_count(r)
    lo, hi = r.get(f"{metric}_min"), r.get(f"{metric}_max")
    if n >= 2 and isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
        return Spread(float(lo), float(hi), "range", n)
    if n == 1 and "seeds" not in r and isinstance(r.get("n_triplets"), int) and "ci_low" in r:
        return Spread(float(r["ci_low"]), float(r["ci_high"]), "triplets", r["n_triplets"])
    return Spread(math.nan, math.nan, "none", n)


def _span(ns: list[int]) -> str:
    return f"{min(ns)}" if min(ns) == max(ns) else f"{min(ns)}–{max(ns)}"


def describe(spreads: list[Spread], mark: str = "bars") -> tuple[str, Optional[str]]:
    """What a figure says of its ``spreads``: the note for its title (seed count, what the
    ``mark``s are, where there are none) and the legend's name of the marks (None when none is drawn)."""
    kinds: dict[str, list[int]] = {}
    for s in spreads:
        kinds.setdefault(s.kind, []).append(s.n)
    if "triplets" in kinds:
        name = f"95% bootstrap interval over {_span(kinds['triplets'])} triplets of one run"
        return f"{mark}: {name}", name
    names = [f"95% t interval over {_span(kinds['t'])} seeds"] if "t" in kinds else []
    names += [f"range of {_span(kinds['range'])} seeds"] if "range" in kinds else []
    name = "; ".join(names) or None
    seeds = [s.n for s in spreads] or [0]
    note = f"mean of {_span(seeds)} seed{'' if max(seeds) == 1 else 's'}" + (f"; {mark}: {name}" if name else "")
    none = kinds.get("none", [])
    one = mark.rstrip("s")
    if 1 in none:
        note += f"; no {one} where 1 seed" if name or max(none) > 1 else f"; 1 seed: no {one}"
    if any(n > 1 for n in none):
        note += f"; no {one} where no per-seed values"
    return note, name


def errorbars(ax, xs: list, ys: list, spreads: list[Spread], color: str) -> None:
    """The finite ``spreads`` as error bars at ``xs`` (their lines tagged gid "interval")."""
    pts = [(x, y, s) for x, y, s in zip(xs, ys, spreads) if math.isfinite(s.lo) and math.isfinite(s.hi)]
    if not pts:
        return
    x, y, s = zip(*pts)
    yerr = [[max(0.0, b - c.lo) for b, c in zip(y, s)], [max(0.0, c.hi - b) for b, c in zip(y, s)]]
    eb = ax.errorbar(x, y, yerr=yerr, fmt="none", ecolor=color, capsize=3, elinewidth=1.2)
    for c in eb.lines[2]:
        c.set_gid("interval")


def draw_series(ax, xs: list, rows: list[dict], key: str, color: str, label: str, band: bool = False,
            ls: str = "-", marker: str = "o") -> list[Spread]:
    """One line of means (points only when it has a single x) with its intervals: error bars,
    or a shaded band when ``band`` and there are several points. Returns the intervals."""
    ys, spreads = [r[key] for r in rows], [spread(r, key) for r in rows]
    ax.plot(xs, ys, marker=marker, ms=4 if band else 6, ls=ls if len(xs) > 1 else "none", color=color, label=label)
    if band and len(xs) > 1:
        ax.fill_between(xs, [s.lo for s in spreads], [s.hi for s in spreads], color=color, alpha=0.2, lw=0,
                        gid="interval")
    else:
        errorbars(ax, xs, ys, spreads, color)
    return spreads


def sweep_axis(ax, xs: list, log2: bool = True) -> None:
    """A log2 axis for a sweep over several values; over one value a linear axis ticked there."""
    values = sorted(set(xs))
    if len(values) > 1 and log2:
        ax.set_xscale("log", base=2)
    elif len(values) == 1:
        ax.set_xticks(values)
        ax.set_xlim(values[0] - 1, values[0] + 1)


def chance_level(r: dict) -> Optional[float]:
    """The chance line of a row's token accuracy (``tasks.floors``: 1/V for reverse, sort and the
    predecessor query, 1/P for MQAR); None where no line is drawn."""
    v = r.get("vocab_size")
    if r.get("task") not in CHANCE_TASKS or not isinstance(v, int) or v < 2:
        return None
    return floors.chance_line(r["task"], v, r.get("length"), r.get("pairs"))


def baseline_level(r: dict) -> Optional[floors.Line]:
    """The highest line above chance a baseline model reaches at a row's cell (``tasks.floors``:
    recall-last, order-blind, order statistics, position), where its task declares one."""
    v = r.get("vocab_size")
    if r.get("task") not in CHANCE_TASKS or not isinstance(v, int) or v < 2:
        return None
    cell = floors.Cell.from_row(r)
    return floors.informed(cell) if cell else None


def draw_floors(ax, xs: list, rows: list[dict], half: float = 0.4) -> None:
    """The floor lines of each row at ``xs``: chance (dashed, gid "chance") and the highest line a
    baseline model reaches (dotted, gid "baseline", named: recall-last, order-blind, from position
    alone): one horizontal line when all rows share it, short segments over each x otherwise, a
    curve when ``half`` is None (x = V)."""
    rule = next((floors.CHANCE_LABEL[r["task"]] for r in rows if r.get("task") in floors.CHANCE_LABEL),
                "1/V (uniform guess)")
    base = next((b.name for b in map(baseline_level, rows) if b is not None), "baseline")
    for level, gid, ls, name in ((chance_level, "chance", "--", f"chance {rule}"),
                                 (lambda r: getattr(baseline_level(r), "value", None), "baseline", ":", base)):
        pts = sorted({(x, level(r)) for x, r in zip(xs, rows) if level(r) is not None})
        if not pts:
            continue
        style = dict(ls=ls, lw=1, color="0.35", gid=gid, zorder=1.5)
        if len({c for _, c in pts}) == 1:
            v = {r.get("vocab_size") for r in rows}
            tag = f" = 1/{v.pop()}" if gid == "chance" and rule.startswith("1/V") and len(v) == 1 else ""
            ax.axhline(pts[0][1], label=f"{name}{tag} ({pts[0][1]:.3f})" if not tag else
                       f"chance 1/V{tag} (uniform guess)", **style)
        elif half is None:
            ax.plot([x for x, _ in pts], [c for _, c in pts], label=name, **style)
        else:
            ax.hlines([c for _, c in pts], [x - half for x, _ in pts], [x + half for x, _ in pts], label=name, **style)


def add_legend(ax, interval: Optional[str], mark: str = "bars", **kw) -> None:
    """``ax``'s legend, the intervals named last (``interval``: their name, None when none is drawn)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles, labels = ax.get_legend_handles_labels()
    if interval:
        handles.append(Patch(color="0.4", alpha=0.3) if mark == "bands" else
                       Line2D([], [], color="black", marker="|", markersize=11, ls="none", markeredgewidth=1.2))
        labels.append(interval)
    ax.legend(handles, labels, **{"fontsize": 7, **kw})


# ---- layout ------------------------------------------------------------------------------------
def panel_grid(n: int, rows_each: int = 1, w: float = 4.6, h: float = 3.2, sharey: bool = False,
               min_width: float = 5.5):
    """A figure of ``n`` items, each ``rows_each`` panels stacked, at most ``MAX_COLUMNS`` items a
    row. Returns (figure, the panels of each item)."""
    plt = pyplot()
    cols = max(1, min(n, MAX_COLUMNS))
    grid_rows = -(-max(n, 1) // cols)
    fig, axes = plt.subplots(grid_rows * rows_each, cols, squeeze=False, sharey=sharey,
                             figsize=(max(min_width, w * cols), h * rows_each * grid_rows + 0.8))
    items = [[axes[(k // cols) * rows_each + i][k % cols] for i in range(rows_each)] for k in range(n)]
    used = {id(ax) for item in items for ax in item}
    for ax in axes.flat:
        if id(ax) not in used:
            fig.delaxes(ax)
    return fig, items


def _wrap(text: str, width_in: float, fontsize: float) -> str:
    """``text`` wrapped to about ``width_in`` inches at ``fontsize`` points (110/fontsize characters an inch)."""
    return "\n".join(textwrap.fill(part, max(16, int(width_in * 110 / fontsize))) for part in text.split("\n"))


def ax_title(ax, text: str, fontsize: float = 8) -> None:
    width = ax.get_position().width * ax.figure.get_figwidth()
    ax.set_title(_wrap(text, width, fontsize), fontsize=fontsize)


def finish(fig, title: str, path: Path, fontsize: float = 10) -> None:
    """The figure's title, wrapped to its width; laid out so that nothing is clipped; saved."""
    fig.suptitle(_wrap(title, 0.95 * fig.get_figwidth(), fontsize), fontsize=fontsize)
    fig.tight_layout()
    _save(fig, path)
