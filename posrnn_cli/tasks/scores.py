"""Per-sequence scores (docs/papers.md, Metrics): token / sequence accuracy, Damerau–Levenshtein distance.
(Their confidence intervals: ``common.results.stats``.)"""

from __future__ import annotations

from typing import Optional

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
