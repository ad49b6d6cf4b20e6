"""Vocabulary extension (000 §4.2): a trained model with every weight frozen, beside new
embedding rows and new output rows for ``X`` new ids.

Ids in the extended model: ``0 … V−1`` the trained vocabulary, ``V … V+X−1`` the new ids,
``V+X`` the output query (which reuses the trained query vector, row ``V`` of the old table).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..common.errors import PosrnnError


class ExtendedEmbedding(nn.Module):
    """A frozen trained table (V tokens + query) beside a new table of X rows."""

    def __init__(self, old: nn.Embedding, V: int, X: int):
        super().__init__()
        self.V, self.X = V, X
        self.old = old
        self.new = nn.Embedding(X, old.embedding_dim)  # N(0, 1) like the trained rows

    def forward(self, ids: Tensor) -> Tensor:
        V, X = self.V, self.X
        is_new = (ids >= V) & (ids < V + X)  # (B T)
        old_ids = torch.where(ids == V + X, V, ids).masked_fill(is_new, 0)  # query → old row V
        e_old = self.old(old_ids)  # (B T E)
        e_new = self.new((ids - V).clamp(0, X - 1))  # (B T E)
        return torch.where(is_new[..., None], e_new, e_old)


class ExtendedHead(nn.Module):
    """Logits over V + X classes: the frozen trained head beside X new output rows."""

    def __init__(self, old: nn.Linear, X: int):
        super().__init__()
        self.old = old
        self.new = nn.Linear(old.in_features, X)

    def forward(self, h: Tensor) -> Tensor:
        return torch.cat([self.old(h), self.new(h)], dim=-1)  # (B K V+X)


def extend_model(model: nn.Module, V: int, X: int) -> list[nn.Parameter]:
    """Freeze every parameter of ``model``, attach the new tables, return the new parameters."""
    if not hasattr(model.encoder, "embedding"):
        raise PosrnnError("this model has no token embedding (continuous task); vocabulary extension needs one")
    for p in model.parameters():
        p.requires_grad_(False)
    model.encoder.embedding = ExtendedEmbedding(model.encoder.embedding, V, X)
    model.head = ExtendedHead(model.head, X)
    return [*model.encoder.embedding.new.parameters(), *model.head.new.parameters()]


class OldIdsView(nn.Module):
    """The trained (unextended) model seen through the extended id layout (query V+X → V)."""

    def __init__(self, model: nn.Module, V: int, X: int):
        super().__init__()
        self.model, self.V, self.X = model, V, X

    def forward(self, inputs, out_index=None, query=None):
        return self.model(torch.where(inputs == self.V + self.X, self.V, inputs), out_index, query)
