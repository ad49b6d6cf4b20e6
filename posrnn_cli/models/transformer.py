"""A causal Transformer core, to check Irie's note (``004_*``) in the same harness.

Shapes: B batch, T time steps, D = in_dim, H hidden size, h heads, d = H/h per head.

``Linear(D, H)`` → ``layers`` **pre-LayerNorm** blocks → a final LayerNorm: (B, T, D) → (B, T, H).
One block (pre-LN, as in GPT-2; the final LayerNorm closes the un-normalised residual stream):

    a = x + W_O · CausalAttn(LN₁(x)),        out = a + MLP(LN₂(a)),   MLP = Linear(H, m·H) → GELU → Linear(m·H, H)

The core adds no position information of its own: a PE, if any, comes from the encoder.

**Why one layer cannot tell the order of the prefix (Irie's note).** At the last position T
the attention output is ``Σ_{s ≤ T} softmax_s(q_T·k_s) v_s``: ``q_T`` depends only on ``x_T``,
and the sum runs over the *set* of pairs ``{(k_s, v_s)}``, each a function of ``x_s`` alone.
Everything else in the block (residual, LayerNorms, MLP) is position-wise. So the output at
T is a weighted set function of the prefix: permuting positions 0 … T−2 cannot change it.
With two layers, the second layer at T attends to first-layer outputs at positions s < T,
and each of those attended over its own prefix 0 … s, of a different size: a permutation
changes those outputs, so the causal mask alone carries order information.

Two more attentions, for the note's other claims (``attention``):

* ``"linear"`` (the ``linear_transformer`` core): attention without the softmax (004 §4), written
  in its fast-weight form (eqs. 7–8), per head with the same d^{−½} query scale:
  ``W_t = W_{t−1} + v_t k_tᵀ, y_t = W_t q_t, W_0 = 0`` — equal to ``tril(Q Kᵀ) V``; the note's
  argument holds as for softmax: at T the output is a sum over the set of prefix pairs.
* ``"noncausal"`` (the ``noncausal_transformer`` core): softmax attention without the mask (004
  Question 1): every position sees every other; each layer is then permutation-equivariant, so
  without a PE the last position's output is invariant to any permutation of the others, at
  any depth. Not a causal core: a run with fed-back targets (``--autoregressive``) is refused.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F


#: the attentions a block may use
ATTENTIONS = ("softmax", "linear", "noncausal")


def fast_weight_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal attention without softmax as a fast weight programmer: W_t = W_{t−1} + v_t k_tᵀ,
    y_t = W_t q_t (q, k, v: (B, h, T, d) → (B, h, T, d))."""
    W = q.new_zeros(*q.shape[:2], v.shape[-1], k.shape[-1])  # (B h d_v d_k)
    out = []
    for t in range(q.shape[2]):
        W = torch.addcmul(W, v[:, :, t, :, None], k[:, :, t, None, :])
        out.append((W * q[:, :, t, None, :]).sum(-1))
    return torch.stack(out, 2)


class CausalSelfAttention(nn.Module):
    """Multi-head attention where position t sees positions ≤ t only (``attention`` "softmax" or
    "linear"), or every position ("noncausal"): (B, T, H) → (B, T, H)."""

    def __init__(self, hidden_size: int, heads: int, dropout: float = 0.0, attention: str = "softmax"):
        super().__init__()
        if attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {ATTENTIONS}, got {attention!r}")
        self.heads, self.dropout, self.attention = heads, dropout, attention
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size)  # W_Q, W_K, W_V stacked
        self.out = nn.Linear(hidden_size, hidden_size)  # W_O

    def forward(self, x: Tensor) -> Tensor:
        B, T, H = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, H // self.heads).permute(2, 0, 3, 1, 4)  # (B h T d) each
        p = self.dropout if self.training else 0.0
        if self.attention == "linear":
            a = fast_weight_attention(q * q.shape[-1] ** -0.5, k, v)  # (B h T d)
        else:
            a = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=self.attention == "softmax")
        return self.out(a.transpose(1, 2).reshape(B, T, H))  # (B T H)


class Block(nn.Module):
    """One pre-LN Transformer block: attention then MLP, each on a LayerNorm'd residual branch."""

    def __init__(self, hidden_size: int, heads: int, ff_mult: int, dropout: float, attention: str = "softmax"):
        super().__init__()
        self.ln_attn = nn.LayerNorm(hidden_size)
        self.attn = CausalSelfAttention(hidden_size, heads, dropout, attention)
        self.ln_mlp = nn.LayerNorm(hidden_size)
        self.mlp = nn.Sequential(
            nn.Linear(hidden_size, ff_mult * hidden_size), nn.GELU(), nn.Linear(ff_mult * hidden_size, hidden_size)
        )
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.drop(self.attn(self.ln_attn(x)))  # (B T H)
        return x + self.drop(self.mlp(self.ln_mlp(x)))  # (B T H)


class CausalTransformerCore(nn.Module):
    """``Linear(in_dim, H)`` → ``layers`` pre-LN causal blocks → LayerNorm: (B, T, in_dim) → (B, T, H)."""

    def __init__(self, in_dim: int, hidden_size: int, layers: int = 1, heads: int = 8, ff_mult: int = 4,
                 dropout: float = 0.0,
                 attention: str = "softmax"):
        super().__init__()
        if layers < 1:
            raise ValueError(f"the transformer needs at least one layer, got layers={layers}")
        if heads < 1 or hidden_size % heads:
            raise ValueError(f"attention heads ({heads}) must divide the hidden size ({hidden_size})")
        if ff_mult < 1:
            raise ValueError(f"ff_mult must be ≥ 1, got {ff_mult}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.in_proj = nn.Linear(in_dim, hidden_size)
        self.blocks = nn.ModuleList(Block(hidden_size, heads, ff_mult, dropout, attention) for _ in range(layers))
        self.norm = nn.LayerNorm(hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        h = self.in_proj(x)  # (B T H)
        for block in self.blocks:
            h = block(h)  # (B T H)
        return self.norm(h)  # (B T H)
