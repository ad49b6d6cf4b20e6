"""Confidence intervals (SPEC §4): a percentile bootstrap of the mean, 10,000 resamples by
default, over per-sequence scores pooled across seeds. NumPy only."""

from __future__ import annotations

from typing import Sequence

import numpy as np


def bootstrap_ci(
    values: Sequence[float] | np.ndarray, n_resamples: int = 10_000, level: float = 0.95, seed: int = 0, chunk: int = 500
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of ``values`` (resampled with replacement)."""
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    means = np.empty(n_resamples)
    for start in range(0, n_resamples, chunk):
        k = min(chunk, n_resamples - start)
        idx = rng.integers(0, x.size, size=(k, x.size))
        means[start : start + k] = x[idx].mean(1)
    a = (1.0 - level) / 2
    lo, hi = np.quantile(means, [a, 1.0 - a])
    return float(lo), float(hi)


def summarize(values: Sequence[float] | np.ndarray, n_resamples: int = 10_000, seed: int = 0) -> dict[str, float]:
    """Mean, 95% CI and count of ``values``."""
    x = np.asarray(values, dtype=np.float64).ravel()
    lo, hi = bootstrap_ci(x, n_resamples=n_resamples, seed=seed)
    return {"mean": float(x.mean()) if x.size else float("nan"), "ci_low": lo, "ci_high": hi, "n": int(x.size)}


def pooled(values: list, n_resamples: int = 10_000) -> dict[str, float]:
    """``summarize`` of several arrays concatenated (the seeds of one cell, SPEC §4)."""
    x = np.concatenate([np.asarray(v, dtype=np.float64).ravel() for v in values]) if values else np.zeros(0)
    return summarize(x, n_resamples=n_resamples)
