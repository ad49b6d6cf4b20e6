"""Paired differences between runs, for ``posrnn compare``: B − A on the same held-out sequences
(one run a side), or on the same seeds (several runs a side), each with its 95% interval and
one sentence saying what it means.

- One run a side: the difference per test sequence (both runs score the same test set, drawn
  from the task's ``test_seed``), and its 95% percentile bootstrap over the sequences
  (``common.results.stats.bootstrap_ci``, the resampling of ``posrnn eval``'s own intervals). It says
  how sure the comparison of these two trained models is, not how a new seed would come out.
- Several runs a side: runs are paired by ``train.seed``; each seed's difference of the runs'
  mean scores, and the 95% Student-t interval over seeds (``common.results.stats.t_interval``, the
  interval the scorecard's verdicts read).

The score is the task's per-sequence measure from ``eval_sequences.npz``: token accuracy,
cosine (continuous), or mean token NLL per paragraph (language model, lower is better).
Reads result files only.
"""

from __future__ import annotations

import glob
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from ..common import catalog
from ..common.errors import PosrnnError
from ..common.files.io import read_npz
from ..common.results.provenance import Proof, check_scores
from ..common.results.stats import bootstrap_ci, t_interval

#: the word that separates the two sides of a per-seed comparison: ``A1 A2 vs B1 B2``
SEPARATOR = "vs"


@dataclass(frozen=True)
class Score:
    key: str  # the per-sequence array in eval_sequences.npz
    name: str  # how a sentence names it
    sign: int  # +1: higher is better; -1: lower is better


#: by the task's measure (``catalog.TASKS[task].measure``)
SCORES = {"accuracy": Score("token_accuracy", "token accuracy", 1), "cosine": Score("cosine", "cosine", 1),
          "perplexity": Score("nll", "NLL per paragraph (lower is better)", -1)}


def score_of(task: str) -> Score:
    return SCORES[catalog.TASKS[task].measure if task in catalog.TASKS else "accuracy"]


def expand(args: list[str]) -> tuple[list[Path], list[Path]]:
    """``A … [vs B …]`` → (side A, side B); B is empty without ``vs``. An argument that is not a
    path but holds ``*``, ``?`` or ``[`` is a glob (quoted, so posrnn expands it), run
    directories sorted by name."""
    if args.count(SEPARATOR) > 1:
        raise PosrnnError(f"`{SEPARATOR}` appears {args.count(SEPARATOR)} times; separate the two sides once: "
                          f"posrnn compare A1 A2 {SEPARATOR} B1 B2")
    if SEPARATOR in args:
        i = args.index(SEPARATOR)
        a, b = _runs(args[:i]), _runs(args[i + 1:])
        if not a or not b:
            raise PosrnnError(f"`{SEPARATOR}` needs runs on both sides: posrnn compare A1 A2 {SEPARATOR} B1 B2")
        return a, b
    return _runs(args), []


def _runs(args: list[str]) -> list[Path]:
    out: list[Path] = []
    for arg in args:
        if Path(arg).exists() or not any(c in arg for c in "*?["):
            out.append(Path(arg))
            continue
        found = sorted(Path(p) for p in glob.glob(arg) if Path(p).is_dir())
        if not found:
            raise PosrnnError(f"no run directory matches {arg!r}; check the pattern (posrnn compare 'runs/x/pe-s*' "
                              "...)")
        out += found
    return out


def sequence_scores(run_dir: Path, result: dict) -> np.ndarray:
    """The per-sequence scores ``posrnn eval`` wrote beside ``result`` (its ``eval.json``)."""
    path = Path(run_dir) / "eval_sequences.npz"
    fix = f"re-run `posrnn eval {run_dir}`"
    if not path.is_file():
        raise PosrnnError(f"{path} is missing (the per-sequence scores of the evaluation); {fix}")
    score = score_of(result["task"])
    arrays = read_npz(path)
    if score.key not in arrays:
        raise PosrnnError(f"{path} holds no {score.key} scores; {fix}")
    values = np.asarray(arrays[score.key], dtype=np.float64).ravel()
    n = result.get("n_test", result.get("n_paragraphs"))
    if (n is not None and values.size != n) or not np.isfinite(values).all():
        raise PosrnnError(f"{path} does not match its eval.json ({values.size} scores for {n} test sequences); {fix}")
    # the scores of this run's latest checkpoint under its config.yaml, the very file eval.json recorded
    check_scores(path, arrays, (score.key,), Proof(run_dir), n if isinstance(n, int) else None,
                 result.get("sequences_sha256") if isinstance(result.get("sequences_sha256"), str) else "")
    return values


def per_sequence(a: np.ndarray, b: np.ndarray, n_resamples: int = 10_000) -> dict:
    """B − A on the same test sequences: the mean and its 95% paired percentile bootstrap."""
    if a.shape != b.shape:
        raise PosrnnError(f"the runs scored different numbers of test sequences ({a.size} and {b.size}); "
                          f"compare runs of the same task settings")
    d = b - a
    lo, hi = bootstrap_ci(d, n_resamples=n_resamples)
    mean = float(d.mean())
    return {"over": "sequences", "n": int(d.size), "mean": mean, "ci_low": min(lo, mean), "ci_high": max(hi, mean),
            "interval": "95% paired bootstrap over the test sequences"}


def pair_by_seed(a: list[tuple[int, str]], b: list[tuple[int, str]]) -> list[tuple[int, str, str]]:
    """(seed, run) of each side → (seed, run A, run B), in seed order. Each side must hold each
    seed once, and both sides the same seeds."""
    for side, runs in (("A", a), ("B", b)):
        seeds = [s for s, _ in runs]
        twice = sorted({s for s in seeds if seeds.count(s) > 1})
        if twice:
            raise PosrnnError(f"side {side} has two runs of seed {twice[0]}; pass one run per seed on each side")
    sa, sb = {s: r for s, r in a}, {s: r for s, r in b}
    if set(sa) != set(sb):
        show = lambda d: " ".join(str(s) for s in sorted(d))
        raise PosrnnError(f"the sides' seeds differ (A: {show(sa)}; B: {show(sb)}); pass runs of the same seeds on "
                          "both sides")
    return [(s, sa[s], sb[s]) for s in sorted(sa)]


def per_seed(seeds: list[int], a: list[float], b: list[float]) -> dict:
    """B − A per seed (each run's mean score) and the 95% Student-t interval over seeds."""
    d = [float(y - x) for x, y in zip(a, b)]
    mean, lo, hi = t_interval(d)
    return {"over": "seeds", "n": len(d), "seeds": list(seeds), "by_seed": d, "mean": mean,
            "ci_low": None if math.isnan(lo) else lo, "ci_high": None if math.isnan(hi) else hi,
            "interval": "95% Student t over seeds"}


def side_names(diff_keys: list[str], a_cfg, b_cfg, fallback: tuple[str, str] = ("A", "B")) -> tuple[str, str]:
    """What to call the two sides: the values of the one setting they differ in (the PE form
    by its legend name), else ``fallback``."""
    if len(diff_keys) == 1:
        key = diff_keys[0]
        va, vb = a_cfg.flat()[key], b_cfg.flat()[key]
        if key == "model.pe":
            return catalog.label(catalog.PE_FORMS, va), catalog.label(catalog.PE_FORMS, vb)
        if key == "model.name":
            return catalog.label(catalog.CORES, va), catalog.label(catalog.CORES, vb)
        short = key.split(".")[-1]
        return f"{short}={va}", f"{short}={vb}"
    return fallback


#: what a claim about seeds needs, said wherever one run a side is compared
SEED_LEVEL = f"a claim about seeds needs several runs a side: posrnn compare A1 A2 … {SEPARATOR} B1 B2 …"


def one_run_scope(seeds: Optional[list[int]]) -> str:
    """What an interval over one run a side covers: the test sequences of these two trained models
    (their seeds named, when known), not seeds; and what a claim about seeds needs."""
    if seeds and len(seeds) == 2:
        who = f"seed {seeds[0]} each" if seeds[0] == seeds[1] else f"seeds {seeds[0]} and {seeds[1]}"
    else:
        who = "seeds unknown"
    return f"the interval covers the test sequences of these two runs ({who}) only, not seeds; {SEED_LEVEL}"


def differ_warning(keys: list[str], seeds: Optional[list[int]] = None) -> Optional[str]:
    """The warning when two compared runs differ in more than one setting (``keys``, the seed left
    out); with one run a side a seed of its own is one more difference, named with its values
    (``seeds``: A's and B's). None when they differ in one setting at most."""
    apart = list(keys) + ([f"train.seed {seeds[0]} vs {seeds[1]}"] if seeds and seeds[0] != seeds[1] else [])
    if len(apart) <= 1:
        return None
    shown = ", ".join(apart[:4]) + (" …" if len(apart) > 4 else "")
    return (f"the runs differ in {len(apart)} settings ({shown}), not one: the difference mixes "
            f"their effects; compare runs that differ only in the setting you test")


def meaning(diff: dict, score: Score, a: str, b: str) -> str:
    """One sentence: who is ahead, by how much, with the interval, and whether it excludes 0; with
    one run a side, what that interval covers (``one_run_scope``)."""
    text = _verdict(diff, score, a, b)
    return f"{text}; {one_run_scope(diff.get('seeds'))}" if diff["over"] == "sequences" else text


def _verdict(diff: dict, score: Score, a: str, b: str) -> str:
    over = (f"over {diff['n']} seed{'s' if diff['n'] != 1 else ''}" if diff["over"] == "seeds"
            else f"on {diff['n']:,} paired test sequences")
    m, lo, hi = diff["mean"], diff["ci_low"], diff["ci_high"]
    if lo is None or hi is None:
        return (f"{b} − {a}: {m:+.3f} {score.name} {over}; one seed gives no interval over seeds: "
                f"add seeds (3 or more a side) to tell them apart")
    text = f"{m:+.3f} [{lo:+.3f}, {hi:+.3f}] {score.name} {over}"
    if lo <= 0.0 <= hi:
        return f"{b} and {a} cannot be told apart: {b} − {a} = {text}; the interval includes 0"
    ahead = (m > 0) == (score.sign > 0)
    return f"{b} {'ahead of' if ahead else 'behind'} {a} by {text}: the interval excludes 0"


def paired_with(first_task: Optional[dict], task: Optional[dict]) -> bool:
    """Whether two runs scored the same test sequences: the same task settings."""
    return first_task is not None and first_task == task
