"""Aggregation: every experiment of a profile into one table, with each seed's value and a 95%
CI that resamples seeds, then sequences within each seed (``common.results.stats.hierarchical``). It
reads result files only — the runs' ``config.yaml`` and the score files that evaluation wrote —
and imports no training code. It pools only scores that prove they are the run's own: stamped
with the sha256 of the run's latest checkpoint and the digest of its config.yaml
(``common.results.provenance``); a table is checked (``common.results.tables``) before it is written.

Layout::

    runs/<profile>/<experiment>/<cell>-s<seed>/   config.yaml, eval.json, eval_sequences.npz,
                                                   extend_sequences.npz, stability_values.npz,
                                                   permutation.json, …
    runs/<profile>/<experiment>/sweep.json        the cells of the current grid (posrnn sweep)
    results/<profile>/tables/<experiment>.csv     one row per cell (per condition, step, …)
    results/<profile>/metrics/<experiment>.json   the headline numbers under the experiment's name,
                                                   numbers only (``MEASURES``)

A *cell* is a run's config without its seed: runs that differ only in ``train.seed`` form one
row. The row lists its seeds (``seeds``, ascending) and, for each measure ``m``, the mean over
seeds (``m``), each seed's mean in the same order (``m_by_seed``) and the hierarchical 95% CI
(``m_ci_low``, ``m_ci_high``): the scorecard reads the per-seed values, so a reader can check
the sign of an effect on every seed. Which table an experiment makes, and its headline numbers,
are declared in the experiment registry (``common.stages.experiments``) and recorded in the
experiment's ``sweep.json``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np

from ..common import catalog
from ..common.catalog import feedback_prefix
from ..common.settings import keys
from ..common.files import rundir
from ..common.settings.config import RunConfig
from ..common.errors import PosrnnError
from ..common.stages.experiments import EXPERIMENTS, TABLE_FORMS, resolve
from ..common.files.io import csv_text, json_digest, log_mismatch, read_json, read_npz, same_path, write_owned_together
from ..common.results.tables import check_table
from ..common.results.provenance import Proof, check_scores, proven_eval, proven_record, proven_stability
from ..common.results.stats import hierarchical
from ..common.results.tables import COSINE_QUANTILES

METRICS = ("token_accuracy", "sequence_accuracy", "damerau_levenshtein")
DUAL_CONDITIONS = ("F/F", "F/R", "R/F", "R/R")  # target kind / disturbant kind (003 §2.2, dual frequency)
#: the columns that name a cell in the tables (the rest of the config is constant in a sweep), and
#: the config keys that do not split a cell: the table of config keys (``common.settings.keys``)
CELL_COLUMNS, IGNORED = keys.CELL_COLUMNS, keys.CELL_IGNORED
MANIFEST = "sweep.json"
#: the position ranges of the dual table, as fractions of L: all, halves, quarters
POSITIONS = {"all": (0, 1), "first": (0, 0.5), "second": (0.5, 1),
             "q1": (0, 0.25), "q2": (0.25, 0.5), "q3": (0.5, 0.75), "q4": (0.75, 1)}


# ---- reading runs ---------------------------------------------------------------------------
def read_config(run: Path) -> RunConfig:
    cfg = rundir.read_config(run, fix="re-run its sweep")
    if cfg is None:
        raise PosrnnError(f"{run} has no config.yaml; re-run its sweep (posrnn sweep) or dvc repro")
    return cfg


def runs_of(exp_dir: Path) -> list[Path]:
    """The run directories of an experiment: the cells its sweep manifest lists (so runs of an
    older grid left on disk are ignored), or every sub-directory holding a config.yaml."""
    exp_dir = Path(exp_dir)
    manifest = exp_dir / MANIFEST
    if manifest.is_file():
        try:
            data = read_json(manifest)
            names = [c["name"] for c in data["cells"]]
        except (ValueError, KeyError, TypeError, IndexError):
            raise PosrnnError(f"{manifest} is not a sweep manifest; re-run the sweep") from None
        check_manifest_cells(exp_dir, data, names)
        if not all(isinstance(n, str) and n and n not in (".", "..") and "/" not in n and "\\" not in n
                   and "\0" not in n
                   for n in names):
            raise PosrnnError(f"{manifest} is not a sweep manifest (a cell name is not a directory name); re-run the "
                              "sweep")
        return [exp_dir / n for n in names]
    return sorted(p.parent for p in exp_dir.glob("*/config.yaml"))


def check_manifest_cells(exp_dir: Path, data: dict, names: list) -> None:
    """A manifest's cells are the ones its sweep wrote (``cells_sha256``; one written before it
    kept a digest is taken as it is): a cell dropped from it or added is refused in one line,
    naming a run on disk the manifest no longer lists, so no cell leaves a table without a word."""
    digest = data.get("cells_sha256")
    if digest is None or json_digest(data["cells"]) == digest:
        return
    unlisted = sorted(p.parent.name for p in Path(exp_dir).glob("*/config.yaml") if p.parent.name not in names)
    hint = f" (the run {unlisted[0]} is on disk but not in it)" if unlisted else ""
    raise PosrnnError(f"{Path(exp_dir) / MANIFEST} lists other cells than its sweep wrote{hint}; re-run the sweep "
                      "to rewrite it")


def cell_of(cfg: RunConfig) -> tuple:
    return tuple(sorted((k, json.dumps(v)) for k, v in cfg.flat().items() if k not in IGNORED))


def cell_columns(cfg: RunConfig) -> dict[str, Any]:
    flat = cfg.flat()
    return {name: flat[key] for name, key in CELL_COLUMNS + keys.SHOWN_WHEN_SET}


def drop_unset(rows: list[dict]) -> list[dict]:
    """``rows`` without the columns of settings no row moves from its default (``keys.SHOWN_WHEN_SET``):
    a table shows ``conv`` only where some cell sets it."""
    default = RunConfig().flat()
    unset = {name for name, key in keys.SHOWN_WHEN_SET if all(r.get(name, default[key]) == default[key] for r in rows)}
    return [{k: v for k, v in r.items() if k not in unset} for r in rows] if unset else rows


def group_runs(runs: Iterable[Path]) -> list[tuple[RunConfig, list[tuple[int, Path]]]]:
    """Runs → ``[(config of the cell, [(seed, run_dir), …]), …]`` in first-seen order."""
    groups: dict[tuple, tuple[RunConfig, list]] = {}
    for run in runs:
        cfg = read_config(run)
        groups.setdefault(cell_of(cfg), (cfg, []))[1].append((cfg.train.seed, run))
    for cfg, members in groups.values():
        members.sort(key=lambda m: m[0])
        seeds = [s for s, _ in members]
        if len(set(seeds)) != len(seeds):
            raise PosrnnError(f"two runs of one cell share a seed ({', '.join(str(r) for _, r in members)}); "
                              f"remove the copy or re-run the sweep")
    return list(groups.values())


def arrays(path: Path, keys: tuple) -> dict:
    """The score arrays of ``path``, each of ``keys`` required."""
    data = read_npz(need(path, "per-sequence scores"))
    missing = [k for k in keys if k not in data]
    if missing:
        raise PosrnnError(f"{path} has no {', '.join(missing)} scores (not written by `posrnn eval`?); re-run its "
                          "sweep")
    return data


def scores(run: Path, keys: tuple, name: str = "eval_sequences.npz") -> tuple[dict, dict]:
    """A run's per-sequence scores and the summary beside them, both proven to score the run's
    latest checkpoint under its current config.yaml (``common.results.provenance``): ``eval.json`` for
    ``eval_sequences.npz``, ``{}`` for an extension's ``extend_sequences.npz``."""
    proof = Proof(run)
    if name == "eval_sequences.npz":
        summary = proven_eval(run, proof)
        n, sha = summary.get("n_test"), summary.get("sequences_sha256")
    else:  # an extension: extend.json records the per-sequence file's sha256 and length
        record = read_json(need(Path(run) / "extend.json", "extension summary"))
        n, sha = (record.get("n_sequences"), record.get("sequences_sha256")) if isinstance(record, dict) else (None,
                                                                                                               None)
        if not isinstance(n, int) or not isinstance(sha, str):
            raise PosrnnError(f"{Path(run) / 'extend.json'} records no digest of {name} (written by an older posrnn); "
                              f"redo it: posrnn sweep {Path(run).parent.name} (or dvc repro)")
        summary = {}
    path = Path(run) / name
    return check_scores(path, arrays(path, keys), keys, proof, n if isinstance(n, int) else None, sha), summary


def need(path: Path, what: str) -> Path:
    if not path.is_file():
        raise PosrnnError(f"{path} is missing ({what}); re-run the sweep that writes it (posrnn sweep or dvc repro)")
    return path


def seeds_columns(members: list[tuple[int, Path]]) -> dict:
    return {"seeds": " ".join(str(s) for s, _ in members), "n_seeds": len(members)}


def by_seed(values: Iterable[float]) -> str:
    """Per-seed values as one cell, in the order of the row's ``seeds``."""
    return " ".join(f"{float(v):.6g}" for v in values)


def with_ci(prefix: str, s: dict) -> dict:
    return {prefix: s["mean"], f"{prefix}_by_seed": by_seed(s["by_seed"]), f"{prefix}_ci_low": s["ci_low"],
            f"{prefix}_ci_high": s["ci_high"]}


# ---- the tables -------------------------------------------------------------------------------
def table_eval(runs: list[Path], n_resamples: int) -> list[dict]:
    """One row per cell: token / sequence accuracy and DL distance (each seed and their mean, 95% CIs)."""
    rows = []
    for cfg, members in group_runs(runs):
        data, reports = zip(*(scores(run, METRICS) for _, run in members))
        row = {**cell_columns(cfg), **seeds_columns(members)}
        for m in METRICS:
            s = hierarchical([a[m] for a in data], n_resamples)
            row.update(with_ci(m, s))
        row["n_sequences"] = s["n"]
        if reports and all(isinstance(r.get("non_decreasing_share"), (int, float)) for r in reports):
            share = [float(r["non_decreasing_share"]) for r in reports]  # the sort diagnostic (000 App. C.2)
            row.update({"non_decreasing_share": float(np.mean(share)), "non_decreasing_share_by_seed": by_seed(share)})
        rows.append(row)
    return rows


def table_dual(runs: list[Path], n_resamples: int) -> list[dict]:
    """One row per (cell, target kind / disturbant kind, positions): accuracy on the target
    token over all target positions (``half`` = all), those in the first / second half of the
    input (first, second) and in each quarter (q1 … q4)."""
    rows = []
    for cfg, members in group_runs(runs):
        L = cfg.task.length
        data = [scores(run, ("token_accuracy", "group"))[0] for _, run in members]
        for k, name in enumerate(DUAL_CONDITIONS):
            for half, (lo, hi) in POSITIONS.items():
                picked = []
                for a in data:
                    group = a["group"]
                    t = group % L
                    picked.append(a["token_accuracy"][(group // L == k) & (t >= lo * L) & (t < hi * L)])
                s = hierarchical(picked, n_resamples)
                rows.append({**cell_columns(cfg), "condition": name, "half": half, **with_ci("token_accuracy", s),
                             **seeds_columns(members), "n_sequences": s["n"]})
    return rows


def target_position_of(run: Path) -> int:
    """The target position a run's stability values were taken at (``stability_meta.json``);
    1, the first token, where the record predates the option or there is none."""
    meta = Path(run) / "stability_meta.json"
    t = read_json(meta).get("target_position", 1) if meta.is_file() else 1
    if isinstance(t, bool) or not isinstance(t, int) or t < 1:
        raise PosrnnError(f"{meta}: target_position must be a positive integer, got {t!r}; re-run posrnn sweep "
                          "stability")
    return t


def table_stability(runs: list[Path], n_resamples: int) -> list[dict]:
    """One row per (cell, checkpoint step, condition, pair): mean stability over the seeds (each
    seed's mean over its triplets), each seed's value and the hierarchical 95% CI. The
    ``target_position`` column is there when some cell's target is not the first token (t > 1,
    002 §4.3's S4D set-up), so a table of the RNNs' set-up reads as it always did."""
    rows = []
    for cfg, members in group_runs(runs):
        positions = {target_position_of(run) for _, run in members}
        if len(positions) > 1:
            raise PosrnnError("the seeds of one cell were analysed at different target positions "
                              f"({sorted(positions)}: {', '.join(str(r) for _, r in members)}); re-run posrnn sweep "
                              "stability")
        (t,) = positions
        values: dict[str, list] = defaultdict(list)
        seeds: dict[str, list] = defaultdict(list)
        for seed, run in members:
            for key, v in proven_stability(run)[0].items():  # the source run's analysis as it is now
                values[key].append(v)
                seeds[key].append(seed)
        for key in sorted(values, key=lambda k: (int(k.split("|")[0]), k)):
            step, cond, pair = key.split("|")
            s = hierarchical(values[key], n_resamples)
            rows.append({**cell_columns(cfg), "step": int(step), "condition": cond, "pair": pair, "target_position": t,
                         "stability": s["mean"], "stability_by_seed": by_seed(s["by_seed"]), "ci_low": s["ci_low"],
                         "ci_high": s["ci_high"], "seeds": " ".join(map(str, seeds[key])),
                         "n_seeds": len(values[key]), "n_triplets": s["n"]})
    if all(r["target_position"] == 1 for r in rows):
        for r in rows:
            del r["target_position"]
    return rows


def table_extend(runs: list[Path], n_resamples: int) -> list[dict]:
    """One row per extended cell: accuracy on sequences of new ids only."""
    rows = []
    for cfg, members in group_runs(runs):
        data = [scores(run, METRICS, "extend_sequences.npz")[0] for _, run in members]
        row = {**cell_columns(cfg), "base_vocab": cfg.model.frozen_vocab,
               "extra_vocab": cfg.task.vocab_size - cfg.model.frozen_vocab, **seeds_columns(members)}
        for m in METRICS:
            row.update(with_ci(m, hierarchical([sc[m] for sc in data], n_resamples)))
        rows.append(row)
    return rows


def table_autoreg(runs: list[Path], n_resamples: int) -> list[dict]:
    """One row per (autoregressive cell, feedback): the eval table's measures with the output
    phase fed the model's own previous predictions (``self``) or the previous targets (``truth``,
    teacher forcing at test time), both scored on the same test sequences of the same checkpoint."""
    rows = []
    for cfg, members in group_runs(runs):
        if not cfg.task.autoregressive:
            raise PosrnnError(f"{members[0][1]} is not autoregressive (task.autoregressive is false), so it has no "
                              f"ground-truth-fed scores; re-run its sweep (the autoreg experiment sets it)")
        keys = tuple(feedback_prefix(f) + m for f in catalog.FEEDBACK for m in METRICS)
        data = [scores(run, keys)[0] for _, run in members]
        for feedback in catalog.FEEDBACK:
            row = {**cell_columns(cfg), "feedback": feedback, **seeds_columns(members)}
            for m in METRICS:
                s = hierarchical([a[feedback_prefix(feedback) + m] for a in data], n_resamples)
                row.update(with_ci(m, s))
            rows.append({**row, "n_sequences": s["n"]})
    return rows


def table_cosine(runs: list[Path], n_resamples: int) -> list[dict]:
    """One row per cell of the continuous task: the mean per-token cosine between predicted and
    target vectors (each seed's and their mean, 95% CI), and the per-token cosines' 10th, 50th
    and 90th percentiles over each seed's test set (``cosine_q10_by_seed`` …) with their means."""
    rows = []
    for cfg, members in group_runs(runs):
        data, reports = zip(*(scores(run, ("cosine",)) for _, run in members))
        quantiles = {}
        for p in COSINE_QUANTILES:
            values = [r.get(f"cosine_q{p}") for r in reports]
            if not all(isinstance(v, (int, float)) for v in values):
                raise PosrnnError(f"an eval.json of {', '.join(str(r) for _, r in members)} has no cosine_q{p} (not a "
                                  "continuous-task evaluation, or one by an older posrnn); re-run the continuous "
                                  "sweep")
            quantiles.update({f"cosine_q{p}": float(np.mean(values)), f"cosine_q{p}_by_seed": by_seed(values)})
        s = hierarchical([a["cosine"] for a in data], n_resamples)
        cells = {k: v for k, v in cell_columns(cfg).items() if k != "vocab_size"}  # vectors: no vocabulary
        rows.append({**cells, "dim": cfg.task.dim, **seeds_columns(members), **with_ci("cosine", s),
                     **quantiles, "n_sequences": s["n"]})
    return rows


#: the early phase of language-model training, as a share of the iterations: the papers see PE's
#: faster start fade "around 10,000/30,000 iterations" of 300,000 (002 §5.3), i.e. by 3-10%
EARLY_FRACTION = 0.10


def proven_log(run: Path, numbers: tuple[str, ...]) -> list[dict]:
    """The run's training log (``rundir.log_entries``), once its marker vouches for it: the log must
    begin with what it held at the run's last checkpoint (``io.log_mismatch``), so a log copied
    from another run or edited gives no curve."""
    why = log_mismatch(run)
    if why:
        raise PosrnnError(f"{why}; re-run its training (posrnn sweep {Path(run).parent.name}), or restore the log")
    return rundir.log_entries(run, numbers)


def early_loss(run: Path, fraction: float = EARLY_FRACTION) -> Optional[float]:
    """Mean training loss logged over the first ``fraction`` of a run's iterations, or ``None``
    without a log line in that window: how fast a model learns early on (001 §6.5)."""
    limit = fraction * read_config(run).train.iterations
    losses = [float(x["loss"]) for x in proven_log(run, ("loss",)) if x.get("step", limit + 1) <= limit]
    return float(np.mean(losses)) if losses else None


def table_lm(runs: list[Path], n_resamples: int) -> list[dict]:
    """One row per language-model cell: test perplexity, mean over seeds, with each seed's value
    and its min / max (the paper's Table 1 reports min / mean / max over seeds), and the mean
    training loss over the first tenth of training (``early_train_loss``, ``EARLY_FRACTION``)."""
    rows = []
    for cfg, members in group_runs(runs):
        reports = [proven_eval(run) for _, run in members]
        if not all(isinstance(r.get("perplexity"), (int, float)) for r in reports):
            raise PosrnnError(f"an eval.json of {', '.join(str(r) for _, r in members)} has no perplexity (not a "
                              f"language model's evaluation); re-run the lm sweep")
        ppl = [float(r["perplexity"]) for r in reports]
        early = [early_loss(run) for _, run in members]
        row = {**cell_columns(cfg), "max_tokens": cfg.task.length, **seeds_columns(members),
               "perplexity": float(np.mean(ppl)), "perplexity_by_seed": by_seed(ppl),
               "perplexity_min": min(ppl), "perplexity_max": max(ppl)}
        if all(e is not None for e in early):
            row.update({"early_train_loss": float(np.mean(early)), "early_train_loss_by_seed": by_seed(early)})
        rows.append(row)
    return rows


def table_irie(runs: list[Path], n_resamples: int) -> list[dict]:
    """One row per cell of causal Transformers: accuracy, and how often permuting the earlier
    positions changed the last position's output (``permutation.json`` of each run)."""
    rows = []
    for cfg, members in group_runs(runs):
        data = [scores(run, ("token_accuracy",))[0] for _, run in members]
        perms = [proven_record(run / "permutation.json", Proof(run), "sensitive") for _, run in members]
        s = hierarchical([a["token_accuracy"] for a in data], n_resamples)
        sens = hierarchical([np.asarray(p["sensitive"], dtype=float) for p in perms], n_resamples)
        rows.append({**cell_columns(cfg), **seeds_columns(members), "n_sequences": s["n"],
                     **with_ci("token_accuracy", s),
                     "permutation_sensitive_share": sens["mean"],
                     "permutation_sensitive_share_by_seed": by_seed(sens["by_seed"]),
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
        log = proven_log(run, ("step", "loss", "accuracy"))  # anything else is not a line `posrnn train` wrote
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
    return {pe: _mean(r[key] for r in rows if r["pe"] == pe)
            for pe in catalog.order(catalog.PE_FORMS, (r["pe"] for r in rows))}


# One ``dvc metrics show`` row per experiment, with the same few columns for all: the headline
# measure per PE form or per layer count. Numbers only: a text field would make `dvc exp show` a
# column per experiment; what each file's numbers are is said here (MEASURES) and in docs/pipeline.md.
def headline_eval(rows: list[dict]) -> dict:
    return by_pe(rows, "token_accuracy")


def headline_dual(rows: list[dict]) -> dict:
    return by_pe([r for r in rows if r["condition"] == "F/R" and r["half"] == "all"], "token_accuracy")


def headline_stability(rows: list[dict]) -> dict:
    last = max(r["step"] for r in rows)
    return {"step": int(last), **by_pe(
        [r for r in rows if r["step"] == last and r["pair"] == "common_target" and r["condition"] == "F/R"],
        "stability")}


def headline_extend(rows: list[dict]) -> dict:
    return by_pe(rows, "token_accuracy")


def headline_lm(rows: list[dict]) -> dict:
    return by_pe(rows, "perplexity")


def headline_irie(rows: list[dict]) -> dict:
    return {f"layers_{r['layers']}": round(r["permutation_sensitive_share"], 4) for r in rows}


def headline_autoreg(rows: list[dict]) -> dict:
    """Token accuracy per PE form under self-feedback (``<pe>``) and ground-truth feedback (``<pe>_truth``)."""
    return {**by_pe([r for r in rows if r["feedback"] == "self"], "token_accuracy"),
            **{f"{pe}_truth": v
               for pe, v in by_pe([r for r in rows if r["feedback"] == "truth"], "token_accuracy").items()}}


def headline_cosine(rows: list[dict]) -> dict:
    return by_pe(rows, "cosine")


def metrics_text(experiment: str, form: str, headline: dict) -> bytes:
    """An experiment's metrics file: its headline numbers under its own name, then under what
    they measure (``POOLED``), so every key is unique across a profile's files and says what it
    is (``fig2.acc.none``: token accuracy, the mean over every cell): DVC then names a column by
    its key alone, not by the file's path, and ``dvc exp show`` stays narrow."""
    return (json.dumps({experiment: {POOLED[form]: headline}}, indent=2) + "\n").encode()


#: the metrics' middle key, by table form: what is measured, short enough that ``dvc exp show``
#: fits a changed experiment in 120 columns (``MEASURES`` says each in full, with what it pools)
POOLED = {
    "eval": "acc",
    "dual": "acc_FR",
    "stability": "stab_FR",
    "extend": "acc_new",
    "lm": "ppl",
    "irie": "perm",
    "autoreg": "acc",
    "cosine": "cos",
}


#: what the numbers of each table form's metrics file are (by PE form, ``none`` = vanilla)
MEASURES = {
    "eval": "token accuracy, mean over cells",
    "dual": "token accuracy, F target / R disturbants",
    "stability": "common-target stability, F/R, at the last analysed checkpoint (`step`)",
    "extend": "token accuracy on sequences of new ids only",
    "lm": "test perplexity, mean over seeds",
    "irie": "share of sequences whose last output a permutation changes, by layer count",
    "autoreg": "token accuracy, mean over cells: self-feedback (<pe>) and ground-truth feedback (<pe>_truth)",
    "cosine": "mean per-token cosine between predicted and target vectors, mean over cells",
}


def table_form(exp_dir: Path) -> Optional[str]:
    """The table form an experiment's runs make (a ``TABLE_FORMS`` key of the experiment registry):
    the one its sweep manifest recorded, else the registry's entry for the directory's name."""
    manifest = Path(exp_dir) / MANIFEST
    if manifest.is_file():
        data = read_json(manifest)
        recorded = data.get("table", "") if isinstance(data, dict) else None
        if recorded in TABLE_FORMS:
            return recorded
        if recorded != "" or data.get("experiment", Path(exp_dir).name) != Path(exp_dir).name:
            raise PosrnnError(f"{manifest} is not a sweep manifest of {Path(exp_dir).name} (its table is {recorded!r}, "
                              f"its experiment {data.get('experiment') if isinstance(data, dict) else None!r}); "
                              "re-run the sweep")
    name = Path(exp_dir).name
    if name not in EXPERIMENTS:
        raise PosrnnError(f"{exp_dir} is not an experiment posrnn knows (known: {', '.join(EXPERIMENTS)}); "
                          f"move it out of the run root or re-run its sweep")
    return EXPERIMENTS[name].table


def aggregate(runs_root: Path, out_dir: Path, metrics_dir: Optional[Path] = None,
              experiments: Optional[list[str]] = None,
              n_resamples: int = 10_000, curves_dir: Optional[Path] = None) -> dict[str, list[dict]]:
    """Aggregate every experiment directory under ``runs_root`` (or those named) into
    ``out_dir/<experiment>.csv``, ``metrics_dir/<experiment>.json`` and the training curves
    ``curves_dir/<experiment>.csv`` (by default ``metrics`` and ``curves`` beside ``out_dir``).
    Every table is computed before the first is written, and they are swapped in together."""
    runs_root, out_dir = Path(runs_root), Path(out_dir)
    metrics_dir = Path(metrics_dir) if metrics_dir is not None else out_dir.parent / "metrics"
    curves_dir = Path(curves_dir) if curves_dir is not None else out_dir.parent / "curves"
    check_aggregate_dirs(runs_root, {"--out": out_dir, "--metrics": metrics_dir, "--curves": curves_dir})
    present = sorted(d.name for d in runs_root.iterdir() if d.is_dir() and not d.name.startswith("."))
    tables: dict[str, list[dict]] = {}
    files: dict[Path, bytes] = {}
    for name in experiments or present:
        if name not in present:
            raise PosrnnError(f"no experiment {name!r} under {runs_root}; present: {', '.join(present) or 'none'}")
        built = experiment_files(runs_root / name, out_dir / f"{name}.csv", metrics_dir / f"{name}.json",
                                 curves_dir / f"{name}.csv", n_resamples)
        if built is not None:
            tables[name] = built[0]
            files.update(built[1])
    write_aggregate_files(files)
    return tables


def check_aggregate_dirs(runs_root: Path, outs: dict[str, Path]) -> None:
    """Refuse a run root that is not a directory, and output directories (by option) that are one
    another or the run root."""
    if not runs_root.is_dir():
        what = "is a file, not a directory" if runs_root.exists() else "does not exist"
        raise PosrnnError(f"{runs_root} {what}; pass a profile's run root (runs/<profile>) after running its sweeps")
    named = list(outs.items())
    for i, (a, pa) in enumerate(named):
        for b, pb in named[i + 1:]:
            if same_path(pa, pb):
                raise PosrnnError(f"{a} and {b} are the same directory ({pa}): one would overwrite the other's tables; "
                                  f"pass different directories")
        if same_path(pa, runs_root):
            raise PosrnnError(f"{a} {pa} is the run root itself; pass another directory")


def experiment_files(exp_dir: Path, table: Path, metrics: Path, curve: Path,
                     n_resamples: int) -> Optional[tuple[list[dict], dict[Path, bytes]]]:
    """The table of the experiment in ``exp_dir`` and the files it makes (``table``, ``metrics``,
    ``curve``: its training curves, when its runs logged any) → (rows, {path: bytes}); None for
    an empty grid or an experiment whose runs feed another (``lm_data``), and no rows: no files.
    An empty grid beside an older grid's table is refused."""
    name, runs = exp_dir.name, runs_of(exp_dir)
    form = table_form(exp_dir) if runs or (exp_dir / MANIFEST).is_file() else None
    if not runs or form is None:
        old = [p for p in (table, metrics) if p.exists()]
        if old and form is not None:
            raise PosrnnError(f"{exp_dir} has no runs in its current grid, but {old[0]} holds a table of "
                              f"an older one; remove {', '.join(map(str, old))} (or give {name} cells and re-run "
                              "its sweep)")
        return None
    rows = drop_unset(resolve(TABLE_FORMS[form].build)(runs, n_resamples))
    if not rows:
        return None
    check_table(rows, exp_dir, what=f"{form} table",
                fix="a cell without scores (an empty condition?) or non-finite scores; check its runs, then "
                    "re-run their sweep")
    files = {table: csv_text(rows).encode(),
             metrics: metrics_text(name, form, resolve(TABLE_FORMS[form].headline)(rows))}
    log = curves(runs)
    if log:
        files[curve] = csv_text(log).encode()
    return rows, files


def write_aggregate_files(files: dict[Path, bytes]) -> None:
    """Swap ``files`` in together (each replaced only where posrnn wrote it), or write none."""
    for path in files:
        if path.parent.exists() and not path.parent.is_dir():
            raise PosrnnError(f"{path.parent} is a file, not a directory; pass another output directory")
    try:
        write_owned_together(files)
    except OSError as e:
        raise PosrnnError(f"cannot write the tables ({e.strerror or type(e).__name__}: {e.filename or '?'}); "
                          f"nothing was replaced") from None
