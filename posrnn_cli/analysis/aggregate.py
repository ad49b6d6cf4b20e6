"""Aggregation: every experiment of a profile into one table, seeds pooled, with 95% bootstrap
CIs (docs/papers.md, Metrics). It reads result files only — the runs' ``config.yaml`` and the score files that
evaluation wrote — and imports no training code.

Layout::

    runs/<profile>/<experiment>/<cell>-s<seed>/   config.yaml, eval.json, eval_sequences.npz,
                                                   extend_sequences.npz, stability_values.npz,
                                                   permutation.json, …
    runs/<profile>/<experiment>/sweep.json        the cells of the current grid (posrnn sweep)
    results/<profile>/tables/<experiment>.csv     one row per cell (per condition, step, …)
    results/<profile>/metrics/<experiment>.json   the headline numbers (``dvc metrics show``)

A *cell* is a run's config without its seed: runs that differ only in ``train.seed`` are
pooled — their per-sequence scores are concatenated and bootstrapped together. Which table an
experiment makes, and its headline numbers, are declared in the experiment registry
(``common.experiments``) and recorded in the experiment's ``sweep.json``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np
import yaml

from ..common import catalog
from ..common.config import RunConfig, safe_load_bounded
from ..common.errors import PosrnnError
from ..common.experiments import EXPERIMENTS, TABLE_FORMS, resolve
from ..common.io import check_table, csv_text, read_json, read_npz, same_path, write_files_together
from ..common.stats import pooled

METRICS = ("token_accuracy", "sequence_accuracy", "damerau_levenshtein")
DUAL_CONDITIONS = ("F/F", "F/R", "R/F", "R/R")  # target kind / disturbant kind (003 §2.2, dual frequency)
#: the columns that name a cell in the tables (the rest of the config is constant in a sweep)
CELL_COLUMNS = (
    ("task", "task.name"), ("model", "model.name"), ("pe", "model.pe"), ("vocab_size", "task.vocab_size"),
    ("length", "task.length"), ("min_length", "task.min_length"), ("rarity", "task.rarity"),
    ("hidden_size", "model.hidden_size"), ("layers", "model.layers"), ("iterations", "train.iterations"),
    ("batch_size", "train.batch_size"),
)
#: config keys that do not split a cell (a run's seed and where it ran)
IGNORED = {"train.seed", "train.device", "train.threads", "train.eval_batch_size", "train.log_every",
           "train.checkpoint_every", "task.data"}
MANIFEST = "sweep.json"


# ---- reading runs ---------------------------------------------------------------------------
def read_config(run: Path) -> RunConfig:
    path = Path(run) / "config.yaml"
    if not path.is_file():
        raise PosrnnError(f"{run} has no config.yaml; re-run its sweep (posrnn sweep) or dvc repro")
    try:
        data = safe_load_bounded(path.read_text(encoding="utf-8"), str(path))
    except UnicodeDecodeError:
        raise PosrnnError(f"{path} is not text (not UTF-8); re-run its sweep") from None
    except yaml.YAMLError:
        raise PosrnnError(f"{path} is not valid YAML; re-run its sweep") from None
    return RunConfig.from_dict(data, source=str(path))


def runs_of(exp_dir: Path) -> list[Path]:
    """The run directories of an experiment: the cells its sweep manifest lists (so runs of an
    older grid left on disk are ignored), or every sub-directory holding a config.yaml."""
    exp_dir = Path(exp_dir)
    manifest = exp_dir / MANIFEST
    if manifest.is_file():
        try:
            names = [c["name"] for c in read_json(manifest)["cells"]]
        except (ValueError, KeyError, TypeError, IndexError):
            raise PosrnnError(f"{manifest} is not a sweep manifest; re-run the sweep") from None
        if not all(isinstance(n, str) and n and n not in (".", "..") and "/" not in n and "\\" not in n and "\0" not in n
                   for n in names):
            raise PosrnnError(f"{manifest} is not a sweep manifest (a cell name is not a directory name); re-run the sweep")
        return [exp_dir / n for n in names]
    return sorted(p.parent for p in exp_dir.glob("*/config.yaml"))


def cell_of(cfg: RunConfig) -> tuple:
    return tuple(sorted((k, json.dumps(v)) for k, v in cfg.flat().items() if k not in IGNORED))


def cell_columns(cfg: RunConfig) -> dict[str, Any]:
    flat = cfg.flat()
    return {name: flat[key] for name, key in CELL_COLUMNS}


def group_runs(runs: Iterable[Path]) -> list[tuple[RunConfig, list[tuple[int, Path]]]]:
    """Runs → ``[(config of the cell, [(seed, run_dir), …]), …]`` in first-seen order."""
    groups: dict[tuple, tuple[RunConfig, list]] = {}
    for run in runs:
        cfg = read_config(run)
        groups.setdefault(cell_of(cfg), (cfg, []))[1].append((cfg.train.seed, run))
    return list(groups.values())


def arrays(path: Path, keys: tuple) -> dict:
    """The score arrays of ``path``, each of ``keys`` required."""
    data = read_npz(need(path, "per-sequence scores"))
    missing = [k for k in keys if k not in data]
    if missing:
        raise PosrnnError(f"{path} has no {', '.join(missing)} scores (not written by `posrnn eval`?); re-run its sweep")
    return data


def need(path: Path, what: str) -> Path:
    if not path.is_file():
        raise PosrnnError(f"{path} is missing ({what}); re-run the sweep that writes it (posrnn sweep or dvc repro)")
    return path


def seeds_columns(members: list[tuple[int, Path]]) -> dict:
    return {"seeds": " ".join(str(s) for s, _ in sorted(members)), "n_seeds": len(members)}


def with_ci(prefix: str, s: dict) -> dict:
    return {prefix: s["mean"], f"{prefix}_ci_low": s["ci_low"], f"{prefix}_ci_high": s["ci_high"]}


# ---- the tables -------------------------------------------------------------------------------
def table_eval(runs: list[Path], n_resamples: int) -> list[dict]:
    """One row per cell: token / sequence accuracy and DL distance, seeds pooled, 95% CIs."""
    rows = []
    for cfg, members in group_runs(runs):
        data = [arrays(run / "eval_sequences.npz", METRICS) for _, run in members]
        row = {**cell_columns(cfg), **seeds_columns(members)}
        for m in METRICS:
            s = pooled([a[m] for a in data], n_resamples)
            row.update(with_ci(m, s))
        row["n_sequences"] = s["n"]
        rows.append(row)
    return rows


def table_dual(runs: list[Path], n_resamples: int) -> list[dict]:
    """One row per (cell, target kind / disturbant kind, half): accuracy on the target token,
    over all target positions and over those in the first / second half of the input."""
    rows = []
    for cfg, members in group_runs(runs):
        L = cfg.task.length
        data = [arrays(run / "eval_sequences.npz", ("token_accuracy", "group")) for _, run in members]
        for k, name in enumerate(DUAL_CONDITIONS):
            for half, keep in (("all", lambda t: t >= 0), ("first", lambda t: t < L / 2), ("second", lambda t: t >= L / 2)):
                picked = []
                for a in data:
                    group = a["group"]
                    picked.append(a["token_accuracy"][(group // L == k) & keep(group % L)])
                s = pooled(picked, n_resamples)
                rows.append({**cell_columns(cfg), "condition": name, "half": half, **with_ci("token_accuracy", s),
                             **seeds_columns(members), "n_sequences": s["n"]})
    return rows


def table_stability(runs: list[Path], n_resamples: int) -> list[dict]:
    """One row per (cell, checkpoint step, condition, pair): mean stability over the pooled
    triplets of all seeds, with its 95% CI."""
    rows = []
    for cfg, members in group_runs(runs):
        values: dict[str, list] = defaultdict(list)
        for _, run in members:
            for key, v in read_npz(need(run / "stability_values.npz", "stability values")).items():
                values[key].append(v)
        for key in sorted(values, key=lambda k: (int(k.split("|")[0]), k)):
            step, cond, pair = key.split("|")
            s = pooled(values[key], n_resamples)
            rows.append({**cell_columns(cfg), "step": int(step), "condition": cond, "pair": pair,
                         "stability": s["mean"], "ci_low": s["ci_low"], "ci_high": s["ci_high"],
                         "n_seeds": len(values[key]), "n_triplets": s["n"]})
    return rows


def table_extend(runs: list[Path], n_resamples: int) -> list[dict]:
    """One row per extended cell: accuracy on sequences of new ids only (seeds pooled)."""
    rows = []
    for cfg, members in group_runs(runs):
        scores = [arrays(run / "extend_sequences.npz", METRICS) for _, run in members]
        row = {**cell_columns(cfg), "base_vocab": cfg.model.frozen_vocab,
               "extra_vocab": cfg.task.vocab_size - cfg.model.frozen_vocab, **seeds_columns(members)}
        for m in METRICS:
            row.update(with_ci(m, pooled([sc[m] for sc in scores], n_resamples)))
        rows.append(row)
    return rows


def table_lm(runs: list[Path], n_resamples: int) -> list[dict]:
    """One row per language-model run: test perplexity (the paper's Table 1 reports min / mean
    / max over seeds, so the seeds are listed, not pooled)."""
    rows = []
    for run in runs:
        cfg = read_config(run)
        r = read_json(need(run / "eval.json", "evaluation"))
        rows.append({"model": cfg.model.name, "pe": cfg.model.pe, "seed": cfg.train.seed, "hidden_size": cfg.model.hidden_size,
                     "iterations": cfg.train.iterations, "batch_size": cfg.train.batch_size, "vocab_size": cfg.task.vocab_size,
                     "max_tokens": cfg.task.length, "perplexity": r["perplexity"], "token_nll": r["token_nll"],
                     "n_tokens": r["n_tokens"]})
    return rows


def table_irie(runs: list[Path], n_resamples: int) -> list[dict]:
    """One row per cell of causal Transformers: accuracy, and how often permuting the earlier
    positions changed the last position's output (``permutation.json`` of each run)."""
    rows = []
    for cfg, members in group_runs(runs):
        data = [arrays(run / "eval_sequences.npz", ("token_accuracy",)) for _, run in members]
        perms = [read_json(need(run / "permutation.json", "permutation report")) for _, run in members]
        s = pooled([a["token_accuracy"] for a in data], n_resamples)
        sens = pooled([np.asarray(p["sensitive"], dtype=float) for p in perms], n_resamples)
        rows.append({**cell_columns(cfg), **seeds_columns(members), "n_sequences": s["n"], **with_ci("token_accuracy", s),
                     "permutation_sensitive_share": sens["mean"],
                     "max_logit_change": max(p["max_logit_change"] for p in perms),
                     "tolerance": perms[0]["tolerance"], "permutations": perms[0]["permutations"]})
    return rows


# ---- training curves ---------------------------------------------------------------------------
def curves(runs: list[Path], max_points: int = 200) -> list[dict]:
    """Every run's training log (``metrics.jsonl``) in one long table: run, step, loss,
    accuracy — at most ``max_points`` evenly spaced points per run. ``dvc plots show`` draws one
    figure per experiment with a line per run (template: training_curves.json)."""
    rows = []
    for run in runs:
        path = Path(run) / "metrics.jsonl"
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise PosrnnError(f"{path} is not text (not UTF-8); re-run its sweep") from None
        log = []
        for line in text.splitlines():
            try:
                x = json.loads(line)
            except ValueError:
                continue  # a line cut by a crash
            if isinstance(x, dict) and all(isinstance(x.get(k), (int, float)) and not isinstance(x.get(k), bool)
                                           and np.isfinite(x[k]) for k in ("step", "loss", "accuracy")):
                log.append(x)  # anything else is not a line `posrnn train` wrote
        stride = max(1, -(-len(log) // max_points))
        keep = log[::stride] + ([log[-1]] if log and (len(log) - 1) % stride else [])
        rows += [{"run": Path(run).name, "step": x["step"], "loss": x["loss"], "accuracy": x["accuracy"]} for x in keep]
    return rows


# ---- the headline numbers ------------------------------------------------------------------------
def _mean(values) -> Optional[float]:
    values = list(values)
    return round(float(np.mean(values)), 4) if values else None


def by_pe(rows: list[dict], key: str) -> dict:
    """The mean of ``key`` per PE form (``none`` = vanilla), in the catalogue's order."""
    return {pe: _mean(r[key] for r in rows if r["pe"] == pe) for pe in catalog.order(catalog.PE_FORMS, (r["pe"] for r in rows))}


# One ``dvc metrics show`` row per experiment, with the same few columns for all: the headline
# measure per PE form or per layer count, and what it is. The registry names one per table form.
def headline_eval(rows: list[dict]) -> dict:
    return {"measure": "token accuracy, mean over cells", **by_pe(rows, "token_accuracy")}


def headline_dual(rows: list[dict]) -> dict:
    return {"measure": "token accuracy, F target / R disturbants", **by_pe(
        [r for r in rows if r["condition"] == "F/R" and r["half"] == "all"], "token_accuracy")}


def headline_stability(rows: list[dict]) -> dict:
    last = max(r["step"] for r in rows)
    return {"measure": f"common-target stability, F/R, step {last}", **by_pe(
        [r for r in rows if r["step"] == last and r["pair"] == "common_target" and r["condition"] == "F/R"], "stability")}


def headline_extend(rows: list[dict]) -> dict:
    return {"measure": "token accuracy on new ids only", **by_pe(rows, "token_accuracy")}


def headline_lm(rows: list[dict]) -> dict:
    return {"measure": "test perplexity, mean over seeds", **by_pe(rows, "perplexity")}


def headline_irie(rows: list[dict]) -> dict:
    return {"measure": "share of sequences whose last output a permutation changes",
            **{f"layers_{r['layers']}": round(r["permutation_sensitive_share"], 4) for r in rows}}


def table_form(exp_dir: Path) -> Optional[str]:
    """The table form an experiment's runs make (a ``TABLE_FORMS`` key of the experiment registry):
    the one its sweep manifest recorded, else the registry's entry for the directory's name."""
    manifest = Path(exp_dir) / MANIFEST
    if manifest.is_file():
        recorded = read_json(manifest).get("table", "")
        if recorded is None or recorded in TABLE_FORMS:
            return recorded
    name = Path(exp_dir).name
    if name not in EXPERIMENTS:
        raise PosrnnError(f"{exp_dir} is not an experiment posrnn knows (known: {', '.join(EXPERIMENTS)}); "
                          f"move it out of the run root or re-run its sweep")
    return EXPERIMENTS[name].table


def aggregate(runs_root: Path, out_dir: Path, metrics_dir: Optional[Path] = None, experiments: Optional[list[str]] = None,
              n_resamples: int = 10_000, curves_dir: Optional[Path] = None) -> dict[str, list[dict]]:
    """Aggregate every experiment directory under ``runs_root`` (or those named) into
    ``out_dir/<experiment>.csv``, ``metrics_dir/<experiment>.json`` and the training curves
    ``curves_dir/<experiment>.csv`` (by default ``metrics`` and ``curves`` beside ``out_dir``)."""
    runs_root, out_dir = Path(runs_root), Path(out_dir)
    metrics_dir = Path(metrics_dir) if metrics_dir is not None else out_dir.parent / "metrics"
    curves_dir = Path(curves_dir) if curves_dir is not None else out_dir.parent / "curves"
    if not runs_root.is_dir():
        what = "is a file, not a directory" if runs_root.exists() else "does not exist"
        raise PosrnnError(f"{runs_root} {what}; pass a profile's run root (runs/<profile>) after running its sweeps")
    outs = (("--out", out_dir), ("--metrics", metrics_dir), ("--curves", curves_dir))
    for i, (a, pa) in enumerate(outs):
        for b, pb in outs[i + 1:]:
            if same_path(pa, pb):
                raise PosrnnError(f"{a} and {b} are the same directory ({pa}): one would overwrite the other's tables; "
                                  f"pass different directories")
        if same_path(pa, runs_root):
            raise PosrnnError(f"{a} {pa} is the run root itself; pass another directory")
    present = sorted(d.name for d in runs_root.iterdir() if d.is_dir() and not d.name.startswith("."))
    wanted = experiments or present
    tables: dict[str, list[dict]] = {}
    files: dict[Path, bytes] = {}
    for name in wanted:
        if name not in present:
            raise PosrnnError(f"no experiment {name!r} under {runs_root}; present: {', '.join(present) or 'none'}")
        runs = runs_of(runs_root / name)
        if not runs:
            continue
        form = table_form(runs_root / name)
        if form is None:
            continue  # an experiment whose runs feed another (lm_data)
        rows = resolve(TABLE_FORMS[form].build)(runs, n_resamples)
        if rows:
            check_table(rows, runs_root / name, what=f"{form} table",
                        fix="a cell without scores (an empty condition?) or non-finite scores; check its runs, then re-run their sweep")
            tables[name] = rows
            files[out_dir / f"{name}.csv"] = csv_text(rows).encode()
            files[metrics_dir / f"{name}.json"] = (json.dumps(resolve(TABLE_FORMS[form].headline)(rows), indent=2) + "\n").encode()
            log = curves(runs)
            if log:
                files[curves_dir / f"{name}.csv"] = csv_text(log).encode()
    # every table is computed before the first is written, and they are swapped in together
    for path in files:
        if path.parent.exists() and not path.parent.is_dir():
            raise PosrnnError(f"{path.parent} is a file, not a directory; pass another output directory")
    try:
        write_files_together(files)
    except OSError as e:
        raise PosrnnError(f"cannot write the tables ({e.strerror or type(e).__name__}: {e.filename or '?'}); "
                          f"nothing was replaced") from None
    return tables
