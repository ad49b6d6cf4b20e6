"""The DVC pipeline's library half: the active profile, per-run stability values, and the
aggregation of every sweep into tables with 95% bootstrap CIs over the pooled seeds.

Layout (what ``dvc.yaml`` writes, one directory per run)::

    runs/<profile>/<sweep>/<cell>-s<seed>/   config.yaml, checkpoints/, eval.json,
                                              eval_sequences.npz, stability_values.npz,
                                              extend.json
    results/<profile>/<sweep>.csv            one row per cell, seeds pooled
    results/<profile>/metrics.json           the headline numbers (``dvc metrics show``)

A *cell* is a run's config without its seed: runs that differ only in ``train.seed`` are
pooled — their per-sequence scores are concatenated and bootstrapped together (SPEC §4).
"""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np

from .checkpoint import _atomic, atomic_write_json, list_checkpoints, read_run_config
from .config import RunConfig, load_yaml
from .errors import PosrnnError
from .metrics import bootstrap_ci

METRICS = ("token_accuracy", "sequence_accuracy", "damerau_levenshtein")
KINDS = ("F/F", "F/R", "R/F", "R/R")  # target kind / disturbant kind (SPEC §3, dual frequency)
#: the columns that name a cell in the tables (the rest of the config is constant in a sweep)
CELL_COLUMNS = (
    ("task", "task.name"), ("model", "model.name"), ("pe", "model.pe"), ("vocab_size", "task.vocab_size"),
    ("length", "task.length"), ("rarity", "task.rarity"), ("hidden_size", "model.hidden_size"),
    ("iterations", "train.iterations"), ("batch_size", "train.batch_size"),
)
IGNORED = {"train.seed", "train.device", "train.threads", "train.eval_batch_size", "train.log_every",
           "train.checkpoint_every"}


# ---- the profile --------------------------------------------------------------------------
def load_profile(params: Path) -> dict:
    """The active ``profile`` mapping of a params file (``profile: *lite`` in params.yaml)."""
    data = load_yaml(params) or {}
    prof = data.get("profile")
    if not isinstance(prof, dict) or "name" not in prof:
        raise PosrnnError(f"{params} has no `profile:` mapping with a name; set `profile: *lite` (or *paper)")
    return prof


# ---- per-run stability values ---------------------------------------------------------------
def stability_values(run: Path, n_triplets: int = 1024, chunk_size: int = 64, seed: int = 0,
                     device: str = "cpu") -> dict[str, np.ndarray]:
    """Per-triplet gradient stability of every checkpoint of ``run`` (SPEC §4), as arrays
    keyed ``"<step>|<condition>|<pair>"`` — kept raw so seeds can be pooled later. The
    triplets depend only on ``seed``, so every checkpoint and every run sees the same ones."""
    import torch

    from .evaluate import load_run
    from .stability import check_run, conditions, make_triplets, pair_stabilities

    ckpts = list_checkpoints(run)
    if not ckpts:
        raise PosrnnError(f"{run} has no checkpoints; train it first")
    out: dict[str, np.ndarray] = {}
    for step, path in ckpts:
        cfg, task, model, *_ = load_run(path, device=device)
        check_run(cfg)
        for name, (trange, drange) in conditions(cfg.task).items():
            gen = torch.Generator().manual_seed(seed)
            tri = make_triplets(n_triplets, cfg.task.length, gen, trange, drange)
            for pair, v in pair_stabilities(model, tri, task.query_id, chunk_size).items():
                out[f"{step}|{name}|{pair}"] = v.double().numpy()
    return out


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    _atomic(Path(path), lambda f: f.write(buf.getvalue()))


# ---- aggregation -------------------------------------------------------------------------------
def pooled(values: list[np.ndarray], n_resamples: int) -> dict[str, float]:
    x = np.concatenate([np.asarray(v, dtype=np.float64).ravel() for v in values]) if values else np.zeros(0)
    lo, hi = bootstrap_ci(x, n_resamples=n_resamples)
    return {"mean": float(x.mean()) if x.size else float("nan"), "ci_low": lo, "ci_high": hi, "n": int(x.size)}


def cell_of(cfg: RunConfig) -> tuple:
    return tuple(sorted((k, json.dumps(v)) for k, v in cfg.flat().items() if k not in IGNORED))


def cell_columns(cfg: RunConfig) -> dict[str, Any]:
    flat = cfg.flat()
    return {name: flat[key] for name, key in CELL_COLUMNS}


def find_runs(root: Path, marker: str) -> list[Path]:
    return sorted(p.parent for p in Path(root).glob(f"*/{marker}"))


def group_runs(runs: Iterable[Path]) -> list[tuple[RunConfig, list[tuple[int, Path]]]]:
    """Runs → ``[(config of the cell, [(seed, run_dir), …]), …]`` in first-seen order."""
    groups: dict[tuple, tuple[RunConfig, list]] = {}
    for run in runs:
        cfg = read_run_config(run)
        if cfg is None:
            raise PosrnnError(f"{run} has no config.yaml; re-run its train stage")
        groups.setdefault(cell_of(cfg), (cfg, []))[1].append((cfg.train.seed, run))
    return list(groups.values())


def aggregate_eval(root: Path, n_resamples: int = 10_000) -> list[dict]:
    """One row per cell of a sweep directory: token / sequence accuracy and DL distance,
    pooled over seeds, with 95% bootstrap CIs."""
    rows = []
    for cfg, members in group_runs(find_runs(root, "eval_sequences.npz")):
        arrays = [np.load(run / "eval_sequences.npz") for _, run in members]
        row = {**cell_columns(cfg), "seeds": " ".join(str(s) for s, _ in sorted(members)), "n_seeds": len(members)}
        for m in METRICS:
            s = pooled([a[m] for a in arrays], n_resamples)
            row.update({m: s["mean"], f"{m}_ci_low": s["ci_low"], f"{m}_ci_high": s["ci_high"]})
        row["n_sequences"] = s["n"]
        rows.append(row)
    return rows


def dual_cells(cfg: RunConfig) -> np.ndarray:
    """The (target kind, disturbant kind) cell 0…3 of every test sequence of a dual-frequency
    run, in the order ``posrnn eval`` scores them (the grid is a pure function of the config)."""
    from .tasks import build_task

    grid = build_task(cfg.task).dual_frequency_grid()
    return (grid.group // cfg.task.length).numpy()


def aggregate_dual(root: Path, n_resamples: int = 10_000) -> list[dict]:
    """One row per (cell, target kind / disturbant kind): accuracy on the target token."""
    rows = []
    for cfg, members in group_runs(find_runs(root, "eval_sequences.npz")):
        kinds = dual_cells(cfg)
        hits = [np.load(run / "eval_sequences.npz")["token_accuracy"] for _, run in members]
        for k, name in enumerate(KINDS):
            s = pooled([h[kinds == k] for h in hits], n_resamples)
            rows.append({**cell_columns(cfg), "condition": name, "token_accuracy": s["mean"],
                         "token_accuracy_ci_low": s["ci_low"], "token_accuracy_ci_high": s["ci_high"],
                         "n_seeds": len(members), "n_sequences": s["n"]})
    return rows


def aggregate_stability(root: Path, n_resamples: int = 10_000) -> list[dict]:
    """One row per (cell, checkpoint step, condition, pair): mean stability over the pooled
    triplets of all seeds, with its 95% bootstrap CI."""
    rows = []
    for cfg, members in group_runs(find_runs(root, "stability_values.npz")):
        values: dict[str, list] = defaultdict(list)
        for _, run in members:
            with np.load(run / "stability_values.npz") as z:
                for key in z.files:
                    values[key].append(z[key])
        for key in sorted(values, key=lambda k: (int(k.split("|")[0]), k)):
            step, cond, pair = key.split("|")
            s = pooled(values[key], n_resamples)
            rows.append({**cell_columns(cfg), "step": int(step), "condition": cond, "pair": pair,
                         "stability": s["mean"], "ci_low": s["ci_low"], "ci_high": s["ci_high"],
                         "n_seeds": len(values[key]), "n_triplets": s["n"]})
    return rows


def extension_scores(run: Path) -> dict[str, np.ndarray]:
    """Per-sequence scores of an extended run on the held-out sequences of new ids only."""
    from .evaluate import evaluate_model, load_run
    from .extend import extension_tasks

    cfg, _, model, *_ = load_run(run, device="cpu")
    _, per_seq = evaluate_model(extension_tasks(cfg)["new_ids"], model, next(model.parameters()).device,
                                cfg.train.eval_batch_size, n_resamples=10)
    return per_seq


def aggregate_extend(root: Path, n_resamples: int = 10_000) -> list[dict]:
    """One row per extended cell: accuracy on sequences of new ids only (seeds pooled)."""
    rows = []
    for cfg, members in group_runs(find_runs(root, "extend.json")):
        scores = [extension_scores(run) for _, run in members]
        info = json.loads((members[0][1] / "extend.json").read_text())
        row = {**cell_columns(cfg), "base_vocab": info["vocab_size"], "extra_vocab": info["extra_vocab"],
               "n_seeds": len(members)}
        for m in METRICS:
            s = pooled([sc[m] for sc in scores], n_resamples)
            row.update({m: s["mean"], f"{m}_ci_low": s["ci_low"], f"{m}_ci_high": s["ci_high"]})
        rows.append(row)
    return rows


def aggregate_lm(root: Path, n_resamples: int = 10_000) -> list[dict]:
    """One row per language-model run: test perplexity (the paper's Table 1 reports min /
    mean / max over seeds, so the seeds are listed, not pooled)."""
    rows = []
    for run in find_runs(root, "eval.json"):
        cfg = read_run_config(run)
        r = json.loads((run / "eval.json").read_text())
        rows.append({"model": cfg.model.name, "pe": cfg.model.pe, "seed": cfg.train.seed, "hidden_size": cfg.model.hidden_size,
                     "iterations": cfg.train.iterations, "batch_size": cfg.train.batch_size, "vocab_size": cfg.task.vocab_size,
                     "max_tokens": cfg.task.length, "perplexity": r["perplexity"], "token_nll": r["token_nll"],
                     "n_tokens": r["n_tokens"]})
    return rows


#: sweep directory name → how it is aggregated
AGGREGATORS = {
    "fig2": aggregate_eval, "forms": aggregate_eval, "double": aggregate_eval, "length": aggregate_eval,
    "dual": aggregate_dual, "stability": aggregate_stability, "extend": aggregate_extend, "lm": aggregate_lm,
}


def write_csv(rows: list[dict], path: Path) -> None:
    buf = io.StringIO()
    fields = list(dict.fromkeys(k for r in rows for k in r))
    w = csv.DictWriter(buf, fieldnames=fields)
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    _atomic(Path(path), lambda f: f.write(buf.getvalue().encode()))


def read_csv(path: Path) -> list[dict]:
    def conv(v: str):
        for t in (int, float):
            try:
                return t(v)
            except ValueError:
                pass
        return None if v == "" else v

    with open(path, newline="") as f:
        return [{k: conv(v) for k, v in r.items()} for r in csv.DictReader(f)]


def headline(tables: dict[str, list[dict]]) -> dict:
    """The numbers ``dvc metrics show`` prints: per sweep and cell, the token accuracy."""
    out: dict = {}
    for name, rows in tables.items():
        if name == "fig2":
            for r in rows:
                out.setdefault("fig2", {})[f"{r['model']}_V{r['vocab_size']}_{r['pe']}"] = round(r["token_accuracy"], 4)
        elif name == "dual":
            for r in rows:
                out.setdefault("dual", {})[f"{r['model']}_{r['pe']}_{r['condition'].replace('/', '')}"] = round(r["token_accuracy"], 4)
        elif name in ("forms", "double", "length"):
            for r in rows:
                out.setdefault(name, {})[f"{r['model']}_V{r['vocab_size']}_L{r['length']}_{r['pe']}"] = round(r["token_accuracy"], 4)
        elif name == "extend":
            for r in rows:
                out.setdefault("extend", {})[f"{r['model']}_V{r['base_vocab']}+{r['extra_vocab']}_{r['pe']}"] = round(r["token_accuracy"], 4)
        elif name == "lm":
            for pe in dict.fromkeys(r["pe"] for r in rows):
                ppl = [r["perplexity"] for r in rows if r["pe"] == pe]
                out.setdefault("lm", {})[f"{rows[0]['model']}_{pe}_perplexity_mean"] = round(sum(ppl) / len(ppl), 3)
        elif name == "stability":
            last = max((r["step"] for r in rows), default=None)
            for r in rows:
                if r["step"] == last:
                    key = f"{r['model']}_{r['pe']}_{r['pair']}_{r['condition'].replace('/', '')}"
                    out.setdefault("stability", {})[key] = round(r["stability"], 4)
    return out


def aggregate(runs_root: Path, out_dir: Path, sweeps: Optional[list[str]] = None, n_resamples: int = 10_000,
              extra_metrics: Optional[dict] = None) -> dict[str, list[dict]]:
    """Aggregate every sweep directory under ``runs_root`` into ``out_dir/<sweep>.csv`` and
    ``out_dir/metrics.json``. Stability values live in the dual runs' directories."""
    runs_root, out_dir = Path(runs_root), Path(out_dir)
    if not runs_root.is_dir():
        raise PosrnnError(f"{runs_root} does not exist; run the train stages first (dvc repro)")
    if sweeps is None:
        present = {d.name for d in runs_root.iterdir() if d.is_dir()}
        sweeps = [n for n in AGGREGATORS if (("dual" if n == "stability" else n) in present)]
    wanted = sweeps
    tables: dict[str, list[dict]] = {}
    for name in wanted:
        if name not in AGGREGATORS:
            raise PosrnnError(f"unknown sweep {name!r}; known: {', '.join(AGGREGATORS)}")
        src = runs_root / ("dual" if name == "stability" else name)
        rows = AGGREGATORS[name](src, n_resamples) if src.is_dir() else []
        if rows:
            tables[name] = rows
            write_csv(rows, out_dir / f"{name}.csv")
    metrics = headline(tables)
    if extra_metrics:
        metrics.update(extra_metrics)
    atomic_write_json(out_dir / "metrics.json", metrics)
    return tables
