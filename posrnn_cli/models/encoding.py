"""The input encoder (000 §3.2): token embedding (V tokens + special ids, N(0, 1) init) and the
positional-encoding forms, each a small module that joins positions to the embedding.

``PE_t = [sin(t·ω), cos(t·ω)] / sqrt(P/2)`` with ``ω_i = 10000^(−2i/P)``, ``i = 0 … P/2−1``,
``t = 0 … T−1`` counted straight through input and output phases; every row has unit norm.
Shapes: B batch, T steps, E embedding dim, P PE dim, D = encoder output width.
"""

from __future__ import annotations

import abc
import math
from typing import Optional

import torch
from torch import Tensor, nn

from ..common.settings.config import ModelConfig
from ..common.errors import PosrnnError


def sinusoidal_pe(T: int, P: int, device=None) -> Tensor:
    """(T, P): ``[sin(t·ω), cos(t·ω)] / sqrt(P/2)`` — unit L2 norm per row."""
    t = torch.arange(T, dtype=torch.float64, device=device)[:, None]  # (T 1)
    i = torch.arange(P // 2, dtype=torch.float64, device=device)  # (P/2)
    omega = 10000.0 ** (-2.0 * i / P)  # (P/2)
    angle = t * omega  # (T P/2)
    pe = torch.cat([angle.sin(), angle.cos()], dim=1) / math.sqrt(P / 2)  # (T P)
    return pe.float()


class PositionalEncoding(nn.Module, abc.ABC):
    """A form that encodes positions as a (T, P) table, joined to the embedding by ``mode``:
    ``concat`` (D = E + P) or ``add`` (needs P = E). Subclasses provide ``table``."""

    has_positions = True

    def __init__(self, m: ModelConfig, max_steps: int, output_start: Optional[int]):
        super().__init__()
        self.mode, self.P, self.max_steps = m.pe_mode, m.P, max_steps

    @classmethod
    def check(cls, m: ModelConfig, output_start: Optional[int] = None) -> None:
        if m.pe_mode == "add" and m.P != m.E:
            raise PosrnnError(f"--pe-mode add needs the PE dimension ({m.P}) to equal the embedding size ({m.E})")

    @classmethod
    def width(cls, m: ModelConfig) -> int:
        return m.E + m.P if m.pe_mode == "concat" else m.E

    @abc.abstractmethod
    def table(self, T: int) -> Tensor:
        """(T, P) table of the encoding; each form defines it."""

    def positions(self, T: int) -> Tensor:
        """(T, P) encoding of positions 0 … T−1."""
        if T > self.max_steps:
            raise PosrnnError(f"sequence of {T} steps is longer than the model's {self.max_steps} encoded positions")
        return self.table(T)

    def forward(self, e: Tensor) -> Tensor:
        B, T = e.shape[:2]
        pe = self.positions(T).to(e.dtype).expand(B, T, self.P)  # (B T P)
        return torch.cat([e, pe], dim=-1) if self.mode == "concat" else e + pe  # (B T D)


class NoPE(nn.Module):
    """The vanilla model: the embedding alone."""

    has_positions = False

    def __init__(self, m: ModelConfig, max_steps: int, output_start: Optional[int]):
        super().__init__()

    @classmethod
    def check(cls, m: ModelConfig, output_start: Optional[int] = None) -> None:
        return None

    @classmethod
    def width(cls, m: ModelConfig) -> int:
        return m.E

    def forward(self, e: Tensor) -> Tensor:
        return e


class SinusoidalPE(PositionalEncoding):
    """Fixed sinusoidal rows, recomputed from the formula (not saved in checkpoints)."""

    def __init__(self, m, max_steps, output_start):
        super().__init__(m, max_steps, output_start)
        self.register_buffer("pe_table", sinusoidal_pe(max_steps, m.P), persistent=False)  # (T P)

    @classmethod
    def check(cls, m, output_start=None):
        if m.P % 2:
            raise PosrnnError(f"the PE dimension must be even (sin and cos halves), got {m.P}; pass an even "
                              f"--embed-size or model.pe_dim")
        super().check(m, output_start)

    def table(self, T):
        return self.pe_table[:T]


class RandomPE(PositionalEncoding):
    """Fixed rows drawn uniformly on the unit sphere (from the global RNG at init), saved."""

    def __init__(self, m, max_steps, output_start):
        super().__init__(m, max_steps, output_start)
        self.register_buffer("pe_table", nn.functional.normalize(torch.randn(max_steps, m.P), dim=1))  # (T P)

    def table(self, T):
        return self.pe_table[:T]


class LearnablePE(PositionalEncoding):
    """A trained position table, N(0, 1) init."""

    def __init__(self, m, max_steps, output_start):
        super().__init__(m, max_steps, output_start)
        self.pe_table = nn.Parameter(torch.randn(max_steps, m.P))  # (T P)

    def table(self, T):
        return self.pe_table[:T]


class PhasePE(PositionalEncoding):
    """A learnable vector per phase (row 0 input, row 1 output), as the paper's autoregressive
    model concatenates; carries no position within a phase."""

    has_positions = False

    def __init__(self, m, max_steps, output_start):
        super().__init__(m, max_steps, output_start)
        self.output_start = output_start
        self.phase_table = nn.Parameter(torch.randn(2, m.P))  # (2 P), N(0, 1) like nn.Embedding

    @classmethod
    def check(cls, m, output_start=None):
        if output_start is None:
            raise PosrnnError("--pe phase needs a fixed output-phase start; this task has none (variable length?)")
        super().check(m, output_start)

    def table(self, T):
        t = torch.arange(T, device=self.phase_table.device)  # (T)
        return self.phase_table[(t >= self.output_start).long()]  # (T P)


class DummyPE(nn.Module):
    """The double-vanilla control: the embedding concatenated with itself, ``[e; e]`` — the
    concat-PE model's width and parameter count (P = E), no position information."""

    has_positions = False

    def __init__(self, m: ModelConfig, max_steps: int, output_start: Optional[int]):
        super().__init__()

    @classmethod
    def check(cls, m: ModelConfig, output_start: Optional[int] = None) -> None:
        if m.pe_mode == "add":
            raise PosrnnError("the dummy (double-vanilla) control concatenates the embedding with itself; use "
                              "--pe-mode concat")
        if m.P != m.E:
            raise PosrnnError(f"the dummy control repeats the embedding (E = {m.E}); it ignores model.pe_dim ({m.P}): "
                              f"drop model.pe_dim")

    @classmethod
    def width(cls, m: ModelConfig) -> int:
        return 2 * m.E

    def forward(self, e: Tensor) -> Tensor:
        return torch.cat([e, e], dim=-1)  # (B T 2E)


class InputEncoder(nn.Module):
    """Token ids (or vectors, for the continuous task) → embedding → PE form → (B, T, D)."""

    def __init__(self, n_ids: int, m: ModelConfig, form: type, max_steps: int,
                 continuous_dim: Optional[int] = None, output_start: Optional[int] = None):
        super().__init__()
        self.E, self.max_steps = m.E, max_steps
        self.continuous = continuous_dim is not None
        if self.continuous:
            self.proj = nn.Linear(continuous_dim, m.E)  # replaces the embedding
            self.query_vector = nn.Parameter(torch.randn(m.E))  # (E) the output query
        else:
            self.embedding = nn.Embedding(n_ids, m.E)  # N(0, 1) init: token norm ≈ √E
        self.pe = form(m, max_steps, output_start)
        self.out_dim = form.width(m)

    def embed(self, inputs: Tensor, query: Optional[Tensor] = None) -> Tensor:
        if not self.continuous:
            return self.embedding(inputs)  # (B T E)
        e = self.proj(inputs)  # (B T E)
        if query is not None:
            e = torch.where(query[..., None], self.query_vector.to(e.dtype), e)
        return e

    def forward(self, inputs: Tensor, query: Optional[Tensor] = None) -> Tensor:
        return self.pe(self.embed(inputs, query))  # (B T D)
