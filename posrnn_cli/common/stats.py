"""Confidence intervals that treat the seed as the unit of replication. NumPy only.

Two methods (the README's "How a verdict is read" says why):

- ``hierarchical``: the interval a table shows for one cell. A percentile bootstrap, 10,000
  resamples by default, that first draws the seeds with replacement and then, inside each drawn
  seed, that seed's per-sequence scores with replacement; the statistic is the mean over the
  drawn seeds of their mean score (every seed weighs the same). With one seed it reduces to the
  per-sequence bootstrap of the papers (003 §2, "95% confidence intervals").
- ``t_interval``: the interval a verdict reads. Student's t on per-seed values (paired
  differences for a contrast). A bootstrap over 3–5 seeds cannot produce an interval wider than
  the range of the seeds, which understates the spread; each per-seed value already carries its
  own test-set noise, so the t-interval over seeds covers both sources.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

#: two-sided 97.5% quantiles of Student's t for 1–30 degrees of freedom
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


def t975(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` ≥ 1 degrees of freedom (beyond 30 a
    1/df interpolation towards the normal 1.960, within 0.001)."""
    if df < 1:
        raise ValueError("t975 needs at least one degree of freedom")
    if df <= len(_T975):
        return _T975[df - 1]
    return 1.960 + (_T975[-1] - 1.960) * len(_T975) / df


def t_interval(values: Sequence[float] | np.ndarray) -> tuple[float, float, float]:
    """Mean and 95% Student-t interval of ``values`` (one per seed). With one value the
    interval is undefined: (mean, nan, nan)."""
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0:
        return (math.nan, math.nan, math.nan)
    m = float(x.mean())
    if x.size < 2:
        return (m, math.nan, math.nan)
    half = t975(x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return (m, m - half, m + half)


def _means_of_resamples(x: np.ndarray, n_resamples: int, rng: np.random.Generator, chunk: int = 500) -> np.ndarray:
    means = np.empty(n_resamples)
    for start in range(0, n_resamples, chunk):
        k = min(chunk, n_resamples - start)
        means[start:start + k] = x[rng.integers(0, x.size, size=(k, x.size))].mean(1)
    return means


def bootstrap_ci(
    values: Sequence[float] | np.ndarray, n_resamples: int = 10_000, level: float = 0.95, seed: int = 0, chunk: int = 500
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of ``values`` (resampled with replacement)."""
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0:
        return (float("nan"), float("nan"))
    means = _means_of_resamples(x, n_resamples, np.random.default_rng(seed), chunk)
    a = (1.0 - level) / 2
    lo, hi = np.quantile(means, [a, 1.0 - a])
    return float(lo), float(hi)


def summarize(values: Sequence[float] | np.ndarray, n_resamples: int = 10_000, seed: int = 0) -> dict[str, float]:
    """Mean, 95% CI and count of ``values``."""
    x = np.asarray(values, dtype=np.float64).ravel()
    lo, hi = bootstrap_ci(x, n_resamples=n_resamples, seed=seed)
    return {"mean": float(x.mean()) if x.size else float("nan"), "ci_low": lo, "ci_high": hi, "n": int(x.size)}


def hierarchical(values: list, n_resamples: int = 10_000, level: float = 0.95, seed: int = 0) -> dict:
    """Seeds, then sequences: ``values`` holds one array of per-sequence scores per seed.

    Returns the mean over seeds of each seed's mean (``mean``), the 95% CI of the two-level
    percentile bootstrap (``ci_low``, ``ci_high``), each seed's mean (``by_seed``, in the order
    given), the number of sequences (``n``) and of seeds (``n_seeds``)."""
    arrays = [np.asarray(v, dtype=np.float64).ravel() for v in values]
    arrays = [a for a in arrays if a.size]
    if not arrays:
        return {"mean": math.nan, "ci_low": math.nan, "ci_high": math.nan, "by_seed": [], "n": 0, "n_seeds": 0}
    rng = np.random.default_rng(seed)
    # each seed's bootstrap distribution of its mean; a hierarchical resample draws k seeds and,
    # for each drawn seed, one independent draw of that seed's resampled mean
    inner = np.stack([_means_of_resamples(a, n_resamples, rng) for a in arrays])  # (k, n_resamples)
    k = len(arrays)
    pick_seed = rng.integers(0, k, size=(n_resamples, k))
    pick_draw = rng.integers(0, n_resamples, size=(n_resamples, k))
    stats = inner[pick_seed, pick_draw].mean(1)
    a = (1.0 - level) / 2
    lo, hi = np.quantile(stats, [a, 1.0 - a])
    by_seed = [float(x.mean()) for x in arrays]
    mean = float(np.mean(by_seed))
    lo, hi = min(float(lo), mean), max(float(hi), mean)  # identical scores: equal up to rounding
    return {"mean": mean, "ci_low": lo, "ci_high": hi, "by_seed": by_seed,
            "n": int(sum(x.size for x in arrays)), "n_seeds": k}
