"""Confidence intervals that treat the seed as the unit of replication. NumPy only.

Two methods (docs/statistics.md, "How a verdict is read", says why):

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
from typing import Optional, Sequence

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
    values: Sequence[float] | np.ndarray, n_resamples: int = 10_000, level: float = 0.95, seed: int = 0,
    chunk: int = 500
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


# ---- how many seeds a comparison needs --------------------------------------------------------
def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln) * _betacf(b, a, 1.0 - x) / b


def t_cdf(x: float, df: float) -> float:
    """P(T ≤ x) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + x * x))
    return 1.0 - tail if x >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on ``t_cdf``)."""
    if not 0.0 < p < 1.0:
        raise ValueError("t_quantile needs 0 < p < 1")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
        if hi - lo < 1e-10 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


def t_interval_at(values: Sequence[float] | np.ndarray, level: float) -> tuple[float, float, float]:
    """Mean and two-sided Student-t interval of ``values`` at confidence ``level`` (e.g. 1 − 0.05/k
    for a Bonferroni–Holm step over k comparisons)."""
    x = np.asarray(values, dtype=np.float64).ravel()
    m = float(x.mean()) if x.size else math.nan
    if x.size < 2:
        return (m, math.nan, math.nan)
    half = t_quantile(1.0 - (1.0 - level) / 2.0, x.size - 1) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return (m, m - half, m + half)


#: beyond this many seeds a comparison is reported as out of reach
MAX_SEEDS = 1000


def seeds_to_clear(effect: float, sd: float, limit: int = MAX_SEEDS) -> Optional[int]:
    """The fewest seeds n ≥ 2 at which the 95% t interval of a per-seed value with mean distance
    ``effect`` from its bound and spread ``sd`` would exclude the bound, if mean and spread stayed
    as observed (about 50% power). None beyond ``limit`` (or with no effect at all)."""
    effect, sd = abs(effect), abs(sd)
    if effect == 0.0 or not math.isfinite(effect) or not math.isfinite(sd):
        return None
    for n in range(2, limit + 1):
        if t975(n - 1) * sd / math.sqrt(n) < effect:
            return n
    return None


def seeds_for_power(effect: float, sd: float, power: float = 0.8, limit: int = MAX_SEEDS,
                    alpha: float = 0.05) -> Optional[int]:
    """The fewest seeds n ≥ 2 for ``power`` of a two-sided one-sample t test at ``alpha`` (5%) to
    exclude the bound, at the observed standardized effect (the shifted-central-t approximation:
    P(T_{n−1} > t_{1−alpha/2, n−1} − √n·effect/sd)). None beyond ``limit``."""
    effect, sd = abs(effect), abs(sd)
    if effect == 0.0 or not math.isfinite(effect) or not math.isfinite(sd):
        return None
    if sd == 0.0:
        return 2
    q = t975 if alpha == 0.05 else (lambda df: t_quantile(1.0 - alpha / 2.0, df))
    for n in range(2, limit + 1):
        if 1.0 - t_cdf(q(n - 1) - math.sqrt(n) * effect / sd, n - 1) >= power:
            return n
    return None


def seeds_to_narrow(sd: float, half_width: float, limit: int = MAX_SEEDS) -> Optional[int]:
    """The fewest seeds n ≥ 2 at which the 95% t interval's half-width falls below ``half_width``."""
    sd = abs(sd)
    if half_width <= 0.0 or not math.isfinite(sd):
        return None
    for n in range(2, limit + 1):
        if t975(n - 1) * sd / math.sqrt(n) < half_width:
            return n
    return None
