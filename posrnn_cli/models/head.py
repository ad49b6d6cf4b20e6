"""The output head and its cross-entropy over chunks of tokens, for a large vocabulary.

``Linear(H, V)`` followed by cross-entropy over N tokens makes an N × V logit tensor, and its
``log_softmax`` and gradient two more: for the papers' language model (B = 512 paragraphs of up
to 1,024 tokens, V = 32,768; 001 §6.5) that is 68.7 GB in fp32 for the logits alone. Here the
tokens are taken ``chunk`` at a time: each chunk's logits, its log-sum-exp and its NLL are
computed and dropped, and ``torch.utils.checkpoint`` (non-reentrant) recomputes the chunk's
logits in backward, so no tensor larger than ``chunk`` × V exists at any time. The result is
the same sum of the same per-token terms (only the order of the float additions differs), and
its gradients are those of the plain head.

The caller passes only the tokens that count (the language model's real tokens: padding
never enters the head).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

#: tokens per chunk: a 4,096 × 32,768 chunk of fp32 logits is 0.5 GB
HEAD_CHUNK_TOKENS = 4096


def _wide(x: Tensor) -> Tensor:
    """Logits as the plain loss takes them: fp32 (bf16 under ``train.amp`` widened), fp64 kept."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def _chunk_terms(h: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor) -> tuple[Tensor, Tensor]:
    """(summed NLL, argmax (C,)) of one chunk."""
    logits = _wide(F.linear(h, weight, bias))  # (C V)
    return F.cross_entropy(logits, targets, reduction="sum"), logits.detach().argmax(-1)


def chunked_cross_entropy(h: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor,
                          chunk: int = HEAD_CHUNK_TOKENS) -> tuple[Tensor, Tensor]:
    """(summed NLL, argmax predictions (N,)) of the head ``(weight, bias)`` on hidden states
    ``h`` (N, H) with ``targets`` (N,), ``chunk`` tokens at a time, each chunk recomputed in
    backward. The predictions carry no gradient."""
    total = h.new_zeros((), dtype=torch.float32 if h.dtype != torch.float64 else torch.float64)
    preds = []
    for s in range(0, h.shape[0], chunk):
        hs, ts = h[s : s + chunk], targets[s : s + chunk]
        if torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad):
            nll, ok = checkpoint(_chunk_terms, hs, weight, bias, ts, use_reentrant=False)
        else:
            nll, ok = _chunk_terms(hs, weight, bias, ts)
        total = total + nll.to(total.dtype)
        preds.append(ok)
    return total, torch.cat(preds) if preds else targets.new_zeros(0)


@torch.no_grad()
def token_nll(h: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor,
              chunk: int = HEAD_CHUNK_TOKENS) -> Tensor:
    """Per-token NLL (N,) in fp32 of the head on ``h`` (N, H), ``chunk`` tokens at a time."""
    out = [F.cross_entropy(_wide(F.linear(h[s : s + chunk], weight, bias)), targets[s : s + chunk], reduction="none")
           for s in range(0, h.shape[0], chunk)]
    return torch.cat(out) if out else h.new_zeros(0, dtype=torch.float32)


def head_peak_bytes(tokens: int, vocab: int, chunk: int = HEAD_CHUNK_TOKENS, chunked: bool = True) -> int:
    """Bytes the head's largest transient tensors take in a training step (fp32): the logits,
    their ``log_softmax`` and their gradient, for one chunk of tokens or for all of them."""
    n = min(tokens, chunk) if chunked else tokens
    return 3 * 4 * n * vocab
