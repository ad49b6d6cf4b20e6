"""The tokens a language-model batch holds, for pricing it: the real tokens the output head sees
and the padded length the recurrence runs over.

From the encoded corpus's own paragraph lengths where ``posrnn lm encode`` has written it;
otherwise from an assumed distribution of WikiText-103 paragraph lengths in SentencePiece
tokens, ``WIKITEXT103_ASSUMED``: a log-normal with median 120 tokens and σ = 0.9 (mean about
180), BOS and EOS included, cut at ``max_tokens`` as ``lm encode`` cuts them. It is an
assumption, not a measurement: the raw WikiText-103 files are not in this repository; it was
chosen to agree with the corpus's published size (103 M word tokens in 28,475 articles,
Merity et al. 2016) at a few tens of paragraphs an article and about 1.3 SentencePiece pieces a
word. The GPU check draws its synthetic corpus from the same distribution and says so.

With ``task.length_buckets`` = n (the lm task's length-bucketed batches: each batch drawn from one
of n equal-count groups of the paragraphs sorted by length), a batch's padded length is its
bucket's longest draw: the expected maximum of ``batch`` draws from each n-quantile of the
distribution, averaged over the buckets, which are equally likely. The real tokens are the same:
each paragraph is drawn as often as unbucketed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

WIKITEXT103_ASSUMED = {"median": 120.0, "sigma": 0.9}
ASSUMED_SOURCE = ("paragraph lengths assumed log-normal (median 120 tokens, σ 0.9: WikiText-103's published size, "
                  "not measured here)")


@dataclass(frozen=True)
class LMTokens:
    real_per_paragraph: float  # mean next-token targets per paragraph (length − 1)
    padded_steps: float  # expected input steps of a batch: its longest paragraph − 1
    source: str


def _lognormal_cdf(x: float, median: float, sigma: float) -> float:
    return 0.5 * (1 + math.erf(math.log(x / median) / (sigma * math.sqrt(2)))) if x > 0 else 0.0


def assumed_pmf(max_tokens: int) -> list[float]:
    """P(length = n) for n = 0 … max_tokens under the assumed distribution, the tail beyond
    ``max_tokens`` cut there (a longer paragraph keeps its first ``max_tokens``), at least 2."""
    m, s = WIKITEXT103_ASSUMED["median"], WIKITEXT103_ASSUMED["sigma"]
    cdf = [_lognormal_cdf(n + 0.5, m, s) for n in range(max_tokens + 1)]
    pmf = [0.0] * (max_tokens + 1)
    pmf[2] = cdf[2]
    for n in range(3, max_tokens):
        pmf[n] = cdf[n] - cdf[n - 1]
    pmf[max_tokens] = 1.0 - cdf[max_tokens - 1]
    return pmf


def _cdf(pmf: Sequence[float]) -> list[float]:
    cdf, acc = [], 0.0
    for p in pmf:
        acc += p
        cdf.append(min(acc, 1.0))
    return cdf


def _longest(pmf: Sequence[float], batch: int) -> float:
    """E[max of ``batch`` draws] = Σ P(max > n)."""
    return sum(1.0 - c ** batch for c in _cdf(pmf)[:-1])


def bucket_pmfs(pmf: Sequence[float], buckets: int) -> list[list[float]]:
    """The length distribution of each of ``buckets`` equal-mass groups of lengths in order (a
    length on a boundary split between the two groups, as equal-count groups of a corpus split it)."""
    cdf, out = _cdf(pmf), []
    for b in range(buckets):
        lo, hi = b / buckets, (b + 1) / buckets
        part = [max(0.0, min(c, hi) - max(c - p, lo)) * buckets for p, c in zip(pmf, cdf)]
        out.append(part)
    return out


def _from_pmf(pmf: Sequence[float], batch: int, source: str, buckets: Optional[int] = None) -> LMTokens:
    mean = sum(n * p for n, p in enumerate(pmf))
    if buckets:
        longest = sum(_longest(part, batch) for part in bucket_pmfs(pmf, buckets)) / buckets
        source += f"; batches drawn from {buckets} length buckets"
    else:
        longest = _longest(pmf, batch)
    return LMTokens(mean - 1, longest - 1, source)


def lm_tokens(data: Optional[str], max_tokens: int, batch: int, buckets: Optional[int] = None) -> LMTokens:
    """The batch's tokens: from the encoded corpus at ``data`` when it exists, else assumed; with
    ``buckets``, each batch drawn from one of that many length buckets (``task.length_buckets``)."""
    if data and (Path(data) / "meta.json").is_file():
        import numpy as np

        from ..lm.encode import LMCorpus

        lengths = np.asarray(LMCorpus(data, "train").lengths)
        counts = np.bincount(np.minimum(lengths, max_tokens), minlength=max_tokens + 1)
        return _from_pmf((counts / counts.sum()).tolist(), batch,
                         f"paragraph lengths measured from the encoded corpus {data} ({len(lengths):,} paragraphs)",
                         buckets)
    return _from_pmf(assumed_pmf(max_tokens), batch, ASSUMED_SOURCE, buckets)


def sample_lengths(n: int, max_tokens: int, seed: int = 0) -> list[int]:
    """``n`` paragraph lengths drawn from the assumed distribution (the GPU check's synthetic corpus)."""
    import random

    rng = random.Random(seed)
    m, s = WIKITEXT103_ASSUMED["median"], WIKITEXT103_ASSUMED["sigma"]
    return [max(2, min(max_tokens, round(rng.lognormvariate(math.log(m), s)))) for _ in range(n)]
