"""Scores (SPEC §4): token / sequence accuracy, Damerau–Levenshtein distance, bootstrap CIs."""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch
from rapidfuzz.distance import DamerauLevenshtein
from torch import Tensor


def sequence_scores(pred: Tensor, target: Tensor, mask: Optional[Tensor] = None) -> dict[str, np.ndarray]:
    """Per-sequence scores. pred, target: (B, K) long; mask: (B, K) bool valid steps.

    Returns arrays of shape (B,): ``token_accuracy`` (share of valid steps right),
    ``sequence_accuracy`` (1 if every valid step is right), ``damerau_levenshtein``
    (unrestricted DL distance between the valid parts of prediction and target)."""
    if mask is None:
        mask = torch.ones_like(target, dtype=torch.bool)
    ok = (pred == target) & mask
    n = mask.sum(1).clamp_min(1)
    token = (ok.sum(1) / n).double()
    seq = (ok.sum(1) == mask.sum(1)).double()
    lengths = mask.sum(1).tolist()
    p_rows, t_rows = pred.tolist(), target.tolist()
    dl = np.array(
        [DamerauLevenshtein.distance(p[:k], t[:k]) for p, t, k in zip(p_rows, t_rows, lengths)], dtype=np.float64
    )
    return {"token_accuracy": token.cpu().numpy(), "sequence_accuracy": seq.cpu().numpy(), "damerau_levenshtein": dl}


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


def summarize(values: np.ndarray, n_resamples: int = 10_000, seed: int = 0) -> dict[str, float]:
    lo, hi = bootstrap_ci(values, n_resamples=n_resamples, seed=seed)
    return {"mean": float(np.mean(values)), "ci_low": lo, "ci_high": hi, "n": int(np.size(values))}
